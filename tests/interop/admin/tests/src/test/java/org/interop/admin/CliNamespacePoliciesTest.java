package org.interop.admin;

import static org.interop.harness.Check.check;

import java.util.Map;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.common.policies.data.BacklogQuota;
import org.apache.pulsar.common.policies.data.BacklogQuota.BacklogQuotaType;
import org.apache.pulsar.common.policies.data.BacklogQuota.RetentionPolicy;
import org.apache.pulsar.common.policies.data.RetentionPolicies;
import org.interop.harness.Cli;
import org.interop.harness.Report;
import org.interop.harness.Rig;
import org.interop.harness.Scenario;
import org.junit.jupiter.api.Timeout;

/**
 * {@code pulsar-admin namespaces} message TTL, backlog quota, retention, deduplication and
 * producer/consumer limit commands; what they set is read back with the Java admin API, and the
 * stock client checks deduplication's and the producer limit's effect.
 */
class CliNamespacePoliciesTest {
    @Scenario("cli_message_ttl")
    @Timeout(Cli.SCENARIO_TIMEOUT_S)
    void messageTtl(Report report) {
        try (Rig r = Rig.start("cli-ttl")) {
            Cli cli = r.cli();
            var n = r.admin.namespaces();
            String ns = "public/" + Rig.unique("ttl");
            r.ok("createNamespace", () -> n.createNamespace(ns));
            cli.run("namespaces", "set-message-ttl", ns, "-ttl", "1h").ok();
            Integer ttl = r.ok("getNamespaceMessageTTL", () -> n.getNamespaceMessageTTL(ns));
            check(Integer.valueOf(3600).equals(ttl), "after `set-message-ttl -ttl 1h`: " + ttl);
            Cli.Result get = cli.run("namespaces", "get-message-ttl", ns).ok();
            check(get.out().strip().equals("3600"), "`get-message-ttl`: " + get.describe());
            cli.run("namespaces", "remove-message-ttl", ns).ok();
            ttl = r.ok("getNamespaceMessageTTL", () -> n.getNamespaceMessageTTL(ns));
            check(ttl == null, "after `remove-message-ttl`: " + ttl);
            cli.run("namespaces", "set-message-ttl", "public/no-such-ns", "-ttl", "60").refused("Namespace does not exist");
        }
    }

    @Scenario("cli_backlog_quota")

    @Timeout(Cli.SCENARIO_TIMEOUT_S)
    void backlogQuota(Report report) {
        try (Rig r = Rig.start("cli-quota")) {
            Cli cli = r.cli();
            var n = r.admin.namespaces();
            String ns = "public/" + Rig.unique("quota");
            r.ok("createNamespace", () -> n.createNamespace(ns));
            cli.run("namespaces", "set-backlog-quota", ns, "-l", "10M", "-p", "consumer_backlog_eviction").ok();
            cli.run("namespaces", "set-backlog-quota", ns, "-lt", "1h", "-p", "consumer_backlog_eviction",
                    "-t", "message_age").ok();
            Map<BacklogQuotaType, BacklogQuota> map = r.ok("getBacklogQuotaMap", () -> n.getBacklogQuotaMap(ns));
            BacklogQuota size = map.get(BacklogQuotaType.destination_storage);
            BacklogQuota age = map.get(BacklogQuotaType.message_age);
            check(size != null && size.getLimitSize() == 10L * 1024 * 1024
                    && size.getPolicy() == RetentionPolicy.consumer_backlog_eviction, "after `set-backlog-quota -l 10M`: " + map);
            check(age != null && age.getLimitTime() == 3600 && age.getPolicy() == RetentionPolicy.consumer_backlog_eviction,
                    "after `set-backlog-quota -lt 1h -t message_age`: " + map);
            cli.run("namespaces", "get-backlog-quotas", ns).prints("destination_storage", "message_age",
                    "limitSize=10485760", "limitTime=3600", "policy=consumer_backlog_eviction");
            cli.run("namespaces", "remove-backlog-quota", ns, "-t", "message_age").ok();
            cli.run("namespaces", "remove-backlog-quota", ns).ok();
            map = r.ok("getBacklogQuotaMap", () -> n.getBacklogQuotaMap(ns));
            check(map.isEmpty(), "after both `remove-backlog-quota`: " + map);
            cli.run("namespaces", "set-backlog-quota", ns, "-l", "10M", "-p", "producer_request_hold").ok();
            map = r.ok("getBacklogQuotaMap", () -> n.getBacklogQuotaMap(ns));
            BacklogQuota hold = map.get(BacklogQuotaType.destination_storage);
            check(hold != null && hold.getPolicy() == RetentionPolicy.producer_request_hold,
                    "after `set-backlog-quota -p producer_request_hold`: " + map);
        }
    }

    @Scenario("cli_retention")

    @Timeout(Cli.SCENARIO_TIMEOUT_S)
    void retention(Report report) {
        try (Rig r = Rig.start("cli-retention")) {
            Cli cli = r.cli();
            var n = r.admin.namespaces();
            String ns = "public/" + Rig.unique("ret");
            r.ok("createNamespace", () -> n.createNamespace(ns));
            cli.run("namespaces", "set-retention", ns, "--time", "10m", "--size", "10M").ok();
            RetentionPolicies got = r.ok("getRetention", () -> n.getRetention(ns));
            check(got != null && got.getRetentionTimeInMinutes() == 10 && got.getRetentionSizeInMB() == 10,
                    "after `set-retention --time 10m --size 10M`: " + got);
            cli.run("namespaces", "get-retention", ns).prints("\"retentionTimeInMinutes\" : 10",
                    "\"retentionSizeInMB\" : 10");
            // A time without a size: refused (412), nothing changed.
            cli.run("namespaces", "set-retention", ns, "--time", "20m", "--size", "0").refused("Invalid retention policy");
            got = r.ok("getRetention", () -> n.getRetention(ns));
            check(got != null && got.getRetentionTimeInMinutes() == 10,
                    "a refused `set-retention --time 20m --size 0` changed the retention: " + got);
            cli.run("namespaces", "remove-retention", ns).ok();
            got = r.ok("getRetention", () -> n.getRetention(ns));
            check(got == null, "after `remove-retention`: " + got);
        }
    }

