"""Protocol features around the messages, on one broker.

* Pattern subscription: `subscribe(re.compile(...))` over two matching topics (and one that does
  not match) gets the messages of both; the client asks GET_TOPICS_OF_NAMESPACE.
* Failover: of two consumers one gets everything; when it closes, the other gets its unacked
  messages in order.
* Access modes: beside an Exclusive producer, a second Exclusive one is refused with
  `ProducerFenced` and a Shared one with `ProducerBusy`; after it closes a new one is accepted.
* Non-persistent topics: a producer and a consumer are refused with `TopicNotFound` in under 2 s.
* A terminated topic (admin `terminate`): the open producer's send and a new producer are refused
  with `TopicTerminated`; the consumer still gets what was published before.
* A dead-letter policy with `initial_subscription_name`: the client's dead-letter producer asks
  for that subscription with the producer, so the dead letter is kept for a consumer that
  subscribes afterwards at the default position (latest).
* A subscription's type: while a Shared consumer is connected, an Exclusive subscribe to it is
  refused with `ConsumerBusy`; once it closed, the Exclusive subscribe is accepted and gets only
  the unacked messages (the cursor is kept).
* Deduplication, turned on by a namespace policy (`POST …/namespaces/public/dedup/deduplication`):
  a named producer sends sequence ids 0..4 and closes; the same name again is told
  `last_sequence_id()` 4; its re-send of sequence id 3 is not stored; the consumer gets m0..m5
  once each.
"""

import json
import re
import time

import pulsar

import harness as h
import restartable as r


