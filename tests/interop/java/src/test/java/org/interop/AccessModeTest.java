package org.interop;

import static org.interop.harness.Check.check;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.ProducerAccessMode;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.interop.harness.Broker;
import org.interop.harness.Clients;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

/** Producer access modes, as the Java client asks for them and Pulsar answers them. */
class AccessModeTest {
    /** Creating a producer that must be refused: the refusal. */
    static PulsarClientException refusal(PulsarClient cl, String topic, ProducerAccessMode mode) throws Exception {
        try {
            Producer<byte[]> p = cl.newProducer().topic(topic).accessMode(mode).create();
            p.close();
            return null;
        } catch (PulsarClientException e) {
            return e;
        }
    }

    /**
     * Exclusive: while one {@code ProducerAccessMode.Exclusive} producer is connected, a second
     * Exclusive one is refused with {@code ProducerFencedException} and a Shared one with
     * {@code ProducerBusyException}; after it closes, a new Exclusive one is accepted.
     */
    @Scenario("exclusive_producer")
    void exclusiveProducer(Report report) throws Exception {
        try (Broker b = Broker.start("exclusive-producer");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("excl-producer");
            Producer<byte[]> p1 = cl.newProducer().topic(topic).accessMode(ProducerAccessMode.Exclusive).create();
            p1.send(Clients.bytes("from p1"));
            report.messages(1);
            PulsarClientException second = refusal(cl, topic, ProducerAccessMode.Exclusive);
            check(second instanceof PulsarClientException.ProducerFencedException,
                    "a second Exclusive producer: " + second);
            PulsarClientException shared = refusal(cl, topic, ProducerAccessMode.Shared);
            check(shared instanceof PulsarClientException.ProducerBusyException, "a Shared producer: " + shared);
            p1.close();
            Producer<byte[]> p3 = cl.newProducer().topic(topic).accessMode(ProducerAccessMode.Exclusive).create();
            p3.send(Clients.bytes("from p3"));
            report.messages(1);
            p3.close();
            report.note("refused: " + second.getClass().getSimpleName() + ", " + shared.getClass().getSimpleName());
        }
    }

    /**
     * WaitForExclusive waits while an Exclusive producer is connected and is created when it
     * closes. Then ExclusiveWithFencing takes the topic from an Exclusive producer: the old
     * one's client reconnects with its epoch and its sends fail with
     * {@code ProducerFencedException}; the new one's succeed.
     */
    @Scenario("wait_for_exclusive_and_fencing")
    void waitAndFence(Report report) throws Exception {
        try (Broker b = Broker.start("wait-and-fence");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("wait-fence");
            Producer<byte[]> p1 = cl.newProducer().topic(topic).accessMode(ProducerAccessMode.Exclusive).create();
            CompletableFuture<Producer<byte[]>> waiting = cl.newProducer().topic(topic)
                    .accessMode(ProducerAccessMode.WaitForExclusive).createAsync();
            Thread.sleep(500);
            check(!waiting.isDone(), "the WaitForExclusive producer was created while an Exclusive one is connected");
            p1.close();
            Producer<byte[]> p2 = waiting.get(5, TimeUnit.SECONDS);
            p2.send(Clients.bytes("from p2"));
            p2.close();
            Producer<byte[]> old = cl.newProducer().topic(topic).accessMode(ProducerAccessMode.Exclusive).create();
            old.send(Clients.bytes("from the old exclusive producer"));
            Producer<byte[]> fencing = cl.newProducer().topic(topic)
                    .accessMode(ProducerAccessMode.ExclusiveWithFencing).create();
            fencing.send(Clients.bytes("from the fencing producer"));
            report.messages(3);
            Throwable fenced = Clients.firstSendFailure(old, "from the fenced producer", 5_000);
            check(fenced instanceof PulsarClientException.ProducerFencedException,
                    "the fenced producer's send: " + fenced);
            report.note("old producer: " + fenced.getClass().getSimpleName());
            fencing.close();
            old.closeAsync();
        }
    }
}
