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
