package dev.keyordered.interop.spring.support;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * A strict expected failure: the test must fail with a throwable whose message (or a cause's
 * message) contains {@link #error()}; it is then reported as {@code XFAIL(feature)}. If it
 * passes, or fails differently, the test fails.
 */
@Target(ElementType.METHOD)
@Retention(RetentionPolicy.RUNTIME)
public @interface ExpectedFailure {

	/** The broker feature that is missing. */
	String feature();

	/** Text that the failure's message (or a cause's) must contain. */
	String error();

}
