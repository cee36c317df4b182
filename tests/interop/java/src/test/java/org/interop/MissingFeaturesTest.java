package org.interop;

import static org.interop.harness.Check.check;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.ProducerAccessMode;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.interop.harness.Broker;
import org.interop.harness.Check;
import org.interop.harness.Clients;
import org.interop.harness.ExpectedFailure;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

/**
 * What applications do with features the broker does not have yet. Each scenario is written as
 * if the feature worked and is a strict {@link ExpectedFailure}: when the broker gains the
 * feature, the scenario passes and the suite fails until the marker is removed.
 */
class MissingFeaturesTest {
    /**
     * Failover: two consumers on one subscription; the active one gets every message; when it
     * closes, the other takes over and gets the rest.
     */
    @Scenario("failover_subscription")
    @ExpectedFailure(feature = "Failover", matches = "Failover")
    void failover(Report report) throws Exception {
        try (Broker b = Broker.start("failover");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("failover");
            List<Consumer<byte[]>> cs = new ArrayList<>();
            for (String n : List.of("f1", "f2")) {
                cs.add(cl.newConsumer().topic(topic).subscriptionName("fo").subscriptionType(SubscriptionType.Failover)
                        .consumerName(n).subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe());
            }
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false).create();
            for (int i = 0; i < 10; i++) {
                p.send(Clients.bytes("m" + i));
            }
            List<Message<byte[]>> a = Clients.drain(cs.get(0), 500, 5);
            List<Message<byte[]>> b2 = Clients.drain(cs.get(1), 500, 5);
            report.messages(a.size() + b2.size());
            Consumer<byte[]> active = a.isEmpty() ? cs.get(1) : cs.get(0);
            Consumer<byte[]> standby = a.isEmpty() ? cs.get(0) : cs.get(1);
            check((a.size() == 10 && b2.isEmpty()) || (b2.size() == 10 && a.isEmpty()),
                    "one active consumer should get all 10: f1 " + a.size() + ", f2 " + b2.size());
            for (Message<byte[]> m : (a.isEmpty() ? b2 : a)) {
                active.acknowledge(m);
            }
            active.close();
            for (int i = 10; i < 15; i++) {
                p.send(Clients.bytes("m" + i));
            }
            List<Message<byte[]>> rest = Clients.receiveN(standby, 5, 5, 300);
            report.messages(rest.size());
            check(rest.size() == 5, "after the active consumer closed, the standby got " + rest.size() + " of 5");
            standby.close();
            p.close();
        }
    }

    /**
     * Producer access mode Exclusive: while one {@code ProducerAccessMode.Exclusive} producer is
     * connected, a second one on the topic is refused.
     */
    @Scenario("exclusive_producer")
    @ExpectedFailure(feature = "access modes", matches = "second Exclusive producer was accepted")
    void exclusiveProducer(Report report) throws Exception {
        try (Broker b = Broker.start("exclusive-producer");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("excl-producer");
            Producer<byte[]> p1 = cl.newProducer().topic(topic).accessMode(ProducerAccessMode.Exclusive).create();
            p1.send(Clients.bytes("from p1"));
            report.messages(1);
            Producer<byte[]> p2 = null;
            PulsarClientException refused = null;
            try {
                p2 = cl.newProducer().topic(topic).accessMode(ProducerAccessMode.Exclusive).create();
            } catch (PulsarClientException e) {
                refused = e;
            }
            if (p2 != null) {
                p2.close();
            }
            p1.close();
            check(refused != null, "a second Exclusive producer was accepted while the first was connected");
            report.note("second producer refused: " + refused.getClass().getSimpleName());
        }
    }
}
