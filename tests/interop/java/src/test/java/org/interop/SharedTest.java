package org.interop;

import static org.interop.harness.Check.check;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.interop.harness.Broker;
import org.interop.harness.Check;
import org.interop.harness.Clients;
import org.interop.harness.Json;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

/**
 * Shared, three consumers: 300 messages (batched by the producer, 10 per batch at most) are
 * consumed with no loss; a message is processed twice only from a redelivered copy; every
 * consumer gets some; afterwards the backlog is 0.
 */
class SharedTest {
    static final int N = 300;

    @Scenario("shared_several_consumers")
    void severalConsumers(Report report) throws Exception {
        try (Broker b = Broker.start("shared");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("shared");
            List<Consumer<byte[]>> consumers = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                consumers.add(cl.newConsumer().topic(topic).subscriptionName("sub")
                        .subscriptionType(SubscriptionType.Shared).consumerName("c" + i)
                        .receiverQueueSize(20)
                        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe());
            }
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(true).batchingMaxMessages(10)
                    .batchingMaxPublishDelay(5, TimeUnit.MILLISECONDS).create();
            for (int i = 0; i < N; i++) {
                p.sendAsync(Clients.bytes("m" + i));
            }
            p.flush();
            Map<String, List<String>> byConsumer = new ConcurrentHashMap<>();
            Map<String, Integer> seen = new ConcurrentHashMap<>();
            List<String> problems = new CopyOnWriteArrayList<>();
            AtomicBoolean stop = new AtomicBoolean();
            List<Thread> threads = new ArrayList<>();
            for (Consumer<byte[]> c : consumers) {
                Thread t = new Thread(() -> {
                    try {
                        Check.Deadline d = new Check.Deadline(20);
                        while (!d.expired() && !stop.get()) {
                            Message<byte[]> m = Clients.receive(c, 100);
                            if (m == null) {
                                continue;
                            }
                            String s = Clients.text(m);
                            if (seen.merge(s, 1, Integer::sum) > 1 && m.getRedeliveryCount() == 0) {
                                problems.add(c.getConsumerName() + " got " + s + " again with redelivery count 0");
                            }
                            byConsumer.computeIfAbsent(c.getConsumerName(), k -> new CopyOnWriteArrayList<>()).add(s);
                            c.acknowledge(m);
                        }
                    } catch (Exception e) {
                        problems.add(c.getConsumerName() + ": " + e);
                    }
                });
                t.start();
                threads.add(t);
            }
            Check.waitUntil(() -> seen.size() >= N || !problems.isEmpty(), 20, N + " distinct messages");
            Check.sleepMs(300); // stray duplicates show
            stop.set(true);
            for (Thread t : threads) {
                t.join(5000);
            }
            check(problems.isEmpty(), "problems: " + problems);
            Map<String, Integer> per = new HashMap<>();
            byConsumer.forEach((k, v) -> per.put(k, v.size()));
            for (Consumer<byte[]> c : consumers) {
                check(per.getOrDefault(c.getConsumerName(), 0) > 0, "a consumer got nothing: " + per);
            }
            long total = per.values().stream().mapToLong(Integer::longValue).sum();
            report.messages(total);
            for (Consumer<byte[]> c : consumers) {
                c.close(); // flushes grouped acks
            }
            Check.waitUntil(() -> Json.num(b.admin().topicStats(topic), "subscriptions", "sub", "msgBacklog") == 0, 5,
                    "backlog 0 after every ack");
            report.note("per consumer " + per + ", " + (total - N) + " redelivered");
            p.close();
        }
    }
}
