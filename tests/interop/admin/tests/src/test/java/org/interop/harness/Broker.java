package org.interop.harness;

import static org.interop.harness.Check.check;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * One broker process (and, for restart scenarios, its later generations on the same ports and
 * data dir). Started as {@code $BROKER_BIN --listen 127.0.0.1:P --admin 127.0.0.1:Q [flags] $BROKER_ARGS};
 * the first two stdout lines (read with a 10 s bound) are the service and admin URLs; stderr goes
 * to {@code <name>.<generation>.stderr.log} in the log dir.
 *
 * <p>{@link #close()} stops it: SIGTERM, up to 5 s, then SIGKILL; a broker that needed the SIGKILL,
 * exited non-zero or logged an ERROR line (with {@code --check-frames}, a frame that breaks the
 * protocol's field rules) is a failure. The process also dies with this JVM: it is started under
 * {@code setpriv --pdeathsig KILL} (when util-linux's setpriv is there) and a shutdown hook kills
 * whatever is still running.
 */
public final class Broker implements AutoCloseable {
    public static final int START_TIMEOUT_S = 10;
    public static final int STOP_GRACE_S = 5;
    private static final String SETPRIV = "/usr/bin/setpriv";
    private static final Set<Process> LIVE = ConcurrentHashMap.newKeySet();

    static {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            for (Process p : LIVE) {
                p.destroyForcibly();
            }
        }, "broker-reaper"));
    }

    private final String name;
    private final List<String> flags;
    private final Path dataDir;
    private final int port;
    private final int adminPort;
    private int generation;
    private Process proc;
    private Path stderrPath;
    private String serviceUrl;
    private String adminUrl;
    private String shutdownProblem;

    private Broker(String name, List<String> flags, Path dataDir, int port, int adminPort) {
        this.name = name;
        this.flags = flags;
        this.dataDir = dataDir;
        this.port = port;
        this.adminPort = adminPort;
    }

    /** A fresh in-memory broker on OS-chosen ports. */
    public static Broker start(String name, String... flags) {
        Broker b = new Broker(name, List.of(flags), null, 0, 0);
        b.startGeneration();
        return b;
    }

    /**
     * A broker that can be stopped (or SIGKILLed) and started again: two free ports picked once,
     * every generation on them and on {@code dataDir}, so the clients reconnect by themselves.
     */
    public static Broker restartable(String name, Path dataDir, String... flags) {
        int p1 = freePort();
        int p2 = freePort();
        for (int i = 0; i < 20 && p2 == p1; i++) {
            p2 = freePort();
        }
        Broker b = new Broker(name, List.of(flags), dataDir, p1, p2);
        b.startWithRetry();
        return b;
    }

    /** A port on 127.0.0.1 that was free a moment ago. */
    public static int freePort() {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.1"))) {
            return s.getLocalPort();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    public String name() {
        return name;
    }

    public String serviceUrl() {
        return serviceUrl;
    }

    public String adminUrl() {
        return adminUrl;
    }

    public long pid() {
        return proc.pid();
    }

    public Path stderrPath() {
        return stderrPath;
    }

    public boolean alive() {
        return proc != null && proc.isAlive();
    }

    private void startWithRetry() {
        Check.Deadline d = new Check.Deadline(5);
        while (true) {
            try {
                startGeneration();
                return;
            } catch (Check.ScenarioFailure e) {
                if (d.expired()) {
                    throw new Check.ScenarioFailure("cannot (re)start the broker: " + e.getMessage());
                }
                Check.sleepMs(100);
            }
        }
    }

    private void startGeneration() {
        generation++;
        shutdownProblem = null;
        List<String> cmd = new ArrayList<>();
        if (new File(SETPRIV).canExecute()) {
            cmd.addAll(Arrays.asList(SETPRIV, "--pdeathsig", "KILL", "--"));
        }
        cmd.add(Env.brokerBin());
        cmd.addAll(Arrays.asList("--listen", "127.0.0.1:" + port, "--admin", "127.0.0.1:" + adminPort));
        if (dataDir != null) {
            cmd.addAll(Arrays.asList("--data-dir", dataDir.toString()));
        }
        cmd.addAll(flags);
        cmd.addAll(Env.brokerArgs());
        stderrPath = Env.logDir().resolve(name + "." + generation + ".stderr.log");
        ProcessBuilder pb = new ProcessBuilder(cmd)
                .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")))
                .redirectError(stderrPath.toFile());
        try {
            proc = pb.start();
        } catch (IOException e) {
            throw new Check.ScenarioFailure("cannot start " + cmd + ": " + e);
        }
        LIVE.add(proc);
        LinkedBlockingQueue<String> lines = new LinkedBlockingQueue<>();
        Process p = proc;
        Thread reader = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(
                    new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    lines.add(line.trim());
                }
            } catch (IOException ignored) {
                // the process ended
            }
            lines.add("\u0000EOF");
        }, "broker-stdout-" + name);
        reader.setDaemon(true);
        reader.start();
        Check.Deadline d = new Check.Deadline(START_TIMEOUT_S);
        List<String> got = new ArrayList<>();
        while (got.size() < 2 && !d.expired()) {
            String l;
            try {
                l = lines.poll(d.leftMs(1000), TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                break;
            }
            if (l == null) {
                continue;
            }
            if (l.equals("\u0000EOF")) {
                break;
            }
            got.add(l);
        }
        if (got.size() < 2) {
            killQuietly();
            throw new Check.ScenarioFailure(String.format(
                    "broker %s printed %d of 2 URL lines within %d s (exit code %s); command %s; see %s%s",
                    name, got.size(), START_TIMEOUT_S, proc.isAlive() ? "none yet" : proc.exitValue(),
                    cmd, stderrPath, stderrTail()));
        }
        serviceUrl = got.get(0);
        adminUrl = got.get(1);
        check(serviceUrl.startsWith("pulsar://127.0.0.1:"), "unexpected service URL line " + serviceUrl);
        check(adminUrl.startsWith("http://127.0.0.1:"), "unexpected admin URL line " + adminUrl);
        if (port != 0) {
            check(serviceUrl.equals("pulsar://127.0.0.1:" + port),
                    "service URL " + serviceUrl + ", expected port " + port);
        }
    }

    private String stderrTail() {
        try {
            List<String> all = Files.readAllLines(stderrPath);
            return all.isEmpty() ? "" : "; last stderr line: " + all.get(all.size() - 1);
        } catch (IOException | UncheckedIOException e) {
            return "";
        }
    }

    private void killQuietly() {
        proc.destroyForcibly();
        try {
            proc.waitFor(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        LIVE.remove(proc);
    }

    /** SIGTERM, then SIGKILL after 5 s. Throws if the broker needed the SIGKILL or exited non-zero. */
    public void stop() {
        if (proc == null || !LIVE.contains(proc)) {
            return;
        }
        proc.destroy(); // SIGTERM
        boolean exited;
        try {
            exited = proc.waitFor(STOP_GRACE_S, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            exited = false;
        }
        if (!exited) {
            killQuietly();
            shutdownProblem = "broker " + name + " did not exit within " + STOP_GRACE_S + " s of SIGTERM (killed)";
        } else {
            LIVE.remove(proc);
            if (proc.exitValue() != 0) {
                shutdownProblem = "broker " + name + " exited with code " + proc.exitValue() + " after SIGTERM";
            }
        }
        if (shutdownProblem != null) {
            throw new Check.ScenarioFailure(shutdownProblem + "; see " + stderrPath + stderrTail());
        }
        List<String> errors = errorLines();
        if (!errors.isEmpty()) {
            throw new Check.ScenarioFailure("broker " + name + " logged " + errors.size() + " ERROR line(s) (with "
                    + "--check-frames: a frame that breaks the protocol's field rules), first: " + errors.get(0)
                    + "; see " + stderrPath);
        }
    }

    /** The ERROR lines of this generation's stderr (the level is the second field of a log line). */
    private List<String> errorLines() {
        List<String> out = new ArrayList<>();
        try {
            for (String l : Files.readAllLines(stderrPath)) {
                String[] f = l.trim().split("\\s+", 3);
                if (f.length >= 2 && f[1].equals("ERROR")) {
                    out.add(l);
                }
            }
        } catch (IOException | UncheckedIOException e) {
            out.add("(cannot read " + stderrPath + ": " + e + ")");
        }
        return out;
    }

    /** SIGKILL (a crash on purpose), reaped; not a failure. */
    public void kill9() {
        check(proc.isAlive(), "broker " + name + " generation " + generation + " died on its own; see " + stderrPath);
        killQuietly();
    }

    /** A new generation on the same ports and data dir (restartable brokers only). */
    public Broker restart() {
        check(port != 0, "restart() needs a broker made with Broker.restartable");
        startWithRetry();
        return this;
    }

    /** A checked graceful stop and a new generation. */
    public Broker stopAndStart() {
        stop();
        return restart();
    }

    @Override
    public void close() {
        stop();
    }

    @Override
    public String toString() {
        return name + "#" + generation + " " + serviceUrl;
    }
}
