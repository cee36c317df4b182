package org.interop;

import static org.interop.harness.Check.check;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.schema.GenericRecord;
import org.interop.harness.Broker;
import org.interop.harness.Check;
import org.interop.harness.Clients;
import org.interop.harness.Report;
import org.interop.harness.Scenario;

class SchemaTest {
    /** {@link Order} with one more field (nullable, so it has a default: compatible under FULL). */
    public static class Evolved {
        public static class Order {
            public String id;
            public int amount;
            public String note;

            public Order() {}
        }
    }

    /** A record with no field in common with {@link Order}. */
    public static class Invoice {
        public double total;

        public Invoice() {}
    }

    /** A JSON-schema value (public fields and a no-arg constructor, as the client's reflection wants). */
    public static class Order {
        public String id;
        public int amount;

        public Order() {}

        Order(String id, int amount) {
            this.id = id;
            this.amount = amount;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Order x && x.id.equals(id) && x.amount == amount;
        }

        @Override
        public int hashCode() {
            return id.hashCode() * 31 + amount;
        }

        @Override
        public String toString() {
            return id + "/" + amount;
        }
    }

    /**
     * {@code Schema.JSON(Order.class)} producer and consumer: 5 orders round-trip typed; each
     * message carries a schema version; an {@code AUTO_CONSUME} consumer (which fetches the topic's
     * schema from the broker with GET_SCHEMA) reads the fields as a GenericRecord.
     */
    @Scenario("json_schema")
    void jsonSchema(Report report) throws Exception {
        try (Broker b = Broker.start("json-schema");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("json-schema");
            Consumer<Order> typed = cl.newConsumer(Schema.JSON(Order.class)).topic(topic).subscriptionName("typed")
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            Consumer<GenericRecord> generic = cl.newConsumer(Schema.AUTO_CONSUME()).topic(topic)
                    .subscriptionName("generic")
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            Producer<Order> p = cl.newProducer(Schema.JSON(Order.class)).topic(topic).enableBatching(false).create();
            List<Order> sent = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                Order o = new Order("o" + i, 10 * i);
                sent.add(o);
                p.send(o);
            }
            List<Order> got = new ArrayList<>();
            Check.Deadline d = new Check.Deadline(10);
            while (got.size() < 5 && !d.expired()) {
                Message<Order> m = typed.receive(d.leftMs(500), TimeUnit.MILLISECONDS);
                if (m != null) {
                    check(m.getSchemaVersion() != null && m.getSchemaVersion().length > 0,
                            "message " + m.getValue() + " carries no schema version");
                    got.add(m.getValue());
                    typed.acknowledge(m);
                }
            }
            report.messages(got.size());
            check(got.equals(sent), "typed consumer got " + got + ", sent " + sent);
            List<String> fields = new ArrayList<>();
            while (fields.size() < 5 && !d.expired()) {
                Message<GenericRecord> m = generic.receive(d.leftMs(500), TimeUnit.MILLISECONDS);
                if (m != null) {
                    fields.add(m.getValue().getField("id") + "/" + m.getValue().getField("amount"));
                    generic.acknowledge(m);
                }
            }
            report.messages(fields.size());
            check(fields.equals(List.of("o0/0", "o1/10", "o2/20", "o3/30", "o4/40")), "AUTO_CONSUME got " + fields);
            typed.close();
            generic.close();
            p.close();
        }
    }

    /**
     * Schema compatibility under Pulsar's default strategy (FULL): after an
     * {@code Schema.AVRO(Order.class)} producer, an evolved {@code Order} (one more nullable
     * field) is accepted, an {@code Invoice} producer and an {@code Invoice} consumer are
     * refused with {@code IncompatibleSchemaException}, at once.
     */
    @Scenario("schema_compatibility")
    void compatibility(Report report) throws Exception {
        try (Broker b = Broker.start("schema-compat");
                PulsarClient cl = Clients.client(b.serviceUrl())) {
            String topic = Clients.topic("schema-compat");
            Producer<Order> p1 = cl.newProducer(Schema.AVRO(Order.class)).topic(topic).create();
            p1.send(new Order("o1", 1));
            Producer<Evolved.Order> p2 = cl.newProducer(Schema.AVRO(Evolved.Order.class)).topic(topic).create();
            Evolved.Order e = new Evolved.Order();
            e.id = "o2";
            e.note = "evolved";
            p2.send(e);
            report.messages(2);
            List<String> refusals = new ArrayList<>();
            try {
                cl.newProducer(Schema.AVRO(Invoice.class)).topic(topic).create().close();
                refusals.add("producer accepted");
            } catch (PulsarClientException.IncompatibleSchemaException x) {
                refusals.add("producer refused");
            }
            try {
                cl.newConsumer(Schema.AVRO(Invoice.class)).topic(topic).subscriptionName("inv").subscribe().close();
                refusals.add("consumer accepted");
            } catch (PulsarClientException.IncompatibleSchemaException x) {
                refusals.add("consumer refused");
            }
            check(refusals.equals(List.of("producer refused", "consumer refused")), "an Invoice schema: " + refusals);
            report.note("evolved Order accepted; Invoice: " + refusals);
            p1.close();
            p2.close();
        }
    }
}
