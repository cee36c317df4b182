package org.interop.admin;

import static org.interop.harness.Check.check;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.admin.PulsarAdminException.NotFoundException;
import org.apache.pulsar.client.admin.PulsarAdminException.PreconditionFailedException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.common.policies.data.BacklogQuota;
import org.apache.pulsar.common.policies.data.BacklogQuota.BacklogQuotaType;
import org.apache.pulsar.common.policies.data.BacklogQuota.RetentionPolicy;
import org.apache.pulsar.common.policies.data.DispatchRate;
import org.apache.pulsar.common.policies.data.PersistencePolicies;
import org.apache.pulsar.common.policies.data.PersistentTopicInternalStats;
import org.apache.pulsar.common.policies.data.RetentionPolicies;
import org.interop.harness.Check;
import org.interop.harness.Report;
import org.interop.harness.Rig;
import org.interop.harness.Scenario;

/**
 * Namespace policies through the Java admin API: message TTL and backlog quotas (set, get, remove,
 * and their effect on a subscription's backlog, with the broker's check intervals shortened), the
 * backlog-quota policies the broker does not enforce, a policy it does not serve; retention (the
 * consumed ledgers kept), deduplication (a resent sequence id not stored again) and the producer
 * and consumer limits (one too many refused), each checked with the stock client.
 */
class ApiNamespacePoliciesTest {
    @Scenario("api_message_ttl")
    void messageTtl(Report report) throws Exception {
        try (Rig r = Rig.start("api-ttl", "--message-expiry-check-interval-ms", "200")) {
            var n = r.admin.namespaces();
            String ns = "public/" + Rig.unique("ttl");
            r.ok("createNamespace", () -> n.createNamespace(ns));
            Integer ttl = r.ok("getNamespaceMessageTTL (unset)", () -> n.getNamespaceMessageTTL(ns));
            check(ttl == null, "getNamespaceMessageTTL of a new namespace = " + ttl + ", expected null");
            r.ok("setNamespaceMessageTTL(3600)", () -> n.setNamespaceMessageTTL(ns, 3600));
            ttl = r.ok("getNamespaceMessageTTL", () -> n.getNamespaceMessageTTL(ns));
            check(Integer.valueOf(3600).equals(ttl), "getNamespaceMessageTTL after set 3600 = " + ttl);
            r.ok("removeNamespaceMessageTTL", () -> n.removeNamespaceMessageTTL(ns));
            ttl = r.ok("getNamespaceMessageTTL after remove", () -> n.getNamespaceMessageTTL(ns));
            check(ttl == null, "getNamespaceMessageTTL after remove = " + ttl + ", expected null");
            r.refused("setNamespaceMessageTTL(-5)", PreconditionFailedException.class, 412, "Invalid value for message TTL",
                    () -> n.setNamespaceMessageTTL(ns, -5));
            r.refused("setNamespaceMessageTTL (missing namespace)", NotFoundException.class, 404, null,
                    () -> n.setNamespaceMessageTTL("public/no-such-ns", 60));

            // The effect: a TTL of 1 s expires a backlog of 5 (checked every 200 ms).
            String topic = "persistent://" + ns + "/" + Rig.unique("t");
            Fixtures.subscription(r, topic, "s");
            try (Producer<byte[]> p = Fixtures.producer(r, topic)) {
                Fixtures.send(p, "m", 5);
            }
            Fixtures.awaitBacklog(r, topic, "s", 5, 5, "sending 5");
            r.ok("setNamespaceMessageTTL(1)", () -> n.setNamespaceMessageTTL(ns, 1));
            long t0 = System.nanoTime();
            Fixtures.awaitBacklog(r, topic, "s", 0, 10, "a message TTL of 1 s");
            report.messages(5);
            report.note(String.format("TTL 1 s expired a backlog of 5 in %.1f s", (System.nanoTime() - t0) / 1e9));
        }
    }

