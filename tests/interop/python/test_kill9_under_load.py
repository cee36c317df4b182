"""kill -9 under load: the broker is SIGKILLed at seeded-random moments while two producers and
two subscriptions run, and restarted on the same `--data-dir` and ports; the stock clients
reconnect on their own.

Per sync policy (`--sync always`, then `--sync interval`), one topic:
  * producer P1: 20 keys, batching off, sync `send` in a loop (payload `P1|key|seq`, seq per
    key); producer P2: no key (`P2|-|seq`). `operation_timeout_seconds=30`, so a send waits
    through a restart; a send that raises anyway is recorded as not receipted.
  * subscription `ks`: Key_Shared, 2 consumers; subscription `sh`: Shared, 2 consumers
    (receiver_queue_size 100). Each application logs (sub, consumer, key, seq, msg id,
    redelivery count, time) when it processes a message, then acks it (ack time logged).
  * KILLS SIGKILLs at random moments of the produce phase; each restart follows 0.1-0.5 s later.
  * Then producing stops and both subscriptions are drained until every receipted message was
    processed by each (bounded), plus a quiet second for strays; the backlog must reach 0.
Checks, per subscription:
  * every receipted message processed at least once;
  * every duplicate processing has a cause, compared with the previous processing of the same
    payload: `resend` (the producer re-sent it after a kill: another msg id, Pulsar has no
    dedup by default), `unacked-at-kill` (not acked when the broker died), `acked-while-down`
    (acked after the kill: the ack went nowhere), `ack-not-persisted` (acked within
    PERSIST_WINDOW_S before the kill: cursors are saved every second). A duplicate whose
    previous processing was acked more than PERSIST_WINDOW_S before the kill (a persisted ack
    redelivered) or with no kill in between fails the scenario;
  * Key_Shared per-key order (P1's keys; P2's keyless messages are spread over the consumers,
    as Pulsar hashes `<producer>-<sequence id>` for them): the first processing of each receipted seq of a key comes after
    the first processing of every earlier receipted seq (duplicates as above are allowed).
"""

import os
import random
import shutil
import tempfile
import threading
import time

import pulsar

import harness as h
import restartable as r

SEED = int(os.environ.get("KILL9_SEED", "9"))
KEYS = 20
PRODUCE_S = 8.0
KILLS = 3
PERSIST_WINDOW_S = 2.0
RECONNECT_SLACK_S = 2.0  # after a restart, until which stale queued copies may be processed
SEND_PAUSE_S = 0.002
PROCESS_S = 0.001
POLICIES = ("always", "interval")


def make_client(url):
    path = os.path.join(h.log_dir(), f"client-{os.getpid()}.log")
    global _LOGGER
    if _LOGGER is None:
        _LOGGER = pulsar.FileLogger(pulsar.LoggerLevel.Info, path)
    return pulsar.Client(url, operation_timeout_seconds=30, connection_timeout_ms=2000,
                         logger=_LOGGER)


_LOGGER = None


class Apps:
    def __init__(self):
        self.lock = threading.Lock()
        self.events = []  # dicts: sub, cons, key, seq, mid, rc, t, ack_t
        self.receipted = {}  # (producer, key, seq) -> msg id text
        self.failed_sends = 0
        self.errors = []

    def record(self, ev):
        with self.lock:
            self.events.append(ev)
            return len(self.events) - 1

    def acked(self, i, t):
        with self.lock:
            self.events[i]["ack_t"] = t

    def snapshot(self):
        with self.lock:
            return [dict(e) for e in self.events]


