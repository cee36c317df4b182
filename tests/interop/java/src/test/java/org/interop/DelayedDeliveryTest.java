package org.interop;

import static org.interop.harness.Check.check;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionType;
import org.interop.harness.Broker;
import org.interop.harness.Check;
import org.interop.harness.Clients;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

class DelayedDeliveryTest {
    static final long DELAY_MS = 1500;

    /**
     * {@code deliverAfter} on Shared, two consumers (broker defaults: strict, 1000 ms tick): 5
     * messages delayed 1.5 s between 5 plain ones (producer batching on: the client sends the
     * delayed ones unbatched). The plain ones arrive within 1 s; no delayed one before its
     * deliver-at time (taken on the client before the send), and each within 2 s after it.
     */
    @Scenario("delayed_delivery_shared")
    void deliverAfterShared(Report report) throws Exception {
        try (Broker b = Broker.start("delayed");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("delayed");
            List<Consumer<byte[]>> cs = new ArrayList<>();
            for (int i = 0; i < 2; i++) {
                cs.add(cl.newConsumer().topic(topic).subscriptionName("sub").subscriptionType(SubscriptionType.Shared)
                        .receiverQueueSize(10).subscribe());
            }
            Producer<byte[]> p = cl.newProducer().topic(topic).create();
            Map<String, Long> due = new HashMap<>();
            Map<String, Long> sentAt = new HashMap<>();
            for (int i = 0; i < 10; i++) {
                String s = "m" + i;
                long now = System.currentTimeMillis();
                sentAt.put(s, now);
                if (i % 2 == 0) {
                    due.put(s, now + DELAY_MS);
                    p.newMessage().value(Clients.bytes(s)).deliverAfter(DELAY_MS, TimeUnit.MILLISECONDS).sendAsync();
                } else {
                    p.newMessage().value(Clients.bytes(s)).sendAsync();
                }
            }
            p.flush();
            Map<String, Long> arrived = new HashMap<>();
            Check.Deadline d = new Check.Deadline(8);
            while (arrived.size() < 10 && !d.expired()) {
                for (Consumer<byte[]> c : cs) {
                    Message<byte[]> m = Clients.receive(c, 20);
                    if (m != null) {
                        arrived.putIfAbsent(Clients.text(m), System.currentTimeMillis());
                        c.acknowledge(m);
                    }
                }
            }
            check(arrived.size() == 10, "only " + arrived.keySet() + " of 10 arrived");
            long maxLate = 0;
            long maxPlain = 0;
            for (Map.Entry<String, Long> e : arrived.entrySet()) {
                Long dueAt = due.get(e.getKey());
                if (dueAt != null) {
                    long late = e.getValue() - dueAt;
                    check(late >= 0, e.getKey() + " arrived " + (-late) + " ms before its deliver-at time");
                    check(late < 2000, e.getKey() + " arrived " + late + " ms after its deliver-at time");
                    maxLate = Math.max(maxLate, late);
                } else {
                    long wait = e.getValue() - sentAt.get(e.getKey());
                    check(wait < 1000, "plain " + e.getKey() + " waited " + wait + " ms");
                    maxPlain = Math.max(maxPlain, wait);
                }
            }
            for (Consumer<byte[]> c : cs) {
                c.close();
            }
            p.close();
            report.messages(arrived.size());
            report.note("5 delayed at most " + maxLate + " ms after their time, plain within " + maxPlain + " ms");
        }
    }
}
