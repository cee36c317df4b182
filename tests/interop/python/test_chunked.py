"""Chunked messages (broker --max-message-size 10240, producer chunking, batching off).

A 25,600 B and a 12,000 B message are sent; the consumer receives both intact (reassembled from
3 and 2 chunks); then the second is nacked and must be re-received intact with redelivery count 1.
The C++ 4.2.0 client names only the last chunk in that redelivery request; the broker puts every
chunk of the message back.
"""

import hashlib

import pulsar

import harness as h

SIZES = (25600, 12000)


def body(n, salt):
    out = b""
    i = 0
    while len(out) < n:
        out += hashlib.sha256(f"{salt}-{i}".encode()).digest()
        i += 1
    return out[:n]


def main():
    with h.Broker("broker", ["--max-message-size", "10240"]) as b:
        topic = h.unique_topic("chunked")
        cl = h.client(b.service_url)
        cons = cl.subscribe(
            topic,
            "sub",
            consumer_type=pulsar.ConsumerType.Shared,
            negative_ack_redelivery_delay_ms=100,
        )
        producer = cl.create_producer(topic, chunking_enabled=True, batching_enabled=False)
        bodies = [body(n, i) for i, n in enumerate(SIZES)]
        sent_ids = [str(producer.send(x, partition_key="kc")) for x in bodies]
        got = h.receive_n(cons, 2)
        h.check(len(got) == 2, f"received {len(got)} messages, expected 2")
        for i, m in enumerate(got):
            d = m.data()
            h.check(len(d) == SIZES[i], f"message {i}: {len(d)} bytes, expected {SIZES[i]}")
            h.check(d == bodies[i], f"message {i}: payload differs from what was sent")
        cons.acknowledge(got[0])
        cons.negative_acknowledge(got[1])
        again = h.receive_or_none(cons, 5000)
        h.check(again is not None, "the nacked chunked message was not re-received within 5 s "
                "(a broker that redelivers only the named last chunk loses it)")
        h.check(again.data() == bodies[1], f"re-received {len(again.data())} bytes, not the 12,000 B sent")
        h.check(again.redelivery_count() == 1, f"redelivery_count {again.redelivery_count()}, expected 1")
        cons.acknowledge(again)
        extra = h.drain(cons, quiet_ms=600, deadline_s=3)
        if extra:
            raise h.ScenarioFailure(f"{len(extra)} extra deliveries after the acks")
        cons.close()
        # Every chunk was acked: a new consumer on the subscription gets nothing.
        late = cl.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        left = h.drain(late, quiet_ms=600, deadline_s=3)
        if left:
            raise h.ScenarioFailure(f"{len(left)} messages left after acking every chunk")
        late.close()
        producer.close()
        cl.close()
    return (
        f"chunked: 2 messages ({SIZES[0]} B, {SIZES[1]} B; max message size 10240) sent as "
        f"{sent_ids}, received intact, 2nd nacked and re-received intact (rc 1), all acked"
    )


if __name__ == "__main__":
    h.run(main)
