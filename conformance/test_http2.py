"""HTTP/2 (issue 33, spec/http2.toml): getting to HTTP/2 (prior knowledge, ALPN, --http), each
stream an ASGI exchange (scope, bodies, flow control, the send() contract, trailers, early hints,
files, disconnects) and the connection's GOAWAYs, over raw frames with the `h2` library as client
and oracle (conformance/h2_util.py). Every case runs on asyncio and uvloop (the `serve` fixture).
"""
from __future__ import annotations

import asyncio
import fcntl
import os
import re
import socket
import ssl
import struct
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path

import h2.errors
import h2.exceptions
import h2.events
import h2.settings
import hyperframe.frame
import pytest

from _flow import BlockedLoop, shrink_server_send_buffer
from h2_util import PREFACE, ConnectionClosed, H2Client, raw_frames
from test_access_log import access  # noqa: F401  (the access fixture)
from tls_util import TLSFiles

IO = 5.0


async def read_body(receive, seen: "list | None" = None) -> bytes:
    """The request's content, read whole; each receive() message appended to seen if given."""
    body = b""
    while True:
        m = await receive()
        if seen is not None:
            seen.append(m)
        body += m.get("body", b"")
        if not m.get("more_body"):
            return body


async def hello(scope, receive, send):
    """200 'hello' for any request (its body read whole first)."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


class Recorder:
    """An app that records each request's scope and events, then answers 200 with the body it
    read."""

    def __init__(self) -> None:
        self.scopes: list = []
        self.events: list = []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        self.scopes.append(scope)
        body = await read_body(receive, self.events)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


def h2_get(port: int, path: str = "/", **kw):
    with H2Client.open(port) as c:
        sid = c.get(path, **kw)
        return c.answer(sid)


# ---- getting to HTTP/2 -------------------------------------------------------------------------


@pytest.mark.rule("h2-prior-knowledge")
def test_prior_knowledge_get(serve):
    with serve(hello) as srv:
        with H2Client.open(srv.port) as c:
            sid = c.get("/")
            a = c.answer(sid)
    assert sid == 1
    assert (a.status, a.body, a.ended, a.reset) == (200, b"hello", True, None)
    names = [n for n, _ in a.headers]
    assert names == [b"content-type", b"content-length", b"date", b"server"]
    assert a.header(b"content-length") == b"5"  # the single final body's length, as HTTP/1.1
    assert a.header(b"content-type") == b"text/plain" and a.header(b"server") == b"skirr"


@pytest.mark.rule("h2-prior-knowledge")
def test_preface_in_pieces_is_waited_for(serve):
    """The preface one byte at a time: nothing comes back while it is a strict prefix (no
    HTTP/1.1 400 either); its last byte brings the server's SETTINGS, and a request is served."""
    with serve(hello) as srv:
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=IO)
        for i in range(len(PREFACE) - 1):
            s.sendall(PREFACE[i:i + 1])
            time.sleep(0.002)
        s.settimeout(0.3)
        with pytest.raises(socket.timeout):
            s.recv(100)
        s.sendall(PREFACE[-1:])
        s.settimeout(IO)
        first = raw_frames(s.recv(9 + 6 * 5))
        assert isinstance(first[0], hyperframe.frame.SettingsFrame) and "ACK" not in first[0].flags
        c = H2Client(s, IO, preface=False)
        c.conn.initiate_connection()
        c.conn.data_to_send()  # h2's preface and SETTINGS: only the SETTINGS are sent
        c.send_raw(hyperframe.frame.SettingsFrame(0).serialize())
        sid = c.get("/")
        a = c.answer(sid)
        c.close()
    assert (a.status, a.body) == (200, b"hello")


@pytest.mark.rule("h2-prior-knowledge")
def test_other_first_bytes_are_http11(serve):
    with serve(hello) as srv:
        r = srv.get("/")
    assert (r.status, r.body) == (200, b"hello")


@pytest.mark.rule("h2-settings")
def test_server_settings(serve):
    with serve(hello) as srv:
        with H2Client.open(srv.port) as c:
            evs = c.events_until(lambda e: isinstance(e, h2.events.WindowUpdated)
                                 and e.stream_id == 0)
    changed = [e for e in evs if isinstance(e, h2.events.RemoteSettingsChanged)][0]
    got = {int(k): v.new_value for k, v in changed.changed_settings.items()}
    S = h2.settings.SettingCodes
    assert got == {S.MAX_CONCURRENT_STREAMS: 100, S.INITIAL_WINDOW_SIZE: 1048576,
                   S.MAX_FRAME_SIZE: 16384, S.MAX_HEADER_LIST_SIZE: 65536, S.ENABLE_PUSH: 0}
    assert evs[-1].delta == 4 * 1048576 - 65535  # the connection's window: four streams'


# ---- the scope ---------------------------------------------------------------------------------


@pytest.mark.rule("h2-scope")
def test_scope_exactly(serve):
    app = Recorder()
    with serve(app) as srv:
        with H2Client.open(srv.port) as c:
            sid = c.request([(":method", "GET"), (":scheme", "http"),
                             (":path", "/a%20b/c?x=1&y=%20"), (":authority", "example.org:81"),
                             ("user-agent", "t"), ("accept", "*/*"), ("x-b", "1"), ("x-b", "2")])
            a = c.answer(sid)
            cport = c.sock.getsockname()[1]
    assert a.status == 200
    scope = dict(app.scopes[0])
    ext = scope.pop("extensions")
    state = scope.pop("state", None)
    assert state in (None, {})
    assert scope == {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.5"},
        "http_version": "2", "method": "GET", "scheme": "http",
        "path": "/a b/c", "raw_path": b"/a%20b/c", "query_string": b"x=1&y=%20",
        "root_path": "",
        "headers": [(b"user-agent", b"t"), (b"accept", b"*/*"), (b"x-b", b"1"), (b"x-b", b"2"),
                    (b"host", b"example.org:81")],
        "client": ("127.0.0.1", cport), "server": ("127.0.0.1", srv.port),
    }
    assert sorted(ext) == ["http.response.early_hint", "http.response.pathsend",
                           "http.response.trailers", "http.response.zerocopysend"]


@pytest.mark.rule("h2-scope")
def test_authority_pair_shared_like_a_host_field(serve):
    """The (b"host", :authority) pair every HTTP/2 request gets holds what an HTTP/1.1 Host field
    would: the one shared name, and the value of the stream before when equal (sk_serve_t's
    last Host value), a differing value the stream's own; http_version is one shared "2"."""
    app = Recorder()
    authorities = ["example.org:81", "example.org:81", "example.org:82", "example.org:81"]
    with serve(app) as srv:
        with H2Client.open(srv.port) as c:
            for authority in authorities:
                sid = c.request([(":method", "GET"), (":scheme", "http"), (":path", "/"),
                                 (":authority", authority)])
                assert c.answer(sid).status == 200
    pairs = [scope["headers"][-1] for scope in app.scopes]
    assert [tuple(p) for p in pairs] == [(b"host", a.encode()) for a in authorities]
    assert pairs[1][1] is pairs[0][1] and pairs[2][1] is not pairs[1][1]
    assert pairs[3][1] is not pairs[0][1]  # the stream before sent another value
    assert all(p[0] is pairs[0][0] for p in pairs)
    assert all(scope["http_version"] is app.scopes[0]["http_version"] for scope in app.scopes)


@pytest.mark.rule("h2-scope")
def test_host_field_equal_to_authority_kept_differing_refused(serve):
    """A host field equal to :authority (compared case-insensitively) is kept in its place with
    :authority's bytes (one answer to "which host", as HTTP/1.1's absolute-form); one that differs makes the request malformed (RFC 9113 §8.3.1): RST_STREAM PROTOCOL_ERROR, the
    app never called."""
    app = Recorder()
    with serve(app) as srv:
        kept = h2_get(srv.port, "/", extra=[("host", "A.Example")], authority="a.example")
        refused = h2_get(srv.port, "/", extra=[("host", "other")], authority="a.example")
    assert (kept.status, refused.status, refused.reset) == (200, None,
                                                            h2.errors.ErrorCodes.PROTOCOL_ERROR)
    assert [sc["headers"] for sc in app.scopes] == [[(b"host", b"a.example")]]


@pytest.mark.rule("h2-cookie-crumbs")
def test_cookie_crumbs_joined(serve):
    app = Recorder()
    with serve(app) as srv:
        h2_get(srv.port, "/", extra=[("x-a", "1"), ("cookie", "a=1"), ("x-b", "2"),
                                     ("cookie", "b=2"), ("cookie", "c=3")])
    assert app.scopes[0]["headers"] == [(b"x-a", b"1"), (b"cookie", b"a=1; b=2; c=3"),
                                        (b"x-b", b"2"), (b"host", b"testserver")]


# ---- request bodies ----------------------------------------------------------------------------


@pytest.mark.rule("h2-request-body")
def test_request_body_events(serve):
    app = Recorder()
    with serve(app) as srv:
        with H2Client.open(srv.port) as c:
            sid = c.get("/", method="POST", body=b"")
            # a second request whose body comes in three DATA frames
            sid2 = c.request([(":method", "POST"), (":scheme", "http"), (":path", "/2"),
                              (":authority", "t")], end=False)
            a = c.answer(sid)
            for piece, end in ((b"abc", False), (b"de", False), (b"f", True)):
                c.conn.send_data(sid2, piece, end_stream=end)
                c.flush()
                time.sleep(0.05)
            a2 = c.answer(sid2)
    assert (a.status, a.body) == (200, b"")
    assert (a2.status, a2.body) == (200, b"abcdef")
    second = app.events[1:]
    assert b"".join(e["body"] for e in second) == b"abcdef"
    assert [e["more_body"] for e in second][-1] is False
    assert all(e["type"] == "http.request" for e in second)
    assert all(e["more_body"] for e in second[:-1])


# ---- ALPN and --http ---------------------------------------------------------------------------


@pytest.mark.rule("h2-alpn", "h2-scope")
@pytest.mark.parametrize("http, offer, selected", [
    ("auto", ("h2", "http/1.1"), "h2"), ("auto", ("http/1.1", "h2"), "h2"),
    ("2", ("h2",), "h2"), ("2", (), None)],
    ids=["auto-h2-first", "auto-h2-second", "h2-only", "h2-only-no-alpn"])
def test_alpn_h2_serves_http2(serve, tmp_path, http, offer, selected):
    files = TLSFiles(tmp_path)
    app = Recorder()
    with serve(app, **files.server_config(http=http)) as srv:
        with H2Client.open_tls(srv.port, files.client_context(), alpn=offer) as c:
            assert c.alpn == selected
            a = c.answer(c.get("/", scheme="https"))
    assert (a.status, a.ended) == (200, True)
    scope = app.scopes[0]
    assert (scope["http_version"], scope["scheme"]) == ("2", "https")
    assert scope["extensions"]["tls"]["tls_version"] in (0x303, 0x304)


@pytest.mark.rule("h2-alpn")
def test_alpn_http1_mode_refuses_h2_only_client(serve, tmp_path):
    files = TLSFiles(tmp_path)
    app = Recorder()
    with serve(app, **files.server_config(http="1")) as srv:
        ctx = files.client_context()
        ctx.set_alpn_protocols(["h2"])
        with pytest.raises(ssl.SSLError) as err:
            with socket.create_connection(("127.0.0.1", srv.port), timeout=IO) as raw:
                with ctx.wrap_socket(raw, server_hostname="localhost"):
                    pass
        assert "no application protocol" in str(err.value)
        ctx = files.client_context()
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        with socket.create_connection(("127.0.0.1", srv.port), timeout=IO) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                assert tls.selected_alpn_protocol() == "http/1.1"
    assert app.scopes == []


@pytest.mark.rule("h2-http-mode")
def test_http1_mode_parses_the_preface_as_http11(serve):
    app = Recorder()
    with serve(app, http="1") as srv:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=IO) as s:
            s.sendall(PREFACE)
            data = b""
            while chunk := s.recv(4096):
                data += chunk
    assert data.startswith(b"HTTP/1.1 505 HTTP Version Not Supported\r\n")
    assert app.scopes == []


@pytest.mark.rule("h2-http-mode")
def test_http2_mode_refuses_http11_with_goaway(serve):
    app = Recorder()
    with serve(app, http="2") as srv:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=IO) as s:
            s.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
    frames = raw_frames(data)
    assert [type(f).__name__ for f in frames] == ["SettingsFrame", "WindowUpdateFrame",
                                                  "GoAwayFrame"]
    assert (frames[-1].error_code, frames[-1].last_stream_id) == (h2.errors.ErrorCodes.PROTOCOL_ERROR, 0)
    assert app.scopes == []


