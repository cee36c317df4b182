package dev.keyordered.interop.spring.support;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import dev.keyordered.interop.spring.ProcessingLog.Entry;

/**
 * Per-key order over a merged processing log (sorted by processing time): the first
 * processing of seq s of key K comes after the first processing of every seq &lt; s of K; a
 * seq is processed again only from a redelivered copy (redelivery count &gt; 0) or when it is
 * in {@code mayRepeat}.
 */
public final class KeyOrder {

	private KeyOrder() {
	}

	/** Counts of a checked log. */
	public record Result(int firstTime, int reprocessed) {
	}

	public static Result check(List<Entry> events, Map<String, Integer> expectedPerKey, Set<String> mayRepeat) {
		Map<String, Integer> done = new HashMap<>();
		expectedPerKey.keySet().forEach((k) -> done.put(k, -1));
		int first = 0;
		int again = 0;
		for (int i = 0; i < events.size(); i++) {
			Entry e = events.get(i);
			Integer at = done.get(e.key());
			if (at == null) {
				throw new AssertionError("event " + i + ": unexpected key " + e.key());
			}
			if (e.seq() == at + 1) {
				done.put(e.key(), e.seq());
				first++;
			}
			else if (e.seq() <= at) {
				if (e.redeliveryCount() == 0 && !mayRepeat.contains(e.key() + "#" + e.seq())) {
					throw new AssertionError("event " + i + ": " + e.consumer() + " re-processed " + e.key() + "#"
							+ e.seq() + " (" + e.messageId() + ") with redelivery count 0 (key already at #" + at + ")");
				}
				again++;
			}
			else {
				throw new AssertionError("event " + i + ": " + e.consumer() + " processed " + e.key() + "#" + e.seq()
						+ " (" + e.messageId() + ") before " + e.key() + "#" + (at + 1) + " (per-key order broken)");
			}
		}
		for (var kv : expectedPerKey.entrySet()) {
			int at = done.get(kv.getKey());
			if (at != kv.getValue() - 1) {
				throw new AssertionError("key " + kv.getKey() + ": processed up to #" + at + " of " + kv.getValue());
			}
		}
		return new Result(first, again);
	}

}
