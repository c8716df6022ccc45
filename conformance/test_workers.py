"""--workers N under skirr's supervisor (issue 12): binding, spread, hand-over, heartbeat,
recycling and the process signals, over real processes, signals and sockets.

The application (apps/workers_app.py) answers with its worker's pid, so each case sees which
worker served. The heavy cases run on the default loop (uvloop) only, to stay within a 2-core
machine; the supervisor itself has no event loop, and the loop-dependent heartbeat case runs on
both loops. Every wait is bounded.
"""
from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import signal
import socket
import sys
import sysconfig
import threading
import time
import urllib.request
from collections import Counter

import h11
import pytest

from skirr.config import Config, ConfigError

try:
    from . import _proc
    from ._bench import newest_verdict
except ImportError:
    import _proc
    from _bench import newest_verdict

APP = "workers_app:app"


def _serve(tmp_path, *args, env=None, **kw):
    port = _proc.free_port()
    proc = _proc.Skirr([APP, "--port", str(port), *args], tmp_path, env=env, **kw)
    return proc, port


def _get(port, target="/", timeout=_proc.IO_TIMEOUT):
    r = _proc.request(port, "GET", target, timeout=timeout)
    assert r.status == 200, r
    return r.body.decode()


def _pid_of(port):
    return int(_get(port).split()[0])


def _wait_for(predicate, timeout, what, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    extra = f"\nstderr:\n{proc.stderr}" if proc is not None else ""
    raise AssertionError(f"not within {timeout} s: {what}{extra}")


def _started_pids(proc):
    return [int(p) for p in re.findall(r"Started worker \[(\d+)\]", proc.stderr)]


def _serving_pids(port, n, timeout=20.0):
    """The distinct pids answering new connections, once n of them have been seen (workers
    still starting are waited for, up to ``timeout`` seconds)."""
    seen = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen.add(_pid_of(port))
        if len(seen) == n:
            return seen
    raise AssertionError(f"only {len(seen)} of {n} workers answered within {timeout} s")


class Load:
    """Client threads making requests until stopped: ``new`` threads on a new connection each,
    ``keep`` threads on keep-alive connections. Records (time, pid, version) of every answer and
    every failure. A keep-alive request whose reused connection was closed before any response
    byte is retried on a new connection (RFC 9110 9.2.2) and counted in ``retries``."""

    def __init__(self, port, new=2, keep=0, target="/"):
        self.port = port
        self.target = target
        self.answers: list[tuple[float, int, str]] = []
        self.failures: list[tuple[float, str]] = []
        self.retries = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._new, daemon=True) for _ in range(new)]
        self.threads += [threading.Thread(target=self._keep, daemon=True) for _ in range(keep)]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        self._stop.set()
        for t in self.threads:
            t.join(_proc.IO_TIMEOUT + 2)

    def _record(self, body):
        pid, _, version = body.decode().partition(" ")
        with self._lock:
            self.answers.append((time.monotonic(), int(pid), version))

    def _fail(self, exc, kind="new"):
        with self._lock:
            self.failures.append((time.monotonic(), f"{kind}: {exc!r}"))

    def _new(self):
        while not self._stop.is_set():
            try:
                r = _proc.request(self.port, "GET", self.target)
                assert r.status == 200, r.status
                self._record(r.body)
            except (OSError, AssertionError, h11.RemoteProtocolError) as exc:
                self._fail(exc)
                time.sleep(0.01)

    def _keep(self):
        sock = None
        conn = None
        while not self._stop.is_set():
            reused = sock is not None
            try:
                if sock is None:
                    sock = _proc.connect(self.port)
                    conn = h11.Connection(h11.CLIENT)
                _proc.send_request(sock, conn, "GET", self.target)
                try:
                    first = sock.recv(65536)
                except ConnectionResetError:
                    first = b""
                if not first and reused:
                    # Closed before any response byte: the idle connection was closed by the
                    # server as the request went out. Retried on a new connection.
                    with self._lock:
                        self.retries += 1
                    sock.close()
                    sock = None
                    continue
                conn.receive_data(first)
                r = _proc.read_response(sock, conn)
                assert r.status == 200, r.status
                self._record(r.body)
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE or \
                        r.header(b"connection") == b"close":
                    sock.close()
                    sock = None
                else:
                    conn.start_next_cycle()
            except (OSError, AssertionError, h11.RemoteProtocolError) as exc:
                self._fail(exc, "keep-alive")
                if sock is not None:
                    sock.close()
                sock = None
                time.sleep(0.01)
        if sock is not None:
            sock.close()


# ----------------------------------------------------------------------------------------------
# Startup


