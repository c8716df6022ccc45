"""The published HTTP/2 attacks refused (spec/http2_attacks.toml, issue 33 item 4).

Each case speaks raw frames over h2c (prior knowledge) to the real server: the attack's frames,
written by hand where ``h2`` refuses to make them (a WINDOW_UPDATE of 0, DATA after END_STREAM, a
header block that never ends, an HPACK bomb). Each asserts the exact answer (GOAWAY with its RFC
9113 §7 error code and last-stream-id, or RST_STREAM with its code), that the server's work stayed
bounded (the application called at most N times; at most the budget's frames answered before the
GOAWAY, computed from the budget and the time the case took, never tuned to pass; the process's
resident memory grown by less than a bound: the server runs in this process), and that another
connection is served afterwards.

The budgets are sk_h2guard.c's defaults (BUDGETS below mirrors them: a change there must change
them here). Every flood is a few thousand frames at most.
"""
from __future__ import annotations

import asyncio
import math
import os
import socket
import struct
import sys
import threading
import time
from typing import Callable, Optional

import pytest
from hpack import Decoder
from hyperframe.frame import (DataFrame, Frame, GoAwayFrame, HeadersFrame, PingFrame,
                              RstStreamFrame, SettingsFrame)

import skirr
import _proc
from conftest import IO_TIMEOUT
from h2_util import hpack_int
from h2_util import raw_frame as frame  # bytes as given: hyperframe refuses some attacks' frames

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# RFC 9113 §7 error codes
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
STREAM_CLOSED, REFUSED_STREAM, CANCEL, ENHANCE_YOUR_CALM = 0x5, 0x7, 0x8, 0xB
# Frame types (RFC 9113 §6)
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PING, WINDOW_UPDATE, CONTINUATION = (
    0x0, 0x1, 0x2, 0x3, 0x4, 0x6, 0x8, 0x9)
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1

# sk_h2guard.c's defaults: kind -> (burst, rate per second).
BUDGETS = {
    "server_reset": (100, 10.0),
    "client_reset": (500, 100.0),
    "settings": (32, 1.0),
    "ping": (64, 10.0),
    "empty_data": (100, 10.0),
    "priority": (300, 100.0),
    "window_update": (1000, 100.0),
}
MAX_STREAMS = 100  # --http2-max-concurrent-streams' default
HOLD_MAX = 8.0  # seconds a held application waits at most for release()
PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1 << 20
# A request's header block with static-table entries only (RFC 7541 Appendix A): :method GET (2),
# :scheme http (6), :path / (4), then :authority "x" as a literal without indexing (name index 1).
GET_BLOCK = b"\x82\x86\x84\x01\x01x"
POST_BLOCK = b"\x83\x86\x84\x01\x01x"  # :method POST (3)


def budget(kind: str, elapsed: float) -> int:
    """Events of `kind` a guard accepts in `elapsed` seconds from full: burst + rate x elapsed,
    plus the one that trips (its answer may be queued before the GOAWAY)."""
    burst, rate = BUDGETS[kind]
    return burst + math.ceil(rate * elapsed) + 1


def rss() -> int:
    """This process's resident set, bytes (the server runs in a thread of it)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


_OPEN: list = []  # every Raw's socket, closed after each case (close_raw)


@pytest.fixture(autouse=True)
def close_raw():
    yield
    while _OPEN:
        _OPEN.pop().close()


class Raw:
    """An h2c connection driven frame by frame: the preface and a SETTINGS on connect, the
    server's SETTINGS acknowledged as they arrive, every frame received kept in ``frames``."""

    def __init__(self, port: int, settings: Optional[dict] = None, rcvbuf: int = 0) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        _OPEN.append(sock)
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(IO_TIMEOUT)
        sock.connect(("127.0.0.1", port))
        self.sock = sock
        self.buf = b""
        self.frames: list[Frame] = []
        self.eof = False
        self.send_failed = False
        self.decoder = Decoder()
        self.responses: dict[int, list] = {}  # stream id -> decoded response header list
        s = SettingsFrame(0)
        s.settings = settings or {}
        self.send(PREFACE + s.serialize())

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        """Sends all of data unless the server has closed (then send_failed)."""
        if self.send_failed:
            return
        try:
            self.sock.settimeout(IO_TIMEOUT)
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            self.send_failed = True

    def goaway(self) -> Optional[GoAwayFrame]:
        for f in self.frames:
            if isinstance(f, GoAwayFrame):
                return f
        return None

    def of(self, kind: type, before_goaway: bool = False) -> list:
        out = []
        for f in self.frames:
            if before_goaway and isinstance(f, GoAwayFrame):
                break
            if isinstance(f, kind):
                out.append(f)
        return out

    def resets(self) -> dict[int, int]:
        """{stream id: error code} of the RST_STREAM frames received."""
        return {f.stream_id: f.error_code for f in self.of(RstStreamFrame)}

    def _parse(self) -> list[Frame]:
        new = []
        while len(self.buf) >= 9:
            f, length = Frame.parse_frame_header(memoryview(self.buf[:9]))
            if len(self.buf) < 9 + length:
                break
            f.parse_body(memoryview(self.buf[9:9 + length]))
            self.buf = self.buf[9 + length:]
            if isinstance(f, SettingsFrame) and "ACK" not in f.flags:
                self.send(SettingsFrame(0, flags=["ACK"]).serialize())
            if isinstance(f, HeadersFrame) and "END_HEADERS" in f.flags:
                self.responses[f.stream_id] = self.decoder.decode(f.data, raw=True)
            new.append(f)
        self.frames.extend(new)
        return new

    def _recv(self, timeout: float) -> list[Frame]:
        """One read (at most `timeout` seconds): the frames it completed; [] at EOF or timeout."""
        if self.eof:
            return []
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 16)
        except (socket.timeout, BlockingIOError):
            return []
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return []
        self.buf += data
        return self._parse()

    def poll(self) -> None:
        """Reads what has arrived, without waiting."""
        while not self.eof and _proc.ready(self.sock):
            if not self._recv(IO_TIMEOUT) and not self.eof:
                continue

    def until(self, pred: Callable[[Frame], bool], timeout: float = IO_TIMEOUT,
              what: str = "frame") -> Optional[Frame]:
        """Reads until a frame received (now or before) satisfies pred: it; None at EOF."""
        for f in self.frames:
            if pred(f):
                return f
        deadline = time.monotonic() + timeout
        while not self.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {what} within {timeout}s; got {self.frames[-8:]!r}")
            for f in self._recv(left):
                if pred(f):
                    return f
        return None

    def until_goaway(self, timeout: float = IO_TIMEOUT) -> GoAwayFrame:
        g = self.until(lambda f: isinstance(f, GoAwayFrame), timeout, "GOAWAY")
        assert g is not None, f"connection closed without GOAWAY; got {self.frames[-8:]!r}"
        return g

    def until_eof(self, timeout: float = IO_TIMEOUT) -> None:
        """Reads (and keeps) until the server closes, then closes this end (the server lingers
        until the client closes); fails if the server does not close within timeout."""
        deadline = time.monotonic() + timeout
        while not self.eof:
            left = deadline - time.monotonic()
            assert left > 0, f"the server did not close within {timeout}s"
            self._recv(left)
        self.sock.close()

    def flood(self, data: list[bytes], chunk: int = 64) -> int:
        """Sends the frames in data, `chunk` at a time, reading what arrives between chunks;
        stops at the server's GOAWAY or close. The number of frames sent."""
        sent = 0
        for i in range(0, len(data), chunk):
            if self.eof or self.send_failed or self.goaway() is not None:
                break
            part = data[i:i + chunk]
            self.send(b"".join(part))
            if not self.send_failed:
                sent += len(part)
            self.poll()
        return sent


