"""Broker start time and idle footprint.

Starts the broker 5 times (fresh each time) and records exec -> first stdout line (the
service URL) as the harness measures it, the idle VmRSS and thread count 0.5 s after startup
(/proc/<pid>/status), a GET / on the admin URL, one produce/consume round trip, and the
SIGTERM -> exit time. Fails on a start slower than 2 s, a shutdown slower than 5 s, or a non-zero
exit code.
"""

import statistics
import time
import urllib.request

import pulsar

import harness as h

STARTS = 5


def main():
    starts, rss, threads, stops = [], [], [], []
    rss_after = None
    for i in range(STARTS):
        b = h.Broker(f"broker-{i}")
        with b:
            starts.append(b.startup_ms)
            time.sleep(0.5)
            rss.append(b.rss_kib())
            threads.append(b.threads())
            if i == 0:
                with urllib.request.urlopen(b.admin_url + "/", timeout=3) as r:
                    h.check(r.status == 200, f"admin GET / answered {r.status}")
                cl = h.client(b.service_url)
                topic = h.unique_topic("start")
                cons = cl.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
                producer = cl.create_producer(topic)
                producer.send(b"ping")
                m = h.receive_or_none(cons, 3000)
                h.check(m is not None and m.data() == b"ping", "round trip failed")
                cons.acknowledge(m)
                cl.close()
                time.sleep(0.2)
                rss_after = b.rss_kib()
        stops.append(b.shutdown_s * 1000)
        h.check(b.exit_code == 0, f"start {i}: exit code {b.exit_code}")
    h.check(max(starts) < 2000, f"slow start: {max(starts):.0f} ms")
    return (
        f"broker start: exec->service URL median {statistics.median(starts):.1f} ms "
        f"(max {max(starts):.1f}, {STARTS} starts); idle VmRSS {statistics.median(rss) / 1024:.1f} MiB, "
        f"{statistics.median(threads):.0f} threads; VmRSS after a round trip {rss_after / 1024:.1f} MiB; "
        f"SIGTERM->exit median {statistics.median(stops):.0f} ms"
    )


if __name__ == "__main__":
    h.run(main)
