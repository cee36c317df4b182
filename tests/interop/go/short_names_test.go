package interop

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/config"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// Short topic names and the Go admin library. An application may name a topic `my-topic` (in
// public/default) or `tenant/ns/my-topic`: the Go client sends that name as given on
// PARTITIONED_METADATA, and `<name>-partition-<i>` on each partition's LOOKUP and PRODUCER; its
// retry-letter topic is `<name>-<sub>-RETRY`. The Go admin library creates a partitioned topic
// with `{"partitions": N, "properties": {…}}` (Pulsar's partitioned-topic-metadata media type).

// shortName is a fresh topic name without domain, tenant or namespace.
func shortName(stem string) string {
	return strings.TrimPrefix(uniqueTopic(stem), "persistent://public/default/")
}

// newAdmin is the Go admin library's client for the broker's admin URL.
func newAdmin(t testing.TB, adminURL string) admin.Client {
	t.Helper()
	a, err := admin.New(&config.Config{WebServiceURL: adminURL})
	if err != nil {
		t.Fatalf("admin.New(%s): %v", adminURL, err)
	}
	return a
}

// TestShortNamesPartitioned: a partitioned topic produced to and consumed from by its short
// names. The client looks each partition up as `<name>-partition-<i>`, the name as given; before
// the broker read short names those LOOKUPs were refused with InvalidTopicName, the producer had
// no partition producers, and its first Send crashed the client (a nil dereference), so the
// scenario runs in a child process.
func TestShortNamesPartitioned(t *testing.T) {
	if !isolated(t, "short_names_partitioned") {
		return
	}
	sc := begin(t, "short_names_partitioned")
	b := StartBroker(t, "broker")
	short := shortName("short")
	createPartitioned(t, b.AdminURL, "persistent://public/default/"+short, 3)

	cl := NewClient(t, b.ServiceURL)
	parts, err := cl.TopicPartitions(short)
	if err != nil || len(parts) != 3 {
		t.Fatalf("TopicPartitions(%s): %v, %v", short, parts, err)
	}
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{
		Topic: "public/default/" + short, SubscriptionName: "sub", Type: pulsar.KeyShared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatalf("subscribe to public/default/%s: %v", short, err)
	}
	defer cons.Close()
	producer, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: short, DisableBatching: true})
	if err != nil {
		t.Fatalf("create producer on %s: %v", short, err)
	}
	defer producer.Close()
	const n = 30
	want := make([]string, 0, n)
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		payload := fmt.Sprintf("k%d#%d", i%6, i)
		_, err := producer.Send(ctx, &pulsar.ProducerMessage{Key: fmt.Sprintf("k%d", i%6), Payload: []byte(payload)})
		cancel()
		if err != nil {
			t.Fatalf("send %d to %s: %v", i, short, err)
		}
		sc.Sent(1)
		want = append(want, payload)
	}
	got2 := consumeAll(t, []pulsar.Consumer{cons}, n, 15*time.Second)
	checkOnce(t, got2, want)
	seen := map[int]bool{}
	for _, d := range got2 {
		seen[d.partition] = true
	}
	if len(seen) != 3 {
		t.Fatalf("messages came from partitions %v, expected all 3", seen)
	}
	for i := 0; i < 3; i++ {
		waitBacklog(t, b.AdminURL, fmt.Sprintf("persistent://public/default/%s-partition-%d", short, i), "sub", 0, 5*time.Second)
	}
	t.Logf("%d messages by the short name %q reached the consumer of %q from partitions %v", n, short,
		"public/default/"+short, seen)
}

