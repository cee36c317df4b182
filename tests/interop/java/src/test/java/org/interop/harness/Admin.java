package org.interop.harness;

import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;

/** The broker's admin HTTP API (Pulsar's admin v2 paths) through java.net.http, 5 s per request. */
public final class Admin {
    private static final HttpClient HTTP = HttpClient.newBuilder()
            .connectTimeout(Duration.ofSeconds(2))
            .version(HttpClient.Version.HTTP_1_1)
            .build();

    private final String base;

    public Admin(String adminUrl) {
        this.base = adminUrl;
    }

    /** Status and body of one request. */
    public record Response(int status, String body) {
        public boolean ok() {
            return status == 200 || status == 204;
        }
    }

    /** {@code /admin/v2/persistent/tenant/ns/topic} for {@code persistent://tenant/ns/topic}. */
    public static String topicPath(String topic) {
        return "/admin/v2/persistent/" + topic.substring(topic.indexOf("://") + 3);
    }

    public static String enc(String s) {
        return URLEncoder.encode(s, StandardCharsets.UTF_8).replace("+", "%20");
    }

    public Response request(String method, String path, String jsonBody) {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(base + path)).timeout(Duration.ofSeconds(5));
        if (jsonBody != null) {
            b.header("Content-Type", "application/json");
            b.method(method, HttpRequest.BodyPublishers.ofString(jsonBody));
        } else {
            b.method(method, HttpRequest.BodyPublishers.noBody());
        }
        try {
            HttpResponse<String> r = HTTP.send(b.build(), HttpResponse.BodyHandlers.ofString());
            return new Response(r.statusCode(), r.body());
        } catch (IOException e) {
            throw new Check.ScenarioFailure(method + " " + base + path + ": " + e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new Check.ScenarioFailure(method + " " + base + path + ": interrupted");
        }
    }

    /** GET that must answer 200 with JSON. */
    public Object getJson(String path) {
        Response r = request("GET", path, null);
        Check.check(r.status() == 200, "GET " + path + ": HTTP " + r.status() + " " + abbrev(r.body()));
        return Json.parse(r.body());
    }

    public Map<String, Object> topicStats(String topic) {
        return Json.obj(getJson(topicPath(topic) + "/stats"));
    }

    public Map<String, Object> internalStats(String topic) {
        return Json.obj(getJson(topicPath(topic) + "/internalStats"));
    }

    /** POST that must answer 200 or 204. */
    public void post(String path, String jsonBody) {
        Response r = request("POST", path, jsonBody);
        Check.check(r.ok(), "POST " + path + ": HTTP " + r.status() + " " + abbrev(r.body()));
    }

    public String metrics() {
        Response r = request("GET", "/metrics", null);
        Check.check(r.status() == 200, "GET /metrics: HTTP " + r.status());
        return r.body();
    }

    static String abbrev(String s) {
        return s.length() > 300 ? s.substring(0, 300) + "…" : s;
    }
}
