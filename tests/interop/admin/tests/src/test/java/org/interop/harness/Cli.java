package org.interop.harness;

import static org.interop.harness.Check.check;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Deque;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Executors;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;

/**
 * The {@code pulsar-admin} CLI: {@code org.apache.pulsar.admin.cli.PulsarAdminTool} from
 * pulsar-client-tools, on the classpath the {@code ../pulsar-admin-cli} module wrote (the tool and
 * its own pulsar-client-admin, never the test JVM's), given a client configuration file that holds
 * {@code webServiceUrl} (the broker's admin URL, through its {@link HttpRecorder}).
 *
 * <p>The tool's {@code main} runs one command and ends the JVM; a JVM start costs 2 s on an idle
 * 2-core machine and 5-7 s while other scenarios run beside it, and the suite runs about 90
 * commands. So the commands run in {@code org.interop.cli.CommandServer} (in that module), a JVM
 * on the tool's classpath that does for each command what {@code main} does: a new
 * {@code PulsarAdminTool} from the configuration file, its {@code run(args)}, exit code 0 or 1,
 * stdout and stderr captured. At most {@link #SERVERS} servers, kept for the run (a command waits
 * for a free one); a server that dies (a command ended its JVM) is replaced and the command
 * reports exit code -2.
 *
 * <p>Each command's stdout, stderr, exit code and HTTP exchanges are appended to
 * {@code pulsar-admin.log} in the log dir.
 */
public final class Cli {
    public static final String MAIN = "org.interop.cli.CommandServer";
    /**
     * A CLI scenario's time limit, in seconds, in place of a scenario's usual 60 s: a scenario
     * runs up to 22 commands, waits for a free server for each, and the first commands of a run
     * start the servers (10-30 s each on a loaded machine); one scenario also waits 40 s.
     */
    public static final long SCENARIO_TIMEOUT_S = 180;
    private static final long TIMEOUT_S = 30;
    /** A new server's first command also starts its JVM and loads the tool. */
    private static final long FIRST_TIMEOUT_S = 90;
    /**
     * At most this many servers: JUnit runs two scenario classes at a time but lends its pool
     * more threads while one waits, and each new server is a JVM start (10-30 s on a loaded
     * machine); a command waits for a free server instead (most take under a second).
     */
    private static final int SERVERS = 2;
    private static final Semaphore servers = new Semaphore(SERVERS, true);
    private static List<String> classpath;
    /** Servers not running a command now. */
    private static final Deque<Server> idle = new ArrayDeque<>();

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
        String command = String.join(" ", args);
        int mark = http.mark();
        long t0 = System.nanoTime();
        List<String> request = new ArrayList<>();
        request.add(conf.toString());
        request.addAll(Arrays.asList(args));
        Server.Reply reply;
        servers.acquireUninterruptibly();
        try {
            Server server = take();
            try {
                reply = server.call(request);
            } finally {
                give(server);
            }
        } finally {
            servers.release();
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        // Only the tool's own requests (the scenario's Java admin API is another version).
        Result r = new Result(command, reply.exit(), reply.out(), reply.err(), secs, http.describe(mark, userAgent()));
        log(r);
        return r;
    }

    private static Server take() {
        synchronized (idle) {
            Server s = idle.pollFirst();
            if (s != null) {
                return s;
            }
        }
        return new Server();
    }

    private static void give(Server s) {
        if (s.alive()) {
            synchronized (idle) {
                idle.addFirst(s);
            }
        }
    }

    /** One {@code CommandServer} JVM and its protocol (see that class). */
    private static final class Server {
        record Reply(int exit, String out, String err) {}

        private final Process process;
        private final DataOutputStream requests;
        private final DataInputStream replies;
        private final Path stderr;
        /** No command has run yet (the first also starts the JVM). */
        private boolean fresh = true;

        Server() {
            List<String> cmd = new ArrayList<>();
            cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
            cmd.addAll(List.of("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xss1m", "-Xmx256m",
                    "-Xlog:disable", "-Xlog:all=warning:stderr",
                    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                    "-Dorg.slf4j.simpleLogger.logFile=System.err"));
            cmd.add("-cp");
            List<String> cp = new ArrayList<>();
            cp.add(classesDir().toString());
            cp.addAll(classpath());
            cmd.add(String.join(":", cp));
            cmd.add(MAIN);
            try {
                stderr = Files.createTempFile(workDir(), "server", ".err");
                process = new ProcessBuilder(cmd)
                        .redirectError(stderr.toFile())
                        .start();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            requests = new DataOutputStream(new BufferedOutputStream(process.getOutputStream()));
            replies = new DataInputStream(new BufferedInputStream(process.getInputStream()));
        }

        boolean alive() {
            return process.isAlive();
        }

        /** Runs one command; a server that does not answer within the limit is killed. */
        Reply call(List<String> request) {
            var timer = Executors.newSingleThreadScheduledExecutor();
            long limit = fresh ? FIRST_TIMEOUT_S : TIMEOUT_S;
            fresh = false;
            var kill = timer.schedule(() -> {
                process.destroyForcibly();
            }, limit, TimeUnit.SECONDS);
            try {
                requests.writeInt(request.size());
                for (String a : request) {
                    requests.writeUTF(a);
                }
                requests.flush();
                int exit = replies.readInt();
                String out = read();
                String err = read();
                return new Reply(exit, out, err);
            } catch (IOException e) {
                process.destroyForcibly();
                String why = kill.isDone() ? "(killed: no answer within " + limit + " s)"
                        : "(the command server's JVM ended: " + e + ")";
                return new Reply(-2, "", serverLog() + "\n" + why);
            } finally {
                kill.cancel(false);
                timer.shutdownNow();
            }
        }

        private String read() throws IOException {
            byte[] b = new byte[replies.readInt()];
            replies.readFully(b);
            return new String(b, StandardCharsets.UTF_8);
        }

        private String serverLog() {
            try {
                return Files.readString(stderr, StandardCharsets.UTF_8);
            } catch (IOException e) {
                return "";
            }
        }
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

    /** {@code CommandServer}'s classes: beside the classpath file, in the module's target/classes. */
    private static Path classesDir() {
        Path d = Path.of(System.getProperty("interop.cli.classpath.file")).resolveSibling("classes");
        check(Files.isDirectory(d.resolve("org/interop/cli")), "no CommandServer class under " + d
                + ": run `mvn -B test` (or `mvn -B test-compile`) from tests/interop/admin");
        return d;
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
}
