package dev.keyordered.interop.spring;

import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;

/**
 * A small Spring for Apache Pulsar application: a Key_Shared event processor
 * ({@link KeyedEventListener}), a JSON-schema order flow ({@link OrderService},
 * {@link OrderListener}) and a payment processor with a dead-letter topic
 * ({@link PaymentListener}, {@link DeadLetterAuditor}).
 */
@SpringBootApplication
public class InteropApplication {

	public static void main(String[] args) {
		SpringApplication.run(InteropApplication.class, args);
	}

}
