package interop

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestDeadLetter: the client's DLQ policy (MaxDeliveries 3, DeadLetterTopic). A consumer on the
// dead-letter topic subscribes first (the client's dead-letter producer asks for an initial
// subscription, which this broker does not create, so a dead letter published before anyone
// subscribed would be gone). Of three messages the application acks two and nacks "poison"
// every time: it sees poison with redelivery counts 0, 1 and 2, then the client moves it to the
// dead-letter topic, with the origin's properties; the subscription ends with no backlog.
func TestDeadLetter(t *testing.T) {
	sc := begin(t, "dead_letter")
	b := StartBroker(t, "broker")
	topic := uniqueTopic("dlq")
	dlqTopic := topic + "-sub-DLQ"
	cl := NewClient(t, b.ServiceURL)

	dlq, err := cl.Subscribe(pulsar.ConsumerOptions{
		Topic: dlqTopic, SubscriptionName: "dlq-reader", Type: pulsar.Shared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatalf("subscribe to the dead-letter topic: %v", err)
	}
	defer dlq.Close()
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{
		Topic:               topic,
		SubscriptionName:    "sub",
		Type:                pulsar.Shared,
		NackRedeliveryDelay: 100 * time.Millisecond,
		DLQ:                 &pulsar.DLQPolicy{MaxDeliveries: 3, DeadLetterTopic: dlqTopic},
	})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer cons.Close()
	producer, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	defer producer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var poisonID string
	for _, p := range []string{"ok-0", "poison", "ok-2"} {
		id, err := producer.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(p), Properties: map[string]string{"origin": p}})
		if err != nil {
			t.Fatalf("send %s: %v", p, err)
		}
		if p == "poison" {
			poisonID = id.String()
		}
	}
	sc.Sent(3)

	var poisonCounts []uint32
	acked := 0
	end := time.Now().Add(10 * time.Second)
	for time.Now().Before(end) && (acked < 2 || len(poisonCounts) < 3) {
		m, err := receiveWithin(cons, 500*time.Millisecond)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		if m == nil {
			continue
		}
		if string(m.Payload()) == "poison" {
			poisonCounts = append(poisonCounts, m.RedeliveryCount())
			cons.Nack(m)
			continue
		}
		acked++
		if err := cons.Ack(m); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	if acked != 2 || len(poisonCounts) != 3 || poisonCounts[0] != 0 || poisonCounts[1] != 1 || poisonCounts[2] != 2 {
		t.Fatalf("acked %d (want 2), poison deliveries with counts %v (want [0 1 2])", acked, poisonCounts)
	}
	dead, err := receiveWithin(dlq, 10*time.Second)
	if err != nil || dead == nil {
		t.Fatalf("nothing reached the dead-letter topic within 10 s (%v)", err)
	}
	if string(dead.Payload()) != "poison" || dead.Properties()["origin"] != "poison" {
		t.Fatalf("dead letter %q with properties %v", dead.Payload(), dead.Properties())
	}
	if err := dlq.Ack(dead); err != nil {
		t.Fatalf("ack dead letter: %v", err)
	}
	// The application does not see poison a fourth time.
	if extra := drain(t, cons, 700*time.Millisecond, 3*time.Second); len(extra) > 0 {
		t.Fatalf("after the dead letter the application got %q (rc %d)", payloads(extra), extra[0].RedeliveryCount())
	}
	waitBacklog(t, b.AdminURL, topic, "sub", 0, 3*time.Second)
	t.Logf("dead letter: poison %s delivered with counts %v, then in %s with properties %v",
		poisonID, poisonCounts, dlqTopic, dead.Properties())
}

