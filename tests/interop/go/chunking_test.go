package interop

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

const maxMessageSize = "10240" // the broker's --max-message-size in the chunking scenarios

// body is n deterministic bytes (a SHA-256 chain over salt).
func body(n int, salt string) []byte {
	var out []byte
	for i := 0; len(out) < n; i++ {
		h := sha256.Sum256(fmt.Appendf(nil, "%s-%d", salt, i))
		out = append(out, h[:]...)
	}
	return out[:n]
}

func chunkingProducer(t *testing.T, cl pulsar.Client, topic string) pulsar.Producer {
	t.Helper()
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, EnableChunking: true, DisableBatching: true})
	if err != nil {
		t.Fatalf("create chunking producer: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// TestChunking: broker --max-message-size 10240; a producer with EnableChunking and
// DisableBatching sends 25,600 B (3 chunks) and 12,000 B (2 chunks). Both arrive intact; the
// second is nacked and comes back intact with redelivery count 1; afterwards the subscription is
// empty.
func TestChunking(t *testing.T) {
	sizes := []int{25600, 12000}
	sc := begin(t, "chunking")
	b := StartBroker(t, "broker", "--max-message-size", maxMessageSize)
	topic := uniqueTopic("chunked")
	cl := NewClient(t, b.ServiceURL)
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared, NackRedeliveryDelay: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer cons.Close()
	producer := chunkingProducer(t, cl, topic)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var bodies [][]byte
	var ids []string
	for i, n := range sizes {
		bodies = append(bodies, body(n, fmt.Sprint(i)))
		id, err := producer.Send(ctx, &pulsar.ProducerMessage{Key: "kc", Payload: bodies[i]})
		if err != nil {
			t.Fatalf("send %d B: %v", n, err)
		}
		ids = append(ids, id.String())
	}
	sc.Sent(len(sizes))
	st := adminJSON(t, "GET", topicPath(b.AdminURL, topic)+"/internalStats")
	if got := jsonNumber(st["entriesAddedCounter"]); got != 5 {
		t.Fatalf("expected 5 chunk entries (3 + 2), internalStats says %v", got)
	}

	got := receiveN(t, cons, 2, 10*time.Second, 300*time.Millisecond)
	if len(got) != 2 {
		t.Fatalf("received %d messages, expected 2", len(got))
	}
	for i, m := range got {
		if !bytes.Equal(m.Payload(), bodies[i]) {
			t.Fatalf("message %d: %d bytes, not the %d B sent", i, len(m.Payload()), sizes[i])
		}
	}
	if err := cons.Ack(got[0]); err != nil {
		t.Fatalf("ack: %v", err)
	}
	cons.Nack(got[1])
	again, err := receiveWithin(cons, 5*time.Second)
	if err != nil || again == nil {
		t.Fatalf("the nacked chunked message was not re-received within 5 s (%v)", err)
	}
	if !bytes.Equal(again.Payload(), bodies[1]) || again.RedeliveryCount() != 1 {
		t.Fatalf("re-received %d B with redelivery count %d, expected the 12,000 B with count 1",
			len(again.Payload()), again.RedeliveryCount())
	}
	if err := cons.Ack(again); err != nil {
		t.Fatalf("ack: %v", err)
	}
	if extra := drain(t, cons, 600*time.Millisecond, 3*time.Second); len(extra) > 0 {
		t.Fatalf("%d extra deliveries after the acks", len(extra))
	}
	waitBacklog(t, b.AdminURL, topic, "sub", 0, 3*time.Second)
	t.Logf("chunking: %v B sent as %v, received intact, the 2nd nacked and re-received intact (rc 1)", sizes, ids)
}

// TestChunkingSharedInterleaved: in rounds, three producers (one connection each) hand 8 chunked
// messages (3-5 chunks) each to the client at once, so chunks of different messages interleave
// in the topic (rounds repeat, at most 30, until some did: on a loaded machine each producer's
// chunks can reach the broker in one piece for several rounds in a row). Three Shared consumers
// (receiver queue 5) nack every 4th first delivery. Every message arrives intact (all its chunks
// reached one consumer); nacked ones come back with a redelivery count >= 1; the subscription
// ends empty.
func TestChunkingSharedInterleaved(t *testing.T) {
	const producers, perProducer, maxRounds = 3, 8, 30
	sc := begin(t, "chunking_shared_interleaved")
	b := StartBroker(t, "broker", "--max-message-size", maxMessageSize)
	topic := uniqueTopic("chunked-shared")
	var (
		mu        sync.Mutex
		want      = map[string][]byte{}
		firstSeen = map[string]bool{}
		nacked    = map[string]bool{}
		done      = map[string]bool{}
		redeliv   = map[string]uint32{}
		deliv     int
		total     = -1       // set when producing is over
		spans     [][2]int64 // first and last chunk entry of each message
		errs      errList
		wg        sync.WaitGroup
	)
	for c := range 3 {
		cons, err := NewClient(t, b.ServiceURL).Subscribe(pulsar.ConsumerOptions{
			Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared, Name: fmt.Sprintf("c%d", c),
			ReceiverQueueSize: 5, NackRedeliveryDelay: 100 * time.Millisecond,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		})
		if err != nil {
			t.Fatalf("subscribe c%d: %v", c, err)
		}
		t.Cleanup(cons.Close)
		wg.Add(1)
		go func() {
			defer wg.Done()
			end := time.Now().Add(30 * time.Second)
			for time.Now().Before(end) {
				mu.Lock()
				finished := len(done) == total
				mu.Unlock()
				if finished {
					return
				}
				m, err := receiveWithin(cons, 200*time.Millisecond)
				if err != nil {
					errs.add(err)
					return
				}
				if m == nil {
					continue
				}
				name, _, _ := bytes.Cut(m.Payload(), []byte("|"))
				key := string(name)
				mu.Lock()
				deliv++
				if !bytes.Equal(m.Payload(), want[key]) {
					errs.add(fmt.Errorf("c%d: %q arrived with %d B, not as sent", c, key, len(m.Payload())))
				}
				if firstSeen[key] && m.RedeliveryCount() == 0 && !done[key] && !nacked[key] {
					errs.add(fmt.Errorf("c%d: %q again with redelivery count 0", c, key))
				}
				nack := !firstSeen[key] && deliv%4 == 0
				firstSeen[key] = true
				if nack {
					nacked[key] = true
				} else {
					done[key] = true
					redeliv[key] = m.RedeliveryCount()
				}
				mu.Unlock()
				if nack {
					cons.Nack(m)
				} else if err := cons.Ack(m); err != nil {
					errs.add(err)
					return
				}
			}
		}()
	}
	prods := make([]pulsar.Producer, producers)
	for p := range prods {
		prods[p] = chunkingProducer(t, NewClient(t, b.ServiceURL), topic)
	}
	interleavedSpans := func() int {
		mu.Lock()
		defer mu.Unlock()
		k := 0
		for _, a := range spans {
			for _, b := range spans {
				if a[0] < b[0] && b[0] < a[1] {
					k++
					break
				}
			}
		}
		return k
	}
	sent, rounds := 0, 0
	for rounds < maxRounds && interleavedSpans() == 0 {
		rounds++
		var pw sync.WaitGroup
		start := make(chan struct{})
		for p, producer := range prods {
			names := make([]string, perProducer)
			mu.Lock()
			for i := range names {
				names[i] = fmt.Sprintf("r%d-p%d-%d", rounds, p, i)
				want[names[i]] = append([]byte(names[i]+"|"), body(30000+2000*i, names[i])...)
			}
			mu.Unlock()
			pw.Add(1)
			go func() {
				defer pw.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				<-start
				for _, name := range names {
					producer.SendAsync(ctx, &pulsar.ProducerMessage{Payload: want[name]},
						func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
							if err != nil {
								errs.add(fmt.Errorf("producer %d: %w", p, err))
								return
							}
							var l1, e1, l2, e2, part int64
							if _, err := fmt.Sscanf(id.String(), "%d:%d:%d;%d:%d:%d", &l1, &e1, &part, &l2, &e2, &part); err != nil {
								errs.add(fmt.Errorf("chunked message id %q: %w", id, err))
								return
							}
							mu.Lock()
							spans = append(spans, [2]int64{e1, e2})
							mu.Unlock()
						})
				}
				if err := producer.FlushWithCtx(ctx); err != nil {
					errs.add(fmt.Errorf("producer %d flush: %w", p, err))
				}
			}()
		}
		close(start)
		pw.Wait()
		sent += producers * perProducer
		if err := errs.err(); err != nil {
			break
		}
	}
	sc.Sent(sent)
	mu.Lock()
	total = sent
	mu.Unlock()
	wg.Wait()
	if err := errs.err(); err != nil {
		t.Fatal(err)
	}
	interleaved := interleavedSpans()
	if interleaved == 0 {
		t.Fatalf("in %d rounds no two chunked messages interleaved in the topic (chunk spans %v): the scenario tested nothing",
			rounds, spans)
	}
	if len(done) != sent {
		t.Fatalf("%d of %d messages processed", len(done), sent)
	}
	for k := range nacked {
		if redeliv[k] < 1 {
			t.Errorf("%s was nacked but came back with redelivery count %d", k, redeliv[k])
		}
	}
	waitBacklog(t, b.AdminURL, topic, "sub", 0, 5*time.Second)
	t.Logf("chunking interleaved: %d messages in %d round(s) intact over 3 consumers (%d interleaved with another), "+
		"%d nacked and redelivered, %d deliveries", sent, rounds, interleaved, len(nacked), deliv)
}