def run_policy(policy, rng):
    data = tempfile.mkdtemp(prefix=f"kill9-{policy}-", dir=h.log_dir())
    apps = Apps()
    stop_produce = threading.Event()
    stop_consume = threading.Event()
    kills = []  # monotonic times of the SIGKILLs
    topic = h.unique_topic(f"kill9-{policy}")
    threads = []
    clients = []
    try:
        with r.RestartableBroker(f"broker-{policy}", data, ["--sync", policy]) as b:
            tp = r.topic_path(b.admin_url, topic)

            def consumer_app(sub, kind, name, ready):
                try:
                    cl = make_client(b.service_url)
                    clients.append(cl)
                    cons = cl.subscribe(topic, sub, consumer_type=kind, consumer_name=name,
                                        receiver_queue_size=100,
                                        initial_position=pulsar.InitialPosition.Earliest)
                    ready.set()
                    d = h.Deadline(60)
                    while not d.expired() and not stop_consume.is_set():
                        m = h.receive_or_none(cons, 100)
                        if m is None:
                            continue
                        prod, key, seq = m.data().decode().split("|")
                        time.sleep(PROCESS_S)
                        i = apps.record({"sub": sub, "cons": name, "p": prod, "key": key,
                                         "seq": int(seq), "mid": str(m.message_id()),
                                         "rc": m.redelivery_count(), "t": time.monotonic(),
                                         "ack_t": None})
                        try:
                            cons.acknowledge(m)
                        except Exception:  # noqa: BLE001 - an ack while disconnected
                            continue
                        apps.acked(i, time.monotonic())
                except Exception as e:  # noqa: BLE001
                    apps.errors.append(f"{name}: {e!r}")
                    ready.set()

            def producer_app(name, keyed):
                try:
                    cl = make_client(b.service_url)
                    clients.append(cl)
                    p = cl.create_producer(topic, producer_name=f"{name}-{policy}-{os.getpid()}",
                                           batching_enabled=False, send_timeout_millis=30000)
                    seqs = {}
                    n = 0
                    while not stop_produce.is_set():
                        key = f"k{n % KEYS}" if keyed else "-"
                        n += 1
                        s = seqs.get(key, 0)
                        seqs[key] = s + 1
                        try:
                            if keyed:
                                mid = p.send(f"{name}|{key}|{s}".encode(), partition_key=key)
                            else:
                                mid = p.send(f"{name}|{key}|{s}".encode())
                        except Exception:  # noqa: BLE001 - not receipted; may still exist
                            with apps.lock:
                                apps.failed_sends += 1
                            continue
                        with apps.lock:
                            apps.receipted[(name, key, s)] = str(mid)
                        time.sleep(SEND_PAUSE_S)
                    p.close()
                except Exception as e:  # noqa: BLE001
                    apps.errors.append(f"{name}: {e!r}")

            for sub, kind in (("ks", pulsar.ConsumerType.KeyShared),
                              ("sh", pulsar.ConsumerType.Shared)):
                for j in (1, 2):
                    ready = threading.Event()
                    t = threading.Thread(target=consumer_app, args=(sub, kind, f"{sub}-{j}", ready),
                                         daemon=True)
                    t.start()
                    threads.append(t)
                    h.check(ready.wait(10), f"{sub}-{j} did not subscribe within 10 s")
            prods = [threading.Thread(target=producer_app, args=(n, k), daemon=True)
                     for n, k in (("P1", True), ("P2", False))]
            for t in prods:
                t.start()
            # Kill moments: KILLS points spread over the produce phase, jittered.
            t0 = time.monotonic()
            slots = PRODUCE_S / (KILLS + 1)
            plan = sorted(slots * (i + 1) + rng.uniform(-0.4, 0.4) * slots for i in range(KILLS))
            downtimes = []
            ups = []  # when each restarted broker printed its URLs
            for at in plan:
                time.sleep(max(0.0, t0 + at - time.monotonic()))
                h.check(not apps.errors, f"application errors: {apps.errors}")
                kills.append(time.monotonic())
                b.kill9()
                down = rng.uniform(0.1, 0.5)
                time.sleep(down)
                b.restart()
                ups.append(time.monotonic())
                downtimes.append(down + b.restart_ms[-1] / 1000.0)
            time.sleep(max(0.0, t0 + PRODUCE_S - time.monotonic()))
            stop_produce.set()
            for t in prods:
                t.join(40)
                h.check(not t.is_alive(), "a producer did not stop within 40 s")
            h.check(not apps.errors, f"application errors: {apps.errors}")
            with apps.lock:
                want = set(apps.receipted)

            def missing(sub):
                got = {(e["p"], e["key"], e["seq"]) for e in apps.snapshot() if e["sub"] == sub}
                return want - got

            h.wait_until(lambda: not missing("ks") and not missing("sh"), 20,
                         "every receipted message processed by both subscriptions "
                         f"(ks missing {len(missing('ks'))}, sh missing {len(missing('sh'))})")
            time.sleep(1.0)  # strays

            def backlogs():
                st = r.admin_json("GET", f"{tp}/stats")
                return {s: st["subscriptions"][s]["msgBacklog"] for s in ("ks", "sh")}

            try:
                h.wait_until(lambda: all(v == 0 for v in backlogs().values()), 8,
                             "both subscriptions' backlog at 0")
            except h.ScenarioFailure:
                raise h.ScenarioFailure(f"backlog not 0 after the drain: {backlogs()}") from None
            stop_consume.set()
            for t in threads:
                t.join(10)
            for cl in clients:
                try:
                    cl.close()
                except Exception:  # noqa: BLE001
                    pass
            h.check(not apps.errors, f"application errors: {apps.errors}")
            restart_ms = list(b.restart_ms)
    finally:
        stop_produce.set()
        stop_consume.set()
        shutil.rmtree(data, ignore_errors=True)
    return analyse(policy, apps, kills, ups, restart_ms, downtimes, want)


