package org.interop;

import static org.interop.harness.Check.check;

import org.apache.pulsar.client.api.PulsarClient;
import org.interop.harness.Broker;
import org.interop.harness.Clients;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

/** What the broker does not serve is refused so that the client fails at once, not after a timeout. */
class RefusalsTest {
    /** An operation the broker must refuse. */
    interface Op {
        void run() throws Exception;
    }

    /** Runs {@code op}, which must throw; returns the failure and how long it took. */
    static String refusedWithin(String what, long limitMs, Op op) throws Exception {
        long t0 = System.nanoTime();
        Throwable failure = null;
        try {
            op.run();
        } catch (Exception e) {
            failure = e;
        }
        long ms = (System.nanoTime() - t0) / 1_000_000;
        check(failure != null, what + " was accepted");
        check(ms < limitMs, what + " was refused after " + ms + " ms (the client's timeout?): " + failure);
        return what + ": " + failure.getClass().getSimpleName() + " in " + ms + " ms";
    }

    /**
     * Non-persistent topics are not served: a producer and a consumer on one are refused with
     * {@code TopicNotFound} in well under the client's 5 s operation timeout.
     */
    @Scenario("non_persistent_refused")
    void nonPersistent(Report report) throws Exception {
        try (Broker b = Broker.start("non-persistent");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = "non-persistent://public/default/" + Clients.topic("np").replaceAll(".*/", "");
            String p = refusedWithin("a producer", 3_000, () -> cl.newProducer().topic(topic).create());
            String c = refusedWithin("a consumer", 3_000,
                    () -> cl.newConsumer().topic(topic).subscriptionName("s").subscribe());
            report.note(p + "; " + c);
        }
    }

    /**
     * Transactions are not served: a client built with {@code enableTransaction(true)} fails,
     * when it is built or at its first transaction, at once and with a clear exception.
     */
    @Scenario("transactions_refused")
    void transactions(Report report) throws Exception {
        try (Broker b = Broker.start("transactions")) {
            String r = refusedWithin("a transaction", 4_000, () -> {
                try (PulsarClient cl = PulsarClient.builder().serviceUrl(b.serviceUrl())
                        .operationTimeout(10, java.util.concurrent.TimeUnit.SECONDS)
                        .enableTransaction(true).build()) {
                    cl.newTransaction().build().get(10, java.util.concurrent.TimeUnit.SECONDS);
                }
            });
            report.note(r);
        }
    }
}
