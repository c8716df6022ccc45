"""The TLS stream layer on the wire (issue 32 items 1 and 7; spec/tls_wire.toml): what a client
sees over a real TLS socket, whatever its ciphertext's split, its faults and its pace.

The client is Python's ``ssl`` module (the oracle) on memory BIOs (``MemClient``): the test moves
the ciphertext itself, so it can cut the client's records at chosen byte offsets (hypothesis),
stall, reset or truncate wherever a case says, and see whether the server ended with
close_notify or a bare FIN. Certificates come from trustme (conformance/tls_util.py). Every case
counts the process's descriptors before and after (the server runs in this process): nothing
may be left open.
"""
from __future__ import annotations

import os
import socket
import ssl
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from _oracle import examples, oracle_settings
from conftest import final_piece_app, streaming_app
from tls_util import TLSFiles

rule = pytest.mark.rule

KIB = 1024
MIB = 1024 * 1024
PLAIN_400 = (
    b"HTTP/1.1 400 Bad Request\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"content-length: 48\r\n"
    b"connection: close\r\n"
    b"\r\n"
    b"The plain HTTP request was sent to an HTTPS port"
)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def fds_back(baseline: int, timeout: float = 5.0) -> int:
    """The descriptor count once it is back to `baseline` (or what it is after `timeout`)."""
    deadline = time.monotonic() + timeout
    while open_fds() > baseline and time.monotonic() < deadline:
        time.sleep(0.02)
    return open_fds()


@pytest.fixture
def tls(tmp_path: Path) -> TLSFiles:
    return TLSFiles(tmp_path / "tls")


class Calls:
    """What the app was called with: (method, path, body), in order; thread-safe."""

    def __init__(self) -> None:
        self.items: list = []
        self.lock = threading.Lock()

    def add(self, item) -> None:
        with self.lock:
            self.items.append(item)


def echo_app(calls: Calls, files: dict | None = None):
    """Echoes the request body; /big answers 1 MiB from memory, /file the file files['file']
    by http.response.pathsend (the pread path under TLS)."""

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        body = b""
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                calls.add((scope["method"], scope["path"], body, "disconnect"))
                return
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        calls.add((scope["method"], scope["path"], body))
        if scope["path"] == "/file":
            path = files["file"]
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", str(path.stat().st_size).encode())]})
            await send({"type": "http.response.pathsend", "path": str(path)})
            return
        if scope["path"] == "/big":
            body = big_body()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    return app


