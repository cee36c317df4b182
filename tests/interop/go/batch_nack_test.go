package interop

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestBatchIndexAck: a key-based batching producer puts 5 messages of one key in one entry. c1
// (EnableBatchIndexAcknowledgment) acks indexes 0 and 2 and closes; c2 must get exactly indexes
// 1, 3 and 4; after c2 acks them the entry is complete and c3 gets nothing. Once with the
// client's grouped acks, once with AckWithResponse (ack receipts: every Ack waits for the
// broker's answer).
func TestBatchIndexAck(t *testing.T) {
	for _, tc := range []struct {
		name            string
		ackWithResponse bool
	}{
		{"grouped", false},
		{"with_response", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := begin(t, "batch_index_ack/"+tc.name)
			b := StartBroker(t, "broker")
			topic := uniqueTopic("batch-ack")
			cl := NewClient(t, b.ServiceURL)
			subscribe := func(name string) pulsar.Consumer {
				c, err := cl.Subscribe(pulsar.ConsumerOptions{
					Topic:                          topic,
					SubscriptionName:               "sub",
					Type:                           pulsar.Shared,
					Name:                           name,
					EnableBatchIndexAcknowledgment: true,
					AckWithResponse:                tc.ackWithResponse,
					SubscriptionInitialPosition:    pulsar.SubscriptionPositionEarliest,
				})
				if err != nil {
					t.Fatalf("subscribe %s: %v", name, err)
				}
				return c
			}
			c1 := subscribe("c1")
			producer, err := cl.CreateProducer(pulsar.ProducerOptions{
				Topic:                   topic,
				BatchingMaxMessages:     5,
				BatchingMaxPublishDelay: 2 * time.Second,
				BatcherBuilderType:      pulsar.KeyBasedBatchBuilder,
			})
			if err != nil {
				t.Fatalf("create producer: %v", err)
			}
			defer producer.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var sendErrs errList
			for i := range 5 {
				producer.SendAsync(ctx, &pulsar.ProducerMessage{Key: "kb", Payload: fmt.Appendf(nil, "b-%d", i)},
					func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
						if err != nil {
							sendErrs.add(err)
						}
					})
			}
			if err := producer.FlushWithCtx(ctx); err != nil {
				t.Fatalf("flush: %v", err)
			}
			sc.Sent(5)
			if err := sendErrs.err(); err != nil {
				t.Fatalf("send: %v", err)
			}

			first := receiveN(t, c1, 5, 10*time.Second, 300*time.Millisecond)
			if len(first) != 5 {
				t.Fatalf("c1 got %d messages, expected the 5 of the batch: %q", len(first), payloads(first))
			}
			var idx []int32
			entries := map[string]bool{}
			for _, m := range first {
				idx = append(idx, m.ID().BatchIdx())
				entries[fmt.Sprintf("%d:%d", m.ID().LedgerID(), m.ID().EntryID())] = true
			}
			if len(entries) != 1 || !slices.Equal(idx, []int32{0, 1, 2, 3, 4}) {
				t.Fatalf("the 5 messages are not one entry with indexes 0..4: entries %v, indexes %v", entries, idx)
			}
			for _, i := range []int{0, 2} {
				if err := c1.Ack(first[i]); err != nil {
					t.Fatalf("c1 ack index %d: %v", i, err)
				}
			}
			c1.Close() // flushes grouped acks before CLOSE_CONSUMER

			c2 := subscribe("c2")
			second := receiveN(t, c2, 3, 10*time.Second, 700*time.Millisecond)
			var got []string
			for _, m := range second {
				got = append(got, fmt.Sprintf("%d=%s", m.ID().BatchIdx(), m.Payload()))
			}
			slices.Sort(got)
			if want := []string{"1=b-1", "3=b-3", "4=b-4"}; !slices.Equal(got, want) {
				t.Fatalf("c2 got %v, expected %v", got, want)
			}
			for _, m := range second {
				if err := c2.Ack(m); err != nil {
					t.Fatalf("c2 ack: %v", err)
				}
			}
			c2.Close()

			c3 := subscribe("c3")
			defer c3.Close()
			if third := drain(t, c3, 700*time.Millisecond, 3*time.Second); len(third) > 0 {
				t.Fatalf("c3 got %q after every index was acked", payloads(third))
			}
			waitBacklog(t, b.AdminURL, topic, "sub", 0, 3*time.Second)
			t.Logf("batch-index ack (%s): entry %v, c1 acked [0 2], c2 got %v, c3 got 0", tc.name, entries, got)
		})
	}
}

