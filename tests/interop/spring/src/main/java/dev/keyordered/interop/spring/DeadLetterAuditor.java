package dev.keyordered.interop.spring;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.SubscriptionType;
import org.springframework.pulsar.annotation.PulsarListener;
import org.springframework.stereotype.Component;

/** Reads the payments DLQ topic (for an operator to look at). */
@Component
public class DeadLetterAuditor {

	/**
	 * A dead letter as received.
	 * @param payload the payment
	 * @param properties the message properties (the client adds REAL_TOPIC and
	 * ORIGIN_MESSAGE_ID)
	 * @param receivedNanos {@link System#nanoTime()} at receipt
	 */
	public record DeadLetter(String payload, Map<String, String> properties, long receivedNanos) {
	}

	private final List<DeadLetter> received = new ArrayList<>();

	@PulsarListener(id = "payments-dlq", topics = "${app.topics.payments-dlq}",
			subscriptionName = "payments-dlq-auditor", subscriptionType = SubscriptionType.Shared)
	void onDeadLetter(Message<String> message) {
		synchronized (this.received) {
			this.received.add(new DeadLetter(message.getValue(), Map.copyOf(message.getProperties()), System.nanoTime()));
		}
	}

	public List<DeadLetter> received() {
		synchronized (this.received) {
			return List.copyOf(this.received);
		}
	}

}
