package interop

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// parseKeySeq splits a "key#seq" payload.
func parseKeySeq(p []byte) (string, int, error) {
	k, s, ok := strings.Cut(string(p), "#")
	if !ok {
		return "", 0, fmt.Errorf("payload %q is not key#seq", p)
	}
	n, err := strconv.Atoi(s)
	return k, n, err
}

// keySharedApp is one application on a Key_Shared subscription: its own client and consumer; it
// logs (key, seq) when it processes a message, then acks it.
type keySharedApp struct {
	name      string
	consumer  pulsar.Consumer
	stop      chan struct{}
	done      chan struct{}
	processed atomic.Int64
}

func startKeySharedApp(t *testing.T, url, topic, name string, log *processingLog, errs *errList, work time.Duration) *keySharedApp {
	t.Helper()
	c, err := NewClient(t, url).Subscribe(pulsar.ConsumerOptions{
		Topic:                       topic,
		SubscriptionName:            "sub",
		Type:                        pulsar.KeyShared,
		Name:                        name,
		ReceiverQueueSize:           10,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatalf("subscribe %s: %v", name, err)
	}
	a := &keySharedApp{name: name, consumer: c, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(a.done)
		defer c.Close() // with messages still in its receive queue
		end := time.Now().Add(45 * time.Second)
		for time.Now().Before(end) {
			select {
			case <-a.stop:
				return
			default:
			}
			m, err := receiveWithin(c, 100*time.Millisecond)
			if err != nil {
				errs.add(fmt.Errorf("%s: %w", name, err))
				return
			}
			if m == nil {
				continue
			}
			key, seq, err := parseKeySeq(m.Payload())
			if err != nil {
				errs.add(err)
				return
			}
			time.Sleep(work)
			log.record(name, key, seq, idKey(m.ID()), m.RedeliveryCount())
			a.processed.Add(1)
			if err := c.Ack(m); err != nil {
				errs.add(fmt.Errorf("%s ack: %w", name, err))
				return
			}
		}
	}()
	return a
}

func (a *keySharedApp) close(t *testing.T) {
	t.Helper()
	close(a.stop)
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not close within 10 s", a.name)
	}
}

// TestKeySharedJoinLeave: Key_Shared (AUTO_SPLIT), 20 keys x 30 messages published at a steady
// pace. c1 starts alone; c2 joins after 100 processed messages; c1 closes after 200 (with
// messages in its receive queue) and c3 joins. The merged processing log keeps per-key order,
// every consumer processes some, and a late consumer gets nothing.
func TestKeySharedJoinLeave(t *testing.T) {
	const keys, perKey = 20, 30
	const n = keys * perKey
	sc := begin(t, "key_shared_join_leave")
	b := StartBroker(t, "broker")
	topic := uniqueTopic("ks-join-leave")
	var (
		log  processingLog
		errs errList
	)
	defer log.write(t, "processing")
	apps := map[string]*keySharedApp{}
	apps["c1"] = startKeySharedApp(t, b.ServiceURL, topic, "c1", &log, &errs, 2*time.Millisecond)

	producer, err := NewClient(t, b.ServiceURL).CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sendErrs errList
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := range n {
			k, s := i%keys, i/keys
			key := fmt.Sprintf("key-%d", k)
			producer.SendAsync(ctx, &pulsar.ProducerMessage{Key: key, Payload: fmt.Appendf(nil, "%s#%d", key, s)},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					if err != nil {
						sendErrs.add(err)
					}
				})
			if i%20 == 19 {
				time.Sleep(30 * time.Millisecond)
			}
		}
		if err := producer.FlushWithCtx(ctx); err != nil {
			sendErrs.add(err)
		}
	}()

	var steps []string
	waitUntil(t, 20*time.Second, "100 processed messages", func() bool { return log.len() >= 100 || errs.err() != nil })
	apps["c2"] = startKeySharedApp(t, b.ServiceURL, topic, "c2", &log, &errs, 2*time.Millisecond)
	steps = append(steps, fmt.Sprintf("c2 joined at %d", log.len()))
	waitUntil(t, 20*time.Second, "200 processed messages", func() bool { return log.len() >= 200 || errs.err() != nil })
	apps["c1"].close(t)
	steps = append(steps, fmt.Sprintf("c1 closed at %d", log.len()))
	apps["c3"] = startKeySharedApp(t, b.ServiceURL, topic, "c3", &log, &errs, 2*time.Millisecond)
	steps = append(steps, fmt.Sprintf("c3 joined at %d", log.len()))
	select {
	case <-produced:
	case <-time.After(30 * time.Second):
		t.Fatal("the producer did not finish within 30 s")
	}
	sc.Sent(n)
	if err := sendErrs.err(); err != nil {
		t.Fatalf("send: %v", err)
	}
	waitUntil(t, 30*time.Second, fmt.Sprintf("all %d messages processed", n), func() bool {
		seen := map[string]bool{}
		for _, e := range log.snapshot() {
			seen[fmt.Sprintf("%s#%d", e.Key, e.Seq)] = true
		}
		return len(seen) >= n || errs.err() != nil
	})
	time.Sleep(300 * time.Millisecond) // stray duplicates show up
	apps["c2"].close(t)
	apps["c3"].close(t)
	if err := errs.err(); err != nil {
		t.Fatalf("applications: %v", err)
	}
	expected := map[string]int{}
	for k := range keys {
		expected[fmt.Sprintf("key-%d", k)] = perKey
	}
	first, again, err := checkKeyOrder(log.snapshot(), expected, nil)
	if err != nil {
		t.Fatal(err)
	}
	if first != n {
		t.Fatalf("%d first-time processings, expected %d", first, n)
	}
	per := map[string]int64{}
	for name, a := range apps {
		per[name] = a.processed.Load()
		if per[name] == 0 {
			t.Errorf("%s processed nothing", name)
		}
	}
	late, err := NewClient(t, b.ServiceURL).Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Type: pulsar.KeyShared})
	if err != nil {
		t.Fatalf("subscribe late: %v", err)
	}
	defer late.Close()
	if extra := drain(t, late, 700*time.Millisecond, 3*time.Second); len(extra) > 0 {
		t.Fatalf("%d messages redelivered after every ack, e.g. %s", len(extra), extra[0].Payload())
	}
	t.Logf("key_shared join/leave: %d in per-key order (%v; %s), %d re-processed after redelivery",
		first, per, strings.Join(steps, ", "), again)
}