@pytest.mark.rule("h2-http-mode")
def test_h2c_upgrade_stays_http11(serve):
    app = Recorder()
    with serve(app) as srv:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=IO) as s:
            s.sendall(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: Upgrade, HTTP2-Settings\r\n"
                      b"upgrade: h2c\r\nhttp2-settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
            s.settimeout(IO)
            data = s.recv(4096)
    assert data.startswith(b"HTTP/1.1 200 OK\r\n")
    assert app.scopes[0]["http_version"] == "1.1"


# ---- flow control ------------------------------------------------------------------------------


@pytest.mark.rule("h2-flow-control-app")
@pytest.mark.parametrize("connection", [None, 65535], ids=["default", "connection-65535"])
def test_no_window_update_until_the_app_reads(serve, connection):
    """A stream's whole window sent while the app does not read: no WINDOW_UPDATE until it
    reads, then the stream's. The connection's comes with it when the read content is half the
    connection's window or more (nghttp2's threshold): with a connection window of 65,535, not
    with the default four stream windows (262,140 here)."""
    gate = threading.Event()

    async def app(scope, receive, send):
        while not gate.is_set():
            await asyncio.sleep(0.01)
        n = 0
        while True:
            m = await receive()
            n += len(m["body"])
            if not m["more_body"]:
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(n).encode()})

    window = 65535
    with serve(app, http2_initial_stream_window_size=window,
               http2_initial_connection_window_size=connection) as srv:
        with H2Client.open(srv.port) as c:
            c.events_until(lambda e: isinstance(e, h2.events.SettingsAcknowledged))
            sid = c.request([(":method", "POST"), (":scheme", "http"), (":path", "/"),
                             (":authority", "t")], end=False)
            for _ in range(4):
                c.conn.send_data(sid, b"x" * 16383)
            c.conn.send_data(sid, b"x" * 3)
            c.flush()
            assert c.conn.local_flow_control_window(sid) == 0
            with pytest.raises(AssertionError, match="timed out"):
                c.events_until(lambda e: isinstance(e, h2.events.WindowUpdated), timeout=0.5)
            gate.set()
            evs = c.events_until(lambda e: isinstance(e, h2.events.WindowUpdated)
                                 and e.stream_id == sid)
            assert any(isinstance(e, h2.events.WindowUpdated) and e.stream_id == 0
                       for e in evs) == (connection == 65535)
            c.conn.send_data(sid, b"y" * 1000, end_stream=True)
            c.flush()
            a = c.answer(sid)
    assert (a.status, a.body) == (200, b"66535")


@pytest.mark.rule("h2-flow-control-app")
@pytest.mark.parametrize("window", [1, 1000, 16383, 16384, 16385, 65535])
def test_an_upload_through_a_small_window_arrives_whole(serve, window):
    """An app that calls receive() again at once (so a receive() is waiting when each DATA frame
    comes) reopens the windows as it takes the content, whatever --http2-initial-stream-window-size
    is. The bytes a waiting receive() took as they came were never given back, so with a window
    of one DATA frame (16,384) or less the upload stalled for good (an attack, stop 56)."""
    import hashlib

    async def app(scope, receive, send):
        body = b""
        while True:
            m = await receive()
            body += m["body"]
            if not m["more_body"]:
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body",
                    "body": f"{len(body)} {hashlib.sha256(body).hexdigest()}".encode()})

    total = 3000 if window < 1000 else 100_000  # a window of 1: one round trip a byte
    data = (bytes(range(256)) * (total // 256 + 1))[:total]
    with serve(app, http2_initial_stream_window_size=window) as srv:
        with H2Client.open(srv.port) as c:
            c.events_until(lambda e: isinstance(e, h2.events.SettingsAcknowledged))
            sid = c.request([(":method", "POST"), (":scheme", "http"), (":path", "/"),
                             (":authority", "t")], end=False)
            sent = 0
            while sent < total:
                room = min(c.conn.local_flow_control_window(sid), c.conn.max_outbound_frame_size,
                           total - sent)
                if room == 0:  # the stream's or the connection's window: wait for it to reopen
                    c.events_until(lambda e: isinstance(e, h2.events.WindowUpdated), timeout=5)
                    continue
                c.conn.send_data(sid, data[sent:sent + room], end_stream=sent + room == total)
                c.flush()
                sent += room
            a = c.answer(sid)
    assert (a.status, a.body) == (200, f"{total} {hashlib.sha256(data).hexdigest()}".encode())


# ---- responses ---------------------------------------------------------------------------------


def steps_app(steps, seen=None):
    """Sends steps(scope) in order (after reading the body); exceptions from send() go to
    seen."""
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        for msg in steps(scope):
            try:
                await send(msg)
            except Exception as exc:
                if seen is None:
                    raise
                seen.append(exc)
                return
    return app


@pytest.mark.rule("h2-response")
def test_response_fields_lowercased_and_connection_specific_dropped(serve):
    def steps(scope):
        return [{"type": "http.response.start", "status": 201, "headers": [
                    (b"X-Mixed-Case", b"v"), (b"Connection", b"close"), (b"keep-alive", b"5"),
                    (b"transfer-encoding", b"chunked"), (b"upgrade", b"x"),
                    (b"proxy-connection", b"y"), (b"TE", b"gzip"), (b"te", b"trailers"),
                    (b"content-length", b"2")]},
                {"type": "http.response.body", "body": b"ok"}]

    with serve(steps_app(steps), date_header=False) as srv:
        a = h2_get(srv.port)
    assert (a.status, a.body, a.ended) == (201, b"ok", True)
    assert a.headers == [(b"x-mixed-case", b"v"), (b"content-length", b"2"), (b"server", b"skirr")]


@pytest.mark.rule("h2-response")
def test_curl_takes_a_response_whose_app_gave_te(serve):
    """nghttp2's client (curl's) resets a response carrying te (RFC 9113 §8.2.2): the app's te
    never goes out, and the early hint before it and the response reach curl (its -i output,
    read as text: each CRLF a newline)."""
    def steps(scope):
        return [{"type": "http.response.early_hint", "links": [b"</a.css>; rel=preload"]},
                {"type": "http.response.start", "status": 200,
                 "headers": [(b"te", b"gzip"), (b"content-type", b"text/plain")]},
                {"type": "http.response.body", "body": b"hello"}]

    with serve(steps_app(steps), date_header=False) as srv:
        got = subprocess.run(["curl", "-sS", "--max-time", "20", "--http2-prior-knowledge", "-i",
                              f"http://127.0.0.1:{srv.port}/"],
                             capture_output=True, text=True, timeout=30)
    assert (got.returncode, got.stderr) == (0, ""), got
    assert got.stdout == ("HTTP/2 103 \nlink: </a.css>; rel=preload\n\n"
                          "HTTP/2 200 \ncontent-type: text/plain\ncontent-length: 5\n"
                          "server: skirr\n\nhello")


@pytest.mark.rule("h2-response")
def test_response_field_values_lose_the_whitespace_around_them(serve):
    """Field values an app gives with SP or HTAB at either end (on HTTP/1.1 that is the field
    line's optional whitespace) go out trimmed, in the head and the trailers: RFC 9113 §8.2.1
    forbids them in an HTTP/2 value, and a client (nghttp2's) refuses such a response; an early
    hint's link values (a 103's fields) likewise."""
    def steps(scope):
        return [{"type": "http.response.early_hint", "links": [b" </a.css>; rel=preload\t"]},
                {"type": "http.response.start", "status": 200, "trailers": True, "headers": [
                    (b"x-a", b" text/plain"), (b"x-b", b"text/plain "), (b"x-c", b"\ta b\t"),
                    (b"x-d", b" \t "), (b"x-e", b"v")]},
                {"type": "http.response.body", "body": b"ok"},
                {"type": "http.response.trailers", "headers": [(b"x-t", b"\t1 ")]}]

    with serve(steps_app(steps), date_header=False) as srv:
        with H2Client.open(srv.port) as c:
            a = c.answer(c.get("/"))
    assert (a.status, a.body, a.ended) == (200, b"ok", True)
    assert a.headers == [(b"x-a", b"text/plain"), (b"x-b", b"text/plain"), (b"x-c", b"a b"),
                         (b"x-d", b""), (b"x-e", b"v"), (b"server", b"skirr")]
    assert a.trailers == [(b"x-t", b"1")]
    assert a.interim == [(103, [(b"link", b"</a.css>; rel=preload")])]


@pytest.mark.rule("h2-response", "RFC9110-15.3.5-204-304-no-content",
                  "RFC9110-8.6-no-content-length-in-204", "RFC9110-15.3.6-205-no-content",
                  "RFC9110-15.4.5-304-content-length-kept", "RFC9110-9.3.2-head-no-content")
@pytest.mark.parametrize("bodies", [[b"hello"], [b"hel", b"lo", b""], [b""]],
                         ids=["single", "streamed", "empty"])
@pytest.mark.parametrize("app_length", [True, False], ids=["app-length", "no-length"])
@pytest.mark.parametrize("method, status", [("HEAD", 200), ("GET", 204), ("GET", 205),
                                            ("GET", 304), ("HEAD", 205)])
def test_bodyless_responses_have_no_data(serve, method, status, app_length, bodies):
    """HEAD, 204, 205 and 304 end on their HEADERS whatever body the app sends, with the fields
    HTTP/1.1 sends (test_http_responses.py): the app's content-length kept for HEAD and 304,
    left out of a 204 (RFC 9110 §8.6; nghttp2's client resets a 204 that has one) and a 205,
    which says "content-length: 0" itself (§15.3.6). The next stream is answered."""
    length = sum(map(len, bodies))

    def steps(scope):
        if scope["path"] == "/next":
            return [{"type": "http.response.start", "status": 200, "headers": []},
                    {"type": "http.response.body", "body": b"next"}]
        head = [(b"x-a", b"1")] + ([(b"content-length", b"%d" % length)] if app_length else [])
        return [{"type": "http.response.start", "status": status, "headers": head}] + [
            {"type": "http.response.body", "body": b, "more_body": k < len(bodies) - 1}
            for k, b in enumerate(bodies)]

    with serve(steps_app(steps), date_header=False) as srv:
        with H2Client.open(srv.port) as c:
            a = c.answer(c.get("/", method=method))
            nxt = c.answer(c.get("/next"))
    assert (a.status, a.body, a.ended, a.reset) == (status, b"", True, None)
    assert not any(isinstance(e, h2.events.DataReceived) for e in a.events)
    # END_STREAM was on the HEADERS frame itself
    assert a.events[0].stream_ended is not None
    kept = [(b"content-length", b"%d" % length)] if app_length and status in (200, 304) else []
    own = [(b"content-length", b"0")] if status == 205 else []
    assert a.headers == own + [(b"x-a", b"1")] + kept + [(b"server", b"skirr")]
    assert (nxt.status, nxt.body) == (200, b"next")


@pytest.mark.rule("h2-response")
def test_empty_body_ends_on_headers(serve):
    def steps(scope):
        return [{"type": "http.response.start", "status": 200, "headers": []},
                {"type": "http.response.body", "body": b""}]

    with serve(steps_app(steps)) as srv:
        with H2Client.open(srv.port) as c:
            a = c.answer(c.get("/"))
    assert (a.status, a.body) == (200, b"")
    assert [type(e).__name__ for e in a.events] == ["ResponseReceived", "StreamEnded"]


@pytest.mark.rule("h2-response")
def test_content_length_too_short_resets_the_stream(serve):
    seen: list = []

    def steps(scope):
        return [{"type": "http.response.start", "status": 200,
                 "headers": [(b"content-length", b"10")]},
                {"type": "http.response.body", "body": b"abc", "more_body": True},
                {"type": "http.response.body", "body": b"de"}]

    with serve(steps_app(steps, seen)) as srv:
        with H2Client.open(srv.port) as c:
            a = c.answer(c.get("/"))
            b = c.answer(c.get("/other"))  # the connection goes on
    assert (a.status, a.reset) == (200, h2.errors.ErrorCodes.INTERNAL_ERROR)
    assert len(seen) == 2 and all("shorter than Content-Length" in str(e) for e in seen)
    assert b.status == 200 and b.reset == h2.errors.ErrorCodes.INTERNAL_ERROR


# ---- trailers, early hints, files --------------------------------------------------------------


@pytest.mark.rule("h2-trailers")
def test_trailers_after_data(serve):
    def steps(scope):
        assert "http.response.trailers" in scope["extensions"]
        return [{"type": "http.response.start", "status": 200, "trailers": True,
                 "headers": [(b"content-type", b"application/grpc")]},
                {"type": "http.response.body", "body": b"abc", "more_body": True},
                {"type": "http.response.body", "body": b"def"},
                {"type": "http.response.trailers",
                 "headers": [(b"Grpc-Status", b"0"), (b"grpc-message", b"ok")], "more_trailers": True},
                {"type": "http.response.trailers", "headers": [(b"x-t", b"1")]}]

    with serve(steps_app(steps), date_header=False) as srv:
        with H2Client.open(srv.port) as c:
            a = c.answer(c.get("/"))
    assert (a.status, a.body, a.ended) == (200, b"abcdef", True)
    assert a.trailers == [(b"grpc-status", b"0"), (b"grpc-message", b"ok"), (b"x-t", b"1")]
    kinds = [type(e).__name__ for e in a.events]
    assert kinds[0] == "ResponseReceived" and kinds[-2:] == ["TrailersReceived", "StreamEnded"]
    assert all(k == "DataReceived" for k in kinds[1:-2])


@pytest.mark.rule("h2-trailers")
def test_forbidden_trailer_raises(serve):
    seen: list = []

    def steps(scope):
        return [{"type": "http.response.start", "status": 200, "trailers": True, "headers": []},
                {"type": "http.response.body", "body": b"abc"},
                {"type": "http.response.trailers", "headers": [(b"content-length", b"3")]}]

    with serve(steps_app(steps, seen)) as srv:
        with H2Client.open(srv.port) as c:
            a = c.answer(c.get("/"))
    assert len(seen) == 1 and isinstance(seen[0], RuntimeError)
    assert (a.status, a.body, a.trailers) == (200, b"abc", None)
    assert a.reset == h2.errors.ErrorCodes.INTERNAL_ERROR


@pytest.mark.rule("h2-early-hints")
def test_early_hints_as_103_headers(serve):
    def steps(scope):
        return [{"type": "http.response.early_hint", "links": [b"</a.css>; rel=preload"]},
                {"type": "http.response.early_hint",
                 "links": [b"</b.js>; rel=preload", b"</c.woff2>; rel=preload"]},
                {"type": "http.response.start", "status": 200, "headers": []},
                {"type": "http.response.body", "body": b"ok"}]

    with serve(steps_app(steps), date_header=False) as srv:
        with H2Client.open(srv.port) as c:
            a = c.answer(c.get("/"))
    assert a.interim == [(103, [(b"link", b"</a.css>; rel=preload")]),
                         (103, [(b"link", b"</b.js>; rel=preload"),
                                (b"link", b"</c.woff2>; rel=preload")])]
    assert (a.status, a.body) == (200, b"ok")


# ---- Expect: 100-continue (RFC 9110 §10.1.1 on HTTP/2) ------------------------------------------


def post_head(expect: bytes = b"100-continue", length: int = 5) -> list:
    return [(":method", "POST"), (":scheme", "http"), (":path", "/up"), (":authority", "t"),
            (b"expect", expect), ("content-length", str(length))]


def reading_app(seen: list, before=(), delay: float = 0.0):
    """Sends the messages `before` first, sleeps `delay`, then reads the body whole (each
    receive() recorded in seen) and answers 200 'got ' + body."""
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        for msg in before:
            await send(msg)
        await asyncio.sleep(delay)
        body = await read_body(receive, seen)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"got " + body})
    return app


