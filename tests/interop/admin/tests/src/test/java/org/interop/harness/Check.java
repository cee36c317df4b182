package org.interop.harness;

import java.util.function.BooleanSupplier;

/** Checks and bounded waits. Every wait here ends within its time bound. */
public final class Check {
    private Check() {}

    /** A failed check: the message says what was expected and what happened. */
    public static final class ScenarioFailure extends AssertionError {
        public ScenarioFailure(String message) {
            super(message);
        }
    }

    public static void check(boolean cond, String message) {
        if (!cond) {
            throw new ScenarioFailure(message);
        }
    }

    /** Polls {@code pred} every 20 ms until it holds or {@code seconds} passed (then fails naming {@code what}). */
    public static void waitUntil(BooleanSupplier pred, double seconds, String what) {
        Deadline d = new Deadline(seconds);
        while (!d.expired()) {
            if (pred.getAsBoolean()) {
                return;
            }
            sleepMs(20);
        }
        check(pred.getAsBoolean(), String.format("timed out after %.1f s waiting for %s", seconds, what));
    }

    public static void sleepMs(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new ScenarioFailure("interrupted (scenario timeout?)");
        }
    }

    /** A point in monotonic time. */
    public static final class Deadline {
        private final long end;

        public Deadline(double seconds) {
            this.end = System.nanoTime() + (long) (seconds * 1e9);
        }

        public long leftMs() {
            return Math.max(0, (end - System.nanoTime()) / 1_000_000);
        }

        /** Milliseconds left, at most {@code capMs}, at least 1. */
        public int leftMs(int capMs) {
            return (int) Math.max(1, Math.min(capMs, leftMs()));
        }

        public boolean expired() {
            return System.nanoTime() >= end;
        }
    }
}
