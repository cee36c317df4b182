package org.versus;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.PulsarClient;

/**
 * The programs {@code cargo xtask versus-pulsar} runs, unchanged, against Apache Pulsar standalone
 * and against our broker:
 *
 * <pre>
 * java -cp … org.versus.Versus INCIDENT --service-url pulsar://… --admin-url http://… --broker pulsar|ours
 * </pre>
 *
 * INCIDENT is {@code seed000} (Key_Shared, a mark-delete move without acks: skip, expire,
 * clear-backlog, TTL, backlog-quota eviction), {@code seed001} (Shared, a chunked message whose
 * first chunk is acked, then the topic is reloaded) or {@code seed002} (Key_Shared, a nack); or the
 * load row {@code keyshared-load} ({@link KeySharedLoad}). Each
 * result is one line {@code result {json}} with the number of violations. {@code --broker} only
 * says how to reload a topic in seed001: Pulsar unloads it through the admin API; ours has one
 * broker and no bundles, so the program prints {@code versus: reload} and waits for a line on
 * stdin while the caller restarts the broker on the same data directory.
 */
public final class Versus {
    final String serviceUrl;
    final String adminUrl;
    final boolean pulsar;

    Versus(String serviceUrl, String adminUrl, boolean pulsar) {
        this.serviceUrl = serviceUrl;
        this.adminUrl = adminUrl;
        this.pulsar = pulsar;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            usage("no incident");
        }
        Map<String, String> flags = new LinkedHashMap<>();
        for (int i = 1; i + 1 < args.length; i += 2) {
            flags.put(args[i], args[i + 1]);
        }
        String broker = flags.getOrDefault("--broker", "");
        if (!broker.equals("pulsar") && !broker.equals("ours")) {
            usage("--broker must be pulsar or ours");
        }
        Versus v = new Versus(need(flags, "--service-url"), need(flags, "--admin-url"), broker.equals("pulsar"));
        switch (args[0]) {
            case "seed000" -> Seed000.run(v, flags.getOrDefault("--variants", String.join(",", Seed000.VARIANTS)));
            case "seed001" -> Seed001.run(v);
            case "seed002" -> Seed002.run(v);
            case "keyshared-load" -> KeySharedLoad.run(v);
            default -> usage("unknown incident " + args[0]);
        }
        System.exit(0); // the client libraries leave non-daemon threads behind
    }

    static String need(Map<String, String> flags, String name) {
        String v = flags.get(name);
        if (v == null) {
            usage("missing " + name);
        }
        return v;
    }

    static void usage(String why) {
        System.err.println("versus: " + why + "\nusage: Versus seed000|seed001|seed002|keyshared-load --service-url U --admin-url U"
                + " --broker pulsar|ours [--variants a,b]");
        System.exit(2);
    }

    PulsarClient client() throws Exception {
        return PulsarClient.builder().serviceUrl(serviceUrl).operationTimeout(10, TimeUnit.SECONDS)
                .connectionTimeout(5, TimeUnit.SECONDS).build();
    }

    PulsarAdmin admin() throws Exception {
        return PulsarAdmin.builder().serviceHttpUrl(adminUrl).connectionTimeout(5, TimeUnit.SECONDS)
                .readTimeout(30, TimeUnit.SECONDS).requestTimeout(30, TimeUnit.SECONDS).build();
    }

    /** A fresh name: each run uses topics and namespaces no earlier run touched. */
    static String fresh(String prefix) {
        return prefix + "-" + Long.toString(ThreadLocalRandom.current().nextLong(1L << 40), 36);
    }

    /** Our broker restarted by the caller (see the class doc); Pulsar unloads the namespace. */
    void reload(PulsarAdmin admin, String namespace) throws Exception {
        if (pulsar) {
            admin.namespaces().unload(namespace);
            return;
        }
        System.out.println("versus: reload");
        System.out.flush();
        String line = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
        if (line == null || !line.equals("ok")) {
            throw new IllegalStateException("the caller did not restart the broker: " + line);
        }
    }

    /** Prints a result line: incident, variant, violations, and what happened in words. */
    static void result(String incident, String variant, int violations, String detail) {
        System.out.println("result {\"incident\":\"" + incident + "\",\"variant\":\"" + variant + "\",\"violations\":"
                + violations + ",\"detail\":\"" + detail.replace("\\", "\\\\").replace("\"", "\\\"") + "\"}");
        System.out.flush();
    }

    static String secs(long nanos) {
        return String.format(Locale.ROOT, "%.1f s", nanos / 1e9);
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