def big_body(n: int = MIB) -> bytes:
    return bytes((i * 31 + i // 997) & 0xFF for i in range(n))


class MemClient:
    """A TLS client on memory BIOs over a TCP socket the test drives."""

    def __init__(self, port: int, ctx: ssl.SSLContext, rcvbuf: int = 0, timeout: float = 10.0):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.inc, self.out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self.inc, self.out, server_hostname="localhost")

    def send_raw(self, data: bytes, cuts=()) -> None:
        """`data` in one send per piece, cut at the offsets `cuts` (a pause between pieces so
        the server reads them apart)."""
        prev = 0
        for c in sorted(set(cuts)) + [len(data)]:
            if prev < c <= len(data):
                self.sock.sendall(data[prev:c])
                if c < len(data):
                    time.sleep(0.001)
                prev = c

    def flush(self, cuts=()) -> int:
        data = self.out.read()
        if data:
            self.send_raw(data, [c % len(data) for c in cuts])
        return len(data)

    def handshake(self, cuts=()) -> None:
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.flush(cuts)
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ConnectionError("the server closed during the handshake")
                self.inc.write(chunk)
        self.flush(cuts)

    def write(self, plaintext: bytes, cuts=()) -> None:
        self.tls.write(plaintext)
        self.flush(cuts)

    def read_to_end(self, recv_size: int = 65536, pause: float = 0.0) -> tuple[bytes, str]:
        """Plaintext until the server's end: ('close_notify' or 'eof' without it)."""
        got = bytearray()
        while True:
            try:
                while True:
                    data = self.tls.read(65536)
                    if not data:  # Python's SSLObject: b"" once close_notify came
                        return bytes(got), "close_notify"
                    got += data
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                return bytes(got), "close_notify"
            raw = self.sock.recv(recv_size)
            if not raw:
                return bytes(got), "eof"
            self.inc.write(raw)
            if pause:
                time.sleep(pause)

    def reset(self) -> None:
        """Closes with a RST (SO_LINGER 0)."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    def close(self) -> None:
        self.sock.close()


def raw_to_end(sock: socket.socket) -> bytes:
    got = b""
    while True:
        d = sock.recv(65536)
        if not d:
            return got
        got += d


def request(method: bytes, path: bytes, body: bytes = b"", close: bool = True) -> bytes:
    head = b"%s %s HTTP/1.1\r\nhost: localhost\r\ncontent-length: %d\r\n" % (method, path, len(body))
    return head + (b"connection: close\r\n" if close else b"") + b"\r\n" + body


def response_body(raw: bytes) -> tuple[bytes, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0], body


# ---- record boundaries -------------------------------------------------------------------------


@rule("RFC8446-5.1-records-split", "RFC8446-6.1-close-notify")
def test_request_and_response_over_tls(serve, tls):
    """A request through the handshake and one record; the response whole, then close_notify
    before the server's FIN (the response said connection: close)."""
    calls = Calls()
    with serve(echo_app(calls), **tls.server_config()) as srv:
        baseline = open_fds()
        c = MemClient(srv.port, tls.client_context())
        c.handshake()
        c.write(request(b"POST", b"/echo", b"hello over tls"))
        raw, end = c.read_to_end()
        c.close()
        assert response_body(raw) == (b"HTTP/1.1 200 OK", b"hello over tls")
        assert end == "close_notify"
        assert calls.items == [("POST", "/echo", b"hello over tls")]
        assert fds_back(baseline) == baseline
        assert srv.errors() == []


@rule("RFC8446-5.1-records-split")
def test_records_split_anywhere(serve, tls):
    """The client's ciphertext (its handshake flights and its request's records) cut at any
    offsets: the app sees exactly the request sent, and the client exactly the echo."""
    calls = Calls()
    with serve(echo_app(calls), **tls.server_config()) as srv:
        baseline = open_fds()
        ctx = tls.client_context()

        @oracle_settings(min(examples(25), 200))
        @given(body=st.binary(max_size=40 * KIB),
               cuts=st.lists(st.integers(0, 1 << 20), max_size=6))
        def check(body, cuts):
            before = len(calls.items)
            c = MemClient(srv.port, ctx)
            try:
                c.handshake(cuts)
                c.write(request(b"PUT", b"/split", body), cuts)
                raw, end = c.read_to_end()
            finally:
                c.close()
            assert response_body(raw) == (b"HTTP/1.1 200 OK", body)
            assert end == "close_notify"
            assert calls.items[before:] == [("PUT", "/split", body)]

        check()
        assert fds_back(baseline) == baseline
        assert srv.errors() == []


@rule("RFC8446-5.1-records-split")
def test_ciphertext_one_byte_at_a_time(serve, tls):
    """Every byte of the client's handshake and request in its own send: the same answer."""
    calls = Calls()
    with serve(echo_app(calls), **tls.server_config()) as srv:
        baseline = open_fds()
        c = MemClient(srv.port, tls.client_context())
        every = list(range(1, 4096))
        c.handshake(every)
        c.write(request(b"POST", b"/bytes", b"0123456789"), every)
        raw, end = c.read_to_end()
        c.close()
        assert response_body(raw) == (b"HTTP/1.1 200 OK", b"0123456789")
        assert end == "close_notify"
        assert calls.items == [("POST", "/bytes", b"0123456789")]
        assert fds_back(baseline) == baseline


# ---- bad input -----------------------------------------------------------------------------------


@rule("skirr-tls-plain-http-400")
@pytest.mark.parametrize("req", [
    b"GET / HTTP/1.1\r\nhost: localhost\r\n\r\n",
    b"POST /form HTTP/1.0\r\ncontent-length: 3\r\n\r\nabc",
    b"get",
])
def test_plain_http_on_tls_port(serve, tls, req):
    """Cleartext HTTP to the TLS port: the fixed cleartext 400, then the close (a FIN, not a
    reset); the app is never called."""
    assert raw_answer(serve, tls, req) == PLAIN_400


def raw_answer(serve, tls: TLSFiles, data: bytes) -> bytes:
    """What a TLS server answers, to its close, to `data` sent raw on a new connection; checks
    that the app was never called, nothing is left open and nothing was logged as an error."""
    calls = Calls()
    with serve(echo_app(calls), **tls.server_config()) as srv:
        baseline = open_fds()
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(data)
        answer = raw_to_end(s)
        s.close()
        assert calls.items == []
        assert fds_back(baseline) == baseline
        assert srv.errors() == []
    return answer


@rule("RFC8446-5-unexpected-garbage")
@pytest.mark.parametrize("junk, answer", [
    # no TLS record at all: closed without a word (no version to speak an alert in)
    (b"\x00\x01\x02\x03\x04\x05\x06\x07", b""),
    (b"\xff" * 100, b""),
    # a handshake record whose message cannot be decoded: decode_error (50), fatal
    (b"\x16\x03\x01\x00\x04\x01\x00\x00\x00", b"\x15\x03\x03\x00\x02\x02\x32"),
    # application data before the handshake: unexpected_message (10), fatal
    (b"\x17\x03\x03\x00\x05hello", b"\x15\x03\x03\x00\x02\x02\x0a"),
])
def test_garbage_closed(serve, tls, junk, answer):
    """Bytes that are no TLS handshake: the exact alert (or none), then the close; the app is
    never called, nothing is left open."""
    assert raw_answer(serve, tls, junk) == answer


# ---- stalls, resets, truncation ---------------------------------------------------------------

HEAD = 0.5  # --timeout-request-head in these cases, seconds
SLACK = 2.0  # the timer's tick and a loaded machine


@rule("skirr-tls-handshake-head-timeout")
@pytest.mark.parametrize("stage", ["nothing", "half-hello", "no-finished"])
def test_stalled_handshake_closed(serve, tls, stage):
    """A handshake that stalls (no byte; half a ClientHello; the ClientHello but never the
    Finished) is closed by --timeout-request-head: a FIN after it, no alert and no 408 (there is
    no session to send it in), the app never called."""
    calls = Calls()
    with serve(echo_app(calls), timeout_request_head=HEAD, **tls.server_config()) as srv:
        baseline = open_fds()
        c = MemClient(srv.port, tls.client_context())
        start = time.monotonic()
        hello = b""
        if stage != "nothing":
            try:
                c.tls.do_handshake()
            except ssl.SSLWantReadError:
                hello = c.out.read()
            c.send_raw(hello[: len(hello) // 2] if stage == "half-hello" else hello)
        got = raw_to_end(c.sock)
        took = time.monotonic() - start
        c.close()
        assert HEAD <= took < HEAD + SLACK
        if stage == "no-finished":
            # the server's flight (ServerHello ... Finished) and nothing else: parse its records
            c.inc.write(got)
            c.tls.do_handshake()  # the flight was whole and valid: the client is done
            assert c.out.pending > 0  # its Finished, which it never sent
            types = []
            i = 0
            while i < len(got):
                types.append(got[i])
                i += 5 + int.from_bytes(got[i + 3:i + 5], "big")
            assert i == len(got) and 0x15 not in types
        else:
            assert got == b""
        assert calls.items == []
        assert fds_back(baseline) == baseline
        assert srv.errors() == []


@rule("skirr-tls-peer-reset")
@pytest.mark.parametrize("where", ["mid-handshake", "mid-record"])
def test_peer_reset(serve, tls, where):
    """A client that resets in the middle of the handshake, or of a request's record: the
    connection goes, the app is never called, nothing is left open, and the next connection is
    served."""
    calls = Calls()
    with serve(echo_app(calls), **tls.server_config()) as srv:
        baseline = open_fds()
        c = MemClient(srv.port, tls.client_context())
        if where == "mid-handshake":
            try:
                c.tls.do_handshake()
            except ssl.SSLWantReadError:
                c.flush()
            c.sock.recv(65536)  # the server's flight came: the client resets instead of finishing
        else:
            c.handshake()
            c.tls.write(request(b"POST", b"/never", b"x" * 5000))
            data = c.out.read()
            c.send_raw(data[: len(data) // 2])
            time.sleep(0.05)
        c.reset()
        assert fds_back(baseline) == baseline
        n = MemClient(srv.port, tls.client_context())
        n.handshake()
        n.write(request(b"GET", b"/after"))
        raw, end = n.read_to_end()
        n.close()
        assert response_body(raw)[0] == b"HTTP/1.1 200 OK" and end == "close_notify"
        assert calls.items == [("GET", "/after", b"")]
        assert fds_back(baseline) == baseline
        assert srv.errors() == []


@rule("skirr-tls-truncation")
def test_fin_without_close_notify_mid_body(serve, tls):
    """The client's FIN without close_notify in the middle of a request body's record: the
    peer is gone (sk_stream.h rule 5), the app's receive() gets http.disconnect, never the
    truncated bytes as a body."""
    calls = Calls()
    with serve(echo_app(calls), **tls.server_config()) as srv:
        baseline = open_fds()
        c = MemClient(srv.port, tls.client_context())
        c.handshake()
        c.write(b"POST /cut HTTP/1.1\r\nhost: localhost\r\ncontent-length: 100\r\n\r\n")
        c.tls.write(b"y" * 100)
        data = c.out.read()
        time.sleep(0.1)  # the head reaches the app first
        c.send_raw(data[:20])
        c.sock.shutdown(socket.SHUT_WR)
        # the server's session tickets, then its close_notify (RFC 8446 §6.1: sent before its
        # FIN though the client sent none)
        assert c.read_to_end() == (b"", "close_notify")
        c.close()
        deadline = time.monotonic() + 5
        while not calls.items and time.monotonic() < deadline:
            time.sleep(0.01)
        assert calls.items == [("POST", "/cut", b"", "disconnect")]
        assert fds_back(baseline) == baseline
        assert srv.errors() == []


@rule("skirr-tls-truncation", "RFC8446-6.1-close-notify")
@pytest.mark.parametrize("version", ["TLSv1_3", "TLSv1_2"])
def test_fin_without_close_notify_after_a_response(serve, tls, version):
    """A keep-alive request answered, then the client's FIN without close_notify (it half-closes
    and goes on reading): the server ends its side with close_notify before its FIN (RFC 8446
    §6.1: each party, unless it sent an error alert), as on its own close."""
    calls = Calls()
    with serve(echo_app(calls), **tls.server_config()) as srv:
        baseline = open_fds()
        ctx = tls.client_context()
        ctx.maximum_version = getattr(ssl.TLSVersion, version)
        c = MemClient(srv.port, ctx)
        c.handshake()
        c.write(request(b"GET", b"/kept", close=False))
        got = b""
        while b"\r\n\r\n" not in got:  # the head; the echoed body is empty
            try:
                got += c.tls.read(65536)
            except ssl.SSLWantReadError:
                c.inc.write(c.sock.recv(65536))
        c.sock.shutdown(socket.SHUT_WR)
        rest, end = c.read_to_end()
        c.close()
        assert response_body(got) == (b"HTTP/1.1 200 OK", b"") and rest == b""
        assert end == "close_notify"
        assert calls.items == [("GET", "/kept", b"")]
        assert fds_back(baseline) == baseline
        assert srv.errors() == []


@rule("skirr-tls-truncation", "RFC8446-6.1-close-notify")
def test_fin_without_close_notify_on_http2(serve, tls):
    """The same over HTTP/2 (ALPN h2): a stream answered, then the client's FIN without
    close_notify: nothing more to send, so skirr's close_notify, then its FIN."""
    import h2.config
    import h2.connection
    import h2.events

    calls = Calls()
    with serve(echo_app(calls), **tls.server_config()) as srv:
        baseline = open_fds()
        ctx = tls.client_context()
        ctx.set_alpn_protocols(["h2"])
        c = MemClient(srv.port, ctx)
        c.handshake()
        assert c.tls.selected_alpn_protocol() == "h2"
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        conn.send_headers(1, [(":method", "GET"), (":path", "/kept"), (":scheme", "https"),
                              (":authority", "localhost")], end_stream=True)
        c.write(conn.data_to_send())
        events = []
        while not any(isinstance(e, h2.events.StreamEnded) for e in events):
            try:
                events += conn.receive_data(c.tls.read(65536))
            except ssl.SSLWantReadError:
                c.inc.write(c.sock.recv(65536))
        c.write(conn.data_to_send())  # the SETTINGS acknowledgement
        c.sock.shutdown(socket.SHUT_WR)
        rest, end = c.read_to_end()
        c.close()
        answered = [e for e in events if isinstance(e, h2.events.ResponseReceived)]
        assert [(e.stream_id, dict(e.headers)[b":status"]) for e in answered] == [(1, b"200")]
        assert (rest, end) == (b"", "close_notify")
        assert calls.items == [("GET", "/kept", b"")]
        assert fds_back(baseline) == baseline
        assert srv.errors() == []


@rule("skirr-disconnect-close-delimited-cut", "skirr-tls-truncation")
def test_half_close_cuts_a_close_delimited_response_over_tls(serve, tls):
    """The client's FIN (no close_notify) while the response to its HTTP/1.0 request streams:
    the body ends only at the close, so skirr resets without close_notify, and the part sent
    never reads as the whole body (a close_notify there would say complete)."""
    started = threading.Event()
    app = streaming_app(started)

    with serve(app, **tls.server_config()) as srv:
        c = MemClient(srv.port, tls.client_context())
        c.handshake()
        c.write(b"GET / HTTP/1.0\r\nhost: localhost\r\n\r\n")
        assert started.wait(5)
        c.sock.shutdown(socket.SHUT_WR)
        try:
            got, end = c.read_to_end()
        except ConnectionResetError:
            end = "reset"
        c.close()
    assert end in ("reset", "eof")  # never close_notify after part of the body


@rule("skirr-disconnect-close-delimited-cut", "skirr-tls-truncation")
def test_write_timeout_before_a_whole_close_delimited_body_left_over_tls(serve, tls):
    """The final 8 MB piece of an HTTP/1.0 response's streamed body handed over while the client
    reads nothing, then the write timeout: the close is a reset, never close_notify, which would
    make the part that arrived read as the whole body."""
    size = 8_000_000

    with serve(final_piece_app(size), timeout_write=1.0, **tls.server_config()) as srv:
        c = MemClient(srv.port, tls.client_context(), rcvbuf=65536)
        c.handshake()
        c.write(b"GET / HTTP/1.0\r\nhost: localhost\r\n\r\n")
        time.sleep(2.5)  # the client reads nothing until skirr gave up on it
        try:
            got, end = c.read_to_end()
        except ConnectionResetError:
            got, end = b"", "reset"
        c.close()
    assert end == "reset" and len(got) < 1000 + size


# ---- large responses ----------------------------------------------------------------------------


@rule("skirr-tls-large-response")
@pytest.mark.parametrize("path", ["/big", "/file"])
def test_large_response_read_slowly(serve, tls, tmp_path, path):
    """1 MiB from memory, and a 1 MiB file by http.response.pathsend (under TLS the file is read
    64 KiB at a time and encrypted: no sendfile through the layer), to a client with a small
    receive buffer reading 4 KiB at a time: every byte, in order, then close_notify."""
    calls = Calls()
    f = tmp_path / "one-mib"
    f.write_bytes(big_body())
    with serve(echo_app(calls, {"file": f}), **tls.server_config()) as srv:
        baseline = open_fds()
        c = MemClient(srv.port, tls.client_context(), rcvbuf=16 * KIB)
        c.handshake()
        c.write(request(b"GET", path.encode()))
        raw, end = c.read_to_end(recv_size=4 * KIB, pause=0.0005)
        c.close()
        status, body = response_body(raw)
        assert status == b"HTTP/1.1 200 OK"
        assert len(body) == MIB and body == big_body()
        assert end == "close_notify"
        assert calls.items == [("GET", path, b"")]
        assert fds_back(baseline) == baseline
        assert srv.errors() == []


@rule("skirr-tls-write-timeout")
def test_client_never_reads_closed_by_write_timeout(serve, tls):
    """A client that completes the handshake and asks for a large response but never reads it:
    --timeout-write closes the connection (the records the kernel did not take are dropped with
    it); the app's send raises ClientDisconnected; nothing is left open."""
    seen = Calls()

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            while True:
                await send({"type": "http.response.body", "body": b"w" * (64 * KIB),
                            "more_body": True})
                seen.add(("sent", time.monotonic()))
        except BaseException as e:
            seen.add((type(e).__name__, time.monotonic()))
            raise

    with serve(app, timeout_write=0.5, **tls.server_config()) as srv:
        baseline = open_fds()
        c = MemClient(srv.port, tls.client_context(), rcvbuf=16 * KIB)
        c.handshake()
        c.write(request(b"GET", b"/stall", close=False))
        deadline = time.monotonic() + 10
        while not (seen.items and seen.items[-1][0] != "sent") and time.monotonic() < deadline:
            time.sleep(0.02)
        last_sent = max((t for k, t in seen.items if k == "sent"), default=None)
        kind, when = seen.items[-1]
        assert kind == "ClientDisconnected"
        assert last_sent is not None and 0.5 <= when - last_sent < 0.5 + SLACK
        assert fds_back(baseline + 1) == baseline + 1  # only the client's socket is left
        c.close()
        assert fds_back(baseline) == baseline
        assert srv.errors() == []


# ---- input the layer holds ----------------------------------------------------------------------


@rule("skirr-tls-held-input")
def test_pipelined_requests_in_few_records(serve, tls):
    """200 pipelined requests written at once (many per 16 KiB record, several records per TCP
    read) and a 1 MiB upload: input decrypted but not yet returned is read without a new epoll
    edge (sk_stream.h rule 2b), so every request is answered, in order, and the upload arrives
    whole."""
    calls = Calls()
    with serve(echo_app(calls), **tls.server_config()) as srv:
        baseline = open_fds()
        c = MemClient(srv.port, tls.client_context())
        c.handshake()
        reqs = [request(b"POST", b"/p%d" % i, b"%05d" % i, close=False) for i in range(199)]
        reqs.append(request(b"POST", b"/last", b"end"))
        c.write(b"".join(reqs))
        raw, end = c.read_to_end()
        c.close()
        bodies = [part.split(b"\r\n\r\n", 1)[1] for part in raw.split(b"HTTP/1.1 200 OK")[1:]]
        assert bodies == [b"%05d" % i for i in range(199)] + [b"end"]
        assert end == "close_notify"
        assert [p for _, p, _ in calls.items] == ["/p%d" % i for i in range(199)] + ["/last"]

        up = big_body()
        c = MemClient(srv.port, tls.client_context())
        c.handshake()
        c.write(request(b"POST", b"/upload", up))
        raw, end = c.read_to_end()
        c.close()
        assert response_body(raw) == (b"HTTP/1.1 200 OK", up)
        assert calls.items[-1] == ("POST", "/upload", up)
        assert fds_back(baseline) == baseline
        assert srv.errors() == []


# ---- renegotiation --------------------------------------------------------------------------------


@rule("RFC5246-7.2.2-no-renegotiation")
def test_renegotiation_refused(serve, tls):
    """`openssl s_client -tls1_2` asking to renegotiate ('R'): skirr answers the ClientHello with
    the no_renegotiation warning alert and closes the connection (never loops, never completes a
    second handshake); the app is never called."""
    calls = Calls()
    with serve(echo_app(calls), **tls.server_config()) as srv:
        baseline = open_fds()
        p = subprocess.Popen(
            ["openssl", "s_client", "-connect", f"127.0.0.1:{srv.port}", "-tls1_2",
             "-CAfile", str(tls.ca_pem), "-msg"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 10
            while fds_back(baseline + 1, 0.05) < baseline + 1 and time.monotonic() < deadline:
                pass  # the server's side of the connection is open
            time.sleep(0.3)  # s_client finished its handshake and reads stdin
            p.stdin.write(b"R\n")
            p.stdin.flush()
            # stdin stays open: s_client ends only because skirr closed the connection
            p.wait(timeout=10)
            out, err = p.communicate(timeout=10)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        assert b"RENEGOTIATING" in err
        assert b"<<< TLS 1.2, Alert [length 0002], warning no_renegotiation\n    01 64" in out
        assert out.count(b"], ServerHello\n") == 1  # no second handshake
        assert calls.items == []
        assert fds_back(baseline) == baseline
        assert srv.errors() == []
