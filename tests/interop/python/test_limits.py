"""Limits: a stalled consumer does not grow the broker without bound or slow others down, and
1,000 connections opened and closed leave no threads or file descriptors behind.

(a) One topic, three subscriptions. `stalled`: a Shared consumer with receiver_queue_size 1000
    whose application never receives or acks. `stalled-socket`: a raw TCP consumer (hand-built
    CONNECT / SUBSCRIBE / FLOW 100,000, SO_RCVBUF 4 KiB) that never reads its socket, so the
    broker's writes to it block. `healthy`: a Shared consumer that receives and
    acks everything. 20,000 messages of 1 KiB are produced (batching off, send_async). Checks:
    the broker's VmRSS (from /proc/<pid>/status) stays under RSS_LIMIT_MIB, sampled throughout;
    a graceful stop (SIGTERM) with the socket consumer still stalled takes under 2 s; the
    healthy consumer keeps up (its lag behind the receipts never exceeds MAX_LAG and it has
    every message within 3 s of the last receipt); the stalled subscription's backlog is all
    20,000 and its consumer was given about receiver_queue_size messages, no more.
(b) A fresh broker: 1,000 raw TCP connections in 10 waves of 100 open at once; each sends the
    C++ client's captured CONNECT frame and reads CONNECTED; then the wave is closed (70 with a
    FIN, 20 with an RST via SO_LINGER 0, 10 right after connecting, before CONNECTED is read).
    Checks: every CONNECT got CONNECTED; the broker's thread and fd counts (from /proc/<pid>)
    return to within a few of their baseline; it still serves a stock produce/consume round
    trip.
"""

import socket
import struct
import threading
import time

import pulsar

import harness as h
import restartable as r

N = 20000
PAYLOAD = 1024
RSS_LIMIT_MIB = 200
MAX_LAG = 5000
WAVES = 10
PER_WAVE = 100
# CONNECT from the C++ client 4.2.0 (crates/wire/tests/frames/produce-frames.hex, line 1).
CONNECT = bytes.fromhex(
    "0000002900000025080212210a1150756c7361722d4350502d76342e322e3020142a046e6f6e65520408011001"
)


def _varint(n):
    out = b""
    while True:
        b7 = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b7 | 0x80])
        else:
            return out + bytes([b7])


def _fv(num, v):
    return _varint(num << 3) + _varint(v)


def _fb(num, b):
    return _varint((num << 3) | 2) + _varint(len(b)) + b


def _frame(cmd):
    return struct.pack(">II", len(cmd) + 4, len(cmd)) + cmd


def raw_subscribe(topic, sub, consumer_id, request_id, name):
    # BaseCommand{type SUBSCRIBE(4), subscribe: {topic, subscription, Shared, ids, name, Earliest}}
    inner = (_fb(1, topic.encode()) + _fb(2, sub.encode()) + _fv(3, 1) + _fv(4, consumer_id)
             + _fv(5, request_id) + _fb(6, name.encode()) + _fv(13, 1))
    return _frame(_fv(1, 4) + _fb(4, inner))


def raw_flow(consumer_id, permits):
    return _frame(_fv(1, 11) + _fb(11, _fv(1, consumer_id) + _fv(2, permits)))


class RawStalled:
    """A consumer that subscribes and grants many permits, then never reads its socket."""

    def __init__(self, port, topic, sub, permits):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.s.settimeout(5)
        self.s.connect(("127.0.0.1", port))
        d = h.Deadline(5)
        self.s.sendall(CONNECT)
        f = read_frame(self.s, d)
        h.check(is_connected(f), f"raw consumer: no CONNECTED ({f[:16].hex()})")
        self.s.sendall(raw_subscribe(topic, sub, 1, 1, "raw-stalled"))
        f = read_frame(self.s, d)
        h.check(f[8:10] == b"\x08\x0d", f"raw consumer: SUBSCRIBE answered {f[:24].hex()}")
        self.s.sendall(raw_flow(1, permits))

    def close(self):
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.s.close()


def rss_mib(pid):
    return r.proc_status(pid, "VmRSS") / 1024.0


