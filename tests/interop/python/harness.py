"""Shared helpers for the interop scenarios (run by `cargo xtask interop`).

Each scenario script imports this module, starts a fresh broker with `Broker(...)` (a context
manager that always stops it), talks to it with the stock `pulsar-client` wheel and ends with
`finish(summary)` or a failure raised through `check(...)`.

Environment:
  BROKER_BIN       path of the broker binary (required)
  BROKER_ARGS      extra broker flags, whitespace-separated, added to every broker started
                   (`cargo xtask interop` sets `--check-frames`)
  INTEROP_LOG_DIR  where broker stderr, client logs and processing logs go (default: a temp dir)

Everything listens on 127.0.0.1 only, and every wait here is bounded in time.
"""

import atexit
import ctypes
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import pulsar

PINNED_CLIENT = "3.13.0"
LISTEN = "127.0.0.1:0"
STOP_GRACE_S = 5.0
START_TIMEOUT_S = 10.0


class ScenarioFailure(Exception):
    """A check failed; the message says what was expected and what happened."""


def check(cond, message):
    if not cond:
        raise ScenarioFailure(message)


def log_dir():
    d = os.environ.get("INTEROP_LOG_DIR")
    if not d:
        d = tempfile.mkdtemp(prefix="interop-")
        os.environ["INTEROP_LOG_DIR"] = d
    os.makedirs(d, exist_ok=True)
    return d


def broker_bin():
    b = os.environ.get("BROKER_BIN")
    if not b or not os.access(b, os.X_OK):
        raise ScenarioFailure(f"BROKER_BIN is not set to an executable (got {b!r})")
    return b


class Deadline:
    """A point in monotonic time; `left()` is never negative."""

    def __init__(self, seconds):
        self.end = time.monotonic() + seconds
        self.seconds = seconds

    def left(self):
        return max(0.0, self.end - time.monotonic())

    def expired(self):
        return time.monotonic() >= self.end

    def left_ms(self, cap_ms=None):
        ms = int(self.left() * 1000)
        if cap_ms is not None:
            ms = min(ms, cap_ms)
        return max(ms, 1)


def wait_until(pred, seconds, what, step=0.02):
    """Polls `pred` until it is true or `seconds` passed (then fails, naming `what`)."""
    d = Deadline(seconds)
    while not d.expired():
        if pred():
            return
        time.sleep(step)
    check(pred(), f"timed out after {seconds:.1f} s waiting for {what}")


try:
    # Loaded here, not in the forked child: the child only calls it (no dlopen after fork).
    _PRCTL = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def _pdeathsig():
    # The broker dies with the scenario process even if that is SIGKILLed (Linux prctl).
    if _PRCTL is not None:
        _PRCTL(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG


_LIVE_BROKERS = []


def _stop_all_at_exit():
    for b in list(_LIVE_BROKERS):
        try:
            b.stop()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass


atexit.register(_stop_all_at_exit)


def spawn_broker(args, stderr_path):
    """Starts the broker with `args` (stdout piped for its URL lines, stderr to `stderr_path`,
    killed if this process dies); returns (process, stderr file, start time)."""
    stderr = open(stderr_path, "wb")
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [*args, *os.environ.get("BROKER_ARGS", "").split()],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
        preexec_fn=_pdeathsig,
    )
    return proc, stderr, t0


