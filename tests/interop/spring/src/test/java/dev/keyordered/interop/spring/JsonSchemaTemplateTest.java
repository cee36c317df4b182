package dev.keyordered.interop.spring;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import dev.keyordered.interop.spring.support.BrokerBackedTest;
import dev.keyordered.interop.spring.support.Scenario;
import dev.keyordered.interop.spring.support.Wait;
import org.junit.jupiter.api.Test;

import org.springframework.beans.factory.annotation.Autowired;

import static org.assertj.core.api.Assertions.assertThat;

/** Orders sent by PulsarTemplate with the JSON schema arrive whole at the order listener. */
class JsonSchemaTemplateTest extends BrokerBackedTest {

	private static final int N = 20;

	@Autowired
	OrderService orders;

	@Autowired
	OrderListener listener;

	@Test
	void jsonSchemaOrdersRoundTrip() {
		Scenario.messages(N);
		List<Order> sent = new ArrayList<>();
		for (int i = 0; i < N; i++) {
			Order order = new Order("order-" + i, "customer-" + (i % 3), i + 1, 9.99 * (i + 1),
					List.of("item-" + i, "gift-wrap \"é\""));
			this.orders.place(order);
			sent.add(order);
		}
		Wait.until(Duration.ofSeconds(15), () -> "all " + N + " orders received (" + this.listener.received().size() + ")",
				() -> this.listener.received().size() >= N);
		assertThat(this.listener.received()).containsExactlyInAnyOrderElementsOf(sent);
	}

}