// TestKeySharedSticky: Key_Shared STICKY with ranges [0, 32767] and [32768, 65535], 40 keys x 5
// messages. Each message reaches the consumer whose range holds Pulsar's sticky hash of its key
// (computed here), exactly once, in per-key order, and both ranges get keys.
func TestKeySharedSticky(t *testing.T) {
	const keys, perKey = 40, 5
	const n = keys * perKey
	sc := begin(t, "key_shared_sticky")
	b := StartBroker(t, "broker")
	topic := uniqueTopic("ks-sticky")
	ranges := []struct {
		name   string
		lo, hi int
	}{{"low", 0, 32767}, {"high", 32768, 65535}}

	type rec struct{ key, payload string }
	received := make([][]rec, len(ranges))
	var total atomic.Int64
	var errs errList
	var wg sync.WaitGroup
	for i, r := range ranges {
		policy, err := pulsar.NewKeySharedPolicySticky([]int{r.lo, r.hi})
		if err != nil {
			t.Fatal(err)
		}
		if policy.Mode != pulsar.KeySharedPolicyModeSticky {
			t.Fatalf("policy mode %v", policy.Mode)
		}
		c, err := NewClient(t, b.ServiceURL).Subscribe(pulsar.ConsumerOptions{
			Topic:             topic,
			SubscriptionName:  "sub",
			Type:              pulsar.KeyShared,
			Name:              r.name,
			ReceiverQueueSize: 50,
			KeySharedPolicy:   policy,
		})
		if err != nil {
			t.Fatalf("subscribe %s: %v", r.name, err)
		}
		t.Cleanup(c.Close)
		wg.Add(1)
		go func() {
			defer wg.Done()
			end := time.Now().Add(20 * time.Second)
			for time.Now().Before(end) && total.Load() < n {
				m, err := receiveWithin(c, 200*time.Millisecond)
				if err != nil {
					errs.add(err)
					return
				}
				if m == nil {
					continue
				}
				received[i] = append(received[i], rec{m.Key(), string(m.Payload())})
				total.Add(1)
				if err := c.Ack(m); err != nil {
					errs.add(err)
					return
				}
			}
		}()
	}
	producer, err := NewClient(t, b.ServiceURL).CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var sendErrs errList
	for i := range n {
		key := fmt.Sprintf("user-%d", i%keys)
		producer.SendAsync(ctx, &pulsar.ProducerMessage{Key: key, Payload: fmt.Appendf(nil, "%s#%d", key, i/keys)},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					sendErrs.add(err)
				}
			})
	}
	if err := producer.FlushWithCtx(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	sc.Sent(n)
	wg.Wait()
	if err := errors.Join(sendErrs.err(), errs.err()); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, r := range ranges {
		last := map[string]int{}
		keysHere := map[string]bool{}
		for _, m := range received[i] {
			if slot := stickyHash(m.key); slot < r.lo || slot > r.hi {
				t.Errorf("%s (hash %d) went to %s [%d, %d]", m.payload, slot, r.name, r.lo, r.hi)
			}
			if seen[m.payload] {
				t.Errorf("%s received twice", m.payload)
			}
			seen[m.payload] = true
			_, seq, err := parseKeySeq([]byte(m.payload))
			if err != nil {
				t.Fatal(err)
			}
			prev, ok := last[m.key]
			if !ok {
				prev = -1
			}
			if seq != prev+1 {
				t.Errorf("%s: %s after #%d (per-key order)", r.name, m.payload, prev)
			}
			last[m.key] = seq
			keysHere[m.key] = true
		}
		if len(keysHere) == 0 {
			t.Errorf("range %s got no keys", r.name)
		}
		t.Logf("%s [%d, %d]: %d messages, %d keys", r.name, r.lo, r.hi, len(received[i]), len(keysHere))
	}
	if len(seen) != n {
		t.Errorf("received %d distinct messages, expected %d", len(seen), n)
	}
}