class Broker:
    """A fresh broker process on 127.0.0.1 with OS-chosen ports.

    Attributes after start: `service_url`, `admin_url`, `pid`, `startup_ms` (exec to the first
    stdout line), `stderr_path`. `stop()` sends SIGTERM, then SIGKILL after 5 s; a slow or
    unclean shutdown is recorded in `shutdown_problem` and raised by `__exit__`.
    """

    def __init__(self, name="broker", extra_args=()):
        self.name = name
        self.extra_args = list(extra_args)
        self.proc = None
        self.service_url = None
        self.admin_url = None
        self.startup_ms = None
        self.shutdown_s = None
        self.exit_code = None
        self.shutdown_problem = None
        self.stderr_path = os.path.join(log_dir(), f"{name}.stderr.log")

    def start(self):
        args = [broker_bin(), "--listen", LISTEN, "--admin", LISTEN, *self.extra_args]
        self.proc, self._stderr, t0 = spawn_broker(args, self.stderr_path)
        _LIVE_BROKERS.append(self)
        lines, first_at = self._read_lines(2, START_TIMEOUT_S)
        if len(lines) < 2:
            self.stop()
            raise ScenarioFailure(
                f"broker printed {len(lines)} of 2 URL lines within {START_TIMEOUT_S:.0f} s "
                f"(exit code {self.proc.returncode}); see {self.stderr_path}"
            )
        self.startup_ms = (first_at - t0) * 1000.0
        self.service_url, self.admin_url = lines
        check(
            self.service_url.startswith("pulsar://127.0.0.1:"),
            f"unexpected service URL line {self.service_url!r}",
        )
        check(
            self.admin_url.startswith("http://127.0.0.1:"),
            f"unexpected admin URL line {self.admin_url!r}",
        )
        return self

    def _read_lines(self, n, timeout_s):
        sel = selectors.DefaultSelector()
        fd = self.proc.stdout.fileno()
        sel.register(fd, selectors.EVENT_READ)
        buf = b""
        lines = []
        first_at = None
        d = Deadline(timeout_s)
        try:
            while len(lines) < n and not d.expired():
                if not sel.select(timeout=d.left()):
                    break
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                if first_at is None and b"\n" in buf + chunk:
                    first_at = time.monotonic()
                buf += chunk
                while b"\n" in buf and len(lines) < n:
                    line, buf = buf.split(b"\n", 1)
                    lines.append(line.decode("utf-8", "replace").strip())
        finally:
            sel.close()
        return lines, first_at

    @property
    def pid(self):
        return self.proc.pid

    def rss_kib(self):
        """VmRSS of the broker from /proc/<pid>/status, in KiB."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise ScenarioFailure("no VmRSS in /proc status")

    def threads(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
        return -1

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc is None or self.exit_code is not None:
            return
        if self in _LIVE_BROKERS:
            _LIVE_BROKERS.remove(self)
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
                self.shutdown_problem = (
                    f"broker did not exit within {STOP_GRACE_S:.0f} s of SIGTERM (killed)"
                )
        self.shutdown_s = time.monotonic() - t0
        self.exit_code = self.proc.returncode
        if self.shutdown_problem is None and self.exit_code != 0:
            self.shutdown_problem = f"broker exited with code {self.exit_code}"
        try:
            self.proc.stdout.close()
            self._stderr.close()
        except (AttributeError, OSError):
            pass

    def kill(self):
        """SIGKILL (a crash on purpose): no graceful shutdown, and not counted as a failure."""
        if self.proc is None or self.exit_code is not None:
            return
        if self in _LIVE_BROKERS:
            _LIVE_BROKERS.remove(self)
        self.proc.kill()
        self.proc.wait(timeout=5)
        self.exit_code = self.proc.returncode
        try:
            self.proc.stdout.close()
            self._stderr.close()
        except (AttributeError, OSError):
            pass

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        self.stop()
        if exc_type is None and self.shutdown_problem:
            raise ScenarioFailure(f"{self.shutdown_problem}; see {self.stderr_path}")
        return False


_client_logger = None


def broker_supports(flag):
    """Whether the broker's --help mentions `flag` (for scenarios that need a newer broker)."""
    out = subprocess.run([broker_bin(), "--help"], capture_output=True, timeout=10)
    return flag in out.stdout.decode("utf-8", "replace")


class Skip(Exception):
    """The scenario cannot run against this broker; `run` exits with SKIP_EXIT."""


