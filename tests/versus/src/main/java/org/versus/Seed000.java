package org.versus;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.common.policies.data.BacklogQuota;

/**
 * Seed 000 (Key_Shared): the mark-delete position moves without acks while a key is draining.
 *
 * <p>Per variant, in a namespace of its own: c1 (Key_Shared, receiver queue 20) alone; 40
 * messages, batching off: a0..a9 once, b0..b9 three times each; c1's application holds all 40.
 * c2 joins, so keys move to it while c1 still holds their earlier messages. Then the mark-delete
 * moves without an ack: {@code skip} (10 messages), {@code expire} (expire-messages older than 1 s),
 * {@code clear} (clear-backlog), {@code ttl} (a namespace message TTL of 1 s, applied by the
 * broker's periodic check) or {@code quota} (a 1-byte namespace backlog quota with
 * consumer_backlog_eviction, applied by the broker's periodic check; both policies are removed
 * once the mark-delete moved, so they cannot drop what follows). One more message per key;
 * c1 holds 1.5 s more, then acks what it holds, in order; both process and ack as they go until
 * all 60 are processed.
 *
 * <p>A violation is a key that c2 processed while c1 still held an earlier message of it.
 */
final class Seed000 {
    static final List<String> VARIANTS = List.of("skip", "expire", "clear", "ttl", "quota");
    static final int FIRST = 40;
    static final int TOTAL = 60;

    private Seed000() {}

    record Event(String kind, String consumer, String key, int seq) {}

    /** The merged processing log of both consumers, in the order the application saw it. */
    static final class Log {
        final List<Event> events = new ArrayList<>();
        final Set<String> processed = new HashSet<>();

        synchronized void add(String kind, String consumer, Message<byte[]> m) {
            String[] ks = new String(m.getValue()).split("#");
            events.add(new Event(kind, consumer, ks[0], Integer.parseInt(ks[1])));
            if (kind.equals("recv")) {
                processed.add(ks[0] + "#" + ks[1]);
            }
        }

        synchronized int processed() {
            return processed.size();
        }

        synchronized int received(String consumer) {
            return (int) events.stream().filter(e -> e.kind.equals("recv") && e.consumer.equals(consumer)).count();
        }
    }

    static void run(Versus v, String variants) throws Exception {
        for (String variant : variants.split(",")) {
            if (!VARIANTS.contains(variant)) {
                throw new IllegalArgumentException("unknown seed000 variant " + variant + " (have " + VARIANTS + ")");
            }
            try {
                oneVariant(v, variant);
            } catch (Exception e) {
                // A refusal is a finding too: say what the broker answered.
                Versus.result("seed000", variant, -1, "failed: " + e.toString().lines().findFirst().orElse(""));
            }
        }
    }

