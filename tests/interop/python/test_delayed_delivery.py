"""Delayed delivery with the stock client's `deliver_after` (the broker's defaults: strict, tick 1000 ms).

1. Shared, two consumers: 5 messages sent with deliver_after=1.5 s between 5 plain ones. The plain
   ones arrive at once; no delayed one arrives before its deliver-at time (publish time + 1.5 s,
   same clock: broker and client run on this machine).
2. Key_Shared, one key: m0 with deliver_after=1 s, then m1..m4 plain. The application gets m1..m4,
   then m0, not before its time (a delayed message holds no key, as in Pulsar).
3. Restart: with --data-dir, a message sent with deliver_after=2 s, the broker stopped and started
   again before that: the message arrives after the restart, not before its time.
4. Exclusive: a delayed message is dispatched at once (Pulsar delays only Shared and Key_Shared).
"""

import datetime
import os
import tempfile
import time

import pulsar

import harness as h


def now_ms():
    return int(time.time() * 1000)


def receive_all(cons, n, deadline_s):
    got = []
    d = h.Deadline(deadline_s)
    while len(got) < n and not d.expired():
        m = h.receive_or_none(cons, d.left_ms(500))
        if m is not None:
            got.append((m, now_ms()))
            cons.acknowledge(m)
    return got


def shared(b):
    topic = h.unique_topic("delayed-shared")
    cl = h.client(b.service_url)
    consumers = [
        cl.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10)
        for _ in range(2)
    ]
    producer = cl.create_producer(topic)
    sent = []
    for i in range(10):
        delayed = i % 2 == 0
        kw = {"deliver_after": datetime.timedelta(milliseconds=1500)} if delayed else {}
        producer.send(f"m{i}".encode(), **kw)
        sent.append(delayed)
    got = []
    d = h.Deadline(8)
    while len(got) < 10 and not d.expired():
        for c in consumers:
            m = h.receive_or_none(c, 50)
            if m is not None:
                got.append((m, now_ms()))
                c.acknowledge(m)
    h.check(len(got) == 10, f"shared: {len(got)} of 10 messages arrived")
    lateness = []
    plain_wait = []
    for m, at in got:
        i = int(m.data().decode()[1:])
        due = m.publish_timestamp() + 1500
        if sent[i]:
            h.check(at >= due, f"shared: m{i} arrived {due - at} ms before its deliver-at time")
            lateness.append(at - due)
        else:
            plain_wait.append(at - m.publish_timestamp())
    h.check(max(plain_wait) < 1000, f"shared: a plain message waited {max(plain_wait)} ms")
    for c in consumers:
        c.close()
    producer.close()
    cl.close()
    return max(lateness), max(plain_wait)


def key_shared(b):
    topic = h.unique_topic("delayed-ks")
    cl = h.client(b.service_url)
    cons = cl.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared, receiver_queue_size=10)
    producer = cl.create_producer(topic, batching_enabled=False)
    producer.send(b"m0", partition_key="k", deliver_after=datetime.timedelta(milliseconds=1000))
    for i in range(1, 5):
        producer.send(f"m{i}".encode(), partition_key="k")
    got = receive_all(cons, 5, 8)
    order = [m.data().decode() for m, _ in got]
    h.check(order == ["m1", "m2", "m3", "m4", "m0"], f"key_shared: order {order}")
    m0, at = got[-1]
    due = m0.publish_timestamp() + 1000
    h.check(at >= due, f"key_shared: m0 arrived {due - at} ms early")
    cons.close()
    producer.close()
    cl.close()
    return order, at - due


def restart(tmp):
    topic = h.unique_topic("delayed-restart")
    data = os.path.join(tmp, "data")
    with h.Broker("broker-restart-1", ["--data-dir", data]) as b:
        cl = h.client(b.service_url)
        cl.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared).close()
        producer = cl.create_producer(topic, batching_enabled=False)
        producer.send(b"later", deliver_after=datetime.timedelta(milliseconds=2000))
        sent_at = now_ms()
        producer.close()
        cl.close()
    with h.Broker("broker-restart-2", ["--data-dir", data]) as b:
        h.check(now_ms() < sent_at + 2000, "restart: the broker took longer than the delay to restart")
        cl = h.client(b.service_url)
        cons = cl.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        got = receive_all(cons, 1, 8)
        h.check(len(got) == 1, "restart: the delayed message did not arrive after the restart")
        m, at = got[0]
        due = m.publish_timestamp() + 2000
        h.check(at >= due, f"restart: arrived {due - at} ms early")
        cons.close()
        cl.close()
    return at - due


def exclusive(b):
    topic = h.unique_topic("delayed-exclusive")
    cl = h.client(b.service_url)
    cons = cl.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = cl.create_producer(topic, batching_enabled=False)
    producer.send(b"now", deliver_after=datetime.timedelta(seconds=5))
    got = receive_all(cons, 1, 3)
    h.check(len(got) == 1, "exclusive: a delayed message was held (Pulsar dispatches it at once)")
    cons.close()
    producer.close()
    cl.close()
    return got[0][1] - got[0][0].publish_timestamp()


def main():
    with h.Broker("broker") as b:
        late_s, plain = shared(b)
        order, late_k = key_shared(b)
        excl = exclusive(b)
    with tempfile.TemporaryDirectory() as tmp:
        late_r = restart(tmp)
    return (
        f"delayed: Shared 5 of 5 delayed after their time (at most {late_s} ms late; plain "
        f"within {plain} ms); Key_Shared order {' '.join(order)} (m0 {late_k} ms late); after a "
        f"restart {late_r} ms late; Exclusive at once ({excl} ms)"
    )


if __name__ == "__main__":
    h.run(main)
