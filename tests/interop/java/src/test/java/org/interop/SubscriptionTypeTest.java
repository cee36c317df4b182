package org.interop;

import static org.interop.harness.Check.check;

import java.util.List;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.interop.harness.Broker;
import org.interop.harness.Clients;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

/** A subscription's type, as Pulsar lets it change. */
class SubscriptionTypeTest {
    /**
     * A Shared subscription gets 4 messages and acks 2. While its consumer is connected, an
     * Exclusive subscribe to the same subscription is refused ({@code ConsumerBusyException}, as
     * Pulsar's "Subscription is of different type"); once it has closed, the Exclusive subscribe is
     * accepted, the subscription keeps its cursor, and only the 2 unacked messages come back.
     */
    @Scenario("subscription_type_change")
    void typeChange(Report report) throws Exception {
        try (Broker b = Broker.start("subscription-type");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("retype");
            Consumer<byte[]> shared = cl.newConsumer().topic(topic).subscriptionName("s")
                    .subscriptionType(SubscriptionType.Shared)
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false).create();
            for (int i = 0; i < 4; i++) {
                p.send(Clients.bytes("m" + i));
            }
            List<Message<byte[]>> got = Clients.receiveN(shared, 4, 5, 300);
            check(got.size() == 4, "the Shared consumer got " + Clients.texts(got));
            shared.acknowledge(got.get(0));
            shared.acknowledge(got.get(1));
            PulsarClientException busy = null;
            try {
                cl.newConsumer().topic(topic).subscriptionName("s").subscriptionType(SubscriptionType.Exclusive)
                        .subscribe().close();
            } catch (PulsarClientException e) {
                busy = e;
            }
            check(busy instanceof PulsarClientException.ConsumerBusyException,
                    "an Exclusive subscribe beside the connected Shared consumer: " + busy);
            shared.close(); // flushes the acks
            Consumer<byte[]> exclusive = cl.newConsumer().topic(topic).subscriptionName("s")
                    .subscriptionType(SubscriptionType.Exclusive).subscribe();
            List<String> again = Clients.texts(Clients.drain(exclusive, 500, 5));
            List<String> want = Clients.texts(got.subList(2, 4));
            check(again.equals(want), "after the type change the Exclusive consumer got " + again + ", expected " + want);
            exclusive.close();
            p.close();
            report.messages(4 + again.size());
            report.note("refused while connected: " + busy.getClass().getSimpleName() + "; then Exclusive got " + again);
        }
    }
}