def served(port: int) -> None:
    """Another connection is served: a GET on stream 1 answered 200 with END_STREAM."""
    c = Raw(port)
    try:
        c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, GET_BLOCK))
        c.until(lambda f: f.stream_id == 1 and "END_STREAM" in f.flags, what="response")
        assert dict(c.responses.get(1, []))[b":status"] == b"200", c.responses
    finally:
        c.close()


def open_endless_post(c: Raw, app: "Counting") -> int:
    """Opens stream 1 with a POST whose body never ends and waits until its app is called: 1."""
    c.send(frame(HEADERS, END_HEADERS, 1, POST_BLOCK))
    deadline = time.monotonic() + IO_TIMEOUT
    while app.calls < 1:
        assert time.monotonic() < deadline, "the POST's app was not called"
        time.sleep(0.01)
    return 1


def served_on(c: Raw, sid: int) -> None:
    """The connection c serves a GET on stream sid: 200 with END_STREAM."""
    c.send(frame(HEADERS, END_STREAM | END_HEADERS, sid, GET_BLOCK))
    c.until(lambda f: f.stream_id == sid and "END_STREAM" in f.flags, what=f"stream {sid}")
    assert dict(c.responses.get(sid, []))[b":status"] == b"200", c.responses.get(sid)


class Counting:
    """Counts its calls; answers 200 "ok" at once (GET), or reads the body to its end or to
    http.disconnect first (POST); records each receive()d event type."""

    def __init__(self) -> None:
        self.calls = 0
        self.events: list[str] = []
        self.lock = threading.Lock()

    async def __call__(self, scope, receive, send):
        assert scope["type"] == "http"
        with self.lock:
            self.calls += 1
        if scope["method"] == "POST":
            while True:
                msg = await receive()
                with self.lock:
                    self.events.append(msg["type"])
                if msg["type"] != "http.request" or not msg.get("more_body"):
                    break
        try:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"ok"})
        except skirr.ClientDisconnected:
            pass