// TestShortNamesRetryLetter: a RetryEnable consumer on the short name of a partitioned topic
// (its partitions looked up by the short name), whose retry-letter topic is
// `<name>-sub-RETRY`.
func TestShortNamesRetryLetter(t *testing.T) {
	sc := begin(t, "short_names_retry_letter")
	b := StartBroker(t, "broker")
	short := shortName("short-retry")
	createPartitioned(t, b.AdminURL, "persistent://public/default/"+short, 2)
	cl := NewClient(t, b.ServiceURL)
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{
		Topic: short, SubscriptionName: "sub", Type: pulsar.Shared, RetryEnable: true,
		DLQ: &pulsar.DLQPolicy{MaxDeliveries: 5},
	})
	if err != nil {
		t.Fatalf("subscribe to %s with RetryEnable: %v", short, err)
	}
	defer cons.Close()
	sendOne(t, cl, sc, short, "again")
	var from []string
	for want := 0; want <= 1; want++ {
		m, err := receiveWithin(cons, 8*time.Second)
		if err != nil || m == nil {
			t.Fatalf("delivery %d did not arrive within 8 s (%v)", want+1, err)
		}
		if string(m.Payload()) != "again" {
			t.Fatalf("delivery %d: %q", want+1, m.Payload())
		}
		from = append(from, m.Topic())
		if want == 0 {
			cons.ReconsumeLater(m, 200*time.Millisecond)
		} else if err := cons.Ack(m); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	if !strings.HasSuffix(from[1], short+"-sub-RETRY") {
		t.Fatalf("the second delivery came from %q, expected the retry-letter topic", from[1])
	}
	for i := 0; i < 2; i++ {
		waitBacklog(t, b.AdminURL, fmt.Sprintf("persistent://public/default/%s-partition-%d", short, i), "sub", 0, 5*time.Second)
	}
	waitBacklog(t, b.AdminURL, "persistent://public/default/"+short+"-sub-RETRY", "sub", 0, 5*time.Second)
	t.Logf("deliveries from %v", from)
}

// TestAdminLibraryTopics: the Go admin library's topic calls. A partitioned topic is created
// with `{"partitions": N, "properties": {…}}` (Pulsar's partitioned-topic-metadata media type;
// the broker answered 400 to it before), a non-partitioned one with a PUT of the topic with a
// JSON object; then the property updates.
func TestAdminLibraryTopics(t *testing.T) {
	begin(t, "admin_library_topics")
	b := StartBroker(t, "broker")
	adm := newAdmin(t, b.AdminURL)
	pname, err := utils.GetTopicName(shortName("with-props"))
	if err != nil {
		t.Fatal(err)
	}
	props := map[string]string{"owner": "interop", "tier": "gold"}
	if err := adm.Topics().CreateWithProperties(*pname, 3, props); err != nil {
		t.Fatalf("CreateWithProperties(%s, 3): %v", pname, err)
	}
	meta, err := adm.Topics().GetMetadata(*pname)
	if err != nil || meta.Partitions != 3 {
		t.Fatalf("GetMetadata: %+v, %v", meta, err)
	}
	if got, err := adm.Topics().GetProperties(*pname); err != nil || fmt.Sprint(got) != fmt.Sprint(props) {
		t.Fatalf("GetProperties: %v, %v (want %v)", got, err, props)
	}
	name, err := utils.GetTopicName(shortName("plain"))
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.Topics().CreateWithProperties(*name, 0, map[string]string{"a": "1"}); err != nil {
		t.Fatalf("CreateWithProperties(%s, 0): %v", name, err)
	}
	if err := adm.Topics().UpdateProperties(*name, map[string]string{"b": "2"}); err != nil {
		t.Fatalf("UpdateProperties: %v", err)
	}
	if err := adm.Topics().RemoveProperty(*name, "a"); err != nil {
		t.Fatalf("RemoveProperty: %v", err)
	}
	got, err := adm.Topics().GetProperties(*name)
	if err != nil || fmt.Sprint(got) != "map[b:2]" {
		t.Fatalf("GetProperties: %v, %v (want map[b:2])", got, err)
	}
	other, _ := utils.GetTopicName(shortName("bare"))
	if err := adm.Topics().Create(*other, 0); err != nil {
		t.Fatalf("Create(%s, 0): %v", other, err)
	}
	ns, err := utils.GetNamespaceName("public/default")
	if err != nil {
		t.Fatal(err)
	}
	partitioned, non, err := adm.Topics().List(*ns)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(partitioned) != 1 || len(non) != 5 {
		t.Fatalf("List: partitioned %v, non-partitioned %v", partitioned, non)
	}
	if err := adm.Topics().Delete(*name, false, true); err != nil {
		t.Fatalf("Delete(%s): %v", name, err)
	}
	if _, err := adm.Topics().GetProperties(*name); err == nil {
		t.Fatalf("GetProperties of the deleted %s succeeded", name)
	}
}