@pytest.mark.rule("skirr-workers-bind-first")
def test_port_in_use_is_reported_once_before_any_worker(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        status, stderr = _proc.run_to_exit([APP, "--workers", "3", "--port", str(port)],
                                           tmp_path)
    assert (status, stderr) == (
        1, f"skirr: error: could not bind to 127.0.0.1:{port}: Address already in use\n")


@pytest.mark.rule("skirr-workers-bind-first")
def test_port_held_by_another_reuse_port_group_is_refused(tmp_path):
    # SO_REUSEPORT would let a second group join the first silently: the plain bind refuses.
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        status, stderr = _proc.run_to_exit([APP, "--workers", "2", "--port", str(port)],
                                           tmp_path)
    assert status == 1
    assert stderr.endswith(f"could not bind to 127.0.0.1:{port}: Address already in use\n")


@pytest.mark.rule("skirr-workers-startup-failure-once")
def test_import_error_exits_1_once(tmp_path):
    status, stderr = _proc.run_to_exit(
        ["nope:app", "--workers", "3", "--port", str(_proc.free_port())], tmp_path)
    assert status == 1
    assert stderr.count('skirr: error: could not import module "nope"') == 1
    assert len(re.findall(r"Started worker", stderr)) == 1
    assert "Traceback" not in stderr


@pytest.mark.rule("skirr-workers-startup-failure-once")
def test_lifespan_failure_exits_1_once(tmp_path):
    status, stderr = _proc.run_to_exit(
        ["basic:startup_failed", "--workers", "3", "--port", str(_proc.free_port())], tmp_path)
    assert status == 1
    assert stderr.count("database unreachable") == 1
    assert len(re.findall(r"Started worker", stderr)) == 1


@pytest.mark.rule("skirr-workers-web-concurrency")
def test_web_concurrency_sets_the_worker_count(tmp_path):
    proc, port = _serve(tmp_path, env={"WEB_CONCURRENCY": "3"})
    with proc:
        proc.wait_accepting(port)
        assert len(_serving_pids(port, 3)) == 3
        assert "for 3 worker(s)" in proc.stderr
        assert proc.stop() == 0


@pytest.mark.rule("skirr-workers-web-concurrency")
@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_bad_web_concurrency_is_a_usage_error(tmp_path, value):
    with _proc.Skirr([APP, "--port", str(_proc.free_port())], tmp_path,
                     env={"WEB_CONCURRENCY": value}) as proc:
        status = proc.wait()
        stderr = proc.stderr
    assert (status, stderr) == (
        2, f"skirr: error: WEB_CONCURRENCY must be an integer >= 1: {value!r}\n")


# ----------------------------------------------------------------------------------------------
# Spreading connections


def _listen_entries(port):
    """LISTEN sockets on 127.0.0.1:port in /proc/net/tcp (one per listener)."""
    want = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as f:
        return sum(1 for line in f if line.split()[1] == want and line.split()[3] == "0A")


@pytest.mark.rule("skirr-workers-spread")
def test_2000_connections_spread_over_4_workers(tmp_path):
    proc, port = _serve(tmp_path, "--workers", "4")
    with proc:
        proc.wait_accepting(port)
        _wait_for(lambda: proc.stderr.count("skirr running on") == 4, 20, "4 workers", proc)
        assert _listen_entries(port) == 4
        counts: Counter[int] = Counter()
        lock = threading.Lock()

        def client(n):
            for _ in range(n):
                pid = _pid_of(port)
                with lock:
                    counts[pid] += 1

        threads = [threading.Thread(target=client, args=(500,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        assert sum(counts.values()) == 2000
        assert len(counts) == 4, counts
        assert all(400 <= c <= 600 for c in counts.values()), counts
        assert proc.stop() == 0


@pytest.mark.rule("skirr-workers-no-reuse-port")
def test_no_reuse_port_shares_one_listener(tmp_path):
    proc, port = _serve(tmp_path, "--workers", "2", "--no-reuse-port")
    with proc:
        proc.wait_accepting(port)
        _wait_for(lambda: proc.stderr.count("skirr running on") == 2, 20, "2 workers", proc)
        assert _listen_entries(port) == 1
        assert len(_serving_pids(port, 2)) == 2
        assert proc.stop() == 0


# ----------------------------------------------------------------------------------------------
# Replacing workers


@pytest.mark.rule("skirr-workers-handover")
def test_kill_9_queued_connections_are_served_by_the_replacement(tmp_path):
    proc, port = _serve(tmp_path, "--workers", "2")
    with proc:
        proc.wait_accepting(port)
        pids = _serving_pids(port, 2)
        victim = min(pids)
        with Load(port, new=2) as load:
            time.sleep(0.3)
            os.kill(victim, signal.SIGSTOP)  # it accepts nothing more: its queue fills
            time.sleep(0.05)
            queued = []
            for _ in range(24):
                sock = _proc.connect(port)
                conn = h11.Connection(h11.CLIENT)
                _proc.send_request(sock, conn, "GET", "/")
                queued.append((sock, conn))
            time.sleep(0.2)
            killed_at = time.monotonic()
            os.kill(victim, signal.SIGKILL)
            bodies = []
            for sock, conn in queued:
                with sock:
                    r = _proc.read_response(sock, conn)  # a reset would raise here
                    assert r.status == 200
                    bodies.append(r.body.decode())
            time.sleep(0.5)
        new_pids = {int(b.split()[0]) for b in bodies} - pids
        assert len(new_pids) == 1, bodies  # some queued ones waited for the replacement
        (new_pid,) = new_pids
        first = min(t for t, pid, _ in load.answers if pid == new_pid)
        # 1 s (issue 12); under AddressSanitizer (make sanitize) a worker's start-up (imports
        # with PYTHONMALLOC=malloc) alone takes most of that, so the bound is looser there
        limit = 3.0 if "SKIRR_SAN_PRELOAD" in os.environ else 1.0
        assert first - killed_at < limit, f"replacement first served after {first - killed_at} s"
        # Only requests in flight on the stopped worker when it was killed may fail: at most
        # one per load thread.
        assert len(load.failures) <= 2, load.failures
        assert all(t >= killed_at - 0.5 for t, _ in load.failures), load.failures
        assert f"Worker [{victim}] (slot" in proc.stderr and "died (killed by SIGKILL)" in \
            proc.stderr
        assert proc.stop() == 0


@pytest.mark.rule("skirr-workers-restart-backoff")
def test_failing_restarts_back_off(tmp_path):
    fail = tmp_path / "fail"
    proc, port = _serve(tmp_path, "--workers", "2",
                        env={"SKIRR_TEST_FAIL_FILE": str(fail)})
    with proc:
        proc.wait_accepting(port)
        pids = _serving_pids(port, 2)
        fail.write_text("x")
        os.kill(min(pids), signal.SIGKILL)
        _wait_for(lambda: "restarting in 0.4 s" in proc.stderr, 10, "3 failed restarts", proc)
        stderr = proc.stderr
        assert stderr.index("restarting in 0.1 s") < stderr.index("restarting in 0.2 s") < \
            stderr.index("restarting in 0.4 s")
        fail.unlink()
        _wait_for(lambda: len(_serving_pids(port, 2) - pids) == 1, 10, "a new worker serves",
                  proc)
        assert proc.stop() == 0


@pytest.mark.rule("skirr-workers-dead-slot")
def test_a_slot_whose_worker_cannot_restart_gets_no_new_connections(tmp_path):
    """The attack of stop 57: one worker killed while its restarts keep failing (lifespan
    startup refused). Connections queued on its slot end at the first failed restart instead of
    hanging for the back-off; new connections all go to the serving worker, each answered within
    1 s; once the restart succeeds, the slot gets its share again."""
    fail = tmp_path / "fail"
    proc, port = _serve(tmp_path, "--workers", "2", env={"SKIRR_TEST_FAIL_FILE": str(fail)})
    with proc:
        proc.wait_accepting(port)
        pids = _serving_pids(port, 2)
        victim = min(pids)
        (other,) = pids - {victim}
        os.kill(victim, signal.SIGSTOP)  # it accepts nothing more: its queue fills
        queued = []
        for _ in range(24):  # about half wait in the victim's queue
            sock = _proc.connect(port)
            conn = h11.Connection(h11.CLIENT)
            _proc.send_request(sock, conn, "GET", "/")
            queued.append((sock, conn))
        time.sleep(0.2)
        fail.write_text("x")
        killed_at = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        answered, reset = [], 0
        for sock, conn in queued:
            with sock:
                try:
                    r = _proc.read_response(sock, conn)
                except (ConnectionResetError, h11.RemoteProtocolError):
                    reset += 1
                else:
                    answered.append((r.status, r.body.decode()))
        # The queued ones on the victim's slot are reset at the first failed restart (one
        # worker start), not left waiting for the back-off; the others answered.
        assert time.monotonic() - killed_at < 5.0
        assert reset and set(answered) == {(200, f"{other} v1")}, (reset, answered)
        slot = re.search(rf"Worker \[{victim}\] \(slot (\d+)\) died", proc.stderr)[1]
        _wait_for(lambda: "restarting in 0.2 s" in proc.stderr, 10, "2 failed restarts", proc)
        assert f"Slot {slot} has no serving worker: its new connections go to the other " \
            "slot(s)" in proc.stderr
        assert f"Slot {slot} has no worker to start before its back-off ends: reset " in \
            proc.stderr
        for _ in range(24):
            began = time.monotonic()
            r = _proc.request(port, "GET", "/", timeout=1.0)
            assert (r.status, r.body.decode()) == (200, f"{other} v1")
            assert time.monotonic() - began < 1.0
        fail.unlink()
        new = _serving_pids(port, 2)
        assert other in new and victim not in new
        assert f"Slot {slot} serves again: it gets its share of new connections" in proc.stderr
        assert proc.stop() == 0


def _block_a_worker(port: int) -> tuple[threading.Thread, list]:
    """GET /block?s=30 (blocks the event loop that takes it) from a thread: (the thread, the list
    it appends the answer or its error to)."""
    blocked: list = []

    def block():
        try:
            blocked.append(_get(port, "/block?s=30", timeout=15))
        except (OSError, AssertionError, h11.RemoteProtocolError) as exc:
            blocked.append(exc)

    thread = threading.Thread(target=block, daemon=True)
    thread.start()
    return thread, blocked


@pytest.mark.rule("skirr-workers-heartbeat")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_blocked_worker_is_replaced_after_the_heartbeat_timeout(tmp_path, loop):
    proc, port = _serve(tmp_path, "--workers", "2", "--loop", loop,
                        "--timeout-worker-healthcheck", "1")
    with proc:
        proc.wait_accepting(port)
        pids = _serving_pids(port, 2)
        thread, blocked = _block_a_worker(port)
        victim = int(_wait_for(lambda: [e for e in proc.events if e.startswith("block ")], 5,
                               "the block request", proc)[0].split()[1])
        started = time.monotonic()
        line = f"Worker [{victim}] (slot "
        _wait_for(lambda: line in proc.stderr and "did not answer the heartbeat for 1 s: "
                  "killing it" in proc.stderr, 4, "the heartbeat kill", proc)
        # The last beat came up to a fifth of the timeout before the loop blocked.
        assert 0.7 <= time.monotonic() - started < 3.5
        thread.join(10)
        # Its connection died with it (closed without a response).
        assert isinstance(blocked[0], (OSError, h11.RemoteProtocolError)), blocked
        _wait_for(lambda: len(_serving_pids(port, 2) - (pids - {victim})) == 1, 10,
                  "a replacement serves", proc)
        assert proc.stop() == 0


@pytest.mark.rule("skirr-workers-max-requests")
def test_max_requests_starts_the_replacement_first(tmp_path):
    proc, port = _serve(tmp_path, "--workers", "2", "--limit-max-requests", "25")
    with proc:
        proc.wait_accepting(port)
        _serving_pids(port, 2)
        with Load(port, new=2, keep=1) as load:
            _wait_for(lambda: proc.stderr.count("reached its request limit") >= 2, 30,
                      "two recyclings", proc)
            first = re.search(r"Worker \[(\d+)\] reached its request limit", proc.stderr)
            old = first.group(1)
            # Its own stop, not any two: the other slot's worker and its replacement (25
            # requests are a fraction of a second) may both stop while it still drains.
            _wait_for(lambda: f"Worker [{old}] stopped (exit status 0)" in proc.stderr, 15,
                      "the first recycled worker stopped", proc)
            # A replacement answers the load too (the old ones stopping need not wait for a
            # connection to reach it: on a loaded machine none had when they had stopped).
            _wait_for(lambda: len({pid for _, pid, _ in load.answers}) >= 3, 15,
                      "a replacement answered the load", proc)
        assert load.failures == []
        stderr = proc.stderr
        # The replacement serves before the old one is stopped.
        assert re.search(rf"Worker \[\d+\] serves slot \d+: stopping worker \[{old}\]", stderr)
        assert stderr.index(f"stopping worker [{old}]") < stderr.index(f"Worker [{old}] stopped")
        assert proc.stop() == 0


# ----------------------------------------------------------------------------------------------
# Resources (issue 35 item 4): the supervisor survives every resource error


def _lowest_free_fd(pid):
    used = {int(n) for n in os.listdir(f"/proc/{pid}/fd")}
    return next(fd for fd in range(len(used) + 1) if fd not in used)


@pytest.mark.rule("skirr-supervisor-resources")
def test_emfile_at_a_recycle_is_one_line_and_a_retry(tmp_path):
    """The running supervisor's RLIMIT_NOFILE lowered to its lowest free descriptor (so pipe()
    fails with EMFILE), then SIGHUP: each try is one line, backed off; the old worker keeps
    serving; once the limit is back the recycle completes and the supervisor stops cleanly."""
    import resource

    proc, port = _serve(tmp_path, "--workers", "2")
    with proc:
        proc.wait_accepting(port)
        old = _serving_pids(port, 2)
        pid = proc.proc.pid
        limits = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (_lowest_free_fd(pid), limits[1]))
        proc.proc.send_signal(signal.SIGHUP)
        line = "ERROR:    Could not start a worker for slot 0: [Errno 24] Too many open files: " \
            "retrying in %s s\n"
        _wait_for(lambda: line % "0.2" in proc.stderr, 5, "two tries", proc)
        assert proc.stderr.count(line % "0.1") == 1
        assert _serving_pids(port, 2) == old  # both serving meanwhile
        resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
        _wait_for(lambda: all(f"Worker [{p}] stopped (exit status 0)" in proc.stderr
                              for p in old), 20, "the recycle done", proc)
        assert not _serving_pids(port, 2) & old
        assert proc.proc.poll() is None
        assert proc.stop() == 0


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def records():
    handler = _Records()
    log = logging.getLogger("skirr.error")
    log.addHandler(handler)
    level = log.level
    log.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def _fds():
    return sorted(os.listdir("/proc/self/fd"))


@pytest.mark.rule("skirr-supervisor-resources")
@pytest.mark.parametrize("where", ["pipe", "fork", "register"])
@pytest.mark.parametrize("err", [errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN],
                         ids=errno.errorcode.get)
def test_spawn_resource_error_backs_off(monkeypatch, records, where, err):
    """Each resource a worker start takes (its pipe, its process, its selector entry) refused
    with each errno: one line, nothing left open or running, the next try backed off (0.1 s,
    then 0.2 s), for a replacement too (SIGHUP, --limit-max-requests)."""
    import selectors

    from skirr import supervisor as sv
    from skirr.config import Config

    sup = sv.Supervisor(Config(APP, workers=2, port=0))
    sup._sel = selectors.DefaultSelector()
    sup._starting = False
    sock = socket.socket()
    slot = sv._Slot(0, sock, own=False)
    sup.slots.append(slot)
    refused = OSError(err, os.strerror(err))
    done = []

    class Proc:
        pid = 4242

        def kill(self):
            done.append("kill")

        def wait(self):
            done.append("wait")

    def refuse(*args, **kwargs):
        raise refused

    class Selector:
        register = staticmethod(refuse)

    try:
        before = _fds()
        with monkeypatch.context() as m:
            if where == "pipe":
                m.setattr(sv.os, "pipe", refuse)
            elif where == "fork":
                m.setattr(sv.subprocess, "Popen", refuse)
            else:
                m.setattr(sv.subprocess, "Popen", lambda *a, **k: Proc())
                m.setattr(sup, "_sel", Selector())
            now = time.monotonic()
            assert sup._spawn(slot) is None
            assert now + 0.1 <= slot.restart_at <= time.monotonic() + 0.1
            assert not slot.restart_successor
            assert sup._spawn(slot, successor=True) is None
            assert slot.restart_successor
        assert _fds() == before
        assert sup.workers == [] and slot.current is None and slot.successor is None
        assert done == (["kill", "wait"] * 2 if where == "register" else [])
        text = f"[Errno {err}] {os.strerror(err)}"
        assert records == [f"Could not start a worker for slot 0: {text}: retrying in 0.1 s",
                           f"Could not start a worker for slot 0: {text}: retrying in 0.2 s"]
    finally:
        sup._sel.close()
        sock.close()


@pytest.mark.rule("skirr-supervisor-resources")
@pytest.mark.parametrize("refused", [
    OSError(errno.EMFILE, "Too many open files"),
    ConfigError("could not bind to 127.0.0.1:1: Cannot assign requested address"),
], ids=["EMFILE", "ConfigError"])
def test_sigttin_without_a_socket_is_one_line(monkeypatch, records, refused):
    from skirr import supervisor as sv
    from skirr.config import Config

    sup = sv.Supervisor(Config(APP, workers=1, port=0))
    sock = socket.socket()
    sup.slots.append(sv._Slot(0, sock, own=True))
    sup._port = 1

    def bind(*args, **kwargs):
        raise refused

    monkeypatch.setattr(sv, "bind_tcp", bind)
    try:
        sup._handle_signal(signal.SIGTTIN)
    finally:
        sock.close()
    assert len(sup.slots) == 1
    assert records == [f"SIGTTIN: could not add a worker: {refused}"]


# ----------------------------------------------------------------------------------------------
# Signals


def _slow_until(port: int, path: str, most: int, enough) -> tuple[list, list]:
    """Starts GETs of `path` (a slow request), one thread each, 10 ms apart, until enough() is
    true or `most` were started: (the threads, the list each one appends its body or its error to
    when it ends)."""
    results: list = []
    lock = threading.Lock()

    def slow():
        try:
            body = _get(port, path)
        except (OSError, AssertionError) as exc:
            body = exc
        with lock:
            results.append(body)

    threads = []
    for _ in range(most):
        t = threading.Thread(target=slow, daemon=True)
        t.start()
        threads.append(t)
        time.sleep(0.01)
        if enough():
            break
    return threads, results


def _slow_worker_interpreter(tmp_path, seconds):
    """Environment whose sitecustomize holds each worker's interpreter (logging "interpreter
    PID" first) before skirr._worker runs, until a signal is pending for it (it is spawned with
    them blocked) or ``seconds`` pass: the window for the signals that reach a worker just
    spawned, held open until one came however slow the machine. The supervisor's interpreter is
    not held."""
    where = tmp_path / "slow-interpreter"
    where.mkdir()
    (where / "sitecustomize.py").write_text(
        "import os, signal, time\n"
        "if os.environ.get('SKIRR_WORKER'):\n"
        "    with open(os.environ['SKIRR_TEST_LOG'], 'a') as f:\n"
        "        f.write(f'interpreter {os.getpid()}\\n')\n"
        f"    deadline = time.monotonic() + {seconds}\n"
        "    while not signal.sigpending() and time.monotonic() < deadline:\n"
        "        time.sleep(0.005)\n")
    return {"PYTHONPATH": str(where)}


@pytest.mark.rule("skirr-signals-during-startup")
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_signal_while_a_worker_interpreter_starts(tmp_path, how):
    """A Ctrl-C (SIGINT to the whole process group, as a terminal sends it) or a SIGTERM to the
    supervisor while its worker's interpreter is still starting, before skirr runs there: the
    worker takes it once it can (SIGINT ignored, the supervisor's SIGTERM a graceful stop), so
    it stops with exit status 0 and no traceback, and the supervisor exits 0. The worker used to
    die of the signal (a KeyboardInterrupt traceback; "killed by SIGINT" made the supervisor
    exit 1; "killed by SIGTERM")."""
    proc, port = _serve(tmp_path, "--workers", "2", env=_slow_worker_interpreter(tmp_path, 10.0),
                        preexec_fn=os.setpgrp)
    with proc:
        _wait_for(lambda: any(e.startswith("interpreter ") for e in proc.events), 20,
                  "a worker's interpreter starting", proc)
        pid = next(e.split()[1] for e in proc.events if e.startswith("interpreter "))
        if how == "ctrl-c":
            os.killpg(proc.proc.pid, signal.SIGINT)
        else:
            proc.proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, proc.stderr
    assert f"Worker [{pid}] stopped (exit status 0)" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr, proc.stderr
    assert not _proc.accepts(port)


@pytest.mark.rule("skirr-signals-hup-roll")
def test_roll_stopped_by_a_failing_new_worker_says_so(tmp_path):
    """SIGHUP while the new code cannot start (its lifespan startup fails): the first slot's new
    worker fails, its old worker keeps serving, and the roll stops there with one line naming
    the slots that keep their old workers (it used to stop silently); every old worker still
    serves. Once the code starts again, a SIGHUP rolls every slot."""
    fail = tmp_path / "fail"
    proc, port = _serve(tmp_path, "--workers", "3", env={"SKIRR_TEST_FAIL_FILE": str(fail)})
    with proc:
        proc.wait_accepting(port)
        old = _serving_pids(port, 3)
        fail.write_text("x")
        proc.proc.send_signal(signal.SIGHUP)
        _wait_for(lambda: "Roll stopped" in proc.stderr, 20, "the roll stopped", proc)
        assert re.search(r"New worker \[\d+\] \(slot 0\) failed to start \(exit status 1\): "
                         r"worker \[\d+\] keeps serving", proc.stderr), proc.stderr
        assert "Roll stopped: slot(s) 1, 2 keep their workers (SIGHUP rolls again)" in \
            proc.stderr
        assert _serving_pids(port, 3) == old
        fail.unlink()
        proc.proc.send_signal(signal.SIGHUP)
        _wait_for(lambda: not (old & {_pid_of(port) for _ in range(30)}), 30,
                  "every slot rolled", proc)
        assert proc.stop(signal.SIGTERM) == 0


@pytest.mark.rule("skirr-signals-second-forces")
def test_nothing_starts_once_stopping(monkeypatch, records):
    """A roll's new worker that reports ready after the supervisor began stopping (a SIGINT or
    SIGTERM came meanwhile) takes its slot and its old worker is stopped, but the roll goes no
    further: no worker is started on the listening sockets stopping has closed (it used to be,
    and Popen refused the closed descriptors: "bad value(s) in fds_to_keep", the supervisor's
    traceback and exit status 1)."""
    import selectors

    from skirr import supervisor as sv
    from skirr.config import Config

    started = []
    monkeypatch.setattr(sv.subprocess, "Popen", lambda *a, **k: started.append(a))
    sup = sv.Supervisor(Config(APP, workers=2, port=0))
    sup._sel = selectors.DefaultSelector()
    sup._starting = False
    slots = [sv._Slot(i, socket.socket(), own=False) for i in range(2)]
    sup.slots.extend(slots)

    class Proc:
        def __init__(self, pid):
            self.pid, self.signals = pid, []

        def send_signal(self, signum):
            self.signals.append(signum)

    old0, old1, new0 = (sv._Worker(slots[i], Proc(100 + n), -1) for n, i in enumerate((0, 1, 0)))
    slots[0].current, slots[1].current, slots[0].successor = old0, old1, new0
    sup._roll, sup._rolling = [slots[1]], slots[0]
    for slot in slots:
        slot.sock.close()  # as stopping does (_close_sockets)
    sup._stopping = True
    sup._ready(new0)
    assert started == []
    assert slots[0].current is new0 and old0.proc.signals == [signal.SIGTERM]
    assert slots[1].current is old1 and slots[1].successor is None
    assert old1.proc.signals == []


@pytest.mark.rule("skirr-signals-term-graceful")
def test_sigterm_completes_requests_in_flight_on_every_worker(tmp_path):
    proc, port = _serve(tmp_path, "--workers", "3")
    with proc:
        proc.wait_accepting(port)
        _serving_pids(port, 3)
        threads, results = _slow_until(
            port, "/slow?s=2", 60,
            lambda: len({e.split()[1] for e in proc.events if e.startswith("slow-start")}) == 3)
        busy = {e.split()[1] for e in proc.events if e.startswith("slow-start")}
        assert len(busy) == 3, busy
        proc.proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        for t in threads:
            t.join(10)
        assert len(results) == len(threads)
        assert all(isinstance(b, str) and b.startswith("done ") for b in results), results
        assert {b.split()[1] for b in results} == busy
        assert sum(1 for e in proc.events if e.startswith("shutdown ")) == 3


@pytest.mark.rule("skirr-signals-second-forces")
def test_second_sigterm_exits_1_at_once(tmp_path):
    proc, port = _serve(tmp_path, "--workers", "2")
    with proc:
        proc.wait_accepting(port)
        sock = _proc.connect(port)
        conn = h11.Connection(h11.CLIENT)
        _proc.send_request(sock, conn, "GET", "/slow?s=20")
        _wait_for(lambda: any(e.startswith("slow-start") for e in proc.events), 5, "slow", proc)
        proc.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        started = time.monotonic()
        assert proc.stop(signal.SIGTERM, 5) == 1
        assert time.monotonic() - started < 2
        assert "Forced exit: killing" in proc.stderr
        sock.close()


@pytest.mark.rule("skirr-signals-hup-roll")
def test_sighup_rolls_to_new_code_under_load_without_failures(tmp_path):
    version = tmp_path / "version"
    version.write_text("v1")
    proc, port = _serve(tmp_path, "--workers", "2",
                        env={"SKIRR_TEST_VERSION_FILE": str(version)})
    with proc:
        proc.wait_accepting(port)
        old = _serving_pids(port, 2)
        with Load(port, new=2, keep=2) as load:
            time.sleep(0.5)
            version.write_text("v2")
            hup_at = time.monotonic()
            proc.proc.send_signal(signal.SIGHUP)
            _wait_for(lambda: all(f"Worker [{p}] stopped" in proc.stderr for p in old), 30,
                      "both old workers stopped", proc)
            done_at = time.monotonic()
            time.sleep(0.5)
        assert load.failures == [], (load.failures, load.retries)
        before = [v for t, _, v in load.answers if t < hup_at]
        after = [v for t, _, v in load.answers if t > done_at]
        assert before and set(before) == {"v1"}
        assert after and set(after) == {"v2"}
        assert {p for t, p, _ in load.answers if t > done_at}.isdisjoint(old)
        print(f"SIGHUP roll: {len(load.answers)} answers, 0 failures, "
              f"{load.retries} keep-alive retries")
        assert proc.stop() == 0


@pytest.mark.rule("skirr-signals-ttin-ttou")
def test_sigttin_adds_and_sigttou_removes_a_worker(tmp_path):
    proc, port = _serve(tmp_path, "--workers", "2")
    with proc:
        proc.wait_accepting(port)
        _serving_pids(port, 2)
        proc.proc.send_signal(signal.SIGTTIN)
        _wait_for(lambda: "SIGTTIN: 3 worker(s)" in proc.stderr, 5, "SIGTTIN", proc)
        _wait_for(lambda: proc.stderr.count("skirr running on") == 3, 15, "3rd worker", proc)
        assert _listen_entries(port) == 3
        assert len(_serving_pids(port, 3)) == 3
        third = _started_pids(proc)[-1]
        proc.proc.send_signal(signal.SIGTTOU)
        _wait_for(lambda: f"Worker [{third}] stopped (exit status 0)" in proc.stderr, 10,
                  "SIGTTOU", proc)
        assert _listen_entries(port) == 2
        assert {_pid_of(port) for _ in range(40)} <= set(_started_pids(proc)[:2])
        # One at a time: a signal sent while the same one is still pending is delivered once.
        proc.proc.send_signal(signal.SIGTTOU)
        _wait_for(lambda: "SIGTTOU: 1 worker(s)" in proc.stderr, 5, "SIGTTOU to 1", proc)
        proc.proc.send_signal(signal.SIGTTOU)
        _wait_for(lambda: "SIGTTOU: one worker left, keeping it" in proc.stderr, 5,
                  "SIGTTOU floor", proc)
        assert _pid_of(port) in _started_pids(proc)[:2]
        assert proc.stop() == 0


@pytest.mark.rule("skirr-signals-ttou-queue")
def test_sigttou_serves_the_removed_slots_queue_and_routes_new_connections_away(tmp_path):
    proc, port = _serve(tmp_path, "--workers", "2")
    with proc:
        proc.wait_accepting(port)
        _serving_pids(port, 2)
        first, removed = _started_pids(proc)[:2]  # SIGTTOU removes the newest slot
        os.kill(removed, signal.SIGSTOP)  # it accepts nothing more: its queue fills
        try:
            queued = []
            for _ in range(24):  # about half wait in the removed slot's queue
                sock = _proc.connect(port)
                conn = h11.Connection(h11.CLIENT)
                _proc.send_request(sock, conn, "GET", "/")
                queued.append((sock, conn))
            time.sleep(0.2)
            proc.proc.send_signal(signal.SIGTTOU)
            _wait_for(lambda: "SIGTTOU: 1 worker(s)" in proc.stderr, 5, "SIGTTOU", proc)
            time.sleep(0.2)
            # New connections go to the remaining worker only, while the removed one still
            # sleeps with its queue.
            for _ in range(20):
                assert _pid_of(port) == first
            assert f"Worker [{removed}] stopped" not in proc.stderr
        finally:
            os.kill(removed, signal.SIGCONT)
        pids = []
        for sock, conn in queued:
            with sock:
                r = _proc.read_response(sock, conn)  # a reset would raise here
                assert r.status == 200
                pids.append(int(r.body.split()[0]))
        assert set(pids) == {first, removed}, pids
        _wait_for(lambda: f"Worker [{removed}] stopped (exit status 0)" in proc.stderr, 10,
                  "the removed worker's exit", proc)
        assert _listen_entries(port) == 1
        assert {_pid_of(port) for _ in range(20)} == {first}
        assert proc.stop() == 0


@pytest.mark.rule("skirr-signals-ttou-queue")
def test_sigttou_under_a_flood_of_new_connections_fails_none(tmp_path):
    proc, port = _serve(tmp_path, "--workers", "3")
    with proc:
        proc.wait_accepting(port)
        _serving_pids(port, 3)
        started = _started_pids(proc)
        with Load(port, new=4) as load:
            time.sleep(0.3)
            for left, gone in ((2, started[2]), (1, started[1])):
                proc.proc.send_signal(signal.SIGTTOU)
                _wait_for(lambda: f"Worker [{gone}] stopped (exit status 0)" in proc.stderr, 15,
                          f"SIGTTOU to {left}", proc)
            time.sleep(0.3)
        assert not load.failures, load.failures
        assert len(load.answers) > 100
        assert _listen_entries(port) == 1
        assert {pid for t, pid, _ in load.answers[-20:]} == {started[0]}
        assert proc.stop() == 0


# ----------------------------------------------------------------------------------------------
# CPU per request does not grow with the worker count: a speed target, so it is measured in bench/
# (make bench-workers, or the workers row of make bench), and this case reads the verdict.


@pytest.mark.rule("skirr-workers-cpu-per-request")
@pytest.mark.parametrize("workload", ["raw_get", "fastapi_json"])
def test_cpu_per_request_does_not_grow_with_the_worker_count(workload):
    """The newest bench report with the workers row says skirr's CPU per request with 2 workers
    (manager and workers summed) is at most 1.5x one process's: the median of the per-round
    ratios, c64 (bench/harness/report.py's verdict line)."""
    name, m = newest_verdict(
        rf"^- {workload} c64, CPU/request 2 workers ÷ 1 \(skirr\): median ([0-9.]+) "
        r"\(([0-9.]+)–([0-9.]+)\); target ≤ ([0-9.]+): (met|MISSED) \(median\), (\d+)/(\d+) rounds")
    assert float(m[4]) == 1.5, (name, m[0])
    assert float(m[1]) <= 1.5 and m[5] == "met", (name, m[0])
    assert int(m[7]) >= 3, (name, m[0])  # at least 3 paired rounds


@pytest.mark.rule("skirr-log-config")
def test_supervisor_lines_go_through_log_config(tmp_path):
    """The supervisor's own lines (started, heartbeat kill, SIGTERM, worker stopped) go to the
    handlers and format of --log-config, as the workers' lines do; none reach stderr."""
    import json

    out = tmp_path / "skirr.log"
    cfg = tmp_path / "log.json"
    cfg.write_text(json.dumps({
        "version": 1, "disable_existing_loggers": False,
        "formatters": {"mine": {"format": "MINE %(name)s %(levelname)s %(message)s"}},
        "handlers": {"f": {"class": "logging.FileHandler", "filename": str(out),
                           "formatter": "mine"}},
        "loggers": {"skirr": {"handlers": ["f"], "level": "INFO", "propagate": False}},
    }))
    proc, port = _serve(tmp_path, "--workers", "2", "--log-config", str(cfg),
                        "--timeout-worker-healthcheck", "1", "--no-access-log")
    with proc:
        proc.wait_accepting(port)
        pids = _serving_pids(port, 2)
        thread = threading.Thread(target=lambda: _get_or_error(port, "/block?s=30"), daemon=True)
        thread.start()
        victim = int(_wait_for(lambda: [e for e in proc.events if e.startswith("block ")], 5,
                               "the block request", proc)[0].split()[1])
        _wait_for(lambda: "did not answer the heartbeat" in out.read_text(), 6,
                  "the heartbeat kill in the log file", proc)
        _wait_for(lambda: len(_serving_pids(port, 2) - (pids - {victim})) == 1, 10,
                  "a replacement serves", proc)
        assert proc.stop() == 0
        thread.join(10)
        supervisor = proc.proc.pid
        stderr = proc.stderr
    lines = out.read_text().splitlines()
    assert f"MINE skirr.error INFO Started supervisor [{supervisor}] for 2 worker(s) on " \
           f"http://127.0.0.1:{port}" in lines
    for pid in pids:
        assert any(x.startswith(f"MINE skirr.error INFO Started worker [{pid}] (slot ")
                   for x in lines), lines
    assert any(x.startswith(f"MINE skirr.error ERROR Worker [{victim}] (slot ")
               and x.endswith("did not answer the heartbeat for 1 s: killing it")
               for x in lines), lines
    assert "MINE skirr.error INFO SIGTERM: stopping 2 worker(s)" in lines
    survivors = [p for p in pids if p != victim]
    assert f"MINE skirr.error INFO Worker [{survivors[0]}] stopped (exit status 0)" in lines
    assert stderr == "", stderr


def _get_or_error(port, target):
    try:
        return _get(port, target, timeout=15)
    except (OSError, AssertionError, h11.RemoteProtocolError) as exc:
        return exc


@pytest.mark.rule("skirr-log-config")
def test_supervisor_lines_use_colors(tmp_path):
    proc, port = _serve(tmp_path, "--workers", "2", "--use-colors")
    with proc:
        proc.wait_accepting(port)
        _serving_pids(port, 2)
        assert proc.stop() == 0
        stderr = proc.stderr
    green = "\x1b[32mINFO\x1b[0m:     "
    assert f"{green}Started supervisor [{proc.proc.pid}] for 2 worker(s)" in stderr
    assert f"{green}SIGTERM: stopping 2 worker(s)" in stderr
    assert len(re.findall(re.escape(green) + r"Worker \[\d+\] stopped \(exit status 0\)",
                          stderr)) == 2


def _slow_import_app(tmp_path):
    """Writes tmp_path/slowimport.py: an app module whose import creates the marker file
    (returned first), then waits until the release file (returned second) exists (at most 30 s),
    then serves conformance/apps/basic.py's app. A case releases it once its signal is on its
    way (``_release``): held, not slept, so no machine is too slow for the window."""
    marker, release = tmp_path / "importing", tmp_path / "release-import"
    (tmp_path / "slowimport.py").write_text(
        "import pathlib, time\n"
        f"pathlib.Path({str(marker)!r}).write_text('yes')\n"
        "deadline = time.monotonic() + 30\n"
        f"while not pathlib.Path({str(release)!r}).exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.005)\n"
        "from basic import app\n")
    return marker, release


def _release(proc, release, after=None):
    """Lets the held import go on, once ``after`` is in ``proc``'s stderr (the supervisor's
    line that it is stopping its workers, logged just before it signals them) when given."""
    if after is not None:
        _wait_for(lambda: after in proc.stderr, 20, repr(after), proc)
    release.write_text("go")


@pytest.mark.rule("skirr-signals-during-startup")
@pytest.mark.parametrize("workers,signum,loop", [
    ("1", signal.SIGTERM, "asyncio"), ("1", signal.SIGINT, "uvloop"),
    ("2", signal.SIGTERM, "uvloop"), ("2", signal.SIGINT, "asyncio"),
])
def test_stop_during_startup_is_graceful(tmp_path, workers, signum, loop):
    """The signal arrives while the app's module imports (held there until the signal is sent,
    or relayed to the worker): the import finishes, lifespan startup and shutdown run, nothing
    is served, exit 0 with a line saying so."""
    marker, release = _slow_import_app(tmp_path)
    port = _proc.free_port()
    with _proc.Skirr(["slowimport:app", "--app-dir", str(tmp_path), "--port", str(port),
                      "--loop", loop, "--workers", workers], tmp_path) as proc:
        _wait_for(marker.exists, _proc.START_TIMEOUT, "the import", proc)
        proc.proc.send_signal(signum)
        _release(proc, release, None if workers == "1" else
                 f"{signal.Signals(signum).name}: stopping 1 worker(s)")
        assert proc.wait() == 0, proc.stderr
        stderr = proc.stderr
        events = proc.events
    assert "INFO:     Shutdown requested during startup: not serving\n" in stderr
    assert "skirr running on" not in stderr
    assert events == ["startup", "shutdown"]
    if workers == "2":
        name = signal.Signals(signum).name
        assert f"INFO:     {name}: stopping 1 worker(s)\n" in stderr
        assert re.search(r"INFO:     Worker \[\d+\] stopped \(exit status 0\)\n", stderr)


# ----------------------------------------------------------------------------------------------
# The supervisor's death: no worker outlives it (skirr._worker, _Orphan)

# The parent of `python -m skirr` in these cases: a child subreaper, so the workers a killed
# supervisor leaves behind become its children (not init's): it reaps each, writes "PID STATUS"
# (os.waitstatus_to_exitcode) to argv[1], and exits once no descendant is left.
_REAPER = r"""
import ctypes, os, subprocess, sys
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0):  # PR_SET_CHILD_SUBREAPER
    sys.exit("prctl(PR_SET_CHILD_SUBREAPER) failed")
with open(sys.argv[1], "a", buffering=1) as out:
    subprocess.Popen(sys.argv[2:])
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        out.write(f"{pid} {os.waitstatus_to_exitcode(status)}\n")
"""


class _Orphans:
    """``python -m skirr ARGS`` under ``_REAPER``: ``reaped()`` says which of its processes
    have exited and how; ``kill_supervisor()``; on exit every process still there is killed
    (the workers of a killed supervisor included) and the reaper waited for."""

    def __init__(self, tmp_path, args, env=None):
        self.status = tmp_path / "reaped.txt"
        self.status.touch()
        self.skirr = _proc.Skirr(args, tmp_path, env=env, command=[
            sys.executable, "-c", _REAPER, str(self.status), sys.executable, "-m", "skirr"])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            for _ in range(50):  # the reaper's children: the supervisor, then its orphans
                left = self._children()
                if not left:
                    break
                for pid in left:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.05)
            self.skirr.wait()
        finally:
            self.skirr.__exit__(*exc)

    def _children(self):
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        stat = f.read()
                except OSError:
                    continue
                fields = stat.rpartition(")")[2].split()
                if int(fields[1]) == self.skirr.proc.pid and fields[0] != "Z":
                    pids.append(int(entry))
        return pids

    @property
    def stderr(self):
        return self.skirr.stderr

    @property
    def events(self):
        return self.skirr.events

    def supervisor(self):
        return int(_wait_for(lambda: re.findall(r"Started supervisor \[(\d+)\]", self.stderr),
                             _proc.START_TIMEOUT, "the supervisor", self.skirr)[0])

    def reaped(self):
        return {int(pid): int(status) for pid, status in
                (line.split() for line in self.status.read_text().splitlines())}

    def kill_supervisor(self):
        os.kill(self.supervisor(), signal.SIGKILL)
        return time.monotonic()

    def wait_reaped(self, pids, timeout, what):
        """The exit statuses of ``pids`` once all have exited (fails past ``timeout``)."""
        _wait_for(lambda: set(pids) <= set(self.reaped()), timeout, what, self.skirr)
        return {pid: self.reaped()[pid] for pid in pids}


_HANG_STARTUP = {
    "lifespan": "import asyncio\n"
                "from basic import log\n"
                "async def app(scope, receive, send):\n"
                "    await receive()\n"
                "    log('startup')\n"
                "    await asyncio.Event().wait()\n",
    "import": "import time\n"
              "from basic import log\n"
              "log('startup')\n"
              "while True:\n"
              "    time.sleep(1)\n",
}


def _killed_in_startup(tmp_path, source):
    """``source`` as the app of ``--workers 2``; once it logged "startup" (its first worker
    starting; the second waits for it to be ready) the supervisor is SIGKILLed. Returns
    (worker pid, supervisor pid, seconds from the kill to the worker's exit, stderr, the app's
    events) once the worker exited 1 and the reaper is done (fails otherwise, with stderr)."""
    (tmp_path / "startapp.py").write_text(source)
    port = _proc.free_port()
    with _Orphans(tmp_path, ["startapp:app", "--app-dir", str(tmp_path), "--port", str(port),
                             "--workers", "2"]) as run:
        _wait_for(lambda: "startup" in run.events, _proc.START_TIMEOUT, "the startup", run.skirr)
        (worker,) = _started_pids(run)
        supervisor = run.supervisor()
        killed = run.kill_supervisor()
        reaped = run.wait_reaped([worker], 10, "the worker's exit")
        took = time.monotonic() - killed
        assert reaped == {worker: 1}, run.stderr
        assert run.skirr.wait(5) == 0  # the reaper: no process left
        return worker, supervisor, took, run.stderr, run.events


_THREAD_MASKS_APP = r"""
import re, signal, threading

async def app(scope, receive, send):
    lines = []
    for thread in sorted(threading.enumerate(), key=lambda t: t.name):
        if thread is threading.main_thread():
            continue
        with open(f"/proc/self/task/{thread.native_id}/status") as f:
            blocked = int(re.search(r"^SigBlk:\s*([0-9a-f]+)$", f.read(), re.M).group(1), 16)
        held = blocked >> (signal.SIGTERM - 1) & 1
        lines.append(f"{thread.name} {'blocks' if held else 'takes'} SIGTERM")
    body = "\n".join(lines).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
"""


@pytest.mark.rule("skirr-workers-signals-to-the-main-thread")
def test_worker_threads_leave_sigterm_to_the_main_thread(tmp_path):
    """The thread a worker starts before its event loop (the supervisor watch) blocks SIGTERM:
    taken by that thread while the main thread held it (before uvloop runs), the signal waited
    unseen for a second one, and a worker stopped during its startup served on."""
    (tmp_path / "masks.py").write_text(_THREAD_MASKS_APP)
    port = _proc.free_port()
    with _proc.Skirr(["masks:app", "--app-dir", str(tmp_path), "--port", str(port),
                      "--loop", "uvloop", "--workers", "2"], tmp_path) as proc:
        _wait_for(lambda: "skirr running on" in proc.stderr, _proc.START_TIMEOUT, "serving", proc)
        assert _get(port) == "skirr-orphan-watch blocks SIGTERM"
        assert proc.stop() == 0, proc.stderr


@pytest.mark.rule("skirr-workers-orphan-starting")
@pytest.mark.parametrize("hang", ["lifespan", "import"])
def test_supervisor_killed_during_a_startup_that_never_ends(tmp_path, hang):
    """The worker is in a lifespan startup that never completes (its loop runs), or in an import
    that never returns (its loop is blocked): once the supervisor is SIGKILLed the worker exits 1
    within a few seconds, with one line naming it and its supervisor."""
    worker, supervisor, took, stderr, _ = _killed_in_startup(tmp_path, _HANG_STARTUP[hang])
    # at once for a startup that can be cancelled; within 3 s (os._exit) for one that cannot
    assert took < (3 if hang == "lifespan" else 6)
    assert f"Worker [{worker}]: supervisor [{supervisor}] is gone: exiting before serving\n" \
        in stderr
    if hang == "import":
        assert f"Worker [{worker}]: supervisor [{supervisor}] is gone and the worker did not " \
            "exit within 3 s: exiting\n" in stderr
    assert "skirr running on" not in stderr


_SLOW_RESPONSE = (b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n"
                  b"connection: close\r\n\r\ndone %d")


def _slow_request(port, seconds):
    sock = _proc.connect(port)
    sock.sendall(b"GET /slow?s=%g HTTP/1.1\r\nhost: x\r\n\r\n" % seconds)
    return sock


def _read_to_eof(sock):
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.mark.rule("skirr-workers-orphan-serving")
def test_supervisor_killed_while_serving_drains_at_once(tmp_path):
    """The supervisor is SIGKILLed while a request is in flight; its heartbeat interval (20 s
    here) plays no part: both workers stop accepting at once, the request completes, both exit
    0 after their lifespan shutdown."""
    port = _proc.free_port()
    with _Orphans(tmp_path, [APP, "--port", str(port), "--workers", "2", "--no-date-header",
                             "--no-server-header", "--timeout-worker-healthcheck", "100"]) as run:
        run.skirr.wait_accepting(port)
        workers = _serving_pids(port, 2)
        supervisor = run.supervisor()
        with _slow_request(port, 4) as sock:
            busy = int(_wait_for(lambda: [e for e in run.events if e.startswith("slow-start")],
                                 5, "the slow request", run.skirr)[0].split()[1])
            killed = run.kill_supervisor()
            _wait_for(lambda: not _proc.accepts(port), 3, "new connections refused", run.skirr)
            assert time.monotonic() - killed < 3
            sock.settimeout(15)
            body = b"done %d" % busy
            assert _read_to_eof(sock) == _SLOW_RESPONSE % (len(body), busy)
        assert run.wait_reaped(workers, 10, "the workers' exits") == dict.fromkeys(workers, 0)
        assert run.skirr.wait(5) == 0
        stderr = run.stderr
        events = run.events
    for pid in workers:
        assert f"Worker [{pid}]: supervisor [{supervisor}] is gone: shutting down gracefully\n" \
            in stderr
        assert f"shutdown {pid}" in events


@pytest.mark.rule("skirr-workers-orphan-serving")
def test_supervisor_killed_while_draining_keeps_draining(tmp_path):
    """SIGTERM to the supervisor (the workers drain), then SIGKILL: the drain goes on (the
    supervisor's death is not a second, forcing, stop), the request in flight completes."""
    port = _proc.free_port()
    with _Orphans(tmp_path, [APP, "--port", str(port), "--workers", "2", "--no-date-header",
                             "--no-server-header", "--timeout-worker-healthcheck", "1"]) as run:
        run.skirr.wait_accepting(port)
        _serving_pids(port, 2)
        with _slow_request(port, 3) as sock:
            busy = int(_wait_for(lambda: [e for e in run.events if e.startswith("slow-start")],
                                 5, "the slow request", run.skirr)[0].split()[1])
            os.kill(run.supervisor(), signal.SIGTERM)
            _wait_for(lambda: "SIGTERM: stopping 2 worker(s)" in run.stderr, 5, "the stop",
                      run.skirr)
            time.sleep(0.5)  # a few heartbeats (every 0.2 s)
            run.kill_supervisor()
            sock.settimeout(15)
            body = b"done %d" % busy
            assert _read_to_eof(sock) == _SLOW_RESPONSE % (len(body), busy)
        # (the idle worker exited before the supervisor, which reaped it)
        assert run.wait_reaped([busy], 10, "the busy worker's exit") == {busy: 0}
        assert run.skirr.wait(5) == 0
        assert "Forced exit" not in run.stderr


@pytest.mark.rule("skirr-workers-orphan-serving")
def test_supervisor_killed_while_a_worker_loop_is_blocked(tmp_path):
    """A worker's loop is blocked (time.sleep 60 s) when the supervisor is SIGKILLed: it exits 1
    once it has not beaten for --timeout-worker-healthcheck (as the supervisor would have killed
    it), with a line saying so; the other worker drains and exits 0."""
    port = _proc.free_port()
    with _Orphans(tmp_path, [APP, "--port", str(port), "--workers", "2",
                             "--timeout-worker-healthcheck", "3"]) as run:
        run.skirr.wait_accepting(port)
        workers = _serving_pids(port, 2)
        supervisor = run.supervisor()
        sock = _proc.connect(port)
        try:
            sock.sendall(b"GET /block?s=60 HTTP/1.1\r\nhost: x\r\n\r\n")
            blocked = int(_wait_for(lambda: [e for e in run.events if e.startswith("block ")],
                                    5, "the block request", run.skirr)[0].split()[1])
            killed = run.kill_supervisor()
            other = (workers - {blocked}).pop()
            assert run.wait_reaped(workers, 15, "the workers' exits") == {blocked: 1, other: 0}
            assert time.monotonic() - killed < 8
        finally:
            sock.close()
        assert run.skirr.wait(5) == 0
        stderr = run.stderr
    assert f"Worker [{blocked}]: supervisor [{supervisor}] is gone and the event loop did not " \
        "answer the heartbeat for 3 s: exiting\n" in stderr


_STARTUP_THAT_HOLDS_THE_GIL = (
    "import os, sys\n"
    "from basic import log\n"
    "async def app(scope, receive, send):\n"
    "    if scope['type'] != 'lifespan':\n"
    "        return\n"
    "    await receive()\n"
    "    supervisor = os.getppid()\n"
    "    sys.setswitchinterval(1000)  # no other thread of the process runs before a block\n"
    "    log('startup')\n"
    "    while os.getppid() == supervisor:  # os.getppid() keeps the GIL\n"
    "        pass\n"
    "    await send({'type': 'lifespan.startup.complete'})\n"
    "    await receive()\n"
    "    log('shutdown')\n"
    "    await send({'type': 'lifespan.shutdown.complete'})\n")


@pytest.mark.rule("skirr-workers-orphan-starting")
def test_supervisor_killed_while_the_startup_holds_the_watch_thread_off(tmp_path):
    """The supervisor dies during a lifespan startup that then completes without ever letting
    another thread of the worker run (it holds the GIL): the watch thread cannot see the death
    before serving would begin, the check just before the listeners start does. Nothing is
    served, no lifespan shutdown runs (the startup's forced stop), the worker exits 1.
    Fails without that check: the worker served, then drained and exited 0."""
    worker, supervisor, _, stderr, events = _killed_in_startup(tmp_path,
                                                              _STARTUP_THAT_HOLDS_THE_GIL)
    assert f"Worker [{worker}]: supervisor [{supervisor}] is gone: exiting before serving\n" \
        in stderr
    assert "skirr running on" not in stderr
    assert events == ["startup"]


@pytest.mark.rule("skirr-workers-orphan-starting")
def test_supervisor_killed_before_its_worker_ran(tmp_path):
    """The supervisor dies before its second worker's interpreter reached skirr's code (a
    sitecustomize holds every worker but the first there while its parent is the supervisor
    named in its ``$SKIRR_WORKER``: a ppid read there may already be the reaper's), so the
    worker's parent is already the reaper when it starts: it still knows its supervisor is
    gone, exits 1 before serving; the first drains. Held, not slept: no machine is too slow."""
    (tmp_path / "sitecustomize.py").write_text(
        "import json, os, time\n"
        "if 'SKIRR_WORKER' in os.environ:\n"
        "    try:\n"
        f"        os.close(os.open({str(tmp_path / 'first')!r}, os.O_CREAT | os.O_EXCL))\n"
        "    except FileExistsError:\n"
        "        parent = json.loads(os.environ['SKIRR_WORKER'])['supervisor']\n"
        "        deadline = time.monotonic() + 30\n"
        "        while os.getppid() == parent and time.monotonic() < deadline:\n"
        "            time.sleep(0.01)\n")
    port = _proc.free_port()
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path),
                                                       os.environ.get("PYTHONPATH")]))}
    with _Orphans(tmp_path, [APP, "--port", str(port), "--workers", "2"], env=env) as run:
        run.skirr.wait_accepting(port)
        _wait_for(lambda: len(_started_pids(run)) == 2, 10, "the second worker", run.skirr)
        first, second = _started_pids(run)
        supervisor = run.supervisor()
        run.kill_supervisor()  # the second is held in its sitecustomize
        reaped = run.wait_reaped([first, second], 10, "the workers' exits")
        assert reaped == {first: 0, second: 1}, run.stderr
        assert run.skirr.wait(5) == 0
        stderr = run.stderr
    assert f"Worker [{second}]: supervisor [{supervisor}] is gone: exiting before serving\n" \
        in stderr
    assert f"Worker [{first}]: supervisor [{supervisor}] is gone: shutting down gracefully\n" \
        in stderr


