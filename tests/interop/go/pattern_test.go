package interop

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestPatternSubscription: two topics exist (one message each) and a third that does not match;
// a consumer with TopicsPattern gets the messages of both matching topics. A matching topic
// created after the subscribe is found by the client's rediscovery (every second here) and its
// message arrives too.
func TestPatternSubscription(t *testing.T) {
	sc := begin(t, "pattern_subscription")
	b := StartBroker(t, "broker")
	stem := uniqueTopic("pattern")
	cl := NewClient(t, b.ServiceURL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	send := func(topic, payload string) {
		t.Helper()
		p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatalf("producer on %s: %v", topic, err)
		}
		defer p.Close()
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(payload)}); err != nil {
			t.Fatalf("send to %s: %v", topic, err)
		}
		sc.Sent(1)
	}
	send(stem+"-a", "a")
	send(stem+"-b", "b")
	send(stem+"other", "other")
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{
		TopicsPattern: stem + "-.*", SubscriptionName: "sub", Type: pulsar.Shared,
		AutoDiscoveryPeriod:         time.Second,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatalf("subscribe with TopicsPattern %q: %v", stem+"-.*", err)
	}
	defer cons.Close()
	got := payloads(receiveN(t, cons, 2, 8*time.Second, 300*time.Millisecond))
	send(stem+"-c", "c")
	got = append(got, payloads(receiveN(t, cons, 1, 10*time.Second, 300*time.Millisecond))...)
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("the pattern consumer received %q, expected [a b c] (c from a topic created after the subscribe)", got)
	}
}
