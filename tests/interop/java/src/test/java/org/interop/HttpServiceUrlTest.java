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
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.interop.harness.Admin;
import org.interop.harness.Broker;
import org.interop.harness.Clients;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

/** The Java client given the web URL ({@code http://…}): its lookups go over HTTP. */
class HttpServiceUrlTest {
    /**
     * With the admin URL as service URL the client asks {@code GET /lookup/v2/topic/…},
     * {@code …/partitions?checkAllowAutoCreation=true} and {@code …/namespaces/…/topics} over
     * HTTP, then speaks the binary protocol to the broker URL it was given: 10 messages on a
     * topic created on first use, 30 keyed messages on 3 partitions (each used) to a Key_Shared
     * consumer, a pattern subscription that finds the namespace's topics, and a producer in a
     * namespace that does not exist refused with an error.
     */
    @Scenario("http_service_url")
    void httpServiceUrl(Report report) throws Exception {
        try (Broker b = Broker.start("http-url");
                PulsarClient cl = Clients.client(b.adminUrl())) {
            String plain = Clients.topic("http-plain");
            Consumer<byte[]> c = cl.newConsumer().topic(plain).subscriptionName("s")
                    .subscriptionType(SubscriptionType.Shared).subscribe();
            Producer<byte[]> p = cl.newProducer().topic(plain).enableBatching(false).create();
            List<String> want = new ArrayList<>();
            for (int i = 0; i < 10; i++) {
                p.send(Clients.bytes("m" + i));
                want.add("m" + i);
            }
            List<Message<byte[]>> got = Clients.receiveN(c, 10, 5, 300);
            List<String> texts = Clients.texts(got);
            texts.sort(null);
            want.sort(null);
            check(texts.equals(want), "plain topic over HTTP lookup: " + texts);
            for (Message<byte[]> m : got) {
                c.acknowledge(m);
            }

            String parted = Clients.topic("http-parted");
            Admin.Response r = b.admin().request("PUT", Admin.topicPath(parted) + "/partitions", "3");
            check(r.ok(), "create 3 partitions: HTTP " + r.status() + " " + r.body());
            Consumer<byte[]> kc = cl.newConsumer().topic(parted).subscriptionName("ks")
                    .subscriptionType(SubscriptionType.Key_Shared).subscribe();
            Producer<byte[]> kp = cl.newProducer().topic(parted).enableBatching(false).create();
            for (int i = 0; i < 30; i++) {
                kp.newMessage().key("key-" + i).value(Clients.bytes("k" + i)).send();
            }
            List<Message<byte[]>> kgot = Clients.receiveN(kc, 30, 5, 300);
            Set<String> partitions = new HashSet<>();
            for (Message<byte[]> m : kgot) {
                partitions.add(m.getTopicName().replaceAll(".*-partition-", ""));
                kc.acknowledge(m);
            }
            check(kgot.size() == 30, "partitioned topic over HTTP lookup: " + kgot.size() + " of 30");
            check(partitions.equals(Set.of("0", "1", "2")), "partitions used: " + partitions);

            String ns = plain.substring(0, plain.lastIndexOf('/'));
            Consumer<byte[]> pc = cl.newConsumer()
                    .topicsPattern(Pattern.compile(ns + "/http-plain-.*"))
                    .subscriptionName("pattern").subscriptionType(SubscriptionType.Shared)
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Latest).subscribe();
            p.send(Clients.bytes("after-pattern"));
            Message<byte[]> m = pc.receive(5, TimeUnit.SECONDS);
            check(m != null && Clients.text(m).equals("after-pattern"), "pattern subscription over HTTP: " + m);
            pc.acknowledge(m);

            PulsarClientException refused = null;
            try {
                cl.newProducer().topic("persistent://public/no-such-namespace/t").create().close();
            } catch (PulsarClientException e) {
                refused = e;
            }
            check(refused != null, "a producer in a missing namespace was created");
            report.messages(41);
            report.note("over " + b.adminUrl() + ": 10 plain, 30 keyed on 3 partitions, a pattern subscription; "
                    + "a missing namespace: " + refused.getClass().getSimpleName());
            pc.close();
            kc.close();
            c.close();
            p.close();
            kp.close();
        }
    }
}
