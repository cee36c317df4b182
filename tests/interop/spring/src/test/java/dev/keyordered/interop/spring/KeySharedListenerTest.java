package dev.keyordered.interop.spring;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import dev.keyordered.interop.spring.support.AdminHttp;
import dev.keyordered.interop.spring.support.BrokerBackedTest;
import dev.keyordered.interop.spring.support.BrokerExtension;
import dev.keyordered.interop.spring.support.KeyOrder;
import dev.keyordered.interop.spring.support.Scenario;
import dev.keyordered.interop.spring.support.Wait;
import org.junit.jupiter.api.Test;

import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.core.env.Environment;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The Key_Shared listener (two consumers per instance) gets every keyed event with per-key
 * order, while a second instance of the application joins mid-stream and later shuts down
 * (scale out, scale in). Order is checked on the merged processing log of both instances.
 */
class KeySharedListenerTest extends BrokerBackedTest {

	private static final int KEYS = 20;

	private static final int PER_KEY = 30;

	private static final int N = KEYS * PER_KEY;

	@Autowired
	KeyedEventPublisher publisher;

	@Autowired
	ProcessingLog primaryLog;

	@Autowired
	Environment env;

	@Test
	void keySharedListenerKeepsPerKeyOrderWhileInstancesJoinAndLeave() throws Exception {
		Scenario.messages(N);
		List<CompletableFuture<?>> sends = new ArrayList<>();
		CountDownLatch replicaJoined = new CountDownLatch(1);
		CountDownLatch replicaLeft = new CountDownLatch(1);
		Thread producer = new Thread(() -> {
			// 600 events, keys interleaved, 20 every 100 ms; the producer holds at event 250
			// until the replica is up and at event 450 until it has left, so that both happen
			// mid-stream however slowly the replica starts
			for (int i = 0; i < N; i++) {
				if (i == 250) {
					await(replicaJoined);
				}
				if (i == 450) {
					await(replicaLeft);
				}
				sends.add(this.publisher.publish("key-" + (i % KEYS), i / KEYS));
				if (i % 20 == 19) {
					sleep(100);
				}
			}
		}, "keyed-events-producer");
		producer.start();

		ProcessingLog replicaLog;
		String events;
		try {
			Wait.until(Duration.ofSeconds(20), "150 processed events", () -> this.primaryLog.size() >= 150);
			try (ConfigurableApplicationContext replica = startReplica()) {
				// the replica shuts down (close) with events still in its receiver queues
				replicaLog = replica.getBean(ProcessingLog.class);
				int joinedAt = this.primaryLog.size();
				replicaJoined.countDown();
				Wait.until(Duration.ofSeconds(20), "the replica to process 30 events", () -> replicaLog.size() >= 30);
				events = "replica joined at " + joinedAt + ", left at " + (this.primaryLog.size() + replicaLog.size());
			}
		}
		finally {
			replicaJoined.countDown();
			replicaLeft.countDown();
		}

		producer.join(TimeUnit.SECONDS.toMillis(30));
		assertThat(producer.isAlive()).as("producer finished within 30 s").isFalse();
		CompletableFuture.allOf(sends.toArray(CompletableFuture[]::new)).get(10, TimeUnit.SECONDS);

		Wait.until(Duration.ofSeconds(30), () -> "all " + N + " events processed (" + firstSeen(replicaLog) + ")",
				() -> firstSeen(replicaLog) >= N);
		Thread.sleep(300); // time for stray duplicates to show up

		List<ProcessingLog.Entry> merged = new ArrayList<>(this.primaryLog.snapshot());
		merged.addAll(replicaLog.snapshot());
		merged.sort(Comparator.comparingLong(ProcessingLog.Entry::nanos));
		Map<String, Integer> expected = new LinkedHashMap<>();
		for (int k = 0; k < KEYS; k++) {
			expected.put("key-" + k, PER_KEY);
		}
		KeyOrder.Result result = KeyOrder.check(merged, expected, Set.of());
		assertThat(result.firstTime()).isEqualTo(N);

		Map<String, Long> perConsumer = merged.stream()
			.collect(Collectors.groupingBy(ProcessingLog.Entry::consumer, java.util.TreeMap::new, Collectors.counting()));
		assertThat(this.primaryLog.size()).as("the primary instance processed events").isPositive();
		assertThat(replicaLog.size()).as("the replica processed events").isPositive();

		// Everything was acknowledged: the subscription's backlog drains to 0.
		String stats = AdminHttp.topicPath(this.env.getProperty("app.topics.keyed-events")) + "/stats";
		Wait.until(Duration.ofSeconds(10), () -> "backlog 0 on keyed-events-processor: " + backlog(stats),
				() -> backlog(stats) == 0);
		System.out.println("  key_shared: " + N + " events (" + KEYS + " keys x " + PER_KEY + "), " + result.firstTime()
				+ " processed in per-key order, " + result.reprocessed() + " re-processed after redelivery; " + events
				+ "; per consumer " + perConsumer);
	}

	private int firstSeen(ProcessingLog replicaLog) {
		Set<String> seen = new HashSet<>();
		this.primaryLog.snapshot().forEach((e) -> seen.add(e.key() + "#" + e.seq()));
		replicaLog.snapshot().forEach((e) -> seen.add(e.key() + "#" + e.seq()));
		return seen.size();
	}

	private ConfigurableApplicationContext startReplica() {
		List<String> props = new ArrayList<>();
		for (String name : SHARED_PROPERTIES) {
			props.add("--" + name + "=" + this.env.getRequiredProperty(name));
		}
		props.add("--app.instance=replica");
		// command-line arguments, as the replica would be started: they override application.properties
		return new SpringApplicationBuilder(InteropApplication.class).web(WebApplicationType.NONE)
			.run(props.toArray(String[]::new));
	}

	private static final Pattern BACKLOG = Pattern
		.compile("\"keyed-events-processor\"\\s*:\\s*\\{[^{}]*?\"msgBacklog\"\\s*:\\s*(\\d+)");

	private static long backlog(String statsPath) {
		String body = AdminHttp.get(BrokerExtension.broker().adminUrl(), statsPath).body();
		Matcher m = BACKLOG.matcher(body);
		return m.find() ? Long.parseLong(m.group(1)) : -1;
	}

	private static void await(CountDownLatch latch) {
		try {
			latch.await(60, TimeUnit.SECONDS);
		}
		catch (InterruptedException e) {
			Thread.currentThread().interrupt();
		}
	}

	private static void sleep(long ms) {
		try {
			Thread.sleep(ms);
		}
		catch (InterruptedException e) {
			Thread.currentThread().interrupt();
		}
	}

}