def interim_of(events: list, sid: int) -> list:
    """The exact header lists of the interim responses on stream sid, in order."""
    return [list(e.headers) for e in events
            if isinstance(e, h2.events.InformationalResponseReceived) and e.stream_id == sid]


def stream_events(events: list, sid: int) -> list:
    return [e for e in events if getattr(e, "stream_id", None) == sid]


def assert_quiet(c: H2Client, sid: int, timeout: float) -> None:
    """Nothing arrives on stream sid for timeout seconds."""
    with pytest.raises(AssertionError, match="timed out"):
        evs = c.events_until(lambda e: getattr(e, "stream_id", None) == sid, timeout=timeout)
        raise RuntimeError(f"stream {sid} got {evs[-1]!r}")


def is_100(sid: int):
    return lambda e: (isinstance(e, h2.events.InformationalResponseReceived)
                      and e.stream_id == sid and dict(e.headers)[b":status"] == b"100")


def expect_then_send(c: H2Client, body: bytes = b"hello") -> tuple:
    """A POST with 'expect: 100-continue' on a new stream; once its 100 came, the content.
    (stream id, the events up to the 100, the stream's Answer)."""
    sid = c.request(post_head(length=len(body)), end=False)
    evs = c.events_until(is_100(sid))
    c.conn.send_data(sid, body, end_stream=True)
    c.flush()
    return sid, evs, c.answer(sid)


@pytest.mark.rule("h2-100-continue")
@pytest.mark.parametrize("expect", [b"100-continue", b"100-Continue"])
def test_100_continue_sent_when_the_app_first_receives(serve, expect):
    """The 100 is an interim HEADERS (':status 100' alone, no END_STREAM) sent when the app first
    awaits receive(), not before; the content sent in two DATA frames (receive() waits twice)
    gets no second 100; the final response follows."""
    seen: list = []
    with serve(reading_app(seen, delay=0.5), date_header=False) as srv:
        with H2Client.open(srv.port) as c:
            sid = c.request(post_head(expect), end=False)
            assert_quiet(c, sid, 0.3)  # the app sleeps before it reads: nothing yet
            evs = c.events_until(is_100(sid), timeout=IO)
            assert interim_of(evs, sid) == [[(b":status", b"100")]]
            assert stream_events(evs, sid) == [evs[-1]]
            c.conn.send_data(sid, b"hel")
            c.flush()
            deadline = time.monotonic() + IO
            while not seen and time.monotonic() < deadline:  # the app took the first piece
                time.sleep(0.01)
            assert seen == [{"type": "http.request", "body": b"hel", "more_body": True}]
            c.conn.send_data(sid, b"lo", end_stream=True)
            c.flush()
            a = c.answer(sid)
    assert (a.status, a.body, a.ended, a.interim) == (200, b"got hello", True, [])
    assert isinstance(a.events[0], h2.events.ResponseReceived)  # the 100 did not end the stream
    assert a.headers == [(b"content-length", b"9"), (b"server", b"skirr")]
    assert b"".join(m["body"] for m in seen[1:]) == b"lo" and not seen[-1]["more_body"]


@pytest.mark.rule("h2-100-continue")
def test_100_continue_only_once_however_often_receive_waits(serve):
    """receive() called again and again while no content comes (three reads, each cancelled
    after 0.1 s, then one awaited until the content comes): one 100."""
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        body = b""
        for _ in range(3):
            t = asyncio.ensure_future(receive())
            await asyncio.sleep(0.1)
            if t.done():
                m = t.result()
                body += m.get("body", b"")
                break
            t.cancel()
        else:
            m = {"more_body": True}
        while m.get("more_body"):
            m = await receive()
            body += m.get("body", b"")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    with serve(app, date_header=False) as srv:
        with H2Client.open(srv.port) as c:
            sid = c.request(post_head(), end=False)
            evs = c.events_until(is_100(sid))
            assert_quiet(c, sid, 0.6)  # receive() waits again twice more, cancelled: no 100
            c.conn.send_data(sid, b"hello", end_stream=True)
            c.flush()
            a = c.answer(sid)
    assert interim_of(evs, sid) == [[(b":status", b"100")]]
    assert (a.status, a.body, a.interim) == (200, b"hello", [])


@pytest.mark.rule("h2-100-continue")
def test_early_hint_then_100_then_the_final_response(serve):
    """A 103 before the read does not answer the expectation: 103, then 100 at the read."""
    seen: list = []
    hint = {"type": "http.response.early_hint", "links": [b"</a.css>; rel=preload"]}
    with serve(reading_app(seen, before=[hint]), date_header=False) as srv:
        with H2Client.open(srv.port) as c:
            sid, evs, a = expect_then_send(c)
    assert interim_of(evs, sid) == [[(b":status", b"103"), (b"link", b"</a.css>; rel=preload")],
                                    [(b":status", b"100")]]
    assert (a.status, a.body, a.interim) == (200, b"got hello", [])


@pytest.mark.rule("h2-100-continue")
@pytest.mark.parametrize("reads", [False, True])
def test_no_100_continue_when_the_app_answers_first(serve, reads):
    """An app that answers without reading gets no 100 (the final status answers the
    expectation); one whose response HEADERS went out before it reads gets none either."""
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first ", "more_body": reads})
        if reads:
            await send({"type": "http.response.body", "body": await read_body(receive)})

    with serve(app, date_header=False) as srv:
        with H2Client.open(srv.port) as c:
            sid = c.request(post_head(), end=False)
            if reads:
                evs = c.events_until(lambda e: isinstance(e, h2.events.DataReceived)
                                     and e.stream_id == sid)
                assert_quiet(c, sid, 0.3)  # the app waits in receive(): no 100
                c.conn.send_data(sid, b"hello", end_stream=True)
                c.flush()
                a = c.answer(sid)
                assert (a.status, a.body, a.ended, a.interim) == (None, b"hello", True, [])
            else:
                evs = []
                a = c.answer(sid)
                assert (a.status, a.body, a.ended) == (200, b"first ", True)
    mine = stream_events(evs + a.events, sid)
    assert interim_of(mine, sid) == []
    assert isinstance(mine[0], h2.events.ResponseReceived)  # the final HEADERS came first
    assert dict(mine[0].headers)[b":status"] == b"200"


@pytest.mark.rule("h2-100-continue")
def test_100_continue_when_the_app_started_its_response_but_sent_no_body(serve):
    """http.response.start alone sends no HEADERS (the head waits for the first body, whose
    content-length it may set): an app that starts its response and then reads still gets the
    100 first, then its 200, as on HTTP/1.1."""
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"got " + await read_body(receive)})

    with serve(app, date_header=False) as srv:
        with H2Client.open(srv.port) as c:
            sid, evs, a = expect_then_send(c)
    assert interim_of(evs, sid) == [[(b":status", b"100")]]
    assert stream_events(evs, sid) == [evs[-1]]
    assert (a.status, a.body, a.ended, a.interim) == (200, b"got hello", True, [])


@pytest.mark.rule("h2-100-continue")
def test_no_100_continue_without_content(serve):
    """END_STREAM on the HEADERS: there is no content to ask for."""
    seen: list = []
    with serve(reading_app(seen), date_header=False) as srv:
        with H2Client.open(srv.port) as c:
            sid = c.request(post_head(length=0), end=True)
            a = c.answer(sid)
    assert (a.status, a.body, a.interim) == (200, b"got ", [])
    assert seen == [{"type": "http.request", "body": b"", "more_body": False}]


@pytest.mark.rule("h2-100-continue")
def test_no_100_continue_once_content_arrived(serve):
    """The client sent content without waiting (HEADERS and DATA in one write, before the app
    reads): no 100, even though receive() later waits for the rest."""
    seen: list = []
    with serve(reading_app(seen, delay=0.3), date_header=False) as srv:
        with H2Client.open(srv.port) as c:
            sid = c.request(post_head(), body=b"hel", end=False)
            with pytest.raises(AssertionError, match="timed out"):
                c.events_until(is_100(sid), timeout=0.8)
            c.conn.send_data(sid, b"lo", end_stream=True)
            c.flush()
            a = c.answer(sid)
    assert (a.status, a.body, a.interim) == (200, b"got hello", [])


@pytest.mark.rule("h2-100-continue")
@pytest.mark.parametrize("expect", [b"100-continuex", b"something-else", b"100-continue, x"])
def test_other_expectations_get_no_100_and_reach_the_app(serve, expect):
    """Another expect value is not answered (no 100, no 417, as HTTP/1.1): the app sees the
    field and reads the content the client sends."""
    seen: list = []
    scopes: list = []
    inner = reading_app(seen)

    async def app(scope, receive, send):
        scopes.append(scope)
        await inner(scope, receive, send)

    with serve(app, date_header=False) as srv:
        with H2Client.open(srv.port) as c:
            sid = c.request(post_head(expect), end=False)
            with pytest.raises(AssertionError, match="timed out"):
                c.events_until(is_100(sid), timeout=0.5)
            c.conn.send_data(sid, b"hello", end_stream=True)
            c.flush()
            a = c.answer(sid)
    assert (a.status, a.body, a.interim) == (200, b"got hello", [])
    assert (b"expect", expect) in scopes[0]["headers"]


@pytest.mark.rule("h2-pathsend")
@pytest.mark.parametrize("kind", ["pathsend", "zerocopysend", "zerocopysend-range"])
def test_file_bodies(serve, tmp_path, kind):
    data = os.urandom(200_000)
    path = tmp_path / "f.bin"
    path.write_bytes(data)

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if kind == "pathsend":
            await send({"type": "http.response.pathsend", "path": str(path)})
            return
        with open(path, "rb") as f:
            msg = {"type": "http.response.zerocopysend", "file": f}
            if kind == "zerocopysend-range":
                msg.update(offset=1000, count=70_000)
            await send(msg)

    with serve(app) as srv:
        with H2Client.open(srv.port) as c:
            a = c.answer(c.get("/"))
    want = data[1000:71_000] if kind == "zerocopysend-range" else data
    assert (a.status, len(a.body), a.body == want, a.ended) == (200, len(want), True, True)
    assert a.header(b"content-length") == b"%d" % len(want)  # the file's (range's) size


@pytest.mark.rule("h2-response", "h2-pathsend")
@pytest.mark.parametrize("case, method, want", [
    ("single", "GET", b"5"), ("single", "HEAD", None), ("file", "GET", b"7"),
    ("file", "HEAD", b"7"), ("app-length", "GET", b"5"), ("streamed", "GET", None),
    ("trailers", "GET", None), ("empty", "GET", b"0"), ("status-404", "GET", b"5")])
def test_content_length_says_a_known_size(serve, tmp_path, case, method, want):
    """As HTTP/1.1 frames them (test_http_responses.py), a response whose whole content is
    known when its head leaves says its size: a single final body, a pathsend file (its size,
    for HEAD too, as README's file section says), an empty one ("0"), whatever the status;
    never twice when the app gave it. Not a HEAD answer's body (RFC 9110 §9.3.2 lets it omit
    it; HTTP/1.1 does), nor a streamed body or one with trailers (HTTP/1.1 sends those
    chunked)."""
    path = tmp_path / "f.txt"
    path.write_bytes(b"content")

    def steps(scope):
        status = 404 if case == "status-404" else 200
        head = [(b"content-length", b"5")] if case == "app-length" else []
        start = {"type": "http.response.start", "status": status, "headers": head,
                 "trailers": case == "trailers"}
        if case == "file":
            return [start, {"type": "http.response.pathsend", "path": str(path)}]
        if case == "streamed":
            return [start, {"type": "http.response.body", "body": b"hel", "more_body": True},
                    {"type": "http.response.body", "body": b"lo"}]
        body = [{"type": "http.response.body", "body": b"" if case == "empty" else b"hello"}]
        if case == "trailers":
            body.append({"type": "http.response.trailers", "headers": [(b"x-t", b"1")]})
        return [start] + body

    with serve(steps_app(steps), date_header=False) as srv:
        with H2Client.open(srv.port) as c:
            a = c.answer(c.get("/", method=method))
    length = [(b"content-length", want)] if want is not None else []
    assert a.headers == length + [(b"server", b"skirr")]
    assert a.ended and a.reset is None


