package org.interop.admin;

import static org.interop.harness.Check.check;

import java.net.URI;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.admin.PulsarAdminException.NotFoundException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.common.policies.data.BrokerInfo;
import org.apache.pulsar.common.schema.SchemaInfo;
import org.apache.pulsar.common.schema.SchemaInfoWithVersion;
import org.apache.pulsar.common.schema.SchemaType;
import org.interop.harness.Report;
import org.interop.harness.Rig;
import org.interop.harness.Scenario;

/**
 * Schemas and brokers through the Java admin API: the schema a stock producer registered
 * ({@code getSchemaInfo}, {@code getSchemaInfoWithVersion}), one uploaded ({@code createSchema}),
 * which a producer of that schema then uses (the version its messages carry), all versions, and
 * {@code deleteSchema} refused; {@code healthcheck} (4.2.4 has no topic-version argument:
 * {@code healthcheck()} and {@code healthcheck(brokerId)}), the active brokers, the leader and
 * the runtime configuration.
 */
class ApiSchemasBrokersTest {
    /** A JSON schema's class (Avro reflection makes its definition). */
    public static final class Order {
        public String id;
        public int qty;

        public Order() {}

        Order(String id, int qty) {
            this.id = id;
            this.qty = qty;
        }
    }

    /**
     * A second version of {@link Order}: one more (nullable) field, and the same record name,
     * so it is compatible under the broker's default strategy, FULL.
     */
    public static final class V2 {
        public static final class Order {
            public String id;
            public int qty;
            public String note;

            public Order() {}
        }
    }

    /** A record with no field in common with {@link Order}: incompatible. */
    public static final class Invoice {
        public double total;

        public Invoice() {}
    }

    private static long version(byte[] v) {
        return v == null || v.length != 8 ? -1 : ByteBuffer.wrap(v).getLong();
    }

    @Scenario("api_schemas")
    void schemas(Report report) throws Exception {
        try (Rig r = Rig.start("api-schemas")) {
            var s = r.admin.schemas();
            String topic = Fixtures.topic("schema");
            r.refused("getSchemaInfo (no schema)", NotFoundException.class, 404, "Schema not found",
                    () -> s.getSchemaInfo(topic));

            Schema<Order> v1 = Schema.JSON(Order.class);
            try (Producer<Order> p = r.client().newProducer(v1).topic(topic).create()) {
                p.send(new Order("a", 1));
            }
            SchemaInfo got = r.ok("getSchemaInfo", () -> s.getSchemaInfo(topic));
            check(got.getType() == SchemaType.JSON && Arrays.equals(got.getSchema(), v1.getSchemaInfo().getSchema()),
                    "getSchemaInfo after a JSON producer: " + got + "; the producer's: " + v1.getSchemaInfo());
            SchemaInfoWithVersion wv = r.ok("getSchemaInfoWithVersion", () -> s.getSchemaInfoWithVersion(topic));
            check(wv.getVersion() == 0, "getSchemaInfoWithVersion after the first producer: version " + wv.getVersion());

            SchemaInfo v2 = Schema.JSON(V2.Order.class).getSchemaInfo();
            r.ok("createSchema(v2)", () -> s.createSchema(topic, v2));
            wv = r.ok("getSchemaInfoWithVersion", () -> s.getSchemaInfoWithVersion(topic));
            check(wv.getVersion() == 1 && wv.getSchemaInfo().getType() == SchemaType.JSON
                    && Arrays.equals(wv.getSchemaInfo().getSchema(), v2.getSchema()),
                    "getSchemaInfoWithVersion after createSchema(v2): " + wv);
            r.ok("createSchema(v2) again", () -> s.createSchema(topic, v2));
            r.refused("createSchema(an incompatible schema)", PulsarAdminException.ConflictException.class, 409,
                    "Incompatible schema", () -> s.createSchema(topic, Schema.JSON(Invoice.class).getSchemaInfo()));
            List<SchemaInfo> all = r.ok("getAllSchemas", () -> s.getAllSchemas(topic));
            check(all.size() == 2, "getAllSchemas after createSchema(v2) twice: " + all.size() + " versions");
            SchemaInfo first = r.ok("getSchemaInfo(topic, 0)", () -> s.getSchemaInfo(topic, 0));
            check(Arrays.equals(first.getSchema(), v1.getSchemaInfo().getSchema()), "getSchemaInfo(version 0): " + first);

            // A producer of the uploaded schema uses its version: its message carries version 1.
            try (Producer<V2.Order> p = r.client().newProducer(Schema.JSON(V2.Order.class)).topic(topic).create()) {
                V2.Order o = new V2.Order();
                o.id = "b";
                p.send(o);
            }
            try (Consumer<byte[]> c = r.client().newConsumer().topic(topic).subscriptionName("s")
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
                Message<byte[]> m1 = c.receive(5, TimeUnit.SECONDS);
                Message<byte[]> m2 = c.receive(5, TimeUnit.SECONDS);
                check(m1 != null && m2 != null, "received " + (m1 == null ? 0 : m2 == null ? 1 : 2) + " of 2");
                check(version(m1.getSchemaVersion()) == 0 && version(m2.getSchemaVersion()) == 1,
                        "the messages' schema versions: " + version(m1.getSchemaVersion()) + ", "
                                + version(m2.getSchemaVersion()) + " (expected 0 and 1, the uploaded one)");
            }
            PulsarAdminException e = r.refused("deleteSchema", PulsarAdminException.class, 400, "schema",
                    () -> s.deleteSchema(topic));
            all = r.ok("getAllSchemas after the refused delete", () -> s.getAllSchemas(topic));
            check(all.size() == 2, "a refused deleteSchema left " + all.size() + " versions");
            report.messages(2);
            report.note("deleteSchema: " + e.getMessage());
        }
    }

