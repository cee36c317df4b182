"""Key_Shared, 3 consumers, one in a child process killed with SIGKILL mid-stream.

20 keys x 40 messages are published at a steady pace. Consumers a and b run in this process,
and the doomed one runs in a child. Each processes a message (logging key, seq and a monotonic
timestamp, which is comparable across processes on one machine) and then acks it. After the doomed
consumer has processed 150 messages it is killed; the producer keeps going. The merged log must
keep per-key order. Re-processing is allowed only for a redelivered copy or for a message the dead
consumer processed: its last acks may not have left the client (100 ms ack grouping), and the
broker gives such redeliveries count 0. Every message is processed, and the subscription ends
empty.
"""

import os
import selectors
import signal
import subprocess
import sys
import threading
import time

import pulsar

import harness as h

KEYS = 20
PER_KEY = 40
N = KEYS * PER_KEY
KILL_AFTER = 150


def subscribe(cl, topic, name):
    return cl.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared,
                        receiver_queue_size=10, consumer_name=name)


def child(url, topic):
    cl = h.client(url)
    c = subscribe(cl, topic, "doomed")
    print("SUBSCRIBED", flush=True)
    d = h.Deadline(40)
    while not d.expired():
        m = h.receive_or_none(c, 200)
        if m is None:
            continue
        time.sleep(0.002)
        k, s = m.data().decode().split("#")
        print(f"P {time.monotonic():.6f} {k} {s} {m.redelivery_count()} {m.message_id()}", flush=True)
        c.acknowledge(m)


def main():
    events = []  # (time, consumer, key, seq, msg id, redelivery count)
    lock = threading.Lock()
    with h.Broker("broker") as b:
        topic = h.unique_topic("ks-kill")
        proc = subprocess.Popen(
            [sys.executable, "-u", os.path.abspath(__file__), "--child", b.service_url, topic],
            stdout=subprocess.PIPE,
            stderr=open(os.path.join(h.log_dir(), "child.stderr.log"), "wb"),
        )
        try:
            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ)
            h.check(sel.select(timeout=15), "the child did not subscribe within 15 s")
            first = proc.stdout.readline().decode().strip()
            sel.close()
            h.check(first == "SUBSCRIBED", f"child said {first!r}")

            def read_child():
                for line in proc.stdout:  # ends when the child dies
                    p = line.decode().split()
                    if len(p) == 6 and p[0] == "P":
                        with lock:
                            events.append((float(p[1]), "doomed", p[2], int(p[3]), p[5], int(p[4])))

            threading.Thread(target=read_child, daemon=True).start()
            stop = threading.Event()
            errors = []

            def consume(name):
                cl = h.client(b.service_url)
                try:
                    c = subscribe(cl, topic, name)
                    d = h.Deadline(45)
                    while not stop.is_set() and not d.expired():
                        m = h.receive_or_none(c, 200)
                        if m is None:
                            continue
                        time.sleep(0.002)
                        k, s = m.data().decode().split("#")
                        with lock:
                            events.append((time.monotonic(), name, k, int(s), str(m.message_id()),
                                           m.redelivery_count()))
                        c.acknowledge(m)
                    c.close()
                except Exception as e:  # noqa: BLE001
                    errors.append(f"{name}: {e!r}")
                finally:
                    cl.close()

            ths = [threading.Thread(target=consume, args=(n,), daemon=True) for n in ("a", "b")]
            for t in ths:
                t.start()
            time.sleep(0.3)
            pc = h.client(b.service_url)
            producer = pc.create_producer(topic, batching_enabled=False)

            def produce():
                for i in range(N):
                    k = f"key-{i % KEYS}"
                    producer.send_async(f"{k}#{i // KEYS}".encode(), None, partition_key=k)
                    if i % 20 == 19:
                        time.sleep(0.02)
                producer.flush()

            pt = threading.Thread(target=produce, daemon=True)
            pt.start()

            def doomed_count():
                with lock:
                    return sum(1 for e in events if e[1] == "doomed")

            h.wait_until(lambda: doomed_count() >= KILL_AFTER or errors, 20,
                         f"{KILL_AFTER} messages processed by the doomed consumer")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(5)
        killed_at_total = len(events)
        pt.join(30)
        h.check(not pt.is_alive(), "the producer did not finish within 30 s")

        def all_done():
            with lock:
                return len({(e[2], e[3]) for e in events}) >= N or errors

        h.wait_until(all_done, 30, f"all {N} messages processed")
        time.sleep(0.5)
        stop.set()
        for t in ths:
            t.join(10)
        h.check(not errors, f"consumer errors: {errors}")
        with lock:
            merged = sorted(events)
        log = h.ProcessingLog("processing")
        for _, c, k, s, mid, rc in merged:
            log.record(c, k, s, mid, rc)
        log.write()
        dead = frozenset((e[2], e[3]) for e in merged if e[1] == "doomed")
        first_n, again = h.check_key_order(log.snapshot(), {f"key-{k}": PER_KEY for k in range(KEYS)},
                                           may_repeat=dead)
        per = {n: sum(1 for e in merged if e[1] == n) for n in ("doomed", "a", "b")}
        cl = h.client(b.service_url)
        late = cl.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared)
        left = h.drain(late, quiet_ms=700, deadline_s=3)
        if left:
            raise h.ScenarioFailure(f"{len(left)} messages left after every ack")
        late.close()
        cl.close()
        producer.close()
        pc.close()
    return (
        f"key_shared kill mid-stream: {N} sent ({KEYS} keys x {PER_KEY}), {first_n} processed in "
        f"per-key order (doomed={per['doomed']}/a={per['a']}/b={per['b']}; SIGKILL at "
        f"{killed_at_total}), {again} re-processed (processed by the dead consumer, acks lost)"
    )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(*sys.argv[2:])
    else:
        h.run(main)
