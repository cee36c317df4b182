package dev.keyordered.interop.spring;

import java.util.concurrent.locks.LockSupport;

import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.SubscriptionType;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.pulsar.annotation.PulsarListener;
import org.springframework.stereotype.Component;

/**
 * Processes keyed events on a Key_Shared subscription: events of one key must be processed
 * in order, events of different keys in parallel (two consumers per instance, more
 * instances scale out).
 */
@Component
public class KeyedEventListener {

	private final ProcessingLog log;

	private final String instance;

	private final long workNanos;

	public KeyedEventListener(ProcessingLog log, @Value("${app.instance:primary}") String instance,
			@Value("${app.keyed-events.work-millis:2}") long workMillis) {
		this.log = log;
		this.instance = instance;
		this.workNanos = workMillis * 1_000_000L;
	}

	@PulsarListener(id = "keyed-events", topics = "${app.topics.keyed-events}",
			subscriptionName = "keyed-events-processor", subscriptionType = SubscriptionType.Key_Shared,
			concurrency = "2", properties = { "receiverQueueSize=10" })
	void onEvent(Message<String> message) {
		String[] parts = message.getValue().split("#", 2);
		this.log.record(new ProcessingLog.Entry(System.nanoTime(),
				this.instance + "/" + Thread.currentThread().getName(), parts[0], Integer.parseInt(parts[1]),
				message.getRedeliveryCount(), message.getMessageId().toString()));
		LockSupport.parkNanos(this.workNanos); // the application's work
	}

}