# ----------------------------------------------------------------------------------------------
# Thread workers (issue 34 item 3): --worker-kind thread, one worker process of N event loops

THREADS_APP = "threads_app:app"
# A free-threaded build (3.13t/3.14t) runs thread workers as users do; on a build with the GIL
# (CI's) the cases set skirr's test-only variable.
_FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
THREADS_WITH_GIL_ENV = "SKIRR_THREAD_WORKERS_WITH_GIL"  # for skirr's tests alone


def _threads_env(extra=None):
    env = {} if _FREE_THREADED else {THREADS_WITH_GIL_ENV: "1"}
    env.update(extra or {})
    return env


def _serve_threads(tmp_path, n, loop, *args, env=None):
    port = _proc.free_port()
    proc = _proc.Skirr([THREADS_APP, "--port", str(port), "--workers", str(n), "--worker-kind",
                        "thread", "--loop", loop, *args], tmp_path, env=_threads_env(env))
    return proc, port


def _wait_loops(proc, port, n):
    """Until all ``n`` loops accept (the first accepts alone while the others start)."""
    proc.wait_accepting(port)
    _wait_for(lambda: proc.stderr.count("skirr running on") >= n, _proc.START_TIMEOUT,
              f"{n} loops accepting", proc)


def _who(port, target="/"):
    """(pid, thread ident) of the loop that answered ``target``, and the body."""
    body = _get(port, target)
    pid, tid = body.split()[1:3] if body.startswith("done ") else body.split()[:2]
    return int(pid), int(tid), body


