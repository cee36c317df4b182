package interop

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// Scenarios for features the broker does not serve yet. Each returns nil when the feature works
// and an error saying what failed otherwise; expectFailure turns an error into XFAIL(feature) and
// nil into a test failure that asks for the marker to be removed.

// TestFailover: two Failover consumers on one topic; all 10 messages go to one (the active
// one); when it closes, the other gets the next 10.
func TestFailover(t *testing.T) {
	sc := begin(t, "failover")
	b := StartBroker(t, "broker")
	expectFailure(t, sc, "Failover", func(t *testing.T) error {
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
	})
}

// TestProducerAccessModeExclusive: with an Exclusive producer connected, a second Exclusive
// producer and a Shared one are refused; after the first closes, a new Exclusive one is accepted.
func TestProducerAccessModeExclusive(t *testing.T) {
	sc := begin(t, "producer_access_mode_exclusive")
	b := StartBroker(t, "broker")
	expectFailure(t, sc, "access modes", func(t *testing.T) error {
		topic := uniqueTopic("access-mode")
		cl := NewClient(t, b.ServiceURL)
		create := func(mode pulsar.ProducerAccessMode) (pulsar.Producer, error) {
			return cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, ProducerAccessMode: mode})
		}
		p1, err := create(pulsar.ProducerAccessModeExclusive)
		if err != nil {
			return fmt.Errorf("first Exclusive producer: %w", err)
		}
		defer p1.Close()
		var accepted []string
		for _, m := range []struct {
			name string
			mode pulsar.ProducerAccessMode
		}{{"a second Exclusive", pulsar.ProducerAccessModeExclusive}, {"a Shared", pulsar.ProducerAccessModeShared}} {
			p, err := create(m.mode)
			if err == nil {
				p.Close()
				accepted = append(accepted, m.name)
			} else if !strings.Contains(err.Error(), "ProducerBusy") && !strings.Contains(err.Error(), "ProducerFenced") &&
				!errors.Is(err, pulsar.ErrProducerBlockedQuotaExceeded) {
				t.Logf("%s producer refused with %v", m.name, err)
			}
		}
		if len(accepted) > 0 {
			return fmt.Errorf("with an Exclusive producer connected, the broker accepted %s producer", strings.Join(accepted, " and "))
		}
		p1.Close()
		p3, err := create(pulsar.ProducerAccessModeExclusive)
		if err != nil {
			return fmt.Errorf("an Exclusive producer after the first closed: %w", err)
		}
		p3.Close()
		sc.Sent(0)
		return nil
	})
}
