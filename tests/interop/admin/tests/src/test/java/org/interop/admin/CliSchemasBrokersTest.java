package org.interop.admin;

import static org.interop.harness.Check.check;

import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.pulsar.common.schema.SchemaInfoWithVersion;
import org.apache.pulsar.common.schema.SchemaType;
import org.interop.harness.Cli;
import org.interop.harness.Env;
import org.interop.harness.Report;
import org.interop.harness.Rig;
import org.interop.harness.Scenario;
import org.junit.jupiter.api.Timeout;

/**
 * {@code pulsar-admin schemas upload|get|delete} (what the upload made is read back with the Java
 * admin API; the delete is refused) and {@code pulsar-admin brokers healthcheck|list|leader-broker|
 * get-runtime-config}.
 */
class CliSchemasBrokersTest {
    static final String ORDER = "{\"type\":\"record\",\"name\":\"Order\",\"namespace\":\"org.interop\",\"fields\":["
            + "{\"name\":\"id\",\"type\":[\"null\",\"string\"]},{\"name\":\"qty\",\"type\":\"int\"}]}";

    @Scenario("cli_schemas")

    @Timeout(Cli.SCENARIO_TIMEOUT_S)
    void schemas(Report report) throws Exception {
        try (Rig r = Rig.start("cli-schemas")) {
            Cli cli = r.cli();
            String topic = Fixtures.topic("schema");
            // Pulsar's PostSchemaPayload: the schema definition as a JSON string.
            String payload = "{\"type\":\"JSON\",\"schema\":\"" + ORDER.replace("\\", "\\\\").replace("\"", "\\\"")
                    + "\",\"properties\":{}}";
            Path file = Env.logDir().resolve(r.broker.name() + ".schema.json");
            Files.writeString(file, payload, StandardCharsets.UTF_8);
            cli.run("schemas", "upload", topic, "-f", file.toString()).ok();
            SchemaInfoWithVersion got = r.ok("getSchemaInfoWithVersion",
                    () -> r.admin.schemas().getSchemaInfoWithVersion(topic));
            check(got.getVersion() == 0 && got.getSchemaInfo().getType() == SchemaType.JSON
                    && new String(got.getSchemaInfo().getSchema(), StandardCharsets.UTF_8).equals(ORDER),
                    "after `schemas upload -f " + file + "`: " + got);
            cli.run("schemas", "get", topic).prints("JSON", "\"qty\"", "org.interop");
            cli.run("schemas", "delete", topic).refused("schema");
            got = r.ok("getSchemaInfoWithVersion", () -> r.admin.schemas().getSchemaInfoWithVersion(topic));
            check(got.getVersion() == 0, "a refused `schemas delete` left " + got);
        }
    }

    @Scenario("cli_brokers")

    @Timeout(Cli.SCENARIO_TIMEOUT_S)
    void brokers(Report report) {
        try (Rig r = Rig.start("cli-brokers", "--entries-per-ledger", "1234")) {
            Cli cli = r.cli();
            URI admin = URI.create(r.broker.adminUrl());
            String id = admin.getHost() + ":" + admin.getPort();
            Cli.Result health = cli.run("brokers", "healthcheck", "--topic-version", "V2").ok();
            check(health.out().strip().equals("ok"), "`brokers healthcheck`: " + health.describe());
            Cli.Result list = cli.run("brokers", "list", "standalone").ok();
            check(list.out().strip().equals(id), "`brokers list standalone`, expected " + id + ": " + list.describe());
            cli.run("brokers", "leader-broker").prints("\"serviceUrl\" : \"" + r.broker.adminUrl() + "\"",
                    "\"brokerId\" : \"" + id + "\"");
            // A `name    value` line per setting.
            Cli.Result conf = cli.run("brokers", "get-runtime-config").ok();
            java.util.Map<String, String> settings = new java.util.HashMap<>();
            for (String line : conf.out().split("\n")) {
                String[] kv = line.strip().split("\\s+", 2);
                if (kv.length == 2) {
                    settings.put(kv[0], kv[1]);
                }
            }
            check("standalone".equals(settings.get("clusterName")) && "5242880".equals(settings.get("maxMessageSize"))
                    && "1234".equals(settings.get("managedLedgerMaxEntriesPerLedger")),
                    "`brokers get-runtime-config` (broker --entries-per-ledger 1234): " + conf.describe());
            // Pulsar answers the bare version text (a String resource), which the tool prints.
            Cli.Result version = cli.run("brokers", "version").ok();
            check(version.out().strip().startsWith("key-ordered-broker-"),
                    "`brokers version`, expected the broker's version (key-ordered-broker-…): " + version.describe());
        }
    }
}
