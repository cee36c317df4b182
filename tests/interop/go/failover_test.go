package interop

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestFailover: two Failover consumers on one topic; all 10 messages go to one (the active
// one); when it closes, the other gets the next 10.
func TestFailover(t *testing.T) {
	sc := begin(t, "failover")
	b := StartBroker(t, "broker")
	err := func(t *testing.T) error {
		topic := uniqueTopic("failover")
		cl := NewClient(t, b.ServiceURL)
		var cons []pulsar.Consumer
		for _, name := range []string{"fa", "fb"} {
			c, err := cl.Subscribe(pulsar.ConsumerOptions{
				Topic: topic, SubscriptionName: "sub", Type: pulsar.Failover, Name: name,
			})
			if err != nil {
				return fmt.Errorf("Failover subscribe %s: %w", name, err)
			}
			defer c.Close()
			cons = append(cons, c)
		}
		p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			return err
		}
		defer p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		send := func(from int) error {
			for i := from; i < from+10; i++ {
				if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "m%d", i)}); err != nil {
					return err
				}
				sc.Sent(1)
			}
			return nil
		}
		if err := send(0); err != nil {
			return err
		}
		per := make([][]pulsar.Message, 2)
		for i, c := range cons {
			per[i] = drain(t, c, 700*time.Millisecond, 3*time.Second)
			for _, m := range per[i] {
				_ = c.Ack(m)
			}
		}
		active := slices.IndexFunc(per, func(ms []pulsar.Message) bool { return len(ms) == 10 })
		if active < 0 || len(per[1-active]) != 0 {
			return fmt.Errorf("Failover: the consumers got %d and %d of 10, expected all on one", len(per[0]), len(per[1]))
		}
		cons[active].Close()
		if err := send(10); err != nil {
			return err
		}
		if got := payloads(receiveN(t, cons[1-active], 10, 8*time.Second, 300*time.Millisecond)); !slices.Equal(got, names(10, 20)) {
			return fmt.Errorf("after the active consumer closed the other got %q, expected m10..m19", got)
		}
		return nil
	}(t)
	if err != nil {
		t.Fatal(err)
	}
}
