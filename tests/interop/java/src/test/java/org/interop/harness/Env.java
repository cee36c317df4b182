package org.interop.harness;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/** The suite's environment: BROKER_BIN, BROKER_ARGS, INTEROP_LOG_DIR. */
public final class Env {
    private static Path logDir;

    private Env() {}

    /** Absolute path of the broker binary; fails clearly when BROKER_BIN is unset or not executable. */
    public static String brokerBin() {
        String b = System.getenv("BROKER_BIN");
        if (b == null || b.isBlank()) {
            throw new IllegalStateException(
                    "BROKER_BIN is not set: set it to the broker binary, e.g. "
                            + "BROKER_BIN=$PWD/target/release/broker (built with cargo build --release -p broker)");
        }
        Path p = Path.of(b);
        if (!Files.isExecutable(p)) {
            throw new IllegalStateException("BROKER_BIN=" + b + " is not an executable file");
        }
        return p.toAbsolutePath().toString();
    }

    /** BROKER_ARGS split on whitespace (appended to every broker this suite starts). */
    public static List<String> brokerArgs() {
        String a = System.getenv("BROKER_ARGS");
        if (a == null || a.isBlank()) {
            return List.of();
        }
        return new ArrayList<>(Arrays.asList(a.trim().split("\\s+")));
    }

    /** INTEROP_LOG_DIR, or one temp dir for this JVM. */
    public static synchronized Path logDir() {
        if (logDir == null) {
            try {
                String d = System.getenv("INTEROP_LOG_DIR");
                Path p = (d == null || d.isBlank())
                        ? Files.createTempDirectory("interop-")
                        : Path.of(d).toAbsolutePath();
                Files.createDirectories(p);
                logDir = p;
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
        return logDir;
    }

    /** The client or tool under test, as the pom names it ("pulsar-client 4.0.13"). */
    public static String client() {
        return System.getProperty("interop.client", "the client under test (version unknown)");
    }
}
