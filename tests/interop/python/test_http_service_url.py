"""A client given the web URL (`http://…`) looks topics up over HTTP.

The stock client with the admin URL as its service URL asks `GET /lookup/v2/topic/…` for the
broker, `GET /admin/v2/…/partitions?checkAllowAutoCreation=true` for partitions and
`GET /admin/v2/namespaces/…/topics` for a pattern subscription, then speaks the binary
protocol to the broker URL it was given.

1. A non-partitioned topic created on first use: 10 messages produced and consumed.
2. A partitioned topic (3 partitions, made with the admin API): 30 keyed messages reach a
   Key_Shared consumer, every partition used.
3. A pattern subscription over the namespace finds both topics' names and gets a message sent
   after it subscribed.
4. A topic in a namespace that does not exist fails with an error within the operation
   timeout, not a hang.
"""

import re

import pulsar

import harness as h
import restartable as r


def main():
    with h.Broker("broker") as b:
        cl = h.client(b.admin_url)

        plain = h.unique_topic("http-plain")
        c = cl.subscribe(plain, "s", consumer_type=pulsar.ConsumerType.Shared)
        p = cl.create_producer(plain, batching_enabled=False)
        for i in range(10):
            p.send(f"m{i}".encode())
        got = h.receive_n(c, 10)
        h.check(sorted(m.data() for m in got) == sorted(f"m{i}".encode() for i in range(10)),
                f"plain topic over HTTP lookup: got {[m.data() for m in got]}")
        for m in got:
            c.acknowledge(m)

        parted = h.unique_topic("http-parted")
        status, text = r.http("PUT", r.topic_path(b.admin_url, parted) + "/partitions", "3")
        h.check(status in (200, 204), f"create 3 partitions: HTTP {status} {text[:200]}")
        kc = cl.subscribe(parted, "ks", consumer_type=pulsar.ConsumerType.KeyShared)
        kp = cl.create_producer(parted, batching_enabled=False)
        for i in range(30):
            kp.send(f"k{i}".encode(), partition_key=f"key-{i}")
        kgot = h.receive_n(kc, 30)
        partitions = {m.topic_name().rsplit("-partition-", 1)[-1] for m in kgot}
        h.check(len(kgot) == 30, f"partitioned topic over HTTP lookup: {len(kgot)} of 30")
        h.check(partitions == {"0", "1", "2"}, f"partitions used: {sorted(partitions)}")
        for m in kgot:
            kc.acknowledge(m)

        ns = plain.rsplit("/", 1)[0]
        pattern = re.compile(re.escape(ns) + "/http-plain-.*")
        pc = cl.subscribe(pattern, "pattern", consumer_type=pulsar.ConsumerType.Shared,
                          initial_position=pulsar.InitialPosition.Latest)
        p.send(b"after-pattern")
        m = h.receive_or_none(pc, 5000)
        h.check(m is not None and m.data() == b"after-pattern",
                f"pattern subscription over HTTP: got {m and m.data()}")
        pc.acknowledge(m)

        refused = None
        try:
            cl.create_producer("persistent://public/no-such-namespace/t")
        except Exception as e:  # the client's error type for a 404 lookup
            refused = type(e).__name__
        h.check(refused is not None, "a producer in a missing namespace was created")
        cl.close()
    return (f"over {b.admin_url}: 10 on a plain topic, 30 keyed on 3 partitions, a pattern "
            f"subscription, a missing namespace refused ({refused})")


if __name__ == "__main__":
    h.run(main)