class Hold(Counting):
    """Counts its calls and holds each (ignoring the client) until release(), at most HOLD_MAX
    seconds; with `then_receive`, records what receive() gives after the request (the
    disconnect); then answers 200, recording ClientDisconnected from send()."""

    def __init__(self, then_receive: bool = False) -> None:
        super().__init__()
        self.then_receive = then_receive
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.ev: Optional[asyncio.Event] = None
        self.disconnected = 0

    async def __call__(self, scope, receive, send):
        assert scope["type"] == "http"
        if self.ev is None:
            self.loop = asyncio.get_running_loop()
            self.ev = asyncio.Event()
        with self.lock:
            self.calls += 1
        if self.then_receive and self.calls > 1:
            pass  # the first call is the case's; later ones (another connection) answer at once
        elif self.then_receive:
            for _ in range(2):
                msg = await receive()
                with self.lock:
                    self.events.append(msg["type"])
                if msg["type"] == "http.disconnect":
                    return
        else:
            try:
                await asyncio.wait_for(self.ev.wait(), HOLD_MAX)
            except asyncio.TimeoutError:
                pass
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"held"})
        except skirr.ClientDisconnected:
            with self.lock:
                self.disconnected += 1

    def release(self) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.ev.set)

    def wait_calls(self, n: int, timeout: float = IO_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while self.calls < n:
            assert time.monotonic() < deadline, f"{self.calls} calls, expected {n}"
            time.sleep(0.01)

    def wait_events(self, n: int, timeout: float = IO_TIMEOUT) -> list[str]:
        deadline = time.monotonic() + timeout
        while len(self.events) < n:
            assert time.monotonic() < deadline, f"events {self.events}, expected {n}"
            time.sleep(0.01)
        return list(self.events)


def request_pairs(first: int, n: int, second: Callable[[int], bytes]) -> list[bytes]:
    """n streams from `first` (odd ids, step 2): each a GET HEADERS with END_STREAM, then
    second(stream id) right after it, as one piece."""
    return [frame(HEADERS, END_STREAM | END_HEADERS, sid, GET_BLOCK) + second(sid)
            for sid in range(first, first + 2 * n, 2)]


def rst(sid: int) -> bytes:
    return frame(RST_STREAM, 0, sid, struct.pack(">I", CANCEL))


# ----------------------------------------------------------------------------------------------
# Rapid Reset (CVE-2023-44487)


def start_then(c: "Raw", app: "Hold", first: int, n: int, after: Callable[[int], bytes],
               wait_reset: bool) -> int:
    """Opens n streams from `first` in batches of 20: each batch's GETs, then (once their app
    calls have started) after(sid) for each, then, with wait_reset, the server's RST_STREAM for
    each (so the client never has more than 20 streams open in its own count). The next id."""
    sid = first
    for _ in range(0, n, 20):
        batch = list(range(sid, sid + 40, 2))
        target = app.calls + len(batch)
        c.send(b"".join(frame(HEADERS, END_STREAM | END_HEADERS, s, GET_BLOCK) for s in batch))
        app.wait_calls(target)
        c.send(b"".join(after(s) for s in batch))
        if wait_reset:
            c.until(lambda f, last=batch[-1]: isinstance(f, RstStreamFrame) and f.stream_id == last,
                    what=f"the reset of stream {batch[-1]}")
        sid += 40
    return sid


@pytest.mark.rule("RFC9113-10.5-rapid-reset")
def test_rapid_reset_streams_count_until_their_app_ends(serve):
    """100 streams reset by the client after their app calls started (the calls run on), then
    300 HEADERS + RST_STREAM pairs: the reset streams still count, so every later stream is
    refused with REFUSED_STREAM and the app is not called again; the refusals (server resets)
    end the connection with GOAWAY ENHANCE_YOUR_CALM."""
    app = Hold()
    with serve(app) as srv:
        c = Raw(srv.port)
        nxt = start_then(c, app, 1, MAX_STREAMS, rst, wait_reset=False)
        assert app.calls == MAX_STREAMS and c.resets() == {}
        t0 = time.monotonic()
        c.flood(request_pairs(nxt, 300, rst), chunk=16)
        g = c.until_goaway()
        elapsed = time.monotonic() - t0
        c.until_eof()
        assert g.error_code == ENHANCE_YOUR_CALM, g
        assert app.calls == MAX_STREAMS
        resets = c.resets()
        assert set(resets.values()) == {REFUSED_STREAM}, resets
        refused = sorted(resets)
        assert refused[0] == nxt, refused[:4]
        assert len(refused) <= budget("server_reset", elapsed), (len(refused), elapsed)
        # nghttp2's last processed stream: the refusals past the budget were never sent
        assert refused[-1] <= g.last_stream_id <= nxt + 598 and g.last_stream_id % 2, g
        app.release()
        served(srv.port)


@pytest.mark.rule("RFC9113-10.5-rapid-reset-budget")
def test_rapid_reset_over_the_reset_budget(serve):
    """1000 HEADERS + RST_STREAM pairs on an app that answers at once: the client-reset budget
    (500 + 100/s) ends the connection with GOAWAY ENHANCE_YOUR_CALM; the app is called at most
    once per stream accepted before it."""
    app = Counting()
    with serve(app) as srv:
        c = Raw(srv.port)
        t0 = time.monotonic()
        sent = c.flood(request_pairs(1, 1000, rst), chunk=32)
        g = c.until_goaway()
        elapsed = time.monotonic() - t0
        c.until_eof()
        assert g.error_code == ENHANCE_YOUR_CALM, g
        allowed = budget("client_reset", elapsed)
        assert sent > BUDGETS["client_reset"][0], sent  # not before the burst was spent
        assert g.last_stream_id <= 2 * allowed + 1, (g.last_stream_id, allowed)
        assert app.calls <= allowed, (app.calls, allowed)
        assert set(c.resets().values()) <= {REFUSED_STREAM}, c.resets()
        served(srv.port)
        c.close()


# ----------------------------------------------------------------------------------------------
# CONTINUATION flood (CVE-2024-27316, CVE-2024-28182)


@pytest.mark.rule("RFC9113-10.5-continuation-flood")
def test_continuation_flood(serve):
    """A HEADERS without END_HEADERS, then 3000 CONTINUATION frames without it, each carrying one
    small header field (the block never ends): GOAWAY ENHANCE_YOUR_CALM after a few of them, no
    app call, the server's memory not grown by what was sent."""
    app = Counting()
    with serve(app) as srv:
        c = Raw(srv.port)
        field = b"\x00" + hpack_int(3, 7) + b"x-a" + hpack_int(16, 7) + b"a" * 16
        frames = [frame(HEADERS, END_STREAM, 1, GET_BLOCK)]
        frames += [frame(CONTINUATION, 0, 1, field) for _ in range(3000)]
        before = rss()
        sent = c.flood(frames, chunk=32)
        g = c.until_goaway()
        c.until_eof()
        grown = rss() - before
        assert g.error_code == ENHANCE_YOUR_CALM, g
        assert g.last_stream_id == 1, g  # its HEADERS was processed, never completed
        assert app.calls == 0
        assert sent > 1 + 8, sent  # the HEADERS and nghttp2's 8 CONTINUATIONs went before
        assert grown < 4 * MIB, grown
        served(srv.port)
        c.close()


# ----------------------------------------------------------------------------------------------
# MadeYouReset (CVE-2025-8671): frames that make the server reset a stream


def connection_error_on_an_open_stream(serve, bad: bytes, code: int) -> None:
    """A GET whose app holds it open (it then receives), then the frame `bad` on its stream: a
    connection error, GOAWAY `code` naming stream 1, no RST_STREAM; the app's receive() gets
    http.disconnect; the server serves a new connection."""
    app = Hold(then_receive=True)
    with serve(app) as srv:
        c = Raw(srv.port)
        c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, GET_BLOCK))
        app.wait_calls(1)
        c.send(bad)
        g = c.until_goaway()
        c.until_eof()
        assert (g.error_code, g.last_stream_id) == (code, 1), g
        assert c.resets() == {}
        assert app.wait_events(2) == ["http.request", "http.disconnect"]
        served(srv.port)
        c.close()


