"""Storage that refuses writes (a full disk) is survived, not just outlived.

A broker with a data directory and `--fail-writes-while-exists FILE` (while FILE exists, every
write of entries fails as on a full disk). One client, so one connection, holds a Shared
consumer and a producer (batching off, 5 s send timeout) of one topic.

1. 10 messages are sent and receipted.
2. FILE is created. The next send fails, reported to the application with
   `ProducerBlockedQuotaExceededException` (the broker closed the producer after the failed
   write and refuses it while the storage refuses writes), not with a timeout; the client
   backs off.
3. Meanwhile the consumer on the same connection receives and acks the 10 receipted messages;
   the health check answers 500 and the topic's stats count the failed write.
4. FILE is removed. Sends resume by themselves (retried until one is receipted, within 30 s),
   the consumer gets what was receipted after, the health check answers 200 again, and the
   subscription's backlog ends empty: nothing receipted was lost.
"""

import json
import os
import tempfile
import time
import urllib.error
import urllib.request

import pulsar

import harness as h
import restartable as r

RECEIPTED = 10


def health(admin_url):
    try:
        with urllib.request.urlopen(admin_url + "/admin/v2/brokers/health", timeout=3) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


def topic_stats(admin_url, topic):
    url = r.topic_path(admin_url, topic) + "/stats"
    with urllib.request.urlopen(url, timeout=3) as resp:
        return json.load(resp)


def main():
    work = tempfile.mkdtemp(prefix="full-disk-")
    fault = os.path.join(work, "disk-full")
    data = os.path.join(work, "data")
    os.makedirs(data)
    args = ["--data-dir", data, "--fail-writes-while-exists", fault]
    with h.Broker("broker", extra_args=args) as b:
        topic = h.unique_topic("full-disk")
        cl = h.client(b.service_url)
        consumer = cl.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = cl.create_producer(topic, batching_enabled=False, send_timeout_millis=5000)
        for i in range(RECEIPTED):
            producer.send(f"m{i}".encode())

        open(fault, "w").close()
        t0 = time.monotonic()
        try:
            producer.send(b"while-full")
            h.check(False, "a send was receipted while storage refuses writes")
        except pulsar.ProducerBlockedQuotaExceededException:
            refused_s = time.monotonic() - t0
        except pulsar.Timeout:
            h.check(False, "the send timed out instead of being refused")

        got = h.receive_n(consumer, RECEIPTED, quiet_ms=300)
        h.check(sorted(m.data() for m in got) == sorted(f"m{i}".encode() for i in range(RECEIPTED)),
                f"the consumer got {[m.data() for m in got]} while storage refused writes")
        for m in got:
            consumer.acknowledge(m)
        h.check(health(b.admin_url) == 500, "health answered OK while storage refuses writes")
        stats = topic_stats(b.admin_url, topic)
        h.check(stats.get("storageWriteFailures", 0) >= 1, f"no failed write in the stats: {stats}")

        os.remove(fault)
        t1 = time.monotonic()
        resumed = []

        def send_once():
            try:
                producer.send(b"after")
                resumed.append(time.monotonic() - t1)
                return True
            except (pulsar.ProducerBlockedQuotaExceededException, pulsar.Timeout,
                    pulsar.AlreadyClosed, pulsar.ProducerQueueIsFull):
                time.sleep(0.2)
                return False

        h.wait_until(send_once, 30, "a send receipted once the fault file is gone", step=0)
        m = h.receive_or_none(consumer, 5000)
        h.check(m is not None and m.data() == b"after", f"the consumer got {m and m.data()}")
        consumer.acknowledge(m)
        h.check(health(b.admin_url) == 200, "health still failing after a successful write")
        h.wait_until(lambda: topic_stats(b.admin_url, topic)["subscriptions"]["sub"]["msgBacklog"] == 0,
                     5, "an empty backlog")
        cl.close()
    return (
        f"{RECEIPTED} receipted, then refused in {refused_s:.1f} s "
        f"(ProducerBlockedQuotaExceededException), the consumer got all {RECEIPTED} meanwhile, "
        f"health 500; writes resumed {resumed[0]:.1f} s after the fault was removed"
    )


if __name__ == "__main__":
    h.run(main)
