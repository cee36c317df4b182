package interop

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// Partitioned topics, tenants and namespaces. The stock client asks the broker for a topic's
// partition count (PARTITIONED_METADATA) and then produces to and consumes from the partitions
// `<topic>-partition-<i>`, each an ordinary topic for the broker.

// partitionOf is i of a message's topic `…-partition-<i>`, or -1 for a topic that is not a
// partition.
func partitionOf(topic string) int {
	at := strings.LastIndex(topic, "-partition-")
	if at < 0 {
		return -1
	}
	i, err := strconv.Atoi(topic[at+len("-partition-"):])
	if err != nil {
		return -1
	}
	return i
}

// partitionNames is `<topic>-partition-0` … `<topic>-partition-<n-1>`.
func partitionNames(topic string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-partition-%d", topic, i)
	}
	return out
}

// createPartitioned creates topic with n partitions through the admin API.
func createPartitioned(t testing.TB, adminURL, topic string, n int) {
	t.Helper()
	adminSend(t, http.MethodPut, topicPath(adminURL, topic)+"/partitions", strconv.Itoa(n))
}

// partitionCount is `partitions` of GET …/partitions.
func partitionCount(t testing.TB, adminURL, topic string) float64 {
	t.Helper()
	return jsonNumber(adminJSON(t, http.MethodGet, topicPath(adminURL, topic)+"/partitions")["partitions"])
}

// delivery is one message as a consuming application saw it.
type delivery struct {
	consumer  int
	partition int
	key       string
	payload   string
	id        string
	redeliv   uint32
}

// consumeAll runs one application goroutine per consumer: it receives, records and acks. It
// returns once n messages were recorded and nothing more came for 500 ms (so duplicates show),
// or when limit passed, with every delivery in the order they were recorded.
func consumeAll(t *testing.T, cons []pulsar.Consumer, n int, limit time.Duration) []delivery {
	t.Helper()
	var (
		mu   sync.Mutex
		got  []delivery
		last time.Time
		errs errList
		wg   sync.WaitGroup
	)
	stop := make(chan struct{})
	for i, c := range cons {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				m, err := receiveWithin(c, 100*time.Millisecond)
				if err != nil {
					errs.add(fmt.Errorf("consumer %d: %w", i, err))
					return
				}
				if m == nil {
					continue
				}
				mu.Lock()
				got = append(got, delivery{i, partitionOf(m.Topic()), m.Key(), string(m.Payload()), idKey(m.ID()), m.RedeliveryCount()})
				last = time.Now()
				mu.Unlock()
				if err := c.Ack(m); err != nil {
					errs.add(fmt.Errorf("consumer %d ack: %w", i, err))
					return
				}
			}
		}()
	}
	end := time.Now().Add(limit)
	for time.Now().Before(end) && errs.err() == nil {
		mu.Lock()
		done := len(got) >= n && time.Since(last) >= 500*time.Millisecond
		mu.Unlock()
		if done {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if err := errs.err(); err != nil {
		t.Fatalf("consumers: %v", err)
	}
	return got
}

// sendAll publishes the messages with SendAsync, flushes, counts them in sc and fails the test
// on any send error.
func sendAll(t *testing.T, sc *Scenario, p pulsar.Producer, msgs []*pulsar.ProducerMessage) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var sendErrs errList
	for _, m := range msgs {
		p.SendAsync(ctx, m, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				sendErrs.add(err)
			}
		})
	}
	if err := p.FlushWithCtx(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	sc.Sent(len(msgs))
	if err := sendErrs.err(); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// checkOnce fails the test unless every payload of want arrived exactly once and nothing else.
func checkOnce(t *testing.T, got []delivery, want []string) {
	t.Helper()
	count := map[string]int{}
	for _, d := range got {
		count[d.payload]++
	}
	for _, p := range want {
		switch count[p] {
		case 1:
		case 0:
			t.Errorf("%s was never received", p)
		default:
			t.Errorf("%s was received %d times", p, count[p])
		}
		delete(count, p)
	}
	for p, k := range count {
		t.Errorf("%q received %d times, never sent", p, k)
	}
}

// TestPartitionedTopic: a topic with 2 partitions is created with the admin API; the client sees
// 2 partitions; 20 keyed messages produced to the topic reach a consumer of the topic from both
// partitions.
func TestPartitionedTopic(t *testing.T) {
	sc := begin(t, "partitioned_topic")
	b := StartBroker(t, "broker")
	topic := uniqueTopic("partitioned")
	createPartitioned(t, b.AdminURL, topic, 2)
	cl := NewClient(t, b.ServiceURL)
	parts, err := cl.TopicPartitions(topic)
	if err != nil {
		t.Fatalf("TopicPartitions: %v", err)
	}
	if !slices.Equal(parts, partitionNames(topic, 2)) {
		t.Fatalf("the client sees partitions %q, expected 2", parts)
	}
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer cons.Close()
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 20 {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Key: fmt.Sprintf("k%d", i), Payload: fmt.Appendf(nil, "m%d", i)}); err != nil {
			t.Fatalf("send: %v", err)
		}
		sc.Sent(1)
	}
	got := receiveN(t, cons, 20, 8*time.Second, 300*time.Millisecond)
	from := map[string]int{}
	for _, m := range got {
		from[m.Topic()]++
	}
	if len(got) != 20 || len(from) != 2 {
		t.Fatalf("received %d of 20 from partitions %v", len(got), from)
	}
}

