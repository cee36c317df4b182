package org.versus;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;

/**
 * Seed 002 (Key_Shared nack): one key, m0..m9, receiver queue 10, nack delay 100 ms; the
 * application nacks m0 the first time and acks everything else at once. A violation is a later
 * message of the key that the application processed before the nacked m0 came back (Pulsar: the
 * prefetched m1..m9; ours with key-serial dispatch, {@code --key-shared-max-unacked-per-key 1}:
 * none).
 */
final class Seed002 {
    static final int N = 10;

    private Seed002() {}

    static void run(Versus v) throws Exception {
        String topic = "persistent://public/default/" + Versus.fresh("versus-seed002");
        try (PulsarClient cl = v.client()) {
            Consumer<byte[]> c = cl.newConsumer().topic(topic).subscriptionName("ks")
                    .subscriptionType(SubscriptionType.Key_Shared)
                    .negativeAckRedeliveryDelay(100, TimeUnit.MILLISECONDS).receiverQueueSize(10)
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false).create();
            for (int i = 0; i < N; i++) {
                p.newMessage().key("K").value(("m" + i).getBytes()).send();
            }
            List<String> order = new ArrayList<>();
            boolean nacked = false;
            long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (order.size() < N + 1 && System.nanoTime() < end) {
                Message<byte[]> m = c.receive(500, TimeUnit.MILLISECONDS);
                if (m == null) {
                    continue;
                }
                String name = new String(m.getValue()) + (m.getRedeliveryCount() > 0 ? "'" : "");
                order.add(name);
                if (!nacked && name.equals("m0")) {
                    nacked = true;
                    c.negativeAcknowledge(m);
                } else {
                    c.acknowledge(m);
                }
            }
            int back = order.indexOf("m0'");
            // Messages processed between m0 and its redelivery: each is a later message of the key.
            int violations = back < 0 ? N - 1 : back - 1;
            Versus.result("seed002", "nack", violations, "application order " + String.join(" ", order)
                    + (back < 0 ? " (m0 never came back in 20 s)" : ""));
            c.close();
            p.close();
        }
    }
}
