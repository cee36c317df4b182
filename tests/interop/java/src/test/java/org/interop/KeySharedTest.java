package org.interop;

import static org.interop.harness.Check.check;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.KeySharedPolicy;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Range;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.interop.harness.Broker;
import org.interop.harness.Check;
import org.interop.harness.Clients;
import org.interop.harness.ProcessingLog;
import org.interop.harness.Report;
import org.interop.harness.Scenario;
import org.interop.harness.StickyHash;

class KeySharedTest {
    static final int KEYS = 20;
    static final int PER_KEY = 30;
    static final int N = KEYS * PER_KEY;

    /** A consumer application on its own thread: receive, record, work 2 ms, ack; until stopped. */
    static final class App {
        final String name;
        final AtomicBoolean stop = new AtomicBoolean();
        final CountDownLatch ready = new CountDownLatch(1);
        final Thread thread;
        volatile int processed;

        App(PulsarClient cl, String topic, String name, ProcessingLog log, List<String> errors) {
            this.name = name;
            this.thread = new Thread(() -> {
                try {
                    Consumer<byte[]> c = cl.newConsumer().topic(topic).subscriptionName("sub")
                            .subscriptionType(SubscriptionType.Key_Shared).consumerName(name).receiverQueueSize(10)
                            .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
                    ready.countDown();
                    Check.Deadline d = new Check.Deadline(45);
                    while (!d.expired() && !stop.get()) {
                        Message<byte[]> m = Clients.receive(c, 100);
                        if (m == null) {
                            continue;
                        }
                        String[] ks = Clients.text(m).split("#");
                        Thread.sleep(2);
                        log.recv(name, ks[0], Integer.parseInt(ks[1]), Clients.id(m.getMessageId()), m.getRedeliveryCount());
                        processed++;
                        c.acknowledge(m);
                    }
                    c.close(); // with messages still in its receive queue
                } catch (Exception e) {
                    errors.add(name + ": " + e);
                    ready.countDown();
                }
            }, "app-" + name);
            thread.start();
        }

        void awaitReady() throws InterruptedException {
            check(ready.await(10, TimeUnit.SECONDS), name + " did not subscribe within 10 s");
        }

        void stopAndJoin() throws InterruptedException {
            stop.set(true);
            thread.join(10_000);
            check(!thread.isAlive(), name + " did not close within 10 s");
        }
    }