// TestPartitionedShared: a 3-partition topic made with the admin API; a Shared subscription with
// two consumers (one client each); an unbatched producer without keys (round robin) sends 60.
// Together the consumers get each message exactly once, 20 from each partition, and both get
// some; the partitioned stats count 60 in; every partition's backlog ends at 0.
func TestPartitionedShared(t *testing.T) {
	const n, parts = 60, 3
	sc := begin(t, "partitioned_shared")
	b := StartBroker(t, "broker")
	topic := uniqueTopic("part-shared")
	createPartitioned(t, b.AdminURL, topic, parts)

	cons := make([]pulsar.Consumer, 2)
	for i := range cons {
		c, err := NewClient(t, b.ServiceURL).Subscribe(pulsar.ConsumerOptions{
			Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared, Name: fmt.Sprintf("c%d", i),
			ReceiverQueueSize:           5,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		})
		if err != nil {
			t.Fatalf("subscribe c%d: %v", i, err)
		}
		t.Cleanup(c.Close)
		cons[i] = c
	}
	producer, err := NewClient(t, b.ServiceURL).CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	defer producer.Close()
	msgs := make([]*pulsar.ProducerMessage, n)
	want := make([]string, n)
	for i := range msgs {
		want[i] = fmt.Sprintf("m-%d", i)
		msgs[i] = &pulsar.ProducerMessage{Payload: []byte(want[i])}
	}
	sendAll(t, sc, producer, msgs)

	got := consumeAll(t, cons, n, 20*time.Second)
	checkOnce(t, got, want)
	perPartition := map[int]int{}
	perConsumer := make([]int, len(cons))
	for _, d := range got {
		perPartition[d.partition]++
		perConsumer[d.consumer]++
	}
	for i := range parts {
		if perPartition[i] != n/parts {
			t.Errorf("partition %d delivered %d messages, expected %d (round robin): %v", i, perPartition[i], n/parts, perPartition)
		}
	}
	if len(perPartition) != parts {
		t.Errorf("messages came from partitions %v, expected 0..%d", perPartition, parts-1)
	}
	for i, k := range perConsumer {
		if k == 0 {
			t.Errorf("c%d received nothing: %v", i, perConsumer)
		}
	}
	if t.Failed() {
		return
	}

	st := adminJSON(t, http.MethodGet, topicPath(b.AdminURL, topic)+"/partitioned-stats")
	if got := jsonNumber(jsonPath(st, "metadata", "partitions")); got != parts {
		t.Errorf("partitioned-stats metadata.partitions = %v, expected %d", got, parts)
	}
	if got := jsonNumber(st["msgInCounter"]); got != n {
		t.Errorf("partitioned-stats msgInCounter = %v, expected %d", got, n)
	}
	if m, _ := st["partitions"].(map[string]any); len(m) != parts {
		t.Errorf("partitioned-stats has %d partitions, expected %d: %.300v", len(m), parts, st["partitions"])
	}
	for _, c := range cons {
		c.Close() // flushes the grouped acks
	}
	for _, p := range partitionNames(topic, parts) {
		waitBacklog(t, b.AdminURL, p, "sub", 0, 5*time.Second)
	}
	t.Logf("partitioned shared: %d sent, per partition %v, per consumer %v, backlogs 0", n, perPartition, perConsumer)
}

