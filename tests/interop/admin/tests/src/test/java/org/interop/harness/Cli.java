package org.interop.harness;

import static org.interop.harness.Check.check;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;

/**
 * The {@code pulsar-admin} CLI: {@code java -cp <pulsar-client-tools' classpath>
 * org.apache.pulsar.admin.cli.PulsarAdminTool <client.conf> <command…>}, one JVM per command (the
 * tool ends with {@code System.exit}). The classpath is the one {@code ../pulsar-admin-cli} wrote
 * (pulsar-client-tools and its own pulsar-client-admin, never the test JVM's), the client
 * configuration file holds {@code webServiceUrl} (the broker's admin URL, through its
 * {@link HttpRecorder}).
 *
 * <p>Each command's stdout, stderr, exit code and HTTP exchanges are appended to
 * {@code pulsar-admin.log} in the log dir. To start faster (about 1.1 s a command instead of
 * 2.5 s), the JVMs run with C1 only and a class-data-sharing archive of the tool's classes, made
 * by the first command of the run (keyed by the classpath and the JDK, kept under
 * {@code target/pulsar-admin-cli/}).
 */
public final class Cli {
    public static final String MAIN = "org.apache.pulsar.admin.cli.PulsarAdminTool";
    /**
     * A CLI scenario's time limit, in seconds, in place of a scenario's usual 60 s: each command is
     * a JVM start, 2 s on an idle 2-core machine and 5–7 s while other scenarios run beside it, and
     * a scenario runs up to 22 of them.
     */
    public static final long SCENARIO_TIMEOUT_S = 240;
    private static final long TIMEOUT_S = 30;
    private static List<String> classpath;
    private static Path archive;
    private static boolean archiveBeingMade;
    private static boolean archiveFailed;

    private final Path conf;
    private final HttpRecorder http;

    /** One command's outcome. */
    public record Result(String command, int exit, String out, String err, double secs, String http) {
        /** stdout and stderr together. */
        public String output() {
            return out + err;
        }

        /** The command, its exit code, output and the HTTP exchanges it made, for a failure message. */
        public String describe() {
            return "`pulsar-admin " + command + "` exited " + exit + String.format(Locale.ROOT, " (%.1f s)", secs)
                    + "\n  stdout: " + cut(out) + "\n  stderr: " + cut(err) + http;
        }

        private static String cut(String s) {
            String t = s.strip().replace("\n", "\n          ");
            return t.length() > 1500 ? t.substring(0, 1500) + "…" : t;
        }

        /** Exit code 0, else fail with {@link #describe()}. */
        public Result ok() {
            check(exit == 0, "expected exit code 0: " + describe());
            return this;
        }

        /** Exit code 0 and stdout containing each of {@code parts}. */
        public Result prints(String... parts) {
            ok();
            for (String p : parts) {
                check(out.contains(p), "expected `" + p + "` in stdout: " + describe());
            }
            return this;
        }

        /** A non-zero exit code and stdout or stderr containing each of {@code parts}. */
        public Result refused(String... parts) {
            check(exit != 0, "expected a non-zero exit code: " + describe());
            for (String p : parts) {
                check(output().contains(p), "expected `" + p + "` in the output: " + describe());
            }
            return this;
        }
    }