    @Scenario("api_brokers")
    void brokers(Report report) throws Exception {
        try (Rig r = Rig.start("api-brokers", "--entries-per-ledger", "1234")) {
            var b = r.admin.brokers();
            URI admin = URI.create(r.broker.adminUrl());
            String id = admin.getHost() + ":" + admin.getPort();
            r.ok("healthcheck()", () -> b.healthcheck());
            r.ok("healthcheck(brokerId)", () -> b.healthcheck(Optional.of(id)));
            List<String> active = r.ok("getActiveBrokers(standalone)", () -> b.getActiveBrokers("standalone"));
            check(active.equals(List.of(id)), "getActiveBrokers(standalone) = " + active + ", expected [" + id + "]");
            active = r.ok("getActiveBrokers()", () -> b.getActiveBrokers());
            check(active.equals(List.of(id)), "getActiveBrokers() = " + active + ", expected [" + id + "]");
            BrokerInfo leader = r.ok("getLeaderBroker", () -> b.getLeaderBroker());
            check(r.broker.adminUrl().equals(leader.getServiceUrl()) && id.equals(leader.getBrokerId()),
                    "getLeaderBroker = " + leader + ", expected serviceUrl " + r.broker.adminUrl() + ", brokerId " + id);
            Map<String, String> conf = r.ok("getRuntimeConfigurations", () -> b.getRuntimeConfigurations());
            check("standalone".equals(conf.get("clusterName")) && "5242880".equals(conf.get("maxMessageSize"))
                    && "1234".equals(conf.get("managedLedgerMaxEntriesPerLedger"))
                    && "true".equals(conf.get("allowAutoTopicCreation")),
                    "getRuntimeConfigurations: clusterName " + conf.get("clusterName") + ", maxMessageSize "
                            + conf.get("maxMessageSize") + ", managedLedgerMaxEntriesPerLedger (--entries-per-ledger "
                            + "1234) " + conf.get("managedLedgerMaxEntriesPerLedger") + ", allowAutoTopicCreation "
                            + conf.get("allowAutoTopicCreation") + "; all: " + conf);
            List<String> dynamic = r.ok("getDynamicConfigurationNames", () -> b.getDynamicConfigurationNames());
            check(dynamic.isEmpty(), "getDynamicConfigurationNames = " + dynamic + ", expected none");
            Map<String, String> values = r.ok("getAllDynamicConfigurations", () -> b.getAllDynamicConfigurations());
            check(values.isEmpty(), "getAllDynamicConfigurations = " + values + ", expected none");
            int mark = r.http.mark();
            String version = r.ok("getVersion", () -> b.getVersion());
            // Pulsar answers the bare version text, which the client returns as it is.
            check(version != null && version.startsWith("key-ordered-broker-"),
                    "getVersion = `" + version + "`, expected the broker's version (key-ordered-broker-…)"
                            + r.http.describe(mark));
            report.note(conf.size() + " runtime settings; leader " + leader.getBrokerId() + "; version " + version);
        }
    }
}
