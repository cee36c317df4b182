package org.interop;

import static org.interop.harness.Check.check;

import java.util.List;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.interop.harness.Admin;
import org.interop.harness.Broker;
import org.interop.harness.Clients;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

/** A terminated topic, as the Java client sees it. */
class TerminateTest {
    /**
     * Three messages, then {@code POST …/terminate} (answers the last message id): the open
     * producer's next send and a new producer fail with {@code TopicTerminatedException}; the
     * consumer gets the three, and once it acknowledged them {@code hasReachedEndOfTopic()}
     * turns true.
     */
    @Scenario("terminated_topic")
    void terminated(Report report) throws Exception {
        try (Broker b = Broker.start("terminated");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("terminated");
            Consumer<byte[]> c = cl.newConsumer().topic(topic).subscriptionName("s")
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false).create();
            for (int i = 0; i < 3; i++) {
                p.send(Clients.bytes("m" + i));
            }
            Admin.Response r = b.admin().request("POST", Admin.topicPath(topic) + "/terminate", "");
            check(r.status() == 200 && r.body().contains("entryId"), "terminate: " + r.status() + " " + r.body());
            Throwable sendFailure = Clients.firstSendFailure(p, "late", 5_000);
            check(sendFailure instanceof PulsarClientException.TopicTerminatedException,
                    "the open producer's send after terminate: " + sendFailure);
            PulsarClientException created = null;
            try {
                cl.newProducer().topic(topic).create().close();
            } catch (PulsarClientException e) {
                created = e;
            }
            check(created instanceof PulsarClientException.TopicTerminatedException, "a new producer: " + created);
            List<Message<byte[]>> got = Clients.receiveN(c, 3, 5, 300);
            report.messages(got.size());
            check(Clients.texts(got).equals(List.of("m0", "m1", "m2")), "the consumer got " + Clients.texts(got));
            check(!c.hasReachedEndOfTopic(), "the end was reached before the acks");
            for (Message<byte[]> m : got) {
                c.acknowledge(m);
            }
            long until = System.currentTimeMillis() + 5_000;
            while (!c.hasReachedEndOfTopic() && System.currentTimeMillis() < until) {
                Thread.sleep(50);
            }
            check(c.hasReachedEndOfTopic(), "the consumer did not reach the end of the topic after its acks");
            report.note("send: " + sendFailure.getClass().getSimpleName() + "; new producer: "
                    + created.getClass().getSimpleName() + "; end of topic reached");
            c.close();
            p.closeAsync();
        }
    }
}