def _events(proc, kind):
    """The (pid, thread ident) of each "KIND PID TID" event the app logged."""
    return [(int(e.split()[1]), int(e.split()[2])) for e in proc.events
            if e.startswith(kind + " ")]


@pytest.mark.rule("skirr-threads-refused-with-gil")
@pytest.mark.parametrize("how", ["flag", "env", "reload"])
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_thread_workers_refused_on_a_gil_build(tmp_path, monkeypatch, how, loop):
    port = _proc.free_port()
    args = [THREADS_APP, "--port", str(port), "--workers", "2", "--loop", loop]
    # the GIL on: a build with it, or a free-threaded build told to keep it (PYTHON_GIL=1)
    env = {THREADS_WITH_GIL_ENV: "", "PYTHON_GIL": "1"} if _FREE_THREADED else \
        {THREADS_WITH_GIL_ENV: ""}
    if how == "env":
        env["SKIRR_WORKER_KIND"] = "thread"
    else:
        args += ["--worker-kind", "thread"]
    if how == "reload":  # refused with --reload even where thread workers may run
        env = _threads_env()
        args.append("--reload")
    with _proc.Skirr(args, tmp_path, env=env) as proc:
        status = proc.wait()
        stderr, stdout = proc.stderr, proc.stdout
    what = "SKIRR_WORKER_KIND" if how == "env" else "--worker-kind"
    why = ("cannot be used with --reload" if how == "reload" else
           "needs a free-threaded Python (3.13t/3.14t) with the GIL disabled; this interpreter "
           "has the GIL: use --worker-kind process")
    assert (status, stderr, stdout) == (2, f"skirr: error: {what} thread {why}\n", "")
    with socket.socket() as probe:  # nothing was bound (nor left bound)
        probe.bind(("127.0.0.1", port))
    if how == "flag" and not _FREE_THREADED:  # Config's own refusal (skirr.run(...))
        monkeypatch.delenv(THREADS_WITH_GIL_ENV, raising=False)
        with pytest.raises(ConfigError, match=r"^worker_kind 'thread' needs a free-threaded "
                           r"Python \(3\.13t/3\.14t\) with the GIL disabled"):
            Config(THREADS_APP, workers=2, worker_kind="thread")

