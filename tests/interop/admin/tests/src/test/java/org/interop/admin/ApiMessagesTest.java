package org.interop.admin;

import static org.interop.harness.Check.check;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.admin.PulsarAdminException.ConflictException;
import org.apache.pulsar.client.admin.PulsarAdminException.NotFoundException;
import org.apache.pulsar.client.admin.PulsarAdminException.PreconditionFailedException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.common.policies.data.RetentionPolicies;
import org.interop.harness.Check;
import org.interop.harness.Report;
import org.interop.harness.Rig;
import org.interop.harness.Scenario;

/**
 * A topic's subscriptions and messages through the Java admin API: {@code createSubscription}
 * (earliest, latest, at a message id), {@code deleteSubscription} (refused with a consumer,
 * forced), {@code unload}; the messages a stock producer sent (payload, key, property, producer
 * name, sequence id, id) as {@code peekMessages}, {@code examineMessage}, {@code getMessagesById},
 * {@code getLastMessageId} and {@code getMessageIdByTimestamp} give them back; a topic policy and
 * compaction, which the broker refuses by name.
 */
class ApiMessagesTest {
    static final String PRODUCER = "admin-msgs";

    /** What a stock producer sent: {@code hello-i} with key {@code k-i} and property {@code p=v-i}. */
    record Sent(List<MessageId> ids, long between) {}

    /**
     * Sends three messages ({@code hello-0..2}, key {@code k-i}, property {@code p=v-i}) from a
     * producer named {@link #PRODUCER}; {@code between} is a time after the first and at or before
     * the second's publish time.
     */
    static Sent sendThree(Rig r, String topic) throws Exception {
        List<MessageId> ids = new ArrayList<>();
        long between = 0;
        try (Producer<byte[]> p = r.client().newProducer().topic(topic).producerName(PRODUCER)
                .enableBatching(false).create()) {
            for (int i = 0; i < 3; i++) {
                if (i == 1) {
                    Check.sleepMs(30);
                    between = System.currentTimeMillis();
                    Check.sleepMs(30);
                }
                ids.add(p.newMessage().key("k-" + i).property("p", "v-" + i)
                        .value(("hello-" + i).getBytes(StandardCharsets.UTF_8)).send());
            }
        }
        return new Sent(ids, between);
    }

    /**
     * Fails unless {@code m} is message {@code i} of {@link #sendThree} (payload, key, producer name,
     * sequence id, message id, a publish time); its property is only noted in {@code props} (a
     * mismatch there is reported at the end of the scenario, after every other call ran).
     */
    static void isSent(String what, Message<byte[]> m, Sent sent, int i, List<String> props) {
        check(m != null, what + ": no message");
        String got = "payload `" + Fixtures.text(m) + "`, key " + m.getKey() + ", properties " + m.getProperties()
                + ", producer " + m.getProducerName() + ", sequence id " + m.getSequenceId() + ", id "
                + m.getMessageId();
        String want = "hello-" + i + " / k-" + i + " / p=v-" + i + " / " + PRODUCER + " / " + i + " / "
                + Fixtures.ledgerEntry(sent.ids().get(i));
        check(Fixtures.text(m).equals("hello-" + i), what + ": " + got + "; expected " + want);
        check(("k-" + i).equals(m.getKey()), what + ": " + got + "; expected " + want);
        check(PRODUCER.equals(m.getProducerName()), what + ": " + got + "; expected " + want);
        check(m.getSequenceId() == i, what + ": " + got + "; expected " + want);
        check(Fixtures.ledgerEntry(m.getMessageId()).equals(Fixtures.ledgerEntry(sent.ids().get(i))),
                what + ": " + got + "; expected " + want);
        check(m.getPublishTime() > 0, what + ": publish time " + m.getPublishTime());
        if (!m.getProperties().equals(java.util.Map.of("p", "v-" + i))) {
            props.add(what + ": properties " + m.getProperties() + ", expected {p=v-" + i + "}");
        }
    }

    /** The response head (status line and headers) of the first exchange since {@code mark}. */
    static String responseHead(Rig r, int mark) {
        r.http.describe(mark); // waits for the relays in flight
        var ex = r.http.since(mark);
        if (ex.isEmpty()) {
            return "(no exchange)";
        }
        String req = ex.get(0).requestLine();
        String resp = ex.get(0).response();
        int end = resp.indexOf("\r\n\r\n");
        return req + " -> " + (end < 0 ? resp : resp.substring(0, end)).replace("\r\n", " | ");
    }