// TestPartitionedKeyShared: a 4-partition topic made with the admin API; two Key_Shared consumers
// (one client each); 400 keyed messages over 20 keys ("key-<k>#<seq>"), which the client's
// default router sends to one partition per key. Every message arrives once; all of a key's
// messages come from one partition to one consumer, in seq order; all 4 partitions and both
// consumers are used; every partition's backlog ends at 0.
func TestPartitionedKeyShared(t *testing.T) {
	const keys, perKey, parts = 20, 20, 4
	const n = keys * perKey
	sc := begin(t, "partitioned_key_shared")
	b := StartBroker(t, "broker")
	topic := uniqueTopic("part-ks")
	createPartitioned(t, b.AdminURL, topic, parts)

	cons := make([]pulsar.Consumer, 2)
	for i := range cons {
		c, err := NewClient(t, b.ServiceURL).Subscribe(pulsar.ConsumerOptions{
			Topic: topic, SubscriptionName: "sub", Type: pulsar.KeyShared, Name: fmt.Sprintf("c%d", i),
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		})
		if err != nil {
			t.Fatalf("subscribe c%d: %v", i, err)
		}
		t.Cleanup(c.Close)
		cons[i] = c
	}
	producer, err := NewClient(t, b.ServiceURL).CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	defer producer.Close()
	msgs := make([]*pulsar.ProducerMessage, n)
	want := make([]string, n)
	for i := range msgs {
		key := fmt.Sprintf("key-%d", i%keys)
		want[i] = fmt.Sprintf("%s#%d", key, i/keys)
		msgs[i] = &pulsar.ProducerMessage{Key: key, Payload: []byte(want[i])}
	}
	sendAll(t, sc, producer, msgs)

	got := consumeAll(t, cons, n, 30*time.Second)
	checkOnce(t, got, want)
	var log processingLog
	keyPartitions := map[string]map[int]bool{}
	keyConsumers := map[string]map[int]bool{}
	perPartition := map[int]int{}
	perConsumer := make([]int, len(cons))
	for _, d := range got {
		key, seq, err := parseKeySeq([]byte(d.payload))
		if err != nil {
			t.Fatal(err)
		}
		if key != d.key {
			t.Errorf("%s arrived with key %q", d.payload, d.key)
		}
		log.record(fmt.Sprintf("c%d", d.consumer), key, seq, fmt.Sprintf("p%d:%s", d.partition, d.id), d.redeliv)
		if keyPartitions[key] == nil {
			keyPartitions[key], keyConsumers[key] = map[int]bool{}, map[int]bool{}
		}
		keyPartitions[key][d.partition] = true
		keyConsumers[key][d.consumer] = true
		perPartition[d.partition]++
		perConsumer[d.consumer]++
	}
	log.write(t, "processing")
	expected := map[string]int{}
	for k := range keys {
		expected[fmt.Sprintf("key-%d", k)] = perKey
	}
	first, again, err := checkKeyOrder(log.snapshot(), expected, nil)
	if err != nil {
		t.Fatal(err)
	}
	if first != n || again != 0 {
		t.Errorf("%d first-time processings and %d repeated, expected %d and 0", first, again, n)
	}
	for key := range expected {
		if len(keyPartitions[key]) != 1 {
			t.Errorf("key %s came from partitions %v, expected one", key, keyPartitions[key])
		}
		if len(keyConsumers[key]) != 1 {
			t.Errorf("key %s went to consumers %v, expected one", key, keyConsumers[key])
		}
	}
	if len(perPartition) != parts {
		t.Errorf("messages came from partitions %v, expected all %d", perPartition, parts)
	}
	for i, k := range perConsumer {
		if k == 0 {
			t.Errorf("c%d received nothing: %v", i, perConsumer)
		}
	}
	if t.Failed() {
		return
	}
	for _, c := range cons {
		c.Close() // flushes the grouped acks
	}
	for _, p := range partitionNames(topic, parts) {
		waitBacklog(t, b.AdminURL, p, "sub", 0, 5*time.Second)
	}
	t.Logf("partitioned key_shared: %d in per-key order, per partition %v, per consumer %v, backlogs 0",
		first, perPartition, perConsumer)
}

