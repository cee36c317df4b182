package org.interop;

import static org.interop.harness.Check.check;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.ConsumerEventListener;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageRoutingMode;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.interop.harness.Broker;
import org.interop.harness.Clients;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

/** Failover subscriptions: one active consumer, the others stand by and take over in order. */
class FailoverTest {
    /** Each consumer's last ACTIVE_CONSUMER_CHANGE, as the client's event listener saw it. */
    static final class Activity implements ConsumerEventListener {
        final Map<String, Boolean> active = new ConcurrentHashMap<>();

        @Override
        public void becameActive(Consumer<?> consumer, int partitionId) {
            active.put(consumer.getConsumerName(), true);
        }

        @Override
        public void becameInactive(Consumer<?> consumer, int partitionId) {
            active.put(consumer.getConsumerName(), false);
        }

        /** Waits up to 5 s until {@code name}'s last notice is {@code want}. */
        boolean await(String name, boolean want) throws InterruptedException {
            for (int i = 0; i < 100; i++) {
                if (Boolean.valueOf(want).equals(active.get(name))) {
                    return true;
                }
                Thread.sleep(50);
            }
            return false;
        }
    }

    /**
     * Two Failover consumers: the one the broker names active (its event listener says so) gets
     * all 10 messages, the other none; when the active one closes, the other is told it is
     * active and gets the next 5, in order.
     */
    @Scenario("failover_subscription")
    void failover(Report report) throws Exception {
        try (Broker b = Broker.start("failover");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("failover");
            Activity activity = new Activity();
            List<Consumer<byte[]>> cs = new ArrayList<>();
            for (String n : List.of("f1", "f2")) {
                cs.add(cl.newConsumer().topic(topic).subscriptionName("fo").subscriptionType(SubscriptionType.Failover)
                        .consumerName(n).consumerEventListener(activity)
                        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe());
            }
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false).create();
            for (int i = 0; i < 10; i++) {
                p.send(Clients.bytes("m" + i));
            }
            List<Message<byte[]>> a = Clients.drain(cs.get(0), 500, 5);
            List<Message<byte[]>> b2 = Clients.drain(cs.get(1), 500, 5);
            report.messages(a.size() + b2.size());
            int activeIdx = a.isEmpty() ? 1 : 0;
            Consumer<byte[]> active = cs.get(activeIdx);
            Consumer<byte[]> standby = cs.get(1 - activeIdx);
            check((a.size() == 10 && b2.isEmpty()) || (b2.size() == 10 && a.isEmpty()),
                    "one active consumer should get all 10: f1 " + a.size() + ", f2 " + b2.size());
            check(activity.await(active.getConsumerName(), true),
                    "the consumer that got the messages was not told it is active: " + activity.active);
            check(activity.await(standby.getConsumerName(), false),
                    "the standby was not told it stands by: " + activity.active);
            for (Message<byte[]> m : (a.isEmpty() ? b2 : a)) {
                active.acknowledge(m);
            }
            active.close();
            check(activity.await(standby.getConsumerName(), true),
                    "the standby was not told it became active: " + activity.active);
            for (int i = 10; i < 15; i++) {
                p.send(Clients.bytes("m" + i));
            }
            List<Message<byte[]>> rest = Clients.receiveN(standby, 5, 5, 300);
            report.messages(rest.size());
            List<String> got = new ArrayList<>();
            for (Message<byte[]> m : rest) {
                got.add(new String(m.getData()));
            }
            check(got.equals(List.of("m10", "m11", "m12", "m13", "m14")),
                    "after the active consumer closed, the standby got " + got);
            standby.close();
            p.close();
        }
    }

    /**
     * Failover on a 4-partition topic with two consumers of one priority level: as in Pulsar,
     * partition i's active consumer is the (i mod 2)-th by name, so c1 gets partitions 0 and 2,
     * c2 gets 1 and 3, each partition's messages in order on one consumer.
     */
    @Scenario("failover_partitioned")
    void failoverPartitioned(Report report) throws Exception {
        try (Broker b = Broker.start("failover-partitioned");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("failover-parted");
            PartitionedTopicTest.createPartitioned(b.admin(), topic, 4);
            List<Consumer<byte[]>> cs = new ArrayList<>();
            for (String n : List.of("c2", "c1")) {
                cs.add(cl.newConsumer().topic(topic).subscriptionName("fo").subscriptionType(SubscriptionType.Failover)
                        .consumerName(n).subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe());
            }
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false)
                    .messageRoutingMode(MessageRoutingMode.RoundRobinPartition).create();
            for (int i = 0; i < 40; i++) {
                p.send(Clients.bytes("m" + i));
            }
            Map<String, Set<String>> partsOf = new TreeMap<>();
            Map<String, List<Long>> entriesOf = new TreeMap<>();
            int total = 0;
            for (Consumer<byte[]> c : cs) {
                List<Message<byte[]>> got = Clients.drain(c, 500, 8);
                total += got.size();
                for (Message<byte[]> m : got) {
                    String part = m.getTopicName().substring(m.getTopicName().lastIndexOf('-') + 1);
                    partsOf.computeIfAbsent(c.getConsumerName(), k -> new TreeSet<>()).add(part);
                    List<Long> seq = entriesOf.computeIfAbsent(m.getTopicName(), k -> new ArrayList<>());
                    seq.add(m.getSequenceId());
                    c.acknowledge(m);
                }
            }
            report.messages(total);
            check(total == 40, "got " + total + " of 40");
            check(partsOf.equals(Map.of("c1", Set.of("0", "2"), "c2", Set.of("1", "3"))),
                    "partitions per consumer: " + partsOf + ", expected c1 [0, 2] and c2 [1, 3]");
            for (Map.Entry<String, List<Long>> e : entriesOf.entrySet()) {
                List<Long> sorted = new ArrayList<>(e.getValue());
                sorted.sort(null);
                check(sorted.equals(e.getValue()), e.getKey() + " out of order: " + e.getValue());
            }
            for (Consumer<byte[]> c : cs) {
                c.close();
            }
            p.close();
        }
    }
}