// TestRetryLetter: RetryEnable with ReconsumeLater on Shared. The consumer also subscribes to the
// retry-letter topic; each ReconsumeLater(1 s) publishes the message there with DeliverAfter and
// an incremented RECONSUMETIMES, and acks the original. The application gets it back with
// RECONSUMETIMES 1, then 2, each not before its delay; the third ReconsumeLater exceeds
// MaxDeliveries (2) and the client publishes it to the dead-letter topic instead. All
// subscriptions end with no backlog.
func TestRetryLetter(t *testing.T) {
	const delay = time.Second
	sc := begin(t, "retry_letter")
	b := StartBroker(t, "broker")
	topic := uniqueTopic("retry")
	retryTopic, dlqTopic := topic+"-sub-RETRY", topic+"-sub-DLQ"
	cl := NewClient(t, b.ServiceURL)

	dlq, err := cl.Subscribe(pulsar.ConsumerOptions{
		Topic: dlqTopic, SubscriptionName: "dlq-reader", Type: pulsar.Shared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatalf("subscribe to the dead-letter topic: %v", err)
	}
	defer dlq.Close()
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{
		Topic:            topic,
		SubscriptionName: "sub",
		Type:             pulsar.Shared,
		RetryEnable:      true,
		DLQ:              &pulsar.DLQPolicy{MaxDeliveries: 2, DeadLetterTopic: dlqTopic, RetryLetterTopic: retryTopic},
	})
	if err != nil {
		t.Fatalf("subscribe with RetryEnable: %v", err)
	}
	defer cons.Close()
	sendOne(t, cl, sc, topic, "retry-me")

	var (
		topics []string
		times  []string
		waits  []string
	)
	var lastReconsume time.Time
	for want := 0; want <= 2; want++ {
		m, err := receiveWithin(cons, 8*time.Second)
		if err != nil || m == nil {
			t.Fatalf("delivery %d (RECONSUMETIMES %d) did not arrive within 8 s (%v)", want+1, want, err)
		}
		got := m.Properties()[pulsar.SysPropertyReconsumeTimes]
		if string(m.Payload()) != "retry-me" || (want == 0 && got != "") || (want > 0 && got != strconv.Itoa(want)) {
			t.Fatalf("delivery %d: %q from %s with RECONSUMETIMES %q, expected %d", want+1, m.Payload(), m.Topic(), got, want)
		}
		if want > 0 {
			waited := time.Since(lastReconsume)
			if waited < delay {
				t.Fatalf("retry %d arrived %v after ReconsumeLater(%v): early", want, waited, delay)
			}
			waits = append(waits, waited.Round(time.Millisecond).String())
		}
		topics = append(topics, m.Topic())
		times = append(times, got)
		lastReconsume = time.Now()
		cons.ReconsumeLater(m, delay)
	}
	dead, err := receiveWithin(dlq, 10*time.Second)
	if err != nil || dead == nil {
		t.Fatalf("nothing reached the dead-letter topic within 10 s (%v)", err)
	}
	if string(dead.Payload()) != "retry-me" || dead.Properties()[pulsar.SysPropertyReconsumeTimes] != "3" {
		t.Fatalf("dead letter %q with properties %v", dead.Payload(), dead.Properties())
	}
	if err := dlq.Ack(dead); err != nil {
		t.Fatalf("ack dead letter: %v", err)
	}
	if extra := drain(t, cons, 1500*time.Millisecond, 3*time.Second); len(extra) > 0 {
		t.Fatalf("after the dead letter the application got %q", payloads(extra))
	}
	waitBacklog(t, b.AdminURL, topic, "sub", 0, 3*time.Second)
	waitBacklog(t, b.AdminURL, retryTopic, "sub", 0, 3*time.Second)
	waitBacklog(t, b.AdminURL, dlqTopic, "dlq-reader", 0, 3*time.Second)
	t.Logf("retry letter: deliveries from %v with RECONSUMETIMES %q, retries after %v, dead letter with %v",
		topics, times, waits, dead.Properties())
}

// TestDeadLetterInitialSubscription: DLQPolicy.InitialSubscriptionName makes the client's
// dead-letter producer ask for that subscription with the producer (PRODUCER's
// initial_subscription_name), so the dead letter is kept for it although nobody subscribed
// before. After one nack (MaxDeliveries 1) the dead-letter topic must have the subscription, and
// a consumer of it (at the default position, latest) must get the dead letter. (An expected
// failure until the broker created initial subscriptions.)
func TestDeadLetterInitialSubscription(t *testing.T) {
	sc := begin(t, "dead_letter_initial_subscription")
	b := StartBroker(t, "broker")
	if err := func() error {
		topic := uniqueTopic("dlq-init")
		dlqTopic := topic + "-sub-DLQ"
		cl := NewClient(t, b.ServiceURL)
		cons, err := cl.Subscribe(pulsar.ConsumerOptions{
			Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared, NackRedeliveryDelay: 100 * time.Millisecond,
			DLQ: &pulsar.DLQPolicy{MaxDeliveries: 1, DeadLetterTopic: dlqTopic, InitialSubscriptionName: "init"},
		})
		if err != nil {
			return fmt.Errorf("subscribe: %w", err)
		}
		defer cons.Close()
		p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			return err
		}
		defer p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("poison")}); err != nil {
			return err
		}
		sc.Sent(1)
		m, err := receiveWithin(cons, 3*time.Second)
		if err != nil || m == nil {
			return fmt.Errorf("the message was not delivered (%v)", err)
		}
		cons.Nack(m)
		var in float64
		waitUntil(t, 10*time.Second, "the dead letter on "+dlqTopic, func() bool {
			status, body, err := adminDo(http.MethodGet, topicPath(b.AdminURL, dlqTopic)+"/stats", "")
			if err != nil || status != http.StatusOK {
				return false
			}
			var st map[string]any
			_ = json.Unmarshal([]byte(body), &st)
			in = jsonNumber(st["msgInCounter"])
			return in >= 1
		})
		status, body, err := adminDo(http.MethodGet, topicPath(b.AdminURL, dlqTopic)+"/subscriptions", "")
		if err != nil || status != http.StatusOK {
			return fmt.Errorf("GET …/subscriptions of the dead-letter topic: HTTP %d %.200s (%v)", status, body, err)
		}
		var subs []string
		if err := json.Unmarshal([]byte(body), &subs); err != nil {
			return fmt.Errorf("subscriptions %.200s: %w", body, err)
		}
		if !slices.Contains(subs, "init") {
			return fmt.Errorf("the dead-letter producer's initial subscription \"init\" was not created: "+
				"the dead-letter topic has subscriptions %q", subs)
		}
		dlq, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: dlqTopic, SubscriptionName: "init", Type: pulsar.Shared})
		if err != nil {
			return fmt.Errorf("subscribe to the initial subscription: %w", err)
		}
		defer dlq.Close()
		dead, err := receiveWithin(dlq, 3*time.Second)
		if err != nil || dead == nil || string(dead.Payload()) != "poison" {
			return fmt.Errorf("the initial subscription did not get the dead letter (%v)", err)
		}
		return dlq.Ack(dead)
	}(); err != nil {
		t.Fatal(err)
	}
}
