package org.interop.admin;

import static org.interop.harness.Check.check;

import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.List;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageIdAdv;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.SubscriptionType;
import org.interop.admin.ApiMessagesTest.Sent;
import org.interop.harness.Check;
import org.interop.harness.Cli;
import org.interop.harness.Report;
import org.interop.harness.Rig;
import org.interop.harness.Scenario;
import org.junit.jupiter.api.Timeout;

/**
 * {@code pulsar-admin topics} on a topic's subscriptions and messages: {@code create-subscription},
 * {@code unsubscribe} (and {@code -f}), {@code unload}; {@code peek-messages},
 * {@code examine-messages}, {@code get-message-by-id}, {@code last-message-id},
 * {@code get-message-id} printing what a stock producer sent (the tool prints the id, the
 * properties and a hex dump of the payload; not the key); and {@code set-retention} on a topic and
 * {@code compact}, which the broker refuses. Effects are read back with the Java admin API.
 */
class CliMessagesTest {
    @Scenario("cli_subscriptions")
    @Timeout(Cli.SCENARIO_TIMEOUT_S)
    void subscriptions(Report report) throws Exception {
        try (Rig r = Rig.start("cli-subscriptions")) {
            Cli cli = r.cli();
            var t = r.admin.topics();
            String topic = Fixtures.topic("subs");
            ApiMessagesTest.sendThree(r, topic);
            cli.run("topics", "create-subscription", topic, "-s", "s1", "-m", "earliest").ok();
            Fixtures.awaitBacklog(r, topic, "s1", 3, 3, "`create-subscription -s s1 -m earliest`");
            cli.run("topics", "unsubscribe", topic, "-s", "s1").ok();
            List<String> subs = r.ok("getSubscriptions", () -> t.getSubscriptions(topic));
            check(!subs.contains("s1"), "after `unsubscribe -s s1`: " + subs);

            // -f with a consumer connected: the subscription (backlog 3) goes; the client
            // subscribes again by itself, at the latest message.
            r.ok("createSubscription(earliest)", () -> t.createSubscription(topic, "s2", MessageId.earliest));
            Consumer<byte[]> busy = r.client().newConsumer().topic(topic).subscriptionName("s2")
                    .subscriptionType(SubscriptionType.Shared).subscribe();
            try {
                Fixtures.awaitBacklog(r, topic, "s2", 3, 3, "createSubscription(s2, earliest)");
                Cli.Result forced = cli.run("topics", "unsubscribe", topic, "-f", "-s", "s2").ok();
                Check.waitUntil(() -> !r.ok("getSubscriptions", () -> t.getSubscriptions(topic)).contains("s2")
                        || Fixtures.backlog(r, topic, "s2") == 0, 5,
                        "`unsubscribe -f -s s2` to remove s2 (backlog 3):" + forced.http());
            } finally {
                busy.closeAsync();
            }

            cli.run("topics", "unload", topic).ok();
            r.ok("createSubscription(latest)", () -> t.createSubscription(topic, "s3", MessageId.latest));
            try (Producer<byte[]> p = Fixtures.producer(r, topic)) {
                p.send("after-unload".getBytes(StandardCharsets.UTF_8));
            }
            Fixtures.awaitBacklog(r, topic, "s3", 1, 3, "`topics unload` and one more message");
            report.messages(4);
        }
    }

    @Scenario("cli_messages")

    @Timeout(Cli.SCENARIO_TIMEOUT_S)
    void messages(Report report) throws Exception {
        try (Rig r = Rig.start("cli-messages")) {
            Cli cli = r.cli();
            String topic = Fixtures.topic("msgs");
            Sent sent = ApiMessagesTest.sendThree(r, topic);
            List<MessageId> ids = sent.ids();
            r.ok("createSubscription(earliest)", () -> r.admin.topics().createSubscription(topic, "s", MessageId.earliest));

            // The tool prints each message's id, its properties (as JSON) and a hex dump of its
            // payload; the properties are checked last, after every command ran.
            int peekMark = r.http.mark();
            Cli.Result peek = cli.run("topics", "peek-messages", topic, "-s", "s", "-n", "2").prints(
                    "Message ID: " + Fixtures.ledgerEntry(ids.get(0)), "|hello-0",
                    "Message ID: " + Fixtures.ledgerEntry(ids.get(1)), "|hello-1");
            check(!peek.out().contains("hello-2"), "`peek-messages -n 2` printed a third message: " + peek.describe());
            Fixtures.awaitBacklog(r, topic, "s", 3, 3, "`peek-messages` (which does not consume)");
            Cli.Result examine = cli.run("topics", "examine-messages", topic, "-i", "earliest", "-m", "1").prints(
                    "Message ID: " + Fixtures.ledgerEntry(ids.get(0)), "|hello-0");
            MessageIdAdv second = (MessageIdAdv) ids.get(1);
            Cli.Result byId = cli.run("topics", "get-message-by-id", topic, "-l", Long.toString(second.getLedgerId()),
                    "-e", Long.toString(second.getEntryId())).prints("Message ID: " + Fixtures.ledgerEntry(second),
                    "|hello-1");
            MessageIdAdv third = (MessageIdAdv) ids.get(2);
            cli.run("topics", "last-message-id", topic).prints("\"ledgerId\" : " + third.getLedgerId(),
                    "\"entryId\" : " + third.getEntryId());
            String between = DateTimeFormatter.ISO_OFFSET_DATE_TIME.format(
                    Instant.ofEpochMilli(sent.between()).atOffset(ZoneOffset.UTC));
            cli.run("topics", "get-message-id", topic, "-d", between).prints(
                    "\"ledgerId\" : " + second.getLedgerId(), "\"entryId\" : " + second.getEntryId());

            // Pulsar 4.x admin clients read the properties from one header, `X-Pulsar-PROPERTY`
            // holding a JSON object (apache/pulsar#20627).
            String head = ApiMessagesTest.responseHead(r, peekMark);
            List<String> missing = new java.util.ArrayList<>();
            // The CLI prints each property as `key<spaces>value` under `Properties:`.
            for (var c : List.of(List.of(peek, "v-0"), List.of(peek, "v-1"),
                    List.of(examine, "v-0"), List.of(byId, "v-1"))) {
                Cli.Result res = (Cli.Result) c.get(0);
                java.util.regex.Pattern line = java.util.regex.Pattern.compile(
                        "(?m)^p\\s+" + java.util.regex.Pattern.quote((String) c.get(1)) + "$");
                if (!res.out().contains("Properties:") || !line.matcher(res.out()).find()) {
                    missing.add("`pulsar-admin " + res.command().replaceAll("persistent://\\S+", "T") + "` printed no "
                            + "`Properties:` with " + c.get(1));
                }
            }
            check(missing.isEmpty(), "the producer's property p=v-i did not reach pulsar-admin: " + String.join("; ", missing)
                    + "; the first peek's response: " + head);
            report.messages(3);
        }
    }

    @Scenario("cli_topic_policy_compaction_refused")

    @Timeout(Cli.SCENARIO_TIMEOUT_S)
    void topicPolicyRefused(Report report) {
        try (Rig r = Rig.start("cli-topic-policy")) {
            Cli cli = r.cli();
            String topic = Fixtures.topic("policy");
            r.ok("createNonPartitionedTopic", () -> r.admin.topics().createNonPartitionedTopic(topic));
            cli.run("topics", "set-retention", topic, "-t", "10m", "-s", "10M").refused("retention");
            cli.run("topics", "compact", topic).refused("compaction");
        }
    }
}