    @Scenario("api_subscriptions")
    void subscriptions(Report report) throws Exception {
        try (Rig r = Rig.start("api-subscriptions")) {
            var t = r.admin.topics();
            String topic = Fixtures.topic("subs");
            Sent sent = sendThree(r, topic);
            r.ok("createSubscription(earliest)", () -> t.createSubscription(topic, "from-earliest", MessageId.earliest));
            r.ok("createSubscription(latest)", () -> t.createSubscription(topic, "from-latest", MessageId.latest));
            r.ok("createSubscription(id of hello-1)", () -> t.createSubscription(topic, "from-1", sent.ids().get(1)));
            List<String> subs = r.ok("getSubscriptions", () -> t.getSubscriptions(topic));
            check(subs.containsAll(List.of("from-earliest", "from-latest", "from-1")) && subs.size() == 3,
                    "getSubscriptions after three createSubscription = " + subs);
            Fixtures.awaitBacklog(r, topic, "from-earliest", 3, 3, "createSubscription(earliest)");
            Fixtures.awaitBacklog(r, topic, "from-latest", 0, 3, "createSubscription(latest)");
            Fixtures.awaitBacklog(r, topic, "from-1", 2, 3, "createSubscription(id of hello-1)");
            // A consumer of from-1 gets hello-1 first.
            try (Consumer<byte[]> c = r.client().newConsumer().topic(topic).subscriptionName("from-1")
                    .subscriptionType(SubscriptionType.Exclusive).subscribe()) {
                Message<byte[]> m = c.receive(5, java.util.concurrent.TimeUnit.SECONDS);
                check(m != null && Fixtures.text(m).equals("hello-1"), "the first message on a subscription created "
                        + "at hello-1's id: " + (m == null ? "none" : Fixtures.text(m)));
            }
            r.refused("createSubscription (exists)", ConflictException.class, 409, "Subscription already exists",
                    () -> t.createSubscription(topic, "from-latest", MessageId.latest));
            r.refused("createSubscription (no topic)", NotFoundException.class, 404, null,
                    () -> t.createSubscription(Fixtures.topic("nope"), "s", MessageId.earliest));

            r.ok("deleteSubscription", () -> t.deleteSubscription(topic, "from-latest"));
            subs = r.ok("getSubscriptions", () -> t.getSubscriptions(topic));
            check(!subs.contains("from-latest"), "getSubscriptions after deleteSubscription(from-latest) = " + subs);
            r.refused("deleteSubscription (deleted)", NotFoundException.class, 404, null,
                    () -> t.deleteSubscription(topic, "from-latest"));

            // A consumer connected: refused; forced: the subscription (backlog 3, unacked 3) goes.
            // The client re-subscribes by itself, which makes a new one at the latest message.
            Consumer<byte[]> busy = r.client().newConsumer().topic(topic).subscriptionName("from-earliest")
                    .subscriptionType(SubscriptionType.Shared).subscribe();
            try {
                r.refused("deleteSubscription (a consumer connected)", PreconditionFailedException.class, 412,
                        "active connected consumers", () -> t.deleteSubscription(topic, "from-earliest"));
                check(Fixtures.backlog(r, topic, "from-earliest") == 3, "a refused deleteSubscription changed the "
                        + "backlog to " + Fixtures.backlog(r, topic, "from-earliest"));
                r.ok("deleteSubscription(force)", () -> t.deleteSubscription(topic, "from-earliest", true));
                Check.waitUntil(() -> !r.ok("getSubscriptions", () -> t.getSubscriptions(topic)).contains("from-earliest")
                        || Fixtures.backlog(r, topic, "from-earliest") == 0, 5,
                        "deleteSubscription(force) to remove from-earliest (backlog 3)");
            } finally {
                busy.closeAsync();
            }

            r.ok("unload", () -> t.unload(topic));
            // Unloading is a no-op here: the topic and its messages stay, producing goes on.
            try (Producer<byte[]> p = Fixtures.producer(r, topic)) {
                p.send("after-unload".getBytes(StandardCharsets.UTF_8));
            }
            Fixtures.awaitBacklog(r, topic, "from-1", 3, 3, "unload and one more message");
            r.refused("unload (no topic)", NotFoundException.class, 404, null, () -> t.unload(Fixtures.topic("nope")));
            report.messages(4);
        }
    }

