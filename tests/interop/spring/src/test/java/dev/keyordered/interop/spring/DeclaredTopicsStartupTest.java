package dev.keyordered.interop.spring;

import java.util.ArrayList;
import java.util.List;
import java.util.UUID;

import dev.keyordered.interop.spring.support.AdminHttp;
import dev.keyordered.interop.spring.support.Broker;
import dev.keyordered.interop.spring.support.BrokerExtension;
import dev.keyordered.interop.spring.support.Scenario;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

import org.springframework.boot.WebApplicationType;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The application starts when it declares its topics as {@code PulsarTopic} beans
 * ({@code app.topics.declare=true}): Spring's PulsarAdministration lists the namespace's
 * topics (persistent and non-persistent) and creates the missing ones through the admin API.
 */
@ExtendWith({ BrokerExtension.class, Scenario.class })
class DeclaredTopicsStartupTest {

	@Test
	void contextStartsWithDeclaredTopics() {
		Broker broker = BrokerExtension.broker();
		String suffix = UUID.randomUUID().toString().substring(0, 8);
		List<String> props = new ArrayList<>(List.of("--spring.pulsar.client.service-url=" + broker.serviceUrl(),
				"--spring.pulsar.admin.service-url=" + broker.adminUrl(), "--app.topics.declare=true"));
		List<String> topics = new ArrayList<>();
		for (String t : new String[] { "keyed-events", "orders", "payments", "payments-dlq" }) {
			String name = "persistent://public/default/" + t + "-" + suffix;
			props.add("--app.topics." + t + "=" + name);
			topics.add(name);
		}
		try (ConfigurableApplicationContext context = new SpringApplicationBuilder(InteropApplication.class)
			.web(WebApplicationType.NONE)
			.run(props.toArray(String[]::new))) {
			assertThat(context.isRunning()).isTrue();
			String listing = AdminHttp.get(broker.adminUrl(), "/admin/v2/persistent/public/default").body();
			for (String t : topics) {
				assertThat(listing).as("the namespace listing names the declared topic").contains(t);
			}
		}
	}

}