@pytest.mark.rule("skirr-threads-serve", "skirr-threads-replace")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_thread_workers_serve_from_every_loop_of_one_process(tmp_path, loop):
    proc, port = _serve_threads(tmp_path, 3, loop)
    with proc:
        _wait_loops(proc, port, 3)
        answers = [_who(port) for _ in range(60)]  # a new connection each
        pids = {pid for pid, _, _ in answers}
        tids = {tid for _, tid, _ in answers}
        assert len(pids) == 1, answers
        pid = next(iter(pids))
        assert all(body == f"{pid} {tid} v1" for _, tid, body in answers), answers
        assert len(tids) == 3, answers  # each loop's SO_REUSEPORT listener got connections
        assert _get(port, "/gil") == ("0" if _FREE_THREADED else "1")
        assert proc.events.count(f"import {pid}") == 1  # the application imported once
        assert sorted(_events(proc, "startup")) == sorted((pid, t) for t in tids)
        # the thread count is fixed: SIGTTIN and SIGTTOU are one line each, nothing changes
        for signum in (signal.SIGTTIN, signal.SIGTTOU):
            proc.proc.send_signal(signum)
            proc.wait_stderr(f"{signum.name}: not supported with --worker-kind thread: "
                             "keeping 3 threads\n")
        assert {_who(port)[0] for _ in range(10)} == {pid}
        assert proc.stop() == 0
        stderr = proc.stderr
    assert sorted(_events(proc, "shutdown")) == sorted((pid, t) for t in tids)
    assert _started_pids(proc) == [pid]
    assert f"for 1 worker process of 3 threads on http://127.0.0.1:{port}\n" in stderr
    assert stderr.count("Application startup complete.") == 3
    assert f"Worker [{pid}] stopped (exit status 0)\n" in stderr


