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


def _gunicorn(tmp_path, app, *args):
    port = _proc.free_port()
    proc = _proc.Skirr([app, "-k", "skirr.workers.SkirrWorker", "-b", f"127.0.0.1:{port}",
                        "--graceful-timeout", "10", *args], tmp_path, command=GUNICORN)
    return proc, port


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