@pytest.mark.rule("RFC9113-6.9-window-update-zero")
def test_window_update_zero_on_a_stream(serve):
    connection_error_on_an_open_stream(serve, frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 0)),
                                       PROTOCOL_ERROR)


@pytest.mark.rule("RFC9113-5.1-data-half-closed")
def test_data_on_a_half_closed_stream(serve):
    connection_error_on_an_open_stream(serve, frame(DATA, 0, 1, b"late"), STREAM_CLOSED)


@pytest.mark.rule("RFC9113-10.5-madeyoureset")
def test_madeyoureset_server_resets_counted(serve):
    """Streams whose app calls have started, each then sent a WINDOW_UPDATE that overflows its
    window (RFC 9113 §6.9.1: RST_STREAM FLOW_CONTROL_ERROR), 20 at a time, waiting for the
    resets (the client keeps within the stream limit as it counts): 100 apps called and reset,
    the next streams refused while those calls run on, and the server-reset budget ends the
    connection with GOAWAY ENHANCE_YOUR_CALM."""
    app = Hold()
    overflow = lambda sid: frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", 0x7FFFFFFF))  # noqa: E731
    with serve(app) as srv:
        c = Raw(srv.port)
        t0 = time.monotonic()
        nxt = start_then(c, app, 1, MAX_STREAMS, overflow, wait_reset=True)
        c.flood([frame(HEADERS, END_STREAM | END_HEADERS, sid, GET_BLOCK)
                  for sid in range(nxt, nxt + 600, 2)], chunk=8)
        g = c.until_goaway()
        elapsed = time.monotonic() - t0
        c.until_eof()
        assert g.error_code == ENHANCE_YOUR_CALM, g
        assert app.calls == MAX_STREAMS
        resets = c.resets()
        flow = sorted(s for s, code in resets.items() if code == FLOW_CONTROL_ERROR)
        refused = sorted(s for s, code in resets.items() if code == REFUSED_STREAM)
        assert flow == list(range(1, 2 * MAX_STREAMS, 2)), flow[-4:]
        assert refused and refused[0] == nxt, refused[:4]
        assert len(flow) + len(refused) == len(resets), resets
        assert len(resets) <= budget("server_reset", elapsed), (len(resets), elapsed)
        assert refused[-1] <= g.last_stream_id <= nxt + 598 and g.last_stream_id % 2, g
        app.release()
        served(srv.port)


# ----------------------------------------------------------------------------------------------
# Floods of frames that cost the server work and carry nothing


def _settings(i: int) -> bytes:
    return frame(SETTINGS, 0, 0, struct.pack(">HI", 0x4, 65535))  # SETTINGS_INITIAL_WINDOW_SIZE


def _ping(i: int) -> bytes:
    return frame(PING, 0, 0, struct.pack(">Q", i))


def _priority(i: int) -> bytes:
    return frame(PRIORITY, 0, 2 * i + 1, struct.pack(">IB", 0, 15))  # idle streams, on 0


def _window_update(i: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1))


def _empty_data(i: int) -> bytes:
    return frame(DATA, 0, 1, b"")


FLOODS = [
    pytest.param("settings", _settings, marks=pytest.mark.rule("RFC9113-10.5-settings-flood"),
                 id="settings"),
    pytest.param("ping", _ping, marks=pytest.mark.rule("RFC9113-10.5-ping-flood"), id="ping"),
    pytest.param("empty_data", _empty_data,
                 marks=pytest.mark.rule("RFC9113-10.5-empty-data-flood"), id="empty_data"),
    pytest.param("priority", _priority, marks=pytest.mark.rule("RFC9113-10.5-priority-flood"),
                 id="priority"),
    pytest.param("window_update", _window_update,
                 marks=pytest.mark.rule("RFC9113-10.5-window-update-flood"), id="window_update"),
]


@pytest.mark.parametrize("kind,make", FLOODS)
def test_flood(serve, kind, make):
    """Three budgets' worth of one kind of frame: GOAWAY ENHANCE_YOUR_CALM with the right
    last-stream-id, at most the budget answered before it, then the close; the empty DATA's app
    gets http.disconnect."""
    app = Counting()
    burst, _rate = BUDGETS[kind]
    with serve(app) as srv:
        c = Raw(srv.port)
        # empty DATA frames go on a POST whose body never ends
        last = open_endless_post(c, app) if kind == "empty_data" else 0
        t0 = time.monotonic()
        frames = [make(i) for i in range(3 * burst + 200)]
        sent = c.flood(frames, chunk=32)
        g = c.until_goaway()
        elapsed = time.monotonic() - t0
        c.until_eof()
        assert (g.error_code, g.last_stream_id) == (ENHANCE_YOUR_CALM, last), g
        allowed = budget(kind, elapsed)
        # not before the burst was spent (the preface's SETTINGS is one of the SETTINGS)
        assert sent + (kind == "settings") > burst, (sent, burst)
        if kind == "settings":  # the preface's SETTINGS is one of them
            acks = [f for f in c.of(SettingsFrame, before_goaway=True) if "ACK" in f.flags]
            assert len(acks) <= allowed, (len(acks), allowed)
        if kind == "ping":
            acks = [f for f in c.of(PingFrame, before_goaway=True) if "ACK" in f.flags]
            assert len(acks) <= allowed, (len(acks), allowed)
        if kind == "empty_data":
            assert app.calls == 1
            deadline = time.monotonic() + IO_TIMEOUT
            while "http.disconnect" not in app.events and time.monotonic() < deadline:
                time.sleep(0.01)
            assert app.events == ["http.disconnect"], app.events
        else:
            assert app.calls == 0
        served(srv.port)
        c.close()


