package org.interop;

import static org.interop.harness.Check.check;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageRoutingMode;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.interop.harness.Admin;
import org.interop.harness.Broker;
import org.interop.harness.Check;
import org.interop.harness.Clients;
import org.interop.harness.Json;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

/**
 * Partitioned topics and namespaces: the stock client resolves a partitioned topic's metadata,
 * produces to and consumes from its {@code -partition-N} topics, follows a partition count that
 * grows, and is refused on a namespace that does not exist.
 */
class PartitionedTopicTest {
    /** The partition index of a message's topic name ({@code …-partition-N}), -1 if none. */
    static int partitionOf(Message<?> m) {
        String t = m.getTopicName();
        int i = t.lastIndexOf("-partition-");
        return i < 0 ? -1 : Integer.parseInt(t.substring(i + "-partition-".length()));
    }

    /** {@code PUT …/partitions} with {@code n}, then {@code GET …/partitions} must say {@code n}. */
    static void createPartitioned(Admin admin, String topic, int n) {
        String path = Admin.topicPath(topic) + "/partitions";
        Admin.Response r = admin.request("PUT", path, Integer.toString(n));
        check(r.ok(), "PUT " + path + " (" + n + "): HTTP " + r.status() + " " + r.body());
        check(partitionsOf(admin, topic) == n, "GET " + path + " after creating with " + n);
    }

    /** {@code GET …/partitions}: the partition count; {@code deleted} must be false. */
    static long partitionsOf(Admin admin, String topic) {
        Object md = admin.getJson(Admin.topicPath(topic) + "/partitions");
        check(Boolean.FALSE.equals(Json.at(md, "deleted")), "partitioned metadata " + md + ": deleted should be false");
        return Json.num(md, "partitions");
    }

    static Map<String, Integer> countValues(Map<String, String> m) {
        Map<String, Integer> out = new TreeMap<>();
        m.values().forEach(v -> out.merge(v, 1, Integer::sum));
        return out;
    }

    /** A consumer's receive loop on its own thread: record, ack, until stopped (at most 30 s). */
    static Thread receiveLoop(Consumer<byte[]> c, AtomicBoolean stop, List<String> problems,
            java.util.function.Consumer<Message<byte[]>> onMessage) {
        Thread t = new Thread(() -> {
            try {
                Check.Deadline d = new Check.Deadline(30);
                while (!d.expired() && !stop.get()) {
                    Message<byte[]> m = Clients.receive(c, 100);
                    if (m == null) {
                        continue;
                    }
                    onMessage.accept(m);
                    c.acknowledge(m);
                }
            } catch (Exception e) {
                problems.add(c.getConsumerName() + ": " + e);
            }
        }, "app-" + c.getConsumerName());
        t.start();
        return t;
    }

