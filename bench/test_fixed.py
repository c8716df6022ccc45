"""The fixed-rate run (h2load --rps, measure.run_h2load and fixed_rate_run) checked against
scripted servers on loopback.

Run before the fixed-rate rows are measured (`make bench`, `bench-targets`, `bench-quick`) and by
hand: `.venv/bin/python -m pytest bench/test_fixed.py -q`. Each scripted server answers every
request of raw_get on keep-alive connections with the status line it is given (and, after a
number of answers, with another, logging a line as a server logs an error), so each way a
response is counted (2xx, non-2xx, and the empty reason-phrase h2load 1.52 logs as status 0) is
shown with its exact counts. Stdlib, pytest, taskset and h2load (installed by the harness when
missing); h2load runs on CPU 1, as in the matrix.
"""
from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.env import ensure_tools  # noqa: E402
from harness.measure import fixed_rate_run, run_h2load  # noqa: E402
from harness.workloads import WORKLOADS, status_line  # noqa: E402

pytestmark = pytest.mark.timeout(60)
BODY = WORKLOADS["raw_get"]["expect"]


@pytest.fixture(scope="module", autouse=True)
def tools():
    found = ensure_tools(["h2load", "taskset"])
    assert all(found.values()), f"needed and not installed: {found}"


class Scripted:
    """A keep-alive HTTP/1.1 server on a free loopback port: every request (a GET, no body) is
    answered with `status` (the status line, without CRLF) and raw_get's body; from answer
    number `after` on (when given), with `later` instead, each also written as a line to `log`
    (a server's log) and to `answered`; with `truncate`, from answer `after` on, the head and 5
    bytes of the body, and the connection closed."""

    def __init__(self, status, later=None, after=0, log=None, truncate=False):
        self.status, self.later, self.after, self.log = status, later, after, log
        self.truncate = truncate
        self.answered = []  # every status line sent, in order
        self.lock = threading.Lock()
        self.ls = socket.create_server(("127.0.0.1", 0))
        self.port = self.ls.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def response(self, status):
        return (status + b"\r\ncontent-type: text/plain\r\ncontent-length: "
                + str(len(BODY)).encode() + b"\r\n\r\n" + BODY)

    def accept(self):
        while True:
            try:
                conn, _ = self.ls.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        buf = b""
        with conn:
            while True:
                try:
                    while b"\r\n\r\n" not in buf:
                        data = conn.recv(4096)
                        if not data:
                            return
                        buf += data
                    _, buf = buf.split(b"\r\n\r\n", 1)
                    with self.lock:
                        status, cut = self.status, False
                        if self.truncate and len(self.answered) >= self.after:
                            status, cut = b"cut", True
                        elif self.later is not None and len(self.answered) >= self.after:
                            status = self.later
                            if self.log is not None:
                                with open(self.log, "ab") as f:
                                    f.write(b"error: answered " + status + b"\n")
                        self.answered.append(status)
                    if cut:
                        conn.sendall(self.response(self.status)[:-8])
                        return
                    conn.sendall(self.response(status))
                except OSError:  # h2load closes its connections when the load ends
                    return

    def close(self):
        self.ls.close()


class Running:
    """What fixed_rate_run needs of measure's Server: the port, the pids whose CPU is read (this
    process), and the log (a file the scripted server writes to)."""

    def __init__(self, scripted, log):
        self.port, self.logpath = scripted.port, log

    def pids(self):
        return [os.getpid()]

    def log_size(self):
        return self.logpath.stat().st_size

    def log_since(self, offset):
        with open(self.logpath, "rb") as f:
            f.seek(offset)
            return f.read().decode()


@pytest.fixture
def server():
    made = []

    def make(status, **kw):
        made.append(Scripted(status, **kw))
        return made[-1]
    yield make
    for s in made:
        s.close()


def load(srv, tmp_path, empty_reason):
    """Two connections at 100 req/s for 1 s (after h2load's 1 s warm-up): about 100 requests
    logged (a few fewer on a busy machine)."""
    return run_h2load("raw_get", srv.port, 2, 100, 1, tmp_path, empty_reason)


@pytest.mark.parametrize("line", [b"HTTP/1.1 200 ", b"HTTP/1.1 200 OK", b"HTTP/1.1 503 Busy"])
def test_the_probe_returns_the_status_line_as_sent(server, line):
    srv = server(line)
    assert status_line("raw_get", srv.port) == line
    assert srv.answered == [line]