@pytest.mark.rule("h2-pathsend")
@pytest.mark.rule("h2-trailers")
def test_body_file_body_and_trailers_over_a_small_window(serve, tmp_path):
    # Each DATA frame's payload is taken from one source in turn (the queued bytes, the file
    # range, the bytes given after it) and written straight into the output (send_data): with a
    # 1000-byte window every source spans many frames, and the trailers follow the last one.
    data = os.urandom(50_000)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    head, tail = os.urandom(12_345), os.urandom(23_456)

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "trailers": True,
                    "headers": []})
        await send({"type": "http.response.body", "body": head, "more_body": True})
        with open(path, "rb") as f:
            await send({"type": "http.response.zerocopysend", "file": f, "offset": 7,
                        "count": 40_000, "more_body": True})
        await send({"type": "http.response.body", "body": tail})
        await send({"type": "http.response.trailers", "headers": [(b"x-sum", b"ok")]})

    with serve(app) as srv:
        with H2Client.open(srv.port, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE:
                                               1000}) as c:
            a = c.answer(c.get("/"))
    want = head + data[7:40_007] + tail
    assert (a.status, len(a.body), a.body == want) == (200, len(want), True)
    assert (a.trailers, a.ended, a.reset) == ([(b"x-sum", b"ok")], True, None)
    sizes = [len(e.data) for e in a.events if isinstance(e, h2.events.DataReceived)]
    assert len(sizes) >= len(want) // 1000 and max(sizes) <= 1000


@pytest.mark.rule("h2-trailers")
@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_large_final_body_then_trailers_over_a_small_window(serve, method):
    # A final body of 16 KiB or more is held by reference (body_ref) and sent in place a frame
    # at a time as the 1000-byte window reopens; the trailers follow its last DATA. HEAD: none
    # of it is sent.
    body = os.urandom(100_000)

    def steps(scope):
        return [{"type": "http.response.start", "status": 200, "trailers": True,
                 "headers": [(b"content-length", b"100000")]},
                {"type": "http.response.body", "body": body},
                {"type": "http.response.trailers", "headers": [(b"x-sum", b"ok")]}]

    with serve(steps_app(steps)) as srv:
        with H2Client.open(srv.port, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE:
                                               1000}) as c:
            a = c.answer(c.get("/", method=method))
    want = body if method == "GET" else b""
    assert (a.status, len(a.body), a.body == want, a.ended) == (200, len(want), True, True)
    assert a.trailers == ([(b"x-sum", b"ok")] if method == "GET" else None)


def one_answer_at(path: str, body_message: dict):
    """An app answering `path` with 200 and `body_message` (an http.response.body or pathsend
    message), every other path with hello's."""
    async def app(scope, receive, send):
        if scope["path"] == path:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send(body_message)
        else:
            await hello(scope, receive, send)
    return app


def first_window(c) -> bytes:
    """The DATA bytes received until the peer's default initial window (65,535 bytes) is used,
    none of them acknowledged (the stream's window stays closed)."""
    got = b""

    def window_full(e) -> bool:
        nonlocal got
        if isinstance(e, h2.events.DataReceived):
            got += e.data
        return len(got) >= 65_535

    c.events_until(window_full, ack_data=False)
    return got


@pytest.mark.rule("h2-disconnect")
def test_client_reset_while_a_large_body_waits_for_the_window(serve):
    # The stream is freed with its body held by reference half sent; the connection goes on.
    body = os.urandom(200_000)
    app = one_answer_at("/big", {"type": "http.response.body", "body": body})
    with serve(app) as srv:
        with H2Client.open(srv.port) as c:
            sid = c.get("/big")
            got = first_window(c)
            assert got == body[:65_535]
            c.conn.increment_flow_control_window(len(got))   # the connection's, for the next
            c.conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
            c.flush()
            b = c.answer(c.get("/"))
    assert (b.status, b.body, b.ended) == (200, b"hello", True)


@pytest.mark.rule("h2-pathsend")
def test_file_shrinking_while_sent_resets_the_stream(serve, tmp_path):
    # The range is read one DATA frame at a time as the window opens (send_data): a file cut
    # short meanwhile resets the stream with INTERNAL_ERROR after the frames that were whole
    # (the client sees no response that looks complete), the error is logged as over HTTP/1.1
    # (it was not: an attack, stop 56), and the connection goes on.
    data = os.urandom(200_000)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    cut = 65_535 + 16_384   # the window's worth, then one whole frame of the default size
    app = one_answer_at("/file", {"type": "http.response.pathsend", "path": str(path)})
    with serve(app) as srv:
        with H2Client.open(srv.port) as c:
            sid = c.get("/file")
            got = first_window(c)
            assert got == data[:65_535]
            os.truncate(path, cut)
            c.conn.acknowledge_received_data(len(got), sid)
            c.conn.increment_flow_control_window(1 << 20, sid)
            c.conn.increment_flow_control_window(1 << 20)
            c.flush()
            a = c.answer(sid)
            assert (got + a.body == data[:cut], a.ended) == (True, False)
            assert a.reset == h2.errors.ErrorCodes.INTERNAL_ERROR
            b = c.answer(c.get("/"))
        deadline = time.monotonic() + 5  # logged as the reset is sent
        while not srv.errors():
            assert time.monotonic() < deadline, "the shrink was not logged"
            time.sleep(0.02)
        assert [r.getMessage() for r in srv.errors()] == [
            "File response incomplete: the file ended before the bytes promised (it shrank "
            "while being sent); stream reset"]
    assert (b.status, b.body, b.ended) == (200, b"hello", True)


# ---- backpressure and disconnects --------------------------------------------------------------


@pytest.mark.rule("h2-backpressure")
def test_send_waits_for_the_peers_window(serve):
    progress: list = []
    chunk = b"z" * 65536

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(4):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            progress.append(i)
        await send({"type": "http.response.body", "body": b""})
        progress.append("end")

    with serve(app) as srv:
        with H2Client.open(srv.port) as c:
            sid = c.get("/")
            got = b""
            # read without acknowledging: the server can send 65535 bytes, no more
            deadline = time.monotonic() + 0.8
            while time.monotonic() < deadline:
                try:
                    for e in c.events_until(lambda e: isinstance(e, h2.events.DataReceived),
                                            timeout=max(0.05, deadline - time.monotonic()),
                                            ack_data=False):
                        if isinstance(e, h2.events.DataReceived):
                            got += e.data
                except AssertionError:
                    break
            assert len(got) == 65535
            assert progress == [0] or progress == []  # the second send() waits
            c.conn.acknowledge_received_data(len(got), sid)
            c.conn.increment_flow_control_window(4 * 65536 - 65535 + 10, sid)
            c.conn.increment_flow_control_window(4 * 65536 - 65535 + 10)
            c.flush()
            a = c.answer(sid)
    assert len(got + a.body) == 4 * 65536 and a.ended
    assert progress == [0, 1, 2, 3, "end"]


@pytest.mark.rule("h2-backpressure")
@pytest.mark.parametrize("streams", [3, 20])
def test_concurrent_64k_responses_with_a_large_window_all_complete(serve, streams):
    # Regression: writable() pumped nghttp2's output into the transport's buffer without
    # writing it, so with a window that never closes, the third 64 KiB response on a connection
    # stopped at 32768 bytes for ever.
    body = bytes(range(256)) * 256   # 64 KiB

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    with serve(app) as srv:
        with H2Client.open(srv.port, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE:
                                               1 << 30}) as c:
            c.conn.increment_flow_control_window((1 << 30) - 65535)
            c.flush()
            sids = [c.conn.get_next_available_stream_id() + 2 * i for i in range(streams)]
            for sid in sids:
                c.conn.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"http"),
                                          (b":path", b"/64k"), (b":authority", b"testserver")],
                                    end_stream=True)
            c.flush()
            got = {sid: b"" for sid in sids}
            ended: set = set()

            def done(e) -> bool:
                if isinstance(e, h2.events.DataReceived):
                    got[e.stream_id] += e.data
                elif isinstance(e, h2.events.StreamEnded):
                    ended.add(e.stream_id)
                elif isinstance(e, h2.events.StreamReset):
                    raise AssertionError(f"stream {e.stream_id} reset")
                return len(ended) == len(sids)

            c.events_until(done, timeout=IO)
    assert ended == set(sids)
    assert {sid: got[sid] == body for sid in sids} == {sid: True for sid in sids}


@pytest.mark.rule("h2-backpressure")
@pytest.mark.parametrize("end", ["complete", "abort"])
def test_bodies_by_reference_interleaved_to_a_slow_reader(serve, end):
    # Each DATA frame of a final body held by reference goes to the transport as a slice of the
    # app's bytes object (sk_transport_send_slice), up to 8 queued behind one another; past
    # that, or under 4 KiB, a frame is copied. Twenty streams' 100,000-byte bodies in frames of
    # at most 4200 bytes (each stream's window, reopened by exactly what arrives: 84,000 bytes
    # in flight, over the 64 KiB the server queues, so more than 8 frames wait at times), to a
    # client that reads slowly through small socket buffers: every body arrives exact (no frame
    # lost, repeated or out of order, whichever way each went), and once the connection is gone
    # (answered, or reset by the client mid-way) the server holds no reference to any body.
    bodies = [os.urandom(100_000) for _ in range(20)]
    before = [sys.getrefcount(b) for b in bodies]

    async def app(scope, receive, send):
        if not scope["path"].startswith("/s/"):
            await hello(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": bodies[int(scope["path"][3:])]})

    with serve(app) as srv:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        sock.connect(("127.0.0.1", srv.port))
        with H2Client(sock, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 4200}) as c:
            c.conn.increment_flow_control_window((1 << 30) - 65535)
            c.flush()
            assert c.answer(c.get("/warm")).body == b"hello"
            shrink_server_send_buffer(c, 16 * 1024)
            sids = [c.get(f"/s/{k}") for k in range(len(bodies))]
            got = {sid: b"" for sid in sids}
            ended: set = set()

            def done(e) -> bool:
                if isinstance(e, h2.events.DataReceived):
                    assert len(e.data) <= 4200
                    got[e.stream_id] += e.data
                    if e.stream_id not in ended and len(got[e.stream_id]) < len(bodies[0]):
                        c.conn.increment_flow_control_window(len(e.data), stream_id=e.stream_id)
                        c.flush()
                    time.sleep(0.0002)  # a slow reader: the server's output backs up
                elif isinstance(e, h2.events.StreamEnded):
                    ended.add(e.stream_id)
                elif isinstance(e, h2.events.StreamReset):
                    raise AssertionError(f"stream {e.stream_id} reset")
                if end == "abort":
                    return sum(map(len, got.values())) >= 1_000_000
                return len(ended) == len(sids)

            c.events_until(done, timeout=30.0, ack_data=False)
            if end == "abort":
                c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        if end == "complete":
            assert ended == set(sids)
            assert [got[sid] == b for sid, b in zip(sids, bodies)] == [True] * len(bodies)
        deadline = time.monotonic() + IO
        while [sys.getrefcount(b) for b in bodies] != before and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [sys.getrefcount(b) for b in bodies] == before
        assert h2_get(srv.port).body == b"hello"
        assert srv.errors() == []


@pytest.mark.rule("h2-disconnect")
def test_rst_stream_gives_disconnect_and_client_disconnected(serve):
    events: list = []
    started = threading.Event()

    async def app(scope, receive, send):
        if scope["path"] == "/other":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"other"})
            return
        started.set()
        events.append(await receive())   # the (empty, unfinished) body or the disconnect
        if events[-1]["type"] == "http.request":
            events.append(await receive())
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"x"})
        except Exception as exc:
            events.append(type(exc).__name__)

    with serve(app) as srv:
        with H2Client.open(srv.port) as c:
            sid = c.request([(":method", "POST"), (":scheme", "http"), (":path", "/"),
                             (":authority", "t")], end=False)
            assert started.wait(IO)
            c.conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
            c.flush()
            b = c.answer(c.get("/other"))
            deadline = time.monotonic() + IO
            while len(events) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
    assert (b.status, b.body) == (200, b"other")
    assert events[-2:] == [{"type": "http.disconnect"}, "ClientDisconnected"] or \
        events == [{"type": "http.disconnect"}, "ClientDisconnected"]


@pytest.mark.rule("h2-disconnect")
def test_connection_loss_disconnects_every_stream(serve):
    got: list = []
    started = threading.Semaphore(0)

    async def app(scope, receive, send):
        started.release()
        got.append((scope["path"], await receive()))

    with serve(app) as srv:
        c = H2Client.open(srv.port)
        for p in ("/a", "/b"):
            c.request([(":method", "GET"), (":scheme", "http"), (":path", p),
                       (":authority", "t")], end=False)
        assert started.acquire(timeout=IO) and started.acquire(timeout=IO)
        c.close()
        deadline = time.monotonic() + IO
        while len(got) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert sorted(got, key=lambda x: x[0]) == [("/a", {"type": "http.disconnect"}),
                                               ("/b", {"type": "http.disconnect"})]