// TestPartitionedAutoCreated: a broker with --allow-auto-topic-creation-type partitioned
// --default-num-partitions 3. The client sees 3 partitions of a fresh topic; 6 unbatched
// messages without keys go round the 3 partitions and reach a consumer of the topic; the admin
// API says 3 partitions and lists them in the namespace.
func TestPartitionedAutoCreated(t *testing.T) {
	const n, parts = 6, 3
	sc := begin(t, "partitioned_auto_created")
	b := StartBroker(t, "broker", "--allow-auto-topic-creation-type", "partitioned", "--default-num-partitions", "3")
	topic := uniqueTopic("part-auto")
	cl := NewClient(t, b.ServiceURL)
	got, err := cl.TopicPartitions(topic)
	if err != nil {
		t.Fatalf("TopicPartitions of a fresh topic: %v", err)
	}
	if !slices.Equal(got, partitionNames(topic, parts)) {
		t.Fatalf("the client sees partitions %q of a fresh topic, expected %d", got, parts)
	}
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer cons.Close()
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	defer p.Close()
	msgs := make([]*pulsar.ProducerMessage, n)
	want := make([]string, n)
	for i := range msgs {
		want[i] = fmt.Sprintf("m%d", i)
		msgs[i] = &pulsar.ProducerMessage{Payload: []byte(want[i])}
	}
	sendAll(t, sc, p, msgs)
	deliveries := consumeAll(t, []pulsar.Consumer{cons}, n, 10*time.Second)
	checkOnce(t, deliveries, want)
	from := map[int]int{}
	for _, d := range deliveries {
		from[d.partition]++
	}
	if len(from) != parts || from[-1] != 0 {
		t.Errorf("messages came from partitions %v, expected 0..%d", from, parts-1)
	}
	if c := partitionCount(t, b.AdminURL, topic); c != parts {
		t.Errorf("GET …/partitions says %v, expected %d", c, parts)
	}
	status, body, err := adminDo(http.MethodGet, b.AdminURL+"/admin/v2/persistent/public/default", "")
	if err != nil || status != 200 {
		t.Fatalf("GET the namespace's topics: HTTP %d %.200s (%v)", status, body, err)
	}
	for _, name := range partitionNames(topic, parts) {
		if !strings.Contains(body, `"`+name+`"`) {
			t.Errorf("the namespace's topics do not list %s: %.500s", name, body)
		}
	}
	t.Logf("auto-created partitioned topic: %v per partition", from)
}