    @Scenario("api_backlog_quota")
    void backlogQuota(Report report) throws Exception {
        try (Rig r = Rig.start("api-quota", "--backlog-quota-check-interval-ms", "200")) {
            var n = r.admin.namespaces();
            String ns = "public/" + Rig.unique("quota");
            r.ok("createNamespace", () -> n.createNamespace(ns));
            Map<BacklogQuotaType, BacklogQuota> map = r.ok("getBacklogQuotaMap (unset)", () -> n.getBacklogQuotaMap(ns));
            check(map.isEmpty(), "getBacklogQuotaMap of a new namespace = " + map);

            // The effect first: 20 messages of 1 KiB against a 4 KiB destination_storage quota.
            String topic = "persistent://" + ns + "/" + Rig.unique("t");
            Fixtures.subscription(r, topic, "s");
            try (Producer<byte[]> p = Fixtures.producer(r, topic)) {
                for (int i = 0; i < 20; i++) {
                    p.send(new byte[1024]);
                }
            }
            Fixtures.awaitBacklog(r, topic, "s", 20, 5, "sending 20");
            BacklogQuota size = BacklogQuota.builder().limitSize(4096)
                    .retentionPolicy(RetentionPolicy.consumer_backlog_eviction).build();
            r.ok("setBacklogQuota(destination_storage 4 KiB)", () -> n.setBacklogQuota(ns, size));
            org.interop.harness.Check.waitUntil(() -> Fixtures.backlog(r, topic, "s") <= 4, 10,
                    "consumer_backlog_eviction of a 20 KiB backlog down to 4 KiB");
            long left = Fixtures.backlog(r, topic, "s");

            BacklogQuota age = BacklogQuota.builder().limitTime(3600)
                    .retentionPolicy(RetentionPolicy.consumer_backlog_eviction).build();
            r.ok("setBacklogQuota(message_age 3600 s)", () -> n.setBacklogQuota(ns, age, BacklogQuotaType.message_age));
            map = r.ok("getBacklogQuotaMap", () -> n.getBacklogQuotaMap(ns));
            BacklogQuota gotSize = map.get(BacklogQuotaType.destination_storage);
            BacklogQuota gotAge = map.get(BacklogQuotaType.message_age);
            check(gotSize != null && gotSize.getLimitSize() == 4096
                    && gotSize.getPolicy() == RetentionPolicy.consumer_backlog_eviction,
                    "getBacklogQuotaMap destination_storage = " + gotSize + " (map " + map + ")");
            check(gotAge != null && gotAge.getLimitTime() == 3600
                    && gotAge.getPolicy() == RetentionPolicy.consumer_backlog_eviction,
                    "getBacklogQuotaMap message_age = " + gotAge + " (map " + map + ")");

            r.ok("removeBacklogQuota(message_age)", () -> n.removeBacklogQuota(ns, BacklogQuotaType.message_age));
            map = r.ok("getBacklogQuotaMap after remove", () -> n.getBacklogQuotaMap(ns));
            check(map.keySet().equals(java.util.Set.of(BacklogQuotaType.destination_storage)),
                    "after removeBacklogQuota(message_age): " + map);
            r.ok("removeBacklogQuota", () -> n.removeBacklogQuota(ns));
            map = r.ok("getBacklogQuotaMap after remove all", () -> n.getBacklogQuotaMap(ns));
            check(map.isEmpty(), "after removeBacklogQuota(): " + map);

            for (RetentionPolicy producerSide : new RetentionPolicy[] {RetentionPolicy.producer_request_hold,
                    RetentionPolicy.producer_exception}) {
                BacklogQuota q = BacklogQuota.builder().limitSize(1 << 20).retentionPolicy(producerSide).build();
                r.ok("setBacklogQuota(" + producerSide + ")", () -> n.setBacklogQuota(ns, q));
                BacklogQuota got = r.ok("getBacklogQuotaMap", () -> n.getBacklogQuotaMap(ns))
                        .get(BacklogQuotaType.destination_storage);
                check(got != null && got.getPolicy() == producerSide && got.getLimitSize() == 1 << 20,
                        "after setBacklogQuota(" + producerSide + "): " + got);
            }
            r.ok("removeBacklogQuota", () -> n.removeBacklogQuota(ns));
            r.refused("setBacklogQuota (missing namespace)", NotFoundException.class, 404, null,
                    () -> n.setBacklogQuota("public/no-such-ns", size));
            report.messages(20);
            report.note("consumer_backlog_eviction left " + left + " of 20 (1 KiB each, quota 4 KiB)");
        }
    }

