"""Key_Shared (default AUTO_SPLIT), consumers joining and leaving mid-stream.

20 keys x 30 messages, published at a steady pace. c1 starts alone; c2 joins once 100 messages
were processed; c1 closes once 200 were processed (with messages still in its receive queue);
c3 joins right after. Each application records (key, seq) when it processes a message, then
acks it. The merged processing log must keep per-key order: seq s of key K is first processed
only after every earlier seq of K, and a seq is processed again only from a redelivered copy.
"""

import threading
import time

import pulsar

import harness as h

KEYS = 20
PER_KEY = 30
N = KEYS * PER_KEY
PROCESS_S = 0.002  # the application's work per message


def main():
    log = h.ProcessingLog("processing")
    expected = {f"key-{k}": PER_KEY for k in range(KEYS)}
    with h.Broker("broker") as b:
        topic = h.unique_topic("ks-join-leave")
        errors = []
        stops = {}
        threads = {}
        counts = {}

        def consumer_thread(name, ready):
            cl = h.client(b.service_url)
            try:
                cons = cl.subscribe(
                    topic,
                    "sub",
                    consumer_type=pulsar.ConsumerType.KeyShared,
                    consumer_name=name,
                    receiver_queue_size=10,
                    initial_position=pulsar.InitialPosition.Earliest,
                )
                ready.set()
                d = h.Deadline(45)
                while not d.expired() and not stops[name].is_set():
                    m = h.receive_or_none(cons, 100)
                    if m is None:
                        continue
                    key, seq = m.data().decode().split("#")
                    time.sleep(PROCESS_S)
                    log.record(name, key, int(seq), str(m.message_id()), m.redelivery_count())
                    counts[name] = counts.get(name, 0) + 1
                    cons.acknowledge(m)
                cons.close()
            except Exception as e:  # noqa: BLE001
                errors.append(f"{name}: {e!r}")
                ready.set()
            finally:
                cl.close()

        def start(name):
            stops[name] = threading.Event()
            ready = threading.Event()
            t = threading.Thread(target=consumer_thread, args=(name, ready), daemon=True)
            threads[name] = t
            t.start()
            h.check(ready.wait(10), f"{name} did not subscribe within 10 s")

        start("c1")
        pc = h.client(b.service_url)
        producer = pc.create_producer(topic, batching_enabled=False)

        def produce():
            for i in range(N):
                k, s = i % KEYS, i // KEYS
                producer.send_async(f"key-{k}#{s}".encode(), None, partition_key=f"key-{k}")
                if i % 20 == 19:
                    time.sleep(0.03)
            producer.flush()

        pt = threading.Thread(target=produce, daemon=True)
        pt.start()
        events = []
        h.wait_until(lambda: len(log) >= 100 or errors, 20, "100 processed messages")
        start("c2")
        events.append(f"c2 joined at {len(log)}")
        h.wait_until(lambda: len(log) >= 200 or errors, 20, "200 processed messages")
        stops["c1"].set()
        threads["c1"].join(10)
        h.check(not threads["c1"].is_alive(), "c1 did not close within 10 s")
        events.append(f"c1 closed at {len(log)}")
        start("c3")
        events.append(f"c3 joined at {len(log)}")
        pt.join(30)
        h.check(not pt.is_alive(), "the producer did not finish within 30 s")

        def all_first_seen():
            seen = {(e[2], e[3]) for e in log.snapshot()}
            return len(seen) >= N or errors

        h.wait_until(all_first_seen, 30, f"all {N} messages processed")
        time.sleep(0.3)  # a little time for stray duplicates to show up
        for n in ("c2", "c3"):
            stops[n].set()
        for t in threads.values():
            t.join(10)
        h.check(not errors, f"consumer errors: {errors}")
        log.write()
        first, again = h.check_key_order(log.snapshot(), expected)
        h.check(first == N, f"{first} first-time processings, expected {N}")
        for n in ("c1", "c2", "c3"):
            h.check(counts.get(n, 0) > 0, f"{n} processed nothing: {counts}")

        # Everything acked: a late consumer gets nothing.
        cl = h.client(b.service_url)
        late = cl.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared)
        extra = h.drain(late, quiet_ms=700, deadline_s=3)
        if extra:
            raise h.ScenarioFailure(f"{len(extra)} messages redelivered after every ack")
        late.close()
        cl.close()
        producer.close()
        pc.close()
    per = "/".join(f"{n}={counts.get(n, 0)}" for n in ("c1", "c2", "c3"))
    return (
        f"key_shared join/leave: {N} sent ({KEYS} keys x {PER_KEY}), {first} processed in "
        f"per-key order ({per}; {', '.join(events)}), {again} re-processed after redelivery"
    )


if __name__ == "__main__":
    h.run(main)
