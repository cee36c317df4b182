package interop

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

const readerN = 10

// produceNumbered sends m0..m<n-1> (batching off) and returns their ids and publish order.
func produceNumbered(t *testing.T, cl pulsar.Client, topic string, n int) []pulsar.MessageID {
	t.Helper()
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids := make([]pulsar.MessageID, n)
	for i := range n {
		if ids[i], err = p.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "m%d", i)}); err != nil {
			t.Fatalf("send m%d: %v", i, err)
		}
		time.Sleep(2 * time.Millisecond) // distinct publish times, for the seeks by time
	}
	return ids
}

// readFirstPass reads the topic's readerN messages with a reader from the earliest; it returns
// the reader (at the end) and the publish time of message #mark.
func readFirstPass(t *testing.T, cl pulsar.Client, topic string, mark int) (pulsar.Reader, time.Time) {
	t.Helper()
	r, err := cl.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatalf("create reader: %v", err)
	}
	var at time.Time
	for i := range readerN {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		m, err := r.Next(ctx)
		cancel()
		if err != nil {
			r.Close()
			t.Fatalf("first pass: message %d: %v", i, err)
		}
		if i == mark {
			at = m.PublishTime()
		}
	}
	return r, at
}

func names(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("m%d", i))
	}
	return out
}

// readWhileHasNext reads while HasNext says there is more (bounded).
func readWhileHasNext(t *testing.T, r pulsar.Reader) []string {
	t.Helper()
	var out []string
	for i := 0; i < 50 && r.HasNext(); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		m, err := r.Next(ctx)
		cancel()
		if err != nil {
			t.Fatalf("HasNext was true but Next failed after %q: %v", out, err)
		}
		out = append(out, string(m.Payload()))
	}
	return out
}

// readUntilQuiet reads with Next until nothing comes for quiet (bounded).
func readUntilQuiet(t *testing.T, r pulsar.Reader, quiet time.Duration) []string {
	t.Helper()
	var out []string
	for i := 0; i < 50; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), quiet)
		m, err := r.Next(ctx)
		cancel()
		if err != nil {
			break
		}
		out = append(out, string(m.Payload()))
	}
	return out
}

// TestReader: readers (non-durable subscriptions) from earliest, from message #4 exclusive and
// inclusive, from latest, and from latest inclusive (the Go client asks GET_LAST_MESSAGE_ID and
// seeks there: it reads the last message); each reads with `for HasNext() { Next() }`, which must
// give exactly the expected messages and then report no more. A reader from latest gets a
// message published after it was created (read with Next: the Go client's HasNext compares the
// broker's last id with the reader's start id, which for latest is the maximum id, so it is
// false until a first message was read, against any broker).
func TestReader(t *testing.T) {
	sc := begin(t, "reader")
	b := StartBroker(t, "broker")
	topic := uniqueTopic("reader")
	cl := NewClient(t, b.ServiceURL)
	ids := produceNumbered(t, cl, topic, readerN)
	sc.Sent(readerN)
	for _, tc := range []struct {
		name      string
		start     pulsar.MessageID
		inclusive bool
		want      []string
	}{
		{"earliest", pulsar.EarliestMessageID(), false, names(0, readerN)},
		{"from_4_exclusive", ids[4], false, names(5, readerN)},
		{"from_4_inclusive", ids[4], true, names(4, readerN)},
		{"latest", pulsar.LatestMessageID(), false, nil},
		{"latest_inclusive", pulsar.LatestMessageID(), true, names(readerN-1, readerN)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := cl.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: tc.start, StartMessageIDInclusive: tc.inclusive})
			if err != nil {
				t.Fatalf("create reader: %v", err)
			}
			defer r.Close()
			if got := readWhileHasNext(t, r); !slices.Equal(got, tc.want) {
				t.Fatalf("read %q while HasNext, expected %q", got, tc.want)
			}
			if r.HasNext() {
				t.Fatalf("HasNext is still true after every message was read")
			}
			if got := readUntilQuiet(t, r, 300*time.Millisecond); len(got) > 0 {
				t.Fatalf("Next gave %q after HasNext said there was nothing", got)
			}
		})
	}
	t.Run("latest_then_publish", func(t *testing.T) {
		r, err := cl.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.LatestMessageID()})
		if err != nil {
			t.Fatalf("create reader: %v", err)
		}
		defer r.Close()
		p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatalf("create producer: %v", err)
		}
		defer p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("late")}); err != nil {
			t.Fatalf("send: %v", err)
		}
		sc.Sent(1)
		if got := readUntilQuiet(t, r, 700*time.Millisecond); !slices.Equal(got, []string{"late"}) {
			t.Fatalf("reader from latest read %q, expected [late]", got)
		}
		if r.HasNext() {
			t.Fatalf("HasNext is true after the only new message was read")
		}
	})
}