def test_the_probe_refuses_a_body_that_is_not_the_workloads(server):
    srv = server(b"HTTP/1.1 200 OK")
    srv.response = lambda status: (status + b"\r\ncontent-length: 13\r\n\r\n" + b"X" * 13)
    with pytest.raises(AssertionError, match="raw_get: body 13 bytes b'XXXXXXXXXXXXX'"):
        status_line("raw_get", srv.port)


def test_a_reason_phrase_counts_every_response_as_2xx(server, tmp_path):
    srv = server(b"HTTP/1.1 200 OK")
    res = load(srv, tmp_path, empty_reason=False)
    assert 90 <= res["requests"] <= len(srv.answered)  # the warm-up's answers are not logged
    assert (res["failed"], res["errored"], res["timeout"], res["non2xx"],
            res["status_by_probe"]) == (0, 0, 0, 0, 0)


def test_an_empty_reason_phrase_is_what_h2load_counts_as_failed(server, tmp_path):
    # Why the probe exists: h2load 1.52 reads these responses whole, logs status 0 for each and
    # counts each as failed.
    res = load(server(b"HTTP/1.1 200 "), tmp_path, empty_reason=False)
    assert res["requests"] >= 90
    assert res["failed"] == res["non2xx"] == res["requests"]
    assert (res["errored"], res["timeout"], res["status_by_probe"]) == (0, 0, 0)


def test_an_empty_reason_phrase_probed_as_200_counts_by_the_probe(server, tmp_path):
    res = load(server(b"HTTP/1.1 200 "), tmp_path, empty_reason=True)
    assert res["requests"] >= 90
    assert res["status_by_probe"] == res["requests"]
    assert (res["failed"], res["errored"], res["timeout"], res["non2xx"]) == (0, 0, 0, 0)


def test_a_non_2xx_status_stays_non_2xx_whatever_the_probe(server, tmp_path):
    res = load(server(b"HTTP/1.1 503 Busy"), tmp_path, empty_reason=True)
    assert res["requests"] >= 90
    assert res["non2xx"] == res["failed"] == res["requests"]
    assert res["status_by_probe"] == 0


def test_a_quiet_server_counted_by_the_probe_passes(server, tmp_path):
    log = tmp_path / "server.log"
    log.write_bytes(b"started\n")  # what it logged before the load is not held against it
    srv = server(b"HTTP/1.1 200 ", log=log)
    res = fixed_rate_run(Running(srv, log), "raw_get", 2, 100, 1, tmp_path, empty_reason=True)
    assert res["status_by_probe"] == res["requests"] >= 90
    assert res["failed"] == 0


def test_an_error_status_unread_by_h2load_fails_the_load_by_the_servers_log(server, tmp_path):
    # h11 sends every status without a reason-phrase: a 500 during the load is logged as 0 like
    # the 200s. What the load cannot see, the server's log shows.
    log = tmp_path / "server.log"
    log.write_bytes(b"")
    srv = server(b"HTTP/1.1 200 ", later=b"HTTP/1.1 500 ", after=150, log=log)
    with pytest.raises(RuntimeError, match=r"^\d+ responses counted by the probed status line, "
                       r"and the server logged during the load: error: answered HTTP/1.1 500 "):
        fixed_rate_run(Running(srv, log), "raw_get", 2, 100, 1, tmp_path, empty_reason=True)
    assert srv.answered[0] == b"HTTP/1.1 200 " and srv.answered[-1] == b"HTTP/1.1 500 "


@pytest.mark.parametrize("empty_reason", [False, True])
def test_a_response_cut_short_fails_the_load_whatever_the_probe(server, tmp_path, empty_reason):
    # h2load 1.52 in rate mode neither fails nor errors a response cut short (the connection
    # closed inside its body), nor logs it: it stops that client. Each connection is cut at
    # its first answer after the 150th (in the main phase), so about half the load is missing.
    status = b"HTTP/1.1 200 " if empty_reason else b"HTTP/1.1 200 OK"
    srv = server(status, truncate=True, after=150)
    with pytest.raises(RuntimeError, match=r"^h2load: \d+ responses in 1 s, under 95% of the 100 "
                       r"offered \(a connection lost, or the server fell behind\): requests: "):
        load(srv, tmp_path, empty_reason)
    assert srv.answered.count(b"cut") == 2