@pytest.mark.rule("h2-budget-stops-the-read")
@pytest.mark.parametrize("kind,make", [pytest.param("ping", _ping, id="ping"),
                                       pytest.param("empty_data", _empty_data, id="empty_data")])
def test_budget_over_then_connection_error_in_the_same_write(serve, kind, make):
    """A budget's worth of frames and two more, then a PRIORITY of the wrong length (a connection
    error, RFC 9113 §6.3), all in one write (fuzz/regressions/h2/
    frame-size-error-after-a-budget-went-over-aborts-nghttp2): GOAWAY ENHANCE_YOUR_CALM, nothing
    of the write after the frame over budget is processed, and the server goes on serving (on
    nghttp2 1.52 the PRIORITY failed an assertion once the session was terminated: abort())."""
    app = Counting()
    burst, _rate = BUDGETS[kind]
    with serve(app) as srv:
        c = Raw(srv.port)
        # empty DATA frames go on a POST whose body never ends
        last = open_endless_post(c, app) if kind == "empty_data" else 0
        c.until(lambda f: isinstance(f, SettingsFrame) and "ACK" in f.flags, what="SETTINGS ACK")
        c.send(b"".join(make(i) for i in range(burst + 2)) + frame(PRIORITY, 0, 3, b""))
        g = c.until_goaway()
        c.until_eof()
        assert (g.error_code, g.last_stream_id) == (ENHANCE_YOUR_CALM, last), g
        assert [f for f in c.frames if isinstance(f, GoAwayFrame)] == [g]
        if kind == "ping":
            acks = [f for f in c.of(PingFrame, before_goaway=True) if "ACK" in f.flags]
            assert len(acks) <= burst + 1, len(acks)
        served(srv.port)
        c.close()


# ----------------------------------------------------------------------------------------------
# HPACK bomb, too many streams


@pytest.mark.rule("RFC9113-10.5.1-hpack-bomb")
def test_hpack_bomb(serve):
    """One 16 KiB header block: a 4000-byte field put in the dynamic table, then referenced 12000
    times (about 48 MiB decoded, RFC 7541 §7.3): refused on its stream, the app never called,
    memory grown by less than 16 MiB; the same connection then serves stream 3."""
    app = Counting()
    with serve(app) as srv:
        c = Raw(srv.port)
        c.until(lambda f: isinstance(f, SettingsFrame) and "ACK" not in f.flags)
        before = rss()
        field = b"\x40" + hpack_int(6, 7) + b"x-bomb" + hpack_int(4000, 7) + b"b" * 4000
        block = GET_BLOCK + field + b"\xbe" * 12000  # index 62: the newest dynamic entry
        assert len(block) <= 16384
        c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, block))
        answer = c.until(lambda f: f.stream_id == 1 and (
            isinstance(f, RstStreamFrame) or "END_STREAM" in f.flags), what="stream 1's answer")
        grown = rss() - before
        assert answer is not None and not isinstance(answer, RstStreamFrame), answer
        assert dict(c.responses[1])[b":status"] == b"431", c.responses[1]
        assert app.calls == 0
        assert grown < 16 * MIB, grown
        assert c.goaway() is None, c.goaway()
        served_on(c, 3)
        assert app.calls == 1
        c.close()


@pytest.mark.rule("RFC9113-5.1.2-refused-stream")
def test_refused_stream_over_max_concurrent_before_settings_ack(serve):
    """The preface, then 101 streams in one write, before the client has read (so before it has
    acknowledged) the server's SETTINGS: the 100 first reach apps that run on, stream 201 gets
    RST_STREAM REFUSED_STREAM and its app is not called; once the 100 end, stream 203 is served
    on the same connection."""
    app = Hold()
    with serve(app) as srv:
        try:
            c = Raw(srv.port)
            c.send(b"".join(frame(HEADERS, END_STREAM | END_HEADERS, sid, GET_BLOCK)
                            for sid in range(1, 2 * MAX_STREAMS + 2, 2)))
            r = c.until(lambda f: isinstance(f, (RstStreamFrame, GoAwayFrame)), what="the refusal")
            assert isinstance(r, RstStreamFrame), r
            assert (r.stream_id, r.error_code) == (2 * MAX_STREAMS + 1, REFUSED_STREAM), r
            app.wait_calls(MAX_STREAMS)
            assert app.calls == MAX_STREAMS
            app.release()
            for sid in range(1, 2 * MAX_STREAMS, 2):
                c.until(lambda f, s=sid: f.stream_id == s and "END_STREAM" in f.flags,
                        what=str(sid))
            served_on(c, 2 * MAX_STREAMS + 3)
            assert app.calls == MAX_STREAMS + 1
            assert c.goaway() is None and c.resets() == {2 * MAX_STREAMS + 1: REFUSED_STREAM}
            c.close()
        finally:  # a failed case leaves no call held and no socket open into the shutdown
            app.release()
            while _OPEN:
                _OPEN.pop().close()


