package dev.keyordered.interop.spring;

import java.time.Duration;
import java.util.List;

import dev.keyordered.interop.spring.support.BrokerBackedTest;
import dev.keyordered.interop.spring.support.BrokerExtension;
import dev.keyordered.interop.spring.support.Scenario;
import dev.keyordered.interop.spring.support.Wait;
import org.junit.jupiter.api.Test;

import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.pulsar.core.PulsarTemplate;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A payment the listener cannot process is retried {@code max-redeliver-count} times and then
 * lands on the DLQ topic, where the auditor listener reads it, within a bounded time; the
 * other payments are processed once.
 */
class DeadLetterTest extends BrokerBackedTest {

	@Autowired
	PulsarTemplate<String> template;

	@Autowired
	PaymentListener payments;

	@Autowired
	DeadLetterAuditor auditor;

	@Value("${app.topics.payments}")
	String paymentsTopic;

	@Value("${app.payments.max-redeliver-count}")
	int maxRedeliverCount;

	@Test
	void rejectedPaymentGoesToTheDeadLetterTopic() throws Exception {
		List<String> good = List.of("pay:1", "pay:2", "pay:3", "pay:4", "pay:5");
		String poison = "reject:6";
		Scenario.messages(good.size() + 1);
		long start = System.nanoTime();
		for (String p : good.subList(0, 2)) {
			this.template.send(this.paymentsTopic, p);
		}
		this.template.send(this.paymentsTopic, poison);
		for (String p : good.subList(2, good.size())) {
			this.template.send(this.paymentsTopic, p);
		}

		Wait.until(Duration.ofSeconds(20), () -> "the rejected payment on the DLQ topic (attempts "
				+ this.payments.attempts() + ", dead letters " + this.auditor.received() + ")",
				() -> !this.auditor.received().isEmpty());
		double dlqSeconds = (this.auditor.received().get(0).receivedNanos() - start) / 1e9;
		Wait.until(Duration.ofSeconds(10), () -> "the good payments processed: " + this.payments.processed(),
				() -> this.payments.processed().size() == good.size());
		Thread.sleep(1000); // a second for a duplicate dead letter or reprocessing to show up

		List<DeadLetterAuditor.DeadLetter> dead = this.auditor.received();
		assertThat(dead).as("dead letters").hasSize(1);
		assertThat(dead.get(0).payload()).isEqualTo(poison);
		assertThat(dead.get(0).properties()).containsEntry("REAL_TOPIC", this.paymentsTopic)
			.containsKey("ORIGIN_MESSAGE_ID");
		assertThat(this.payments.attempts()).containsEntry(poison, this.maxRedeliverCount + 1);
		for (String p : good) {
			assertThat(this.payments.processed()).containsEntry(p, 1);
		}
		// A broker that refuses GET_OR_CREATE_SCHEMA (which the client's dead-letter producer
		// sends) logs each refusal at debug ("unsupported command ... GetOrCreateSchema"); the
		// client then retries in a loop and the dead letter never arrives.
		long refused = BrokerExtension.broker().countLogLines("GetOrCreateSchema");
		System.out.printf("  dead letter: on the DLQ listener %.2f s after the first send, after %d attempts; "
				+ "GET_OR_CREATE_SCHEMA refusals in the broker log: %d%n", dlqSeconds,
				this.payments.attempts().get(poison), refused);
		assertThat(refused).as("GET_OR_CREATE_SCHEMA refusals in the broker log (a dead-letter producer loop)")
			.isLessThanOrEqualTo(3);
	}

}
