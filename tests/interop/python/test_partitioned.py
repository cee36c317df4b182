"""Partitioned topics and namespaces with the stock Python client (C++ client underneath).

* Shared across partitions: a topic created with 3 partitions through the admin API; a producer
  routing round robin sends 60 messages; two Shared consumers of the topic receive each once,
  from all 3 partitions.
* Key_Shared across partitions: 4 partitions, two Key_Shared consumers (a client each), 400
  keyed messages over 20 keys (the client routes a key to one partition): every message is
  processed once, each key in publish order; the admin API's partitioned stats count all 400.
* Created on first use: a broker started with `--allow-auto-topic-creation-type partitioned
  --default-num-partitions 3` makes a fresh name a topic of 3 partitions.
* A topic needs its namespace: a producer in a namespace that does not exist fails at once (not
  after the client's operation timeout); once the namespace is created it succeeds.
"""

import threading
import time

import pulsar

import harness as h
import restartable as r

KEYS = 20
PER_KEY = 20


def shared_across_partitions(b, cl):
    t = h.unique_topic("part-shared")
    status, text = r.http("PUT", r.topic_path(b.admin_url, t) + "/partitions", "3")
    h.check(status == 204, f"PUT …/partitions 3: HTTP {status} {text[:200]}")
    h.check(len(cl.get_topic_partitions(t)) == 3, f"partitions: {cl.get_topic_partitions(t)}")
    consumers = [
        cl.subscribe(
            t,
            "sub",
            consumer_type=pulsar.ConsumerType.Shared,
            consumer_name=f"c{i}",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        for i in range(2)
    ]
    p = cl.create_producer(
        t,
        batching_enabled=False,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    for i in range(60):
        p.send(f"m{i}".encode())
    p.close()
    got = []
    d = h.Deadline(15)
    while len(got) < 60 and not d.expired():
        for c in consumers:
            m = h.receive_or_none(c, 50)
            if m is not None:
                got.append((m.data().decode(), m.topic_name()))
                c.acknowledge(m)
    for c in consumers:
        got += [(m.data().decode(), m.topic_name()) for m in h.drain(c, 300)]
        c.close()
    payloads = sorted(x for x, _ in got)
    partitions = {topic for _, topic in got}
    h.check(payloads == sorted(f"m{i}" for i in range(60)), f"received {len(got)}: {payloads[:10]}…")
    h.check(len(partitions) == 3, f"from partitions {sorted(partitions)}")
    return len(got)


def key_shared_across_partitions(b):
    t = h.unique_topic("part-ks")
    status, text = r.http("PUT", r.topic_path(b.admin_url, t) + "/partitions", "4")
    h.check(status == 204, f"PUT …/partitions 4: HTTP {status} {text[:200]}")
    log = h.ProcessingLog()
    clients = [h.client(b.service_url) for _ in range(3)]
    consumers = [
        clients[i].subscribe(
            t,
            "ks",
            consumer_type=pulsar.ConsumerType.KeyShared,
            consumer_name=f"c{i}",
            receiver_queue_size=10,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        for i in range(2)
    ]
    total = KEYS * PER_KEY
    errors = []

    def consume(i):
        d = h.Deadline(30)
        try:
            while len(log) < total and not d.expired():
                m = h.receive_or_none(consumers[i], 100)
                if m is None:
                    continue
                key, seq = m.data().decode().split("#")
                log.record(f"c{i}", key, int(seq), h.msg_key(m), m.redelivery_count())
                consumers[i].acknowledge(m)
        except Exception as e:  # noqa: BLE001
            errors.append(f"c{i}: {e!r}")

    threads = [threading.Thread(target=consume, args=(i,), daemon=True) for i in range(2)]
    for th in threads:
        th.start()
    p = clients[2].create_producer(t, batching_enabled=False)
    for s in range(PER_KEY):
        for k in range(KEYS):
            p.send_async(f"key-{k}#{s}".encode(), None, partition_key=f"key-{k}")
    p.flush()
    p.close()
    for th in threads:
        th.join()
    log.write()
    h.check(not errors, f"consumer errors: {errors}")
    first, again = h.check_key_order(log.snapshot(), {f"key-{k}": PER_KEY for k in range(KEYS)})
    h.check(again == 0, f"{again} messages processed twice")
    owners = {}
    for _, c, k, _, _, _ in log.snapshot():
        owners.setdefault(k, set()).add(c)
    shared_keys = [k for k, cs in owners.items() if len(cs) > 1]
    h.check(not shared_keys, f"keys processed by both consumers: {shared_keys}")
    stats = r.admin_json("GET", r.topic_path(b.admin_url, t) + "/partitioned-stats")
    h.check(stats["metadata"]["partitions"] == 4, f"partitioned stats: {stats['metadata']}")
    h.check(stats["msgInCounter"] == total, f"partitioned stats count {stats['msgInCounter']} in")
    for c in consumers:
        c.close()
    for c in clients:
        c.close()
    return first


def created_on_first_use():
    with h.Broker("auto", ["--allow-auto-topic-creation-type", "partitioned", "--default-num-partitions", "3"]) as b:
        cl = h.client(b.service_url)
        t = h.unique_topic("part-auto")
        parts = cl.get_topic_partitions(t)
        h.check(len(parts) == 3, f"a topic created on first use has partitions {parts}")
        c = cl.subscribe(t, "s", initial_position=pulsar.InitialPosition.Earliest)
        p = cl.create_producer(t, batching_enabled=False)
        p.send(b"hello")
        m = c.receive(timeout_millis=5000)
        h.check(m.data() == b"hello" and m.topic_name() in parts, f"got {m.data()} from {m.topic_name()}")
        c.acknowledge(m)
        got = r.admin_json("GET", r.topic_path(b.admin_url, t) + "/partitions")
        h.check(got["partitions"] == 3, f"GET …/partitions: {got}")
        cl.close()


def namespace_must_exist(b, cl):
    t = "persistent://public/no-such-ns/t"
    started = time.monotonic()
    try:
        cl.create_producer(t).close()
        raise h.ScenarioFailure("a producer in a namespace that does not exist was created")
    except pulsar.PulsarException as e:
        refused = f"{type(e).__name__}: {e}"
    took = time.monotonic() - started
    h.check(took < 4, f"the refusal took {took:.1f} s (the client's operation timeout is 5 s)")
    status, text = r.http("PUT", f"{b.admin_url}/admin/v2/namespaces/public/no-such-ns")
    h.check(status == 204, f"PUT namespace: HTTP {status} {text[:200]}")
    cl.create_producer(t).close()
    return refused, took


def main():
    with h.Broker("broker") as b:
        cl = h.client(b.service_url)
        shared = shared_across_partitions(b, cl)
        ks = key_shared_across_partitions(b)
        refused, took = namespace_must_exist(b, cl)
        cl.close()
    created_on_first_use()
    return (
        f"partitioned: Shared got {shared} of 60 from 3 partitions; Key_Shared {ks} of "
        f"{KEYS * PER_KEY} in key order over 4 partitions; missing namespace refused in "
        f"{took * 1000:.0f} ms ({refused}); auto-created with 3 partitions"
    )


if __name__ == "__main__":
    h.run(main)
