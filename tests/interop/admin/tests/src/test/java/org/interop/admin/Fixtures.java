package org.interop.admin;

import static org.interop.harness.Check.check;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageIdAdv;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.common.policies.data.SubscriptionStats;
import org.apache.pulsar.common.policies.data.TopicStats;
import org.interop.harness.Check;
import org.interop.harness.Rig;

/** What the scenarios set up with the stock client, and what they read back with the admin API. */
final class Fixtures {
    static final String NS = "public/default";

    private Fixtures() {}

    /** {@code persistent://public/default/<stem>-<random>}. */
    static String topic(String stem) {
        return "persistent://" + NS + "/" + Rig.unique(stem);
    }

    /** A producer with batching off (one message, one entry). */
    static Producer<byte[]> producer(Rig r, String topic) throws PulsarClientException {
        return r.client().newProducer().topic(topic).enableBatching(false).create();
    }

    /** Sends {@code prefix0 … prefix(n-1)}; the message ids. */
    static List<MessageId> send(Producer<byte[]> p, String prefix, int n) throws PulsarClientException {
        List<MessageId> ids = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            ids.add(p.send((prefix + i).getBytes(StandardCharsets.UTF_8)));
        }
        return ids;
    }

    /** Opens and closes a consumer: a durable subscription from the earliest message, no consumer. */
    static void subscription(Rig r, String topic, String sub) throws PulsarClientException {
        try (Consumer<byte[]> c = r.client().newConsumer().topic(topic).subscriptionName(sub)
                .subscriptionType(SubscriptionType.Exclusive)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            check(c.isConnected(), "consumer on " + topic + " not connected");
        }
    }

    /** {@code topics().getStats(topic).subscriptions[sub].msgBacklog}. */
    static long backlog(Rig r, String topic, String sub) {
        TopicStats s = r.ok("topics().getStats(" + topic + ")", () -> r.admin.topics().getStats(topic));
        Map<String, ? extends SubscriptionStats> subs = s.getSubscriptions();
        check(subs.containsKey(sub), "getStats(" + topic + "): no subscription " + sub + " in " + subs.keySet());
        return subs.get(sub).getMsgBacklog();
    }

    /** Polls the backlog until it is {@code want} (at most {@code seconds}); fails with the last value. */
    static void awaitBacklog(Rig r, String topic, String sub, long want, double seconds, String after) {
        awaitBacklog(r, topic, sub, want, seconds, after, "");
    }

    /** As above; {@code evidence} (the HTTP exchanges of the call) is added to a failure's message. */
    static void awaitBacklog(Rig r, String topic, String sub, long want, double seconds, String after,
            String evidence) {
        Check.Deadline d = new Check.Deadline(seconds);
        long got = backlog(r, topic, sub);
        while (got != want && !d.expired()) {
            Check.sleepMs(50);
            got = backlog(r, topic, sub);
        }
        check(got == want, "after " + after + ": backlog of " + sub + " is " + got + ", expected " + want
                + (evidence.isEmpty() ? "" : "; the call's HTTP exchanges:" + evidence));
    }

    /** "ledger:entry" of a message id, as pulsar-admin takes it. */
    static String ledgerEntry(MessageId id) {
        MessageIdAdv a = (MessageIdAdv) id;
        return a.getLedgerId() + ":" + a.getEntryId();
    }

    static String text(Message<byte[]> m) {
        return new String(m.getValue(), StandardCharsets.UTF_8);
    }
}
