"""Nack and redelivery count (negative_ack_redelivery_delay_ms=100).

One message is received (redelivery count 0) and nacked; it comes back with count 1; nacked
again it comes back with count 2; then it is acked and nothing else arrives.
"""

import time

import pulsar

import harness as h


def main():
    with h.Broker("broker") as b:
        topic = h.unique_topic("nack")
        cl = h.client(b.service_url)
        cons = cl.subscribe(
            topic,
            "sub",
            consumer_type=pulsar.ConsumerType.Shared,
            negative_ack_redelivery_delay_ms=100,
            receiver_queue_size=10,
        )
        producer = cl.create_producer(topic, batching_enabled=False)
        producer.send(b"nack-me")
        counts = []
        latencies = []
        first_id = None
        m = h.receive_or_none(cons, 3000)
        h.check(m is not None, "the message was not delivered within 3 s")
        for expected in (0, 1, 2):
            h.check(m.data() == b"nack-me", f"unexpected payload {m.data()!r}")
            h.check(
                m.redelivery_count() == expected,
                f"delivery {len(counts) + 1}: redelivery_count {m.redelivery_count()}, expected {expected}",
            )
            if first_id is None:
                first_id = str(m.message_id())
            h.check(str(m.message_id()) == first_id, f"id changed: {m.message_id()} vs {first_id}")
            counts.append(m.redelivery_count())
            if expected == 2:
                cons.acknowledge(m)
                break
            t0 = time.monotonic()
            cons.negative_acknowledge(m)
            m = h.receive_or_none(cons, 5000)
            h.check(m is not None, f"no redelivery within 5 s of nack #{expected + 1}")
            latencies.append((time.monotonic() - t0) * 1000)
        extra = h.drain(cons, quiet_ms=500, deadline_s=2)
        if extra:
            raise h.ScenarioFailure(f"{len(extra)} more deliveries after the ack (rc {extra[0].redelivery_count()})")
        cons.close()
        producer.close()
        cl.close()
    lat = ", ".join(f"{x:.0f}" for x in latencies)
    return (
        f"nack: 1 message delivered 3 times, redelivery_count {counts}, "
        f"nack-to-redelivery {lat} ms (client delay 100 ms), acked, 0 extra"
    )


if __name__ == "__main__":
    h.run(main)
