package interop

import (
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestTransactionsRefused: the broker does not serve transactions (every transaction command is
// answered with an ERROR that carries its request id). A client with EnableTransaction fails,
// either in NewClient or at its first NewTransaction, within 4 s with an error (measured), not
// after its 30 s operation timeout. Two brokers: by default the Go client's NewClient asks
// PARTITIONED_METADATA of persistent://pulsar/system/transaction_coordinator_assign, is told 0
// partitions and gives up on its own (TransactionCoordinatorNotEnabled) without asking the
// broker more; with partitioned auto-creation the topic gets partitions, the client sends
// TC_CLIENT_CONNECT_REQUEST, and the broker's ERROR must fail it at once.
func TestTransactionsRefused(t *testing.T) {
	sc := begin(t, "transactions_refused")
	for _, c := range []struct {
		name  string
		flags []string
	}{
		{"broker", nil},
		{"broker-partitioned", []string{"--allow-auto-topic-creation-type", "partitioned", "--default-num-partitions", "2"}},
	} {
		transactionRefused(t, StartBroker(t, c.name, c.flags...))
	}
	sc.Sent(0)
}

// transactionRefused checks one broker: a client with EnableTransaction fails within 4 s.
func transactionRefused(t *testing.T, b *Broker) {
	const limit = 4 * time.Second
	type outcome struct {
		where string
		err   error
	}
	done := make(chan outcome, 1)
	logger := clientLogger(t)
	t0 := time.Now()
	go func() {
		cl, err := pulsar.NewClient(pulsar.ClientOptions{
			URL:               b.ServiceURL,
			OperationTimeout:  30 * time.Second, // the client's default: a refusal must come well before it
			ConnectionTimeout: connectionTimeout,
			Logger:            logger,
			EnableTransaction: true,
		})
		if err != nil {
			done <- outcome{"pulsar.NewClient", err}
			return
		}
		defer cl.Close()
		_, err = cl.NewTransaction(10 * time.Second)
		done <- outcome{"NewTransaction", err}
	}()
	var o outcome
	select {
	case o = <-done:
	case <-time.After(40 * time.Second):
		t.Fatalf("a client with EnableTransaction neither failed nor got a transaction within 40 s; see %s",
			testLogDir(t))
	}
	took := time.Since(t0)
	if o.err == nil {
		t.Fatalf("a transaction was begun after %.2f s: the broker does not serve transactions", took.Seconds())
	}
	t.Logf("a transaction: %s failed in %.2f s: %v", o.where, took.Seconds(), o.err)
	if took > limit {
		t.Errorf("the refusal took %.2f s (the client's timeout?), expected under %v: %v", took.Seconds(), limit, o.err)
	}
}
