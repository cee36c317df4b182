package dev.keyordered.interop.spring;

import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBooleanProperty;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.pulsar.core.PulsarTopic;
import org.springframework.pulsar.core.PulsarTopicBuilder;

/**
 * Declares the application's topics as beans ({@code app.topics.declare=true}): at startup
 * Spring's {@code PulsarAdministration} lists the namespace's topics through the admin API
 * and creates the missing ones.
 */
@Configuration(proxyBeanMethods = false)
@ConditionalOnBooleanProperty("app.topics.declare")
class TopicDeclarations {

	/** Partitioned when {@code app.topics.keyed-events-partitions} is above 0. */
	@Bean
	PulsarTopic keyedEventsTopic(PulsarTopicBuilder topics, @Value("${app.topics.keyed-events}") String name,
			@Value("${app.topics.keyed-events-partitions:0}") int partitions) {
		return topics.name(name).numberOfPartitions(partitions).build();
	}

	@Bean
	PulsarTopic ordersTopic(PulsarTopicBuilder topics, @Value("${app.topics.orders}") String name) {
		return topics.name(name).build();
	}

	@Bean
	PulsarTopic paymentsTopic(PulsarTopicBuilder topics, @Value("${app.topics.payments}") String name) {
		return topics.name(name).build();
	}

	@Bean
	PulsarTopic paymentsDeadLetterTopic(PulsarTopicBuilder topics, @Value("${app.topics.payments-dlq}") String name) {
		return topics.name(name).build();
	}

}
