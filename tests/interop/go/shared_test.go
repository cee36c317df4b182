package interop

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestShared: Shared subscription, three consumers (one client each, receiver queue 20), 300
// messages. Every message is received and acked, all three consumers get some, none is lost, a
// second copy is accepted only with a redelivery count > 0, and afterwards a fresh consumer on
// the subscription gets nothing.
func TestShared(t *testing.T) {
	const n, consumers = 300, 3
	sc := begin(t, "shared")
	b := StartBroker(t, "broker")
	topic := uniqueTopic("shared")

	type got struct {
		at       time.Time
		payload  string
		id       string
		redeliv  uint32
		consumer int
	}
	var (
		mu       sync.Mutex
		received []got
		total    int
		errs     errList
	)
	cons := make([]pulsar.Consumer, consumers)
	for i := range cons {
		c, err := NewClient(t, b.ServiceURL).Subscribe(pulsar.ConsumerOptions{
			Topic:                       topic,
			SubscriptionName:            "sub",
			Type:                        pulsar.Shared,
			Name:                        fmt.Sprintf("c%d", i),
			ReceiverQueueSize:           20,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		})
		if err != nil {
			t.Fatalf("subscribe c%d: %v", i, err)
		}
		cons[i] = c
	}
	var wg sync.WaitGroup
	for i, c := range cons {
		wg.Add(1)
		go func() {
			defer wg.Done()
			end := time.Now().Add(30 * time.Second)
			for time.Now().Before(end) {
				mu.Lock()
				finished := total >= n
				mu.Unlock()
				if finished {
					return
				}
				m, err := receiveWithin(c, 200*time.Millisecond)
				if err != nil {
					errs.add(fmt.Errorf("c%d: %w", i, err))
					return
				}
				if m == nil {
					continue
				}
				mu.Lock()
				received = append(received, got{time.Now(), string(m.Payload()), idKey(m.ID()), m.RedeliveryCount(), i})
				total++
				mu.Unlock()
				if err := c.Ack(m); err != nil {
					errs.add(fmt.Errorf("c%d ack: %w", i, err))
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
		producer.SendAsync(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "m-%d", i)},
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
	if err := sendErrs.err(); err != nil {
		t.Fatalf("send: %v", err)
	}
	wg.Wait()
	if err := errs.err(); err != nil {
		t.Fatalf("consumers: %v", err)
	}

	sort.Slice(received, func(i, j int) bool { return received[i].at.Before(received[j].at) })
	seen := map[string]int{}
	per := make([]int, consumers)
	redelivered := 0
	for _, r := range received {
		per[r.consumer]++
		if prev, dup := seen[r.payload]; dup {
			if r.redeliv == 0 {
				t.Errorf("%s (%s) came again to c%d with redelivery count 0 (first to c%d)", r.payload, r.id, r.consumer, prev)
			}
			redelivered++
			continue
		}
		seen[r.payload] = r.consumer
	}
	for i := range n {
		if _, ok := seen[fmt.Sprintf("m-%d", i)]; !ok {
			t.Errorf("m-%d was never received", i)
		}
	}
	for i, k := range per {
		if k == 0 {
			t.Errorf("c%d received nothing: %v", i, per)
		}
	}
	if t.Failed() {
		return
	}

	for _, c := range cons {
		c.Close() // flushes the grouped acks
	}
	late, err := NewClient(t, b.ServiceURL).Subscribe(pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared,
	})
	if err != nil {
		t.Fatalf("subscribe late: %v", err)
	}
	defer late.Close()
	if extra := drain(t, late, 700*time.Millisecond, 3*time.Second); len(extra) > 0 {
		t.Fatalf("%d messages redelivered after every ack, e.g. %s", len(extra), extra[0].Payload())
	}
	t.Logf("shared: %d sent, received %v over %d consumers, %d redelivered, 0 lost", n, per, consumers, redelivered)
}
