package dev.keyordered.interop.spring;

import java.util.ArrayList;
import java.util.List;

import org.springframework.stereotype.Component;

/** What this instance of the application processed, in processing order. */
@Component
public class ProcessingLog {

	/**
	 * One processed message.
	 * @param nanos {@link System#nanoTime()} when processing started (comparable across
	 * application instances in one JVM)
	 * @param consumer which instance and listener thread processed it
	 * @param key the message key
	 * @param seq the sequence number within the key
	 * @param redeliveryCount the broker's redelivery count of this copy
	 * @param messageId the message id
	 */
	public record Entry(long nanos, String consumer, String key, int seq, int redeliveryCount, String messageId) {
	}

	private final List<Entry> entries = new ArrayList<>();

	public synchronized void record(Entry entry) {
		this.entries.add(entry);
	}

	public synchronized List<Entry> snapshot() {
		return List.copyOf(this.entries);
	}

	public synchronized int size() {
		return this.entries.size();
	}

}
