package org.interop.admin;

import static org.interop.harness.Check.check;

import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.admin.PulsarAdminException.ConflictException;
import org.apache.pulsar.client.admin.PulsarAdminException.NotAllowedException;
import org.apache.pulsar.client.admin.PulsarAdminException.NotFoundException;
import org.apache.pulsar.client.admin.PulsarAdminException.PreconditionFailedException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageRoutingMode;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.common.partition.PartitionedTopicMetadata;
import org.apache.pulsar.common.policies.data.PartitionedTopicInternalStats;
import org.apache.pulsar.common.policies.data.PartitionedTopicStats;
import org.apache.pulsar.common.policies.data.PersistentTopicInternalStats;
import org.apache.pulsar.common.policies.data.TopicStats;
import org.interop.harness.Check;
import org.interop.harness.Report;
import org.interop.harness.Rig;
import org.interop.harness.Scenario;

/**
 * Topics through the Java admin API: partitioned topics (create, grow, metadata, list, stats,
 * internal stats, delete), non-partitioned topics (create, list, delete), a topic's stats,
 * internal stats and subscriptions, termination; the stock client sees what the admin calls
 * made.
 */
class ApiTopicsTest {
    @Scenario("api_partitioned_topic")
    void partitioned(Report report) throws Exception {
        try (Rig r = Rig.start("api-partitioned")) {
            var t = r.admin.topics();
            String topic = Fixtures.topic("part");
            r.ok("createPartitionedTopic(3)", () -> t.createPartitionedTopic(topic, 3));
            PartitionedTopicMetadata md = r.ok("getPartitionedTopicMetadata", () -> t.getPartitionedTopicMetadata(topic));
            check(md.partitions == 3, "getPartitionedTopicMetadata.partitions = " + md.partitions + ", expected 3");
            List<String> parts = r.client().getPartitionsForTopic(topic).get(5, TimeUnit.SECONDS);
            check(parts.size() == 3 && parts.get(2).equals(topic + "-partition-2"),
                    "the stock client's getPartitionsForTopic = " + parts);

            // 30 messages round robin: 10 on each partition.
            try (Producer<byte[]> p = r.client().newProducer().topic(topic).enableBatching(false)
                    .messageRoutingMode(MessageRoutingMode.RoundRobinPartition).create()) {
                Fixtures.send(p, "m", 30);
            }
            PartitionedTopicStats ps = r.ok("getPartitionedStats(perPartition)", () -> t.getPartitionedStats(topic, true));
            check(ps.getMetadata().partitions == 3, "partitioned stats metadata.partitions = " + ps.getMetadata().partitions);
            check(ps.getMsgInCounter() == 30, "partitioned stats msgInCounter = " + ps.getMsgInCounter() + ", expected 30");
            check(ps.getPartitions().size() == 3, "partitioned stats partitions = " + ps.getPartitions().keySet());
            for (var e : ps.getPartitions().entrySet()) {
                check(e.getValue().getMsgInCounter() == 10, "partition " + e.getKey() + " msgInCounter = "
                        + e.getValue().getMsgInCounter() + ", expected 10");
            }
            PartitionedTopicInternalStats is = r.ok("getPartitionedInternalStats", () -> t.getPartitionedInternalStats(topic));
            check(is.metadata.partitions == 3, "partitioned internal stats metadata.partitions = " + is.metadata.partitions);
            check(is.partitions.size() == 3, "partitioned internal stats partitions = " + is.partitions.keySet());
            for (var e : is.partitions.entrySet()) {
                check(e.getValue().entriesAddedCounter == 10, "partition " + e.getKey() + " entriesAddedCounter = "
                        + e.getValue().entriesAddedCounter);
            }

            r.ok("updatePartitionedTopic(4)", () -> t.updatePartitionedTopic(topic, 4));
            md = r.ok("getPartitionedTopicMetadata after update", () -> t.getPartitionedTopicMetadata(topic));
            check(md.partitions == 4, "metadata after updatePartitionedTopic(4) = " + md.partitions);
            parts = r.client().getPartitionsForTopic(topic).get(5, TimeUnit.SECONDS);
            check(parts.size() == 4, "the stock client's getPartitionsForTopic after the update = " + parts);

            r.refused("updatePartitionedTopic(2) (shrink)", PulsarAdminException.class, 422,
                    "can't less than current partitions", () -> t.updatePartitionedTopic(topic, 2));
            r.refused("createPartitionedTopic (exists)", ConflictException.class, 409, "This topic already exists",
                    () -> t.createPartitionedTopic(topic, 3));
            // 0 partitions: the Java admin API refuses it itself (IllegalArgumentException), no request.
            int before = r.http.mark();
            try {
                t.createPartitionedTopic(Fixtures.topic("zero"), 0);
                check(false, "createPartitionedTopic(0) succeeded");
            } catch (PulsarAdminException e) {
                check(e.getCause() instanceof IllegalArgumentException && r.http.since(before).isEmpty(),
                        "createPartitionedTopic(0): expected the client's own IllegalArgumentException and no "
                                + "request, got " + e + r.http.describe(before));
            }
            r.refused("createPartitionedTopic (-partition- in the name)", PreconditionFailedException.class, 412, null,
                    () -> t.createPartitionedTopic(Fixtures.topic("x") + "-partition-1", 2));
            String plain = Fixtures.topic("plain");
            r.ok("createNonPartitionedTopic", () -> t.createNonPartitionedTopic(plain));
            r.refused("updatePartitionedTopic (not partitioned)", ConflictException.class, 409,
                    "is not the partitioned topic", () -> t.updatePartitionedTopic(plain, 3));
            r.refused("deletePartitionedTopic (not partitioned)", ConflictException.class, 409, null,
                    () -> t.deletePartitionedTopic(plain));
            r.refused("getPartitionedStats (missing)", NotFoundException.class, 404, null,
                    () -> t.getPartitionedStats(Fixtures.topic("nope"), false));
            r.refused("getPartitionedInternalStats (missing)", NotFoundException.class, 404, null,
                    () -> t.getPartitionedInternalStats(Fixtures.topic("nope")));

            // Delete: refused while a producer is connected, then done; force closes it.
            try (Producer<byte[]> p = Fixtures.producer(r, topic)) {
                r.refused("deletePartitionedTopic (producer connected)", PreconditionFailedException.class, 412, null,
                        () -> t.deletePartitionedTopic(topic));
            }
            r.ok("deletePartitionedTopic", () -> t.deletePartitionedTopic(topic));
            r.refused("getPartitionedTopicMetadata (deleted)", NotFoundException.class, 404, null,
                    () -> t.getPartitionedTopicMetadata(topic));
            r.refused("deletePartitionedTopic (missing)", NotFoundException.class, 404, null,
                    () -> t.deletePartitionedTopic(topic));

            String other = Fixtures.topic("part2");
            r.ok("createPartitionedTopic(2)", () -> t.createPartitionedTopic(other, 2));
            Producer<byte[]> p = Fixtures.producer(r, other);
            r.ok("deletePartitionedTopic(force) with a producer", () -> t.deletePartitionedTopic(other, true));
            p.closeAsync();
            report.messages(30);
            report.note("3 partitions, 10 messages each, grown to 4; 10 refusals as typed exceptions");
        }
    }

