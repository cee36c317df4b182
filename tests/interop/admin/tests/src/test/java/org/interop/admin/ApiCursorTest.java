package org.interop.admin;

import static org.interop.harness.Check.check;

import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdminException.NotFoundException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.SubscriptionType;
import org.interop.harness.Check;
import org.interop.harness.Report;
import org.interop.harness.Rig;
import org.interop.harness.Scenario;

/**
 * A subscription's cursor moved by the Java admin API: {@code skipMessages}, {@code skipAllMessages},
 * {@code expireMessages}, {@code resetCursor} by time and by message id (inclusive and
 * exclusive), each checked by the subscription's backlog and, for a reset, by what a consumer
 * then receives.
 */
class ApiCursorTest {
    @Scenario("api_cursor")
    void cursor(Report report) throws Exception {
        try (Rig r = Rig.start("api-cursor")) {
            var t = r.admin.topics();
            String topic = Fixtures.topic("cursor");
            Fixtures.subscription(r, topic, "s");
            List<MessageId> ids;
            long between;
            try (Producer<byte[]> p = Fixtures.producer(r, topic)) {
                ids = new java.util.ArrayList<>(Fixtures.send(p, "m", 10));
                Check.sleepMs(1500);
                between = System.currentTimeMillis();
                Check.sleepMs(50);
                ids.addAll(Fixtures.send(p, "n", 10));
            }
            // Within 1 s of the second ten: only the first ten are older than 1 s.
            r.ok("expireMessages(1 s)", () -> t.expireMessages(topic, "s", 1));
            Fixtures.awaitBacklog(r, topic, "s", 10, 3, "expireMessages(1 s)");

            r.ok("resetCursor(MessageId.earliest)", () -> t.resetCursor(topic, "s", MessageId.earliest));
            Fixtures.awaitBacklog(r, topic, "s", 20, 3, "resetCursor(earliest)");
            r.ok("skipMessages(5)", () -> t.skipMessages(topic, "s", 5));
            Fixtures.awaitBacklog(r, topic, "s", 15, 3, "skipMessages(5)");
            r.ok("skipAllMessages", () -> t.skipAllMessages(topic, "s"));
            Fixtures.awaitBacklog(r, topic, "s", 0, 3, "skipAllMessages");
            r.ok("resetCursor(time between the two tens)", () -> t.resetCursor(topic, "s", between));
            Fixtures.awaitBacklog(r, topic, "s", 10, 3, "resetCursor(timestamp)");
            r.ok("resetCursor(id of m3)", () -> t.resetCursor(topic, "s", ids.get(3)));
            Fixtures.awaitBacklog(r, topic, "s", 17, 3, "resetCursor(m3)");
            // A consumer now starts at m3.
            try (Consumer<byte[]> c = r.client().newConsumer().topic(topic).subscriptionName("s")
                    .subscriptionType(SubscriptionType.Exclusive).subscribe()) {
                Message<byte[]> m = c.receive(5, TimeUnit.SECONDS);
                check(m != null && Fixtures.text(m).equals("m3"),
                        "after resetCursor(m3) the first message is " + (m == null ? "none" : Fixtures.text(m)));
            }
            r.ok("resetCursor(id of n0)", () -> t.resetCursor(topic, "s", ids.get(10)));
            try (Consumer<byte[]> c = r.client().newConsumer().topic(topic).subscriptionName("s")
                    .subscriptionType(SubscriptionType.Exclusive).subscribe()) {
                Message<byte[]> m = c.receive(5, TimeUnit.SECONDS);
                check(m != null && Fixtures.text(m).equals("n0"),
                        "after resetCursor(n0) the first message is " + (m == null ? "none" : Fixtures.text(m)));
            }

            String nope = Fixtures.topic("nope");
            r.refused("skipMessages (no subscription)", NotFoundException.class, 404, null,
                    () -> t.skipMessages(topic, "nope", 1));
            r.refused("skipMessages (no topic)", NotFoundException.class, 404, null, () -> t.skipMessages(nope, "s", 1));
            r.refused("skipAllMessages (no subscription)", NotFoundException.class, 404, null,
                    () -> t.skipAllMessages(topic, "nope"));
            r.refused("expireMessages (no subscription)", NotFoundException.class, 404, null,
                    () -> t.expireMessages(topic, "nope", 1));
            r.refused("resetCursor(time) (no subscription)", NotFoundException.class, 404, null,
                    () -> t.resetCursor(topic, "nope", between));
            r.refused("resetCursor(id) (no subscription)", NotFoundException.class, 404, null,
                    () -> t.resetCursor(topic, "nope", ids.get(0)));
            r.refused("skipMessages(-1)", org.apache.pulsar.client.admin.PulsarAdminException.PreconditionFailedException.class,
                    412, null, () -> t.skipMessages(topic, "s", -1));

            // Last, as the broker does not take it yet: exclusive reset, the body's "excluded": true.
            int mark = r.http.mark();
            r.ok("resetCursor(id of m3, excluded)", () -> t.resetCursor(topic, "s", ids.get(3), true));
            Fixtures.awaitBacklog(r, topic, "s", 16, 3, "resetCursor(m3, isExcluded=true)", r.http.describe(mark));
            try (Consumer<byte[]> c = r.client().newConsumer().topic(topic).subscriptionName("s")
                    .subscriptionType(SubscriptionType.Exclusive).subscribe()) {
                Message<byte[]> m = c.receive(5, TimeUnit.SECONDS);
                check(m != null && Fixtures.text(m).equals("m4"),
                        "after resetCursor(m3, excluded) the first message is " + (m == null ? "none" : Fixtures.text(m)));
            }
            report.messages(3);
            report.note("expire 1 s -> 10; earliest -> 20; skip 5 -> 15; skip all -> 0; time -> 10; m3 -> 17 "
                    + "(consumer gets m3); n0 (consumer gets n0); m3 excluded -> 16 (consumer gets m4)");
        }
    }
}