    public Cli(String name, HttpRecorder http) {
        this.http = http;
        this.conf = Env.logDir().resolve(name + ".client.conf");
        try {
            Files.writeString(conf, "# pulsar-admin's client configuration for broker " + name + "\n"
                    + "webServiceUrl=" + http.url() + "\n", StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Runs {@code pulsar-admin <args>}; never throws for a non-zero exit (see {@link Result}). */
    public Result run(String... args) {
        List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.addAll(List.of("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xss1m",
                // JVM warnings to stderr, so stdout is only what the tool prints.
                "-Xlog:disable", "-Xlog:all=warning:stderr",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-Dorg.slf4j.simpleLogger.logFile=System.err"));
        Path making = archiveFlags(cmd);
        cmd.add("-cp");
        cmd.add(String.join(":", classpath()));
        cmd.add(MAIN);
        cmd.add(conf.toString());
        cmd.addAll(Arrays.asList(args));
        String command = String.join(" ", args);
        int mark = http.mark();
        long t0 = System.nanoTime();
        Path outFile;
        Path errFile;
        int exit;
        try {
            outFile = Files.createTempFile(workDir(), "out", ".txt");
            errFile = Files.createTempFile(workDir(), "err", ".txt");
            Process p = new ProcessBuilder(cmd)
                    .redirectInput(ProcessBuilder.Redirect.from(new java.io.File("/dev/null")))
                    .redirectOutput(outFile.toFile())
                    .redirectError(errFile.toFile())
                    .start();
            if (!p.waitFor(TIMEOUT_S, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                p.waitFor(5, TimeUnit.SECONDS);
                exit = -1;
            } else {
                exit = p.exitValue();
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new Check.ScenarioFailure("interrupted while running pulsar-admin " + command);
        } finally {
            if (making != null) {
                archiveMade(making);
            }
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        String out;
        String err;
        try {
            out = Files.readString(outFile, StandardCharsets.UTF_8);
            err = Files.readString(errFile, StandardCharsets.UTF_8);
            Files.deleteIfExists(outFile);
            Files.deleteIfExists(errFile);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        if (exit == -1) {
            err += "\n(killed: no exit within " + TIMEOUT_S + " s)";
        }
        // Only the tool's own requests (the scenario's Java admin API is another version).
        Result r = new Result(command, exit, out, err, secs, http.describe(mark, userAgent()));
        log(r);
        return r;
    }

    private static synchronized void log(Result r) {
        try {
            Files.writeString(Env.logDir().resolve("pulsar-admin.log"), "$ pulsar-admin " + r.command() + "\n"
                    + "exit " + r.exit() + String.format(Locale.ROOT, " (%.2f s)", r.secs()) + "\n--- stdout\n" + r.out()
                    + "\n--- stderr\n" + r.err() + "\n--- http" + r.http() + "\n\n", StandardCharsets.UTF_8,
                    StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        } catch (IOException ignored) {
            // the failure message has it
        }
    }

    /** The tool's classpath, from the file the pulsar-admin-cli module wrote. */
    public static synchronized List<String> classpath() {
        if (classpath == null) {
            String f = System.getProperty("interop.cli.classpath.file");
            check(f != null, "system property interop.cli.classpath.file is not set: run the suite with "
                    + "`mvn test` from tests/interop/admin (see its README)");
            Path p = Path.of(f);
            check(Files.isRegularFile(p), "no " + p + ": the pulsar-admin-cli module writes it; run `mvn -B test` (or "
                    + "`mvn -B test-compile`) from tests/interop/admin, not from tests/interop/admin/tests");
            try {
                String text = Files.readString(p, StandardCharsets.UTF_8).strip();
                classpath = List.of(text.split(":"));
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            check(classpath.stream().anyMatch(e -> e.contains("pulsar-client-tools")),
                    "the classpath in " + p + " has no pulsar-client-tools jar");
        }
        return classpath;
    }

    /** {@code Pulsar-Java-v<version>}, the tool's User-Agent, from its jar's name (null if not found). */
    private static String userAgent() {
        for (String e : classpath()) {
            String f = Path.of(e).getFileName().toString();
            if (f.startsWith("pulsar-client-tools-") && f.endsWith(".jar") && !f.contains("-api-")) {
                return "Pulsar-Java-v" + f.substring("pulsar-client-tools-".length(), f.length() - ".jar".length());
            }
        }
        return null;
    }

    private static Path workDir() throws IOException {
        Path d = Path.of(System.getProperty("interop.cli.work.dir",
                System.getProperty("java.io.tmpdir") + "/pulsar-admin-cli"));
        Files.createDirectories(d);
        return d;
    }

    /**
     * Adds the class-data-sharing flags: use the archive if it is there; else the first caller
     * makes it (into a temporary name, returned, renamed when its JVM exited) while the others
     * run without one.
     */
    private static synchronized Path archiveFlags(List<String> cmd) {
        if (archiveFailed) {
            return null;
        }
        try {
            if (archive == null) {
                String key = String.join(":", classpath()) + "|" + System.getProperty("java.home") + "|"
                        + System.getProperty("java.vm.version");
                archive = workDir().resolve("pulsar-admin-" + Integer.toHexString(key.hashCode()) + ".jsa");
            }
        } catch (IOException e) {
            archiveFailed = true;
            return null;
        }
        if (Files.isRegularFile(archive)) {
            cmd.add("-XX:SharedArchiveFile=" + archive);
            return null;
        }
        if (archiveBeingMade) {
            return null;
        }
        archiveBeingMade = true;
        // Archives for another classpath or JDK are of no use any more (33 MiB each).
        try (var old = Files.newDirectoryStream(archive.getParent(), "pulsar-admin-*.jsa*")) {
            for (Path p : old) {
                Files.deleteIfExists(p);
            }
        } catch (IOException ignored) {
            // a stale archive only takes room
        }
        Path tmp = archive.resolveSibling(archive.getFileName() + ".part");
        cmd.add("-XX:ArchiveClassesAtExit=" + tmp);
        return tmp;
    }

    private static synchronized void archiveMade(Path tmp) {
        archiveBeingMade = false;
        try {
            if (Files.isRegularFile(tmp) && Files.size(tmp) > 0) {
                Files.move(tmp, archive, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            } else {
                archiveFailed = true;
            }
        } catch (IOException e) {
            archiveFailed = true;
        }
    }
}
