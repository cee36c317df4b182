package dev.keyordered.interop.spring;

import java.util.concurrent.CompletableFuture;

import org.apache.pulsar.client.api.MessageId;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.pulsar.core.PulsarTemplate;
import org.springframework.stereotype.Service;

/** Publishes keyed events: the payload is {@code key#seq}, the message key is {@code key}. */
@Service
public class KeyedEventPublisher {

	private final PulsarTemplate<String> template;

	private final String topic;

	public KeyedEventPublisher(PulsarTemplate<String> template, @Value("${app.topics.keyed-events}") String topic) {
		this.template = template;
		this.topic = topic;
	}

	public CompletableFuture<MessageId> publish(String key, int seq) {
		return this.template.newMessage(key + "#" + seq)
			.withTopic(this.topic)
			.withMessageCustomizer((message) -> message.key(key))
			.sendAsync();
	}

}
