package org.interop.admin;

import static org.interop.harness.Check.check;

import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdminException.NotFoundException;
import org.apache.pulsar.client.api.MessageRoutingMode;
import org.apache.pulsar.client.api.Producer;
import org.interop.harness.Cli;
import org.interop.harness.Report;
import org.interop.harness.Rig;
import org.interop.harness.Scenario;
import org.junit.jupiter.api.Timeout;

/**
 * {@code pulsar-admin topics}: partitioned and non-partitioned topics, stats, internal stats and
 * subscriptions; what the commands did is checked with the Java admin API and the stock client.
 */
class CliTopicsTest {
    @Scenario("cli_partitioned_topic")
    @Timeout(Cli.SCENARIO_TIMEOUT_S)
    void partitioned(Report report) throws Exception {
        try (Rig r = Rig.start("cli-partitioned")) {
            Cli cli = r.cli();
            String topic = Fixtures.topic("part");
            cli.run("topics", "create-partitioned-topic", topic, "-p", "3").ok();
            List<String> parts = r.client().getPartitionsForTopic(topic).get(5, TimeUnit.SECONDS);
            check(parts.size() == 3, "after `create-partitioned-topic -p 3` the stock client sees " + parts);
            cli.run("topics", "get-partitioned-topic-metadata", topic).prints("\"partitions\" : 3");
            cli.run("topics", "update-partitioned-topic", topic, "-p", "4").ok();
            int n = r.ok("getPartitionedTopicMetadata", () -> r.admin.topics().getPartitionedTopicMetadata(topic)).partitions;
            check(n == 4, "after `update-partitioned-topic -p 4`: " + n + " partitions");
            try (Producer<byte[]> p = r.client().newProducer().topic(topic).enableBatching(false)
                    .messageRoutingMode(MessageRoutingMode.RoundRobinPartition).create()) {
                Fixtures.send(p, "m", 8);
            }
            cli.run("topics", "partitioned-stats", topic).prints("\"msgInCounter\" : 8", "\"partitions\" : 4");

            cli.run("topics", "update-partitioned-topic", topic, "-p", "2").refused("can't less than current partitions");
            cli.run("topics", "delete-partitioned-topic", topic).ok();
            r.refused("getPartitionedTopicMetadata after `delete-partitioned-topic`", NotFoundException.class, 404, null,
                    () -> r.admin.topics().getPartitionedTopicMetadata(topic));
            cli.run("topics", "delete-partitioned-topic", topic).refused("not found");
            report.messages(8);
        }
    }

    @Scenario("cli_list_partitioned_topics")

    @Timeout(Cli.SCENARIO_TIMEOUT_S)
    void listPartitioned(Report report) {
        try (Rig r = Rig.start("cli-partitioned-list")) {
            String topic = Fixtures.topic("part");
            r.ok("createPartitionedTopic", () -> r.admin.topics().createPartitionedTopic(topic, 2));
            Cli.Result list = r.cli().run("topics", "list-partitioned-topics", Fixtures.NS).ok();
            check(list.out().strip().equals(topic), "`list-partitioned-topics`: " + list.describe());
        }
    }

    @Scenario("cli_topics")

    @Timeout(Cli.SCENARIO_TIMEOUT_S)
    void topics(Report report) throws Exception {
        // Auto-creation off: `topics create` makes the topic.
        try (Rig r = Rig.start("cli-topics", "--allow-auto-topic-creation", "false")) {
            Cli cli = r.cli();
            String topic = Fixtures.topic("plain");
            cli.run("topics", "create", topic).ok();
            check(r.ok("getList", () -> r.admin.topics().getList(Fixtures.NS)).contains(topic),
                    "`topics create` did not make " + topic);
            Fixtures.subscription(r, topic, "sub");
            try (Producer<byte[]> p = Fixtures.producer(r, topic)) {
                Fixtures.send(p, "m", 5);
                Cli.Result list = cli.run("topics", "list", Fixtures.NS).ok();
                check(List.of(list.out().strip().split("\n")).contains(topic), "`topics list`: " + list.describe());
                cli.run("topics", "stats", topic).prints("\"msgInCounter\" : 5", "\"sub\"", "\"msgBacklog\" : 5");
                cli.run("topics", "stats-internal", topic).prints("\"entriesAddedCounter\" : 5", "\"sub\"",
                        "\"markDeletePosition\"");
                Cli.Result subs = cli.run("topics", "subscriptions", topic).ok();
                check(subs.out().strip().equals("sub"), "`topics subscriptions`: " + subs.describe());
                cli.run("topics", "create", topic).refused("This topic already exists");
                // pulsar-admin 4.0.8's `topics delete` (which takes a list of topics) prints a
                // refused delete ("Failed to delete topic: …") and still exits 0.
                cli.run("topics", "delete", topic).prints("Failed to delete topic",
                        "PreconditionFailedException: Topic has 1 connected producers/consumers");
                check(r.ok("getList", () -> r.admin.topics().getList(Fixtures.NS)).contains(topic),
                        "a refused `topics delete` deleted " + topic);
            }
            cli.run("topics", "terminate", topic).prints("successfully terminated");
            cli.run("topics", "delete", topic).ok();
            check(!r.ok("getList", () -> r.admin.topics().getList(Fixtures.NS)).contains(topic),
                    "`topics delete` left " + topic);
            cli.run("topics", "stats", topic).refused("not found");
            report.messages(5);
        }
    }
}