    static void oneVariant(Versus v, String variant) throws Exception {
        String ns = "public/" + Versus.fresh("versus-" + variant);
        String topic = "persistent://" + ns + "/keys";
        Log log = new Log();
        AtomicBoolean release = new AtomicBoolean();
        AtomicBoolean stop = new AtomicBoolean();
        try (PulsarAdmin admin = v.admin(); PulsarClient cl = v.client()) {
            admin.namespaces().createNamespace(ns);
            Thread c1 = consumer(cl, topic, "c1", log, release, stop);
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false).create();
            for (String k : keys("a")) {
                send(p, k, 0);
            }
            for (int round = 0; round < 3; round++) {
                for (String k : keys("b")) {
                    send(p, k, round);
                }
            }
            waitFor(() -> log.received("c1") >= FIRST, 15_000);
            Thread c2 = consumer(cl, topic, "c2", log, release, stop);
            Versus.sleep(1500);
            String before = markDelete(admin, topic);
            long t0 = System.nanoTime();
            moveMarkDelete(admin, ns, topic, variant);
            boolean moved = waitFor(() -> !markDelete(admin, topic).equals(before), 120_000);
            String after = markDelete(admin, topic);
            long moveNanos = System.nanoTime() - t0;
            // The policy has done its part; lifted, it cannot also drop the messages that follow.
            if (variant.equals("ttl")) {
                admin.namespaces().removeNamespaceMessageTTL(ns);
            } else if (variant.equals("quota")) {
                admin.namespaces().removeBacklogQuota(ns);
            }
            for (String k : keys("a")) {
                send(p, k, 1);
            }
            for (String k : keys("b")) {
                send(p, k, 3);
            }
            Versus.sleep(1500);
            release.set(true);
            waitFor(() -> log.processed() >= TOTAL, 20_000);
            stop.set(true);
            c1.join(5000);
            c2.join(5000);
            p.close();
            Set<String> bad = violations(log.events);
            Versus.result("seed000", variant, bad.size(), "mark-delete " + before + " -> " + after
                    + (moved ? " in " + Versus.secs(moveNanos) : " (did not move in 120 s)") + "; c1 received "
                    + log.received("c1") + ", c2 " + log.received("c2") + "; " + log.processed() + " of " + TOTAL
                    + " processed; keys c2 started while c1 held an earlier message: " + new TreeSet<>(bad));
        }
    }

    static List<String> keys(String prefix) {
        List<String> l = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            l.add(prefix + i);
        }
        return l;
    }

    static void send(Producer<byte[]> p, String key, int seq) throws Exception {
        p.newMessage().key(key).value((key + "#" + seq).getBytes()).send();
    }

    static void moveMarkDelete(PulsarAdmin admin, String ns, String topic, String variant) throws Exception {
        switch (variant) {
            case "skip" -> admin.topics().skipMessages(topic, "ks", 10);
            // Pulsar answers 409 to a 0 s expiry (no message is "older than 0 s" by its check); the
            // last message was published more than 1.5 s ago (see oneVariant).
            case "expire" -> admin.topics().expireMessages(topic, "ks", 1);
            case "clear" -> admin.topics().skipAllMessages(topic, "ks");
            case "ttl" -> admin.namespaces().setNamespaceMessageTTL(ns, 1);
            case "quota" -> admin.namespaces().setBacklogQuota(ns, BacklogQuota.builder().limitSize(1)
                    .retentionPolicy(BacklogQuota.RetentionPolicy.consumer_backlog_eviction).build());
            default -> throw new IllegalArgumentException(variant);
        }
    }

    static String markDelete(PulsarAdmin admin, String topic) {
        try {
            return admin.topics().getInternalStats(topic).cursors.get("ks").markDeletePosition;
        } catch (Exception e) {
            return "?";
        }
    }

    interface Cond {
        boolean holds() throws Exception;
    }

    static boolean waitFor(Cond c, long ms) throws Exception {
        long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
        while (System.nanoTime() < end) {
            if (c.holds()) {
                return true;
            }
            Versus.sleep(100);
        }
        return c.holds();
    }

    /**
     * A consumer thread: c1 holds what it receives until {@code release}, then acks it in order
     * and acks as it goes; c2 acks as it goes.
     */
    static Thread consumer(PulsarClient cl, String topic, String name, Log log, AtomicBoolean release,
            AtomicBoolean stop) throws Exception {
        CountDownLatch subscribed = new CountDownLatch(1);
        Consumer<byte[]> c = cl.newConsumer().topic(topic).subscriptionName("ks")
                .subscriptionType(SubscriptionType.Key_Shared).consumerName(name).receiverQueueSize(20)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
        Thread t = new Thread(() -> {
            List<Message<byte[]>> holding = new ArrayList<>();
            subscribed.countDown();
            try {
                while (!stop.get()) {
                    if (release.get() && !holding.isEmpty()) {
                        for (Message<byte[]> m : holding) {
                            log.add("ack", name, m);
                            c.acknowledge(m);
                        }
                        holding.clear();
                    }
                    Message<byte[]> m = c.receive(50, TimeUnit.MILLISECONDS);
                    if (m == null) {
                        continue;
                    }
                    log.add("recv", name, m);
                    if (name.equals("c1") && !release.get()) {
                        holding.add(m);
                        continue;
                    }
                    log.add("ack", name, m);
                    c.acknowledge(m);
                }
                c.close();
            } catch (Exception e) {
                System.err.println("versus: consumer " + name + ": " + e);
            }
        }, "consumer-" + name);
        t.start();
        subscribed.await();
        return t;
    }

    /** Keys c2 processed while c1 held an unacked earlier message of the same key. */
    static Set<String> violations(List<Event> events) {
        Map<String, Set<Integer>> held = new HashMap<>();
        Set<String> bad = new HashSet<>();
        for (Event e : events) {
            if (e.consumer.equals("c1") && e.kind.equals("recv")) {
                held.computeIfAbsent(e.key, k -> new HashSet<>()).add(e.seq);
            } else if (e.consumer.equals("c1") && e.kind.equals("ack")) {
                held.getOrDefault(e.key, new HashSet<>()).remove(e.seq);
            } else if (e.consumer.equals("c2") && e.kind.equals("recv")) {
                for (int s : held.getOrDefault(e.key, Set.of())) {
                    if (s < e.seq) {
                        bad.add(e.key);
                    }
                }
            }
        }
        return bad;
    }
}
