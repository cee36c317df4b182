package interop

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

var adminHTTP = &http.Client{Timeout: 5 * time.Second}

// topicPath is <admin URL>/admin/v2/persistent/<tenant>/<namespace>/<topic>.
func topicPath(adminURL, topic string) string {
	return adminURL + "/admin/v2/persistent/" + strings.TrimPrefix(topic, "persistent://")
}

// adminDo sends one admin request and returns the status and body; it never fails the test on
// an HTTP error status (callers decide).
func adminDo(method, url, body string) (int, string, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, "", err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := adminHTTP.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(b), err
}

// adminJSON decodes the JSON answer of a request that must succeed (2xx).
func adminJSON(t testing.TB, method, url string) map[string]any {
	t.Helper()
	status, body, err := adminDo(method, url, "")
	if err != nil || status/100 != 2 {
		t.Fatalf("%s %s: HTTP %d %.200s (%v)", method, url, status, body, err)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("%s %s: not JSON: %v: %.200s", method, url, err, body)
	}
	return out
}

// adminPost sends a POST that must succeed (200 or 204).
func adminPost(t testing.TB, url string) {
	t.Helper()
	status, body, err := adminDo(http.MethodPost, url, "")
	if err != nil || (status != 200 && status != 204) {
		t.Fatalf("POST %s: HTTP %d %.200s (%v)", url, status, body, err)
	}
}

// jsonPath walks nested JSON objects: jsonPath(stats, "subscriptions", "sub", "msgBacklog").
func jsonPath(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func jsonNumber(v any) float64 {
	if f, ok := v.(float64); ok {
		return f
	}
	return -1
}

// backlog is subscriptions.<sub>.msgBacklog of the topic's stats.
func backlog(t testing.TB, adminURL, topic, sub string) float64 {
	t.Helper()
	st := adminJSON(t, http.MethodGet, topicPath(adminURL, topic)+"/stats")
	return jsonNumber(jsonPath(st, "subscriptions", sub, "msgBacklog"))
}

// waitBacklog waits until the subscription's backlog is want (acks are grouped for 100 ms).
func waitBacklog(t testing.TB, adminURL, topic, sub string, want float64, limit time.Duration) {
	t.Helper()
	var last float64
	waitUntil(t, limit, fmt.Sprintf("backlog of %s to be %v", sub, want), func() bool {
		last = backlog(t, adminURL, topic, sub)
		return last == want
	})
}

// adminSend sends a request with an optional JSON body that must succeed (2xx); it returns the
// answer's body.
func adminSend(t testing.TB, method, url, body string) string {
	t.Helper()
	status, answer, err := adminDo(method, url, body)
	if err != nil || status/100 != 2 {
		t.Fatalf("%s %s %s: HTTP %d %.200s (%v)", method, url, body, status, answer, err)
	}
	return answer
}

// adminJSONList decodes the JSON array of strings a GET that must succeed answers.
func adminJSONList(t testing.TB, url string) []string {
	t.Helper()
	body := adminSend(t, http.MethodGet, url, "")
	var out []string
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("GET %s: not a JSON list of strings: %v: %.200s", url, err, body)
	}
	return out
}
