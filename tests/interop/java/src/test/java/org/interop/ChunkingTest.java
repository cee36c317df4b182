package org.interop;

import static org.interop.harness.Check.check;

import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.interop.harness.Broker;
import org.interop.harness.Clients;
import org.interop.harness.Json;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

class ChunkingTest {
    static final int[] SIZES = {25600, 12000};

    /** Deterministic bytes: SHA-256 blocks of "salt-i". */
    static byte[] body(int n, String salt) throws Exception {
        byte[] out = new byte[n];
        MessageDigest sha = MessageDigest.getInstance("SHA-256");
        for (int off = 0, i = 0; off < n; i++) {
            byte[] blk = sha.digest(Clients.bytes(salt + "-" + i));
            int len = Math.min(blk.length, n - off);
            System.arraycopy(blk, 0, out, off, len);
            off += len;
        }
        return out;
    }

    /**
     * Chunking (broker {@code --max-message-size 10240}, producer {@code enableChunking(true)},
     * batching off): a 25,600 B and a 12,000 B message are stored as 3 + 2 entries, received intact;
     * the second is nacked and re-received intact with redelivery count 1; after the acks a new
     * consumer gets nothing.
     */
    @Scenario("chunking")
    void chunking(Report report) throws Exception {
        try (Broker b = Broker.start("chunking", "--max-message-size", "10240");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("chunked");
            Consumer<byte[]> c = cl.newConsumer().topic(topic).subscriptionName("sub")
                    .subscriptionType(SubscriptionType.Shared)
                    .negativeAckRedeliveryDelay(100, TimeUnit.MILLISECONDS)
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            Producer<byte[]> p = cl.newProducer().topic(topic).enableChunking(true).enableBatching(false).create();
            List<byte[]> bodies = new ArrayList<>();
            List<String> ids = new ArrayList<>();
            for (int i = 0; i < SIZES.length; i++) {
                bodies.add(body(SIZES[i], "s" + i));
                MessageId id = p.send(bodies.get(i));
                ids.add(id.toString());
            }
            long entries = Json.num(b.admin().internalStats(topic), "entriesAddedCounter");
            check(entries == 5, "entriesAddedCounter " + entries + ", expected 5 chunks (3 + 2)");
            List<Message<byte[]>> got = Clients.receiveN(c, 2, 10, 300);
            check(got.size() == 2, "received " + got.size() + " messages, expected 2");
            for (int i = 0; i < 2; i++) {
                byte[] v = got.get(i).getValue();
                check(v.length == SIZES[i], "message " + i + ": " + v.length + " bytes, expected " + SIZES[i]);
                check(Arrays.equals(v, bodies.get(i)), "message " + i + ": payload differs from what was sent");
            }
            c.acknowledge(got.get(0));
            c.negativeAcknowledge(got.get(1));
            Message<byte[]> again = Clients.receive(c, 5000);
            check(again != null, "the nacked chunked message was not re-received within 5 s");
            check(Arrays.equals(again.getValue(), bodies.get(1)), "re-received " + again.getValue().length
                    + " bytes, not the 12,000 B sent");
            check(again.getRedeliveryCount() == 1, "redelivery count " + again.getRedeliveryCount() + ", expected 1");
            c.acknowledge(again);
            List<Message<byte[]>> extra = Clients.drain(c, 600, 3);
            check(extra.isEmpty(), extra.size() + " extra deliveries after the acks");
            c.close();
            Consumer<byte[]> late = cl.newConsumer().topic(topic).subscriptionName("sub")
                    .subscriptionType(SubscriptionType.Shared).subscribe();
            List<Message<byte[]>> left = Clients.drain(late, 600, 3);
            check(left.isEmpty(), left.size() + " messages left after acking every chunk");
            late.close();
            p.close();
            report.messages(3);
            report.note(SIZES[0] + " B and " + SIZES[1] + " B as 5 chunk entries, ids " + ids
                    + ", 2nd nacked and re-received intact (rc 1)");
        }
    }
}