SKIP_EXIT = 77  # automake's "skipped"


def client(url):
    """A stock client with short timeouts; its log goes to the scenario's log dir."""
    global _client_logger
    if _client_logger is None:
        path = os.path.join(log_dir(), f"client-{os.getpid()}.log")
        _client_logger = pulsar.FileLogger(pulsar.LoggerLevel.Info, path)
    return pulsar.Client(
        url,
        operation_timeout_seconds=5,
        connection_timeout_ms=2000,
        logger=_client_logger,
    )


def unique_topic(stem):
    return f"persistent://public/default/{stem}-{os.getpid()}-{int(time.time() * 1000) % 10**8}"


def receive_or_none(consumer, timeout_ms):
    """`receive(timeout)` that returns None on timeout instead of raising."""
    try:
        return consumer.receive(timeout_millis=max(1, int(timeout_ms)))
    except pulsar.Timeout:
        return None


def drain(consumer, quiet_ms, deadline_s=10.0, max_messages=100000):
    """Receives until nothing arrives for `quiet_ms`; returns the messages (unacked)."""
    got = []
    d = Deadline(deadline_s)
    while not d.expired() and len(got) < max_messages:
        m = receive_or_none(consumer, d.left_ms(quiet_ms))
        if m is None:
            break
        got.append(m)
    return got


def receive_n(consumer, n, deadline_s=10.0, quiet_ms=300):
    """Receives until `n` messages arrived (or `deadline_s` passed), then keeps receiving until
    nothing more comes for `quiet_ms` (so extras and duplicates show). Unacked."""
    got = []
    d = Deadline(deadline_s)
    while len(got) < n and not d.expired():
        m = receive_or_none(consumer, d.left_ms(500))
        if m is not None:
            got.append(m)
    return got + drain(consumer, quiet_ms, deadline_s=5)


def msg_key(m):
    mid = m.message_id()
    return (mid.ledger_id(), mid.entry_id(), mid.batch_index())


# --- processing log and per-key order ------------------------------------------------------


class ProcessingLog:
    """What the applications processed, in one global order (appends under a lock)."""

    def __init__(self, name="processing"):
        self._lock = threading.Lock()
        self.events = []  # (index, consumer, key, seq, msg id, redelivery count)
        self.path = os.path.join(log_dir(), f"{name}.log")

    def record(self, consumer, key, seq, mid, redelivery_count):
        with self._lock:
            self.events.append((len(self.events), consumer, key, seq, mid, redelivery_count))

    def __len__(self):
        with self._lock:
            return len(self.events)

    def snapshot(self):
        with self._lock:
            return list(self.events)

    def write(self):
        with open(self.path, "w") as f:
            for i, c, k, s, mid, rc in self.snapshot():
                f.write(f"{i}\t{c}\t{k}\t{s}\t{mid}\trc={rc}\n")


def check_key_order(events, expected_per_key, may_repeat=frozenset()):
    """Checks a merged processing log for per-key order.

    `events` is an iterable of (index, consumer, key, seq, msg id, redelivery count) in
    processing order; `expected_per_key` maps key -> number of messages (seqs 0..n-1).

    Rule: the first processing of seq s of key K must come after the first processing of every
    seq < s of K (seqs are processed in order, none skipped). A second processing of a seq is
    allowed only when that copy was redelivered (redelivery count > 0), or for the (key, seq)
    pairs in `may_repeat` (e.g. what a killed consumer processed: its acks may never have
    left the client, and the broker redelivers such messages with count 0). Returns (first-time
    count, re-processed count); raises ScenarioFailure on the first violation.
    """
    done = {k: -1 for k in expected_per_key}
    reprocessed = 0
    first = 0
    for i, c, k, s, mid, rc in events:
        check(k in done, f"event {i}: unexpected key {k!r}")
        if s == done[k] + 1:
            done[k] = s
            first += 1
        elif s <= done[k]:
            check(
                rc > 0 or (k, s) in may_repeat,
                f"event {i}: {c} re-processed {k}#{s} ({mid}) with redelivery count 0 "
                f"(key {k} already at #{done[k]})",
            )
            reprocessed += 1
        else:
            raise ScenarioFailure(
                f"event {i}: {c} processed {k}#{s} ({mid}) before {k}#{done[k] + 1} "
                f"(per-key order broken)"
            )
    for k, n in expected_per_key.items():
        check(done[k] == n - 1, f"key {k}: processed up to #{done[k]} of {n}")
    return first, reprocessed


