"""The callgrind count's own parts checked without valgrind: the closed-loop client that drives
the concurrent phase, against scripted servers on loopback, and the overlay of extension modules
stripped of debug information that peers run from, and the HTTP/2 phase's h2load run and exact
check against a scripted h2c server.

Run before the counts are taken (`make bench-callgrind`) and by hand:
`.venv/bin/python -m pytest bench/test_traced.py -q`. Every check the client makes is shown to
fail when it should (a wrong status, a wrong body, a closed connection, silence) and to pass when
it should. Stdlib, pytest, the C compiler, and for the HTTP/2 phase the h2 library (the suite's
oracle), h2load and curl.
"""
from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import traced  # noqa: E402
from harness.workloads import Conn, exact_concurrent  # noqa: E402

pytestmark = pytest.mark.timeout(30)
BODY = b"Hello, world!"
REQ = Conn.request_bytes("GET", "/")


def response(status=200, body=BODY):
    return (f"HTTP/1.1 {status} X\r\ncontent-length: {len(body)}\r\n\r\n").encode() + body


class Scripted:
    """A loopback server: every connection gets `answer(i)` for its i-th request (counted over
    all connections), written in `pieces` parts; None closes the connection instead."""

    def __init__(self, answer, pieces=1):
        self.answer, self.pieces = answer, pieces
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.port = self.lsock.getsockname()[1]
        self.count, self.lock = 0, threading.Lock()
        self.conns = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                s, _ = self.lsock.accept()
            except OSError:
                return
            self.conns.append(s)
            threading.Thread(target=self.serve, args=(s,), daemon=True).start()

    def serve(self, s):
        buf = b""
        try:
            while True:
                while len(buf) < len(REQ):
                    data = s.recv(65536)
                    if not data:
                        return
                    buf += data
                assert buf.startswith(REQ)
                buf = buf[len(REQ):]
                with self.lock:
                    i, self.count = self.count, self.count + 1
                out = self.answer(i)
                if out is None:
                    s.close()
                    return
                step = -(-len(out) // self.pieces)
                for k in range(0, len(out), step):
                    s.sendall(out[k:k + step])
        except OSError:
            return

    def close(self):
        self.lsock.close()
        for s in self.conns:
            s.close()


@pytest.fixture
def scripted():
    made = []

    def make(answer, pieces=1):
        made.append(Scripted(answer, pieces))
        return made[-1]

    yield make
    for srv in made:
        srv.close()


@pytest.mark.parametrize("conns", [1, 4, 16])
@pytest.mark.parametrize("pieces", [1, 3])
def test_every_exact_answer_counts_and_no_more_requests_are_sent(scripted, conns, pieces):
    srv = scripted(lambda i: response(), pieces)
    assert exact_concurrent(srv.port, REQ, 100, conns, BODY) == 100
    assert srv.count == 100  # closed loop: no request beyond the total


@pytest.mark.parametrize("bad", [response(500), response(200, b"Hello, world?"),
                                 response(200, b"")])
def test_a_wrong_status_or_body_is_not_counted(scripted, bad):
    srv = scripted(lambda i: bad if i % 10 == 3 else response())
    assert exact_concurrent(srv.port, REQ, 50, 4, BODY) == 45


def test_a_closed_connection_is_an_error(scripted):
    srv = scripted(lambda i: None if i == 7 else response())
    with pytest.raises(ConnectionError, match="closed by the server"):
        exact_concurrent(srv.port, REQ, 50, 4, BODY)


def test_silence_is_an_error(scripted):
    srv = scripted(lambda i: response() if i < 5 else b"HTTP/1.1 200 X\r\n")
    with pytest.raises(TimeoutError, match="no answer for 1 s"):
        exact_concurrent(srv.port, REQ, 50, 4, BODY, timeout=1.0)


def test_the_overlay_strips_debug_information_and_leaves_the_venv_alone(tmp_path, monkeypatch):
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.99" / "site-packages"
    (site / "pkg" / "sub").mkdir(parents=True)
    (site / "plain").mkdir()
    src = tmp_path / "m.c"
    src.write_text("int skirr_test_answer(void) { return 42; }\n")
    for so, debug in ((site / "pkg" / "sub" / "_m.so", True), (site / "top.so", True),
                      (site / "plain" / "_p.so", False)):
        flags = ["-g"] if debug else []
        subprocess.run(["cc", "-shared", "-fPIC", *flags, "-o", str(so), str(src)], check=True)
    (site / "pkg" / "__init__.py").write_text("X = 1\n")
    monkeypatch.setattr(traced, "BUILD", tmp_path / "build")
    overlay = traced.nodebug_overlay(venv)
    assert sorted(p.relative_to(overlay).as_posix() for p in overlay.rglob("*")
                  if p.is_file()) == [".done", "pkg/__init__.py", "pkg/sub/_m.so", "top.so"]
    assert not traced.has_debug_info(overlay / "pkg" / "sub" / "_m.so")
    assert not traced.has_debug_info(overlay / "top.so")
    assert traced.has_debug_info(site / "pkg" / "sub" / "_m.so")  # the venv is untouched
    nm = subprocess.run(["nm", "-D", str(overlay / "top.so")], capture_output=True, text=True)
    assert "skirr_test_answer" in nm.stdout  # symbols stay: callgrind still names functions
    assert traced.nodebug_overlay(venv) == overlay  # made once for the same files


class ScriptedH2:
    """An h2c server (prior knowledge, the h2 library) on a loopback port answering every stream
    with answer(i) -> (status, body) for the i-th request; counts the requests."""

    def __init__(self, answer):
        import h2.config
        import h2.connection
        import h2.events
        self.h2, self.answer, self.count = (h2.config, h2.connection, h2.events), answer, 0
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        config, connection, events = self.h2
        c = connection.H2Connection(config.H2Configuration(client_side=False))
        c.initiate_connection()
        conn.sendall(c.data_to_send())
        with conn:
            while data := conn.recv(65536):
                for ev in c.receive_data(data):
                    if isinstance(ev, events.RequestReceived):
                        with self.lock:
                            i, self.count = self.count, self.count + 1
                        status, body = self.answer(i)
                        c.send_headers(ev.stream_id, [(":status", str(status)),
                                                      ("content-length", str(len(body)))])
                        c.send_data(ev.stream_id, body, end_stream=True)
                conn.sendall(c.data_to_send())

    def close(self):
        self.sock.close()


@pytest.fixture
def scripted_h2():
    made = []

    def make(answer):
        made.append(ScriptedH2(answer))
        return made[-1]

    yield make
    for srv in made:
        srv.close()


def test_h2load_phase_counts_exact_answers(scripted_h2):
    """callgrind --h2's phase (h2load_exact): every request h2load counts, then curl's exact check."""
    srv = scripted_h2(lambda i: (200, BODY))
    assert traced.h2load_exact(srv.port, "raw_get", 100, 2, 10, False, "h2c") == 100
    assert srv.count == 101  # and curl's one


@pytest.mark.parametrize("answer, error", [
    (lambda i: (500, BODY) if i == 7 else (200, BODY), RuntimeError),  # h2load: a non-2xx
    (lambda i: (200, b"Hello, world?") if i == 100 else (200, BODY), AssertionError),  # curl's
])
def test_h2load_phase_refuses_a_wrong_status_or_body(scripted_h2, answer, error):
    srv = scripted_h2(answer)
    with pytest.raises(error):
        traced.h2load_exact(srv.port, "raw_get", 100, 2, 10, False, "h2c")
