package org.versus;

import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;

/**
 * Seed 001 (Shared): a chunked message whose first chunk is acknowledged, then the topic is
 * reloaded (Pulsar: an admin unload of its namespace; ours: a restart on the same data directory),
 * so the chunk-to-consumer pins are gone and the later chunks are orphans. A Shared consumer
 * subscribes; a violation is a plain message not delivered within 10 s. Two variants:
 *
 * <ul>
 *   <li>{@code one-read}: the 5 plain messages are in the backlog behind the orphans, so the
 *       dispatcher's first read holds all of them: Pulsar before the fix puts the orphans in its
 *       replay set but sends the plain messages of the same read (the assignor skips an
 *       unassignable entry and goes on), so this variant does not show the stall;
 *   <li>{@code then-publish} (as apache/pulsar#26395 reports it): the plain messages are published
 *       2 s after the subscribe. Pulsar before the fix replays the orphans on every read and never
 *       reads past them, so none arrives.
 * </ul>
 *
 * <p>The Java client acks a chunked message as a whole, so "chunk 0 acked, the others not" is
 * made with the admin API: one 25,600-byte message in 10,240-byte chunks (3 entries, checked),
 * then {@code skip 1} moves mark-delete past entry 0 only.
 */
final class Seed001 {
    static final int CHUNKED = 25600;
    static final int PLAIN = 5;

    private Seed001() {}

    static void run(Versus v) throws Exception {
        variant(v, false);
        variant(v, true);
    }

    private static void variant(Versus v, boolean publishLater) throws Exception {
        String name = publishLater ? "then-publish" : "one-read";
        String ns = "public/" + Versus.fresh("versus-seed001");
        String topic = "persistent://" + ns + "/chunks";
        try (PulsarAdmin admin = v.admin()) {
            admin.namespaces().createNamespace(ns);
            try (PulsarClient cl = v.client()) {
                cl.newConsumer().topic(topic).subscriptionName("sh").subscriptionType(SubscriptionType.Shared)
                        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe().close();
                Producer<byte[]> p = cl.newProducer().topic(topic).enableChunking(true).enableBatching(false)
                        .chunkMaxMessageSize(10240).create();
                byte[] body = new byte[CHUNKED];
                for (int i = 0; i < CHUNKED; i++) {
                    body[i] = (byte) ('a' + i % 26);
                }
                p.send(body);
                if (!publishLater) {
                    sendPlain(p);
                }
                p.close();
            }
            long entries = admin.topics().getInternalStats(topic).entriesAddedCounter;
            long want = 3 + (publishLater ? 0 : PLAIN);
            if (entries != want) {
                throw new IllegalStateException("expected " + want + " entries, internal stats say " + entries);
            }
            admin.topics().skipMessages(topic, "sh", 1);
            String md = admin.topics().getInternalStats(topic).cursors.get("sh").markDeletePosition;
            v.reload(admin, ns);
            try (PulsarClient cl = v.client()) {
                Consumer<byte[]> c = cl.newConsumer().topic(topic).subscriptionName("sh")
                        .subscriptionType(SubscriptionType.Shared)
                        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
                if (publishLater) {
                    Versus.sleep(2000);
                    Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false).create();
                    sendPlain(p);
                    p.close();
                }
                int plain = 0;
                int other = 0;
                long t0 = System.nanoTime();
                long end = t0 + TimeUnit.SECONDS.toNanos(10);
                while (System.nanoTime() < end && plain < PLAIN) {
                    Message<byte[]> m = c.receive(200, TimeUnit.MILLISECONDS);
                    if (m == null) {
                        continue;
                    }
                    if (m.getValue().length < 10) {
                        plain++;
                    } else {
                        other++;
                    }
                    c.acknowledge(m);
                }
                long out = admin.topics().getStats(topic).getSubscriptions().get("sh").getMsgOutCounter();
                Versus.result("seed001", name, PLAIN - plain, "mark-delete " + md + " after skip 1, "
                        + (v.pulsar ? "namespace unloaded" : "broker restarted") + "; " + plain + " of " + PLAIN
                        + " plain messages delivered in " + Versus.secs(System.nanoTime() - t0)
                        + (other > 0 ? ", " + other + " other" : "") + "; the subscription's msgOutCounter " + out);
                c.close();
            }
        }
    }

    private static void sendPlain(Producer<byte[]> p) throws Exception {
        for (int i = 0; i < PLAIN; i++) {
            p.send(("m" + i).getBytes());
        }
    }
}
