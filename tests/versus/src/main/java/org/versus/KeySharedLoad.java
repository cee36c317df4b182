package org.versus;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageListener;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;

/**
 * The Key_Shared load row: 4 Key_Shared consumers (listeners that ack at once) and one unbatched
 * producer offering {@code RATE} messages a second for {@code SECONDS}, over {@code KEYS} keys in
 * turn, 100-byte messages that carry their send time ({@code System.nanoTime}: producer and
 * consumers share this JVM, so one clock). Prints one {@code result} line: sent, received,
 * end-to-end p50/p99 (send to the listener), and per-key order breaks (a key's messages received
 * out of the order they were sent: none is allowed on Key_Shared).
 */
final class KeySharedLoad {
    static final int RATE = 20_000;
    static final int SECONDS = 12;
    static final int KEYS = 1_000;
    static final int CONSUMERS = 4;
    static final int SIZE = 100;

    private KeySharedLoad() {}

    /** What the listeners saw, shared by the 4 of them. */
    static final class Seen {
        final long[] lastSeq = new long[KEYS];
        final long[] latencyNanos = new long[RATE * SECONDS + RATE];
        final AtomicLong received = new AtomicLong();
        long orderBreaks;

        Seen() {
            Arrays.fill(lastSeq, -1);
        }

        synchronized void record(ByteBuffer b, long now) {
            long sentAt = b.getLong(0);
            int key = b.getInt(8);
            long seq = b.getLong(12);
            long n = received.getAndIncrement();
            if (n < latencyNanos.length) {
                latencyNanos[(int) n] = now - sentAt;
            }
            if (seq <= lastSeq[key]) {
                orderBreaks++;
            }
            lastSeq[key] = Math.max(lastSeq[key], seq);
        }
    }

    static void run(Versus v) throws Exception {
        String topic = "persistent://public/default/" + Versus.fresh("versus-keyshared-load");
        Seen seen = new Seen();
        MessageListener<byte[]> listener = (c, m) -> {
            seen.record(ByteBuffer.wrap(m.getValue()), System.nanoTime());
            c.acknowledgeAsync(m);
        };
        try (PulsarClient cl = v.client()) {
            List<Consumer<byte[]>> consumers = new ArrayList<>();
            for (int i = 0; i < CONSUMERS; i++) {
                consumers.add(cl.newConsumer().topic(topic).subscriptionName("ks")
                        .subscriptionType(SubscriptionType.Key_Shared).consumerName("c" + i)
                        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                        .messageListener(listener).subscribe());
            }
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false)
                    .blockIfQueueFull(true).maxPendingMessages(50_000).create();
            long[] seqs = new long[KEYS];
            long total = (long) RATE * SECONDS;
            long t0 = System.nanoTime();
            for (long i = 0; i < total; i++) {
                // Paced by sleeping, not spinning: a spin loop would take a whole core of the two
                // from the consumers and the broker. Messages due by now go out together.
                long due = t0 + i * 1_000_000_000L / RATE;
                long ahead = due - System.nanoTime();
                if (ahead > 0) {
                    LockSupport.parkNanos(ahead);
                }
                int key = (int) (i % KEYS);
                ByteBuffer b = ByteBuffer.allocate(SIZE);
                b.putLong(0, System.nanoTime()).putInt(8, key).putLong(12, seqs[key]++);
                p.newMessage().key("k" + key).value(b.array()).sendAsync();
            }
            p.flush();
            long sendSecs = System.nanoTime() - t0;
            long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (seen.received.get() < total && System.nanoTime() < end) {
                Versus.sleep(50);
            }
            long got = seen.received.get();
            long[] lat;
            long breaks;
            synchronized (seen) {
                lat = Arrays.copyOf(seen.latencyNanos, (int) Math.min(got, seen.latencyNanos.length));
                breaks = seen.orderBreaks;
            }
            Arrays.sort(lat);
            double p50 = lat.length == 0 ? Double.NaN : lat[lat.length / 2] / 1e6;
            double p99 = lat.length == 0 ? Double.NaN : lat[(int) Math.min(lat.length - 1, lat.length * 99L / 100)] / 1e6;
            System.out.println(String.format(Locale.ROOT, "result {\"incident\":\"keyshared-load\",\"variant\":\"%d keys\","
                    + "\"violations\":%d,\"sent\":%d,\"received\":%d,\"offered_msg_per_s\":%d,\"send_s\":%.2f,"
                    + "\"e2e_p50_ms\":%.2f,\"e2e_p99_ms\":%.2f,\"detail\":\"%d of %d received, end to end p50 %.2f ms, p99 %.2f ms, %d per-key order breaks\"}",
                    KEYS, breaks, total, got, RATE, sendSecs / 1e9, p50, p99, got, total, p50, p99, breaks));
            p.close();
            for (Consumer<byte[]> c : consumers) {
                c.close();
            }
        }
    }
}