def analyse(policy, apps, kills, ups, restart_ms, downtimes, want):
    events = apps.snapshot()
    with open(os.path.join(h.log_dir(), f"processing-{policy}.log"), "w") as f:
        for e in events:
            f.write(f"{e['t']:.3f}\t{e['sub']}\t{e['cons']}\t{e['p']}|{e['key']}|{e['seq']}\t"
                    f"{e['mid']}\trc={e['rc']}\tack={e['ack_t']}\n")
        f.write(f"kills {kills}\n")
    causes = {}
    bad = []
    max_lag = 0.0  # the oldest lost ack, seconds before its kill
    per_sub = {}
    for sub in ("ks", "sh"):
        evs = [e for e in events if e["sub"] == sub]
        per_sub[sub] = len(evs)
        last = {}
        for e in evs:
            pl = (e["p"], e["key"], e["seq"])
            prev = last.get(pl)
            last[pl] = e
            if prev is None:
                continue
            # The kill that explains it: one between the two processings, or one just before
            # both when the previous copy came from the dead broker's deliveries still in the
            # client's receive queue (processed before the consumer had reconnected).
            kill = next((k for k in kills if prev["t"] < k < e["t"]), None)
            if kill is None:
                kill = next((k for k, up in zip(kills, ups)
                             if k < prev["t"] <= up + RECONNECT_SLACK_S), None)
            if e["mid"] != prev["mid"]:
                cause = "resend"
            elif kill is None:
                cause = "redelivered" if e["rc"] > 0 else None
            elif prev["ack_t"] is None:
                cause = "unacked-at-kill"
            elif prev["ack_t"] >= kill:
                cause = "acked-while-down"
            elif kill - prev["ack_t"] <= PERSIST_WINDOW_S:
                cause = "ack-not-persisted"
                max_lag = max(max_lag, kill - prev["ack_t"])
            else:
                cause = None
            if cause is None:
                if prev["ack_t"] is None:
                    when = "never acked"
                elif kill is None:
                    when = "acked, no kill since"
                else:
                    when = f"acked {kill - prev['ack_t']:.2f} s before the kill"
                bad.append(f"{sub}: {pl} ({e['mid']}) processed again by {e['cons']} "
                           f"rc={e['rc']} (previous by {prev['cons']}, {when})")
            else:
                causes[f"{sub}:{cause}"] = causes.get(f"{sub}:{cause}", 0) + 1
    h.check(not bad, f"{policy}: {len(bad)} unexplained duplicates, e.g. {bad[:3]}")
    # Key_Shared per-key order over first processings (receipted seqs only).
    by_key = {}
    for p, k, s in want:
        if p != "P1":
            continue  # P2's messages have no key: Pulsar hashes "<producer>-<sequence id>"
        by_key.setdefault((p, k), []).append(s)
    for v in by_key.values():
        v.sort()
    pos = {pk: 0 for pk in by_key}
    for e in (e for e in events if e["sub"] == "ks" and e["p"] == "P1"):
        pk = (e["p"], e["key"])
        seqs = by_key.get(pk, [])
        i = pos.get(pk, 0)
        if i < len(seqs) and e["seq"] == seqs[i]:
            pos[pk] = i + 1
        elif i < len(seqs) and e["seq"] > seqs[i]:
            raise h.ScenarioFailure(
                f"{policy}: ks: {pk[0]}|{pk[1]}|{e['seq']} ({e['mid']}) first processed by "
                f"{e['cons']} before {pk[1]}#{seqs[i]} (per-key order broken)")
    dups = sum(causes.values())
    return {
        "policy": policy, "restarts": len(kills), "receipted": len(want),
        "failed_sends": apps.failed_sends, "processed": per_sub, "dups": dups,
        "causes": causes, "restart_ms": [round(x) for x in restart_ms],
        "down_s": [round(x, 2) for x in downtimes], "max_lag": round(max_lag, 2),
    }


def main():
    rng = random.Random(SEED)
    res = [run_policy(p, rng) for p in POLICIES]
    for x in res:
        print(x, flush=True)
    parts = []
    for x in res:
        c = ", ".join(f"{k}={v}" for k, v in sorted(x["causes"].items())) or "none"
        parts.append(f"--sync {x['policy']}: {x['restarts']} kill -9s (down "
                     f"{'/'.join(str(d) for d in x['down_s'])} s), {x['receipted']} receipted "
                     f"({x['failed_sends']} sends failed), processed ks={x['processed']['ks']} "
                     f"sh={x['processed']['sh']}, {x['dups']} dups ({c}; oldest lost ack "
                     f"{x['max_lag']} s before its kill)")
    return f"kill9 (seed {SEED}): " + "; ".join(parts)


if __name__ == "__main__":
    h.run(main)
