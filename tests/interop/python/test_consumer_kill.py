"""A consumer killed with SIGKILL: what it held goes to another consumer.

Two variants, Shared and Key_Shared, each on its own topic with 60 messages (6 keys x 10). A
consumer in a child process receives 20 messages, acks the first 5 (and waits for the client's
100 ms ack grouping to send them), holds the other 15 unacked, and is killed with SIGKILL. A
consumer in this process on the same subscription must then receive exactly the 55 unacked
messages, including the 15 the dead consumer held, and ack them all (for Key_Shared in per-key
order); afterwards the subscription is empty.
"""

import os
import selectors
import signal
import subprocess
import sys
import time

import pulsar

import harness as h

KEYS = 6
PER_KEY = 10
N = KEYS * PER_KEY
CHILD_RECEIVES = 20
CHILD_ACKS = 5

TYPES = {"shared": pulsar.ConsumerType.Shared, "key_shared": pulsar.ConsumerType.KeyShared}


def child(url, topic, kind):
    cl = h.client(url)
    cons = cl.subscribe(topic, "sub", consumer_type=TYPES[kind], consumer_name="doomed",
                        receiver_queue_size=100, initial_position=pulsar.InitialPosition.Earliest)
    print("SUBSCRIBED", flush=True)
    d = h.Deadline(20)
    n = 0
    while n < CHILD_RECEIVES and not d.expired():
        m = h.receive_or_none(cons, 500)
        if m is None:
            continue
        n += 1
        if n <= CHILD_ACKS:
            cons.acknowledge(m)
            print("ACKED", m.data().decode(), flush=True)
        else:
            print("HELD", m.data().decode(), flush=True)
    time.sleep(0.5)  # let the grouped acks go out
    print("HOLDING", flush=True)
    time.sleep(60)  # killed long before this


class ChildLines:
    """Reads a child's stdout lines without blocking past a deadline."""

    def __init__(self, proc):
        self.proc = proc
        self.buf = b""
        self.lines = []

    def until(self, marker, deadline_s):
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        d = h.Deadline(deadline_s)
        try:
            while marker not in self.lines and not d.expired():
                if not sel.select(timeout=d.left()):
                    break
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    break
                self.buf += chunk
                while b"\n" in self.buf:
                    line, self.buf = self.buf.split(b"\n", 1)
                    self.lines.append(line.decode().strip())
        finally:
            sel.close()
        h.check(marker in self.lines,
                f"child consumer did not print {marker} within {deadline_s} s: {self.lines[-3:]}")
        return self.lines


def variant(b, kind):
    topic = h.unique_topic(f"kill-{kind}")
    cl = h.client(b.service_url)
    producer = cl.create_producer(topic, batching_enabled=False)
    proc = subprocess.Popen(
        [sys.executable, "-u", os.path.abspath(__file__), "--child", b.service_url, topic, kind],
        stdout=subprocess.PIPE,
        stderr=open(os.path.join(h.log_dir(), f"child-{kind}.stderr.log"), "wb"),
    )
    try:
        out = ChildLines(proc)
        out.until("SUBSCRIBED", 15)
        for i in range(N):
            k, s = i % KEYS, i // KEYS
            producer.send_async(f"k{k}#{s}".encode(), None, partition_key=f"k{k}")
        producer.flush()
        lines = out.until("HOLDING", 20)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(5)
    acked = {l.split()[1] for l in lines if l.startswith("ACKED")}
    held = {l.split()[1] for l in lines if l.startswith("HELD")}
    h.check(len(acked) == CHILD_ACKS and len(held) == CHILD_RECEIVES - CHILD_ACKS,
            f"child acked {len(acked)}, held {len(held)}")

    cons = cl.subscribe(topic, "sub", consumer_type=TYPES[kind], consumer_name="survivor",
                        receiver_queue_size=100)
    want = N - CHILD_ACKS
    got = []
    rc_held = []
    d = h.Deadline(15)
    while len(got) < want and not d.expired():
        m = h.receive_or_none(cons, d.left_ms(1000))
        if m is None:
            continue
        p = m.data().decode()
        got.append(p)
        if p in held:
            rc_held.append(m.redelivery_count())
        cons.acknowledge(m)
    extra = h.drain(cons, quiet_ms=600, deadline_s=3)
    got += [m.data().decode() for m in extra]
    h.check(not (set(got) & acked), f"re-received messages the dead consumer acked: {sorted(set(got) & acked)}")
    h.check(held <= set(got), f"held messages never redelivered: {sorted(held - set(got))}")
    h.check(len(got) == want and len(set(got)) == want,
            f"survivor got {len(got)} ({len(set(got))} distinct), expected {want}")
    if kind == "key_shared":
        last = {}
        for p in got:
            k, s = p.split("#")
            h.check(int(s) > last.get(k, -1), f"survivor got {p} after {k}#{last.get(k)}")
            last[k] = int(s)
    cons.close()
    late = cl.subscribe(topic, "sub", consumer_type=TYPES[kind])
    left = h.drain(late, quiet_ms=600, deadline_s=3)
    if left:
        raise h.ScenarioFailure(f"{kind}: {len(left)} messages left after every ack")
    late.close()
    producer.close()
    cl.close()
    return f"{kind}: child got {CHILD_RECEIVES} (acked {CHILD_ACKS}) then SIGKILL, survivor got {len(got)} " \
           f"incl. the {len(held)} held (redelivery counts {sorted(set(rc_held))})"


def main():
    with h.Broker("broker") as b:
        results = [variant(b, kind) for kind in TYPES]
        h.check(b.alive(), "the broker died")
    return "consumer kill: " + "; ".join(results) + f"; {N} sent per topic, 0 lost"


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(*sys.argv[2:])
    else:
        h.run(main)