@pytest.mark.rule("skirr-threads-serve")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_thread_workers_share_one_listener_without_reuse_port(tmp_path, loop):
    """--no-reuse-port: every loop accepts from the one listener; while one loop is blocked the
    other answers."""
    proc, port = _serve_threads(tmp_path, 2, loop, "--no-reuse-port")
    with proc:
        _wait_loops(proc, port, 2)
        blocked = []
        thread = threading.Thread(target=lambda: blocked.append(_who(port, "/block?s=1.5")))
        thread.start()
        pid, busy = _wait_for(lambda: _events(proc, "block"), 5, "the block request", proc)[0]
        started = time.monotonic()
        other = _who(port)
        assert time.monotonic() - started < 1.0  # not waiting for the blocked loop
        assert other[0] == pid and other[1] != busy
        assert other[2] == f"{pid} {other[1]} v1"
        thread.join(10)
        assert blocked[0][2] == f"{pid} {busy}"
        assert proc.stop() == 0
    assert _started_pids(proc) == [pid]


@pytest.mark.rule("skirr-threads-startup-failure")
@pytest.mark.parametrize("nth", [1, 2])
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_thread_worker_startup_failure_in_one_loop_exits_1_once(tmp_path, loop, nth):
    """The nth lifespan startup fails: the first loop's (the others never start) or a later
    one's (the first loop, already serving, stops with the rest)."""
    proc, _port = _serve_threads(tmp_path, 3, loop,
                                 env={"SKIRR_TEST_FAIL_STARTUP": str(nth)})
    with proc:
        status = proc.wait()
        stderr = proc.stderr
    assert status == 1, stderr
    assert stderr.count(f"refused startup {nth}") == 1, stderr
    assert len(_started_pids(proc)) == 1
    started = _events(proc, "startup")
    assert len(started) == (0 if nth == 1 else 2)
    assert sorted(_events(proc, "shutdown")) == sorted(started)  # the started loops stopped