    @Scenario("api_unsupported_policy")
    void unsupportedPolicy(Report report) {
        try (Rig r = Rig.start("api-unsupported")) {
            var n = r.admin.namespaces();
            String ns = "public/" + Rig.unique("ns");
            r.ok("createNamespace", () -> n.createNamespace(ns));
            // Two policies a one-node broker without BookKeeper or rate limiting does not enforce.
            PulsarAdminException e = r.refused("setPersistence", PulsarAdminException.class, 400, "persistence",
                    () -> n.setPersistence(ns, new PersistencePolicies(2, 2, 2, 0)));
            PulsarAdminException e2 = r.refused("setDispatchRate", PulsarAdminException.class, 400, "dispatchRate",
                    () -> n.setDispatchRate(ns, DispatchRate.builder().dispatchThrottlingRateInMsg(100).build()));
            report.note("setPersistence: " + e.getMessage() + "; setDispatchRate: " + e2.getMessage());
        }
    }

    @Scenario("api_retention")
    void retention(Report report) throws Exception {
        // Two entries a ledger: six messages are three ledgers, which retention keeps or drops.
        try (Rig r = Rig.start("api-retention", "--entries-per-ledger", "2")) {
            var n = r.admin.namespaces();
            String ns = "public/" + Rig.unique("ret");
            r.ok("createNamespace", () -> n.createNamespace(ns));
            RetentionPolicies none = r.ok("getRetention (unset)", () -> n.getRetention(ns));
            check(none == null, "getRetention of a new namespace = " + none + ", expected null");
            r.refused("setRetention(10 min, 0 MB)", PreconditionFailedException.class, 412, "Invalid retention policy",
                    () -> n.setRetention(ns, new RetentionPolicies(10, 0)));
            r.refused("setRetention(0 min, 10 MB)", PreconditionFailedException.class, 412, "Invalid retention policy",
                    () -> n.setRetention(ns, new RetentionPolicies(0, 10)));
            r.refused("setRetention (missing namespace)", NotFoundException.class, 404, null,
                    () -> n.setRetention("public/no-such-ns", new RetentionPolicies(10, 10)));
            r.ok("setRetention(10 min, 10 MB)", () -> n.setRetention(ns, new RetentionPolicies(10, 10)));
            RetentionPolicies got = r.ok("getRetention", () -> n.getRetention(ns));
            check(got != null && got.getRetentionTimeInMinutes() == 10 && got.getRetentionSizeInMB() == 10,
                    "getRetention after setRetention(10, 10) = " + got);

            // The effect: six messages consumed (the backlog cleared); retention keeps their three
            // ledgers (retention runs every 100 ms); once it is removed they go.
            String topic = "persistent://" + ns + "/" + Rig.unique("t");
            Fixtures.subscription(r, topic, "s");
            try (Producer<byte[]> p = Fixtures.producer(r, topic)) {
                Fixtures.send(p, "m", 6);
            }
            r.ok("skipAllMessages", () -> r.admin.topics().skipAllMessages(topic, "s"));
            Fixtures.awaitBacklog(r, topic, "s", 0, 3, "skipAllMessages");
            Check.sleepMs(600);
            PersistentTopicInternalStats kept = r.ok("getInternalStats", () -> r.admin.topics().getInternalStats(topic));
            check(kept.ledgers.size() == 3 && kept.numberOfEntries == 6,
                    "with retention 10 min / 10 MB the consumed ledgers should stay: " + kept.ledgers.size()
                            + " ledgers, " + kept.numberOfEntries + " entries (expected 3 and 6); ledgers "
                            + ledgers(kept));
            r.ok("removeRetention", () -> n.removeRetention(ns));
            got = r.ok("getRetention after remove", () -> n.getRetention(ns));
            check(got == null, "getRetention after removeRetention = " + got);
            Check.waitUntil(() -> r.ok("getInternalStats", () -> r.admin.topics().getInternalStats(topic))
                    .ledgers.size() <= 1, 5, "the consumed ledgers to be dropped once the retention is removed");
            PersistentTopicInternalStats after = r.ok("getInternalStats", () -> r.admin.topics().getInternalStats(topic));
            report.messages(6);
            report.note("retention kept " + kept.ledgers.size() + " consumed ledgers; removed: " + after.ledgers.size()
                    + " left (" + after.numberOfEntries + " entries)");
        }
    }

    private static String ledgers(PersistentTopicInternalStats s) {
        StringBuilder b = new StringBuilder("[");
        for (var l : s.ledgers) {
            b.append(' ').append(l.ledgerId).append('(').append(l.entries).append(')');
        }
        return b.append(" ]").toString();
    }

