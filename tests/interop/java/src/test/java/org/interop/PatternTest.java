package org.interop;

import static org.interop.harness.Check.check;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.interop.harness.Broker;
import org.interop.harness.Clients;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

/** Pattern subscriptions: the client asks GET_TOPICS_OF_NAMESPACE and applies its regex. */
class PatternTest {
    /**
     * Two topics matching a regex exist when the consumer subscribes by pattern
     * ({@code topicsPattern}); a third one is created afterwards and found by the client's
     * periodic rediscovery (every second here). The consumer gets the messages of all three; a
     * topic that does not match is left alone.
     */
    @Scenario("pattern_subscription")
    void pattern(Report report) throws Exception {
        try (Broker b = Broker.start("pattern");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String stem = Clients.topic("pat");
            List<Producer<byte[]>> ps = new ArrayList<>();
            for (String suffix : List.of("-x", "-y")) {
                ps.add(cl.newProducer().topic(stem + suffix).enableBatching(false).create());
            }
            Producer<byte[]> other = cl.newProducer().topic(stem + "other").enableBatching(false).create();
            Consumer<byte[]> c = cl.newConsumer().topicsPattern(Pattern.compile(stem + "-.*"))
                    .subscriptionName("pat").subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                    .patternAutoDiscoveryPeriod(1, TimeUnit.SECONDS).subscribe();
            for (int i = 0; i < 10; i++) {
                ps.get(i % 2).send(Clients.bytes("m" + i));
            }
            other.send(Clients.bytes("not for the pattern"));
            List<Message<byte[]>> got = new ArrayList<>(Clients.receiveN(c, 10, 8, 300));
            // A topic created after the subscribe: the rediscovery subscribes to it, from the
            // earliest message. Sent until the consumer has it (bounded).
            Producer<byte[]> late = cl.newProducer().topic(stem + "-z").enableBatching(false).create();
            late.send(Clients.bytes("late"));
            got.addAll(Clients.receiveN(c, 1, 10, 500));
            report.messages(got.size());
            Set<String> topics = new HashSet<>();
            for (Message<byte[]> m : got) {
                topics.add(m.getTopicName());
                c.acknowledge(m);
            }
            check(got.size() == 11 && topics.size() == 3,
                    "pattern consumer got " + got.size() + " messages from " + topics);
            check(!topics.contains(stem + "other"), "the pattern consumer got the non-matching topic");
            c.close();
            for (Producer<byte[]> p : ps) {
                p.close();
            }
            other.close();
            late.close();
        }
    }
}