    @Scenario("api_partitioned_topic_list")
    void partitionedList(Report report) {
        try (Rig r = Rig.start("api-partitioned-list")) {
            var t = r.admin.topics();
            String topic = Fixtures.topic("part");
            String plain = Fixtures.topic("plain");
            r.ok("createPartitionedTopic(2)", () -> t.createPartitionedTopic(topic, 2));
            r.ok("createNonPartitionedTopic", () -> t.createNonPartitionedTopic(plain));
            List<String> listed = r.ok("getPartitionedTopicList", () -> t.getPartitionedTopicList(Fixtures.NS));
            check(listed.equals(List.of(topic)), "getPartitionedTopicList(public/default) = " + listed
                    + ", expected [" + topic + "]");
            r.ok("deletePartitionedTopic", () -> t.deletePartitionedTopic(topic));
            listed = r.ok("getPartitionedTopicList after delete", () -> t.getPartitionedTopicList(Fixtures.NS));
            check(listed.isEmpty(), "getPartitionedTopicList after delete = " + listed);
            r.refused("getPartitionedTopicList (no namespace)", NotFoundException.class, 404, null,
                    () -> t.getPartitionedTopicList("public/no-such-ns"));
        }
    }

    @Scenario("api_non_partitioned_topic")
    void nonPartitioned(Report report) throws Exception {
        // Auto-creation off: the topics exist because the admin API made them.
        try (Rig r = Rig.start("api-topics", "--allow-auto-topic-creation", "false")) {
            var t = r.admin.topics();
            String topic = Fixtures.topic("plain");
            r.ok("createNonPartitionedTopic", () -> t.createNonPartitionedTopic(topic));
            List<String> list = r.ok("getList", () -> t.getList(Fixtures.NS));
            check(list.contains(topic), "getList(public/default) = " + list);
            r.refused("createNonPartitionedTopic (exists)", ConflictException.class, 409, "This topic already exists",
                    () -> t.createNonPartitionedTopic(topic));
            r.refused("createNonPartitionedTopic (no namespace)", NotFoundException.class, 404, null,
                    () -> t.createNonPartitionedTopic("persistent://public/no-such-ns/t"));
            String part = Fixtures.topic("part");
            r.ok("createPartitionedTopic(2)", () -> t.createPartitionedTopic(part, 2));
            r.refused("createNonPartitionedTopic (a partitioned topic's name)", ConflictException.class, 409, null,
                    () -> t.createNonPartitionedTopic(part));
            r.refused("delete (a partitioned topic)", ConflictException.class, 409, null, () -> t.delete(part));
            r.refused("createNonPartitionedTopic (a partition past the count)", PreconditionFailedException.class, 412,
                    null, () -> t.createNonPartitionedTopic(part + "-partition-5"));
            list = r.ok("getList with a partitioned topic", () -> t.getList(Fixtures.NS));
            check(list.contains(part + "-partition-0") && list.contains(part + "-partition-1"),
                    "getList lists a partitioned topic's partitions: " + list);

            try (Producer<byte[]> p = Fixtures.producer(r, topic)) {
                Fixtures.send(p, "m", 3);
                r.refused("delete (producer connected)", PreconditionFailedException.class, 412, "connected",
                        () -> t.delete(topic));
            }
            r.ok("delete", () -> t.delete(topic));
            list = r.ok("getList after delete", () -> t.getList(Fixtures.NS));
            check(!list.contains(topic), "getList after delete still has " + topic + ": " + list);
            r.refused("delete (missing)", NotFoundException.class, 404, "not found", () -> t.delete(topic));
            Check.check(failsToProduce(r, topic), "a producer on the deleted topic (auto-creation off) was created");

            String forced = Fixtures.topic("forced");
            r.ok("createNonPartitionedTopic", () -> t.createNonPartitionedTopic(forced));
            Producer<byte[]> p = Fixtures.producer(r, forced);
            r.ok("delete(force) with a producer", () -> t.delete(forced, true));
            Check.waitUntil(() -> !p.isConnected(), 5, "the producer to be closed by delete(force)");
            p.closeAsync();
            list = r.ok("getList after force delete", () -> t.getList(Fixtures.NS));
            check(!list.contains(forced), "getList after delete(force) still has " + forced + ": " + list);
            report.messages(3);
        }
    }

