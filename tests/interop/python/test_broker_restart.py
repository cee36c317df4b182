"""Broker restart with --data-dir: what a stock client sees after a SIGTERM and after a kill -9.

Brokers A, B and C run one after another on the same data directory; the whole sequence runs
once with `--sync always` and once with `--sync interval`.
* A: a Shared subscription `sub` and a Key_Shared subscription `ks` exist before 100 messages
  (10 keys) are sent; `sub` receives all 100 and acks m0..m39; `ks` acks nothing. SIGTERM.
* B (recovered): `sub` gets exactly m40..m99 and acks m40..m69; `ks` gets all 100 intact, in
  per-key order, and acks them. 1.5 s later (cursors are saved every second), 20 more messages
  are sent, each receipted, and B is killed with SIGKILL.
* C (recovered after the kill): `sub` gets m70..m119, the 20 receipted just before the kill
  included; a copy of m40..m69 is tolerated (acks of the last second before a kill may be
  redelivered) and counted. `ks` gets m100..m119 in per-key order. The new messages are in a new
  ledger (no position reused). Recovery time (exec to the service URL) is reported. Under
  `interval` too, a kill -9 (unlike a machine crash) must lose no receipted message.

Skipped (exit 77) when the broker has no durability (`--sync` missing from its --help).
"""

import os
import time

import pulsar

import harness as h

KEYS = 10


def payload(i):
    return f"k{i % KEYS}#{i // KEYS}#".encode() + bytes([i % 251]) * 300


def subscribe(cl, topic, name, kind):
    return cl.subscribe(topic, name, consumer_type=kind, initial_position=pulsar.InitialPosition.Earliest)


def index(m):
    d = m.data()
    k, s, _ = d.split(b"#", 2)
    i = int(s) * KEYS + int(k[1:])
    h.check(d == payload(i), f"message {i}: payload differs after recovery")
    return i


def close_after_kill(cl):
    """Closes a client whose broker was just killed: the client may already have seen its
    connection drop, and then reports NotConnected; any other error is a failure."""
    try:
        cl.close()
    except Exception as e:  # the C++ client's exceptions have no common Python base
        if "NotConnected" not in f"{type(e).__name__} {e}":
            raise


def per_key_order(idx, what):
    last = {}
    for i in idx:
        k, s = i % KEYS, i // KEYS
        h.check(s > last.get(k, -1), f"{what}: k{k}#{s} after k{k}#{last.get(k)}")
        last[k] = s


def main():
    if not h.broker_supports("--sync"):
        raise h.Skip("this broker keeps nothing across restarts (no --sync in its --help)")
    parts = [one_mode(mode) for mode in ("always", "interval")]
    return "restart: 120 sent, 3 brokers on one --data-dir; " + "; ".join(parts)


def one_mode(mode):
    data = os.path.join(h.log_dir(), f"data-{mode}")
    args = ["--data-dir", data, "--sync", mode]
    topic = h.unique_topic(f"restart-{mode}")

    with h.Broker(f"broker-a-{mode}", args) as a:
        cl = h.client(a.service_url)
        sub = subscribe(cl, topic, "sub", pulsar.ConsumerType.Shared)
        ks = subscribe(cl, topic, "ks", pulsar.ConsumerType.KeyShared)
        p = cl.create_producer(topic, batching_enabled=False)
        first_ids = [p.send(payload(i), partition_key=f"k{i % KEYS}") for i in range(100)]
        got = h.receive_n(sub, 100)
        h.check(sorted(index(m) for m in got) == list(range(100)), f"A: sub got {len(got)} of 100")
        for m in got:
            if index(m) < 40:
                sub.acknowledge(m)
        cl.close()  # flushes the grouped acks
    h.check(a.exit_code == 0, f"A exited with {a.exit_code}")

    b = h.Broker(f"broker-b-{mode}", args).start()
    try:
        cl = h.client(b.service_url)
        sub = subscribe(cl, topic, "sub", pulsar.ConsumerType.Shared)
        got = h.receive_n(sub, 60, quiet_ms=500)
        idx = sorted(index(m) for m in got)
        h.check(idx == list(range(40, 100)), f"B after SIGTERM: sub got {len(idx)} ({idx[:3]}…), expected m40..m99")
        for m in got:
            if index(m) < 70:
                sub.acknowledge(m)
        ks = subscribe(cl, topic, "ks", pulsar.ConsumerType.KeyShared)
        kgot = h.receive_n(ks, 100, quiet_ms=500)
        kidx = [index(m) for m in kgot]
        h.check(sorted(kidx) == list(range(100)), f"B: ks got {len(kidx)} of 100")
        per_key_order(kidx, "B: ks")
        for m in kgot:
            ks.acknowledge(m)
        time.sleep(1.5)  # the acks reach the broker and a cursor save
        p = cl.create_producer(topic, batching_enabled=False)
        late_ids = [p.send(payload(i), partition_key=f"k{i % KEYS}") for i in range(100, 120)]
        b.kill()  # no graceful shutdown: every receipted message must survive
        close_after_kill(cl)
    finally:
        b.kill()

    with h.Broker(f"broker-c-{mode}", args) as c:
        cl = h.client(c.service_url)
        sub = subscribe(cl, topic, "sub", pulsar.ConsumerType.Shared)
        got = h.receive_n(sub, 50, quiet_ms=500)
        idx = sorted(index(m) for m in got)
        must = set(range(70, 120))
        h.check(must <= set(idx), f"C after kill -9: sub is missing {sorted(must - set(idx))[:5]}")
        h.check(set(idx) <= set(range(40, 120)) and len(idx) == len(set(idx)),
                f"C: sub got unexpected or duplicate messages: {idx}")
        again = len(idx) - len(must)
        for m in got:
            sub.acknowledge(m)
        ks = subscribe(cl, topic, "ks", pulsar.ConsumerType.KeyShared)
        kgot = h.receive_n(ks, 20, quiet_ms=500)
        kidx = [index(m) for m in kgot]
        h.check(set(range(100, 120)) <= set(kidx), f"C: ks is missing some of m100..m119: {sorted(kidx)}")
        per_key_order(kidx, "C: ks")
        for m in kgot:
            ks.acknowledge(m)
        h.check(late_ids[0].ledger_id() > first_ids[-1].ledger_id(),
                f"positions reused: {late_ids[0]} after {first_ids[-1]}")
        cl.close()
    return (
        f"--sync {mode}: after SIGTERM sub 60/60, ks 100 in key order; after kill -9 sub "
        f"{len(idx)} (50 unacked + {again} re-sent), ks {len(kidx)}; recovery "
        f"{b.startup_ms:.0f}/{c.startup_ms:.0f} ms"
    )


if __name__ == "__main__":
    h.run(main)
