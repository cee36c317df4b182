package dev.keyordered.interop.spring;

import org.apache.pulsar.client.api.DeadLetterPolicy;
import org.apache.pulsar.client.api.RedeliveryBackoff;
import org.apache.pulsar.client.impl.MultiplierRedeliveryBackoff;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;

/** Redelivery and dead-letter settings of the payment processor. */
@Configuration(proxyBeanMethods = false)
class PaymentsConfig {

	/** A payment that fails {@code max-redeliver-count + 1} times goes to the DLQ topic. */
	@Bean
	DeadLetterPolicy paymentsDeadLetterPolicy(@Value("${app.payments.max-redeliver-count}") int maxRedeliverCount,
			@Value("${app.topics.payments-dlq}") String deadLetterTopic) {
		return DeadLetterPolicy.builder()
			.maxRedeliverCount(maxRedeliverCount)
			.deadLetterTopic(deadLetterTopic)
			.build();
	}

	/** A failed payment is retried after 100 ms, 200 ms, 400 ms, ... (at most 2 s). */
	@Bean
	RedeliveryBackoff paymentsRedeliveryBackoff() {
		return MultiplierRedeliveryBackoff.builder().minDelayMs(100).maxDelayMs(2000).multiplier(2).build();
	}

}
