package interop

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

type order struct {
	ID   int    `json:"id"`
	Item string `json:"item"`
}

const orderSchema = `{"type":"record","name":"Order","namespace":"interop","fields":[` +
	`{"name":"id","type":"int"},{"name":"item","type":"string"}]}`

// TestJSONSchema: a consumer and a producer with a JSON schema (the schema goes in SUBSCRIBE
// and PRODUCER; the producer asks GET_OR_CREATE_SCHEMA before its first send); three values
// round-trip and decode with GetSchemaValue.
func TestJSONSchema(t *testing.T) {
	sc := begin(t, "json_schema")
	b := StartBroker(t, "broker")
	topic := uniqueTopic("json-schema")
	cl := NewClient(t, b.ServiceURL)
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared,
		Schema: pulsar.NewJSONSchema(orderSchema, nil),
	})
	if err != nil {
		t.Fatalf("subscribe with a JSON schema: %v", err)
	}
	defer cons.Close()
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewJSONSchema(orderSchema, nil)})
	if err != nil {
		t.Fatalf("create a producer with a JSON schema: %v", err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sent := []order{{1, "apple"}, {2, "pear"}, {3, "plum"}}
	for _, o := range sent {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Value: o}); err != nil {
			t.Fatalf("send %+v with the JSON schema: %v", o, err)
		}
		sc.Sent(1)
	}
	var got []order
	for range sent {
		m, err := receiveWithin(cons, 5*time.Second)
		if err != nil || m == nil {
			t.Fatalf("received %d of %d values (%v)", len(got), len(sent), err)
		}
		var o order
		if err := m.GetSchemaValue(&o); err != nil {
			t.Fatalf("decode %q: %v", m.Payload(), err)
		}
		got = append(got, o)
		if err := cons.Ack(m); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	if !slices.Equal(got, sent) {
		t.Fatalf("received %+v, sent %+v", got, sent)
	}
	waitBacklog(t, b.AdminURL, topic, "sub", 0, 3*time.Second)
}
