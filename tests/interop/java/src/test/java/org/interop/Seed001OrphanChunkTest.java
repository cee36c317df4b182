package org.interop;

import static org.interop.harness.Check.check;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.interop.harness.Admin;
import org.interop.harness.Broker;
import org.interop.harness.Check;
import org.interop.harness.Clients;
import org.interop.harness.Env;
import org.interop.harness.Json;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

/**
 * Seed 001 (Shared): a chunked message whose first chunk was acknowledged before a broker
 * restart. Pulsar replays the orphan chunks forever and the subscription stalls
 * ({@code --legacy orphan-chunk-replay}); ours dispatches them once, counts them and goes on.
 *
 * <p>The Java client acks a chunked message as a whole, so "chunk 0 acked, the others not" is made
 * with the admin API: a Shared consumer subscribes (durable subscription {@code sh}) and closes; a
 * producer (chunking on, batching off; broker {@code --max-message-size 10240}) sends one 25,600 B
 * message (3 entries, checked); {@code skip/1} moves mark-delete past entry 0 only (checked in
 * internalStats); SIGTERM and a restart on the same data dir and ports; a Shared consumer
 * subscribes and 5 plain messages are produced.
 */
class Seed001OrphanChunkTest {
    static final int CHUNKED = 25600;
    static final int PLAIN = 5;

    record Outcome(int plain, int other, long orphans, Double metric, String markDelete, long backlog) {}

    static Outcome runCase(boolean legacy) throws Exception {
        String name = legacy ? "seed001-legacy" : "seed001-ours";
        Path data = Files.createTempDirectory(Env.logDir(), name + "-data-");
        List<String> flags = new ArrayList<>(List.of("--max-message-size", "10240"));
        if (legacy) {
            flags.addAll(List.of("--legacy", "orphan-chunk-replay"));
        }
        String topic = Clients.topic(name);
        String tp = Admin.topicPath(topic);
        try (Broker b = Broker.restartable(name, data, flags.toArray(new String[0]))) {
            String md;
            try (PulsarClient cl = Clients.client(b.serviceUrl())) {
                cl.newConsumer().topic(topic).subscriptionName("sh").subscriptionType(SubscriptionType.Shared)
                        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe().close();
                Producer<byte[]> p = cl.newProducer().topic(topic).enableChunking(true).enableBatching(false).create();
                p.send(ChunkingTest.body(CHUNKED, "orphan"));
                p.close();
            }
            long entries = Json.num(b.admin().internalStats(topic), "entriesAddedCounter");
            check(entries == 3, name + ": expected 3 chunk entries, internalStats says " + entries);
            b.admin().post(tp + "/subscription/sh/skip/1", null);
            md = String.valueOf(Json.at(b.admin().internalStats(topic), "cursors", "sh", "markDeletePosition"));
            check(md.endsWith(":0"), name + ": mark-delete " + md + " after skip/1, expected entry 0");
            b.stopAndStart();
            try (PulsarClient cl = Clients.client(b.serviceUrl())) {
                Consumer<byte[]> c = cl.newConsumer().topic(topic).subscriptionName("sh")
                        .subscriptionType(SubscriptionType.Shared)
                        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
                Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false).create();
                for (int i = 0; i < PLAIN; i++) {
                    p.send(Clients.bytes("m" + i));
                }
                int plain = 0;
                int other = 0;
                Check.Deadline d = new Check.Deadline(legacy ? 4 : 8);
                while (!d.expired() && plain + other < PLAIN) {
                    Message<byte[]> m = Clients.receive(c, d.leftMs(200));
                    if (m == null) {
                        continue;
                    }
                    if (m.getValue().length < 10 && Clients.text(m).startsWith("m")) {
                        plain++;
                    } else {
                        other++;
                    }
                    c.acknowledge(m);
                }
                c.close(); // flushes the acks
                var stats = b.admin().topicStats(topic);
                Object orphans = Json.at(stats, "subscriptions", "sh", "orphanChunksDispatched");
                long backlog = Json.num(stats, "subscriptions", "sh", "msgBacklog");
                Matcher mm = Pattern.compile("(?m)^keyordered_subscription_orphan_chunks_total\\{[^}]*subscription=\"sh\"[^}]*\\}\\s+(\\S+)")
                        .matcher(b.admin().metrics());
                Double metric = null;
                while (mm.find()) {
                    metric = Math.max(metric == null ? 0 : metric, Double.parseDouble(mm.group(1)));
                }
                p.close();
                return new Outcome(plain, other, orphans instanceof Number n ? n.longValue() : 0, metric, md, backlog);
            }
        } finally {
            try (Stream<Path> s = Files.walk(data)) {
                s.sorted(Comparator.reverseOrder()).forEach(x -> x.toFile().delete());
            }
        }
    }

    @Scenario("seed_001_orphan_chunk_ours")
    void ours(Report report) throws Exception {
        Outcome o = runCase(false);
        report.messages(o.plain + o.other);
        check(o.plain == PLAIN, "ours: " + o.plain + " of " + PLAIN + " plain messages arrived after the restart "
                + "(the subscription stalled?) " + o);
        check(o.other == 0, "ours: the client surfaced " + o.other + " unexpected messages");
        check(o.orphans >= 1, "ours: stats orphanChunksDispatched=" + o.orphans);
        check(o.metric != null && o.metric >= 1, "ours: /metrics keyordered_subscription_orphan_chunks_total=" + o.metric);
        report.note("mark-delete " + o.markDelete + " after skip/1; after the restart " + o.plain + "/" + PLAIN
                + " plain delivered, orphanChunksDispatched=" + o.orphans + ", metric=" + o.metric + ", backlog " + o.backlog);
    }

    @Scenario("seed_001_orphan_chunk_legacy")
    void legacy(Report report) throws Exception {
        Outcome o = runCase(true);
        report.messages(o.plain + o.other);
        check(o.plain == 0, "legacy: " + o.plain + " plain messages arrived; --legacy orphan-chunk-replay should "
                + "stall the subscription");
        report.note("legacy delivered " + o.plain + "/" + PLAIN + " in 4 s (stalled)");
    }
}
