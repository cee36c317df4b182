package interop

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestProducerAccessModeExclusive: with an Exclusive producer connected, a second Exclusive
// producer (ProducerFenced) and a Shared one (ProducerBusy) are refused; after the first closes,
// a new Exclusive one is accepted.
func TestProducerAccessModeExclusive(t *testing.T) {
	sc := begin(t, "producer_access_mode_exclusive")
	b := StartBroker(t, "broker")
	err := func(t *testing.T) error {
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
	}(t)
	if err != nil {
		t.Fatal(err)
	}
}