// backoff is a NackBackoffPolicy: base << redelivery count.
type backoff struct{ base time.Duration }

func (p backoff) Next(redeliveryCount uint32) time.Duration { return p.base << redeliveryCount }

// TestNackRedelivery: one message is nacked twice; it comes back with redelivery count 1, then
// 2, with the same message id, not before the client's delay; after the ack nothing more
// arrives. Once with NackRedeliveryDelay (fixed 100 ms), once with a NackBackoffPolicy
// (150 ms << count).
func TestNackRedelivery(t *testing.T) {
	exact := int64(0) // NackPrecisionBit 0: the client's nack timer is not rounded
	for _, tc := range []struct {
		name  string
		opts  pulsar.ConsumerOptions
		delay func(count uint32) time.Duration
	}{
		{"NackRedeliveryDelay", pulsar.ConsumerOptions{NackRedeliveryDelay: 100 * time.Millisecond, NackPrecisionBit: &exact},
			func(uint32) time.Duration { return 100 * time.Millisecond }},
		{"NackBackoffPolicy", pulsar.ConsumerOptions{NackBackoffPolicy: backoff{150 * time.Millisecond}, NackPrecisionBit: &exact},
			backoff{150 * time.Millisecond}.Next},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := begin(t, "nack/"+tc.name)
			b := StartBroker(t, "broker")
			topic := uniqueTopic("nack")
			cl := NewClient(t, b.ServiceURL)
			opts := tc.opts
			opts.Topic, opts.SubscriptionName, opts.Type, opts.ReceiverQueueSize = topic, "sub", pulsar.Shared, 10
			cons, err := cl.Subscribe(opts)
			if err != nil {
				t.Fatalf("subscribe: %v", err)
			}
			defer cons.Close()
			sendOne(t, cl, sc, topic, "nack-me")
			m, err := receiveWithin(cons, 3*time.Second)
			if err != nil || m == nil {
				t.Fatalf("the message was not delivered within 3 s (%v)", err)
			}
			firstID := idKey(m.ID())
			var latencies []string
			for want := uint32(0); ; want++ {
				if string(m.Payload()) != "nack-me" || m.RedeliveryCount() != want || idKey(m.ID()) != firstID {
					t.Fatalf("delivery %d: %q rc=%d id=%s, expected nack-me rc=%d id=%s",
						want+1, m.Payload(), m.RedeliveryCount(), idKey(m.ID()), want, firstID)
				}
				if want == 2 {
					if err := cons.Ack(m); err != nil {
						t.Fatalf("ack: %v", err)
					}
					break
				}
				t0 := time.Now()
				cons.Nack(m)
				m, err = receiveWithin(cons, 5*time.Second)
				if err != nil || m == nil {
					t.Fatalf("no redelivery within 5 s of nack #%d (%v)", want+1, err)
				}
				lat := time.Since(t0)
				if min := tc.delay(want); lat < min-20*time.Millisecond {
					t.Fatalf("redelivery %d after %v, before the client's delay %v", want+1, lat, min)
				}
				latencies = append(latencies, lat.Round(time.Millisecond).String())
			}
			if extra := drain(t, cons, 500*time.Millisecond, 2*time.Second); len(extra) > 0 {
				t.Fatalf("%d more deliveries after the ack (rc %d)", len(extra), extra[0].RedeliveryCount())
			}
			t.Logf("nack (%s): redelivery counts 0, 1, 2 on %s; nack to redelivery %v", tc.name, firstID, latencies)
		})
	}
}
