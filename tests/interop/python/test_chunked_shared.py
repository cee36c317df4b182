"""Chunked messages from two concurrent producers over three Shared consumers, with nacks.

Broker --max-message-size 10240. Two producers (own clients) each send 15 chunked messages
(9.6 KB to 27.5 KB: one unchunked, the rest 2 or 3 chunks) at the same time, so chunks of different messages interleave in
the topic. Three Shared consumers (receiver queue 5) each nack the first delivery of every 4th
message they get and ack the rest. Every message must arrive intact (reassembly needs all chunks
of a message at one consumer), the nacked ones come back with redelivery count >= 1, a second
copy only ever carries a redelivery count > 0, and the subscription ends empty.
"""

import hashlib
import threading
import time

import pulsar

import harness as h

PRODUCERS = 2
PER_PRODUCER = 15
N = PRODUCERS * PER_PRODUCER
CONSUMERS = 3


def body(j, k):
    return bytes([j, k]) + hashlib.sha256(f"{j}-{k}".encode()).digest() * (300 + 40 * k)


def main():
    with h.Broker("broker", ["--max-message-size", "10240"]) as b:
        topic = h.unique_topic("chunk-shared")
        ccl = [h.client(b.service_url) for _ in range(CONSUMERS)]
        cons = [
            c.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                        consumer_name=f"c{i}", receiver_queue_size=5,
                        negative_ack_redelivery_delay_ms=100)
            for i, c in enumerate(ccl)
        ]
        got = [[] for _ in cons]  # (producer, index, intact, redelivery count)
        nacked = set()
        trace = []
        lock = threading.Lock()
        stop = threading.Event()
        errors = []

        def rx(i):
            try:
                d = h.Deadline(40)
                while not stop.is_set() and not d.expired():
                    m = h.receive_or_none(cons[i], 200)
                    if m is None:
                        continue
                    data = m.data()
                    j, k = data[0], data[1]
                    got[i].append((j, k, data == body(j, k), m.redelivery_count()))
                    trace.append((time.monotonic(), f"c{i}", j, k, str(m.message_id()), m.redelivery_count()))
                    with lock:
                        nack = len(got[i]) % 4 == 1 and m.redelivery_count() == 0
                        if nack:
                            nacked.add((j, k))
                    if nack:
                        cons[i].negative_acknowledge(m)
                    else:
                        cons[i].acknowledge(m)
            except Exception as e:  # noqa: BLE001
                errors.append(f"c{i}: {e!r}")

        ths = [threading.Thread(target=rx, args=(i,), daemon=True) for i in range(CONSUMERS)]
        for t in ths:
            t.start()
        pcl = [h.client(b.service_url) for _ in range(PRODUCERS)]
        prods = [c.create_producer(topic, chunking_enabled=True, batching_enabled=False) for c in pcl]

        def tx(j):
            try:
                for k in range(PER_PRODUCER):
                    prods[j].send(body(j, k))
            except Exception as e:  # noqa: BLE001
                errors.append(f"p{j}: {e!r}")

        pts = [threading.Thread(target=tx, args=(j,), daemon=True) for j in range(PRODUCERS)]
        for t in pts:
            t.start()
        for t in pts:
            t.join(30)

        def acked_all():
            with lock:
                done = {(j, k) for g in got for j, k, _, rc in g}
                renacked = {(j, k) for g in got for j, k, _, rc in g if rc > 0}
                return (len(done) >= N and nacked <= renacked) or errors

        h.wait_until(acked_all, 30, f"all {N} messages and every nacked one again")
        time.sleep(0.5)
        stop.set()
        for t in ths:
            t.join(5)
        h.check(not errors, f"errors: {errors}")
        broken = [(j, k) for g in got for j, k, ok, _ in g if not ok]
        h.check(not broken, f"{len(broken)} messages not intact: {broken[:5]}")
        seen = {}
        for _, c, j, k, mid, rc in sorted(trace):
            if (j, k) in seen and rc == 0:
                mine = [r[1:] for r in sorted(trace) if (r[2], r[3]) == (j, k)]
                raise h.ScenarioFailure(f"message {j}/{k} received again with rc 0: {mine}")
            seen[(j, k)] = rc
        h.check(len(seen) == N, f"{len(seen)} distinct messages, expected {N}")
        counts = [len(g) for g in got]
        h.check(all(counts), f"not spread over consumers: {counts}")
        for c in cons:
            c.close()
        late = ccl[0].subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        left = h.drain(late, quiet_ms=700, deadline_s=3)
        if left:
            raise h.ScenarioFailure(f"{len(left)} messages left after every ack")
        late.close()
        for c in [*ccl, *pcl]:
            c.close()
    return (
        f"chunked shared: {N} chunked messages from {PRODUCERS} producers, "
        f"{sum(counts)} deliveries ({'/'.join(map(str, counts))}), {len(nacked)} nacked and "
        f"re-received, all intact, 0 lost"
    )


if __name__ == "__main__":
    h.run(main)
