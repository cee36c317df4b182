"""Seed 002 with the stock client: what per-key order a nack gives on Key_Shared.

One key, messages m0..m9, receiver queue 10, nack delay 100 ms; the application nacks m0 the
first time it sees it and acks everything else right after processing it.

* `--key-shared-max-unacked-per-key 1` (key-serial): the broker sends the next message of the
  key only after the previous one is acked, so the application order is m0, m0', m1, ..., m9.
  Its cost is one ack round trip per message per key; the C++ client groups acks every 100 ms,
  so one key moves at about 10 messages per second (measured here on 30 messages).
* Without it (and with `--legacy unordered-nack`): the messages already in the client's queue
  are processed before the redelivered m0', so m0' comes after m1..m9 (the broker holds the
  key from the redelivery request on, which orders only what was not yet dispatched).
"""

import time

import pulsar

import harness as h


def run_once(extra_args, n=10):
    with h.Broker("broker", extra_args=extra_args) as b:
        topic = h.unique_topic("seed002")
        cl = h.client(b.service_url)
        cons = cl.subscribe(
            topic,
            "ks",
            consumer_type=pulsar.ConsumerType.KeyShared,
            negative_ack_redelivery_delay_ms=100,
            receiver_queue_size=10,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        producer = cl.create_producer(topic, batching_enabled=False)
        for i in range(n):
            producer.send(f"m{i}".encode(), partition_key="K")
        order = []
        nacked = False
        deadline = h.Deadline(20)
        started = time.monotonic()
        while len(order) < n + 1 and not deadline.expired():
            m = h.receive_or_none(cons, 2000)
            if m is None:
                continue
            name = m.data().decode() + ("'" if m.redelivery_count() > 0 else "")
            order.append(name)
            if not nacked and name == "m0":
                nacked = True
                cons.negative_acknowledge(m)
            else:
                cons.acknowledge(m)
        elapsed = time.monotonic() - started
        cons.close()
        producer.close()
        cl.close()
    return order, elapsed


def main():
    serial, serial_s = run_once(["--key-shared-max-unacked-per-key", "1"], n=30)
    want = ["m0", "m0'"] + [f"m{i}" for i in range(1, 30)]
    h.check(serial == want, f"key-serial: application order {serial}, expected {want}")
    rate = len(serial) / serial_s
    plain, _ = run_once([])
    h.check(plain[0] == "m0" and plain[-1] == "m0'", f"without key-serial: expected m0' last, got {plain}")
    legacy, _ = run_once(["--key-shared-max-unacked-per-key", "1", "--legacy", "unordered-nack"])
    h.check(legacy[-1] == "m0'", f"with --legacy unordered-nack: expected m0' last, got {legacy}")
    return (
        f"seed 002: key-serial order m0 m0' m1..m29 (31 deliveries, one key at {rate:.1f} msg/s "
        f"with the stock client's 100 ms ack grouping); without it {' '.join(plain)}; "
        f"legacy unordered-nack ends with {legacy[-1]}"
    )


if __name__ == "__main__":
    h.run(main)
