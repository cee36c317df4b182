package org.interop;

import static org.interop.harness.Check.check;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.BatcherBuilder;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.impl.MultiplierRedeliveryBackoff;
import org.interop.harness.Broker;
import org.interop.harness.Check;
import org.interop.harness.Clients;
import org.interop.harness.Json;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

class AckTest {
    private static Consumer<byte[]> batchAckConsumer(PulsarClient cl, String topic, String name) throws Exception {
        return cl.newConsumer().topic(topic).subscriptionName("sub").subscriptionType(SubscriptionType.Shared)
                .consumerName(name)
                .enableBatchIndexAcknowledgment(true)
                .isAckReceiptEnabled(true)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                .subscribe();
    }

    /**
     * Batch-index ack with ack receipts: one batch of 5 (one entry); c1
     * ({@code enableBatchIndexAcknowledgment}, {@code isAckReceiptEnabled}) acks indexes 0 and 2,
     * and those ack futures complete (the broker answers the acks); c1 closes. c2 gets exactly
     * indexes 1, 3, 4 and acks them (futures complete); c3 gets nothing; backlog 0.
     */
    @Scenario("batch_index_ack")
    void batchIndexAck(Report report) throws Exception {
        try (Broker b = Broker.start("batch-index-ack");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("batch-ack");
            Consumer<byte[]> c1 = batchAckConsumer(cl, topic, "c1");
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(true).batchingMaxMessages(5)
                    .batchingMaxPublishDelay(2, TimeUnit.SECONDS).batcherBuilder(BatcherBuilder.KEY_BASED).create();
            List<CompletableFuture<?>> sends = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                sends.add(p.newMessage().key("kb").value(Clients.bytes("b-" + i)).sendAsync());
            }
            p.flush();
            CompletableFuture.allOf(sends.toArray(new CompletableFuture[0])).get(5, TimeUnit.SECONDS);
            List<Message<byte[]>> first = Clients.receiveN(c1, 5, 10, 300);
            check(first.size() == 5, "c1 got " + first.size() + " messages, expected the 5 of the batch");
            Set<String> entries = new HashSet<>();
            List<Integer> idx = new ArrayList<>();
            for (Message<byte[]> m : first) {
                entries.add(Clients.ledger(m.getMessageId()) + ":" + Clients.entry(m.getMessageId()));
                idx.add(Clients.batchIndex(m.getMessageId()));
            }
            check(entries.size() == 1, "the 5 messages are not one entry: " + entries);
            check(idx.equals(List.of(0, 1, 2, 3, 4)), "batch indexes " + idx);
            c1.acknowledgeAsync(first.get(0).getMessageId()).get(5, TimeUnit.SECONDS);
            c1.acknowledgeAsync(first.get(2).getMessageId()).get(5, TimeUnit.SECONDS);
            c1.close();

            Consumer<byte[]> c2 = batchAckConsumer(cl, topic, "c2");
            List<Message<byte[]>> second = Clients.receiveN(c2, 3, 10, 700);
            List<String> got = new ArrayList<>();
            for (Message<byte[]> m : second) {
                got.add(Clients.batchIndex(m.getMessageId()) + "=" + Clients.text(m));
            }
            check(got.equals(List.of("1=b-1", "3=b-3", "4=b-4")), "c2 got " + got + ", expected indexes 1, 3, 4 only");
            List<CompletableFuture<Void>> acks = new ArrayList<>();
            for (Message<byte[]> m : second) {
                acks.add(c2.acknowledgeAsync(m.getMessageId()));
            }
            CompletableFuture.allOf(acks.toArray(new CompletableFuture[0])).get(5, TimeUnit.SECONDS);
            c2.close();

            Consumer<byte[]> c3 = batchAckConsumer(cl, topic, "c3");
            List<Message<byte[]>> third = Clients.drain(c3, 700, 3);
            check(third.isEmpty(), "c3 got " + Clients.texts(third) + " after every index was acked");
            c3.close();
            check(Json.num(b.admin().topicStats(topic), "subscriptions", "sub", "msgBacklog") == 0, "backlog not 0");
            p.close();
            report.messages(first.size() + second.size());
            report.note("entry " + entries + ", c1 acked [0, 2] (receipts), c2 got " + got + " (receipts), c3 got 0");
        }
    }

    /**
     * Nack with {@code negativeAckRedeliveryBackoff} (multiplier: 200 ms, x4, at most 2 s): a
     * message nacked twice comes back with redelivery count 1, then 2, the second wait longer than
     * the first (backoff by redelivery count); then acked, nothing more arrives.
     */
    @Scenario("nack_backoff")
    void nackBackoff(Report report) throws Exception {
        try (Broker b = Broker.start("nack-backoff");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("nack");
            Consumer<byte[]> c = cl.newConsumer().topic(topic).subscriptionName("sub")
                    .subscriptionType(SubscriptionType.Shared).receiverQueueSize(10)
                    .negativeAckRedeliveryBackoff(MultiplierRedeliveryBackoff.builder()
                            .minDelayMs(200).maxDelayMs(2000).multiplier(4).build())
                    .subscribe();
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false).create();
            String sentId = Clients.id(p.send(Clients.bytes("nack-me")));
            List<Integer> counts = new ArrayList<>();
            List<Long> waits = new ArrayList<>();
            Message<byte[]> m = Clients.receive(c, 3000);
            check(m != null, "the message was not delivered within 3 s");
            for (int expected = 0; expected <= 2; expected++) {
                check(Clients.text(m).equals("nack-me"), "payload " + Clients.text(m));
                check(m.getRedeliveryCount() == expected,
                        "delivery " + (expected + 1) + ": redelivery count " + m.getRedeliveryCount() + ", expected " + expected);
                check(Clients.id(m.getMessageId()).equals(sentId), "id " + Clients.id(m.getMessageId()) + " vs " + sentId);
                counts.add(m.getRedeliveryCount());
                if (expected == 2) {
                    c.acknowledge(m);
                    break;
                }
                long t0 = System.nanoTime();
                c.negativeAcknowledge(m);
                m = Clients.receive(c, 5000);
                check(m != null, "no redelivery within 5 s of nack #" + (expected + 1));
                waits.add((System.nanoTime() - t0) / 1_000_000);
            }
            check(waits.get(1) > waits.get(0), "backoff: second wait " + waits.get(1) + " ms not longer than the first "
                    + waits.get(0) + " ms");
            check(waits.get(1) >= 500, "backoff: second wait " + waits.get(1) + " ms, expected about 800 ms");
            List<Message<byte[]>> extra = Clients.drain(c, 500, 2);
            check(extra.isEmpty(), extra.size() + " more deliveries after the ack");
            c.close();
            p.close();
            report.messages(counts.size());
            report.note("redelivery counts " + counts + ", nack-to-redelivery " + waits + " ms (backoff 200, 800 ms)");
        }
    }

    static long backlog(Broker b, String topic, String sub) {
        return Json.num(b.admin().topicStats(topic), "subscriptions", sub, "msgBacklog");
    }

    static void waitBacklog(Broker b, String topic, String sub, long want) {
        Check.waitUntil(() -> backlog(b, topic, sub) == want, 5, "backlog " + want + " on " + sub);
    }
}