// TestPartitionedGrown: a topic created with 2 partitions is grown to 3 (POST …/partitions 3)
// while a producer and a consumer with partition discovery every second are connected. A
// message from partition 2 arrives within 15 s of the grow; every message arrives exactly once.
func TestPartitionedGrown(t *testing.T) {
	sc := begin(t, "partitioned_grown")
	b := StartBroker(t, "broker")
	topic := uniqueTopic("part-grown")
	createPartitioned(t, b.AdminURL, topic, 2)
	cl := NewClient(t, b.ServiceURL)
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared,
		AutoDiscoveryPeriod:         time.Second,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer cons.Close()
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true,
		PartitionsAutoDiscoveryInterval: time.Second})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	defer p.Close()

	var want []string
	var got []delivery
	record := func(m pulsar.Message) {
		got = append(got, delivery{0, partitionOf(m.Topic()), m.Key(), string(m.Payload()), idKey(m.ID()), m.RedeliveryCount()})
		if err := cons.Ack(m); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	send := func() {
		t.Helper()
		payload := fmt.Sprintf("m%d", len(want))
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(payload)}); err != nil {
			t.Fatalf("send %s: %v", payload, err)
		}
		sc.Sent(1)
		want = append(want, payload)
	}
	for range 4 {
		send()
	}
	for _, m := range receiveN(t, cons, 4, 8*time.Second, 300*time.Millisecond) {
		record(m)
	}
	before := map[int]int{}
	for _, d := range got {
		before[d.partition]++
	}
	if len(got) != 4 || before[0] != 2 || before[1] != 2 {
		t.Fatalf("before the grow: received %d of 4, per partition %v, expected 2 from each of 0 and 1", len(got), before)
	}

	adminSend(t, http.MethodPost, topicPath(b.AdminURL, topic)+"/partitions", "3")
	grown := time.Now()
	if c := partitionCount(t, b.AdminURL, topic); c != 3 {
		t.Fatalf("after POST …/partitions 3, GET says %v partitions", c)
	}
	firstFromTwo := time.Duration(-1)
	for time.Since(grown) < 15*time.Second && firstFromTwo < 0 {
		send()
		for {
			m, err := receiveWithin(cons, 200*time.Millisecond)
			if err != nil {
				t.Fatalf("receive: %v", err)
			}
			if m == nil {
				break
			}
			record(m)
			if got[len(got)-1].partition == 2 && firstFromTwo < 0 {
				firstFromTwo = time.Since(grown)
			}
		}
	}
	if firstFromTwo < 0 {
		t.Fatalf("no message from partition 2 within 15 s of the grow (%d sent, %d received)", len(want), len(got))
	}
	for _, m := range receiveN(t, cons, len(want)-len(got), 8*time.Second, 500*time.Millisecond) {
		record(m)
	}
	checkOnce(t, got, want)
	after := map[int]int{}
	for _, d := range got[4:] {
		after[d.partition]++
	}
	t.Logf("grown to 3: first message from partition 2 after %.1f s; %d sent after the grow, per partition %v",
		firstFromTwo.Seconds(), len(want)-4, after)
}

// TestNamespaceMustExist: a producer, then a consumer, on a topic of a namespace that does not
// exist are refused (TopicNotFound) within 10 s each, with the client's 5 s operation timeout;
// once the namespace is created with the admin API (and listed in its tenant) a consumer and a
// producer on the same topic are accepted and the message arrives.
func TestNamespaceMustExist(t *testing.T) {
	sc := begin(t, "namespace_must_exist")
	b := StartBroker(t, "broker")
	const topic = "persistent://public/no-such-ns/t"
	cl := NewClient(t, b.ServiceURL)
	t0 := time.Now()
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	took := time.Since(t0)
	if err == nil {
		p.Close()
		t.Fatalf("a producer on %s (namespace public/no-such-ns does not exist) was accepted", topic)
	}
	t.Logf("producer on %s refused after %.2f s: %v", topic, took.Seconds(), err)
	if took > 10*time.Second {
		t.Errorf("the refusal took %.1f s, expected under 10 s", took.Seconds())
	}
	if !strings.Contains(err.Error(), "TopicNotFound") {
		t.Errorf("the refusal does not name TopicNotFound: %v", err)
	}
	t0 = time.Now()
	c, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub"})
	took = time.Since(t0)
	if err == nil {
		c.Close()
		t.Fatalf("a consumer on %s (namespace public/no-such-ns does not exist) was accepted", topic)
	}
	t.Logf("consumer on %s refused after %.2f s: %v", topic, took.Seconds(), err)
	if took > 10*time.Second || !strings.Contains(err.Error(), "TopicNotFound") {
		t.Errorf("the consumer's refusal took %.1f s (expected under 10 s) and says %v (expected TopicNotFound)", took.Seconds(), err)
	}
	if t.Failed() {
		return
	}

	adminSend(t, http.MethodPut, b.AdminURL+"/admin/v2/namespaces/public/no-such-ns", "")
	namespaces := adminJSONList(t, b.AdminURL+"/admin/v2/namespaces/public")
	if !slices.Contains(namespaces, "public/no-such-ns") {
		t.Errorf("GET /admin/v2/namespaces/public lists %q, without public/no-such-ns", namespaces)
	}
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatalf("subscribe after the namespace was created: %v", err)
	}
	defer cons.Close()
	sendOne(t, cl, sc, topic, "hello")
	got := payloads(receiveN(t, cons, 1, 5*time.Second, 300*time.Millisecond))
	if !slices.Equal(got, []string{"hello"}) {
		t.Fatalf("after the namespace was created the consumer received %q, expected [hello]", got)
	}
}
