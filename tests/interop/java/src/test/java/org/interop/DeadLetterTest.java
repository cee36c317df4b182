package org.interop;

import static org.interop.harness.Check.check;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.DeadLetterPolicy;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.interop.harness.Admin;
import org.interop.harness.Broker;
import org.interop.harness.Check;
import org.interop.harness.Clients;
import org.interop.harness.Json;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

class DeadLetterTest {
    private static Consumer<byte[]> dlqConsumer(PulsarClient cl, String dlq) throws Exception {
        return cl.newConsumer().topic(dlq).subscriptionName("dlq-reader").subscriptionType(SubscriptionType.Shared)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
    }

    /**
     * {@code deadLetterPolicy(maxRedeliverCount 2, deadLetterTopic)}: the DLQ consumer subscribes
     * first; 3 messages (key, property) are nacked every time (nack delay 100 ms); each is seen with
     * redelivery counts 0, 1, 2, then the client moves it to the DLQ (its own producer there) and
     * acks it: the DLQ consumer gets the 3 with payload, key and property; the backlog is 0.
     */
    @Scenario("dead_letter_topic")
    void deadLetter(Report report) throws Exception {
        try (Broker b = Broker.start("dead-letter");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("dlq-src");
            String dlq = topic + "-DLQ";
            Consumer<byte[]> dead = dlqConsumer(cl, dlq);
            Consumer<byte[]> c = cl.newConsumer().topic(topic).subscriptionName("sub")
                    .subscriptionType(SubscriptionType.Shared)
                    .negativeAckRedeliveryDelay(100, TimeUnit.MILLISECONDS)
                    .deadLetterPolicy(DeadLetterPolicy.builder().maxRedeliverCount(2).deadLetterTopic(dlq).build())
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false).create();
            for (int i = 0; i < 3; i++) {
                p.newMessage().key("k" + i).property("origin", "m" + i).value(Clients.bytes("m" + i)).send();
            }
            Map<String, List<Integer>> counts = new TreeMap<>();
            Check.Deadline d = new Check.Deadline(15);
            List<Message<byte[]>> dead_ = new ArrayList<>();
            while (!d.expired() && dead_.size() < 3) {
                Message<byte[]> m = Clients.receive(c, 50);
                if (m != null) {
                    counts.computeIfAbsent(Clients.text(m), k -> new ArrayList<>()).add(m.getRedeliveryCount());
                    c.negativeAcknowledge(m);
                }
                Message<byte[]> x = Clients.receive(dead, 10);
                if (x != null) {
                    dead_.add(x);
                    dead.acknowledge(x);
                }
            }
            check(dead_.size() == 3, "the DLQ got " + dead_.size() + " of 3 messages; deliveries " + counts);
            for (Map.Entry<String, List<Integer>> e : counts.entrySet()) {
                check(e.getValue().equals(List.of(0, 1, 2)), e.getKey() + " delivered with counts " + e.getValue()
                        + ", expected [0, 1, 2] before the DLQ");
            }
            Map<String, String> deadInfo = new LinkedHashMap<>();
            for (Message<byte[]> x : dead_) {
                String s = Clients.text(x);
                check(x.getProperty("origin") != null && x.getProperty("origin").equals(s),
                        "DLQ message " + s + " lost its property: " + x.getProperties());
                check(("k" + s.substring(1)).equals(x.getKey()), "DLQ message " + s + " has key " + x.getKey());
                deadInfo.put(s, x.getProperty("REAL_TOPIC"));
            }
            List<Message<byte[]>> extra = Clients.drain(c, 500, 2);
            check(extra.isEmpty(), extra.size() + " deliveries after the DLQ move");
            c.close(); // flushes the client's acks of the moved messages
            AckTest.waitBacklog(b, topic, "sub", 0);
            dead.close();
            p.close();
            report.messages(counts.values().stream().mapToInt(List::size).sum() + dead_.size());
            report.note("counts " + counts + ", DLQ got " + deadInfo.keySet() + " (REAL_TOPIC set: "
                    + deadInfo.values().stream().allMatch(v -> v != null) + ")");
        }
    }

    /**
     * {@code deadLetterPolicy(…, initialSubscriptionName "init")}: nobody subscribes to the
     * dead-letter topic before the dead letter is written; the client's dead-letter producer asks
     * for the subscription with the producer (PRODUCER's {@code initial_subscription_name}), so the
     * topic has "init" and a consumer of it (at the default position, latest) still gets the dead
     * letter. Without the initial subscription the dead letter would be dropped from a topic with
     * no subscription, and the consumer at latest would get nothing.
     */
    @Scenario("dead_letter_initial_subscription")
    void deadLetterInitialSubscription(Report report) throws Exception {
        try (Broker b = Broker.start("dead-letter-init");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("dlq-init");
            String dlq = topic + "-DLQ";
            Consumer<byte[]> c = cl.newConsumer().topic(topic).subscriptionName("sub")
                    .subscriptionType(SubscriptionType.Shared)
                    .negativeAckRedeliveryDelay(100, TimeUnit.MILLISECONDS)
                    .deadLetterPolicy(DeadLetterPolicy.builder().maxRedeliverCount(1).deadLetterTopic(dlq)
                            .initialSubscriptionName("init").build())
                    .subscribe();
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false).create();
            p.send(Clients.bytes("poison"));
            int deliveries = 0;
            Check.Deadline d = new Check.Deadline(10);
            while (!d.expired() && deliveries < 2) {
                Message<byte[]> m = Clients.receive(c, 200);
                if (m != null) {
                    deliveries++;
                    c.negativeAcknowledge(m);
                }
            }
            check(deliveries == 2, "the message was delivered " + deliveries + " times, expected 2 before the DLQ");
            Check.waitUntil(() -> {
                Admin.Response r = b.admin().request("GET", Admin.topicPath(dlq) + "/stats", null);
                return r.ok() && Json.num(Json.parse(r.body()), "msgInCounter") >= 1;
            }, 10, "the dead letter on " + dlq);
            Object subs = b.admin().getJson(Admin.topicPath(dlq) + "/subscriptions");
            check(subs instanceof List<?> l && l.contains("init"),
                    "the dead-letter producer's initial subscription \"init\" was not created: " + subs);
            Consumer<byte[]> init = cl.newConsumer().topic(dlq).subscriptionName("init")
                    .subscriptionType(SubscriptionType.Shared).subscribe();
            Message<byte[]> dead = Clients.receive(init, 3000);
            check(dead != null && Clients.text(dead).equals("poison"),
                    "the initial subscription did not get the dead letter: " + (dead == null ? null : Clients.text(dead)));
            init.acknowledge(dead);
            init.close();
            c.close();
            p.close();
            report.messages(deliveries + 1);
            report.note("subscriptions of the dead-letter topic " + subs);
        }
    }

    /**
     * {@code enableRetry(true)} with a retry-letter topic and {@code reconsumeLater(msg, 300 ms)}:
     * 2 messages are reconsumed later each time; each comes back from the retry topic (delayed
     * delivery on Shared: not before 300 ms) with RECONSUMETIMES 1, then 2; the third
     * reconsumeLater moves it to the DLQ (maxRedeliverCount 2). The DLQ consumer subscribed first.
     */
    @Scenario("retry_letter_topic")
    void retryLetter(Report report) throws Exception {
        try (Broker b = Broker.start("retry-letter");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("retry-src");
            String retry = topic + "-RETRY";
            String dlq = topic + "-DLQ";
            Consumer<byte[]> dead = dlqConsumer(cl, dlq);
            Consumer<byte[]> c = cl.newConsumer().topic(topic).subscriptionName("sub")
                    .subscriptionType(SubscriptionType.Shared)
                    .enableRetry(true)
                    .deadLetterPolicy(DeadLetterPolicy.builder().maxRedeliverCount(2)
                            .retryLetterTopic(retry).deadLetterTopic(dlq).build())
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false).create();
            for (int i = 0; i < 2; i++) {
                p.newMessage().key("k" + i).value(Clients.bytes("r" + i)).send();
            }
            Map<String, List<String>> seen = new TreeMap<>();
            Map<String, Long> lastAt = new LinkedHashMap<>();
            List<Long> waits = new ArrayList<>();
            List<Message<byte[]>> dead_ = new ArrayList<>();
            Check.Deadline d = new Check.Deadline(20);
            while (!d.expired() && dead_.size() < 2) {
                Message<byte[]> m = Clients.receive(c, 50);
                if (m != null) {
                    String s = Clients.text(m);
                    long now = System.nanoTime();
                    if (lastAt.containsKey(s)) {
                        waits.add((now - lastAt.get(s)) / 1_000_000);
                    }
                    lastAt.put(s, now);
                    String times = m.getProperty("RECONSUMETIMES");
                    seen.computeIfAbsent(s, k -> new ArrayList<>()).add((times == null ? "0" : times)
                            + (m.getTopicName().contains("RETRY") ? "@retry" : "@topic"));
                    c.reconsumeLater(m, 300, TimeUnit.MILLISECONDS);
                }
                Message<byte[]> x = Clients.receive(dead, 10);
                if (x != null) {
                    dead_.add(x);
                    dead.acknowledge(x);
                }
            }
            check(dead_.size() == 2, "the DLQ got " + dead_.size() + " of 2; deliveries " + seen);
            for (Map.Entry<String, List<String>> e : seen.entrySet()) {
                check(e.getValue().equals(List.of("0@topic", "1@retry", "2@retry")),
                        e.getKey() + " delivered as " + e.getValue() + ", expected [0@topic, 1@retry, 2@retry]");
            }
            for (long w : waits) {
                check(w >= 290, "a retry came back after " + w + " ms, before its 300 ms delay");
            }
            List<String> deadNames = Clients.texts(dead_);
            deadNames.sort(null);
            check(deadNames.equals(List.of("r0", "r1")), "DLQ got " + deadNames);
            c.close();
            AckTest.waitBacklog(b, topic, "sub", 0);
            dead.close();
            p.close();
            report.messages(seen.values().stream().mapToInt(List::size).sum() + dead_.size());
            report.note("deliveries " + seen + ", reconsume waits " + waits + " ms (delay 300 ms), DLQ got " + deadNames);
        }
    }
}