    @Scenario("api_deduplication")
    void deduplication(Report report) throws Exception {
        try (Rig r = Rig.start("api-dedup")) {
            var n = r.admin.namespaces();
            String ns = "public/" + Rig.unique("dedup");
            r.ok("createNamespace", () -> n.createNamespace(ns));
            Boolean on = r.ok("getDeduplicationStatus (unset)", () -> n.getDeduplicationStatus(ns));
            check(on == null, "getDeduplicationStatus of a new namespace = " + on + ", expected null");
            r.ok("setDeduplicationStatus(true)", () -> n.setDeduplicationStatus(ns, true));
            on = r.ok("getDeduplicationStatus", () -> n.getDeduplicationStatus(ns));
            check(Boolean.TRUE.equals(on), "getDeduplicationStatus after set true = " + on);
            r.refused("setDeduplicationStatus (missing namespace)", NotFoundException.class, 404, null,
                    () -> n.setDeduplicationStatus("public/no-such-ns", true));

            // The effect: a producer named "dedup-p" stores sequence ids 0, 1, 2; the same name
            // again resumes after 2, and a message sent with the stored id 1 is not stored.
            String topic = "persistent://" + ns + "/" + Rig.unique("t");
            try (Producer<byte[]> p = named(r, topic)) {
                Fixtures.send(p, "m", 3);
            }
            check(msgIn(r, topic) == 3, "msgInCounter after 3 messages = " + msgIn(r, topic));
            MessageId dup;
            try (Producer<byte[]> p = named(r, topic)) {
                check(p.getLastSequenceId() == 2, "a producer named like the one that stored sequence ids 0..2 "
                        + "resumes after " + p.getLastSequenceId() + ", expected 2 (PRODUCER_SUCCESS last_sequence_id)");
                dup = p.newMessage().sequenceId(1).value("again".getBytes()).send();
                check(msgIn(r, topic) == 3, "a message resent with the stored sequence id 1 was stored: msgInCounter = "
                        + msgIn(r, topic) + ", expected 3 (its receipt: " + dup + ")");
                p.newMessage().sequenceId(3).value("m3".getBytes()).send();
                check(msgIn(r, topic) == 4, "sequence id 3 after 2: msgInCounter = " + msgIn(r, topic) + ", expected 4");

                r.ok("setDeduplicationStatus(false)", () -> n.setDeduplicationStatus(ns, false));
                on = r.ok("getDeduplicationStatus", () -> n.getDeduplicationStatus(ns));
                check(Boolean.FALSE.equals(on), "getDeduplicationStatus after set false = " + on);
                p.newMessage().sequenceId(1).value("again".getBytes()).send();
                check(msgIn(r, topic) == 5, "deduplication off: sequence id 1 resent, msgInCounter = "
                        + msgIn(r, topic) + ", expected 5");
            }
            r.ok("removeDeduplicationStatus", () -> n.removeDeduplicationStatus(ns));
            on = r.ok("getDeduplicationStatus after remove", () -> n.getDeduplicationStatus(ns));
            check(on == null, "getDeduplicationStatus after remove = " + on);
            report.messages(6);
            report.note("a duplicate's receipt: " + dup);
        }
    }

    private static Producer<byte[]> named(Rig r, String topic) throws PulsarClientException {
        return r.client().newProducer().topic(topic).producerName("dedup-p").enableBatching(false).create();
    }

    private static long msgIn(Rig r, String topic) {
        return r.ok("getStats", () -> r.admin.topics().getStats(topic)).getMsgInCounter();
    }