@pytest.mark.rule("h2-disconnect")
@pytest.mark.parametrize("trailers", [True, False])
def test_connection_error_in_the_read_that_opened_the_stream(serve, trailers):
    """One read holds a request's HEADERS (its body still open) and a connection error (a field
    block HPACK cannot decode): GOAWAY COMPRESSION_ERROR naming the stream, and the app, started
    for it, finds the wire gone as it sends more content than the window takes (found by an
    attack: with trailers announced, its send() waited for good, a request in flight until the
    graceful-shutdown timeout; with --limit-concurrency 1, every later request got 503)."""
    import hpack

    outcome: list = []
    done = threading.Event()

    async def app(scope, receive, send):
        try:
            await send({"type": "http.response.start", "status": 200, "headers": [],
                        "trailers": trailers})
            await send({"type": "http.response.body", "body": b"x" * 100_000,
                        "more_body": False})
            if trailers:
                await send({"type": "http.response.trailers", "headers": [(b"x-t", b"1")]})
            outcome.append("sent")
        except Exception as exc:
            outcome.append(type(exc).__name__)
        finally:
            done.set()

    head = hyperframe.frame.HeadersFrame(1, data=hpack.Encoder().encode(
        [(":method", "POST"), (":scheme", "http"), (":path", "/"), (":authority", "t")]),
        flags=["END_HEADERS"])
    garbage = hyperframe.frame.HeadersFrame(3, data=b"\xff\xff\xff\xff\xff",
                                            flags=["END_HEADERS", "END_STREAM"])
    with serve(app) as srv:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=IO) as sock:
            sock.sendall(PREFACE + hyperframe.frame.SettingsFrame(0).serialize() +
                         head.serialize() + garbage.serialize())
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        assert done.wait(IO), "the app's send() never returned nor raised"
        goaways = [f for f in raw_frames(data) if isinstance(f, hyperframe.frame.GoAwayFrame)]
        assert [(g.last_stream_id, g.error_code) for g in goaways] == [
            (3, h2.errors.ErrorCodes.COMPRESSION_ERROR)]
    # the final body of a response without trailers is accepted as queued (the wire went after)
    assert outcome == (["ClientDisconnected"] if trailers else ["sent"])


@pytest.mark.rule("h2-app-error")
def test_app_error_before_and_after_the_head(serve):
    async def app(scope, receive, send):
        if scope["path"] == "/after":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"part", "more_body": True})
        raise RuntimeError("boom")

    with serve(app, date_header=False) as srv:
        with H2Client.open(srv.port) as c:
            before = c.answer(c.get("/before"))
            after = c.answer(c.get("/after"))
            again = c.answer(c.get("/before"))
        assert len(srv.errors()) == 3
    assert (before.status, before.body, before.ended) == (500, b"Internal Server Error", True)
    assert before.headers == [(b"content-type", b"text/plain; charset=utf-8"),
                              (b"content-length", b"21"), (b"server", b"skirr")]
    assert (after.status, after.body, after.reset) == (200, b"part", h2.errors.ErrorCodes.INTERNAL_ERROR)
    assert again.status == 500


# ---- concurrency, GOAWAY -----------------------------------------------------------------------


def held_until(release: threading.Event, calls: list, swallow: bool = False):
    """An app that records each path in `calls`, waits for `release`, then answers 200 "ok";
    swallow: an exception from send() (its stream was reset) ends the call quietly."""

    async def app(scope, receive, send):
        calls.append(scope["path"])
        while not release.is_set():
            await asyncio.sleep(0.01)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
        except Exception:
            if not swallow:
                raise

    return app


@pytest.mark.rule("h2-concurrent-streams")
def test_streams_over_the_limit_refused_reset_ones_still_count(serve):
    release = threading.Event()
    calls: list = []
    app = held_until(release, calls, swallow=True)

    with serve(app, http2_max_concurrent_streams=2) as srv:
        with H2Client.open(srv.port) as c:
            c.events_until(lambda e: isinstance(e, h2.events.SettingsAcknowledged))
            s1 = c.get("/1")
            s2 = c.get("/2")
            deadline = time.monotonic() + IO
            while len(calls) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            # the client resets both: their apps still run, so they still count
            c.conn.reset_stream(s1)
            c.conn.reset_stream(s2)
            c.flush()
            time.sleep(0.1)
            s3 = c.get("/3")
            a3 = c.answer(s3)
            release.set()
            time.sleep(0.2)
            s4 = c.get("/4")
            a4 = c.answer(s4)
    assert a3.reset == h2.errors.ErrorCodes.REFUSED_STREAM and a3.status is None
    assert (a4.status, a4.body) == (200, b"ok")
    assert calls == ["/1", "/2", "/4"]


@pytest.mark.rule("h2-concurrent-streams")
def test_streams_over_the_acknowledged_limit_end_the_connection(serve):
    """A client that has acknowledged the limit (2) and still opens a third stream while two are
    open breaks RFC 9113 §5.1.2's MUST NOT: nghttp2 treats it as a connection error (which
    §5.4.1 allows in place of the stream error), GOAWAY PROTOCOL_ERROR naming the last stream
    it took, and the connection closes; the two apps started lose their streams
    (http.disconnect), and the third never reaches an app."""
    import hpack

    got: list = []
    ended = threading.Semaphore(0)

    async def app(scope, receive, send):
        if scope["path"] == "/":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        got.append((scope["path"], (await receive())["type"]))
        if got[-1][1] == "http.request":
            got.append((scope["path"], (await receive())["type"]))
        ended.release()

    enc = hpack.Encoder()

    def head(sid: int) -> bytes:
        fields = [(":method", "POST"), (":scheme", "http"), (":path", f"/{sid}"),
                  (":authority", "t")]
        return hyperframe.frame.HeadersFrame(sid, data=enc.encode(fields),
                                             flags=["END_HEADERS"]).serialize()

    with serve(app, http2_max_concurrent_streams=2) as srv:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=IO) as sock:
            sock.sendall(PREFACE + hyperframe.frame.SettingsFrame(0).serialize())
            data = b""
            while not any(isinstance(f, hyperframe.frame.SettingsFrame) and "ACK" not in f.flags
                          for f in raw_frames(data)):
                data += sock.recv(65536)
            ack = hyperframe.frame.SettingsFrame(0, flags=["ACK"]).serialize()
            sock.sendall(ack + head(1) + head(3) + head(5))
            while chunk := sock.recv(65536):
                data += chunk
        assert ended.acquire(timeout=IO) and ended.acquire(timeout=IO)
        frames = raw_frames(data)
        goaways = [(f.last_stream_id, f.error_code) for f in frames
                   if isinstance(f, hyperframe.frame.GoAwayFrame)]
        assert goaways == [(3, h2.errors.ErrorCodes.PROTOCOL_ERROR)], frames
        assert [f for f in frames if f.stream_id != 0] == [], frames
        assert h2_get(srv.port).body == b"ok"  # another connection is served
    assert sorted(got) == [("/1", "http.disconnect"),
                                                     ("/3", "http.disconnect")]


@pytest.mark.rule("h2-concurrent-streams")
def test_work_after_a_complete_response_holds_no_stream(serve):
    """An app call that runs on after its whole response was sent (Starlette's BackgroundTasks)
    stops counting once its stream has closed: a client that never has more than the limit
    open is never refused (RFC 9113 §5.1.2), however long that work lasts."""
    release = threading.Event()
    calls: list = []
    after: list = []

    async def app(scope, receive, send):
        calls.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        while not release.is_set():  # the work after the response
            await asyncio.sleep(0.01)
        after.append(scope["path"])

    with serve(app, http2_max_concurrent_streams=2) as srv:
        with H2Client.open(srv.port) as c:
            c.events_until(lambda e: isinstance(e, h2.events.SettingsAcknowledged))
            # six requests one after another, every app call still running: the third was
            # refused when the first two still counted (answer() reads one stream's events,
            # so the streams are not interleaved)
            answers = [c.answer(c.get(f"/{n}")) for n in range(1, 7)]
            release.set()
            deadline = time.monotonic() + IO
            while len(after) < 6 and time.monotonic() < deadline:
                time.sleep(0.01)
    assert [(a.status, a.body, a.reset) for a in answers] == [(200, b"ok", None)] * 6
    assert calls == [f"/{n}" for n in range(1, 7)]
    assert sorted(after) == sorted(calls)


@pytest.mark.rule("h2-limit-concurrency")
def test_limit_concurrency_counts_a_burst_in_one_write(serve):
    release = threading.Event()
    calls: list = []
    app = held_until(release, calls)

    with serve(app, limit_concurrency=2) as srv:
        with H2Client.open(srv.port) as c:
            c.events_until(lambda e: isinstance(e, h2.events.SettingsAcknowledged))
            sids = list(range(1, 21, 2))  # ten streams, the last a HEAD, in one write
            for sid in sids:
                method = b"HEAD" if sid == 19 else b"GET"
                c.conn.send_headers(sid, [(b":method", method), (b":scheme", b"http"),
                                          (b":path", b"/%d" % sid),
                                          (b":authority", b"testserver")], end_stream=True)
            c.flush()
            seen: dict = {}  # stream id -> [status, content-length, body, ended]

            def until_ended(want):
                def pred(e):
                    sid = getattr(e, "stream_id", None)
                    r = seen.setdefault(sid, [None, None, b"", False])
                    if isinstance(e, h2.events.ResponseReceived):
                        hd = dict(e.headers)
                        r[0], r[1] = int(hd[b":status"]), hd.get(b"content-length")
                    elif isinstance(e, h2.events.DataReceived):
                        r[2] += e.data
                    elif isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)):
                        r[3] = isinstance(e, h2.events.StreamEnded)
                    return all(seen.get(s, [0, 0, 0, False])[3] for s in want)
                c.events_until(pred)

            until_ended(sids[2:])
            release.set()
            until_ended(sids)
    assert {sid: tuple(seen[sid]) for sid in sids} == {
        1: (200, b"2", b"ok", True), 3: (200, b"2", b"ok", True),
        **{sid: (503, b"19", b"Service Unavailable", True) for sid in sids[2:-1]},
        19: (503, b"19", b"", True)}
    assert sorted(calls) == ["/1", "/3"]


@pytest.mark.rule("h2-limit-request-body")
def test_limit_request_body_413_or_reset_per_stream(serve):
    calls: list = []
    got: dict = {}
    first = threading.Event()

    async def app(scope, receive, send):
        path = scope["path"]
        calls.append(path)
        got[path] = []
        if path in ("/start-only", "/started"):
            await send({"type": "http.response.start", "status": 200, "headers": []})
        if path == "/started":  # the head goes out with its first piece of content
            await send({"type": "http.response.body", "body": b"x", "more_body": True})
        body = b""
        while True:
            m = await receive()
            got[path].append((m["type"], len(m.get("body", b"")), m.get("more_body")))
            body += m.get("body", b"")
            first.set()
            if m["type"] == "http.disconnect" or not m.get("more_body"):
                break
        if m["type"] == "http.disconnect":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"%d" % len(body)})

    def post(c, path, extra=(), body=b"", end=True):
        return c.request([(":method", "POST"), (":scheme", "http"), (":path", path),
                          (":authority", "testserver"), *extra], body, end=end)

    with serve(app, limit_request_body=1000) as srv:
        with H2Client.open(srv.port) as c:
            c.events_until(lambda e: isinstance(e, h2.events.SettingsAcknowledged))
            declared = c.answer(post(c, "/declared", [("content-length", "5000")], b"a" * 5000))
            exact = c.answer(post(c, "/exact", body=b"a" * 1000))
            sid = post(c, "/reading", body=b"a" * 500, end=False)
            assert first.wait(IO)
            c.conn.send_data(sid, b"a" * 4600, end_stream=True)
            c.flush()
            reading = c.answer(sid)
            answers = {}
            for path in ("/start-only", "/started"):
                first.clear()
                sid = post(c, path, body=b"a" * 500, end=False)
                assert first.wait(IO)
                c.conn.send_data(sid, b"a" * 4600, end_stream=True)
                c.flush()
                answers[path] = c.answer(sid)
            after = c.answer(c.get("/after"))
    assert (declared.status, declared.body, declared.ended) == (413, b"Content Too Large", True)
    assert (exact.status, exact.body) == (200, b"1000")
    assert (reading.status, reading.body, reading.ended) == (413, b"Content Too Large", True)
    assert got["/reading"] == [("http.request", 500, True), ("http.disconnect", 0, None)]
    only, started = answers["/start-only"], answers["/started"]
    assert (only.status, only.body, only.ended) == (413, b"Content Too Large", True)
    assert (started.status, started.body, started.ended, started.reset) == (
        200, b"x", False, h2.errors.ErrorCodes.INTERNAL_ERROR)
    for path in ("/reading", "/start-only", "/started"):
        assert got[path] == [("http.request", 500, True), ("http.disconnect", 0, None)]
    assert (after.status, after.body) == (200, b"0")
    assert calls == ["/exact", "/reading", "/start-only", "/started", "/after"]


def read_frames(sock, want, data: bytes = b"") -> tuple:
    """Reads sock until want(frames) holds for the frames parsed from all bytes so far, or EOF:
    (frames, bytes) (pass the bytes back to go on reading)."""
    frames = raw_frames(data)
    while not want(frames):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
        frames = raw_frames(data)
    return frames, data


def ping_ack(ping) -> "hyperframe.frame.PingFrame":
    """The PING ACK answering ping (RFC 9113 §6.7: the same opaque data)."""
    ack = hyperframe.frame.PingFrame(0)
    ack.flags.add("ACK")
    ack.opaque_data = ping.opaque_data
    return ack