    @Scenario("cli_deduplication")

    @Timeout(Cli.SCENARIO_TIMEOUT_S)
    void deduplication(Report report) throws Exception {
        try (Rig r = Rig.start("cli-dedup")) {
            Cli cli = r.cli();
            var n = r.admin.namespaces();
            String ns = "public/" + Rig.unique("dedup");
            r.ok("createNamespace", () -> n.createNamespace(ns));
            cli.run("namespaces", "set-deduplication", ns, "--enable").ok();
            Boolean on = r.ok("getDeduplicationStatus", () -> n.getDeduplicationStatus(ns));
            check(Boolean.TRUE.equals(on), "after `set-deduplication --enable`: " + on);
            Cli.Result get = cli.run("namespaces", "get-deduplication", ns).ok();
            check(get.out().strip().equals("true"), "`get-deduplication`: " + get.describe());

            // The effect: sequence id 1 resent by a producer of the same name is not stored.
            String topic = "persistent://" + ns + "/" + Rig.unique("t");
            try (Producer<byte[]> p = named(r, topic)) {
                Fixtures.send(p, "m", 2);
            }
            try (Producer<byte[]> p = named(r, topic)) {
                check(p.getLastSequenceId() == 1, "the producer resumes after " + p.getLastSequenceId() + ", expected 1");
                p.newMessage().sequenceId(1).value("again".getBytes()).send();
            }
            long in = r.ok("getStats", () -> r.admin.topics().getStats(topic)).getMsgInCounter();
            check(in == 2, "deduplication set by `set-deduplication --enable`: a resent sequence id was stored, "
                    + "msgInCounter = " + in + ", expected 2");

            cli.run("namespaces", "remove-deduplication", ns).ok();
            on = r.ok("getDeduplicationStatus", () -> n.getDeduplicationStatus(ns));
            check(on == null, "after `remove-deduplication`: " + on);
            report.messages(3);
        }
    }

    private static Producer<byte[]> named(Rig r, String topic) throws PulsarClientException {
        return r.client().newProducer().topic(topic).producerName("cli-dedup-p").enableBatching(false).create();
    }

    @Scenario("cli_producer_consumer_limits")

    @Timeout(Cli.SCENARIO_TIMEOUT_S)
    void limits(Report report) throws Exception {
        try (Rig r = Rig.start("cli-limits")) {
            Cli cli = r.cli();
            var n = r.admin.namespaces();
            String ns = "public/" + Rig.unique("limits");
            r.ok("createNamespace", () -> n.createNamespace(ns));
            cli.run("namespaces", "set-max-producers-per-topic", ns, "-p", "1").ok();
            cli.run("namespaces", "set-max-consumers-per-topic", ns, "-c", "2").ok();
            cli.run("namespaces", "set-max-consumers-per-subscription", ns, "-c", "3").ok();
            Integer p = r.ok("getMaxProducersPerTopic", () -> n.getMaxProducersPerTopic(ns));
            Integer ct = r.ok("getMaxConsumersPerTopic", () -> n.getMaxConsumersPerTopic(ns));
            Integer cs = r.ok("getMaxConsumersPerSubscription", () -> n.getMaxConsumersPerSubscription(ns));
            check(Integer.valueOf(1).equals(p) && Integer.valueOf(2).equals(ct) && Integer.valueOf(3).equals(cs),
                    "after the three `set-max-…` commands (1, 2, 3): producers " + p + ", consumers a topic " + ct
                            + ", consumers a subscription " + cs);
            Cli.Result get = cli.run("namespaces", "get-max-producers-per-topic", ns).ok();
            check(get.out().strip().equals("1"), "`get-max-producers-per-topic`: " + get.describe());

            // The effect: a second producer is refused.
            String topic = "persistent://" + ns + "/" + Rig.unique("t");
            try (Producer<byte[]> first = Fixtures.producer(r, topic)) {
                String refusal = ApiNamespacePoliciesTest.refusedClient("a second producer (max 1 a topic)",
                        PulsarClientException.ProducerBusyException.class, "Topic reached max producers limit",
                        () -> Fixtures.producer(r, topic).close());
                report.note(refusal);
            }

            // One remove (the consumer limits' removes are the same path with another name; the
            // Java API scenario removes all three).
            cli.run("namespaces", "remove-max-producers-per-topic", ns).ok();
            p = r.ok("getMaxProducersPerTopic", () -> n.getMaxProducersPerTopic(ns));
            ct = r.ok("getMaxConsumersPerTopic", () -> n.getMaxConsumersPerTopic(ns));
            check(p == null && Integer.valueOf(2).equals(ct), "after `remove-max-producers-per-topic`: producers " + p
                    + ", consumers a topic " + ct + " (expected none and 2)");
            try (Producer<byte[]> a = Fixtures.producer(r, topic); Producer<byte[]> b = Fixtures.producer(r, topic)) {
                check(a.isConnected() && b.isConnected(), "two producers after `remove-max-producers-per-topic`");
            }
        }
    }
}
