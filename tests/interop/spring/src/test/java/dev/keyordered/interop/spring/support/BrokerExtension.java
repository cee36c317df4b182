package dev.keyordered.interop.spring.support;

import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * Starts one broker per test class before anything else (in particular before the Spring
 * context, whose {@code @DynamicPropertySource} reads the broker's URLs) and stops it after
 * everything else (it is registered before the SpringExtension, so its afterAll runs after
 * the context was closed).
 */
public final class BrokerExtension implements BeforeAllCallback, AfterAllCallback {

	private static volatile Broker current;

	public static Broker broker() {
		Broker b = current;
		if (b == null) {
			throw new IllegalStateException("no broker: the test class is not extended with BrokerExtension");
		}
		return b;
	}

	@Override
	public void beforeAll(ExtensionContext context) {
		current = Broker.start(context.getRequiredTestClass().getSimpleName());
	}

	@Override
	public void afterAll(ExtensionContext context) {
		Broker b = current;
		current = null;
		if (b != null) {
			b.close();
		}
	}

}
