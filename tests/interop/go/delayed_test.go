package interop

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestDelayedDelivery: DeliverAfter on Shared (the broker's defaults: strict, 1000 ms tick). Two
// consumers; 5 messages sent with DeliverAfter 1.5 s between 5 plain ones. The plain ones arrive
// at once (within 1 s of publishing); no delayed one arrives before its publish time + 1.5 s
// (broker and client share this machine's clock).
func TestDelayedDelivery(t *testing.T) {
	const n, delay = 10, 1500 * time.Millisecond
	sc := begin(t, "delayed_delivery_shared")
	b := StartBroker(t, "broker")
	topic := uniqueTopic("delayed-shared")
	cl := NewClient(t, b.ServiceURL)
	type arrival struct {
		m  pulsar.Message
		at time.Time
	}
	var (
		mu   sync.Mutex
		got  []arrival
		errs errList
		wg   sync.WaitGroup
	)
	for i := range 2 {
		c, err := cl.Subscribe(pulsar.ConsumerOptions{
			Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared, Name: fmt.Sprintf("c%d", i), ReceiverQueueSize: 10,
		})
		if err != nil {
			t.Fatalf("subscribe c%d: %v", i, err)
		}
		t.Cleanup(c.Close)
		wg.Add(1)
		go func() {
			defer wg.Done()
			end := time.Now().Add(8 * time.Second)
			for time.Now().Before(end) {
				mu.Lock()
				finished := len(got) >= n
				mu.Unlock()
				if finished {
					return
				}
				m, err := receiveWithin(c, 100*time.Millisecond)
				if err != nil {
					errs.add(err)
					return
				}
				if m == nil {
					continue
				}
				mu.Lock()
				got = append(got, arrival{m, time.Now()})
				mu.Unlock()
				if err := c.Ack(m); err != nil {
					errs.add(err)
					return
				}
			}
		}()
	}
	producer, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	defer producer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range n {
		msg := &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "m%d", i)}
		if i%2 == 0 {
			msg.DeliverAfter = delay
		}
		if _, err := producer.Send(ctx, msg); err != nil {
			t.Fatalf("send m%d: %v", i, err)
		}
	}
	sc.Sent(n)
	wg.Wait()
	if err := errs.err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d of %d messages arrived within 8 s", len(got), n)
	}
	var late, plainWait time.Duration
	for _, a := range got {
		i, _ := strconv.Atoi(string(a.m.Payload()[1:]))
		waited := a.at.Sub(a.m.PublishTime())
		if i%2 == 0 {
			if waited < delay {
				t.Errorf("m%d arrived %v after publishing, before its DeliverAfter %v", i, waited, delay)
			}
			late = max(late, waited-delay)
		} else {
			if waited > time.Second {
				t.Errorf("plain m%d waited %v", i, waited)
			}
			plainWait = max(plainWait, waited)
		}
	}
	t.Logf("delayed: 5 of 5 delayed ones after their time (at most %v late), plain ones within %v",
		late.Round(time.Millisecond), plainWait.Round(time.Millisecond))
}