    /**
     * {@code terminateTopic} answers the last message id and the topic takes no producer any
     * more; a partitioned topic is refused (405) and {@code terminatePartitionedTopic} answers
     * one id per partition.
     */
    @Scenario("api_terminate")
    void terminate(Report report) throws Exception {
        try (Rig r = Rig.start("api-terminate")) {
            var t = r.admin.topics();
            String topic = Fixtures.topic("term");
            MessageId sent;
            try (Producer<byte[]> p = Fixtures.producer(r, topic)) {
                Fixtures.send(p, "m", 2);
                sent = p.send("last".getBytes());
            }
            MessageId last = r.ok("terminateTopic", () -> t.terminateTopic(topic));
            check(last.equals(sent), "terminateTopic answered " + last + ", the last message sent was " + sent);
            Check.check(failsToProduce(r, topic), "a producer on the terminated topic was created");
            r.ok("terminateTopic again", () -> t.terminateTopic(topic));
            String part = Fixtures.topic("term-part");
            r.ok("createPartitionedTopic(2)", () -> t.createPartitionedTopic(part, 2));
            r.refused("terminateTopic (partitioned)", NotAllowedException.class, 405, "partitioned",
                    () -> t.terminateTopic(part));
            Map<Integer, MessageId> ids = r.ok("terminatePartitionedTopic", () -> t.terminatePartitionedTopic(part));
            check(ids.keySet().equals(java.util.Set.of(0, 1)), "terminatePartitionedTopic answered " + ids);
            Check.check(failsToProduce(r, part + "-partition-1"), "a producer on a terminated partition was created");
            report.messages(3);
        }
    }

