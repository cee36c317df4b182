package org.interop.harness;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * A strict expected failure: the scenario is written for a feature the broker does not have yet
 * (or shows a known broker bug). It must fail, and its failure (the exception chain's class names
 * and messages) must match {@link #matches()}. Then the summary says {@code XFAIL(feature)} and the
 * test passes. If the scenario passes, the test FAILS with a message saying to remove this marker;
 * if it fails differently, the test fails with that failure.
 */
@Target(ElementType.METHOD)
@Retention(RetentionPolicy.RUNTIME)
public @interface ExpectedFailure {
    /** The missing feature (or broker bug), e.g. "schema registry". */
    String feature();

    /** A regex that must be found in the failure chain (class names and messages). */
    String matches() default "";
}
