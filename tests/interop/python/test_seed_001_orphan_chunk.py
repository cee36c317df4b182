"""Seed 001: on Shared, a chunked message whose first chunk was acknowledged before a broker
restart. Its later chunks have no message start any more; Pulsar replays them forever and the
subscription stalls (`--legacy orphan-chunk-replay` shows that). Ours dispatches them once,
with a WARN, counts them (`orphanChunksDispatched`, `keyordered_subscription_orphan_chunks_total`)
and keeps delivering.

How the state is produced with a stock client (which acks a chunked message as a whole, all
chunk ids at once, so it cannot ack chunk 0 alone):
  1. broker with `--data-dir` and `--max-message-size 10240`; a Shared consumer subscribes
     (this creates the durable subscription) and closes again, so nothing is dispatched;
  2. a producer (chunking on, batching off) sends one 25,600 B message: 3 chunks, the
     topic's entries 0, 1, 2; no consumer receives them;
  3. `POST …/subscription/sh/skip/1` moves mark-delete past entry 0 exactly as an ack of chunk 0
     would (checked in internalStats: mark-delete at entry 0 of that ledger);
  4. the broker is stopped (SIGTERM: cursors persisted) and started again on the same dir and
     ports;
  5. a Shared consumer subscribes and 5 plain messages are produced.
Ours: the 5 plain messages arrive (the client drops the incomplete chunked message), stats and
metrics count at least one orphan chunk. Legacy: none of the 5 arrives within 4 s.
The script passes only if both hold.
"""

import hashlib
import re
import time
import shutil
import tempfile

import pulsar

import harness as h
import restartable as r

CHUNKED = 25600
PLAIN = 5
LEGACY_WAIT_S = 4.0


def body(n):
    out = b""
    i = 0
    while len(out) < n:
        out += hashlib.sha256(f"chunk-{i}".encode()).digest()
        i += 1
    return out[:n]


def run_case(legacy):
    name = "legacy" if legacy else "ours"
    data = tempfile.mkdtemp(prefix=f"seed001-{name}-", dir=h.log_dir())
    args = ["--max-message-size", "10240"]
    if legacy:
        args += ["--legacy", "orphan-chunk-replay"]
    topic = h.unique_topic(f"seed001-{name}")
    out = {"name": name}
    try:
        with r.RestartableBroker(f"broker-{name}", data, args) as b:
            tp = r.topic_path(b.admin_url, topic)
            cl = h.client(b.service_url)
            c = cl.subscribe(topic, "sh", consumer_type=pulsar.ConsumerType.Shared,
                             initial_position=pulsar.InitialPosition.Earliest)
            c.close()
            p = cl.create_producer(topic, chunking_enabled=True, batching_enabled=False)
            mid = p.send(body(CHUNKED))
            p.close()
            cl.close()
            st = r.admin_json("GET", f"{tp}/internalStats")
            h.check(st.get("entriesAddedCounter") == 3,
                    f"{name}: expected 3 chunk entries, internalStats says {st.get('entriesAddedCounter')}")
            r.admin_post(f"{tp}/subscription/sh/skip/1")
            st = r.admin_json("GET", f"{tp}/internalStats")
            md = st["cursors"]["sh"]["markDeletePosition"]
            h.check(md.endswith(":0"), f"{name}: mark-delete {md} after skip/1, expected entry 0")
            out["mark_delete"] = md
            out["chunked_id"] = str(mid)
            b.stop_and_start()
            cl = h.client(b.service_url)
            c = cl.subscribe(topic, "sh", consumer_type=pulsar.ConsumerType.Shared,
                             initial_position=pulsar.InitialPosition.Earliest)
            p = cl.create_producer(topic, batching_enabled=False)
            for i in range(PLAIN):
                p.send(f"m{i}".encode())
            got = []
            d = h.Deadline(LEGACY_WAIT_S if legacy else 8.0)
            while not d.expired() and len(got) < PLAIN:
                m = h.receive_or_none(c, d.left_ms(200))
                if m is None:
                    continue
                got.append(m.data())
                c.acknowledge(m)
            out["plain"] = sum(1 for x in got if x.startswith(b"m") and len(x) < 10)
            out["other"] = len(got) - out["plain"]
            time.sleep(0.5)  # the client's grouped acks (100 ms) reach the broker
            stats = r.admin_json("GET", f"{tp}/stats")
            out["orphans"] = stats["subscriptions"]["sh"].get("orphanChunksDispatched", 0)
            out["backlog"] = stats["subscriptions"]["sh"].get("msgBacklog")
            _, metrics = r.http("GET", f"{b.admin_url}/metrics")
            vals = [float(x) for x in re.findall(
                r'^keyordered_subscription_orphan_chunks_total\{[^}]*subscription="sh"[^}]*\}\s+(\S+)',
                metrics, re.M)]
            out["metric"] = max(vals) if vals else None
            c.close()
            p.close()
            cl.close()
    finally:
        shutil.rmtree(data, ignore_errors=True)
    return out


def main():
    ours = run_case(False)
    legacy = run_case(True)
    h.check(ours["plain"] == PLAIN, f"ours: {ours['plain']} of {PLAIN} plain messages arrived "
            f"after the restart (the subscription stalled?) {ours}")
    h.check(ours["other"] == 0, f"ours: the client surfaced {ours['other']} unexpected messages")
    h.check(ours["orphans"] >= 1, f"ours: stats orphanChunksDispatched={ours['orphans']}")
    h.check(ours["metric"] is not None and ours["metric"] >= 1,
            f"ours: /metrics keyordered_subscription_orphan_chunks_total={ours['metric']}")
    h.check(legacy["plain"] == 0, f"legacy: {legacy['plain']} plain messages arrived; "
            f"--legacy orphan-chunk-replay should stall the subscription")
    print(f"ours: {ours}", flush=True)
    print(f"legacy: {legacy}", flush=True)
    return (f"seed 001: 1 chunked msg ({CHUNKED} B, 3 chunks, chunk 0 skipped = acked, restart) + "
            f"{PLAIN} plain; ours delivered {ours['plain']}/{PLAIN}, orphanChunksDispatched="
            f"{ours['orphans']}, metric={ours['metric']:.0f}; legacy delivered "
            f"{legacy['plain']}/{PLAIN} in {LEGACY_WAIT_S:.0f} s (stalled)")


if __name__ == "__main__":
    h.run(main)
