package dev.keyordered.interop.spring;

import org.apache.pulsar.client.api.MessageId;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.pulsar.core.PulsarTemplate;
import org.springframework.stereotype.Service;

/** Places orders on the orders topic. */
@Service
public class OrderService {

	private final PulsarTemplate<Order> template;

	private final String topic;

	public OrderService(PulsarTemplate<Order> template, @Value("${app.topics.orders}") String topic) {
		this.template = template;
		this.topic = topic;
	}

	public MessageId place(Order order) {
		// the schema (JSON, from @PulsarMessage on Order) comes from Spring's schema resolver
		return this.template.send(this.topic, order);
	}

}
