package dev.keyordered.interop.spring.support;

import java.util.UUID;

import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * Base of the application tests: a broker of its own per test class (BrokerExtension is
 * registered before the SpringExtension that {@code @SpringBootTest} brings, so the broker
 * starts before the context and stops after it), the application's Pulsar URLs taken from the
 * broker's URL lines, unique topic names per class, and the context closed after the class.
 */
@ExtendWith({ BrokerExtension.class, Scenario.class })
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.NONE)
@DirtiesContext(classMode = DirtiesContext.ClassMode.AFTER_CLASS)
public abstract class BrokerBackedTest {

	/** The properties that a second instance of the application needs to join the first. */
	public static final String[] SHARED_PROPERTIES = { "spring.pulsar.client.service-url",
			"spring.pulsar.admin.service-url", "app.topics.keyed-events", "app.topics.orders", "app.topics.payments",
			"app.topics.payments-dlq" };

	@DynamicPropertySource
	static void brokerProperties(DynamicPropertyRegistry registry) {
		Broker broker = BrokerExtension.broker();
		registry.add("spring.pulsar.client.service-url", broker::serviceUrl);
		registry.add("spring.pulsar.admin.service-url", broker::adminUrl);
		String suffix = UUID.randomUUID().toString().substring(0, 8);
		for (String topic : new String[] { "keyed-events", "orders", "payments", "payments-dlq" }) {
			registry.add("app.topics." + topic, () -> "persistent://public/default/" + topic + "-" + suffix);
		}
	}

}
