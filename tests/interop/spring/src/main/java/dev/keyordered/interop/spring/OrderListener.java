package dev.keyordered.interop.spring;

import java.util.ArrayList;
import java.util.List;

import org.apache.pulsar.client.api.SubscriptionType;
import org.springframework.pulsar.annotation.PulsarListener;
import org.springframework.stereotype.Component;

/** Receives orders (JSON schema, resolved from the parameter type). */
@Component
public class OrderListener {

	private final List<Order> received = new ArrayList<>();

	@PulsarListener(id = "orders", topics = "${app.topics.orders}", subscriptionName = "order-fulfilment",
			subscriptionType = SubscriptionType.Shared)
	void onOrder(Order order) {
		synchronized (this.received) {
			this.received.add(order);
		}
	}

	public List<Order> received() {
		synchronized (this.received) {
			return List.copyOf(this.received);
		}
	}

}