    /**
     * Key_Shared (AUTO_SPLIT), 20 keys x 30 messages published at a steady pace: c1 alone; c2
     * joins after 100 processed; c1 closes after 200 (with prefetched messages); c3 joins. The
     * merged processing log keeps per-key order; every consumer processed something; a late
     * consumer gets nothing (everything acked).
     */
    @Scenario("key_shared_join_leave")
    void joinLeave(Report report) throws Exception {
        ProcessingLog log = new ProcessingLog();
        List<String> errors = new CopyOnWriteArrayList<>();
        Map<String, Integer> expected = new LinkedHashMap<>();
        for (int k = 0; k < KEYS; k++) {
            expected.put("key-" + k, PER_KEY);
        }
        try (Broker b = Broker.start("key-shared-join-leave");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("ks-join-leave");
            Map<String, App> apps = new LinkedHashMap<>();
            apps.put("c1", new App(cl, topic, "c1", log, errors));
            apps.get("c1").awaitReady();
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false).create();
            Thread producer = new Thread(() -> {
                try {
                    for (int i = 0; i < N; i++) {
                        int k = i % KEYS;
                        p.newMessage().key("key-" + k).value(Clients.bytes("key-" + k + "#" + (i / KEYS))).sendAsync();
                        if (i % 20 == 19) {
                            Thread.sleep(30);
                        }
                    }
                    p.flush();
                } catch (Exception e) {
                    errors.add("producer: " + e);
                }
            }, "producer");
            producer.start();
            List<String> events = new ArrayList<>();
            Check.waitUntil(() -> log.size() >= 100 || !errors.isEmpty(), 20, "100 processed messages");
            apps.put("c2", new App(cl, topic, "c2", log, errors));
            apps.get("c2").awaitReady();
            events.add("c2 joined at " + log.size());
            Check.waitUntil(() -> log.size() >= 200 || !errors.isEmpty(), 20, "200 processed messages");
            apps.get("c1").stopAndJoin();
            events.add("c1 closed at " + log.size());
            apps.put("c3", new App(cl, topic, "c3", log, errors));
            apps.get("c3").awaitReady();
            events.add("c3 joined at " + log.size());
            producer.join(30_000);
            check(!producer.isAlive(), "the producer did not finish within 30 s");
            Check.waitUntil(() -> log.distinctReceived() >= N || !errors.isEmpty(), 30, "all " + N + " messages processed");
            Check.sleepMs(300); // stray duplicates show
            apps.get("c2").stopAndJoin();
            apps.get("c3").stopAndJoin();
            check(errors.isEmpty(), "errors: " + errors);
            log.write("key_shared_join_leave");
            ProcessingLog.Order o = ProcessingLog.checkKeyOrder(log.snapshot(), expected, Set.of());
            check(o.firstTime() == N, o.firstTime() + " first-time processings, expected " + N);
            Map<String, Integer> per = new LinkedHashMap<>();
            apps.forEach((n, a) -> per.put(n, a.processed));
            for (Map.Entry<String, Integer> e : per.entrySet()) {
                check(e.getValue() > 0, e.getKey() + " processed nothing: " + per);
            }
            Consumer<byte[]> late = cl.newConsumer().topic(topic).subscriptionName("sub")
                    .subscriptionType(SubscriptionType.Key_Shared).subscribe();
            List<Message<byte[]>> extra = Clients.drain(late, 700, 3);
            check(extra.isEmpty(), extra.size() + " messages redelivered after every ack");
            late.close();
            p.close();
            report.messages(log.size());
            report.note(per + ", " + String.join(", ", events) + ", " + o.reprocessed() + " re-processed after redelivery");
        }
    }

    /**
     * STICKY with three consumers, keyless messages (the hash comes from
     * {@code "<producer>-<sequence>"}) and an ack timeout of 1 s: each consumer acks every other
     * message it gets and leaves the rest; after the ack timeout the client asks for the unacked
     * half again, and each consumer gets its own unacked half back.
     */
    @Scenario("key_shared_sticky_ack_timeout")
    void stickyAckTimeout(Report report) throws Exception {
        final int n = 100;
        List<Range> ranges = List.of(Range.of(0, 21844), Range.of(21845, 43690), Range.of(43691, 65535));
        try (Broker b = Broker.start("key-shared-sticky-ack-timeout");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("ks-sticky-ackto");
            List<Consumer<byte[]>> consumers = new ArrayList<>();
            for (int i = 0; i < ranges.size(); i++) {
                consumers.add(cl.newConsumer().topic(topic).subscriptionName("sub")
                        .subscriptionType(SubscriptionType.Key_Shared).consumerName("c" + i)
                        .receiverQueueSize(200).ackTimeout(1, TimeUnit.SECONDS)
                        .keySharedPolicy(KeySharedPolicy.stickyHashRange().ranges(ranges.get(i)))
                        .subscribe());
            }
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false).create();
            for (int i = 0; i < n; i++) {
                p.send(Clients.bytes("m" + i));
            }
            // First pass: each consumer acks every other message it gets.
            List<Set<String>> unacked = new ArrayList<>();
            int total = 0;
            int received = 0;
            Check.Deadline first = new Check.Deadline(10);
            for (int i = 0; i < consumers.size(); i++) {
                unacked.add(new HashSet<>());
            }
            int[] seen = new int[consumers.size()];
            while (total < n && !first.expired()) {
                for (int i = 0; i < consumers.size(); i++) {
                    Message<byte[]> m = Clients.receive(consumers.get(i), 20);
                    if (m == null || m.getRedeliveryCount() > 0) {
                        continue;
                    }
                    total++;
                    if (seen[i]++ % 2 == 0) {
                        consumers.get(i).acknowledge(m);
                    } else {
                        unacked.get(i).add(new String(m.getValue()));
                    }
                }
            }
            received += total;
            check(total == n, "first pass got " + total + " of " + n);
            // After the ack timeout each consumer gets its own unacked half back.
            List<Set<String>> back = new ArrayList<>();
            for (int i = 0; i < consumers.size(); i++) {
                back.add(new HashSet<>());
            }
            Check.Deadline second = new Check.Deadline(10);
            while (!second.expired() && !back.equals(unacked)) {
                for (int i = 0; i < consumers.size(); i++) {
                    Message<byte[]> m = Clients.receive(consumers.get(i), 20);
                    if (m == null) {
                        continue;
                    }
                    received++;
                    String v = new String(m.getValue());
                    check(unacked.get(i).contains(v), "c" + i + " got " + v + " again, which it acked or never had");
                    back.get(i).add(v);
                    consumers.get(i).acknowledge(m);
                }
            }
            report.messages(received);
            for (int i = 0; i < consumers.size(); i++) {
                check(back.get(i).equals(unacked.get(i)), "c" + i + " left " + unacked.get(i).size()
                        + " unacked and got back " + back.get(i).size() + " after the ack timeout");
            }
            report.note("unacked per consumer " + unacked.stream().map(Set::size).toList() + ", all came back");
            p.close();
            for (Consumer<byte[]> c : consumers) {
                c.close();
            }
        }
    }

    /**
     * Key_Shared STICKY with ranges [0, 32767] and [32768, 65535]
     * ({@code KeySharedPolicy.stickyHashRange()}): 40 keys x 5 messages; each message reaches the
     * consumer whose range holds Pulsar's sticky hash of its key (computed here), exactly once and
     * in per-key order.
     */
    @Scenario("key_shared_sticky")
    void sticky(Report report) throws Exception {
        final int keys = 40;
        final int perKey = 5;
        final int n = keys * perKey;
        Map<String, Range> ranges = new LinkedHashMap<>();
        ranges.put("low", Range.of(0, 32767));
        ranges.put("high", Range.of(32768, 65535));
        try (Broker b = Broker.start("key-shared-sticky");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("ks-sticky");
            Map<String, Consumer<byte[]>> consumers = new LinkedHashMap<>();
            for (Map.Entry<String, Range> r : ranges.entrySet()) {
                consumers.put(r.getKey(), cl.newConsumer().topic(topic).subscriptionName("sub")
                        .subscriptionType(SubscriptionType.Key_Shared).consumerName(r.getKey()).receiverQueueSize(50)
                        .keySharedPolicy(KeySharedPolicy.stickyHashRange().ranges(r.getValue()))
                        .subscribe());
            }
            Map<String, List<Message<byte[]>>> received = new ConcurrentHashMap<>();
            List<String> errors = new CopyOnWriteArrayList<>();
            List<Thread> threads = new ArrayList<>();
            for (Map.Entry<String, Consumer<byte[]>> e : consumers.entrySet()) {
                received.put(e.getKey(), new CopyOnWriteArrayList<>());
                Thread t = new Thread(() -> {
                    try {
                        Check.Deadline d = new Check.Deadline(20);
                        while (!d.expired() && received.values().stream().mapToInt(List::size).sum() < n) {
                            Message<byte[]> m = Clients.receive(e.getValue(), 200);
                            if (m != null) {
                                received.get(e.getKey()).add(m);
                                e.getValue().acknowledge(m);
                            }
                        }
                    } catch (Exception ex) {
                        errors.add(e.getKey() + ": " + ex);
                    }
                });
                t.start();
                threads.add(t);
            }
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false).create();
            for (int i = 0; i < n; i++) {
                String key = "user-" + (i % keys);
                p.newMessage().key(key).value(Clients.bytes(key + "#" + (i / keys))).sendAsync();
            }
            p.flush();
            for (Thread t : threads) {
                t.join(25_000);
            }
            check(errors.isEmpty(), "errors: " + errors);
            List<String> wrong = new ArrayList<>();
            Set<String> payloads = new HashSet<>();
            int total = 0;
            Map<String, Set<String>> keysOf = new HashMap<>();
            for (Map.Entry<String, List<Message<byte[]>>> e : received.entrySet()) {
                Range r = ranges.get(e.getKey());
                Map<String, Integer> last = new HashMap<>();
                for (Message<byte[]> m : e.getValue()) {
                    total++;
                    payloads.add(Clients.text(m));
                    int slot = StickyHash.slot(m.getKey());
                    if (slot < r.getStart() || slot > r.getEnd()) {
                        wrong.add(m.getKey() + " (hash " + slot + ") went to " + e.getKey() + " " + r);
                    }
                    int seq = Integer.parseInt(Clients.text(m).split("#")[1]);
                    check(seq == last.getOrDefault(m.getKey(), -1) + 1,
                            e.getKey() + ": " + Clients.text(m) + " after #" + last.get(m.getKey()) + " (order)");
                    last.put(m.getKey(), seq);
                    keysOf.computeIfAbsent(e.getKey(), x -> new HashSet<>()).add(m.getKey());
                }
            }
            check(wrong.isEmpty(), wrong.size() + " messages outside the consumer's range: "
                    + wrong.subList(0, Math.min(5, wrong.size())));
            check(total == n && payloads.size() == n, "received " + total + " (" + payloads.size() + " distinct), expected " + n);
            check(keysOf.size() == 2, "one range got no keys: " + keysOf.keySet());
            for (Consumer<byte[]> c : consumers.values()) {
                c.close();
            }
            p.close();
            report.messages(total);
            report.note("low got " + received.get("low").size() + " (" + keysOf.get("low").size() + " keys), high got "
                    + received.get("high").size() + " (" + keysOf.get("high").size() + " keys), 0 outside the range");
        }
    }
}