    @Scenario("api_producer_consumer_limits")
    void limits(Report report) throws Exception {
        try (Rig r = Rig.start("api-limits")) {
            var n = r.admin.namespaces();
            String ns = "public/" + Rig.unique("limits");
            r.ok("createNamespace", () -> n.createNamespace(ns));
            Integer v = r.ok("getMaxProducersPerTopic (unset)", () -> n.getMaxProducersPerTopic(ns));
            check(v == null, "getMaxProducersPerTopic of a new namespace = " + v + ", expected null");
            r.ok("setMaxProducersPerTopic(1)", () -> n.setMaxProducersPerTopic(ns, 1));
            r.ok("setMaxConsumersPerTopic(2)", () -> n.setMaxConsumersPerTopic(ns, 2));
            r.ok("setMaxConsumersPerSubscription(1)", () -> n.setMaxConsumersPerSubscription(ns, 1));
            v = r.ok("getMaxProducersPerTopic", () -> n.getMaxProducersPerTopic(ns));
            check(Integer.valueOf(1).equals(v), "getMaxProducersPerTopic after set 1 = " + v);
            v = r.ok("getMaxConsumersPerTopic", () -> n.getMaxConsumersPerTopic(ns));
            check(Integer.valueOf(2).equals(v), "getMaxConsumersPerTopic after set 2 = " + v);
            v = r.ok("getMaxConsumersPerSubscription", () -> n.getMaxConsumersPerSubscription(ns));
            check(Integer.valueOf(1).equals(v), "getMaxConsumersPerSubscription after set 1 = " + v);
            r.refused("setMaxProducersPerTopic (missing namespace)", NotFoundException.class, 404, null,
                    () -> n.setMaxProducersPerTopic("public/no-such-ns", 1));

            // The effect: one producer, one consumer a subscription and two a topic.
            String topic = "persistent://" + ns + "/" + Rig.unique("t");
            List<AutoCloseable> open = new ArrayList<>();
            try {
                open.add(Fixtures.producer(r, topic));
                String producerRefusal = refusedClient("a second producer (max 1 a topic)",
                        PulsarClientException.ProducerBusyException.class, "Topic reached max producers limit",
                        () -> open.add(Fixtures.producer(r, topic)));
                open.add(shared(r, topic, "s1"));
                String subRefusal = refusedClient("a second consumer on s1 (max 1 a subscription)",
                        PulsarClientException.ConsumerBusyException.class, "Subscription reached max consumers limit",
                        () -> open.add(shared(r, topic, "s1")));
                open.add(shared(r, topic, "s2"));
                String topicRefusal = refusedClient("a third consumer (max 2 a topic)",
                        PulsarClientException.ConsumerBusyException.class, "Topic reached max consumers limit",
                        () -> open.add(shared(r, topic, "s3")));

                r.ok("removeMaxProducersPerTopic", () -> n.removeMaxProducersPerTopic(ns));
                r.ok("removeMaxConsumersPerTopic", () -> n.removeMaxConsumersPerTopic(ns));
                r.ok("removeMaxConsumersPerSubscription", () -> n.removeMaxConsumersPerSubscription(ns));
                for (String what : List.of("producers", "consumers a topic", "consumers a subscription")) {
                    Integer after = r.ok("get max " + what, () -> switch (what) {
                        case "producers" -> n.getMaxProducersPerTopic(ns);
                        case "consumers a topic" -> n.getMaxConsumersPerTopic(ns);
                        default -> n.getMaxConsumersPerSubscription(ns);
                    });
                    check(after == null, "max " + what + " after its remove = " + after);
                }
                // No limit now: the refused ones are accepted.
                open.add(Fixtures.producer(r, topic));
                open.add(shared(r, topic, "s1"));
                open.add(shared(r, topic, "s3"));
                report.note(producerRefusal + "; " + subRefusal + "; " + topicRefusal);
            } finally {
                for (AutoCloseable c : open) {
                    try {
                        c.close();
                    } catch (Exception ignored) {
                        // closing
                    }
                }
            }
        }
    }

    private static Consumer<byte[]> shared(Rig r, String topic, String sub) throws PulsarClientException {
        return r.client().newConsumer().topic(topic).subscriptionName(sub).subscriptionType(SubscriptionType.Shared)
                .subscribe();
    }

    /** A stock-client call that must fail with exactly {@code type}, its message containing {@code part}. */
    static String refusedClient(String what, Class<? extends PulsarClientException> type, String part,
            Rig.Action a) {
        long t0 = System.nanoTime();
        try {
            a.run();
        } catch (PulsarClientException e) {
            check(e.getClass() == type && e.getMessage() != null && e.getMessage().contains(part),
                    what + ": expected " + type.getSimpleName() + " `" + part + "`, got " + e.getClass().getName()
                            + ": " + e.getMessage());
            return String.format("%s refused in %.1f s", what, (System.nanoTime() - t0) / 1e9);
        } catch (Exception e) {
            throw new Check.ScenarioFailure(what + ": expected " + type.getSimpleName() + ", got " + e);
        }
        throw new Check.ScenarioFailure(what + ": expected " + type.getSimpleName() + ", but it was accepted");
    }
}
