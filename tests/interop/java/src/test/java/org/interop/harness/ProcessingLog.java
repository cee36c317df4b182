package org.interop.harness;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * What the applications did, in one global order (appends under a lock): each event is
 * (index, kind, consumer, key, seq, message id, redelivery count). Kinds: {@code recv} (the
 * application processes the message), {@code ack}, {@code close}.
 */
public final class ProcessingLog {
    public record Event(int index, String kind, String consumer, String key, int seq, String msgId, int redeliveryCount) {
        @Override
        public String toString() {
            return index + "\t" + kind + "\t" + consumer + "\t" + key + "#" + seq + "\t" + msgId + "\trc=" + redeliveryCount;
        }
    }

    private final List<Event> events = new ArrayList<>();

    public synchronized Event add(String kind, String consumer, String key, int seq, String msgId, int rc) {
        Event e = new Event(events.size(), kind, consumer, key, seq, msgId, rc);
        events.add(e);
        return e;
    }

    public Event recv(String consumer, String key, int seq, String msgId, int rc) {
        return add("recv", consumer, key, seq, msgId, rc);
    }

    public synchronized List<Event> snapshot() {
        return new ArrayList<>(events);
    }

    public synchronized int size() {
        return events.size();
    }

    public synchronized long count(String kind, String consumer) {
        return events.stream().filter(e -> e.kind.equals(kind) && (consumer == null || e.consumer.equals(consumer))).count();
    }

    /** Distinct (key, seq) pairs received so far. */
    public synchronized int distinctReceived() {
        Set<String> s = new HashSet<>();
        for (Event e : events) {
            if (e.kind.equals("recv")) {
                s.add(e.key + "#" + e.seq);
            }
        }
        return s.size();
    }

    public Path write(String name) {
        Path p = Env.logDir().resolve(name + ".processing.log");
        List<String> lines = new ArrayList<>();
        for (Event e : snapshot()) {
            lines.add(e.toString());
        }
        try {
            Files.write(p, lines);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return p;
    }

    /** Result of a per-key order check. */
    public record Order(int firstTime, int reprocessed) {}

    /**
     * Per-key order over the {@code recv} events: the first processing of seq s of key K must come
     * after the first processing of every seq &lt; s of K (in order, none skipped). A second
     * processing of a seq is allowed only from a redelivered copy (redelivery count &gt; 0) or for a
     * pair in {@code mayRepeat} ("K#s"). Every key must reach its expected count.
     */
    public static Order checkKeyOrder(List<Event> events, Map<String, Integer> expectedPerKey, Set<String> mayRepeat) {
        Map<String, Integer> done = new HashMap<>();
        for (String k : expectedPerKey.keySet()) {
            done.put(k, -1);
        }
        int first = 0;
        int again = 0;
        for (Event e : events) {
            if (!e.kind.equals("recv")) {
                continue;
            }
            Check.check(done.containsKey(e.key), "event " + e.index + ": unexpected key " + e.key);
            int d = done.get(e.key);
            if (e.seq == d + 1) {
                done.put(e.key, e.seq);
                first++;
            } else if (e.seq <= d) {
                Check.check(e.redeliveryCount > 0 || mayRepeat.contains(e.key + "#" + e.seq),
                        "event " + e.index + ": " + e.consumer + " re-processed " + e.key + "#" + e.seq + " (" + e.msgId
                                + ") with redelivery count 0 (key " + e.key + " already at #" + d + ")");
                again++;
            } else {
                throw new Check.ScenarioFailure("event " + e.index + ": " + e.consumer + " processed " + e.key + "#" + e.seq
                        + " (" + e.msgId + ") before " + e.key + "#" + (d + 1) + " (per-key order broken)");
            }
        }
        for (Map.Entry<String, Integer> x : expectedPerKey.entrySet()) {
            Check.check(done.get(x.getKey()) == x.getValue() - 1,
                    "key " + x.getKey() + ": processed up to #" + done.get(x.getKey()) + " of " + x.getValue());
        }
        return new Order(first, again);
    }
}
