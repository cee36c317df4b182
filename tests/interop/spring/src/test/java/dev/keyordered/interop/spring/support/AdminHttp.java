package dev.keyordered.interop.spring.support;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

/** Plain HTTP GETs on the broker's admin API. */
public final class AdminHttp {

	private static final HttpClient HTTP = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

	private AdminHttp() {
	}

	/** GET {@code adminUrl + path}; returns the status and the body. */
	public static HttpResponse<String> get(String adminUrl, String path) {
		try {
			return HTTP.send(HttpRequest.newBuilder(URI.create(adminUrl + path)).timeout(Duration.ofSeconds(5)).GET().build(),
					HttpResponse.BodyHandlers.ofString());
		}
		catch (IOException e) {
			throw new IllegalStateException("GET " + adminUrl + path + ": " + e, e);
		}
		catch (InterruptedException e) {
			Thread.currentThread().interrupt();
			throw new IllegalStateException(e);
		}
	}

	/** {@code /admin/v2/persistent/public/default/T} for {@code persistent://public/default/T}. */
	public static String topicPath(String topic) {
		return "/admin/v2/" + topic.replace("://", "/");
	}

}
