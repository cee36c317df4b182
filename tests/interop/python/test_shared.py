"""Shared subscription, three consumers (one client and thread each), 300 messages.

Checks: every message is received and acked; all three consumers get some; nothing is lost;
a message seen twice is only accepted when the second copy carries a redelivery count > 0;
after the acks, a fresh consumer on the subscription gets nothing.
"""

import threading
import time

import pulsar

import harness as h

N = 300
CONSUMERS = 3


def main():
    with h.Broker("broker") as b:
        topic = h.unique_topic("shared")
        clients = [h.client(b.service_url) for _ in range(CONSUMERS + 1)]
        consumers = [
            c.subscribe(
                topic,
                "sub",
                consumer_type=pulsar.ConsumerType.Shared,
                consumer_name=f"c{i}",
                receiver_queue_size=20,
                initial_position=pulsar.InitialPosition.Earliest,
            )
            for i, c in enumerate(clients[:CONSUMERS])
        ]
        received = [[] for _ in range(CONSUMERS)]  # (time, payload, msg key, redelivery count)
        errors = []
        lock = threading.Lock()
        total = [0]

        def consume(i):
            d = h.Deadline(30)
            try:
                while not d.expired():
                    with lock:
                        if total[0] >= N:
                            return
                    m = h.receive_or_none(consumers[i], 200)
                    if m is None:
                        continue
                    received[i].append(
                        (time.monotonic(), m.data().decode(), h.msg_key(m), m.redelivery_count())
                    )
                    consumers[i].acknowledge(m)
                    with lock:
                        total[0] += 1
            except Exception as e:  # noqa: BLE001
                errors.append(f"c{i}: {e!r}")

        threads = [threading.Thread(target=consume, args=(i,), daemon=True) for i in range(CONSUMERS)]
        for t in threads:
            t.start()
        producer = clients[CONSUMERS].create_producer(topic, batching_enabled=False)
        for i in range(N):
            producer.send_async(f"m-{i}".encode(), None)
        producer.flush()
        for t in threads:
            t.join(timeout=35)
        h.check(not errors, f"consumer errors: {errors}")
        h.check(all(not t.is_alive() for t in threads), "a consumer thread did not finish")

        seen = {}
        dup_without_reason = []
        redelivered = 0
        merged = sorted((t, p, mid, rc, f"c{i}") for i, lst in enumerate(received) for t, p, mid, rc in lst)
        for _, payload, mid, rc, name in merged:
            if payload in seen:
                if rc == 0:
                    dup_without_reason.append((payload, mid, name, seen[payload]))
                redelivered += 1
            else:
                seen[payload] = name
        missing = [f"m-{i}" for i in range(N) if f"m-{i}" not in seen]
        h.check(not missing, f"{len(missing)} messages never received, e.g. {missing[:5]}")
        h.check(not dup_without_reason, f"duplicates with redelivery count 0: {dup_without_reason[:5]}")
        counts = [len(r) for r in received]
        h.check(all(c > 0 for c in counts), f"not spread over the consumers: {counts}")

        # Everything was acked: a new consumer on the same subscription gets nothing more.
        for c in consumers:
            c.close()
        late = clients[0].subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        extra = h.drain(late, quiet_ms=700, deadline_s=3)
        if extra:
            raise h.ScenarioFailure(f"{len(extra)} messages redelivered after every ack, e.g. {extra[0].data()!r}")
        late.close()
        producer.close()
        for c in clients:
            c.close()
    return (
        f"shared: {N} sent, {sum(counts)} received+acked ({'/'.join(map(str, counts))} over "
        f"{CONSUMERS} consumers), {redelivered} redelivered, 0 lost"
    )


if __name__ == "__main__":
    h.run(main)
