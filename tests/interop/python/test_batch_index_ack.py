"""Batch-index ack: one 5-message batch, indexes 0 and 2 acked, the rest redelivered.

The producer batches (batching_max_messages=5, one key, so the batch is one entry). c1
(batch_index_ack_enabled) receives the five, acks indexes 0 and 2 and closes. c2 on the same
subscription must receive exactly indexes 1, 3 and 4 of that entry. After c2 acks them, the entry
is complete: a third consumer receives nothing.
"""

import pulsar

import harness as h


def subscribe(cl, topic, name):
    return cl.subscribe(
        topic,
        "sub",
        consumer_type=pulsar.ConsumerType.Shared,
        consumer_name=name,
        batch_index_ack_enabled=True,
        initial_position=pulsar.InitialPosition.Earliest,
    )


def main():
    with h.Broker("broker") as b:
        topic = h.unique_topic("batch-ack")
        cl = h.client(b.service_url)
        c1 = subscribe(cl, topic, "c1")
        producer = cl.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=5,
            batching_max_publish_delay_ms=2000,
            batching_type=pulsar.BatchingType.KeyBased,
        )
        for i in range(5):
            producer.send_async(f"b-{i}".encode(), None, partition_key="kb")
        producer.flush()
        first = h.receive_n(c1, 5)
        h.check(len(first) == 5, f"c1 got {len(first)} messages, expected the 5 of the batch")
        ids = [h.msg_key(m) for m in first]
        entries = {(l, e) for l, e, _ in ids}
        h.check(len(entries) == 1, f"the 5 messages are not one entry: {ids}")
        h.check([bi for _, _, bi in ids] == [0, 1, 2, 3, 4], f"batch indexes {ids}")
        c1.acknowledge(first[0])
        c1.acknowledge(first[2])
        c1.close()  # flushes the grouped acks before CLOSE_CONSUMER

        c2 = subscribe(cl, topic, "c2")
        second = h.receive_n(c2, 3, quiet_ms=700)
        got = sorted((h.msg_key(m)[2], m.data().decode()) for m in second)
        h.check(
            got == [(1, "b-1"), (3, "b-3"), (4, "b-4")],
            f"c2 got {got}, expected indexes 1, 3, 4 only",
        )
        rcs = [m.redelivery_count() for m in second]
        for m in second:
            c2.acknowledge(m)
        c2.close()

        c3 = subscribe(cl, topic, "c3")
        third = h.drain(c3, quiet_ms=700, deadline_s=3)
        if third:
            raise h.ScenarioFailure(
                f"c3 got {[(h.msg_key(m), m.data()) for m in third]} after every index was acked"
            )
        c3.close()
        producer.close()
        cl.close()
    return (
        f"batch-index ack: 1 batch of 5 in entry {sorted(entries)[0]}, c1 acked [0, 2], "
        f"c2 got [1, 3, 4] (redelivery counts {rcs}), c3 got 0 after all acks"
    )


if __name__ == "__main__":
    h.run(main)
