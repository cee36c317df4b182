package interop

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// ---- the applications' merged processing log --------------------------------------------------

// event is one processing of a message by an application.
type event struct {
	Index      int
	Consumer   string
	Key        string
	Seq        int
	MsgID      string
	Redelivery uint32
}

// processingLog is what the applications processed, in one global order.
type processingLog struct {
	mu     sync.Mutex
	events []event
}

func (l *processingLog) record(consumer, key string, seq int, msgID string, redelivery uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, event{len(l.events), consumer, key, seq, msgID, redelivery})
}

func (l *processingLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}

func (l *processingLog) snapshot() []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]event(nil), l.events...)
}

// write saves the log as <test log dir>/<name>.log (tab-separated).
func (l *processingLog) write(t testing.TB, name string) {
	f, err := os.Create(filepath.Join(testLogDir(t), name+".log"))
	if err != nil {
		t.Logf("processing log: %v", err)
		return
	}
	defer f.Close()
	for _, e := range l.snapshot() {
		fmt.Fprintf(f, "%d\t%s\t%s\t%d\t%s\trc=%d\n", e.Index, e.Consumer, e.Key, e.Seq, e.MsgID, e.Redelivery)
	}
}

// checkKeyOrder checks a merged processing log for per-key order: the first processing of seq s
// of key K comes after the first processing of every earlier seq of K (none skipped); a seq is
// processed again only from a redelivered copy (redelivery count > 0) or when mayRepeat allows
// it. It returns the number of first-time and repeated processings.
func checkKeyOrder(events []event, expected map[string]int, mayRepeat func(key string, seq int) bool) (first, again int, err error) {
	done := make(map[string]int, len(expected))
	for k := range expected {
		done[k] = -1
	}
	for _, e := range events {
		last, ok := done[e.Key]
		switch {
		case !ok:
			return first, again, fmt.Errorf("event %d: unexpected key %q", e.Index, e.Key)
		case e.Seq == last+1:
			done[e.Key] = e.Seq
			first++
		case e.Seq <= last:
			if e.Redelivery == 0 && (mayRepeat == nil || !mayRepeat(e.Key, e.Seq)) {
				return first, again, fmt.Errorf("event %d: %s re-processed %s#%d (%s) with redelivery count 0 (key at #%d)",
					e.Index, e.Consumer, e.Key, e.Seq, e.MsgID, last)
			}
			again++
		default:
			return first, again, fmt.Errorf("event %d: %s processed %s#%d (%s) before %s#%d (per-key order broken)",
				e.Index, e.Consumer, e.Key, e.Seq, e.MsgID, e.Key, last+1)
		}
	}
	for k, n := range expected {
		if done[k] != n-1 {
			return first, again, fmt.Errorf("key %s: processed up to #%d of %d", k, done[k], n)
		}
	}
	return first, again, nil
}

// ---- Pulsar's sticky key hash -------------------------------------------------------------------

// murmur3x86_32 is MurmurHash3 x86_32, as Pulsar's Murmur3_32Hash before its & Integer.MAX_VALUE.
func murmur3x86_32(data []byte, seed uint32) uint32 {
	const c1, c2 = 0xcc9e2d51, 0x1b873593
	h := seed
	n := len(data)
	for i := 0; i+4 <= n; i += 4 {
		k := binary.LittleEndian.Uint32(data[i:])
		k *= c1
		k = k<<15 | k>>17
		k *= c2
		h ^= k
		h = h<<13 | h>>19
		h = h*5 + 0xe6546b64
	}
	tail := data[n&^3:]
	var k uint32
	switch len(tail) {
	case 3:
		k ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		k ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		k ^= uint32(tail[0])
		k *= c1
		k = k<<15 | k>>17
		k *= c2
		h ^= k
	}
	h ^= uint32(n)
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// stickyHash is Pulsar's Key_Shared sticky slot of a key: (murmur3 & Integer.MAX_VALUE) % 65536.
func stickyHash(key string) int {
	return int(murmur3x86_32([]byte(key), 0)&0x7fffffff) % 65536
}

// TestStickyHashVectors checks the hash against the vectors of the dispatcher crate's hash.rs
// tests (the same ones harness.py checks). Not a broker scenario.
func TestStickyHashVectors(t *testing.T) {
	raw := []struct {
		in   string
		seed uint32
		want uint32
	}{
		{"hello", 0, 0x248bfa47},
		{"The quick brown fox jumps over the lazy dog", 0, 0x2e4ff723},
		{"", 0, 0},
		{"", 1, 0x514e28b7},
		{"", 0xffffffff, 0x81f16f39},
	}
	for _, c := range raw {
		if got := murmur3x86_32([]byte(c.in), c.seed); got != c.want {
			t.Errorf("murmur3(%q, %#x) = %#x, want %#x", c.in, c.seed, got, c.want)
		}
	}
	keys := []struct {
		key  string
		h31  uint32
		slot int
	}{
		{"NONE_KEY", 504741539, 48803},
		{"key-0", 1664612543, 63679},
		{"order-42", 1259446670, 41358},
		{"ключ", 442048578, 8258},
	}
	for _, c := range keys {
		if got := murmur3x86_32([]byte(c.key), 0) & 0x7fffffff; got != c.h31 {
			t.Errorf("murmur3(%q) & MAX = %d, want %d", c.key, got, c.h31)
		}
		if got := stickyHash(c.key); got != c.slot {
			t.Errorf("stickyHash(%q) = %d, want %d", c.key, got, c.slot)
		}
	}
}