    private static boolean failsToProduce(Rig r, String topic) {
        try (Producer<byte[]> p = Fixtures.producer(r, topic)) {
            return false;
        } catch (Exception e) {
            return true;
        }
    }

    @Scenario("api_topic_stats")
    void stats(Report report) throws Exception {
        try (Rig r = Rig.start("api-stats")) {
            var t = r.admin.topics();
            String topic = Fixtures.topic("stats");
            try (Consumer<byte[]> c = r.client().newConsumer().topic(topic).subscriptionName("sub")
                    .subscriptionType(SubscriptionType.Shared).consumerName("c1").subscribe();
                    Producer<byte[]> p = Fixtures.producer(r, topic)) {
                Fixtures.send(p, "m", 10);
                for (int i = 0; i < 10; i++) {
                    Message<byte[]> m = c.receive(5, TimeUnit.SECONDS);
                    check(m != null, "received " + i + " of 10");
                    if (i < 4) {
                        c.acknowledge(m);
                    }
                }
                Fixtures.awaitBacklog(r, topic, "sub", 6, 5, "acking 4 of 10");
                TopicStats s = r.ok("getStats", () -> t.getStats(topic));
                check(s.getMsgInCounter() == 10, "getStats msgInCounter = " + s.getMsgInCounter());
                check(s.getPublishers().size() == 1, "getStats publishers = " + s.getPublishers());
                var sub = s.getSubscriptions().get("sub");
                check(sub.getConsumers().size() == 1 && "c1".equals(sub.getConsumers().get(0).getConsumerName()),
                        "getStats subscriptions.sub.consumers = " + sub.getConsumers());
                check(sub.getUnackedMessages() == 6, "getStats subscriptions.sub.unackedMessages = " + sub.getUnackedMessages());
                PersistentTopicInternalStats is = r.ok("getInternalStats", () -> t.getInternalStats(topic));
                check(is.entriesAddedCounter == 10, "getInternalStats entriesAddedCounter = " + is.entriesAddedCounter);
                check(is.cursors.containsKey("sub"), "getInternalStats cursors = " + is.cursors.keySet());
                List<String> subs = r.ok("getSubscriptions", () -> t.getSubscriptions(topic));
                check(subs.equals(List.of("sub")), "getSubscriptions = " + subs);
                report.messages(10);
                report.note("markDelete " + is.cursors.get("sub").markDeletePosition + ", ledgers " + is.ledgers.size());
            }
            String nope = Fixtures.topic("nope");
            r.refused("getStats (missing)", NotFoundException.class, 404, null, () -> t.getStats(nope));
            r.refused("getInternalStats (missing)", NotFoundException.class, 404, null, () -> t.getInternalStats(nope));
            r.refused("getSubscriptions (missing)", NotFoundException.class, 404, null, () -> t.getSubscriptions(nope));
        }
    }
}
