"""Key_Shared STICKY with explicit ranges [0, 32767] and [32768, 65535].

40 keys x 5 messages. Each message must reach the consumer whose range holds Pulsar's sticky
hash of its key, murmur3_32(key) & 65535 (computed here independently of the broker), and
every message is received exactly once, in per-key order.
"""

import threading

import pulsar

import harness as h

KEYS = 40
PER_KEY = 5
N = KEYS * PER_KEY
RANGES = {"low": (0, 32767), "high": (32768, 65535)}


def main():
    with h.Broker("broker") as b:
        topic = h.unique_topic("ks-sticky")
        clients = {}
        consumers = {}
        for name, rng in RANGES.items():
            clients[name] = h.client(b.service_url)
            consumers[name] = clients[name].subscribe(
                topic,
                "sub",
                consumer_type=pulsar.ConsumerType.KeyShared,
                consumer_name=name,
                receiver_queue_size=50,
                key_shared_policy=pulsar.ConsumerKeySharedPolicy(
                    key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=[rng]
                ),
            )
        received = {name: [] for name in RANGES}
        errors = []

        def consume(name):
            try:
                d = h.Deadline(20)
                while not d.expired() and sum(map(len, received.values())) < N:
                    m = h.receive_or_none(consumers[name], 200)
                    if m is None:
                        continue
                    received[name].append((m.partition_key(), m.data().decode()))
                    consumers[name].acknowledge(m)
            except Exception as e:  # noqa: BLE001
                errors.append(f"{name}: {e!r}")

        threads = [threading.Thread(target=consume, args=(n,), daemon=True) for n in RANGES]
        for t in threads:
            t.start()
        pc = h.client(b.service_url)
        producer = pc.create_producer(topic, batching_enabled=False)
        for i in range(N):
            key = f"user-{i % KEYS}"
            producer.send_async(f"{key}#{i // KEYS}".encode(), None, partition_key=key)
        producer.flush()
        for t in threads:
            t.join(25)
        h.check(not errors, f"consumer errors: {errors}")
        wrong = []
        payloads = []
        for name, lst in received.items():
            lo, hi = RANGES[name]
            for key, payload in lst:
                payloads.append(payload)
                slot = h.sticky_hash(key)
                if not lo <= slot <= hi:
                    wrong.append(f"{key} (hash {slot}) went to {name} [{lo}, {hi}]")
        h.check(not wrong, f"{len(wrong)} messages outside the consumer's range: {wrong[:5]}")
        h.check(len(payloads) == N and len(set(payloads)) == N,
                f"received {len(payloads)} ({len(set(payloads))} distinct), expected {N}")
        for name, lst in received.items():
            last = {}
            for key, payload in lst:
                seq = int(payload.split("#")[1])
                h.check(seq == last.get(key, -1) + 1, f"{name}: {payload} after #{last.get(key)} (order)")
                last[key] = seq
        keys_low = {k for k, _ in received["low"]}
        keys_high = {k for k, _ in received["high"]}
        h.check(keys_low and keys_high, f"one range got no keys: low={len(keys_low)} high={len(keys_high)}")
        for c in consumers.values():
            c.close()
        producer.close()
        for c in [*clients.values(), pc]:
            c.close()
    return (
        f"key_shared sticky: {N} sent ({KEYS} keys), low [0,32767] got {len(received['low'])} "
        f"({len(keys_low)} keys), high [32768,65535] got {len(received['high'])} "
        f"({len(keys_high)} keys), 0 outside the range, per-key order kept"
    )


if __name__ == "__main__":
    h.run(main)
