"""The WebSocket load generator (bench/ws_load.c) checked against scripted servers on loopback.

Run before the WebSocket rows are measured (`make bench-ws`, `make bench-quick`) and by hand:
`.venv/bin/python -m pytest bench/test_ws_load.py -q`. Each scripted server answers one
connection: the handshake (right or wrong), then echoes frames as told (exactly, corrupted,
fragmented with a ping between the fragments), so every check the generator makes is shown to
fail when it should and to pass when it should. Stdlib and pytest only.
"""
from __future__ import annotations

import base64
import hashlib
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.peers import build_ws_load  # noqa: E402

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
pytestmark = pytest.mark.timeout(30)


@pytest.fixture(scope="module")
def ws_load():
    return str(build_ws_load())


def read_frame(sock, buf):
    """(opcode, fin, unmasked payload, rest of buf) of the next client frame; None at EOF."""
    while True:
        if len(buf) >= 2:
            n, h = buf[1] & 0x7F, 2
            if n == 126:
                n, h = int.from_bytes(buf[2:4], "big"), 4
            assert buf[1] & 0x80, "client frames must be masked"
            if len(buf) >= h + 4 + n:
                mask = buf[h:h + 4]
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(buf[h + 4:h + 4 + n]))
                return buf[0] & 0x0F, buf[0] >> 7, payload, buf[h + 4 + n:]
        data = sock.recv(65536)
        if not data:
            return None
        buf += data


def server_frame(opcode, payload, fin=True):
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    head += bytes([n]) if n < 126 else bytes([126]) + n.to_bytes(2, "big")
    return head + payload


class Scripted:
    """One connection on a free loopback port: the handshake as `accept` and `extra_headers` say,
    then every data frame handled by `echo(payload) -> bytes to send`; what arrived is recorded."""

    def __init__(self, echo, accept=None, extra_headers=b"", first=b""):
        self.echo, self.accept, self.extra, self.first = echo, accept, extra_headers, first
        self.ls = socket.create_server(("127.0.0.1", 0))
        self.port = self.ls.getsockname()[1]
        self.request = b""
        self.got = []  # (opcode, payload) of every client frame
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        conn, _ = self.ls.accept()
        conn.settimeout(10)
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(4096)
            self.request = head
            key = next(line.split(b":", 1)[1].strip() for line in head.split(b"\r\n")
                       if line.lower().startswith(b"sec-websocket-key:"))
            accept = self.accept or base64.b64encode(hashlib.sha1(key + GUID).digest())
            conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                         b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n"
                         + self.extra + b"\r\n" + self.first)
            buf = b""
            while True:
                try:
                    got = read_frame(conn, buf)
                except OSError:
                    return
                if got is None:
                    return
                opcode, _, payload, buf = got
                self.got.append((opcode, payload))
                if opcode == 8:
                    conn.sendall(server_frame(8, payload[:2]))
                    return
                if opcode in (1, 2):
                    conn.sendall(self.echo(payload))

    def close(self):
        self.thread.join(10)
        self.ls.close()


def run(ws_load, port, *args):
    p = subprocess.run([ws_load, str(port), *args], capture_output=True, text=True, timeout=20)
    line = [x for x in p.stdout.splitlines() if x.startswith("WSLOAD ")][-1]
    return p.returncode, json.loads(line[len("WSLOAD "):])


def exact(payload):
    return server_frame(1, payload)


def test_exact_echo_counts_every_message_and_closes_cleanly(ws_load):
    srv = Scripted(exact)
    rc, res = run(ws_load, srv.port, "-c", "1", "-n", "5", "-s", "200")
    srv.close()
    assert (rc, res["errors"], res["messages"], res["closed_clean"]) == (0, 0, 5, 1)
    assert b"Sec-WebSocket-Version: 13\r\n" in srv.request
    assert b"extension" not in srv.request.lower()  # permessage-deflate never offered
    data = [p for op, p in srv.got if op == 1]
    assert len(data) == 5 and all(len(p) == 200 for p in data) and len(set(data)) == 5
    assert srv.got[-1] == (8, b"\x03\xe8")  # close 1000


def test_binary_frames(ws_load):
    srv = Scripted(lambda p: server_frame(2, p))
    rc, res = run(ws_load, srv.port, "-c", "1", "-n", "2", "-s", "64", "-b")
    srv.close()
    assert (rc, res["errors"], res["messages"], res["opcode"]) == (0, 0, 2, "binary")


def test_fragmented_echo_with_a_ping_between_fragments(ws_load):
    def fragmented(p):
        return (server_frame(1, p[:10], fin=False) + server_frame(9, b"hi")
                + server_frame(0, p[10:]))
    srv = Scripted(fragmented, first=server_frame(9, b"early"))
    rc, res = run(ws_load, srv.port, "-c", "1", "-n", "3", "-s", "40")
    srv.close()
    assert (rc, res["errors"], res["messages"]) == (0, 0, 3)
    assert (10, b"early") in srv.got and (10, b"hi") in srv.got  # pongs with the ping's payload


@pytest.mark.parametrize("echo,error", [
    (lambda p: server_frame(1, p[:-1] + b"!"), "echo differs from message 0 at payload byte 39"),
    (lambda p: server_frame(1, p[:-1]), "echo of 39 bytes, sent 40"),
    (lambda p: server_frame(2, p), "echo has opcode 2, sent 1"),
    (lambda p: server_frame(8, b"\x03\xf0bye"), "the server closed the connection (code 1008"),
])
def test_a_wrong_echo_is_an_error(ws_load, echo, error):
    srv = Scripted(echo)
    rc, res = run(ws_load, srv.port, "-c", "1", "-n", "3", "-s", "40")
    srv.close()
    assert rc == 1 and res["errors"] == 1 and res["messages"] == 0
    assert error in res["error"]


@pytest.mark.parametrize("accept,extra,error", [
    (b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", b"", "Sec-WebSocket-Accept 's3pPLMBiTxaQ9kYGzzhZRbK+xOo='"),
    (None, b"Sec-WebSocket-Extensions: permessage-deflate\r\n",
     "extension 'permessage-deflate' in the 101, none offered"),
])
def test_a_wrong_handshake_is_an_error(ws_load, accept, extra, error):
    srv = Scripted(exact, accept=accept, extra_headers=extra)
    rc, res = run(ws_load, srv.port, "-c", "1", "-n", "1")
    srv.ls.close()
    assert rc == 1 and res["errors"] == 1 and res["messages"] == 0
    assert error in res["error"]


def test_timed_mode_marks_the_measured_interval(ws_load):
    srv = Scripted(exact)
    p = subprocess.run([ws_load, str(srv.port), "-c", "1", "-s", "64", "-w", "0.2", "-d", "0.5"],
                       capture_output=True, text=True, timeout=20)
    srv.close()
    lines = p.stdout.splitlines()
    assert p.returncode == 0 and lines[:2] == ["MEASURE_START", "MEASURE_END"]
    res = json.loads(lines[2][len("WSLOAD "):])
    assert res["errors"] == 0 and res["messages"] > 0 and res["warmup_messages"] > 0
    assert 0.45 < res["wall_s"] < 0.7
    assert res["p50_us"] <= res["p99_us"] <= res["max_us"]


def test_usage_error_exits_2(ws_load):
    assert subprocess.run([ws_load, "x"], capture_output=True).returncode == 2
    assert subprocess.run([ws_load, "80", "-c", "0"], capture_output=True).returncode == 2