@pytest.mark.rule("RFC9113-5.1.2-refused-stream")
def test_stream_over_acknowledged_max_concurrent_ends_the_connection(serve):
    """The client acknowledges the server's SETTINGS (limit 100), opens 100 streams whose apps
    run on, then stream 201: GOAWAY PROTOCOL_ERROR with last-stream-id 199, the app not called
    again; another connection is served."""
    app = Hold()
    with serve(app) as srv:
        try:
            c = Raw(srv.port)
            c.until(lambda f: isinstance(f, SettingsFrame) and "ACK" in f.flags,
                    what="SETTINGS ACK")
            c.send(b"".join(frame(HEADERS, END_STREAM | END_HEADERS, sid, GET_BLOCK)
                            for sid in range(1, 2 * MAX_STREAMS, 2)))
            app.wait_calls(MAX_STREAMS)
            c.send(frame(HEADERS, END_STREAM | END_HEADERS, 2 * MAX_STREAMS + 1, GET_BLOCK))
            g = c.until_goaway()
            assert (g.error_code, g.last_stream_id) == (PROTOCOL_ERROR, 2 * MAX_STREAMS - 1), g
            assert app.calls == MAX_STREAMS and 2 * MAX_STREAMS + 1 not in c.resets()
            c.until_eof()
            app.release()
            served(srv.port)
            assert app.calls == MAX_STREAMS + 1
        finally:
            app.release()
            while _OPEN:
                _OPEN.pop().close()


# ----------------------------------------------------------------------------------------------
# Stream identifiers (RFC 9113 §5.1.1)


@pytest.mark.rule("RFC9113-5.1.1-stream-id-order")
@pytest.mark.parametrize("opened, then", [([3], 1), ([1, 9], 5), ([1, 9], 3), ([1, 9], 7),
                                          ([2**31 - 1], 1), ([1], 2)],
                         ids=["1-after-3", "5-after-9", "3-after-9", "7-after-9",
                              "1-after-2^31-1", "even-2"])
def test_headers_on_a_skipped_or_even_stream_id(serve, opened, then):
    """GETs on the streams `opened`, each answered; then a GET on `then`, an id the client
    skipped (below one it used, never used: RFC 9113 §5.1.1 closed it) or an even one: GOAWAY
    PROTOCOL_ERROR naming the last stream opened, no answer on `then`, the app not called for
    it; another connection is served. (nghttp2 answers the even id itself; the skipped ids are
    skirr's to catch: nghttp2 1.52 ignores them.)"""
    app = Counting()
    with serve(app) as srv:
        c = Raw(srv.port)
        for sid in opened:
            served_on(c, sid)
        c.send(frame(HEADERS, END_STREAM | END_HEADERS, then, GET_BLOCK))
        g = c.until_goaway()
        assert (g.error_code, g.last_stream_id) == (PROTOCOL_ERROR, opened[-1]), g
        c.until_eof()
        assert (then in c.responses, app.calls) == (False, len(opened))
        served(srv.port)
        assert app.calls == len(opened) + 1


@pytest.mark.rule("RFC9113-5.1.1-stream-id-order")
def test_only_the_newest_8_skipped_ranges_are_remembered(serve):
    """GETs on 1, 5, 9, ..., 37 (nine ranges skipped: 3, 7, ..., 35): a GET on 3, the oldest
    range, is ignored as nghttp2 ignores it (no answer, the connection goes on and serves 39);
    a GET on 7, the oldest range remembered, ends the connection with GOAWAY PROTOCOL_ERROR."""
    app = Counting()
    with serve(app) as srv:
        c = Raw(srv.port)
        for sid in range(1, 38, 4):
            served_on(c, sid)
        c.send(frame(HEADERS, END_STREAM | END_HEADERS, 3, GET_BLOCK))
        served_on(c, 39)
        assert (c.goaway(), 3 in c.responses, app.calls) == (None, False, 11)
        c.send(frame(HEADERS, END_STREAM | END_HEADERS, 7, GET_BLOCK))
        g = c.until_goaway()
        assert (g.error_code, g.last_stream_id, app.calls) == (PROTOCOL_ERROR, 39, 11), g


@pytest.mark.rule("RFC9113-5.1-headers-after-end-stream")
@pytest.mark.parametrize("served_first, how", [(50, "end-stream"), (150, "end-stream"),
                                               (150, "reset")])
def test_headers_on_a_stream_the_client_ended(serve, served_first, how):
    """GETs on streams 1, 3, ... (`served_first` of them, each answered; with `reset`, stream 1
    is a POST whose body never ends, which the client resets); then a new HEADERS on stream 1, whose
    client side had ended: GOAWAY STREAM_CLOSED naming the last stream opened, the app not
    called again. (nghttp2 answers it alone only while it keeps the closed stream, about 100
    of them: the 150 cases are skirr's.)"""
    app = Counting()
    with serve(app) as srv:
        c = Raw(srv.port)
        if how == "reset":
            open_endless_post(c, app)
            c.send(frame(RST_STREAM, 0, 1, struct.pack(">I", CANCEL)))
        else:
            served_on(c, 1)
        for sid in range(3, 2 * served_first, 2):
            served_on(c, sid)
        c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, GET_BLOCK))
        g = c.until_goaway()
        last = 2 * served_first - 1
        assert (g.error_code, g.last_stream_id, app.calls) == (STREAM_CLOSED, last, served_first), g


@pytest.mark.rule("RFC9113-5.1-headers-after-end-stream")
def test_only_the_newest_512_ended_streams_are_remembered(serve):
    """GETs on streams 1 to 1025 (513 streams): a HEADERS on stream 1, now outside the window,
    gets nghttp2's answer (ignored: no answer, the connection goes on and serves 1027); with
    1027 open the window is 5 to 1027, and a HEADERS on stream 5, the oldest remembered, ends
    the connection with GOAWAY STREAM_CLOSED."""
    app = Counting()
    with serve(app) as srv:
        c = Raw(srv.port)
        for sid in range(1, 1026, 2):
            served_on(c, sid)
        c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, GET_BLOCK))
        served_on(c, 1027)
        assert (c.goaway(), app.calls) == (None, 514)
        c.send(frame(HEADERS, END_STREAM | END_HEADERS, 5, GET_BLOCK))
        g = c.until_goaway()
        assert (g.error_code, g.last_stream_id, app.calls) == (STREAM_CLOSED, 1027, 514), g


