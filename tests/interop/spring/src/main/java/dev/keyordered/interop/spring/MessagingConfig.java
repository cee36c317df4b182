package dev.keyordered.interop.spring;

import org.apache.pulsar.client.api.BatcherBuilder;
import org.apache.pulsar.client.api.ProducerBuilder;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.pulsar.core.ProducerBuilderCustomizer;

/** Settings that apply to every producer of the application. */
@Configuration(proxyBeanMethods = false)
class MessagingConfig {

	/**
	 * Key_Shared consumers read the keyed-events topic, so producers batch by key: a batch
	 * then holds messages of one key only and is dispatched to that key's consumer.
	 */
	@Bean
	ProducerBuilderCustomizer<Object> keyBasedBatching() {
		return new KeyBasedBatching();
	}

	static final class KeyBasedBatching implements ProducerBuilderCustomizer<Object> {

		@Override
		public void customize(ProducerBuilder<Object> builder) {
			builder.batcherBuilder(BatcherBuilder.KEY_BASED);
		}

	}

}