def stalled_consumer():
    with h.Broker("broker-a") as b:
        topic = h.unique_topic("limits-stalled")
        tp = r.topic_path(b.admin_url, topic)
        rss0 = rss_mib(b.pid)
        cl = h.client(b.service_url)
        stalled = cl.subscribe(topic, "stalled", consumer_type=pulsar.ConsumerType.Shared,
                               receiver_queue_size=1000)
        port = int(b.service_url.rsplit(":", 1)[1])
        raw = RawStalled(port, topic, "stalled-socket", 100000)
        hc = h.client(b.service_url)
        healthy = hc.subscribe(topic, "healthy", consumer_type=pulsar.ConsumerType.Shared,
                               receiver_queue_size=1000)
        receipts = [0]
        received = [0]
        lag_max = [0]
        rss_max = [rss0]
        done = threading.Event()
        errors = []
        last_receipt_at = [None]

        def on_sent(res, mid):
            if res == pulsar.Result.Ok:
                receipts[0] += 1
                if receipts[0] == N:
                    last_receipt_at[0] = time.monotonic()
            else:
                errors.append(f"send: {res}")

        def consume():
            d = h.Deadline(40)
            while received[0] < N and not d.expired():
                m = h.receive_or_none(healthy, 200)
                if m is None:
                    continue
                received[0] += 1
                healthy.acknowledge(m)
            done.set()

        def sample():
            while not done.is_set():
                rss_max[0] = max(rss_max[0], rss_mib(b.pid))
                lag_max[0] = max(lag_max[0], receipts[0] - received[0])
                time.sleep(0.05)

        ct = threading.Thread(target=consume, daemon=True)
        st = threading.Thread(target=sample, daemon=True)
        ct.start()
        st.start()
        p = cl.create_producer(topic, batching_enabled=False, max_pending_messages=2000,
                               block_if_queue_full=True)
        body = b"x" * PAYLOAD
        t0 = time.monotonic()
        for _ in range(N):
            p.send_async(body, on_sent)
        p.flush()
        produce_s = time.monotonic() - t0
        h.wait_until(lambda: receipts[0] >= N or errors, 10, f"{N} receipts")
        h.check(not errors, f"{errors[:3]}")
        ct.join(30)
        done.set()
        st.join(2)
        finished_at = time.monotonic()
        h.check(received[0] == N, f"healthy consumer received {received[0]} of {N}")
        tail_s = finished_at - (last_receipt_at[0] or finished_at)
        h.check(tail_s < 3.0, f"healthy consumer finished {tail_s:.1f} s after the last receipt")
        h.check(lag_max[0] <= MAX_LAG, f"healthy consumer lagged {lag_max[0]} messages behind")
        time.sleep(0.3)
        stats = r.admin_json("GET", f"{tp}/stats")
        ss = stats["subscriptions"]["stalled"]
        hs = stats["subscriptions"]["healthy"]
        h.check(ss["msgBacklog"] == N, f"stalled backlog {ss['msgBacklog']}, expected {N}")
        given = ss.get("unackedMessages", 0)
        h.check(given <= 1000, f"the stalled consumer was given {given} messages (> 1000 permits)")
        rs = stats["subscriptions"]["stalled-socket"]
        raw_given = rs.get("unackedMessages", 0)
        h.check(rs["msgBacklog"] == N, f"stalled-socket backlog {rs['msgBacklog']}, expected {N}")
        h.check(hs["msgBacklog"] == 0, f"healthy backlog {hs['msgBacklog']}, expected 0")
        rss1 = rss_mib(b.pid)
        rss_max[0] = max(rss_max[0], rss1)
        h.check(rss_max[0] < RSS_LIMIT_MIB,
                f"broker RSS peaked at {rss_max[0]:.0f} MiB (limit {RSS_LIMIT_MIB})")
        p.close()
        stalled.close()
        healthy.close()
        cl.close()
        hc.close()
        # A graceful stop while the socket consumer still does not read: the broker must not
        # wait on it (CLOSE_CONSUMER cannot be written to a full socket).
        b.stop()
        stop_s = b.shutdown_s
        raw.close()
        with open(b.stderr_path) as f:
            stuck = [ln.strip() for ln in f if "did not close" in ln or "still referenced" in ln]
        h.check(b.shutdown_problem is None, f"{b.shutdown_problem}")
        h.check(stop_s < 2.0 and not stuck, f"graceful stop took {stop_s:.1f} s with a peer "
                f"that does not read; broker log: {stuck[:2]}")
    return {"stop_s": stop_s, "rss0": rss0, "rss1": rss1, "rss_max": rss_max[0], "produce_s": produce_s,
            "lag_max": lag_max[0], "tail_s": tail_s, "given": given,
            "rate": N / max(produce_s, 1e-3), "raw_given": raw_given}


