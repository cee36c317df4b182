package org.interop;

import static org.interop.harness.Check.check;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.interop.harness.Broker;
import org.interop.harness.Check;
import org.interop.harness.Clients;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

/**
 * Seed 002 (Key_Shared nack): one key, m0..m(n-1), receiver queue 10, nack delay 100 ms; the
 * application nacks m0 the first time and acks everything else at once.
 * With {@code --key-shared-max-unacked-per-key 1} the broker sends the next message of a key only
 * after the previous one is acked: the application sees m0 m0' m1 ...; without it, and with
 * {@code --legacy unordered-nack}, the prefetched messages come first: m0 m1 ... m9 m0'.
 */
class Seed002KeySerialTest {
    record Run(List<String> order, double seconds) {}

    static Run runOnce(String brokerName, int n, String... flags) throws Exception {
        try (Broker b = Broker.start(brokerName, flags);
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("seed002");
            Consumer<byte[]> c = cl.newConsumer().topic(topic).subscriptionName("ks")
                    .subscriptionType(SubscriptionType.Key_Shared)
                    .negativeAckRedeliveryDelay(100, TimeUnit.MILLISECONDS)
                    .receiverQueueSize(10)
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false).create();
            for (int i = 0; i < n; i++) {
                p.newMessage().key("K").value(Clients.bytes("m" + i)).send();
            }
            List<String> order = new ArrayList<>();
            boolean nacked = false;
            Check.Deadline d = new Check.Deadline(20);
            long t0 = System.nanoTime();
            while (order.size() < n + 1 && !d.expired()) {
                Message<byte[]> m = Clients.receive(c, 2000);
                if (m == null) {
                    continue;
                }
                String name = Clients.text(m) + (m.getRedeliveryCount() > 0 ? "'" : "");
                order.add(name);
                if (!nacked && name.equals("m0")) {
                    nacked = true;
                    c.negativeAcknowledge(m);
                } else {
                    c.acknowledge(m);
                }
            }
            double secs = (System.nanoTime() - t0) / 1e9;
            c.close();
            p.close();
            return new Run(order, secs);
        }
    }

    @Scenario("seed_002_key_serial_ours")
    void keySerial(Report report) throws Exception {
        int n = 20;
        Run r = runOnce("seed002-ours", n, "--key-shared-max-unacked-per-key", "1");
        report.messages(r.order.size());
        List<String> want = new ArrayList<>(List.of("m0", "m0'"));
        for (int i = 1; i < n; i++) {
            want.add("m" + i);
        }
        check(r.order.equals(want), "key-serial: application order " + r.order + ", expected " + want);
        report.note(String.format("order m0 m0' m1..m%d, one key at %.1f msg/s (the client groups acks every 100 ms)",
                n - 1, r.order.size() / r.seconds));
    }

    @Scenario("seed_002_key_serial_default")
    void withoutFlag(Report report) throws Exception {
        Run r = runOnce("seed002-default", 10);
        report.messages(r.order.size());
        check(!r.order.isEmpty() && r.order.get(0).equals("m0") && r.order.get(r.order.size() - 1).equals("m0'"),
                "without key-serial: expected m0' last, got " + r.order);
        report.note("order " + String.join(" ", r.order));
    }

    @Scenario("seed_002_key_serial_legacy")
    void legacy(Report report) throws Exception {
        Run r = runOnce("seed002-legacy", 10, "--key-shared-max-unacked-per-key", "1", "--legacy", "unordered-nack");
        report.messages(r.order.size());
        check(!r.order.isEmpty() && r.order.get(r.order.size() - 1).equals("m0'"),
                "with --legacy unordered-nack: expected m0' last, got " + r.order);
        report.note("order " + String.join(" ", r.order));
    }
}
