"""gunicorn -k skirr.workers.SkirrWorker (issue 12 §4), with the real gunicorn from PyPI.

gunicorn's arbiter binds and forks; each worker serves the app with skirr: lifespan runs in
every worker, SIGTERM to the arbiter is a graceful stop (in-flight requests finish, exit 0),
--max-requests recycles workers, a failed lifespan startup stops gunicorn (boot error).
"""
from __future__ import annotations

import re
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

try:
    from . import _proc
except ImportError:
    import _proc

gunicorn = pytest.importorskip("gunicorn")  # installed by the Makefile's TEST_DEPS
GUNICORN = [str(Path(sys.executable).with_name("gunicorn"))]


def _gunicorn(tmp_path, app, *args, env=None):
    port = _proc.free_port()
    proc = _proc.Skirr([app, "-k", "skirr.workers.SkirrWorker", "-b", f"127.0.0.1:{port}",
                        "--graceful-timeout", "10", *args], tmp_path, command=GUNICORN, env=env)
    return proc, port


def _wait_events(proc, prefix, count, timeout=20.0):
    """Waits until the app logged ``count`` events starting with ``prefix``; returns them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [e for e in proc.events if e.startswith(prefix)]
        if len(found) >= count:
            return found
        assert proc.proc.poll() is None, proc.stderr
        time.sleep(0.05)
    raise AssertionError(f"{count} {prefix!r} events not within {timeout} s: {proc.events}")


@pytest.mark.rule("skirr-gunicorn-worker")
def test_gunicorn_serves_with_lifespan_and_stops_gracefully(tmp_path):
    proc, port = _gunicorn(tmp_path, "workers_app:app", "-w", "2")
    with proc:
        proc.wait_accepting(port)
        _wait = time.monotonic() + 20
        while sum(e.startswith("startup ") for e in proc.events) < 2 and time.monotonic() < _wait:
            time.sleep(0.05)
        assert sum(e.startswith("startup ") for e in proc.events) == 2
        r = _proc.request(port)
        assert r.status == 200 and r.body.decode().endswith(" v1")
        result = []
        slow = threading.Thread(target=lambda: result.append(_proc.request(port, target="/slow?s=1.5")))
        slow.start()
        deadline = time.monotonic() + 5
        while not any(e.startswith("slow-start") for e in proc.events):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert proc.stop(signal.SIGTERM) == 0
        slow.join(5)
        assert result and result[0].status == 200 and result[0].body.startswith(b"done ")
        assert sum(e.startswith("shutdown ") for e in proc.events) == 2


@pytest.mark.rule("skirr-gunicorn-worker")
def test_gunicorn_max_requests_recycles_workers(tmp_path):
    proc, port = _gunicorn(tmp_path, "workers_app:app", "-w", "1", "--max-requests", "5")
    with proc:
        proc.wait_accepting(port)
        pids = set()
        deadline = time.monotonic() + 30
        while len(pids) < 3 and time.monotonic() < deadline:
            try:
                r = _proc.request(port)
            except OSError:
                continue  # the one worker is being replaced: gunicorn's own gap
            assert r.status == 200
            pids.add(int(r.body.split()[0]))
        assert len(pids) >= 3
        assert "Maximum request limit of 5 exceeded. Terminating process." in proc.stderr
        assert proc.stop(signal.SIGTERM) == 0


@pytest.mark.rule("skirr-gunicorn-worker")
def test_gunicorn_lifespan_failure_stops_gunicorn(tmp_path):
    proc, port = _gunicorn(tmp_path, "basic:startup_failed", "-w", "1")
    with proc:
        status = proc.wait(20)
    assert status != 0
    assert "database unreachable" in proc.stderr
    assert "Worker failed to boot" in proc.stderr


@pytest.mark.rule("skirr-gunicorn-worker")
def test_gunicorn_ttou_lets_the_removed_worker_finish(tmp_path):
    """SIGTTOU: the arbiter removes its oldest worker with SIGTERM and sends SIGTERM again about
    every second until that worker has exited. The repeats change nothing: the worker's
    in-flight requests are answered, its lifespan shutdown runs and it exits 0 (gunicorn logs no
    error). They used to force its exit: requests cut, no lifespan shutdown, exit status 1."""
    proc, port = _gunicorn(tmp_path, "workers_app:app", "-w", "1")
    with proc:
        proc.wait_accepting(port)
        (first,) = _wait_events(proc, "startup ", 1)
        oldest = first.split()[1]
        results = []
        threads = [threading.Thread(target=lambda: results.append(
            _proc.request(port, target="/slow?s=3"))) for _ in range(3)]
        for t in threads:
            t.start()
        _wait_events(proc, "slow-start ", 3)
        proc.proc.send_signal(signal.SIGTTIN)
        _wait_events(proc, "startup ", 2)
        proc.proc.send_signal(signal.SIGTTOU)
        for t in threads:
            t.join(10)
        assert [(r.status, r.body) for r in results] == [(200, f"done {oldest}".encode())] * 3
        _wait_events(proc, f"shutdown {oldest}", 1)
        assert proc.stop(signal.SIGTERM) == 0
    assert "exited with code" not in proc.stderr and "Forced exit" not in proc.stderr, proc.stderr


@pytest.mark.rule("skirr-gunicorn-worker")
def test_gunicorn_hup_during_lifespan_startup_keeps_serving(tmp_path):
    """SIGHUP to the arbiter while a worker's lifespan startup runs: that worker, asked to stop,
    is not serving and exits 0 (not gunicorn's boot-error status, which used to halt the whole
    arbiter: "Worker failed to boot"); its replacement starts and serves."""
    proc, port = _gunicorn(tmp_path, "workers_app:app", "-w", "1",
                           env={"SKIRR_TEST_STARTUP_SLEEP": "1.5"})
    with proc:
        _wait_events(proc, "startup-begin ", 1)
        proc.proc.send_signal(signal.SIGHUP)
        _wait_events(proc, "startup ", 1)  # the replacement's (the first never completes one)
        proc.wait_accepting(port)
        r = _proc.request(port)
        assert r.status == 200 and r.body.decode().endswith(" v1")
        assert proc.proc.poll() is None
        proc.wait_stderr("Shutdown requested during startup: not serving")
        assert proc.stop(signal.SIGTERM) == 0
    assert "Worker failed to boot" not in proc.stderr and "exited with code" not in proc.stderr, (
        proc.stderr)


@pytest.mark.rule("skirr-gunicorn-worker")
def test_gunicorn_term_while_importing_the_app_is_graceful(tmp_path):
    """SIGTERM to the arbiter while the workers import the app (gunicorn imports it before the
    worker's event loop runs): each worker ends gracefully (lifespan startup, not serving,
    lifespan shutdown, exit 0), not by SIGTERM's default action."""
    proc, port = _gunicorn(tmp_path, "workers_app:app", "-w", "2",
                           env={"SKIRR_TEST_IMPORT_SLEEP": "1.5"})
    with proc:
        _wait_events(proc, "import ", 2)
        assert proc.stop(signal.SIGTERM) == 0
    assert proc.stderr.count("Shutdown requested during startup: not serving") == 2, proc.stderr
    assert len([e for e in proc.events if e.startswith("shutdown ")]) == 2, proc.events
    assert "was sent SIGTERM" not in proc.stderr and "exited with code" not in proc.stderr, (
        proc.stderr)


@pytest.mark.rule("skirr-gunicorn-worker")
@pytest.mark.parametrize("signum", [signal.SIGQUIT, signal.SIGINT], ids=["SIGQUIT", "SIGINT"])
def test_gunicorn_quick_shutdown_exits_zero(tmp_path, signum):
    """SIGQUIT or SIGINT to the arbiter (gunicorn's quick shutdown): every worker stops at once
    and exits 0, as gunicorn's own workers do; gunicorn logs no error for any of them."""
    proc, port = _gunicorn(tmp_path, "workers_app:app", "-w", "2")
    with proc:
        proc.wait_accepting(port)
        _wait_events(proc, "startup ", 2)
        assert proc.stop(signum) == 0
    assert "exited with code" not in proc.stderr and "was sent" not in proc.stderr, proc.stderr
