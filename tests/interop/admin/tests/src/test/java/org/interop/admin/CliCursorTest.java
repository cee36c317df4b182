package org.interop.admin;

import java.util.List;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.interop.harness.Check;
import org.interop.harness.Cli;
import org.interop.harness.Report;
import org.interop.harness.Rig;
import org.interop.harness.Scenario;
import org.junit.jupiter.api.Timeout;

/**
 * {@code pulsar-admin topics skip|clear-backlog|reset-cursor|expire-messages}: each checked by the
 * subscription's backlog (Java admin API).
 */
class CliCursorTest {
    @Scenario("cli_cursor")
    @Timeout(Cli.SCENARIO_TIMEOUT_S)
    void cursor(Report report) throws Exception {
        try (Rig r = Rig.start("cli-cursor")) {
            Cli cli = r.cli();
            // For expire-messages: ten old messages on one topic now, ten new ones later.
            String aged = Fixtures.topic("aged");
            Fixtures.subscription(r, aged, "s");
            Producer<byte[]> agedProducer = Fixtures.producer(r, aged);
            Fixtures.send(agedProducer, "old", 10);
            long oldSent = System.nanoTime();

            String topic = Fixtures.topic("cursor");
            Fixtures.subscription(r, topic, "s");
            List<MessageId> ids;
            try (Producer<byte[]> p = Fixtures.producer(r, topic)) {
                ids = Fixtures.send(p, "m", 20);
            }
            Fixtures.awaitBacklog(r, topic, "s", 20, 3, "sending 20");
            cli.run("topics", "skip", topic, "-s", "s", "-n", "5").ok();
            Fixtures.awaitBacklog(r, topic, "s", 15, 3, "`topics skip -n 5`");
            cli.run("topics", "clear-backlog", topic, "-s", "s").ok();
            Fixtures.awaitBacklog(r, topic, "s", 0, 3, "`topics clear-backlog`");
            cli.run("topics", "reset-cursor", topic, "-s", "s", "-t", "10m").ok();
            Fixtures.awaitBacklog(r, topic, "s", 20, 3, "`topics reset-cursor -t 10m`");
            cli.run("topics", "reset-cursor", topic, "-s", "s", "-m", Fixtures.ledgerEntry(ids.get(3))).ok();
            Fixtures.awaitBacklog(r, topic, "s", 17, 3, "`topics reset-cursor -m " + Fixtures.ledgerEntry(ids.get(3)) + "`");
            cli.run("topics", "skip", topic, "-s", "nope", "-n", "1").refused();

            // The old ten are at least 40 s old when the tool starts, the new ten as old as the
            // tool's start: 2 s idle, up to 9 s seen on 2 busy cores (a CI run once took over 8 s,
            // when this said `-t 8`). `-t 20` expires the old ones only.
            long waitMs = 40_000 - (System.nanoTime() - oldSent) / 1_000_000;
            if (waitMs > 0) {
                Check.sleepMs(waitMs);
            }
            Fixtures.send(agedProducer, "new", 10);
            agedProducer.close();
            cli.run("topics", "expire-messages", aged, "-s", "s", "-t", "20").ok();
            Fixtures.awaitBacklog(r, aged, "s", 10, 3, "`topics expire-messages -t 20`");
            Cli.Result excl = cli.run("topics", "reset-cursor", topic, "-s", "s", "-m",
                    Fixtures.ledgerEntry(ids.get(3)), "-e").ok();
            Fixtures.awaitBacklog(r, topic, "s", 16, 3,
                    "`topics reset-cursor -m " + Fixtures.ledgerEntry(ids.get(3)) + " -e` (exclusive)", excl.http());
            report.messages(0);
        }
    }
}