@pytest.mark.rule("h2-shutdown-goaway")
def test_shutdown_goaway_then_inflight_stream_finishes(serve):
    """Raw frames after the request (the h2 library treats any GOAWAY as the end): GOAWAY
    2^31-1 and a PING, the PING's ACK from the client, GOAWAY with the last stream id, the
    in-flight response, then the close."""
    release = threading.Event()
    started = threading.Event()

    async def app(scope, receive, send):
        started.set()
        while not release.is_set():
            await asyncio.sleep(0.01)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})

    with serve(app) as srv:
        c = H2Client.open(srv.port)
        sid = c.get("/")
        c.events_until(lambda e: isinstance(e, h2.events.SettingsAcknowledged))
        assert started.wait(IO)
        threading.Thread(target=srv.server.request_shutdown, daemon=True).start()
        frames, _ = read_frames(c.sock, lambda fs: len(fs) >= 2)
        kinds = [type(f).__name__ for f in frames]
        assert kinds == ["PingFrame", "GoAwayFrame"]   # nghttp2 sends a PING first
        assert (frames[1].last_stream_id, frames[1].error_code) == (2**31 - 1, 0)
        ack = ping_ack(frames[0])
        c.send_raw(ack.serialize())
        frames, data = read_frames(c.sock, lambda fs: len(fs) >= 1)
        assert [(type(f).__name__, f.last_stream_id, f.error_code) for f in frames] == [
            ("GoAwayFrame", sid, 0)]
        release.set()
        frames, data = read_frames(c.sock, lambda fs: False, data)
        c.close()
        srv.thread.join(IO)   # the shutdown ends by itself (a second request would force it)
        assert not srv.thread.is_alive()
    kinds = [(type(f).__name__, f.stream_id) for f in frames[1:]]
    assert kinds == [("HeadersFrame", sid), ("DataFrame", sid)]
    assert frames[-1].data == b"done" and "END_STREAM" in frames[-1].flags


@pytest.mark.rule("h2-goaway-last-stream-id")
def test_shutdown_final_goaway_names_a_stream_opened_with_the_ping_ack(serve):
    """The client's PING ACK and a new request in one write (fuzz/regressions/h2/
    final-goaway-last-id-below-a-stream-of-the-same-read): nghttp2 accepts streams until the final
    GOAWAY is sent, so its last stream id is the new stream's, which is answered; no frame for a
    stream above it, and no later GOAWAY raises it."""
    release = threading.Event()

    async def app(scope, receive, send):
        while scope["path"] == "/slow" and not release.is_set():
            await asyncio.sleep(0.01)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": scope["path"].encode()})

    with serve(app) as srv:
        c = H2Client.open(srv.port)
        sid = c.get("/slow")
        c.events_until(lambda e: isinstance(e, h2.events.SettingsAcknowledged))
        threading.Thread(target=srv.server.request_shutdown, daemon=True).start()
        frames, _ = read_frames(c.sock, lambda fs: len(fs) >= 2)
        assert [type(f).__name__ for f in frames] == ["PingFrame", "GoAwayFrame"]
        ack = ping_ack(frames[0])
        late = sid + 2
        c.conn.send_headers(late, [(":method", "GET"), (":path", "/late"), (":scheme", "http"),
                                   (":authority", "testserver")], end_stream=True)
        c.send_raw(ack.serialize() + c.conn.data_to_send())
        frames, data = read_frames(
            c.sock, lambda fs: any(isinstance(f, hyperframe.frame.GoAwayFrame) for f in fs))
        release.set()
        frames, data = read_frames(c.sock, lambda fs: False, data)
        c.close()
        srv.thread.join(IO)
        assert not srv.thread.is_alive()
    goaways = [f for f in frames if isinstance(f, hyperframe.frame.GoAwayFrame)]
    assert [(g.last_stream_id, g.error_code) for g in goaways] == [(late, 0)]
    answered = {f.stream_id: f.data for f in frames if isinstance(f, hyperframe.frame.DataFrame)}
    assert answered == {sid: b"/slow", late: b"/late"}


@pytest.mark.rule("h2-idle-goaway")
def test_idle_connection_gets_goaway(serve):
    with serve(hello, timeout_keep_alive=0.5) as srv:
        with H2Client.open(srv.port) as c:
            a = c.answer(c.get("/"))
            t0 = time.monotonic()
            g = c.goaway(timeout=IO)
            waited = time.monotonic() - t0
            rest = c.wait_closed()
    assert a.status == 200
    assert (g.error_code, g.last_stream_id) == (h2.errors.ErrorCodes.NO_ERROR, 1)
    assert 0.3 < waited < 3.0
    assert type(rest[-1]).__name__ == "ConnectionClosed"


@pytest.mark.rule("h2-idle-goaway")
def test_idle_counts_from_the_last_stream(serve):
    # a request every 0.3 s with --timeout-keep-alive 0.5: each answered stream restarts the
    # idle deadline, however quickly it was answered (3.12+ starts apps eagerly, so a stream can
    # open and end within one read)
    with serve(hello, timeout_keep_alive=0.5) as srv:
        with H2Client.open(srv.port) as c:
            answers = []
            for _ in range(5):
                answers.append(c.answer(c.get("/")))
                time.sleep(0.3)
            t0 = time.monotonic()
            g = c.goaway(timeout=IO)
            waited = time.monotonic() - t0
    assert [(a.status, a.body, a.goaway, a.closed) for a in answers] == [
        (200, b"hello", None, False)] * 5
    assert (g.error_code, g.last_stream_id) == (h2.errors.ErrorCodes.NO_ERROR, 9)
    assert waited < 3.0


# ---- the flags ---------------------------------------------------------------------------------


@pytest.mark.rule("h2-cli-flags")
@pytest.mark.parametrize("args, line", [
    (["--http", "3"], "argument --http: invalid choice: '3' (choose from 'auto', '1', '2')"),
    (["--http2-max-concurrent-streams", "0"],
     "argument --http2-max-concurrent-streams: invalid integer: '0' (not in 1..2147483647)"),
    (["--http2-max-headers-size", "x"], "argument --http2-max-headers-size: invalid integer: 'x'"),
    (["--http2-initial-stream-window-size", "2147483648"],
     "argument --http2-initial-stream-window-size: invalid integer: '2147483648' "
     "(not in 1..2147483647)"),
    (["--http2-max-frame-size", "16383"],
     "argument --http2-max-frame-size: invalid integer: '16383' (not in 16384..16777215)"),
    (["--http2-initial-connection-window-size", "65534"],
     "argument --http2-initial-connection-window-size: invalid integer: '65534' "
     "(not in 65535..2147483647)"),
], ids=["http", "streams", "headers", "window", "frame", "connection-window"])
def test_bad_flag_values(tmp_path, args, line):
    import _proc
    status, stderr = _proc.run_to_exit(["basic:app", *args], tmp_path)
    assert (status, stderr.splitlines()[-1]) == (2, f"skirr: error: {line}")


@pytest.mark.rule("h2-cli-flags", "h2-settings")
@pytest.mark.parametrize("connection, increment", [
    (None, 4 * 70000 - 65535), (["200000"], 200000 - 65535), (["65535"], None)],
    ids=["four-streams", "200000", "65535"])
def test_flags_reach_the_settings(tmp_path, connection, increment):
    """The flags' values in the server's SETTINGS; the connection's window raised from 65,535
    by a WINDOW_UPDATE on stream 0 to --http2-initial-connection-window-size, by default four
    stream windows; at 65,535 none is sent (a PING answered shows nothing came before it)."""
    import _proc
    port = _proc.free_port()
    args = ["basic:app", "--port", str(port), "--http2-max-concurrent-streams", "7",
            "--http2-max-headers-size", "9000", "--http2-initial-stream-window-size", "70000",
            "--http2-max-frame-size", "32768"]
    if connection is not None:
        args += ["--http2-initial-connection-window-size", *connection]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        with H2Client.open(port) as c:
            c.conn.ping(b"12345678")
            c.flush()
            evs = c.events_until(lambda e: isinstance(e, h2.events.PingAckReceived))
        proc.stop()
    changed = [e for e in evs if isinstance(e, h2.events.RemoteSettingsChanged)]
    got = {int(k): v.new_value for k, v in changed[0].changed_settings.items()}
    S = h2.settings.SettingCodes
    assert got == {S.MAX_CONCURRENT_STREAMS: 7, S.INITIAL_WINDOW_SIZE: 70000,
                   S.MAX_FRAME_SIZE: 32768, S.MAX_HEADER_LIST_SIZE: 9000, S.ENABLE_PUSH: 0}
    updates = [(e.stream_id, e.delta) for e in evs if isinstance(e, h2.events.WindowUpdated)]
    assert updates == ([] if increment is None else [(0, increment)])


# ---- timeouts ----------------------------------------------------------------------------------


@pytest.mark.rule("h2-head-timeout")
def test_unfinished_header_block_times_out(serve):
    import hpack
    app = Recorder()
    with serve(app, timeout_request_head=0.5) as srv:
        with H2Client.open(srv.port) as c:
            c.events_until(lambda e: isinstance(e, h2.events.SettingsAcknowledged))
            block = hpack.Encoder().encode([(b":method", b"GET"), (b":scheme", b"http"),
                                            (b":path", b"/"), (b":authority", b"t")])
            f = hyperframe.frame.HeadersFrame(1)
            f.data = block
            f.flags.add("END_STREAM")      # no END_HEADERS: a CONTINUATION must follow
            c.send_raw(f.serialize())
            t0 = time.monotonic()
            data = b""
            while chunk := c.sock.recv(65536):
                data += chunk
            waited = time.monotonic() - t0
    frames = raw_frames(data)
    assert [(type(f).__name__, getattr(f, "error_code", None)) for f in frames] == [
        ("GoAwayFrame", 0)]
    assert 0.3 < waited < 3.0
    assert app.scopes == []


def _body_stall_app(events: dict, start_first: bool):
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        got = events.setdefault(scope["path"], [])
        if start_first:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"part", "more_body": True})
        while True:
            m = await receive()
            got.append(m)
            if m["type"] == "http.disconnect":
                return
            if not m.get("more_body"):
                break
        if not start_first:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})
    return app


POST = [(":method", "POST"), (":scheme", "http"), (":authority", "t")]


@pytest.mark.rule("h2-body-timeout")
def test_stalled_request_body_gets_408(serve):
    events: dict = {}
    with serve(_body_stall_app(events, False), timeout_request_body=0.5) as srv:
        with H2Client.open(srv.port) as c:
            sid = c.request(POST + [(":path", "/slow")], body=b"abc", end=False)
            t0 = time.monotonic()
            a = c.answer(sid)
            waited = time.monotonic() - t0
            b = c.answer(c.request(POST + [(":path", "/next")], body=b"xyz"))
    assert (a.status, a.body, a.ended, a.goaway, a.closed) == (408, b"Request Timeout", True, None,
                                                                False)
    assert 0.3 < waited < 3.0
    assert (b.status, b.body, b.goaway) == (200, b"done", None)
    assert events["/slow"] == [{"type": "http.request", "body": b"abc", "more_body": True},
                               {"type": "http.disconnect"}]
    assert events["/next"] == [{"type": "http.request", "body": b"xyz", "more_body": False}]


@pytest.mark.rule("h2-body-timeout")
def test_stalled_request_body_resets_a_begun_response(serve):
    events: dict = {}
    with serve(_body_stall_app(events, True), timeout_request_body=0.5) as srv:
        with H2Client.open(srv.port) as c:
            sid = c.request(POST + [(":path", "/slow")], body=b"abc", end=False)
            t0 = time.monotonic()
            a = c.answer(sid)
            waited = time.monotonic() - t0
            b = c.answer(c.get("/next"))
    assert (a.status, a.body, a.ended, a.reset, a.closed) == (
        200, b"part", False, h2.errors.ErrorCodes.INTERNAL_ERROR, False)
    assert 0.3 < waited < 3.0
    assert (b.status, b.body, b.goaway) == (200, b"part" + b"done", None)
    assert events["/slow"] == [{"type": "http.request", "body": b"abc", "more_body": True},
                               {"type": "http.disconnect"}]


@pytest.mark.rule("h2-body-timeout")
@pytest.mark.parametrize("body", [b"abc", None], ids=["post-part", "get-no-end-stream"])
def test_answered_stream_whose_request_stops_is_reset(serve, body):
    """The app answers at once without reading (a POST whose body stopped after `abc`, or a GET
    whose HEADERS lacked END_STREAM) and the client then sends nothing: the response arrives
    whole, then RST_STREAM NO_ERROR within --timeout-request-body (0.5 s) plus the timer's tick,
    and the idle connection then gets GOAWAY NO_ERROR after --timeout-keep-alive (the stream held
    the connection open for good: no timeout applied)."""
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"answered"})

    method = [(":method", "POST" if body is not None else "GET"), (":scheme", "http"),
              (":authority", "t"), (":path", "/")]
    with serve(app, timeout_request_body=0.5, timeout_keep_alive=1.0) as srv:
        with H2Client.open(srv.port) as c:
            sid = c.request(method, body=body or b"", end=False)
            evs = c.events_until(lambda e: isinstance(e, h2.events.StreamEnded), IO)
            t0 = time.monotonic()
            rst = c.events_until(lambda e: isinstance(e, h2.events.StreamReset), IO)[-1]
            waited = time.monotonic() - t0
            g = c.goaway(timeout=IO)
    got = [(type(e).__name__, getattr(e, "data", None)) for e in evs
           if getattr(e, "stream_id", None) == sid]
    assert got == [("ResponseReceived", None), ("DataReceived", b"answered"),
                   ("StreamEnded", None)]
    assert isinstance(rst, h2.events.StreamReset), rst
    assert (rst.stream_id, rst.error_code) == (sid, h2.errors.ErrorCodes.NO_ERROR)
    assert waited < 0.5 + 2.5, waited
    assert g.error_code == h2.errors.ErrorCodes.NO_ERROR