@pytest.mark.rule("skirr-threads-term-graceful")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_thread_workers_sigterm_drains_every_loop(tmp_path, loop):
    proc, port = _serve_threads(tmp_path, 2, loop)
    with proc:
        _wait_loops(proc, port, 2)
        threads, results = _slow_until(
            port, "/slow?s=1.5", 40,
            lambda: len({tid for _, tid in _events(proc, "slow-start")}) == 2)
        busy = set(_events(proc, "slow-start"))
        assert len({tid for _, tid in busy}) == 2, busy
        proc.proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        for t in threads:
            t.join(10)
    starts = _events(proc, "slow-start")
    assert len(results) == len(threads) == len(starts)
    assert sorted(results) == sorted(f"done {pid} {tid}" for pid, tid in starts)
    assert len(_events(proc, "shutdown")) == 2


@pytest.mark.rule("skirr-threads-heartbeat")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_thread_worker_with_one_blocked_loop_is_replaced(tmp_path, loop):
    proc, port = _serve_threads(tmp_path, 2, loop, "--timeout-worker-healthcheck", "1")
    with proc:
        _wait_loops(proc, port, 2)
        first = _who(port)[0]
        thread, blocked = _block_a_worker(port)
        victim, _tid = _wait_for(lambda: _events(proc, "block"), 5, "the block request",
                                 proc)[0]
        assert victim == first
        started = time.monotonic()
        _wait_for(lambda: f"Worker [{victim}] (slot 0) did not answer the heartbeat for 1 s: "
                  "killing it\n" in proc.stderr, 4, "the heartbeat kill", proc)
        # the other loop kept beating; the blocked one's last beat came up to a fifth of the
        # timeout before it blocked, and two fifths without one stop the worker's heartbeat
        assert 0.7 <= time.monotonic() - started < 3.5
        thread.join(10)
        assert isinstance(blocked[0], (OSError, h11.RemoteProtocolError)), blocked
        _wait_for(lambda: _who(port)[0] not in (first,), 10, "a replacement serves", proc)
        assert len(_started_pids(proc)) == 2
        assert proc.stop() == 0


@pytest.mark.rule("skirr-threads-replace")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_thread_worker_sighup_roll_under_load_without_failures(tmp_path, loop):
    version = tmp_path / "version"
    version.write_text("v1")
    proc, port = _serve_threads(tmp_path, 2, loop,
                                env={"SKIRR_TEST_VERSION_FILE": str(version)})
    with proc:
        _wait_loops(proc, port, 2)
        old = _who(port)[0]
        with Load(port, new=2, keep=2) as load:
            time.sleep(0.5)
            version.write_text("v2")
            hup_at = time.monotonic()
            proc.proc.send_signal(signal.SIGHUP)
            _wait_for(lambda: f"Worker [{old}] stopped (exit status 0)" in proc.stderr, 15,
                      "the old worker stopped", proc)
            done_at = time.monotonic()
            time.sleep(0.3)
        assert load.failures == [], (load.failures, load.retries)
        # Load records "PID" and the rest ("TID VERSION")
        before = [v.split()[1] for t, _, v in load.answers if t < hup_at]
        after = [(p, v.split()[1]) for t, p, v in load.answers if t > done_at]
        assert before and set(before) == {"v1"}
        new = _started_pids(proc)[1]
        assert after and set(after) == {(new, "v2")}
        assert "SIGHUP: restarting the worker process of 2 threads\n" in proc.stderr
        assert f"Worker [{new}] serves slot 0: stopping worker [{old}]\n" in proc.stderr
        assert proc.stop() == 0


