package dev.keyordered.interop.spring;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import dev.keyordered.interop.spring.support.AdminHttp;
import dev.keyordered.interop.spring.support.Broker;
import dev.keyordered.interop.spring.support.BrokerExtension;
import dev.keyordered.interop.spring.support.KeyOrder;
import dev.keyordered.interop.spring.support.Scenario;
import dev.keyordered.interop.spring.support.Wait;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

import org.springframework.boot.WebApplicationType;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The keyed-events topic declared as a {@code PulsarTopic} with 3 partitions: Spring's
 * PulsarAdministration creates the partitioned topic at startup through the admin API, the
 * template produces to its partitions (by key) and the Key_Shared listener (two consumers)
 * processes every event once, in per-key order.
 */
@ExtendWith({ BrokerExtension.class, Scenario.class })
class PartitionedTopicTest {

	private static final int KEYS = 20;

	private static final int PER_KEY = 10;

	private static final int N = KEYS * PER_KEY;

	@Test
	void declaredPartitionedTopicCarriesKeySharedEventsInOrder() throws Exception {
		Broker broker = BrokerExtension.broker();
		String suffix = UUID.randomUUID().toString().substring(0, 8);
		String keyed = "persistent://public/default/keyed-events-p-" + suffix;
		List<String> props = new ArrayList<>(List.of("--spring.pulsar.client.service-url=" + broker.serviceUrl(),
				"--spring.pulsar.admin.service-url=" + broker.adminUrl(), "--app.topics.declare=true",
				"--app.topics.keyed-events=" + keyed, "--app.topics.keyed-events-partitions=3"));
		for (String t : new String[] { "orders", "payments", "payments-dlq" }) {
			props.add("--app.topics." + t + "=persistent://public/default/" + t + "-p-" + suffix);
		}
		Scenario.messages(N);
		try (ConfigurableApplicationContext app = new SpringApplicationBuilder(InteropApplication.class)
			.web(WebApplicationType.NONE)
			.run(props.toArray(String[]::new))) {
			String partitions = AdminHttp.get(broker.adminUrl(), AdminHttp.topicPath(keyed) + "/partitions").body();
			assertThat(partitions).as("PulsarAdministration created the partitioned topic")
				.containsPattern("\"partitions\"\\s*:\\s*3");
			KeyedEventPublisher publisher = app.getBean(KeyedEventPublisher.class);
			ProcessingLog log = app.getBean(ProcessingLog.class);
			List<CompletableFuture<?>> sends = new ArrayList<>();
			for (int i = 0; i < N; i++) {
				sends.add(publisher.publish("key-" + (i % KEYS), i / KEYS));
			}
			CompletableFuture.allOf(sends.toArray(CompletableFuture[]::new)).get(20, TimeUnit.SECONDS);
			Wait.until(Duration.ofSeconds(30), () -> "all " + N + " events processed (" + distinct(log) + ")",
					() -> distinct(log) >= N);
			Thread.sleep(300); // time for stray duplicates to show up
			List<ProcessingLog.Entry> events = new ArrayList<>(log.snapshot());
			events.sort(Comparator.comparingLong(ProcessingLog.Entry::nanos));
			Map<String, Integer> expected = new LinkedHashMap<>();
			for (int k = 0; k < KEYS; k++) {
				expected.put("key-" + k, PER_KEY);
			}
			KeyOrder.Result result = KeyOrder.check(events, expected, Set.of());
			assertThat(result.firstTime()).isEqualTo(N);
			assertThat(result.reprocessed()).as("nothing processed twice").isZero();
			String stats = AdminHttp.get(broker.adminUrl(), AdminHttp.topicPath(keyed) + "/partitioned-stats").body();
			assertThat(stats).as("partitioned stats count every event").containsPattern("\"msgInCounter\"\\s*:\\s*" + N);
			System.out.println("  partitioned: " + N + " events over 3 partitions, processed in per-key order");
		}
	}

	private static int distinct(ProcessingLog log) {
		Set<String> seen = new HashSet<>();
		log.snapshot().forEach((e) -> seen.add(e.key() + "#" + e.seq()));
		return seen.size();
	}

}