# POST :path /fail (literal without indexing, name index 4), :authority "x"
FAIL_BLOCK = b"\x83\x86\x04\x05/fail\x01\x01x"
TRAILER_BLOCK = b"\x00\x03x-t\x011"  # x-t: 1 (literal without indexing, new name)


@pytest.mark.rule("RFC9113-5.1.1-stream-id-order")
def test_trailers_on_a_stream_the_server_reset_are_not_a_connection_error(serve):
    """A POST on stream 1 whose app sends its head and a part, then raises: RST_STREAM
    INTERNAL_ERROR; a GET on stream 5 (3 skipped) is served; then the client, which had not
    seen the reset, sends the request's trailers on stream 1, below the highest id: they are
    ignored (the stream was used, not skipped) and the connection goes on; a GET on stream 3,
    the skipped one, then ends it with GOAWAY PROTOCOL_ERROR naming stream 5."""

    async def app(scope, receive, send):
        if scope["path"] == "/fail":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"part", "more_body": True})
            raise RuntimeError("after the head")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    with serve(app) as srv:
        c = Raw(srv.port)
        c.send(frame(HEADERS, END_HEADERS, 1, FAIL_BLOCK))
        c.until(lambda f: isinstance(f, RstStreamFrame) and f.stream_id == 1, what="reset")
        served_on(c, 5)
        c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, TRAILER_BLOCK))
        c.send(frame(PING, 0, 0, b"trailers"))  # its ACK: the trailers were read before it
        c.until(lambda f: isinstance(f, PingFrame) and "ACK" in f.flags, what="PING ACK")
        assert (c.goaway(), c.resets()) == (None, {1: INTERNAL_ERROR})
        c.send(frame(HEADERS, END_STREAM | END_HEADERS, 3, GET_BLOCK))
        g = c.until_goaway()
        assert (g.error_code, g.last_stream_id, 3 in c.responses) == (PROTOCOL_ERROR, 5, False)
        assert len(srv.errors()) == 1


# ----------------------------------------------------------------------------------------------
# Stalls: a window kept at 0, a client that never reads


class Sender:
    """Answers its first `big` calls 200 with `chunks` pieces of `size` bytes, later ones with
    2 bytes; records ("done",) or ("disconnected", seconds from the first send) per call."""

    def __init__(self, chunks: int, size: int, big: int) -> None:
        self.chunks, self.size, self.big = chunks, size, big
        self.outcomes: list[tuple] = []
        self.calls = 0
        self.lock = threading.Lock()

    async def __call__(self, scope, receive, send):
        t0 = time.monotonic()
        with self.lock:
            self.calls += 1
            if self.calls > self.big:  # another connection's check: a small answer
                self.chunks, self.size = 1, 2
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for i in range(self.chunks):
                await send({"type": "http.response.body", "body": b"z" * self.size,
                            "more_body": i < self.chunks - 1})
            out: tuple = ("done",)
        except skirr.ClientDisconnected:
            out = ("disconnected", time.monotonic() - t0)
        with self.lock:
            self.outcomes.append(out)

    def wait(self, n: int, timeout: float) -> list[tuple]:
        deadline = time.monotonic() + timeout
        while len(self.outcomes) < n:
            assert time.monotonic() < deadline, f"outcomes {self.outcomes}, expected {n}"
            time.sleep(0.02)
        return list(self.outcomes)


def stalled_stream_1(port: int) -> "Raw":
    """A connection with SETTINGS_INITIAL_WINDOW_SIZE 0 whose stream 1 asked for the app's answer
    and got its HEADERS: the answer's content now waits on stream 1's closed window."""
    c = Raw(port, settings={SettingsFrame.INITIAL_WINDOW_SIZE: 0})
    c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, GET_BLOCK))
    c.until(lambda f: isinstance(f, HeadersFrame) and f.stream_id == 1, what="the HEADERS")
    return c


def goaway_while(c: "Raw", step: Callable[[], None], limit: float = 6.0) -> tuple:
    """Calls step() every 0.2 s until a GOAWAY comes or `limit` seconds pass: (the GOAWAY frame
    or None, seconds waited)."""
    t0 = time.monotonic()
    g = None
    while g is None and time.monotonic() - t0 < limit:
        step()
        time.sleep(0.2)
        c.poll()
        goaways = c.of(GoAwayFrame)
        g = goaways[0] if goaways else None
    return g, time.monotonic() - t0


@pytest.mark.rule("RFC9113-10.5-zero-window-stall")
def test_zero_window_stall(serve):
    """SETTINGS_INITIAL_WINDOW_SIZE 0 and never a WINDOW_UPDATE: within --timeout-write (0.5 s)
    plus two ticks of the once-a-second timer (arming and firing) after the response's HEADERS,
    GOAWAY ENHANCE_YOUR_CALM naming the stream, the close, and the app's send() raises
    ClientDisconnected; not one DATA frame left; another connection is served."""
    app = Sender(64, 16384, big=1)
    with serve(app, timeout_write=0.5) as srv:
        c = stalled_stream_1(srv.port)
        t0 = time.monotonic()
        g = c.until_goaway(timeout=IO_TIMEOUT)
        waited = time.monotonic() - t0
        c.until_eof()
        assert (g.error_code, g.last_stream_id) == (ENHANCE_YOUR_CALM, 1), g
        assert waited < 0.5 + 2.0, waited
        outcomes = app.wait(1, timeout=IO_TIMEOUT)
        assert outcomes[0][0] == "disconnected", outcomes
        assert not c.of(DataFrame), c.of(DataFrame)
        served(srv.port)