def read_frame(s, deadline):
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
        s.settimeout(max(0.01, deadline.left()))
        chunk = s.recv(4096)
        if not chunk:
            raise h.ScenarioFailure("connection closed before CONNECTED")
        buf += chunk
    return buf


def is_connected(frame):
    # [total][cmd size][BaseCommand: field 1 (type) varint 3 = CONNECTED]
    return len(frame) >= 10 and frame[8:10] == b"\x08\x03"


def threads_fds(pid):
    return r.proc_status(pid, "Threads"), r.fd_count(pid)


def settle(pid, base, seconds):
    """Waits until threads and fds are within a few of `base`; returns the last counts."""
    d = h.Deadline(seconds)
    now = threads_fds(pid)
    while not d.expired():
        now = threads_fds(pid)
        if now[0] <= base[0] + 2 and now[1] <= base[1] + 2:
            break
        time.sleep(0.1)
    return now


def many_connections():
    with h.Broker("broker-b") as b:
        port = int(b.service_url.rsplit(":", 1)[1])
        base = settle(b.pid, (0, 0), 0.5)
        time.sleep(0.3)
        base = threads_fds(b.pid)
        peak = base
        connected = 0
        kinds = {"fin": 0, "rst": 0, "early": 0}
        t0 = time.monotonic()
        for w in range(WAVES):
            socks = []
            for i in range(PER_WAVE):
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                socks.append(s)
            early = socks[:10]
            for s in early:  # closed before anything was said
                s.close()
                kinds["early"] += 1
            socks = socks[10:]
            for s in socks:
                s.sendall(CONNECT)
            d = h.Deadline(10)
            for s in socks:
                f = read_frame(s, d)
                h.check(is_connected(f), f"wave {w}: reply {f[:16].hex()} is not CONNECTED")
                connected += 1
            peak = tuple(max(a, c) for a, c in zip(peak, threads_fds(b.pid)))
            for j, s in enumerate(socks):
                if j < 20:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    kinds["rst"] += 1
                else:
                    kinds["fin"] += 1
                s.close()
        conns_s = time.monotonic() - t0
        after = settle(b.pid, base, 10)
        h.check(connected == WAVES * (PER_WAVE - 10), f"{connected} CONNECTED replies")
        h.check(after[0] <= base[0] + 2, f"threads {base[0]} before, {after[0]} after the "
                f"connections closed (peak {peak[0]})")
        h.check(after[1] <= base[1] + 2, f"fds {base[1]} before, {after[1]} after the "
                f"connections closed (peak {peak[1]})")
        # Still serving.
        cl = h.client(b.service_url)
        topic = h.unique_topic("limits-after")
        c = cl.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        p = cl.create_producer(topic, batching_enabled=False)
        p.send(b"still here")
        m = h.receive_or_none(c, 5000)
        h.check(m is not None and m.data() == b"still here",
                "no round trip after 1,000 connections")
        c.acknowledge(m)
        p.close()
        c.close()
        cl.close()
    return {"base": base, "peak": peak, "after": after, "connected": connected, "kinds": kinds,
            "secs": conns_s}


def main():
    a = stalled_consumer()
    print(f"(a) {a}", flush=True)
    bb = many_connections()
    print(f"(b) {bb}", flush=True)
    return (
        f"limits: (a) {N} x {PAYLOAD} B with a stalled consumer (given {a['given']}) and a stalled socket (100000 permits, never reads; sent {a['raw_given']}): RSS "
        f"{a['rss0']:.0f} -> {a['rss1']:.0f} MiB (peak {a['rss_max']:.0f} < {RSS_LIMIT_MIB}), "
        f"produced at {a['rate']:.0f} msg/s, healthy lag <= {a['lag_max']}, done "
        f"{a['tail_s']:.2f} s after the last receipt, SIGTERM stop {a['stop_s']:.2f} s; (b) {WAVES * PER_WAVE} connections "
        f"({bb['connected']} CONNECTED, {bb['kinds']}) in {bb['secs']:.1f} s: threads "
        f"{bb['base'][0]}/{bb['peak'][0]}/{bb['after'][0]}, fds {bb['base'][1]}/{bb['peak'][1]}/"
        f"{bb['after'][1]} (base/peak/after), round trip ok"
    )


if __name__ == "__main__":
    h.run(main)
