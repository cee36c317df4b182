package org.interop;

import static org.interop.harness.Check.check;

import java.util.ArrayList;
import java.util.List;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.interop.harness.Broker;
import org.interop.harness.Clients;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

/** Message deduplication by producer name and sequence id, as Pulsar's broker does it. */
class DeduplicationTest {
    /**
     * Broker {@code --broker-deduplication-enabled true}: producer "dedup-p" sends sequence ids
     * 0..4 and closes; a new producer with the same name is told its last sequence id (4); it
     * re-sends sequence id 3 (receipted, not stored) and sends 5. The consumer gets m0..m5, each
     * once.
     */
    @Scenario("deduplication")
    void deduplication(Report report) throws Exception {
        try (Broker b = Broker.start("dedup", "--broker-deduplication-enabled", "true");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("dedup");
            Consumer<byte[]> c = cl.newConsumer().topic(topic).subscriptionName("s")
                    .subscriptionType(SubscriptionType.Shared)
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            Producer<byte[]> p = cl.newProducer().topic(topic).producerName("dedup-p").enableBatching(false).create();
            for (int i = 0; i < 5; i++) {
                p.newMessage().sequenceId(i).value(Clients.bytes("m" + i)).send();
            }
            p.close();
            Producer<byte[]> again = cl.newProducer().topic(topic).producerName("dedup-p").enableBatching(false)
                    .create();
            long last = again.getLastSequenceId();
            check(last == 4, "the reconnected producer was told last sequence id " + last + ", expected 4");
            MessageId dup = again.newMessage().sequenceId(3).value(Clients.bytes("m3")).send();
            again.newMessage().sequenceId(5).value(Clients.bytes("m5")).send();
            List<String> got = Clients.texts(Clients.drain(c, 500, 5));
            List<String> want = new ArrayList<>();
            for (int i = 0; i <= 5; i++) {
                want.add("m" + i);
            }
            check(got.equals(want), "the consumer got " + got + ", expected " + want);
            again.close();
            c.close();
            report.messages(7 + got.size());
            report.note("last sequence id " + last + "; the re-sent sequence id 3 receipted as " + dup);
        }
    }
}
