package dev.keyordered.interop.spring.support;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * One broker process: {@code $BROKER_BIN --listen 127.0.0.1:0 --admin 127.0.0.1:0 [extra]
 * $BROKER_ARGS}. Its stderr goes to {@code $INTEROP_LOG_DIR/<name>.broker.stderr.log}. Stopping
 * it sends SIGTERM, waits up to 5 s, then SIGKILLs; a non-zero exit after SIGTERM is a failure.
 */
public final class Broker implements AutoCloseable {

	private static final long URL_TIMEOUT_MS = 10_000;

	private static final long STOP_TIMEOUT_MS = 5_000;

	private static final Path SETPRIV = Path.of("/usr/bin/setpriv");

	private final String name;

	private final Process process;

	private final Path log;

	private final String serviceUrl;

	private final String adminUrl;

	private final Thread shutdownHook;

	private boolean stopped;

	private Broker(String name, Process process, Path log, String serviceUrl, String adminUrl, Thread hook) {
		this.name = name;
		this.process = process;
		this.log = log;
		this.serviceUrl = serviceUrl;
		this.adminUrl = adminUrl;
		this.shutdownHook = hook;
	}

	public static Broker start(String name, String... extraArgs) {
		String bin = System.getenv("BROKER_BIN");
		if (bin == null || bin.isBlank()) {
			throw new IllegalStateException("BROKER_BIN is not set: set it to the absolute path of the broker binary "
					+ "(cargo build --release -p broker; BROKER_BIN=$PWD/target/release/broker)");
		}
		if (!Files.isExecutable(Path.of(bin))) {
			throw new IllegalStateException("BROKER_BIN=" + bin + " is not an executable file");
		}
		List<String> cmd = new ArrayList<>();
		if (Files.isExecutable(SETPRIV)) {
			// the broker gets SIGKILL if the test JVM dies without running its shutdown hooks
			cmd.addAll(List.of(SETPRIV.toString(), "--pdeathsig", "KILL", "--"));
		}
		cmd.addAll(List.of(bin, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"));
		cmd.addAll(Arrays.asList(extraArgs));
		String brokerArgs = System.getenv("BROKER_ARGS");
		if (brokerArgs != null && !brokerArgs.isBlank()) {
			cmd.addAll(Arrays.asList(brokerArgs.trim().split("\\s+")));
		}
		Path log = logDir().resolve(name + ".broker.stderr.log");
		ProcessBuilder pb = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.to(log.toFile()))
			.redirectInput(ProcessBuilder.Redirect.from(new java.io.File("/dev/null")));
		if (System.getenv("RUST_LOG") == null) {
			// debug for the connection module: it names every command the broker refuses
			pb.environment().put("RUST_LOG", "info,broker::conn=debug");
		}
		Process process;
		try {
			process = pb.start();
		}
		catch (IOException e) {
			throw new UncheckedIOException("cannot start the broker " + cmd, e);
		}
		Thread hook = new Thread(process::destroyForcibly, "broker-kill-" + name);
		Runtime.getRuntime().addShutdownHook(hook);
		BlockingQueue<String> lines = new LinkedBlockingQueue<>();
		Thread reader = new Thread(() -> {
			try (BufferedReader r = new BufferedReader(
					new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
				String line;
				while ((line = r.readLine()) != null) {
					lines.add(line);
				}
			}
			catch (IOException ignored) {
				// the broker closed its stdout
			}
		}, "broker-stdout-" + name);
		reader.setDaemon(true);
		reader.start();
		try {
			long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(URL_TIMEOUT_MS);
			String service = poll(lines, deadline);
			String admin = service == null ? null : poll(lines, deadline);
			if (service == null || admin == null || !service.startsWith("pulsar://") || !admin.startsWith("http://")) {
				process.destroyForcibly();
				Runtime.getRuntime().removeShutdownHook(hook);
				throw new IllegalStateException("the broker did not print its two URL lines within "
						+ URL_TIMEOUT_MS + " ms (got " + service + ", " + admin + "; alive=" + process.isAlive()
						+ "); its log: " + log + "\n" + tail(log, 20));
			}
			return new Broker(name, process, log, service, admin, hook);
		}
		catch (InterruptedException e) {
			process.destroyForcibly();
			Thread.currentThread().interrupt();
			throw new IllegalStateException("interrupted while starting the broker", e);
		}
	}

	private static String poll(BlockingQueue<String> lines, long deadlineNanos) throws InterruptedException {
		long left = deadlineNanos - System.nanoTime();
		return left <= 0 ? null : lines.poll(left, TimeUnit.NANOSECONDS);
	}

	public static Path logDir() {
		try {
			String dir = System.getenv("INTEROP_LOG_DIR");
			Path p = (dir == null || dir.isBlank()) ? Path.of(System.getProperty("java.io.tmpdir"), "interop-spring-logs")
					: Path.of(dir);
			Files.createDirectories(p);
			return p;
		}
		catch (IOException e) {
			throw new UncheckedIOException(e);
		}
	}

	public String serviceUrl() {
		return this.serviceUrl;
	}

	public String adminUrl() {
		return this.adminUrl;
	}

	public Path log() {
		return this.log;
	}

	/** Lines of the broker's log that contain {@code needle} (case-insensitive). */
	public long countLogLines(String needle) {
		String n = needle.toLowerCase(Locale.ROOT);
		try (var stream = Files.lines(this.log, StandardCharsets.UTF_8)) {
			return stream.filter((l) -> l.toLowerCase(Locale.ROOT).contains(n)).count();
		}
		catch (IOException e) {
			throw new UncheckedIOException(e);
		}
	}

	static String tail(Path log, int n) {
		try {
			List<String> all = Files.readAllLines(log, StandardCharsets.UTF_8);
			return String.join("\n", all.subList(Math.max(0, all.size() - n), all.size()));
		}
		catch (IOException e) {
			return "(cannot read " + log + ": " + e + ")";
		}
	}

	/** SIGTERM, wait up to 5 s, then SIGKILL; fails if the broker did not exit 0 on SIGTERM. */
	@Override
	public synchronized void close() {
		if (this.stopped) {
			return;
		}
		this.stopped = true;
		try {
			this.process.destroy(); // SIGTERM
			boolean exited = this.process.waitFor(STOP_TIMEOUT_MS, TimeUnit.MILLISECONDS);
			if (!exited) {
				this.process.destroyForcibly();
				this.process.waitFor(5, TimeUnit.SECONDS);
				throw new AssertionError("broker " + this.name + " did not exit within " + STOP_TIMEOUT_MS
						+ " ms of SIGTERM (killed); its log: " + this.log);
			}
			int code = this.process.exitValue();
			if (code != 0) {
				throw new AssertionError("broker " + this.name + " exited with " + code + " after SIGTERM; its log: "
						+ this.log + "\n" + tail(this.log, 20));
			}
		}
		catch (InterruptedException e) {
			this.process.destroyForcibly();
			Thread.currentThread().interrupt();
		}
		finally {
			try {
				Runtime.getRuntime().removeShutdownHook(this.shutdownHook);
			}
			catch (IllegalStateException ignored) {
				// the JVM is shutting down already
			}
		}
	}

}