// TestReaderSeek: a reader reads all 10 messages, then Seek(id of #6) makes it read #7..#9 (the
// start is exclusive, as the reader's) and HasNext then says there is nothing more; Seek(id of
// #1) goes back to #2..#9. (The Go client refuses Seek(EarliestMessageID()) on a reader itself:
// "seek msgId must include partitionIndex".)
func TestReaderSeek(t *testing.T) {
	sc := begin(t, "reader_seek")
	b := StartBroker(t, "broker")
	topic := uniqueTopic("reader-seek")
	cl := NewClient(t, b.ServiceURL)
	ids := produceNumbered(t, cl, topic, readerN)
	sc.Sent(readerN)
	r, err := cl.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatalf("create reader: %v", err)
	}
	defer r.Close()
	if got := readUntilQuiet(t, r, 700*time.Millisecond); !slices.Equal(got, names(0, readerN)) {
		t.Fatalf("first pass %q", got)
	}
	if err := r.Seek(ids[6]); err != nil {
		t.Fatalf("Seek(#6): %v", err)
	}
	if got := readWhileHasNext(t, r); !slices.Equal(got, names(7, readerN)) {
		t.Fatalf("after Seek(#6) read %q while HasNext, expected %q", got, names(7, readerN))
	}
	if got := readUntilQuiet(t, r, 300*time.Millisecond); len(got) > 0 {
		t.Fatalf("Next gave %q after HasNext said there was nothing", got)
	}
	if err := r.Seek(ids[1]); err != nil {
		t.Fatalf("Seek(#1): %v", err)
	}
	if got := readUntilQuiet(t, r, 700*time.Millisecond); !slices.Equal(got, names(2, readerN)) {
		t.Fatalf("after Seek(#1) read %q, expected %q", got, names(2, readerN))
	}
}

// TestReaderSeekByTime: a reader reads all 10 messages, then SeekByTime(publish time of #5) makes
// it read #5..#9 with Next.
func TestReaderSeekByTime(t *testing.T) {
	sc := begin(t, "reader_seek_by_time")
	b := StartBroker(t, "broker")
	topic := uniqueTopic("reader-seek-time")
	cl := NewClient(t, b.ServiceURL)
	produceNumbered(t, cl, topic, readerN)
	sc.Sent(readerN)
	r, at := readFirstPass(t, cl, topic, 5)
	defer r.Close()
	if err := r.SeekByTime(at); err != nil {
		t.Fatalf("SeekByTime: %v", err)
	}
	if got := readUntilQuiet(t, r, time.Second); !slices.Equal(got, names(5, readerN)) {
		t.Fatalf("after SeekByTime(publish time of #5) read %q, expected %q", got, names(5, readerN))
	}
}

// TestConsumerSeek: a Shared consumer receives and acks 10 messages; SeekByTime(publish time of
// #3) brings #3..#9 back; Seek(id of #0) brings #1..#9 (exclusive start:
// ConsumerOptions.StartMessageIDInclusive is false); Seek(id of #6) brings #7..#9. No message
// arrives twice per pass; the subscription ends with no backlog.
//
// Two Go client behaviours shape the order: it refuses Seek(EarliestMessageID()) on a consumer
// itself ("invalid partition index -1"), and a SeekByTime after a Seek(id) on the same consumer
// drops the messages up to that earlier id (the client re-subscribes with the start id the
// Seek(id) left and discards what is not after it), so the seek by time comes first.
func TestConsumerSeek(t *testing.T) {
	sc := begin(t, "consumer_seek")
	b := StartBroker(t, "broker")
	topic := uniqueTopic("seek")
	cl := NewClient(t, b.ServiceURL)
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer cons.Close()
	ids := produceNumbered(t, cl, topic, readerN)
	sc.Sent(readerN)
	pass := func(what string, want []string) []pulsar.Message {
		t.Helper()
		got := receiveN(t, cons, len(want), 10*time.Second, 500*time.Millisecond)
		if p := payloads(got); !slices.Equal(p, want) {
			t.Fatalf("%s: received %q, expected %q", what, p, want)
		}
		for _, m := range got {
			if err := cons.Ack(m); err != nil {
				t.Fatalf("ack: %v", err)
			}
		}
		return got
	}
	first := pass("first pass", names(0, readerN))
	if err := cons.SeekByTime(first[3].PublishTime()); err != nil {
		t.Fatalf("SeekByTime: %v", err)
	}
	pass("after SeekByTime(publish time of #3)", names(3, readerN))
	if err := cons.Seek(ids[0]); err != nil {
		t.Fatalf("Seek(#0): %v", err)
	}
	pass("after Seek(#0)", names(1, readerN))
	if err := cons.Seek(ids[6]); err != nil {
		t.Fatalf("Seek(#6): %v", err)
	}
	pass("after Seek(#6)", names(7, readerN))
	waitBacklog(t, b.AdminURL, topic, "sub", 0, 3*time.Second)
}

// TestReaderHasNextAfterSeekByTime: a reader reads all 10 messages, SeekByTime(publish time of
// #5), then `for HasNext() { Next() }` must give #5..#9. The Go client answers HasNext after a
// seek by time from GET_LAST_MESSAGE_ID_RESPONSE's consumer_mark_delete_position, and
// dereferences it in one of its own goroutines (a broker that leaves it out crashes the whole
// process), so this scenario runs in a child process.
func TestReaderHasNextAfterSeekByTime(t *testing.T) {
	const name = "reader_has_next_after_seek_by_time"
	if !isolated(t, name) {
		return
	}
	sc := begin(t, name)
	b := StartBroker(t, "broker")
	topic := uniqueTopic("reader-hasnext-time")
	cl := NewClient(t, b.ServiceURL)
	produceNumbered(t, cl, topic, readerN)
	sc.Sent(readerN)
	r, at := readFirstPass(t, cl, topic, 5)
	defer r.Close()
	if err := r.SeekByTime(at); err != nil {
		t.Fatalf("SeekByTime: %v", err)
	}
	if got := readWhileHasNext(t, r); !slices.Equal(got, names(5, readerN)) {
		t.Fatalf("after SeekByTime(publish time of #5) read %q while HasNext, expected %q", got, names(5, readerN))
	}
}