@pytest.mark.rule("RFC9113-10.5-zero-window-stall")
def test_zero_window_stall_with_pings(serve):
    """As test_zero_window_stall, while the client sends a PING every 0.2 s (within the PING
    budget): the PING ACKs are not progress of the stalled response, so GOAWAY
    ENHANCE_YOUR_CALM comes within the same bound (it never came: each ACK restarted it)."""
    app = Sender(64, 16384, big=1)
    with serve(app, timeout_write=0.5) as srv:
        c = stalled_stream_1(srv.port)
        g, waited = goaway_while(c, lambda: c.send(frame(PING, 0, 0, b"keepaliv")))
        assert g is not None, f"no GOAWAY within {waited:.1f} s of PINGs"
        assert (g.error_code, g.last_stream_id) == (ENHANCE_YOUR_CALM, 1), g
        assert waited < 0.5 + 2.0 + 0.5, waited
        outcomes = app.wait(1, timeout=IO_TIMEOUT)
        assert outcomes[0][0] == "disconnected", outcomes
        assert not c.of(DataFrame), c.of(DataFrame)
        served(srv.port)


@pytest.mark.rule("RFC9113-10.5-zero-window-stall")
def test_zero_window_stall_while_other_streams_progress(serve):
    """As test_zero_window_stall, while the client opens a stream every 0.2 s and gives each
    the window for its 2-byte answer: their DATA leaving is not progress of stream 1's stalled
    response, so GOAWAY ENHANCE_YOUR_CALM comes within the same bound. It never came (any
    stream's DATA restarted the connection's bound), so a client could hold stalled responses,
    their apps and their memory for good (an attack, stop 56: 95 streams of 2 MB pinned 180 MB)."""
    app = Sender(64, 16384, big=1)
    with serve(app, timeout_write=0.5) as srv:
        c = stalled_stream_1(srv.port)
        sids = iter(range(3, 1 << 31, 2))

        def another_stream():  # a GET and the window for its 2-byte answer
            sid = next(sids)
            c.send(frame(HEADERS, END_STREAM | END_HEADERS, sid, GET_BLOCK)
                   + frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", 2)))

        g, waited = goaway_while(c, another_stream)
        assert g is not None, f"no GOAWAY within {waited:.1f} s of other streams' DATA"
        assert g.error_code == ENHANCE_YOUR_CALM, g
        assert waited < 0.5 + 2.0 + 0.5, waited
        data = c.of(DataFrame)
        assert len(data) >= 2 and all(f.stream_id != 1 and f.data == b"zz" for f in data), data
        deadline = time.monotonic() + IO_TIMEOUT  # stream 1's app; the others' answers went out
        while not any(o[0] == "disconnected" for o in app.outcomes):
            assert time.monotonic() < deadline, app.outcomes
            time.sleep(0.02)
        served(srv.port)


@pytest.mark.rule("RFC9113-10.5-never-reads")
def test_client_never_reads(serve):
    """Windows opened to 2^31-1, 8 streams of 4 MiB each asked for, nothing read (a 4 KiB
    receive buffer): each app's send() raises ClientDisconnected within --timeout-write (0.5 s) +
    2 s of its stall, the connection is closed, memory grows by less than 16 MiB (the responses
    are 32 MiB)."""
    app = Sender(64, 65536, big=8)
    with serve(app, timeout_write=0.5) as srv:
        before = rss()
        c = Raw(srv.port, settings={SettingsFrame.INITIAL_WINDOW_SIZE: 0x7FFFFFFF}, rcvbuf=4096)
        c.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0x7FFFFFFF - 65535)))
        c.send(b"".join(frame(HEADERS, END_STREAM | END_HEADERS, sid, GET_BLOCK)
                        for sid in range(1, 17, 2)))
        outcomes = app.wait(8, timeout=4.0)
        grown = rss() - before
        assert [o[0] for o in outcomes] == ["disconnected"] * 8, outcomes
        assert grown < 16 * MIB, grown
        c.until_eof(timeout=IO_TIMEOUT)
        served(srv.port)
        c.close()


@pytest.mark.rule("RFC9113-10.5-window-update-credit")
def test_window_updates_of_a_reader_are_not_a_flood(serve):
    """A client that reads an 8 MiB response with the default 64 KiB stream window and sends a
    stream and a connection WINDOW_UPDATE every 4 KiB it reads (Go's and grpc-go's pattern:
    4096 of them, four times the unprompted budget) gets all of it, with no GOAWAY: the DATA
    the server sends pays for them."""
    size = 8 * MIB
    app = Sender(size // 16384, 16384, big=1)
    with serve(app) as srv:
        try:
            c = Raw(srv.port)
            c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, GET_BLOCK))
            got = 0
            owed = 0
            deadline = time.monotonic() + 4 * IO_TIMEOUT
            while got < size and not c.eof and c.goaway() is None:
                assert time.monotonic() < deadline, f"{got} of {size} bytes"
                for f in c._recv(IO_TIMEOUT):
                    if isinstance(f, DataFrame) and f.stream_id == 1:
                        got += len(f.data)
                        owed += len(f.data)
                        ups = []
                        while owed >= 4096:
                            owed -= 4096
                            ups.append(frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 4096)))
                            ups.append(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 4096)))
                        c.send(b"".join(ups))
            assert c.goaway() is None, c.goaway()
            assert got == size
            assert app.wait(1, IO_TIMEOUT) == [("done",)]
            c.close()
        finally:  # a GOAWAY leaves no socket open into the shutdown
            while _OPEN:
                _OPEN.pop().close()