@pytest.mark.rule("skirr-threads-replace")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_thread_worker_max_requests_counts_every_loop(tmp_path, loop):
    """--limit-max-requests 20 with 2 loops: 19 requests spread over both loops retire
    nothing, the 20th (whichever loop serves it) starts the process's replacement."""
    proc, port = _serve_threads(tmp_path, 2, loop, "--limit-max-requests", "20")
    with proc:
        _wait_loops(proc, port, 2)
        answers = [_who(port) for _ in range(19)]
        assert len({pid for pid, _, _ in answers}) == 1
        assert len({tid for _, tid, _ in answers}) == 2  # neither loop alone reached 20
        old = answers[0][0]
        time.sleep(0.3)
        assert "request limit" not in proc.stderr
        _who(port)
        proc.wait_stderr(f"Worker [{old}] reached its request limit: starting its replacement",
                         3)
        with Load(port, new=2, keep=1) as load:
            _wait_for(lambda: f"Worker [{old}] stopped (exit status 0)" in proc.stderr, 15,
                      "the old worker stopped", proc)
            time.sleep(0.2)
        assert load.failures == [], (load.failures, load.retries)
        new = _started_pids(proc)[1]
        assert f"Worker [{new}] serves slot 0: stopping worker [{old}]\n" in proc.stderr
        assert proc.stderr.count(f"Worker [{old}] reached its request limit") == 1
        assert _who(port)[0] != old  # (the new worker may have reached its own limit by now)
        assert proc.stop() == 0


@pytest.mark.rule("skirr-threads-replace")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_thread_worker_replacement_past_its_limit_before_ready_is_replaced(tmp_path, loop):
    """--limit-max-requests 10 with 2 loops, each process's second loop 1.5 s slow to start: the
    replacement's first loop serves (and passes 10 requests) while its second still starts, before
    the process is READY. Once READY, that replacement is replaced in turn (its RETIRE waits for its
    READY: the supervisor ignores one from a worker not current yet), and so on."""
    proc, port = _serve_threads(tmp_path, 2, loop, "--limit-max-requests", "10",
                                env={"SKIRR_TEST_SLOW_STARTUP": "1.5"})
    with proc:
        _wait_loops(proc, port, 2)
        first = _who(port)[0]
        for _ in range(9):
            _who(port)
        proc.wait_stderr(f"Worker [{first}] reached its request limit", 3)
        # new connections while the replacement's second loop starts: its first loop takes its
        # share of them (SO_REUSEPORT) and passes the limit before the process is READY
        second = _wait_for(lambda: next((p for p in _started_pids(proc)[1:]), None), 10,
                           "the replacement started", proc)
        served = Counter()
        deadline = time.monotonic() + 10
        while f"Worker [{second}] serves slot 0" not in proc.stderr:
            assert time.monotonic() < deadline, proc.stderr
            served[_who(port)[0]] += 1
        assert served[second] >= 10, served  # it passed its limit before READY
        proc.wait_stderr(f"Worker [{second}] reached its request limit: starting its "
                         "replacement", 5)
        third = _wait_for(lambda: len(_started_pids(proc)) >= 3 and _started_pids(proc)[2], 10,
                          "a third worker started", proc)
        proc.wait_stderr(f"Worker [{third}] serves slot 0: stopping worker [{second}]", 10)
        assert proc.stop() == 0


@pytest.mark.rule("skirr-threads-replace", "skirr-close-announced-max-requests")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_thread_worker_max_requests_last_responses_announce_the_close(tmp_path, loop):
    """--limit-max-requests 20 with 2 loops: once the process has served 20 requests (over both
    loops), each loop's next response on a kept-alive connection says 'connection: close' and
    the connection ends after it, as a process worker's last responses do; before the limit
    the same connections stay persistent. (The replacement imports slowly, so the old process
    still serves them.)"""
    delay = tmp_path / "import-delay"
    proc, port = _serve_threads(tmp_path, 2, loop, "--limit-max-requests", "20",
                                env={"SKIRR_TEST_IMPORT_DELAY_FILE": str(delay)})
    with proc:
        _wait_loops(proc, port, 2)
        kept = {}  # thread ident -> (socket, h11 connection): one kept-alive connection a loop
        used = 0
        try:
            while len(kept) < 2:
                assert used < 16, f"16 connections reached one loop only: {sorted(kept)}"
                sock = _proc.connect(port)
                conn = h11.Connection(h11.CLIENT)
                _proc.send_request(sock, conn)
                r = _proc.read_response(sock, conn)
                used += 1
                assert (r.status, r.header(b"connection")) == (200, None), r
                pid, tid = map(int, r.body.split()[:2])
                conn.start_next_cycle()
                if tid in kept:
                    sock.close()
                else:
                    kept[tid] = (sock, conn)
            delay.write_text("5")  # the replacement's import: 5 s
            old = pid
            for _ in range(20 - used):
                assert _who(port)[0] == old
            proc.wait_stderr(f"Worker [{old}] reached its request limit: starting its "
                             "replacement", 3)
            time.sleep(0.3)  # the announcement reaches each loop within one tick (0.05 s)
            for tid, (sock, conn) in kept.items():
                _proc.send_request(sock, conn)
                r = _proc.read_response(sock, conn)
                assert (r.status, r.header(b"connection"), r.body) == \
                    (200, b"close", f"{old} {tid} v1".encode()), r
                assert sock.recv(1) == b""  # the connection ended after it
        finally:
            for sock, _ in kept.values():
                sock.close()
        assert proc.stop() == 0


def _scrape(mport):
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.mark.rule("skirr-threads-metrics")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_thread_worker_metrics_sum_every_loop(tmp_path, loop):
    mport = _proc.free_port()
    proc, port = _serve_threads(tmp_path, 2, loop, "--metrics-port", str(mport),
                                "--timeout-worker-healthcheck", "1")
    with proc:
        _wait_loops(proc, port, 2)
        answers = [_who(port) for _ in range(30)]
        assert len({tid for _, tid, _ in answers}) == 2
        key = ("skirr_requests_total", (("method", "GET"), ("status", "2xx")))
        deadline = time.monotonic() + 5
        while (m := _scrape(mport)).get(key) != 30:
            assert m.get(key, 0) < 30, m.get(key)
            assert time.monotonic() < deadline, (m.get(key), proc.stderr)
            time.sleep(0.05)
        assert m[("skirr_request_duration_seconds_count", ())] == 30
        assert proc.stop() == 0


@pytest.mark.rule("skirr-workers-orphan-serving")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_thread_worker_of_a_killed_supervisor_drains_every_loop(tmp_path, loop):
    """The supervisor is SIGKILLed while a request is in flight on one loop of a thread worker:
    every loop stops accepting at once, the request completes, the worker exits 0 after each
    loop's lifespan shutdown."""
    port = _proc.free_port()
    with _Orphans(tmp_path, [THREADS_APP, "--port", str(port), "--workers", "2",
                             "--worker-kind", "thread", "--loop", loop, "--no-date-header",
                             "--no-server-header", "--timeout-worker-healthcheck", "100"],
                  env=_threads_env()) as run:
        _wait_loops(run.skirr, port, 2)
        worker = _who(port)[0]
        supervisor = run.supervisor()
        with _slow_request(port, 1.5) as sock:
            pid, tid = _wait_for(lambda: _events(run.skirr, "slow-start"), 5,
                                 "the slow request", run.skirr)[0]
            killed = run.kill_supervisor()
            _wait_for(lambda: not _proc.accepts(port), 3, "new connections refused", run.skirr)
            assert time.monotonic() - killed < 3
            sock.settimeout(15)
            body = b"done %d %d" % (pid, tid)
            assert _read_to_eof(sock) == (
                b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n"
                b"connection: close\r\n\r\n%s" % (len(body), body))
        assert run.wait_reaped([worker], 10, "the worker's exit") == {worker: 0}
        stderr = run.stderr
    assert pid == worker
    assert stderr.count(f"Worker [{worker}]: supervisor [{supervisor}] is gone: shutting down "
                        "gracefully\n") == 1
    assert len(_events(run.skirr, "shutdown")) == 2


@pytest.mark.rule("skirr-signals-during-startup")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_thread_worker_stop_during_the_import_is_graceful(tmp_path, loop):
    """SIGTERM while a thread worker imports the app (once, in its main thread): the import
    finishes, the first loop's lifespan starts and shuts down, no loop serves, exit 0."""
    marker, release = _slow_import_app(tmp_path)
    port = _proc.free_port()
    with _proc.Skirr(["slowimport:app", "--app-dir", str(tmp_path), "--port", str(port),
                      "--loop", loop, "--workers", "2", "--worker-kind", "thread"], tmp_path,
                     env=_threads_env()) as proc:
        _wait_for(marker.exists, _proc.START_TIMEOUT, "the import", proc)
        proc.proc.send_signal(signal.SIGTERM)
        _release(proc, release, "SIGTERM: stopping 1 worker(s)")
        assert proc.wait() == 0, proc.stderr
        stderr = proc.stderr
        events = proc.events
    assert stderr.count("INFO:     Shutdown requested during startup: not serving\n") == 1
    assert "skirr running on" not in stderr
    assert events == ["startup", "shutdown"]
    assert "INFO:     SIGTERM: stopping 1 worker(s)\n" in stderr
    assert re.search(r"INFO:     Worker \[\d+\] stopped \(exit status 0\)\n", stderr)
