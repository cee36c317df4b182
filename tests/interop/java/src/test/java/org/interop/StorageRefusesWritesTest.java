package org.interop;

import static org.interop.harness.Check.check;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.SubscriptionType;
import org.interop.harness.Admin;
import org.interop.harness.Broker;
import org.interop.harness.Clients;
import org.interop.harness.Json;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

/** Storage that refuses writes (a full disk), as the Java client sees it. */
class StorageRefusesWritesTest {
    private static final int RECEIPTED = 10;

    /**
     * A broker with a data directory whose writes fail while a file exists
     * ({@code --fail-writes-while-exists}); one client (one connection) with a Shared consumer
     * and a producer (batching off, 5 s send timeout). Ten messages are receipted; then the
     * file is created: the next send fails with {@code ProducerBlockedQuotaExceededException}
     * (the broker closed the producer after the failed write and refuses it meanwhile), not a
     * timeout; the consumer on the same connection receives and acks the ten; the health check
     * answers 500 and the stats count the failed write. The file is removed: sends resume by
     * themselves, the consumer gets what follows, health is 200, the backlog ends empty.
     */
    @Scenario("storage_refuses_writes")
    void fullDisk(Report report) throws Exception {
        Path work = Files.createTempDirectory("full-disk-");
        Path fault = work.resolve("disk-full");
        Path data = Files.createDirectories(work.resolve("data"));
        try (Broker b = Broker.start("full-disk", "--data-dir", data.toString(),
                        "--fail-writes-while-exists", fault.toString());
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("full-disk");
            Consumer<byte[]> c = cl.newConsumer().topic(topic).subscriptionName("s")
                    .subscriptionType(SubscriptionType.Shared).subscribe();
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false)
                    .sendTimeout(5, TimeUnit.SECONDS).create();
            for (int i = 0; i < RECEIPTED; i++) {
                p.send(Clients.bytes("m" + i));
            }

            Files.createFile(fault);
            long t0 = System.nanoTime();
            PulsarClientException refused = null;
            try {
                p.send(Clients.bytes("while-full"));
            } catch (PulsarClientException e) {
                refused = e;
            }
            long refusedMs = (System.nanoTime() - t0) / 1_000_000;
            check(refused instanceof PulsarClientException.ProducerBlockedQuotaExceededException,
                    "the send while storage refuses writes: " + refused);

            List<Message<byte[]>> got = Clients.receiveN(c, RECEIPTED, 5, 300);
            List<String> want = new ArrayList<>();
            for (int i = 0; i < RECEIPTED; i++) {
                want.add("m" + i);
            }
            check(Clients.texts(got).equals(want), "the consumer got " + Clients.texts(got));
            for (Message<byte[]> m : got) {
                c.acknowledge(m);
            }
            Admin.Response health = b.admin().request("GET", "/admin/v2/brokers/health", null);
            check(health.status() == 500, "health while storage refuses writes: " + health.status());
            Map<String, Object> stats = b.admin().topicStats(topic);
            check(((Number) stats.get("storageWriteFailures")).longValue() >= 1, "stats: " + stats);

            Files.delete(fault);
            long t1 = System.nanoTime();
            long until = System.currentTimeMillis() + 30_000;
            boolean sent = false;
            while (!sent && System.currentTimeMillis() < until) {
                try {
                    p.send(Clients.bytes("after"));
                    sent = true;
                } catch (PulsarClientException.ProducerBlockedQuotaExceededException
                        | PulsarClientException.TimeoutException e) {
                    Thread.sleep(200);
                }
            }
            long resumedMs = (System.nanoTime() - t1) / 1_000_000;
            check(sent, "no send receipted within 30 s of the fault file's removal");
            Message<byte[]> after = Clients.receive(c, 5_000);
            check(after != null && Clients.text(after).equals("after"), "after the fault: " + after);
            c.acknowledge(after);
            health = b.admin().request("GET", "/admin/v2/brokers/health", null);
            check(health.status() == 200, "health after a successful write: " + health.status());
            long backlog = -1;
            for (int i = 0; i < 50 && backlog != 0; i++) {
                Object sub = Json.at(b.admin().topicStats(topic), "subscriptions", "s", "msgBacklog");
                backlog = ((Number) sub).longValue();
                Thread.sleep(100);
            }
            check(backlog == 0, "backlog at the end: " + backlog);
            report.messages(RECEIPTED + 1);
            report.note("refused in " + refusedMs + " ms (" + refused.getClass().getSimpleName()
                    + "), the consumer got all " + RECEIPTED + " meanwhile, health 500; writes resumed "
                    + resumedMs + " ms after the fault was removed");
            c.close();
            p.close();
        }
    }
}
