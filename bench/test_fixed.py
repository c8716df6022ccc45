"""The fixed-rate run (h2load --rps, measure.run_h2load) checked against scripted servers on loopback.

Run before the fixed-rate rows are measured (`make bench`, `bench-targets`, `bench-quick`) and by
hand: `.venv/bin/python -m pytest bench/test_fixed.py -q`. Each scripted server answers every
request of raw_get on keep-alive connections with the status line it is given, so each way a
response is counted (2xx, non-2xx, and the empty reason-phrase h2load 1.52 logs as status 0) is
shown with its exact counts. Stdlib, pytest and h2load (installed by the harness when missing).
"""
from __future__ import annotations

import socket
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.env import ensure_tools  # noqa: E402
from harness.measure import run_h2load  # noqa: E402
from harness.workloads import WORKLOADS, status_line  # noqa: E402

pytestmark = pytest.mark.timeout(60)
BODY = WORKLOADS["raw_get"]["expect"]


@pytest.fixture(scope="module", autouse=True)
def h2load():
    assert ensure_tools(["h2load"])["h2load"], "h2load (nghttp2-client) is needed and not installed"


class Scripted:
    """A keep-alive HTTP/1.1 server on a free loopback port: every request (a GET, no body) is
    answered with `status` (the status line, without CRLF) and raw_get's body."""

    def __init__(self, status):
        self.response = (status + b"\r\ncontent-type: text/plain\r\ncontent-length: "
                         + str(len(BODY)).encode() + b"\r\n\r\n" + BODY)
        self.ls = socket.create_server(("127.0.0.1", 0))
        self.port = self.ls.getsockname()[1]
        self.answered = 0
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

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
                while b"\r\n\r\n" not in buf:
                    try:
                        data = conn.recv(4096)
                    except OSError:
                        return
                    if not data:
                        return
                    buf += data
                _, buf = buf.split(b"\r\n\r\n", 1)
                conn.sendall(self.response)
                with self.lock:
                    self.answered += 1

    def close(self):
        self.ls.close()


@pytest.fixture
def server():
    made = []

    def make(status):
        made.append(Scripted(status))
        return made[-1]
    yield make
    for s in made:
        s.close()


def load(srv, tmp_path, empty_reason):
    """Two connections at 100 req/s for 1 s (after h2load's 1 s warm-up)."""
    return run_h2load("raw_get", srv.port, 2, 100, 1, tmp_path, empty_reason)


@pytest.mark.parametrize("line", [b"HTTP/1.1 200 ", b"HTTP/1.1 200 OK", b"HTTP/1.1 503 Busy"])
def test_the_probe_returns_the_status_line_as_sent(server, line):
    assert status_line("raw_get", server(line).port) == line


def test_the_probe_refuses_a_body_that_is_not_the_workloads(server):
    srv = Scripted(b"HTTP/1.1 200 OK")
    srv.response = srv.response.replace(BODY, b"X" * len(BODY))
    try:
        with pytest.raises(AssertionError, match="raw_get: body 13 bytes b'XXXXXXXXXXXXX'"):
            status_line("raw_get", srv.port)
    finally:
        srv.close()


def test_a_reason_phrase_counts_every_response_as_2xx(server, tmp_path):
    res = load(server(b"HTTP/1.1 200 OK"), tmp_path, empty_reason=False)
    assert res["requests"] >= 100
    assert (res["failed"], res["errored"], res["timeout"], res["non2xx"],
            res["status_by_probe"]) == (0, 0, 0, 0, 0)


def test_an_empty_reason_phrase_is_what_h2load_counts_as_failed(server, tmp_path):
    # Why the probe exists: h2load 1.52 reads these responses whole, logs status 0 for each and
    # counts each as failed.
    res = load(server(b"HTTP/1.1 200 "), tmp_path, empty_reason=False)
    assert res["requests"] >= 100
    assert res["failed"] == res["non2xx"] == res["requests"]
    assert res["status_by_probe"] == 0


def test_an_empty_reason_phrase_probed_as_200_counts_by_the_probe(server, tmp_path):
    res = load(server(b"HTTP/1.1 200 "), tmp_path, empty_reason=True)
    assert res["requests"] >= 100
    assert res["status_by_probe"] == res["requests"]
    assert (res["failed"], res["errored"], res["timeout"], res["non2xx"]) == (0, 0, 0, 0)


def test_a_non_2xx_status_stays_non_2xx_whatever_the_probe(server, tmp_path):
    res = load(server(b"HTTP/1.1 503 Busy"), tmp_path, empty_reason=True)
    assert res["requests"] >= 100
    assert res["non2xx"] == res["failed"] == res["requests"]
    assert res["status_by_probe"] == 0
