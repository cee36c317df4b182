package dev.keyordered.interop.spring.support;

import java.time.Duration;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;

/** Bounded waits: a condition polled every 20 ms until a deadline. */
public final class Wait {

	private Wait() {
	}

	public static void until(Duration timeout, String what, BooleanSupplier condition) {
		until(timeout, () -> what, condition);
	}

	public static void until(Duration timeout, Supplier<String> what, BooleanSupplier condition) {
		long deadline = System.nanoTime() + timeout.toNanos();
		while (!condition.getAsBoolean()) {
			if (System.nanoTime() > deadline) {
				throw new AssertionError("timed out after " + timeout.toMillis() + " ms waiting for " + what.get());
			}
			try {
				Thread.sleep(20);
			}
			catch (InterruptedException e) {
				Thread.currentThread().interrupt();
				throw new AssertionError("interrupted waiting for " + what.get());
			}
		}
	}

}