def held_reader(release: threading.Event, seen: dict):
    """An app that, for a path starting /hold, reads nothing until `release` is set; then (and
    at once for other paths) reads the whole body, records its length in seen[path] ("disconnect"
    for http.disconnect) and answers it as digits."""
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        if scope["path"].startswith("/hold"):
            while not release.is_set():
                await asyncio.sleep(0.02)
        body = b""
        while True:
            m = await receive()
            if m["type"] == "http.disconnect":
                seen[scope["path"]] = "disconnect"
                return
            body += m.get("body", b"")
            if not m.get("more_body"):
                break
        seen[scope["path"]] = len(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"%d" % len(body)})
    return app


@pytest.mark.rule("h2-body-timeout")
def test_body_timeout_waits_while_the_connection_window_is_closed(serve):
    """Stream 1's app does not read yet and its body fills the connection's window (set to the
    stream's, --http2-initial-connection-window-size); stream 3 then cannot send a byte
    (RFC 9113 §6.9.1). Past --timeout-request-body (0.5 s) stream 3 is not answered 408: once
    stream 1's app reads, the window reopens and stream 3's body arrives and is echoed."""
    release = threading.Event()
    seen: dict = {}
    app = held_reader(release, seen)
    with serve(app, timeout_request_body=0.5,
               http2_initial_connection_window_size=1048576) as srv:
        with H2Client.open(srv.port) as c:
            hold = c.request(POST + [(":path", "/hold")], end=False)

            def fill() -> None:  # stream 1 takes whatever the connection's window allows
                while c.conn.local_flow_control_window(hold) > 0:
                    n = min(c.conn.local_flow_control_window(hold),
                            c.conn.max_outbound_frame_size)
                    c.conn.send_data(hold, b"h" * n)
                c.flush()

            fill()
            assert c.conn.outbound_flow_control_window == 0
            echo = c.request(POST + [(":path", "/echo")], end=False)
            updates = []
            end = time.monotonic() + 1.5  # three body timeouts: stream 3 can send nothing
            while time.monotonic() < end:
                try:
                    updates += c.events_until(lambda e: isinstance(e, h2.events.WindowUpdated),
                                              0.05)
                except AssertionError:
                    pass
                fill()
            release.set()
            c.events_until(lambda e: isinstance(e, h2.events.WindowUpdated)
                           and e.stream_id == 0, IO)
            c.conn.send_data(echo, b"e" * 10, end_stream=True)
            c.conn.end_stream(hold)
            c.flush()
            a = c.answer(echo)
    assert (a.status, a.body, a.reset) == (200, b"10", None)  # not 408 Request Timeout
    assert [e for e in updates if getattr(e, "stream_id", None) == echo] == []
    assert seen["/echo"] == 10


@pytest.mark.rule("h2-connection-window")
@pytest.mark.parametrize("holds", [1, 3, 4])
def test_an_app_that_does_not_read_holds_back_only_its_own_upload(serve, holds):
    """`holds` streams whose apps do not read yet each send what the windows let them: a
    stream's 65,536 bytes (the connection's window is four of them, 262,144). Up to three, another
    stream's 10-byte upload arrives at once and is echoed while they still wait, with no
    WINDOW_UPDATE for what they sent; four fill the connection's window exactly (the request
    content buffered on a connection is bounded by it), so the other upload waits until they
    read. Each echoes its whole body once released."""
    release = threading.Event()
    seen: dict = {}
    app = held_reader(release, seen)
    window = 65536
    with serve(app, http2_initial_stream_window_size=window) as srv:
        with H2Client.open(srv.port) as c:
            c.events_until(lambda e: isinstance(e, h2.events.WindowUpdated) and e.stream_id == 0)
            held, sent = [], 0
            for k in range(holds):
                sid = c.request(POST + [(":path", f"/hold{k}")], end=False)
                while (room := min(c.conn.local_flow_control_window(sid),
                                   c.conn.max_outbound_frame_size)) > 0:
                    c.conn.send_data(sid, b"h" * room)
                    sent += room
                held.append(sid)
            c.flush()
            updates: list = []
            assert sent == min(holds, 4) * window
            assert c.conn.outbound_flow_control_window == 4 * window - sent
            echo = c.request(POST + [(":path", "/echo")], end=False)
            if holds < 4:
                c.conn.send_data(echo, b"e" * 10, end_stream=True)
                c.flush()
                a = c.answer(echo, timeout=2.0)
                assert (a.status, a.body, a.reset) == (200, b"10", None)
                assert seen == {"/echo": 10}  # the held apps have read nothing yet
            else:
                assert c.conn.local_flow_control_window(echo) == 0
                end = time.monotonic() + 1.0
                while time.monotonic() < end:  # no WINDOW_UPDATE comes while nothing is read
                    try:
                        updates += c.events_until(
                            lambda e: isinstance(e, h2.events.WindowUpdated), 0.05)
                    except AssertionError:
                        pass
                assert seen == {}
            assert [e for e in updates if isinstance(e, h2.events.WindowUpdated)] == []
            release.set()
            if holds == 4:
                c.events_until(lambda e: isinstance(e, h2.events.WindowUpdated)
                               and e.stream_id == 0)
                c.conn.send_data(echo, b"e" * 10, end_stream=True)
            for sid in held:
                c.conn.end_stream(sid)
            c.flush()
            waiting = set(held + ([echo] if holds == 4 else []))
            bodies = dict.fromkeys(waiting, b"")
            while waiting:  # the answers in any order
                for e in c.events_until(lambda e: isinstance(e, (h2.events.StreamEnded,
                                                                 h2.events.StreamReset))):
                    if isinstance(e, h2.events.DataReceived):
                        bodies[e.stream_id] += e.data
                    if isinstance(e, h2.events.StreamEnded):
                        waiting.discard(e.stream_id)
                    assert not isinstance(e, (h2.events.StreamReset, ConnectionClosed)), e
    assert bodies == {**{sid: b"%d" % window for sid in held},
                      **({echo: b"10"} if holds == 4 else {})}
    assert seen == {**{f"/hold{k}": window for k in range(holds)}, "/echo": 10}


@pytest.mark.rule("h2-connection-window")
@pytest.mark.parametrize("end_stream", [False, True], ids=["partial", "whole"])
def test_a_reset_streams_unread_content_is_dropped_with_its_credit(serve, end_stream):
    """Three streams send a stream window each (65,536 bytes; with END_STREAM or not) to apps
    that do not read yet, then reset (RST_STREAM CANCEL): their content goes back to the
    connection's window (a WINDOW_UPDATE on stream 0 for half the window, 131,072 bytes, at
    once) and is dropped, so each app's first receive() gives http.disconnect, never the
    content. Kept and credited
    back, the content of reset streams was bounded only by streams x stream window (a client
    made skirr hold 90 MiB on one connection of a 4 MiB window: stop 58's attack)."""
    release = threading.Event()
    first: dict = {}

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        while not release.is_set():
            await asyncio.sleep(0.02)
        m = await receive()
        first[scope["path"]] = (m["type"], len(m.get("body", b"")))

    window = 65536
    with serve(app, http2_initial_stream_window_size=window) as srv:
        with H2Client.open(srv.port) as c:
            c.events_until(lambda e: isinstance(e, h2.events.WindowUpdated) and e.stream_id == 0)
            sids = []
            for k in range(3):
                sid = c.request(POST + [(":path", f"/cancel{k}")], end=False)
                for i in range(window // c.conn.max_outbound_frame_size):
                    c.conn.send_data(sid, b"c" * c.conn.max_outbound_frame_size,
                                     end_stream=end_stream and (i + 1) * 16384 == window)
                sids.append(sid)
            c.flush()
            assert c.conn.outbound_flow_control_window == window  # 4 windows less 3
            for sid in sids:
                c.conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
            c.flush()
            updates = [e.delta for e in c.events_until(
                lambda e: isinstance(e, h2.events.WindowUpdated) and e.stream_id == 0)
                if isinstance(e, h2.events.WindowUpdated)]
            # nghttp2 acknowledges in halves of the connection's window: two streams' worth at
            # once, the third's with the next half
            assert updates == [2 * window]
            release.set()
            deadline = time.monotonic() + IO
            while len(first) < 3 and time.monotonic() < deadline:
                time.sleep(0.02)
    assert first == {f"/cancel{k}": ("http.disconnect", 0) for k in range(3)}


@pytest.mark.rule("h2-connection-window")
@pytest.mark.parametrize("holds", [0, 3])
def test_a_reading_stream_uploads_many_windows_beside_held_streams(serve, holds):
    """`holds` streams whose apps do not read yet take three quarters of the connection's window
    (3 x 65,536 of 262,144); another stream then uploads 1,048,576 bytes, sixteen of its own
    windows, and its app reads them all: the connection's WINDOW_UPDATEs give back what that app
    read (nghttp2 alone waits for half the connection's window to be read, which the 65,536 bytes
    left can never make: the upload stalled after its first window), and never what the held
    streams sent (the peer's window stays within 65,536 while they hold it)."""
    release = threading.Event()
    seen: dict = {}
    app = held_reader(release, seen)
    window, total = 65536, 1048576
    with serve(app, http2_initial_stream_window_size=window) as srv:
        with H2Client.open(srv.port) as c:
            c.events_until(lambda e: isinstance(e, h2.events.WindowUpdated) and e.stream_id == 0)
            held = []
            for k in range(holds):
                sid = c.request(POST + [(":path", f"/hold{k}")], end=False)
                for _ in range(window // c.conn.max_outbound_frame_size):
                    c.conn.send_data(sid, b"h" * c.conn.max_outbound_frame_size)
                held.append(sid)
            up = c.request(POST + [(":path", "/up")], end=False)
            sent, most = 0, 0
            while sent < total:
                room = min(c.conn.local_flow_control_window(up), c.conn.max_outbound_frame_size,
                           total - sent)
                if room == 0:
                    c.events_until(lambda e: isinstance(e, h2.events.WindowUpdated), IO)
                    most = max(most, c.conn.outbound_flow_control_window)
                    continue
                c.conn.send_data(up, b"u" * room, end_stream=sent + room == total)
                c.flush()
                sent += room
            a = c.answer(up, timeout=IO)
            assert (a.status, a.body, a.reset) == (200, b"%d" % total, None)
            assert seen == {"/up": total}  # the held apps have read nothing yet
            if holds:
                assert most <= window
            release.set()
            for sid in held:
                c.conn.end_stream(sid)
            c.flush()
            waiting, bodies = set(held), dict.fromkeys(held, b"")
            while waiting:  # the answers in any order
                for e in c.events_until(lambda e: isinstance(e, (h2.events.StreamEnded,
                                                                 h2.events.StreamReset))):
                    assert not isinstance(e, (h2.events.StreamReset, ConnectionClosed)), e
                    if isinstance(e, h2.events.DataReceived):
                        bodies[e.stream_id] += e.data
                    if isinstance(e, h2.events.StreamEnded):
                        waiting.discard(e.stream_id)
            assert bodies == {sid: b"%d" % window for sid in held}
    assert seen == {**{f"/hold{k}": window for k in range(holds)}, "/up": total}


# RFC 9113 §6.5.2's measure (name + value + 32 bytes) of the fields skirr adds to a head of
# serve(date_header=False): :status and server: skirr. The largest section sent is 65,536 bytes,
# or the client's SETTINGS_MAX_HEADER_LIST_SIZE when smaller.
OWN_HEAD = (32 + 7 + 3) + (32 + 6 + 5)
SECTION_MESSAGE = ("response field section over 65,536 bytes or the client's "
                   "SETTINGS_MAX_HEADER_LIST_SIZE, each field counted as its name, value and 32 "
                   "bytes (RFC 9113 §6.5.2), with what skirr adds to it (a head's :status, date, "
                   "server and --header fields, a 103's :status)")
SECTION_CASES = {  # where: (the fields beside the app's one, the app's field's name)
    "head": (OWN_HEAD, b"x-big"),
    "early_hint": (32 + 7 + 3, b"link"),
    "trailers": (32 + 3, b"x-big"),  # x-a (empty) sent before it, in its own message
}


@pytest.mark.rule("h2-response", "h2-trailers", "h2-early-hints")
@pytest.mark.parametrize("client_limit", [None, 1000])
@pytest.mark.parametrize("over", [0, 1])
@pytest.mark.parametrize("where", sorted(SECTION_CASES))
def test_a_field_section_over_the_limit_is_refused_to_the_app(serve, access, where, over,
                                                              client_limit):
    """A head, 103 or trailer section at the limit (65,536 bytes, or the client's
    SETTINGS_MAX_HEADER_LIST_SIZE) goes out exactly; one byte over, the app's send() raises
    RuntimeError and nothing of it is queued: a head becomes the 500 of an app error (the access
    log says 500, not the app's 200), a 103 is left out and the response goes on, trailers fail
    the response (RST_STREAM INTERNAL_ERROR after the head and body, never complete). The
    connection serves the next stream."""
    own, name = SECTION_CASES[where]
    limit = client_limit or 65536
    value = b"v" * (limit - own - (32 + len(name)) + over)
    refused: list = []

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        if scope["path"] == "/next":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"next"})
            return

        async def attempt(message: dict) -> None:
            try:
                await send(message)
            except RuntimeError as e:
                refused.append(str(e))
                if where == "head":
                    raise

        if where == "early_hint":
            await attempt({"type": "http.response.early_hint", "links": [value]})
        head = [(b"x-big", value)] if where == "head" else []
        await attempt({"type": "http.response.start", "status": 200, "headers": head,
                       "trailers": where == "trailers"})
        await send({"type": "http.response.body", "body": b"body"})
        if where == "trailers":  # the section is all the trailers sent so far
            await attempt({"type": "http.response.trailers", "headers": [(b"x-a", b"")],
                           "more_trailers": True})
            await attempt({"type": "http.response.trailers", "headers": [(b"x-big", value)]})

    settings = {h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: client_limit or 1 << 20}
    with serve(app, date_header=False, access_log_format="%(s)s") as srv:
        with H2Client.open(srv.port, settings=settings) as c:
            c.events_until(lambda e: isinstance(e, h2.events.SettingsAcknowledged))
            a = c.answer(c.get("/big"))
            b = c.answer(c.get("/next"))
        assert access.wait(2) == (["500", "200"] if where == "head" and over else ["200", "200"])
        errors = srv.errors()
    message = SECTION_MESSAGE
    if where == "early_hint":
        message = "'http.response.early_hint': " + message
    assert refused == ([message] if over else [])
    assert len(errors) == (1 if where == "head" and over else 0)
    sent = [(name, value)] if not over else []
    if where == "head" and over:
        assert (a.status, a.body, a.ended, a.reset) == (500, b"Internal Server Error", True, None)
    elif where == "head":
        assert (a.status, a.headers, a.body, a.ended) == (
            200, [*sent, (b"server", b"skirr")], b"body", True)
    elif where == "early_hint":
        assert (a.interim, a.status, a.body, a.ended) == (
            [(103, sent)] if sent else [], 200, b"body", True)
    elif over:
        assert (a.status, a.body, a.trailers, a.ended, a.reset) == (
            200, b"body", None, False, h2.errors.ErrorCodes.INTERNAL_ERROR)
    else:
        assert (a.status, a.body, a.trailers, a.ended, a.reset) == (
            200, b"body", [(b"x-a", b""), *sent], True, None)
    assert (b.status, b.body, b.ended, b.goaway) == (200, b"next", True, None)


