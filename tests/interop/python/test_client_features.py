"""Smaller client features, one check each, on one broker.

* Exclusive subscription: a second consumer is refused with ConsumerBusy.
* Exclusive cumulative ack: after acknowledge_cumulative() of x3 and of x7 (index 1 of a 4-message
  batch, batch-index ack on), a new consumer gets x8 and x9 only; after a cumulative ack of x9,
  nothing.
* Producer name: a second producer with a connected producer's name is refused (ProducerBusy).
* Two subscriptions on one topic each get all 20 messages.
* A multi-topic consumer gets the messages of both topics.
* receiver_queue_size=0 with blocking receive() gets 3 messages in order.
* StringSchema round trip; properties, event time and key survive the broker.
* redeliver_unacknowledged_messages(): the 4 unacked of 5 come back with count 1.
* Batch without batch-index ack: nacking one message redelivers the whole batch of 5.
* Dead-letter policy (max_redeliver_count=2): deliveries with counts 0, 1, 2, then the client
  moves the message to the DLQ topic.
* A 1 MiB message passes unchunked; one above the 5 MiB limit fails client-side (MessageTooBig).
"""

import threading

import pulsar

import harness as h


def main():
    done = []
    with h.Broker("broker") as b:
        cl = h.client(b.service_url)
        cl2 = h.client(b.service_url)

        t = h.unique_topic("excl")
        e1 = cl.subscribe(t, "E")
        try:
            cl2.subscribe(t, "E")
            raise h.ScenarioFailure("a second consumer on an Exclusive subscription was accepted")
        except pulsar.ConsumerBusy:
            done.append("exclusive busy")
        e1.close()

        t = h.unique_topic("cumulative")
        xc = cl.subscribe(t, "X", batch_index_ack_enabled=True)  # Exclusive
        xp = cl.create_producer(t, batching_enabled=False)
        for i in range(6):
            xp.send(f"x{i}".encode())
        bp = cl.create_producer(t, batching_enabled=True, batching_max_messages=4,
                                batching_max_publish_delay_ms=1000)
        for i in range(6, 10):
            bp.send_async(f"x{i}".encode(), None)
        bp.flush()
        ms = h.receive_n(xc, 10)
        h.check(len(ms) == 10, f"cumulative: got {len(ms)} of 10")
        xc.acknowledge_cumulative(ms[3])
        xc.acknowledge_cumulative(ms[7])  # index 1 of the 4-message batch
        xc.close()
        xc = cl.subscribe(t, "X", batch_index_ack_enabled=True)
        rest = h.receive_n(xc, 2, quiet_ms=500)
        names = [m.data().decode() for m in rest]
        h.check(names == ["x8", "x9"], f"after cumulative acks of x3 and x7 (in a batch): {names}")
        xc.acknowledge_cumulative(rest[-1])
        xc.close()
        xc = cl.subscribe(t, "X")
        left = h.drain(xc, 500)
        h.check(not left, f"{len(left)} messages back after a cumulative ack of the last one")
        xc.close()
        done.append("exclusive cumulative ack")

        t = h.unique_topic("pname")
        p1 = cl.create_producer(t, producer_name="same-name")
        try:
            cl2.create_producer(t, producer_name="same-name")
            raise h.ScenarioFailure("a second producer with a connected producer's name was accepted")
        except pulsar.ProducerBusy:
            done.append("producer name busy")
        p1.close()
        p1 = cl2.create_producer(t, producer_name="same-name")  # free again after close
        p1.close()

        t = h.unique_topic("fanout")
        sa = cl.subscribe(t, "A", consumer_type=pulsar.ConsumerType.Shared)
        sb = cl.subscribe(t, "B", consumer_type=pulsar.ConsumerType.Shared)
        p = cl.create_producer(t)
        for i in range(20):
            p.send(f"f{i}".encode())
        ga, gb = len(h.receive_n(sa, 20)), len(h.receive_n(sb, 20))
        h.check(ga == 20 and gb == 20, f"fan-out: A got {ga}, B got {gb}, expected 20 each")
        done.append("fan-out 20+20")
        sa.close()
        sb.close()
        p.close()

        ta, tb = h.unique_topic("multi-a"), h.unique_topic("multi-b")
        pa, pb = cl.create_producer(ta), cl.create_producer(tb)
        mc = cl.subscribe([ta, tb], "M", consumer_type=pulsar.ConsumerType.Shared)
        pa.send(b"A")
        pb.send(b"B")
        got = sorted(m.data() for m in h.receive_n(mc, 2))
        h.check(got == [b"A", b"B"], f"multi-topic consumer got {got}")
        done.append("multi-topic")
        mc.close()

        t = h.unique_topic("zero-queue")
        zc = cl.subscribe(t, "Z", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=0)
        zp = cl.create_producer(t)
        for i in range(3):
            zp.send(f"z{i}".encode())
        zgot = []

        def rx():
            for _ in range(3):
                m = zc.receive()
                zgot.append(m.data())
                zc.acknowledge(m)

        th = threading.Thread(target=rx, daemon=True)
        th.start()
        th.join(5)
        h.check(zgot == [b"z0", b"z1", b"z2"], f"zero-queue consumer got {zgot}")
        done.append("zero queue")

        t = h.unique_topic("schema")
        sc = cl.subscribe(t, "S", schema=pulsar.schema.StringSchema())
        sp = cl.create_producer(t, schema=pulsar.schema.StringSchema())
        sp.send("héllo", properties={"a": "1"}, event_timestamp=1234, partition_key="pk")
        m = h.receive_or_none(sc, 3000)
        h.check(m is not None and m.value() == "héllo", "StringSchema round trip failed")
        h.check(m.properties() == {"a": "1"} and m.event_timestamp() == 1234 and m.partition_key() == "pk",
                f"metadata lost: {m.properties()} {m.event_timestamp()} {m.partition_key()!r}")
        done.append("schema+metadata")

        t = h.unique_topic("redeliver-all")
        rc = cl.subscribe(t, "R", consumer_type=pulsar.ConsumerType.Shared)
        rp = cl.create_producer(t, batching_enabled=False)
        for i in range(5):
            rp.send(f"r{i}".encode())
        first = h.receive_n(rc, 5)
        h.check(len(first) == 5, f"redeliver-all: got {len(first)} of 5")
        rc.acknowledge(first[0])
        rc.redeliver_unacknowledged_messages()
        again = sorted((m.data(), m.redelivery_count()) for m in h.receive_n(rc, 4))
        h.check(again == [(f"r{i}".encode(), 1) for i in range(1, 5)], f"redeliver-all gave {again}")
        done.append("redeliver-all 4")

        t = h.unique_topic("batch-nack")
        bc = cl.subscribe(t, "B", consumer_type=pulsar.ConsumerType.Shared, negative_ack_redelivery_delay_ms=100)
        bp = cl.create_producer(t, batching_enabled=True, batching_max_messages=5,
                                batching_max_publish_delay_ms=1000)
        for i in range(5):
            bp.send_async(f"b{i}".encode(), None)
        bp.flush()
        ms = h.receive_n(bc, 5)
        h.check(len(ms) == 5, f"batch: got {len(ms)} of 5")
        for m in ms:
            if m.data() == b"b1":
                bc.negative_acknowledge(m)
            else:
                bc.acknowledge(m)
        again = sorted(m.data() for m in h.receive_n(bc, 5))
        h.check(again == [f"b{i}".encode() for i in range(5)],
                f"nack of one message of a batch without batch-index ack redelivered {again}")
        done.append("batch nack = whole batch")

        t = h.unique_topic("dlq")
        dc = cl.subscribe(t, "D", consumer_type=pulsar.ConsumerType.Shared,
                          negative_ack_redelivery_delay_ms=100,
                          dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(
                              max_redeliver_count=2, dead_letter_topic=t + "-dlq"))
        dlq = cl.subscribe(t + "-dlq", "D", consumer_type=pulsar.ConsumerType.Shared,
                           initial_position=pulsar.InitialPosition.Earliest)
        dp = cl.create_producer(t)
        dp.send(b"poison")
        counts = []
        d = h.Deadline(10)
        while len(counts) < 5 and not d.expired():
            m = h.receive_or_none(dc, 1500)
            if m is None:
                break
            counts.append(m.redelivery_count())
            dc.negative_acknowledge(m)
        m = h.receive_or_none(dlq, 3000)
        h.check(counts == [0, 1, 2] and m is not None and m.data() == b"poison",
                f"dead letter: deliveries with counts {counts}, DLQ got {m and m.data()!r}")
        dlq.acknowledge(m)
        done.append("dead letter after 2 redeliveries")

        t = h.unique_topic("big")
        gc = cl.subscribe(t, "G")
        gp = cl.create_producer(t, batching_enabled=False)
        big = bytes(range(256)) * 4096
        gp.send(big)
        m = h.receive_or_none(gc, 5000)
        h.check(m is not None and m.data() == big, "1 MiB message not received intact")
        try:
            gp.send(b"x" * (5 * 1024 * 1024 + 1))
            raise h.ScenarioFailure("a message above the 5 MiB limit was accepted")
        except pulsar.MessageTooBig:
            done.append("1 MiB ok, >5 MiB refused")
        cl.close()
        cl2.close()
    return f"client features: {len(done)} checks passed ({'; '.join(done)})"


if __name__ == "__main__":
    h.run(main)