    /**
     * Partitioned topic: created with 3 partitions through the admin API
     * ({@code PUT .../partitions} with body 3), then 30 messages round robin; a consumer (the
     * default Exclusive subscription) gets all 30, once each, from the three {@code -partition-N}
     * topics.
     */
    @Scenario("partitioned_topic")
    void partitioned(Report report) throws Exception {
        try (Broker b = Broker.start("partitioned");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("parted");
            createPartitioned(b.admin(), topic, 3);
            Consumer<byte[]> c = cl.newConsumer().topic(topic).subscriptionName("sub")
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false)
                    .messageRoutingMode(MessageRoutingMode.RoundRobinPartition).create();
            for (int i = 0; i < 30; i++) {
                p.send(Clients.bytes("m" + i));
            }
            List<Message<byte[]>> got = Clients.receiveN(c, 30, 8, 300);
            report.messages(got.size());
            Set<String> parts = new TreeSet<>();
            for (Message<byte[]> m : got) {
                parts.add(m.getTopicName());
                c.acknowledge(m);
            }
            Set<String> texts = new HashSet<>(Clients.texts(got));
            check(got.size() == 30 && texts.size() == 30 && parts.size() == 3,
                    "got " + got.size() + " (" + texts.size() + " distinct) of 30 from partitions " + parts);
            c.close();
            p.close();
        }
    }

    /**
     * Shared on an admin-created 3-partition topic: two consumers on one subscription, 60
     * messages round robin (batching off). Together they receive each message exactly once, 20
     * from each partition, both consumers get some; partitioned-stats counts 60 in and no
     * backlog after the acks.
     */
    @Scenario("partitioned_shared")
    void shared(Report report) throws Exception {
        final int n = 60;
        try (Broker b = Broker.start("partitioned-shared");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("parted-shared");
            createPartitioned(b.admin(), topic, 3);
            List<Consumer<byte[]>> consumers = new ArrayList<>();
            for (String name : List.of("c1", "c2")) {
                consumers.add(cl.newConsumer().topic(topic).subscriptionName("sub")
                        .subscriptionType(SubscriptionType.Shared).consumerName(name).receiverQueueSize(10)
                        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe());
            }
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false)
                    .messageRoutingMode(MessageRoutingMode.RoundRobinPartition).create();
            Map<String, Integer> seen = new ConcurrentHashMap<>();
            Map<String, Integer> perConsumer = new ConcurrentHashMap<>();
            Map<Integer, Integer> perPartition = new ConcurrentHashMap<>();
            List<String> problems = new CopyOnWriteArrayList<>();
            AtomicBoolean stop = new AtomicBoolean();
            List<Thread> threads = new ArrayList<>();
            for (Consumer<byte[]> c : consumers) {
                threads.add(receiveLoop(c, stop, problems, m -> {
                    String s = Clients.text(m);
                    if (seen.merge(s, 1, Integer::sum) > 1) {
                        problems.add(c.getConsumerName() + " got " + s + " again (redelivery count "
                                + m.getRedeliveryCount() + ")");
                    }
                    perConsumer.merge(c.getConsumerName(), 1, Integer::sum);
                    perPartition.merge(partitionOf(m), 1, Integer::sum);
                }));
            }
            for (int i = 0; i < n; i++) {
                p.send(Clients.bytes("m" + i));
            }
            Check.waitUntil(() -> seen.size() >= n || !problems.isEmpty(), 20, n + " distinct messages");
            Check.sleepMs(500); // stray duplicates show
            stop.set(true);
            for (Thread t : threads) {
                t.join(5000);
            }
            long total = perConsumer.values().stream().mapToLong(Integer::longValue).sum();
            report.messages(total);
            check(problems.isEmpty(), "problems: " + problems);
            Set<String> expected = new HashSet<>();
            for (int i = 0; i < n; i++) {
                expected.add("m" + i);
            }
            check(seen.keySet().equals(expected) && total == n, "received " + total + " (" + seen.size()
                    + " distinct), expected m0..m" + (n - 1) + " once each");
            check(new TreeMap<>(perPartition).equals(Map.of(0, 20, 1, 20, 2, 20)),
                    "per partition " + new TreeMap<>(perPartition) + ", expected 20 from each of 0, 1, 2");
            check(perConsumer.size() == 2, "one consumer got nothing: " + perConsumer);
            for (Consumer<byte[]> c : consumers) {
                c.close(); // flushes grouped acks
            }
            Map<String, Object> stats = Json.obj(b.admin().getJson(Admin.topicPath(topic) + "/partitioned-stats"));
            check(Json.num(stats, "metadata", "partitions") == 3, "partitioned-stats metadata.partitions, expected 3");
            check(Json.num(stats, "msgInCounter") == n, "partitioned-stats msgInCounter " + Json.num(stats, "msgInCounter")
                    + ", expected " + n);
            Check.waitUntil(() -> Json.num(b.admin().getJson(Admin.topicPath(topic) + "/partitioned-stats"),
                    "subscriptions", "sub", "msgBacklog") == 0, 5, "partitioned-stats backlog 0 after every ack");
            report.note("per consumer " + new TreeMap<>(perConsumer) + ", per partition " + new TreeMap<>(perPartition));
            p.close();
        }
    }

    /**
     * Key_Shared on an admin-created 4-partition topic: two consumers on separate clients, 400
     * messages over 20 keys ("key-K#seq", default routing: a key's messages go to one partition).
     * Every message is received once, all of a key's messages by one consumer, from one
     * partition, in seq order; every message is acked (backlog 0).
     */
    @Scenario("partitioned_key_shared")
    void keyShared(Report report) throws Exception {
        final int keys = 20;
        final int perKey = 20;
        final int n = keys * perKey;
        try (Broker b = Broker.start("partitioned-key-shared");
                PulsarClient cl1 = Clients.client(b.serviceUrl());
                PulsarClient cl2 = Clients.client(b.serviceUrl());
                PulsarClient clp = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("parted-ks");
            createPartitioned(b.admin(), topic, 4);
            List<Consumer<byte[]>> consumers = new ArrayList<>();
            Map<String, PulsarClient> clients = new LinkedHashMap<>();
            clients.put("c1", cl1);
            clients.put("c2", cl2);
            for (Map.Entry<String, PulsarClient> e : clients.entrySet()) {
                consumers.add(e.getValue().newConsumer().topic(topic).subscriptionName("sub")
                        .subscriptionType(SubscriptionType.Key_Shared).consumerName(e.getKey()).receiverQueueSize(20)
                        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe());
            }
            // per key: the consumers that got it, the partitions it came from, the seqs in arrival order
            Map<String, Set<String>> keyConsumers = new ConcurrentHashMap<>();
            Map<String, Set<Integer>> keyPartitions = new ConcurrentHashMap<>();
            Map<String, List<Integer>> keySeqs = new ConcurrentHashMap<>();
            Map<String, Integer> perConsumer = new ConcurrentHashMap<>();
            List<String> problems = new CopyOnWriteArrayList<>();
            AtomicBoolean stop = new AtomicBoolean();
            List<Thread> threads = new ArrayList<>();
            for (Consumer<byte[]> c : consumers) {
                threads.add(receiveLoop(c, stop, problems, m -> {
                    String[] ks = Clients.text(m).split("#");
                    if (!ks[0].equals(m.getKey())) {
                        problems.add("payload " + Clients.text(m) + " with key " + m.getKey());
                    }
                    if (m.getRedeliveryCount() != 0) {
                        problems.add(c.getConsumerName() + " got " + Clients.text(m) + " with redelivery count "
                                + m.getRedeliveryCount());
                    }
                    keyConsumers.computeIfAbsent(ks[0], k -> ConcurrentHashMap.newKeySet()).add(c.getConsumerName());
                    keyPartitions.computeIfAbsent(ks[0], k -> ConcurrentHashMap.newKeySet()).add(partitionOf(m));
                    keySeqs.computeIfAbsent(ks[0], k -> new CopyOnWriteArrayList<>()).add(Integer.parseInt(ks[1]));
                    perConsumer.merge(c.getConsumerName(), 1, Integer::sum);
                }));
            }
            Producer<byte[]> p = clp.newProducer().topic(topic).enableBatching(false).create();
            for (int i = 0; i < n; i++) {
                int k = i % keys;
                p.newMessage().key("key-" + k).value(Clients.bytes("key-" + k + "#" + (i / keys))).sendAsync();
            }
            p.flush();
            Check.waitUntil(() -> perConsumer.values().stream().mapToInt(Integer::intValue).sum() >= n
                    || !problems.isEmpty(), 20, n + " messages");
            Check.sleepMs(500); // stray duplicates show
            stop.set(true);
            for (Thread t : threads) {
                t.join(5000);
            }
            long total = perConsumer.values().stream().mapToLong(Integer::longValue).sum();
            report.messages(total);
            check(problems.isEmpty(), "problems: " + problems);
            check(total == n && keySeqs.size() == keys, "received " + total + " over " + keySeqs.size()
                    + " keys, expected " + n + " over " + keys);
            List<Integer> inOrder = new ArrayList<>();
            for (int s = 0; s < perKey; s++) {
                inOrder.add(s);
            }
            Map<String, String> keyOwner = new TreeMap<>();
            Set<Integer> partitionsUsed = new HashSet<>();
            for (String k : keySeqs.keySet()) {
                check(keyConsumers.get(k).size() == 1, k + " was received by " + keyConsumers.get(k));
                check(keyPartitions.get(k).size() == 1, k + " came from partitions " + keyPartitions.get(k));
                check(keySeqs.get(k).equals(inOrder), k + " arrived as seqs " + keySeqs.get(k) + ", expected 0.." + (perKey - 1));
                keyOwner.put(k, keyConsumers.get(k).iterator().next());
                partitionsUsed.addAll(keyPartitions.get(k));
            }
            check(perConsumer.size() == 2, "one consumer got no key: " + perConsumer);
            for (Consumer<byte[]> c : consumers) {
                c.close(); // flushes grouped acks
            }
            Check.waitUntil(() -> Json.num(b.admin().getJson(Admin.topicPath(topic) + "/partitioned-stats"),
                    "subscriptions", "sub", "msgBacklog") == 0, 5, "partitioned-stats backlog 0 after every ack");
            report.note("per consumer " + new TreeMap<>(perConsumer) + ", keys per consumer "
                    + countValues(keyOwner) + ", partitions used " + new TreeSet<>(partitionsUsed));
            p.close();
        }
    }

    /**
     * Auto-created partitioned topic: a broker with {@code --allow-auto-topic-creation-type
     * partitioned --default-num-partitions 3}; {@code getPartitionsForTopic} on a fresh name
     * gives its 3 partitions, a producer and a consumer round-trip 30 messages over all 3, and
     * the admin API says 3 partitions.
     */
    @Scenario("partitioned_auto_created")
    void autoCreated(Report report) throws Exception {
        try (Broker b = Broker.start("partitioned-auto", "--allow-auto-topic-creation-type", "partitioned",
                "--default-num-partitions", "3");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("parted-auto");
            List<String> parts = cl.getPartitionsForTopic(topic).get(10, TimeUnit.SECONDS);
            List<String> expected = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                expected.add(topic + "-partition-" + i);
            }
            check(new ArrayList<>(new TreeSet<>(parts)).equals(expected),
                    "getPartitionsForTopic(" + topic + ") = " + parts + ", expected " + expected);
            Consumer<byte[]> c = cl.newConsumer().topic(topic).subscriptionName("sub")
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false)
                    .messageRoutingMode(MessageRoutingMode.RoundRobinPartition).create();
            for (int i = 0; i < 30; i++) {
                p.send(Clients.bytes("m" + i));
            }
            List<Message<byte[]>> got = Clients.receiveN(c, 30, 10, 300);
            report.messages(got.size());
            Set<String> texts = new HashSet<>(Clients.texts(got));
            Set<Integer> from = new TreeSet<>();
            for (Message<byte[]> m : got) {
                from.add(partitionOf(m));
                c.acknowledge(m);
            }
            check(got.size() == 30 && texts.size() == 30, "got " + got.size() + " (" + texts.size() + " distinct) of 30");
            check(from.equals(Set.of(0, 1, 2)), "messages came from partitions " + from + ", expected 0, 1, 2");
            check(partitionsOf(b.admin(), topic) == 3, "GET /partitions of the auto-created topic");
            Object listed = b.admin().getJson("/admin/v2/persistent/public/default/partitioned");
            check(listed instanceof List<?> l && l.contains(topic), "GET …/public/default/partitioned = " + listed
                    + ", expected it to list " + topic);
            report.note("partitions " + parts.size() + ", from " + from);
            c.close();
            p.close();
        }
    }

    /**
     * A partition count that grows: created with 2, messages go to partitions 0 and 1 only;
     * grown to 3 ({@code POST …/partitions} with 3); a producer and a consumer with
     * {@code autoUpdatePartitions} every 1 s start using partition 2 (a message from it arrives
     * within 15 s); every message sent is received exactly once.
     */
    @Scenario("partitioned_grown")
    void grown(Report report) throws Exception {
        try (Broker b = Broker.start("partitioned-grown");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("parted-grown");
            createPartitioned(b.admin(), topic, 2);
            Consumer<byte[]> c = cl.newConsumer().topic(topic).subscriptionName("sub")
                    .autoUpdatePartitions(true).autoUpdatePartitionsInterval(1, TimeUnit.SECONDS)
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false)
                    .messageRoutingMode(MessageRoutingMode.RoundRobinPartition)
                    .autoUpdatePartitions(true).autoUpdatePartitionsInterval(1, TimeUnit.SECONDS).create();
            int sent = 0;
            for (; sent < 10; sent++) {
                p.send(Clients.bytes("m" + sent));
            }
            List<Message<byte[]>> before = Clients.receiveN(c, 10, 10, 300);
            Map<String, Integer> seen = new HashMap<>();
            Set<Integer> fromBefore = new TreeSet<>();
            for (Message<byte[]> m : before) {
                seen.merge(Clients.text(m), 1, Integer::sum);
                fromBefore.add(partitionOf(m));
                c.acknowledge(m);
            }
            report.messages(before.size());
            check(before.size() == 10 && fromBefore.equals(Set.of(0, 1)),
                    "before growing: got " + before.size() + " of 10 from partitions " + fromBefore + ", expected 0, 1");
            b.admin().post(Admin.topicPath(topic) + "/partitions", "3");
            check(partitionsOf(b.admin(), topic) == 3, "GET /partitions after growing to 3");
            long grownAt = System.nanoTime();
            double firstFromP2 = -1;
            Set<Integer> fromAfter = new TreeSet<>();
            Check.Deadline d = new Check.Deadline(15);
            while (firstFromP2 < 0 && !d.expired() && sent < 1000) {
                p.send(Clients.bytes("m" + sent++));
                Message<byte[]> m;
                while ((m = Clients.receive(c, 100)) != null) {
                    report.messages(1);
                    seen.merge(Clients.text(m), 1, Integer::sum);
                    fromAfter.add(partitionOf(m));
                    if (partitionOf(m) == 2 && firstFromP2 < 0) {
                        firstFromP2 = (System.nanoTime() - grownAt) / 1e9;
                    }
                    c.acknowledge(m);
                }
            }
            check(firstFromP2 >= 0, "no message from " + topic + "-partition-2 within 15 s of growing to 3 partitions ("
                    + sent + " sent, received from partitions " + fromAfter + ")");
            List<Message<byte[]>> rest = Clients.drain(c, 500, 5);
            report.messages(rest.size());
            for (Message<byte[]> m : rest) {
                seen.merge(Clients.text(m), 1, Integer::sum);
                fromAfter.add(partitionOf(m));
                c.acknowledge(m);
            }
            Map<String, Integer> wrong = new TreeMap<>();
            for (int i = 0; i < sent; i++) {
                int k = seen.getOrDefault("m" + i, 0);
                if (k != 1) {
                    wrong.put("m" + i, k);
                }
            }
            check(wrong.isEmpty() && seen.size() == sent, "sent m0..m" + (sent - 1) + ", received counts that are not 1: "
                    + wrong + " (" + seen.size() + " distinct)");
            report.note(String.format("first message from partition 2 %.1f s after growing; %d sent; after: partitions %s",
                    firstFromP2, sent, fromAfter));
            c.close();
            p.close();
        }
    }

    /**
     * A namespace must exist: creating a producer on {@code persistent://public/no-such-ns/…}
     * fails fast (in under 4 s, before the client's 5 s timeouts) with a {@code PulsarClientException}; after
     * {@code PUT /admin/v2/namespaces/public/no-such-ns} the same producer is created and a
     * message round-trips.
     */
    @Scenario("namespace_must_exist")
    void namespaceMustExist(Report report) throws Exception {
        try (Broker b = Broker.start("namespace-must-exist");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("t").replace("/public/default/", "/public/no-such-ns/");
            long t0 = System.nanoTime();
            PulsarClientException refused = null;
            Producer<byte[]> p = null;
            try {
                p = cl.newProducer().topic(topic).create();
            } catch (PulsarClientException e) {
                refused = e;
            }
            double took = (System.nanoTime() - t0) / 1e9;
            if (p != null) {
                p.close();
            }
            check(refused != null, "a producer on " + topic + " was created although namespace public/no-such-ns does not exist");
            // the harness client's operation and lookup timeouts are 5 s: a refusal comes well before them
            check(took < 4, String.format("the refusal took %.1f s (expected well within 10 s, before the client's"
                    + " 5 s timeouts)", took));
            check(!(refused instanceof PulsarClientException.TimeoutException),
                    String.format("refused by a timeout after %.1f s: %s", took, refused));
            report.note(String.format("refused in %.2f s with %s: %s", took, refused.getClass().getName(),
                    refused.getMessage() == null ? "" : refused.getMessage().lines().findFirst().orElse("")));
            Object before = b.admin().getJson("/admin/v2/namespaces/public");
            check(before instanceof List<?> l && !l.contains("public/no-such-ns"), "namespaces of public before: " + before);
            Admin.Response r = b.admin().request("PUT", "/admin/v2/namespaces/public/no-such-ns", null);
            check(r.ok(), "PUT /admin/v2/namespaces/public/no-such-ns: HTTP " + r.status() + " " + r.body());
            Object after = b.admin().getJson("/admin/v2/namespaces/public");
            check(after instanceof List<?> l && l.contains("public/no-such-ns"), "namespaces of public after PUT: " + after);
            p = cl.newProducer().topic(topic).enableBatching(false).create();
            Consumer<byte[]> c = cl.newConsumer().topic(topic).subscriptionName("sub")
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            p.send(Clients.bytes("hello"));
            List<Message<byte[]>> got = Clients.receiveN(c, 1, 5, 300);
            report.messages(got.size());
            check(Clients.texts(got).equals(List.of("hello")), "after creating the namespace, received " + Clients.texts(got));
            c.acknowledge(got.get(0));
            c.close();
            p.close();
        }
    }
}