# --- Pulsar's sticky key hash ----------------------------------------------------------------


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86_32, as Pulsar's Murmur3_32Hash (before its & Integer.MAX_VALUE)."""
    c1, c2 = 0xCC9E2D51, 0x1B873593
    h = seed & 0xFFFFFFFF
    n = len(data)
    nblocks = n // 4
    for i in range(nblocks):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * c1) & 0xFFFFFFFF
        k = ((k << 15) | (k >> 17)) & 0xFFFFFFFF
        k = (k * c2) & 0xFFFFFFFF
        h ^= k
        h = ((h << 13) | (h >> 19)) & 0xFFFFFFFF
        h = (h * 5 + 0xE6546B64) & 0xFFFFFFFF
    tail = data[4 * nblocks :]
    k = 0
    if len(tail) >= 3:
        k ^= tail[2] << 16
    if len(tail) >= 2:
        k ^= tail[1] << 8
    if len(tail) >= 1:
        k ^= tail[0]
        k = (k * c1) & 0xFFFFFFFF
        k = ((k << 15) | (k >> 17)) & 0xFFFFFFFF
        k = (k * c2) & 0xFFFFFFFF
        h ^= k
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    return h


def sticky_hash(key: str) -> int:
    """Pulsar's Key_Shared sticky hash slot: (murmur3_32(key) & Integer.MAX_VALUE) & 65535."""
    return (murmur3_32(key.encode("utf-8")) & 0x7FFFFFFF) & 0xFFFF


def _self_test_hash():
    # Vectors shared with the dispatcher crate's hash unit tests.
    assert murmur3_32(b"hello") == 0x248BFA47
    assert murmur3_32(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723
    assert murmur3_32(b"") == 0 and murmur3_32(b"", 1) == 0x514E28B7
    assert murmur3_32(b"", 0xFFFFFFFF) == 0x81F16F39
    for key, h31, full in [("NONE_KEY", 504741539, 48803), ("key-0", 1664612543, 63679),
                           ("order-42", 1259446670, 41358), ("\u043a\u043b\u044e\u0447", 442048578, 8258)]:
        assert murmur3_32(key.encode()) & 0x7FFFFFFF == h31, key
        assert sticky_hash(key) == full, key


_self_test_hash()


# --- running a scenario ----------------------------------------------------------------------


def run(main):
    """Runs `main()`; it returns the summary line. Exit 0 on pass, 1 with a message on failure,
    77 when the scenario raised `Skip` (it needs something this broker does not have).

    The summary (or the failure) is the last line printed, which `cargo xtask interop` shows.
    """
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    t0 = time.monotonic()
    try:
        summary = main()
    except ScenarioFailure as e:
        _stop_all_at_exit()
        print(f"FAIL: {e}", flush=True)
        sys.exit(1)
    except Skip as e:
        _stop_all_at_exit()
        print(f"SKIP: {e}", flush=True)
        sys.exit(SKIP_EXIT)
    except Exception as e:  # noqa: BLE001 - any error is a scenario failure with its trace
        traceback.print_exc()
        _stop_all_at_exit()
        print(f"FAIL: {type(e).__name__}: {e}", flush=True)
        sys.exit(1)
    print(f"{summary} ({time.monotonic() - t0:.1f} s)", flush=True)
    sys.exit(0)
