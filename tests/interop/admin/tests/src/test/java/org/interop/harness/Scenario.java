package org.interop.harness;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * An interop scenario: a JUnit test, at most 60 s, that prints one summary line
 * {@code scenario <name>: <PASS|XFAIL(feature)|FAIL> messages=<n> <seconds>s}. The test method may
 * take a {@link Report} parameter to give its message count and a note.
 */
@Target(ElementType.METHOD)
@Retention(RetentionPolicy.RUNTIME)
@Test
@Tag("interop")
@Timeout(60)
@ExtendWith(ScenarioExtension.class)
public @interface Scenario {
    /** The scenario's name in the summary line. */
    String value();
}