def main():
    with h.Broker("broker") as b:
        cl = h.client(b.service_url)

        stem = h.unique_topic("pattern")
        for suffix in ("-a", "-b", "other"):
            p = cl.create_producer(stem + suffix, batching_enabled=False)
            p.send(suffix.encode())
            p.close()
        c = cl.subscribe(
            re.compile(re.escape(stem) + "-.*"),
            "pat",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        pattern_got = sorted(m.data().decode() for m in h.receive_n(c, 2, deadline_s=8, quiet_ms=500))
        h.check(pattern_got == ["-a", "-b"], f"pattern consumer got {pattern_got}, expected ['-a', '-b']")
        c.close()

        # Failover: one consumer (the broker's pick) is active and gets all 10, the other none.
        # When the active one closes with 5 unacked, the other gets those 5, in order.
        t = h.unique_topic("failover")
        fo = [
            cl.subscribe(
                t,
                "fo",
                consumer_type=pulsar.ConsumerType.Failover,
                consumer_name=name,
                initial_position=pulsar.InitialPosition.Earliest,
            )
            for name in ("a", "z")
        ]
        p = cl.create_producer(t, batching_enabled=False)
        for i in range(10):
            p.send(f"m{i}".encode())
        got = [h.drain(c, 500, deadline_s=5) for c in fo]
        h.check(
            sorted(len(g) for g in got) == [0, 10],
            f"Failover: the consumers got {len(got[0])} and {len(got[1])}; expected all 10 on one",
        )
        i = 0 if got[0] else 1
        active, standby, got_active = fo[i], fo[1 - i], got[i]
        for m in got_active[:5]:
            active.acknowledge(m)
        active.close()
        rest = [m.data().decode() for m in h.receive_n(standby, 5, deadline_s=8, quiet_ms=300)]
        want = [f"m{i}" for i in range(5, 10)]
        h.check(rest == want, f"Failover: after the active consumer closed the standby got {rest}, expected {want}")
        standby.close()
        p.close()

        # Access modes: with an Exclusive producer connected, a second Exclusive one is fenced
        # and a Shared one is busy; after it closes, a new Exclusive one is accepted.
        t = h.unique_topic("exclusive")
        first = cl.create_producer(t, access_mode=pulsar.ProducerAccessMode.Exclusive)
        refusals = []
        for mode, want in (
            (pulsar.ProducerAccessMode.Exclusive, pulsar.ProducerFenced),
            (pulsar.ProducerAccessMode.Shared, pulsar.ProducerBusy),
        ):
            try:
                cl.create_producer(t, access_mode=mode).close()
                refusals.append(None)
            except want as e:
                refusals.append(type(e).__name__)
        h.check(None not in refusals, f"access modes: beside an Exclusive producer the refusals were {refusals}")
        first.close()
        cl.create_producer(t, access_mode=pulsar.ProducerAccessMode.Exclusive).close()

        # Non-persistent topics are not served: refused with TopicNotFound at once (the C++
        # client retries InvalidTopicName until its operation timeout).
        np_topic = "non-persistent://public/default/" + h.unique_topic("np").rsplit("/", 1)[1]
        np_refusals = []
        for what, op in (
            ("producer", lambda: cl.create_producer(np_topic)),
            ("consumer", lambda: cl.subscribe(np_topic, "s")),
        ):
            t0 = time.monotonic()
            try:
                op().close()
                np_refusals.append(f"{what} accepted")
            except pulsar.TopicNotFound:
                ms = (time.monotonic() - t0) * 1000
                h.check(ms < 2000, f"non-persistent {what}: refused after {ms:.0f} ms")
                np_refusals.append(f"{what} refused in {ms:.0f} ms")
        h.check(all("refused" in r for r in np_refusals), f"non-persistent topic: {np_refusals}")

        # A terminated topic: the open producer's send and a new producer are refused
        # (TopicTerminated); the consumer still gets what was published before.
        t = h.unique_topic("terminated")
        tc = cl.subscribe(t, "s", initial_position=pulsar.InitialPosition.Earliest)
        tp = cl.create_producer(t, batching_enabled=False)
        tp.send(b"before")
        status, text = r.http("POST", r.topic_path(b.admin_url, t) + "/terminate")
        h.check(status == 200 and "entryId" in text, f"terminate: {status} {text}")
        terminated = []
        for what, op in (("send", lambda: tp.send(b"after")), ("producer", lambda: cl.create_producer(t).close())):
            try:
                op()
                terminated.append(f"{what} accepted")
            except pulsar.TopicTerminated:
                terminated.append(f"{what} refused")
        h.check(terminated == ["send refused", "producer refused"], f"terminated topic: {terminated}")
        m = h.receive_or_none(tc, 3000)
        h.check(m is not None and m.data() == b"before", "the consumer lost the message before termination")
        tc.acknowledge(m)
        tc.close()

        # A dead letter kept for the dead-letter policy's initial subscription.
        t = h.unique_topic("dlq-init")
        dc = cl.subscribe(t, "sub", consumer_type=pulsar.ConsumerType.Shared,
                          negative_ack_redelivery_delay_ms=100,
                          dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(
                              max_redeliver_count=1, dead_letter_topic=t + "-dlq",
                              initial_subscription_name="init"))
        dp = cl.create_producer(t, batching_enabled=False)
        dp.send(b"poison")
        deliveries = 0
        d = h.Deadline(10)
        while deliveries < 2 and not d.expired():
            m = h.receive_or_none(dc, 500)
            if m is not None:
                deliveries += 1
                dc.negative_acknowledge(m)
        h.check(deliveries == 2, f"dead letter: the message was delivered {deliveries} times, expected 2")

        def dead_letter_written():
            status, text = r.http("GET", r.topic_path(b.admin_url, t + "-dlq") + "/stats")
            return status == 200 and json.loads(text).get("msgInCounter", 0) >= 1

        h.wait_until(dead_letter_written, 10, "the dead letter on " + t + "-dlq")
        status, text = r.http("GET", r.topic_path(b.admin_url, t + "-dlq") + "/subscriptions")
        h.check(status == 200 and "init" in json.loads(text),
                f"the dead-letter producer's initial subscription was not created: {status} {text}")
        init = cl.subscribe(t + "-dlq", "init", consumer_type=pulsar.ConsumerType.Shared)
        m = h.receive_or_none(init, 3000)
        h.check(m is not None and m.data() == b"poison",
                f"the initial subscription did not get the dead letter: {m and m.data()!r}")
        init.acknowledge(m)
        for c in (init, dc, dp):
            c.close()

        # A subscription changes type once no consumer is connected, keeping its cursor.
        t = h.unique_topic("retype")
        sc = cl.subscribe(t, "s", consumer_type=pulsar.ConsumerType.Shared,
                          initial_position=pulsar.InitialPosition.Earliest)
        sp = cl.create_producer(t, batching_enabled=False)
        for i in range(4):
            sp.send(f"m{i}".encode())
        got = h.receive_n(sc, 4)
        h.check(len(got) == 4, f"subscription type: the Shared consumer got {len(got)} of 4")
        sc.acknowledge(got[0])
        sc.acknowledge(got[1])
        try:
            cl.subscribe(t, "s", consumer_type=pulsar.ConsumerType.Exclusive).close()
            busy = "accepted"
        except pulsar.ConsumerBusy:
            busy = "ConsumerBusy"
        h.check(busy == "ConsumerBusy", f"subscription type: an Exclusive subscribe beside a Shared consumer was {busy}")
        sc.close()  # flushes the acks
        xc = cl.subscribe(t, "s", consumer_type=pulsar.ConsumerType.Exclusive)
        again = [m.data().decode() for m in h.drain(xc, 500, deadline_s=5)]
        want = [m.data().decode() for m in got[2:]]
        h.check(again == want, f"subscription type: after the change the Exclusive consumer got {again}, expected {want}")
        xc.close()
        sp.close()

        # Deduplication by producer name and sequence id, on by the namespace's policy.
        ns = b.admin_url + "/admin/v2/namespaces/public/dedup"
        status, text = r.http("PUT", ns, "{}")
        h.check(status in (200, 204), f"create namespace public/dedup: {status} {text}")
        status, text = r.http("POST", ns + "/deduplication", "true")
        h.check(status in (200, 204), f"deduplication policy: {status} {text}")
        t = h.unique_topic("dedup").replace("/public/default/", "/public/dedup/")
        uc = cl.subscribe(t, "s", initial_position=pulsar.InitialPosition.Earliest)
        up = cl.create_producer(t, producer_name="dedup-p", batching_enabled=False)
        for i in range(5):
            up.send(f"m{i}".encode(), sequence_id=i)
        up.close()
        up = cl.create_producer(t, producer_name="dedup-p", batching_enabled=False)
        last = up.last_sequence_id()
        h.check(last == 4, f"deduplication: the producer was told last sequence id {last}, expected 4")
        up.send(b"m3", sequence_id=3)
        up.send(b"m5", sequence_id=5)
        deduped = [m.data().decode() for m in h.drain(uc, 500, deadline_s=5)]
        h.check(deduped == [f"m{i}" for i in range(6)], f"deduplication: the consumer got {deduped}")
        up.close()
        uc.close()
        cl.close()
    return (
        f"protocol features: pattern subscription got {len(pattern_got)} of 2; Failover took over with {len(rest)} of 5; "
        f"beside an Exclusive producer: {', '.join(refusals)}; non-persistent: {', '.join(np_refusals)}; "
        f"terminated topic: {', '.join(terminated)}; dead letter kept for the initial subscription; "
        f"subscription type change refused while connected ({busy}), then Exclusive got {again}; "
        f"deduplication: last sequence id {last}, the consumer got {len(deduped)} of 6"
    )


if __name__ == "__main__":
    h.run(main)