    @Scenario("api_messages")
    void messages(Report report) throws Exception {
        try (Rig r = Rig.start("api-messages")) {
            var t = r.admin.topics();
            String topic = Fixtures.topic("msgs");
            Sent sent = sendThree(r, topic);
            r.ok("createSubscription(earliest)", () -> t.createSubscription(topic, "s", MessageId.earliest));

            List<String> props = new ArrayList<>();
            int peekMark = r.http.mark();
            List<Message<byte[]>> peeked = r.ok("peekMessages(2)", () -> t.peekMessages(topic, "s", 2));
            String peekResponse = responseHead(r, peekMark);
            check(peeked.size() == 2, "peekMessages(s, 2) gave " + peeked.size() + " messages");
            isSent("peekMessages #1", peeked.get(0), sent, 0, props);
            isSent("peekMessages #2", peeked.get(1), sent, 1, props);
            Fixtures.awaitBacklog(r, topic, "s", 3, 3, "peekMessages (which does not consume)");

            Message<byte[]> m = r.ok("examineMessage(earliest, 1)", () -> t.examineMessage(topic, "earliest", 1));
            isSent("examineMessage(earliest, 1)", m, sent, 0, props);
            m = r.ok("examineMessage(latest, 1)", () -> t.examineMessage(topic, "latest", 1));
            isSent("examineMessage(latest, 1)", m, sent, 2, props);
            m = r.ok("examineMessage(earliest, 2)", () -> t.examineMessage(topic, "earliest", 2));
            isSent("examineMessage(earliest, 2)", m, sent, 1, props);

            long l = ((org.apache.pulsar.client.api.MessageIdAdv) sent.ids().get(1)).getLedgerId();
            long e = ((org.apache.pulsar.client.api.MessageIdAdv) sent.ids().get(1)).getEntryId();
            List<Message<byte[]>> byId = r.ok("getMessagesById(" + l + ", " + e + ")", () -> t.getMessagesById(topic, l, e));
            check(byId.size() == 1, "getMessagesById gave " + byId.size() + " messages");
            isSent("getMessagesById", byId.get(0), sent, 1, props);
            @SuppressWarnings("deprecation")
            Message<byte[]> one = r.ok("getMessageById", () -> t.getMessageById(topic, l, e));
            isSent("getMessageById", one, sent, 1, props);

            MessageId last = r.ok("getLastMessageId", () -> t.getLastMessageId(topic));
            check(Fixtures.ledgerEntry(last).equals(Fixtures.ledgerEntry(sent.ids().get(2))),
                    "getLastMessageId = " + last + ", the last message sent is " + sent.ids().get(2));
            MessageId at = r.ok("getMessageIdByTimestamp", () -> t.getMessageIdByTimestamp(topic, sent.between()));
            check(Fixtures.ledgerEntry(at).equals(Fixtures.ledgerEntry(sent.ids().get(1))),
                    "getMessageIdByTimestamp(a time between hello-0 and hello-1) = " + at + ", expected hello-1's "
                            + sent.ids().get(1));

            r.refused("getMessagesById (no such entry)", NotFoundException.class, 404, null,
                    () -> t.getMessagesById(topic, l, e + 100));
            r.refused("examineMessage(earliest, 4) (past the last)", NotFoundException.class, 404, null,
                    () -> t.examineMessage(topic, "earliest", 4));
            r.refused("examineMessage(earliest, 0)", PreconditionFailedException.class, 412, null,
                    () -> t.examineMessage(topic, "earliest", 0));
            r.refused("getMessageIdByTimestamp (after the last)", NotFoundException.class, 404, null,
                    () -> t.getMessageIdByTimestamp(topic, System.currentTimeMillis() + 60_000));
            r.refused("getLastMessageId (no topic)", NotFoundException.class, 404, null,
                    () -> t.getLastMessageId(Fixtures.topic("nope")));
            report.messages(3);
            report.note("ids " + sent.ids());
            // Pulsar 4.x admin clients read a message's properties from one header,
            // `X-Pulsar-PROPERTY: {"p":"v-0"}` (a JSON object, apache/pulsar#20627).
            check(props.isEmpty(), "the producer's property p=v-i did not reach the admin API: " + String.join("; ", props)
                    + "; the first peek's response: " + peekResponse);
        }
    }

    @Scenario("api_topic_policy_compaction_refused")
    void topicPolicyRefused(Report report) throws Exception {
        try (Rig r = Rig.start("api-topic-policy")) {
            String topic = Fixtures.topic("policy");
            r.ok("createNonPartitionedTopic", () -> r.admin.topics().createNonPartitionedTopic(topic));
            PulsarAdminException e1 = r.refused("topicPolicies().setRetention", PulsarAdminException.class, 400,
                    "retention", () -> r.admin.topicPolicies().setRetention(topic, new RetentionPolicies(10, 10)));
            PulsarAdminException e2 = r.refused("triggerCompaction", PulsarAdminException.class, 400, "compaction",
                    () -> r.admin.topics().triggerCompaction(topic));
            // Nothing else changed: the topic still takes messages.
            try (Producer<byte[]> p = Fixtures.producer(r, topic)) {
                p.send("x".getBytes(StandardCharsets.UTF_8));
            } catch (PulsarClientException e) {
                throw new Check.ScenarioFailure("producing after the refusals: " + e);
            }
            report.messages(1);
            report.note("setRetention: " + e1.getMessage() + "; triggerCompaction: " + e2.getMessage());
        }
    }
}
