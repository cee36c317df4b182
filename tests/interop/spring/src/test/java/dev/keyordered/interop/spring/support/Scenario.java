package dev.keyordered.interop.spring.support;

import java.util.Locale;
import java.util.Optional;

import org.junit.jupiter.api.extension.AfterTestExecutionCallback;
import org.junit.jupiter.api.extension.BeforeTestExecutionCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.TestExecutionExceptionHandler;
import org.opentest4j.AssertionFailedError;

/**
 * Prints one line per test, {@code scenario <name>: <PASS|XFAIL(feature)|FAIL> messages=<n>
 * <seconds>s}, and enforces {@link ExpectedFailure}.
 */
public final class Scenario implements BeforeTestExecutionCallback, AfterTestExecutionCallback,
		TestExecutionExceptionHandler {

	private static final ExtensionContext.Namespace NS = ExtensionContext.Namespace.create(Scenario.class);

	private static volatile int messages;

	/** The number of messages the running scenario sent (for its summary line). */
	public static void messages(int n) {
		messages = n;
	}

	@Override
	public void beforeTestExecution(ExtensionContext context) {
		messages = 0;
		context.getStore(NS).put("start", System.nanoTime());
	}

	@Override
	public void handleTestExecutionException(ExtensionContext context, Throwable throwable) throws Throwable {
		ExpectedFailure xf = context.getRequiredTestMethod().getAnnotation(ExpectedFailure.class);
		if (xf != null && matches(throwable, xf.error())) {
			context.getStore(NS).put("xfail", summary(throwable));
			return;
		}
		throw throwable;
	}

	@Override
	public void afterTestExecution(ExtensionContext context) {
		long start = context.getStore(NS).get("start", Long.class);
		double secs = (System.nanoTime() - start) / 1e9;
		String name = context.getRequiredTestClass().getSimpleName() + "." + context.getRequiredTestMethod().getName();
		ExpectedFailure xf = context.getRequiredTestMethod().getAnnotation(ExpectedFailure.class);
		String xfail = context.getStore(NS).get("xfail", String.class);
		Optional<Throwable> failed = context.getExecutionException();
		String result;
		if (failed.isPresent()) {
			result = "FAIL";
		}
		else if (xf != null && xfail != null) {
			result = "XFAIL(" + xf.feature() + ")";
		}
		else if (xf != null) {
			result = "FAIL";
		}
		else {
			result = "PASS";
		}
		System.out.printf(Locale.ROOT, "scenario %s: %s messages=%d %.1fs%n", name, result, messages, secs);
		if (xfail != null) {
			System.out.println("  expected failure: " + xfail);
		}
		if (xf != null && xfail == null && failed.isEmpty()) {
			throw new AssertionFailedError("scenario " + name + " passed but is marked @ExpectedFailure(feature=\""
					+ xf.feature() + "\"): the broker has the feature now; remove the marker");
		}
	}

	private static boolean matches(Throwable t, String text) {
		for (Throwable c = t; c != null; c = (c.getCause() == c ? null : c.getCause())) {
			if (String.valueOf(c.getMessage()).contains(text)) {
				return true;
			}
		}
		return false;
	}

	private static String summary(Throwable t) {
		StringBuilder sb = new StringBuilder();
		for (Throwable c = t; c != null; c = (c.getCause() == c ? null : c.getCause())) {
			if (sb.length() > 0) {
				sb.append(" <- ");
			}
			sb.append(c.getClass().getName()).append(": ").append(c.getMessage());
		}
		return sb.toString();
	}

}
