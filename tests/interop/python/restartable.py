"""A broker that can be SIGKILLed (or stopped) and started again on the same ports and data dir.

`harness.Broker` lets the OS choose its ports, so a restarted broker would be somewhere else and
the stock clients could not find it. `RestartableBroker` picks two free ports once (by binding a
socket to port 0 on 127.0.0.1 and closing it), starts the broker with `--listen` / `--admin` on
them, and starts every later generation on the same ports and the same `--data-dir`, so the
clients' own reconnect logic brings them back.

    with RestartableBroker("broker", data_dir, ["--sync", "always"]) as b:
        ...
        b.kill9()            # SIGKILL, reaped; no graceful persistence
        b.restart()          # same ports, same data dir; waits for the two URL lines
        b.stop_and_start()   # SIGTERM (graceful), then start again

Each generation's stderr goes to `<name>.<generation>.stderr.log` in the scenario's log dir.
The broker always dies with the scenario (PR_SET_PDEATHSIG, harness's atexit stop).
"""

import os
import signal
import socket
import time

import harness as h

BIND_RETRY_S = 5.0


def free_port():
    """A port on 127.0.0.1 that was free a moment ago."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


class RestartableBroker(h.Broker):
    def __init__(self, name, data_dir, extra_args=()):
        super().__init__(name, extra_args)
        self.data_dir = data_dir
        self.port = free_port()
        self.admin_port = free_port()
        while self.admin_port == self.port:
            self.admin_port = free_port()
        self.generation = 0
        self.kills = 0
        self.restart_ms = []  # exec to the URL lines, per restart
        self.pids = []

    def start(self):
        """Starts a generation; retries for a while if the port is still taken."""
        d = h.Deadline(BIND_RETRY_S)
        last = None
        while True:
            try:
                return self._start_once()
            except h.ScenarioFailure as e:
                last = e
                if d.expired():
                    raise h.ScenarioFailure(f"cannot (re)start the broker: {last}") from None
                time.sleep(0.1)

    def _start_once(self):
        self.generation += 1
        self.exit_code = None
        self.shutdown_problem = None
        self.shutdown_s = None
        args = [
            h.broker_bin(),
            "--listen", f"127.0.0.1:{self.port}",
            "--admin", f"127.0.0.1:{self.admin_port}",
            "--data-dir", self.data_dir,
            *self.extra_args,
        ]
        self.stderr_path = os.path.join(h.log_dir(), f"{self.name}.{self.generation}.stderr.log")
        self.proc, self._stderr, t0 = h.spawn_broker(args, self.stderr_path)
        h._LIVE_BROKERS.append(self)
        lines, first_at = self._read_lines(2, h.START_TIMEOUT_S)
        if len(lines) < 2:
            self._reap_dead()
            raise h.ScenarioFailure(
                f"generation {self.generation} printed {len(lines)} of 2 URL lines "
                f"(exit code {self.proc.returncode}); see {self.stderr_path}"
            )
        self.startup_ms = (first_at - t0) * 1000.0
        self.service_url, self.admin_url = lines
        want = f"pulsar://127.0.0.1:{self.port}"
        h.check(self.service_url == want, f"service URL {self.service_url!r}, expected {want!r}")
        self.pids.append(self.proc.pid)
        return self

    def _reap_dead(self):
        if self in h._LIVE_BROKERS:
            h._LIVE_BROKERS.remove(self)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=5)
        self.exit_code = self.proc.returncode
        for f in (self.proc.stdout, self._stderr):
            try:
                f.close()
            except OSError:
                pass

    def kill9(self):
        """SIGKILL the running generation and reap it (no graceful shutdown)."""
        h.check(self.alive(), f"broker generation {self.generation} died on its own "
                f"(exit code {self.proc.returncode}); see {self.stderr_path}")
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=5)
        self.kills += 1
        self._reap_dead()

    def restart(self):
        t0 = time.monotonic()
        self.start()
        self.restart_ms.append((time.monotonic() - t0) * 1000.0)
        return self

    def stop_and_start(self):
        """A graceful stop (SIGTERM, checked) and a new generation."""
        self.stop()
        h.check(self.shutdown_problem is None, f"{self.shutdown_problem}; see {self.stderr_path}")
        return self.restart()


# --- the admin API and /proc, shared by the seed, kill -9 and limits scenarios ---------------


def http(method, url, body=None, timeout=5.0):
    """(status, text) of one admin request; never raises on an HTTP error status."""
    import urllib.error
    import urllib.request

    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def topic_path(admin_url, topic):
    """`http://…/admin/v2/persistent/tenant/ns/topic` for `persistent://tenant/ns/topic`."""
    rest = topic.split("://", 1)[1]
    return f"{admin_url}/admin/v2/persistent/{rest}"


def admin_json(method, url, body=None):
    import json

    status, text = http(method, url, body)
    h.check(status == 200, f"{method} {url}: HTTP {status} {text[:200]}")
    return json.loads(text)


def admin_post(url, body=None):
    status, text = http("POST", url, body)
    h.check(status in (200, 204), f"POST {url}: HTTP {status} {text[:200]}")


def proc_status(pid, field):
    """An integer field of /proc/<pid>/status (VmRSS in KiB, Threads)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise h.ScenarioFailure(f"no {field} in /proc/{pid}/status")


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))