CSP = "content-security-policy:" + "v" * 9000  # a server's own field over 8,192 (Netty's limit)


@pytest.mark.rule("h2-response")
@pytest.mark.parametrize("client_limit,headers", [(0, []), (100, []), (8192, [CSP])],
                         ids=["limit-0", "limit-100", "limit-8192-own-9000"])
def test_skirr_own_responses_are_not_held_to_the_client_limit(serve, access, client_limit,
                                                               headers):
    """A client whose SETTINGS_MAX_HEADER_LIST_SIZE is below what any head would carry (its own
    choice, or the server's --header fields over it): the app's head is refused to it (send()
    raises) and the app error's 500 goes out anyway, exactly, as do the 500 of an app that
    raises before starting and a refusal (413): the limit is advisory (RFC 9113 §6.5.2) and
    skirr's own response is the answer, never a stream left waiting. The access log says what
    went out."""
    refused: list = []

    async def app(scope, receive, send):
        if scope["path"] == "/raise":
            raise RuntimeError("boom")
        try:  # 142 bytes beside skirr's server field: over each limit here
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"x-app", b"v" * 20)]})
        except RuntimeError as e:
            refused.append(str(e))
            raise
        await send({"type": "http.response.body", "body": b"sent"})

    with serve(app, date_header=False, headers=headers, access_log_format="%(s)s",
               limit_request_body=10) as srv:
        settings = {h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: client_limit}
        with H2Client.open(srv.port, settings=settings) as c:
            c.events_until(lambda e: isinstance(e, h2.events.SettingsAcknowledged))
            # h2 decodes up to the limit its client advertised: this one reads what came
            c.conn.decoder.max_header_list_size = 1 << 20
            a = c.answer(c.get("/raise"))
            b = c.answer(c.get("/plain"))
            big = c.answer(c.get("/up", method="POST", extra=[("content-length", "11")],
                                 body=b"x" * 11))  # a refusal: --limit-request-body 10
        lines = access.wait(3)
        assert len(srv.errors()) == 2
    assert [x.split(" (refused:")[0] for x in lines] == ["500", "500", "413"]
    own = [(b"content-security-policy", CSP[24:].encode())] if headers else []
    for x, status, body in ((a, 500, b"Internal Server Error"), (b, 500, b"Internal Server Error"),
                            (big, 413, b"Content Too Large")):
        assert (x.status, x.body, x.ended, x.reset) == (status, body, True, None)
        assert x.headers == [(b"content-type", b"text/plain; charset=utf-8"),
                             (b"content-length", str(len(body)).encode()),
                             (b"server", b"skirr"), *own]
    assert refused == [SECTION_MESSAGE]


@pytest.mark.rule("h2-100-continue", "h2-response")
def test_100_continue_is_not_held_to_the_client_limit(serve):
    """A 100 is skirr's own answer to the client's expectation: sent to a client whose
    SETTINGS_MAX_HEADER_LIST_SIZE (41) is under its 42 bytes."""
    seen: list = []
    settings = {h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: 41}
    with serve(reading_app(seen), date_header=False, server_header=False) as srv:
        with H2Client.open(srv.port, settings=settings) as c:
            c.events_until(lambda e: isinstance(e, h2.events.SettingsAcknowledged))
            c.conn.decoder.max_header_list_size = 1 << 20  # read what comes (as above)
            sid, evs, a = expect_then_send(c)
    assert interim_of(evs, sid) == [[(b":status", b"100")]]
    assert (a.status, a.body) == (500, b"Internal Server Error")  # its 200's head is over 41


@pytest.mark.rule("skirr-header-options")
def test_every_server_field_is_sent_over_http2(serve):
    """Fifty --header fields, and names of 302 bytes, all go out on HTTP/2 as on HTTP/1.1, in
    order, names lowercased (none dropped for want of room: before, 15 with date and server)."""
    long_a, long_b = "y" * 301 + "a", "y" * 301 + "b"
    hdrs = [f"X-H{i}: {i}" for i in range(50)] + [f"{long_a}: 1", f"{long_b}: 2", "X-After: 3"]

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    with serve(app, date_header=False, headers=hdrs) as srv:
        with H2Client.open(srv.port) as c:
            a = c.answer(c.get("/"))
    assert (a.status, a.body) == (200, b"ok")
    assert a.headers == [(b"content-length", b"2"), (b"server", b"skirr"),
                         *[(f"x-h{i}".encode(), str(i).encode()) for i in range(50)],
                         (long_a.encode(), b"1"), (long_b.encode(), b"2"), (b"x-after", b"3")]


@pytest.mark.rule("skirr-timeout-ready-input-first")
def test_data_sent_during_a_blocked_loop_is_read_before_the_body_deadline(serve):
    # the last DATA of a stream arrives 1.3 s into a 2.5 s block of the loop (another
    # connection's app sleeps), within --timeout-request-body (2 s): it is read before the
    # stream's deadline expires, so the stream is answered 200, never 408
    app = BlockedLoop()
    with serve(app, timeout_request_body=app.TIMEOUT) as srv:
        with H2Client.open(srv.port) as c:
            sid = c.request(POST + [(":path", "/up")], body=b"a", end=False)
            app.start(srv)
            app.at(app.SEND)
            c.conn.send_data(sid, b"b", end_stream=True)
            c.flush()
            a = c.answer(sid, timeout=IO)
            b = c.answer(c.get("/next"))
        assert app.finish() == (200, b"/block")
    assert (a.status, a.body, a.ended, a.reset, a.goaway, a.closed) == (
        200, b"ab", True, None, None, False)
    assert (b.status, b.body, b.goaway) == (200, b"/next", None)


@pytest.mark.rule("skirr-timeout-ready-input-first")
def test_request_sent_during_a_blocked_loop_is_read_before_the_idle_deadline(serve):
    # an idle connection opens its next stream 1.3 s into a 2.5 s block, within
    # --timeout-keep-alive (2 s) of its last stream: the HEADERS are read before the idle
    # deadline expires, so the stream is served, not refused by a GOAWAY that stops before it
    app = BlockedLoop()
    with serve(app, timeout_keep_alive=app.TIMEOUT) as srv:
        with H2Client.open(srv.port) as c:
            first = c.answer(c.get("/first"))
            app.start(srv)
            app.at(app.SEND)
            a = c.answer(c.request(POST + [(":path", "/late")], body=b"abc"), timeout=IO)
        assert app.finish() == (200, b"/block")
    assert (first.status, first.body) == (200, b"/first")
    assert (a.status, a.body, a.ended, a.reset, a.goaway, a.closed) == (
        200, b"abc", True, None, None, False)


@pytest.mark.rule("h2-write-timeout")
def test_window_never_opened_times_out(serve):
    seen: list = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            for _ in range(4):
                await send({"type": "http.response.body", "body": b"w" * 65536, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except Exception as exc:
            seen.append(type(exc).__name__)

    with serve(app, timeout_write=0.5) as srv:
        with H2Client.open(srv.port,
                           settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0}) as c:
            sid = c.get("/")
            t0 = time.monotonic()
            g = c.goaway(timeout=IO)
            waited = time.monotonic() - t0
        deadline = time.monotonic() + IO
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
    assert g.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM and g.last_stream_id == sid
    assert 0.3 < waited < 3.0
    assert seen == ["ClientDisconnected"]


@pytest.mark.rule("h2-request-body")
@pytest.mark.parametrize("size, reset", [(300_000, None), (1_500_000, h2.errors.ErrorCodes.NO_ERROR)],
                         ids=["dropped", "reset"])
def test_unread_body_after_the_response(serve, size, reset):
    """An unread body of 300000 bytes after the response is read to its end (no reset); one of
    1.5 MB gets RST_STREAM NO_ERROR once more than 1 MiB was dropped."""
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"early"})

    with serve(app, http2_initial_stream_window_size=100_000) as srv:
        with H2Client.open(srv.port) as c:
            c.events_until(lambda e: isinstance(e, h2.events.SettingsAcknowledged))
            sid = c.request([(":method", "POST"), (":scheme", "http"), (":path", "/"),
                             (":authority", "t")], end=False)
            a = c.answer(sid)
            sent, got_reset = 0, None
            while sent < size and got_reset is None:
                try:
                    room = min(c.conn.local_flow_control_window(sid), size - sent, 16384)
                except h2.exceptions.StreamClosedError:   # the reset was read meanwhile
                    break
                if room > 0:
                    try:
                        c.conn.send_data(sid, b"d" * room, end_stream=sent + room == size)
                    except h2.exceptions.StreamClosedError:   # the reset was read meanwhile
                        break
                    c.flush()
                    sent += room
                    continue
                for e in c.events_until(lambda e: isinstance(e, (h2.events.WindowUpdated,
                                                                 h2.events.StreamReset))):
                    if isinstance(e, h2.events.StreamReset):
                        got_reset = e.error_code
            if got_reset is None and reset is not None:
                evs = c.events_until(lambda e: isinstance(e, h2.events.StreamReset))
                got_reset = evs[-1].error_code
            if reset is not None:
                assert 1024 * 1024 < sent < size
            again = c.answer(c.get("/"))
    assert (a.status, a.body, a.ended) == (200, b"early", True)
    assert got_reset == reset
    assert again.status == 200


@pytest.mark.rule("h2-fuzz-harness")
@pytest.mark.timeout(600)  # the first run compiles the replay build (about 20 s), later ones reuse it
def test_fuzz_harness_replays_its_corpus_clean():
    """The HTTP/2 fuzz harness (fuzz/fuzz_h2.c: sk_h2.c and sk_h2guard.c over nghttp2, the
    exchanges stubbed) is one of make fuzz's and fuzz-smoke's harnesses and of those make
    sanitize replays; its replay build (ASan, UBSan, LeakSanitizer) runs every seed and every
    reproducer of fuzz/regressions/h2 clean, and its checks are live: output corrupted on
    purpose (FUZZ_H2_CORRUPT) fails it."""
    root = Path(__file__).resolve().parent.parent
    mk = (root / "fuzz" / "fuzz.mk").read_text()
    assert "h2" in re.search(r"^FUZZ_HARNESSES \?= (.*)$", mk, re.M).group(1).split()
    san = (root / "sanitizers" / "sanitize.mk").read_text()
    assert "h2" in re.search(r"^SAN_FUZZ_HARNESSES \?= (.*)$", san, re.M).group(1).split()
    seeds = [p for p in (root / "fuzz" / "corpus" / "h2").iterdir() if not p.name.startswith(".")]
    regressions = [p for p in (root / "fuzz" / "regressions" / "h2").iterdir()
                   if not p.name.startswith(".")]
    assert len(seeds) >= 100 and len(regressions) >= 1
    # one build per interpreter: the replay compiles sk_h2.c against this one's Python.h (make
    # sees only the sources change, not which headers a build used)
    fuzz_dir = root / "build" / f"fuzz-suite-{sysconfig.get_config_var('SOABI')}"
    fuzz_dir.mkdir(parents=True, exist_ok=True)
    # make conformance runs two sessions side by side on the same interpreter (the same
    # fuzz_dir): without the lock, both compile into it at once on a fresh tree (one links the
    # other's half-written objects, or writes the replay binary the other runs)
    with open(fuzz_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        r = subprocess.run(["make", "--no-print-directory", "-f", "fuzz/fuzz.mk", "fuzz-replay",
                            "FUZZ_HARNESSES=h2", f"FUZZ_PY={sys.executable}",
                            f"FUZZ_DIR={fuzz_dir}"],
                           cwd=root, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"{fuzz_dir}/h2/replay: {len(seeds) + len(regressions)} inputs ran clean" in r.stdout
    bad = subprocess.run([str(fuzz_dir / "h2" / "replay"), str(sorted(seeds)[0])], cwd=root,
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "FUZZ_H2_CORRUPT": "1"})
    assert bad.returncode != 0
    assert "fuzz_h2: w->type == NGHTTP2_SETTINGS" in bad.stderr, bad.stderr[-2000:]
