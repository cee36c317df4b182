package dev.keyordered.interop.spring;

import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.SubscriptionType;
import org.springframework.pulsar.annotation.PulsarListener;
import org.springframework.stereotype.Component;

/**
 * Processes payments. A payment it cannot process ({@code reject:...}) makes the listener
 * throw; Spring then nacks the message, the client redelivers it with backoff, and after
 * {@code app.payments.max-redeliver-count} redeliveries the client moves it to the DLQ topic.
 */
@Component
public class PaymentListener {

	private final Map<String, Integer> attempts = new LinkedHashMap<>();

	private final Map<String, Integer> processed = new LinkedHashMap<>();

	@PulsarListener(id = "payments", topics = "${app.topics.payments}", subscriptionName = "payment-processor",
			subscriptionType = SubscriptionType.Shared, deadLetterPolicy = "paymentsDeadLetterPolicy",
			negativeAckRedeliveryBackoff = "paymentsRedeliveryBackoff")
	void onPayment(Message<String> message) {
		String payment = message.getValue();
		synchronized (this) {
			this.attempts.merge(payment, 1, Integer::sum);
		}
		if (payment.startsWith("reject:")) {
			throw new IllegalArgumentException("cannot process payment " + payment + " (attempt "
					+ (message.getRedeliveryCount() + 1) + ")");
		}
		synchronized (this) {
			this.processed.merge(payment, 1, Integer::sum);
		}
	}

	public synchronized Map<String, Integer> attempts() {
		return Map.copyOf(this.attempts);
	}

	public synchronized Map<String, Integer> processed() {
		return Map.copyOf(this.processed);
	}

}
