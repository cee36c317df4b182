package org.interop;

import static org.interop.harness.Check.check;

import java.util.ArrayList;
import java.util.List;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.interop.harness.Broker;
import org.interop.harness.Check;
import org.interop.harness.Clients;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

class ReaderSeekTest {
    static final int N = 10;

    static List<String> want(int from) {
        List<String> w = new ArrayList<>();
        for (int i = from; i < N; i++) {
            w.add("m" + i);
        }
        return w;
    }

    /** Sends m0..m9 unbatched, 20 ms apart (distinct publish times); returns their ids. */
    static List<MessageId> produce(Producer<byte[]> p) throws Exception {
        List<MessageId> ids = new ArrayList<>();
        for (int i = 0; i < N; i++) {
            ids.add(p.send(Clients.bytes("m" + i)));
            Check.sleepMs(20);
        }
        return ids;
    }

    /**
     * Readers: {@code hasMessageAvailable} is true before and false after reading everything;
     * from earliest all 10; from #4 exclusive m5..m9; from #4 inclusive m4..m9; from latest only a
     * message published afterwards; {@code seek(MessageId #6)} on a reader gives m7..m9 (the client
     * drops #6: a seek start is exclusive).
     */
    @Scenario("reader")
    void reader(Report report) throws Exception {
        try (Broker b = Broker.start("reader");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("reader");
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false).create();
            List<MessageId> ids = produce(p);
            long n = 0;

            Reader<byte[]> r = cl.newReader().topic(topic).startMessageId(MessageId.earliest).create();
            check(r.hasMessageAvailable(), "reader from earliest: hasMessageAvailable false before reading");
            List<String> all = new ArrayList<>();
            for (int i = 0; i < 2 * N && r.hasMessageAvailable(); i++) {
                Message<byte[]> m = r.readNext(5, java.util.concurrent.TimeUnit.SECONDS);
                check(m != null, "hasMessageAvailable was true but readNext timed out after " + all);
                all.add(Clients.text(m));
            }
            check(all.equals(want(0)), "reader from earliest: " + all);
            check(!r.hasMessageAvailable(), "hasMessageAvailable true after reading all 10");
            n += all.size();

            r.seek(ids.get(6));
            List<String> afterSeek = Clients.readAll(r, 700, 50);
            // The broker starts at #6; the client drops #6 itself (a seek start is exclusive).
            check(afterSeek.equals(want(7)), "reader seek(#6): " + afterSeek + ", expected m7..m9");
            n += afterSeek.size();
            r.close();

            r = cl.newReader().topic(topic).startMessageId(ids.get(4)).create();
            List<String> excl = Clients.readAll(r, 700, 50);
            check(excl.equals(want(5)), "reader from #4 (exclusive): " + excl);
            r.close();
            r = cl.newReader().topic(topic).startMessageId(ids.get(4)).startMessageIdInclusive().create();
            List<String> incl = Clients.readAll(r, 700, 50);
            check(incl.equals(want(4)), "reader from #4 (inclusive): " + incl);
            r.close();
            n += excl.size() + incl.size();

            Reader<byte[]> rl = cl.newReader().topic(topic).startMessageId(MessageId.latest).create();
            check(!rl.hasMessageAvailable(), "reader from latest: hasMessageAvailable true with nothing new");
            p.send(Clients.bytes("late"));
            Check.waitUntil(() -> {
                try {
                    return rl.hasMessageAvailable();
                } catch (Exception e) {
                    return false;
                }
            }, 5, "hasMessageAvailable after a new message");
            List<String> latest = Clients.readAll(rl, 700, 50);
            check(latest.equals(List.of("late")), "reader from latest: " + latest);
            rl.close();
            n += latest.size();
            p.close();
            report.messages(n);
            report.note("earliest 10 (hasMessageAvailable true, then false), seek(#6) 3, #4 exclusive 5, #4 inclusive 6, latest 1");
        }
    }

    /**
     * {@code Reader.seek(publish time of m3)} after reading all 10: {@code hasMessageAvailable} is
     * true again, the reader reads m3..m9, then {@code hasMessageAvailable} is false. (The client
     * seeks with SEEK(message_publish_time); the broker closes the reader's consumer and the client
     * subscribes again with start_message_id = earliest: the reset non-durable subscription must be
     * kept and reused, as Pulsar does.)
     */
    @Scenario("reader_seek_timestamp")
    void readerSeekTimestamp(Report report) throws Exception {
        try (Broker b = Broker.start("reader-seek-time");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("reader-time");
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false).create();
            produce(p);
            Reader<byte[]> r = cl.newReader().topic(topic).startMessageId(MessageId.earliest).create();
            List<Long> times = new ArrayList<>();
            List<String> all = new ArrayList<>();
            Check.Deadline d = new Check.Deadline(8);
            while (all.size() < N && !d.expired()) {
                Message<byte[]> m = r.readNext(d.leftMs(1000), java.util.concurrent.TimeUnit.MILLISECONDS);
                if (m != null) {
                    all.add(Clients.text(m));
                    times.add(m.getPublishTime());
                }
            }
            check(all.equals(want(0)), "reader from earliest: " + all);
            check(!r.hasMessageAvailable(), "hasMessageAvailable true after reading all 10");
            r.seek(times.get(3));
            check(r.hasMessageAvailable(), "hasMessageAvailable false after seek(publish time of m3)");
            List<String> afterTime = new ArrayList<>();
            for (int i = 0; i < 2 * N && r.hasMessageAvailable(); i++) {
                Message<byte[]> m = r.readNext(5, java.util.concurrent.TimeUnit.SECONDS);
                check(m != null, "hasMessageAvailable was true but readNext timed out after " + afterTime);
                afterTime.add(Clients.text(m));
            }
            report.messages(all.size() + afterTime.size());
            check(afterTime.equals(want(3)), "reader seek(publish time of m3): " + afterTime);
            check(Clients.readAll(r, 500, 5).isEmpty(), "more messages after hasMessageAvailable said false");
            report.note("seek(time of m3) read m3..m9 while hasMessageAvailable, then false");
            r.close();
            p.close();
        }
    }

    /**
     * Consumer seek: 10 received and acked on a Shared subscription; {@code seek(MessageId.earliest)}
     * brings all 10 back; {@code seek(id of #6)}; {@code seek(publish time of #3)} brings m3..m9 back.
     */
    @Scenario("consumer_seek")
    void consumerSeek(Report report) throws Exception {
        try (Broker b = Broker.start("consumer-seek");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("seek");
            Consumer<byte[]> c = cl.newConsumer().topic(topic).subscriptionName("sub")
                    .subscriptionType(SubscriptionType.Shared)
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            Producer<byte[]> p = cl.newProducer().topic(topic).enableBatching(false).create();
            List<MessageId> ids = produce(p);
            List<Message<byte[]>> got = Clients.receiveN(c, N, 10, 300);
            check(Clients.texts(got).equals(want(0)), "first pass " + Clients.texts(got));
            List<Long> times = new ArrayList<>();
            for (Message<byte[]> m : got) {
                times.add(m.getPublishTime());
                c.acknowledge(m);
            }
            Check.sleepMs(300); // the grouped acks reach the broker
            AckTest.waitBacklog(b, topic, "sub", 0);

            c.seek(MessageId.earliest);
            List<Message<byte[]>> again = Clients.receiveN(c, N, 10, 500);
            List<String> againT = Clients.texts(again);
            againT.sort(null);
            List<String> w = want(0);
            w.sort(null);
            check(againT.equals(w), "after seek(earliest): " + Clients.texts(again));
            for (Message<byte[]> m : again) {
                c.acknowledge(m);
            }
            Check.sleepMs(300);
            c.seek(ids.get(6));
            List<Message<byte[]>> tail = Clients.receiveN(c, 3, 10, 500);
            List<String> tailT = Clients.texts(tail);
            check(tailT.equals(want(7)), "after seek(#6): " + tailT + ", expected m7..m9 (the client drops #6)");
            for (Message<byte[]> m : tail) {
                c.acknowledge(m);
            }
            Check.sleepMs(300);
            c.seek(times.get(3));
            List<Message<byte[]>> byTime = Clients.receiveN(c, 7, 10, 500);
            check(Clients.texts(byTime).equals(want(3)), "after seek(publish time of m3): " + Clients.texts(byTime));
            for (Message<byte[]> m : byTime) {
                c.acknowledge(m);
            }
            c.close();
            p.close();
            report.messages(got.size() + again.size() + tail.size() + byTime.size());
            report.note("seek(earliest) " + again.size() + ", seek(#6) gives " + tailT + ", seek(time of m3) "
                    + byTime.size());
        }
    }
}
