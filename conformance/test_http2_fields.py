"""HTTP/2 requests as RFC 9113 §8 says (spec/http2_fields.toml): the pseudo-headers, the fields
and the content-length skirr accepts and maps into the scope, the malformed requests it refuses
(RST_STREAM PROTOCOL_ERROR on that stream, the app never called, the next stream served), and the
--http modes (RFC 9113 §3).

The client writes its frames itself (hyperframe) and its field blocks with hpack, so it can send
what h2 refuses to make (uppercase names, a pseudo-header after a field, connection-specific
fields); it reads every frame skirr sends and decodes HEADERS with hpack (the oracle).
"""
from __future__ import annotations

import logging
import re
import socket
import ssl
import time
from pathlib import Path

import hpack
import pytest
from hyperframe.frame import (DataFrame, Frame, GoAwayFrame, HeadersFrame, PingFrame,
                              RstStreamFrame, SettingsFrame, WindowUpdateFrame)

import _proc
from conftest import IO_TIMEOUT, Recorder, snapshot
from skirr._logformat import TRACE
from tls_util import TLSFiles

rule = pytest.mark.rule

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, REFUSED_STREAM = 0x0, 0x1, 0x2, 0x7
REQ = [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"x")]


def req(*fields, method=b"GET", path=b"/", authority=b"x") -> list:
    """A request's field list: the four pseudo-headers then `fields`."""
    return [(b":method", method), (b":scheme", b"http"), (b":path", path),
            (b":authority", authority), *fields]


class H2:
    """A raw HTTP/2 client connection: frames out by hyperframe, field blocks by hpack; every
    frame skirr sends is kept in `frames` (HEADERS with their decoded `fields`), SETTINGS and
    PINGs are acknowledged as they come."""

    def __init__(self, sock: socket.socket, preface: bool = True) -> None:
        self.sock = sock
        self.sock.settimeout(IO_TIMEOUT)
        self.buf = b""
        self.eof = False
        self.enc = hpack.Encoder()
        self.dec = hpack.Decoder()
        self.frames: list[Frame] = []
        if preface:
            self.sock.sendall(PREFACE + SettingsFrame(0).serialize())

    def send(self, *frames: Frame) -> None:
        self.sock.sendall(b"".join(f.serialize() for f in frames))

    def headers(self, sid: int, fields: list, end_stream: bool = True) -> None:
        flags = ["END_HEADERS"] + (["END_STREAM"] if end_stream else [])
        self.send(HeadersFrame(sid, data=self.enc.encode(fields, huffman=False), flags=flags))

    def data(self, sid: int, payload: bytes, end_stream: bool = True) -> None:
        self.send(DataFrame(sid, data=payload, flags=["END_STREAM"] if end_stream else []))

    def _fill(self, n: int, deadline: float) -> bool:
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no frame from skirr in time; frames so far: {self.frames}")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                self.eof = True
                return False
            self.buf += chunk
        return True

    def read_frame(self, timeout: float = IO_TIMEOUT):
        """The next frame, or None once skirr has closed the connection."""
        deadline = time.monotonic() + timeout
        if not self._fill(9, deadline):
            assert self.buf == b"", f"connection closed inside a frame header: {self.buf!r}"
            return None
        assert not self.buf.startswith(b"HTTP/"), f"skirr answered HTTP/1: {self.buf[:300]!r}"
        frame, length = Frame.parse_frame_header(memoryview(self.buf[:9]))
        assert self._fill(9 + length, deadline), f"connection closed inside {frame}"
        frame.parse_body(memoryview(self.buf[9:9 + length]))
        self.buf = self.buf[9 + length:]
        if isinstance(frame, HeadersFrame):
            frame.fields = self.dec.decode(bytes(frame.data), raw=True)
        if isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
            self.send(SettingsFrame(0, flags=["ACK"]))
        if isinstance(frame, PingFrame) and "ACK" not in frame.flags:
            self.send(PingFrame(0, opaque_data=frame.opaque_data, flags=["ACK"]))
        self.frames.append(frame)
        return frame

    def until(self, done, timeout: float = IO_TIMEOUT):
        """Reads frames until done(frame) holds; returns that frame (AssertionError at EOF)."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self.read_frame(max(0.0, deadline - time.monotonic()))
            assert frame is not None, f"skirr closed the connection; frames: {self.frames}"
            if done(frame):
                return frame

    def outcome(self, sid: int):
        """How stream `sid` ended: ("reset", error code) or ("response", status, fields without
        :status, body). A GOAWAY first is ("goaway", error code, last stream id)."""
        fields, body = None, b""
        while True:
            f = self.until(lambda f: f.stream_id == sid or isinstance(f, GoAwayFrame))
            if isinstance(f, GoAwayFrame):
                return ("goaway", f.error_code, f.last_stream_id)
            if isinstance(f, RstStreamFrame):
                return ("reset", f.error_code)
            if isinstance(f, HeadersFrame):
                if fields is None:
                    fields = f.fields
            elif isinstance(f, DataFrame):
                body += bytes(f.data)
                if f.flow_controlled_length:
                    self.send(WindowUpdateFrame(0, window_increment=f.flow_controlled_length))
            if "END_STREAM" in f.flags:
                status = int(dict(fields)[b":status"])
                return ("response", status, [h for h in fields if h[0] != b":status"], body)

    def close(self) -> None:
        self.sock.close()


def h2c(srv) -> H2:
    """A prior-knowledge HTTP/2 connection to the in-process server (closed by serve's exit)."""
    c = srv.connect()
    return H2(c.sock)


class Seen:
    """ASGI app: records each call's scope at entry (`calls`), each event as it receives it
    (`got`) and, once the body has ended or the client gone, the events of the call (`ends`);
    answers 200 with the body and x-target (the raw path and query), or nothing after
    http.disconnect."""

    def __init__(self) -> None:
        self.calls = Recorder()
        self.got = Recorder()
        self.ends = Recorder()

    async def __call__(self, scope, receive, send):
        assert scope["type"] == "http"
        self.calls.put(snapshot(scope))
        events, body = [], b""
        while True:
            msg = await receive()
            events.append(msg)
            self.got.put(msg)
            if msg["type"] != "http.request":
                self.ends.put(events)
                return
            body += msg.get("body", b"")
            if not msg.get("more_body", False):
                break
        self.ends.put(events)
        target = scope["raw_path"] + (b"?" + scope["query_string"] if scope["query_string"] else b"")
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"x-target", target)]})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
def seen() -> Seen:
    return Seen()


def served_after(c: H2, app: Seen, sid: int, before: int) -> None:
    """Stream `sid` (GET /after) on the same connection is served: the refusal before it was a
    stream error, and the app's only call since `before` is this one."""
    c.headers(sid, req(path=b"/after"))
    out = c.outcome(sid)
    assert out[:2] == ("response", 200), out
    calls = app.calls.wait(before + 1)
    assert [s["path"] for s in calls[before:]] == ["/after"], calls[before:]


def assert_stream_refused(srv, app: Seen, fields: list, code: int = PROTOCOL_ERROR,
                          data: bytes | None = None) -> None:
    """HEADERS `fields` (and DATA `data` when given) on stream 1 of a fresh connection: RST_STREAM
    `code` on stream 1, no response on it, the app never called; stream 3 is then served."""
    c = h2c(srv)
    before = len(app.calls)
    c.headers(1, fields, end_stream=data is None)
    if data is not None:
        c.data(1, data)
    out = c.outcome(1)
    assert out == ("reset", code), f"stream 1: expected RST_STREAM {code}, got {out}"
    served_after(c, app, 3, before)


def one_scope(srv, app: Seen, fields: list, data: bytes | None = None) -> dict:
    """The scope of one request served with 200 on a fresh connection."""
    c = h2c(srv)
    before = len(app.calls)
    c.headers(1, fields, end_stream=data is None)
    if data is not None:
        c.data(1, data)
    out = c.outcome(1)
    assert out[:2] == ("response", 200), out
    return app.calls.wait(before + 1)[before]


def headers_of(scope: dict) -> list:
    return [tuple(h) for h in scope["headers"]]


def assert_own_answer(out: tuple, status: int, reason: bytes) -> None:
    """skirr's own response on a stream: text/plain, the reason phrase as content, date and
    server as on every response."""
    assert out[:2] == ("response", status), out
    fields = out[2]
    assert [f for f in fields if f[0] != b"date"] == [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(reason)).encode()), (b"server", b"skirr")], out
    assert re.fullmatch(rb"[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT",
                        dict(fields)[b"date"]), out
    assert out[3] == reason, out


def assert_stream_answered(srv, app: Seen, fields: list, status: int, reason: bytes) -> None:
    """HEADERS `fields` on stream 1 of a fresh connection: skirr's own `status` answer, the app
    never called; stream 3 is then served."""
    c = h2c(srv)
    before = len(app.calls)
    c.headers(1, fields)
    assert_own_answer(c.outcome(1), status, reason)
    served_after(c, app, 3, before)


# ----------------------------------------------------------------------------------------------
# Pseudo-header fields (RFC 9113 §8.3)


def without(name: bytes) -> list:
    return [f for f in REQ if f[0] != name]


@rule("RFC9113-8.3.1-pseudo-required")
@pytest.mark.parametrize("fields", [
    without(b":method"), without(b":scheme"), without(b":path"), req(path=b""),
    [(b":authority", b"x")],
], ids=["no-method", "no-scheme", "no-path", "empty-path", "authority-only"])
def test_missing_pseudo_header_is_stream_error(serve, seen, fields):
    with serve(seen) as srv:
        assert_stream_refused(srv, seen, fields)


@rule("RFC9113-8.3-pseudo-once")
@pytest.mark.parametrize("extra", [
    (b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"x"),
    (b":method", b"POST"), (b":path", b"/other"),
], ids=["method", "scheme", "path", "authority", "method-differs", "path-differs"])
def test_repeated_pseudo_header_is_stream_error(serve, seen, extra):
    with serve(seen) as srv:
        assert_stream_refused(srv, seen, REQ + [extra])


@rule("RFC9113-8.3-pseudo-unknown")
@pytest.mark.parametrize("extra", [(b":foo", b"1"), (b":status", b"200"), (b":protocol", b"x")],
                         ids=["foo", "status", "protocol"])
def test_unknown_pseudo_header_is_stream_error(serve, seen, extra):
    """:protocol is defined only with SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441), which skirr
    does not send."""
    with serve(seen) as srv:
        assert_stream_refused(srv, seen, REQ + [extra])


@rule("RFC9113-8.3-pseudo-first")
@pytest.mark.parametrize("fields", [
    [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"x"), (b"x-a", b"1"),
     (b":path", b"/")],
    [(b"x-a", b"1")] + REQ,
    REQ[:3] + [(b"user-agent", b"t"), (b":authority", b"x")],
], ids=["path-last", "field-first", "authority-after-field"])
def test_pseudo_header_after_field_is_stream_error(serve, seen, fields):
    with serve(seen) as srv:
        assert_stream_refused(srv, seen, fields)


@rule("RFC9113-8.3.1-path-form")
@pytest.mark.parametrize("fields", [
    req(path=b"p"), req(path=b"http://x/p"), req(path=b"*"), req(path=b"?q"),
], ids=["relative", "absolute-uri", "asterisk-get", "bare-query"])
def test_bad_path_form_is_stream_error(serve, seen, fields):
    with serve(seen) as srv:
        assert_stream_refused(srv, seen, fields)


@rule("RFC9113-8.3.1-path-form")
def test_options_asterisk_served(serve, seen):
    with serve(seen) as srv:
        scope = one_scope(srv, seen, req(method=b"OPTIONS", path=b"*"))
    assert (scope["method"], scope["path"], scope["raw_path"], scope["query_string"]) == (
        "OPTIONS", "*", b"*", b"")


@rule("RFC9113-8.3-path-invalid")
@pytest.mark.parametrize("path", [
    b"/a#b", b"/a?q#f", b'/a"b', b"/a<b", b"/a>b", b"/a{b", b"/a\\b", b"/a`b", b"/a\x80",
    b"/a%zz", b"/a%", b"/?q=%2",
], ids=["hash", "hash-in-query", "dquote", "lt", "gt", "lbrace", "backslash", "backtick",
        "8bit", "bad-pct", "lone-pct", "short-pct-query"])
def test_invalid_path_is_stream_error(serve, seen, path):
    """RFC 9113 §8.3: an invalid pseudo-header field value makes the request malformed; :path is
    absolute-path [ "?" query ] (§8.3.1), held to the bytes HTTP/1.1's origin-form may carry
    (RFC9112-3.2-target-grammar, -pct-encoded, RFC9112-3.2.1-fragment-400)."""
    with serve(seen) as srv:
        assert_stream_refused(srv, seen, req(path=path))


@rule("RFC9113-8.3.1-path-form")
@pytest.mark.parametrize("path, raw, query", [
    (b"/a[b]^|/c?x=[1]^|\\`{}", b"/a[b]^|/c", b"x=[1]^|\\`{}"),
    (b"/p%2Fq%c3%A9?a=%41", b"/p%2Fq%c3%A9", b"a=%41"),
], ids=["lenient-bytes", "pct-encodings"])
def test_path_bytes_http11_allows_are_served(serve, seen, path, raw, query):
    """What HTTP/1.1's origin-form accepts (with skirr's lenient bytes) is served as received."""
    with serve(seen) as srv:
        scope = one_scope(srv, seen, req(path=path))
    assert (scope["raw_path"], scope["query_string"]) == (raw, query)


@rule("RFC9113-8.3.1-path-form")
def test_path_and_query_mapped(serve, seen):
    with serve(seen) as srv:
        scope = one_scope(srv, seen, req(path=b"/a%20b/c?x=1&y=%2F"))
    assert (scope["method"], scope["path"], scope["raw_path"], scope["query_string"],
            scope["http_version"], scope["scheme"]) == (
        "GET", "/a b/c", b"/a%20b/c", b"x=1&y=%2F", "2", "http")


@rule("RFC9113-8.3.1-scheme")
@pytest.mark.parametrize("scheme", [b"http", b"https", b"HTTP", b"Https"])
def test_scheme_is_the_connections(serve, seen, scheme):
    """http and https in any case are served; the scope's scheme is the connection's (http on
    h2c), as h2-scope says, whatever :scheme claims (a trusted proxy's X-Forwarded-Proto is what
    changes it, as on HTTP/1.1)."""
    with serve(seen) as srv:
        scope = one_scope(srv, seen, [(b":method", b"GET"), (b":scheme", scheme), (b":path", b"/"),
                                      (b":authority", b"x")])
    assert scope["scheme"] == "http"


@rule("RFC9113-8.3.1-scheme")
@pytest.mark.parametrize("scheme", [b"http", b"https"])
def test_scheme_on_tls_is_https(serve, seen, tls, scheme):
    """On TLS (ALPN h2) the scope's scheme is https whatever :scheme claims, as an HTTP/1.1
    absolute-form target 'http://...' over TLS is served with the connection's scheme."""
    with serve(seen, **tls.server_config()) as srv:
        s = tls_socket(srv.port, tls, ["h2", "http/1.1"])
        try:
            c = H2(s)
            c.headers(1, [(b":method", b"GET"), (b":scheme", scheme), (b":path", b"/"),
                          (b":authority", b"x")])
            out = c.outcome(1)
        finally:
            s.close()
    assert out[:2] == ("response", 200), out
    assert seen.calls.wait(1)[0]["scheme"] == "https"


@rule("RFC9110-7.4-h2-misdirected-scheme-421")
@pytest.mark.parametrize("scheme", [b"ftp", b"ws", b"file"])
def test_other_scheme_is_421(serve, seen, scheme):
    with serve(seen) as srv:
        assert_stream_answered(srv, seen, [(b":method", b"GET"), (b":scheme", scheme),
                                           (b":path", b"/"), (b":authority", b"x")],
                               421, b"Misdirected Request")


@rule("RFC9110-9.1-h2-unknown-method-501")
@pytest.mark.parametrize("method", [b"get", b"FOO", b"DESCRIBE", b"PRI"])
def test_unknown_method_is_501(serve, seen, method):
    with serve(seen) as srv:
        assert_stream_answered(srv, seen, req(method=method), 501, b"Not Implemented")


@rule("RFC9110-9.1-h2-methods")
@pytest.mark.parametrize("method", [b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS",
                                    b"TRACE", b"PATCH", b"QUERY", b"PROPFIND"])
def test_methods_of_the_table_served(serve, seen, method):
    with serve(seen) as srv:
        scope = one_scope(srv, seen, req(method=method))
    assert scope["method"] == method.decode()


@rule("RFC9110-9.1-h2-methods")
def test_method_reaches_the_app_whatever_the_field_section_size(serve, seen):
    """The method is copied last into the stream's block of request bytes; where that copy grew
    the block, it was read from the freed one (found by an attack: a field value of 1,008-1,012
    bytes got 500 "refused: server error", the method garbage). Field values of every length
    near each doubling of the block (256 to 4,096 bytes), three methods in turn, one
    connection: each request reaches the app with its method and field as sent."""
    methods = [b"GET", b"POST", b"DELETE"]
    sent = [(methods[n % 3], n) for cap in (256, 512, 1024, 2048, 4096)
            for n in range(cap - 120, cap + 8)]
    with serve(seen) as srv:
        c = h2c(srv)
        for i, (method, n) in enumerate(sent):
            c.headers(2 * i + 1, req((b"x-a", b"v" * n), method=method))
            out = c.outcome(2 * i + 1)
            assert out[:2] == ("response", 200), (method, n, out)
        calls = seen.calls.wait(len(sent))
    assert [(s["method"], dict(headers_of(s))[b"x-a"]) for s in calls] == [
        (method.decode(), b"v" * n) for method, n in sent]


@rule("RFC9110-9.1-h2-methods")
@pytest.mark.parametrize("method", [b"G T", b"GET\x00", b"", b"G(T"], ids=["sp", "nul", "empty",
                                                                           "paren"])
def test_method_not_a_token_is_stream_error(serve, seen, method):
    with serve(seen) as srv:
        assert_stream_refused(srv, seen, req(method=method))


@rule("RFC9113-8.3.1-authority-host")
@pytest.mark.parametrize("fields, host", [
    (req((b"user-agent", b"t"), (b"accept", b"*/*"), authority=b"example.com:8443"),
     [(b"user-agent", b"t"), (b"accept", b"*/*"), (b"host", b"example.com:8443")]),
    ([(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b"user-agent", b"t"),
      (b"host", b"h.example"), (b"x-a", b"1")],
     [(b"user-agent", b"t"), (b"host", b"h.example"), (b"x-a", b"1")]),
    (req((b"x-a", b"1"), (b"host", b"example.com"), (b"x-b", b"2"), authority=b"example.com"),
     [(b"x-a", b"1"), (b"host", b"example.com"), (b"x-b", b"2")]),
    (req((b"host", b"Example.COM:80"), authority=b"example.com:80"),
     [(b"host", b"example.com:80")]),
    (req((b"host", b"Example.COM"), authority=b"Example.COM"),
     [(b"host", b"Example.COM")]),
    (req((b"host", b"example.com:80"), authority=b"EXAMPLE.com:80"),
     [(b"host", b"EXAMPLE.com:80")]),
], ids=["authority", "host-only", "both-equal", "both-equal-but-case", "both-equal-upper-case",
        "authority-upper-case"])
def test_authority_is_the_host(serve, seen, fields, host):
    """:authority reaches the app as a host field after the fields received (h2-scope); a Host
    field, alone or equal to :authority, is kept where it was: one host field. No pseudo-header
    reaches the scope's headers."""
    with serve(seen) as srv:
        scope = one_scope(srv, seen, fields)
    assert headers_of(scope) == host


@rule("RFC9113-8.3.1-authority-host")
def test_no_authority_at_all_is_stream_error(serve, seen):
    with serve(seen) as srv:
        assert_stream_refused(srv, seen, [(b":method", b"GET"), (b":scheme", b"http"),
                                          (b":path", b"/")])


@rule("RFC9113-8.3.1-authority-conflict")
@pytest.mark.parametrize("fields", [
    req((b"host", b"other.example"), authority=b"example.com"),
    req((b"host", b"example.com:81"), authority=b"example.com"),
    req(authority=b"user@example.com"),
    req(authority=b"user:pw@example.com:80"),
    req(authority=b"exa%zzmple.com"),
    req(authority=b"example.com:8a"),
    req(authority=b"[not-ip]"),
    [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b"host", b"a b")],
    [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b"host", b"x"),
     (b"host", b"x")],
], ids=["host-differs", "host-port-differs", "userinfo", "userinfo-password", "bad-pct",
        "bad-port", "bad-ip-literal", "invalid-host-field", "two-host-fields"])
def test_authority_conflicts_are_stream_errors(serve, seen, fields):
    """:authority and Host held to HTTP/1.1's Host validator, userinfo refused, a Host differing
    from :authority refused (RFC 9113 §8.3.1): RST_STREAM PROTOCOL_ERROR, the app never called."""
    with serve(seen) as srv:
        assert_stream_refused(srv, seen, fields)


@rule("RFC9113-8.5-connect")
def test_connect_is_501(serve, seen):
    with serve(seen) as srv:
        c = h2c(srv)
        c.headers(1, [(b":method", b"CONNECT"), (b":authority", b"example.com:443")])
        assert_own_answer(c.outcome(1), 501, b"Not Implemented")
        served_after(c, seen, 3, 0)


@rule("RFC9113-8.5-connect")
@pytest.mark.parametrize("fields", [
    [(b":method", b"CONNECT"), (b":authority", b"example.com:443"), (b":path", b"/")],
    [(b":method", b"CONNECT"), (b":authority", b"example.com:443"), (b":scheme", b"http")],
    [(b":method", b"CONNECT")],
], ids=["with-path", "with-scheme", "no-authority"])
def test_malformed_connect_is_stream_error(serve, seen, fields):
    with serve(seen) as srv:
        assert_stream_refused(srv, seen, fields)


# ----------------------------------------------------------------------------------------------
# Fields (RFC 9113 §8.2)


@rule("RFC9113-8.2.2-connection-specific")
@pytest.mark.parametrize("field", [
    (b"connection", b"keep-alive"), (b"connection", b"close"), (b"keep-alive", b"timeout=5"),
    (b"proxy-connection", b"keep-alive"), (b"transfer-encoding", b"chunked"),
    (b"transfer-encoding", b"identity"), (b"upgrade", b"websocket"), (b"upgrade", b"h2c"),
], ids=["connection", "connection-close", "keep-alive", "proxy-connection", "te-chunked",
        "te-identity", "upgrade-websocket", "upgrade-h2c"])
def test_connection_specific_field_is_stream_error(serve, seen, field):
    with serve(seen) as srv:
        assert_stream_refused(srv, seen, req(field))


@rule("RFC9113-8.2.2-te-trailers")
def test_te_trailers_accepted(serve, seen):
    with serve(seen) as srv:
        scope = one_scope(srv, seen, req((b"te", b"trailers"), (b"x-a", b"1")))
    assert headers_of(scope) == [(b"te", b"trailers"), (b"x-a", b"1"), (b"host", b"x")]


@rule("RFC9113-8.2.2-te-trailers")
@pytest.mark.parametrize("value", [b"gzip", b"trailers, gzip", b"chunked", b"deflate;q=0.5"],
                         ids=["gzip", "trailers-and-gzip", "chunked", "deflate"])
def test_te_other_than_trailers_is_stream_error(serve, seen, value):
    with serve(seen) as srv:
        assert_stream_refused(srv, seen, req((b"te", value)))


@rule("RFC9113-8.2-uppercase-names")
@pytest.mark.parametrize("fields", [
    req((b"X-Foo", b"1")), req((b"content-Type", b"text/plain")), req((b"HOST", b"x")),
    [(b":method", b"GET"), (b":scheme", b"http"), (b":Path", b"/"), (b":authority", b"x")],
], ids=["x-foo", "content-type", "host", "pseudo"])
def test_uppercase_name_is_stream_error(serve, seen, fields):
    with serve(seen) as srv:
        assert_stream_refused(srv, seen, fields)


@rule("RFC9113-8.2.1-field-validity")
@pytest.mark.parametrize("field", [
    (b"x a", b"1"), (b"x\x00a", b"1"), (b"x\ta", b"1"), (b"x:a", b"1"), (b"x\x7fa", b"1"),
    (b"x\xe9", b"1"), (b"", b"1"),
    (b"x-a", b"1\x002"), (b"x-a", b"1\r\nx-b: 2"), (b"x-a", b"1\n2"), (b"x-a", b"1\r2"),
    (b"x-a", b" 1"), (b"x-a", b"1 "), (b"x-a", b"\t1"), (b"x-a", b"1\t"),
], ids=["name-sp", "name-nul", "name-htab", "name-colon", "name-del", "name-8bit", "name-empty",
        "value-nul", "value-crlf", "value-lf", "value-cr", "value-leading-sp",
        "value-trailing-sp", "value-leading-htab", "value-trailing-htab"])
def test_invalid_field_is_stream_error(serve, seen, field):
    with serve(seen) as srv:
        assert_stream_refused(srv, seen, req(field))


@rule("RFC9113-8.2.1-field-validity")
def test_valid_odd_fields_served_as_received(serve, seen):
    """What §8.2.1 allows is passed as received: an empty value, a value with inner SP and HTAB,
    obs-text in a value, every tchar in a name."""
    fields = [(b"x-empty", b""), (b"x-inner", b"a b\tc"), (b"x-obs", b"caf\xe9"),
              (b"!#$%&'*+-.^_`|~09az", b"v")]
    with serve(seen) as srv:
        scope = one_scope(srv, seen, req(*fields))
    assert headers_of(scope) == [*fields, (b"host", b"x")]


class TraceLines(logging.Handler):
    """The skirr.error logger's TRACE records (--log-level trace), as formatted messages."""

    def __init__(self) -> None:
        super().__init__(TRACE)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno == TRACE:
            self.lines.append(record.getMessage())


@rule("skirr-h2-malformed-trace")
def test_malformed_requests_traced_with_why(serve, seen):
    """Each malformed request is one TRACE line naming why, whether nghttp2's checks refused it
    (a field: HTTP_HEADER; the section as a whole: HTTP_MESSAGING) or skirr's own; the request
    served after them gets none."""
    refused = [
        req((b"X-Foo", b"1")),                                     # uppercase name
        req((b"te", b"gzip")),                                     # te other than trailers
        [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"x")],  # no :path
        req(authority=b"user@x"),                                  # skirr's check
    ]
    cap = TraceLines()
    logger = logging.getLogger("skirr.error")
    level = logger.level
    logger.setLevel(TRACE)
    logger.addHandler(cap)
    try:
        with serve(seen) as srv:
            c = h2c(srv)
            for i, fields in enumerate(refused):
                c.headers(1 + 2 * i, fields)
                assert c.outcome(1 + 2 * i) == ("reset", PROTOCOL_ERROR)
            c.headers(9, req(path=b"/after"))
            assert c.outcome(9)[:2] == ("response", 200)
            port = c.sock.getsockname()[1]
    finally:
        logger.removeHandler(cap)
        logger.setLevel(level)
    me = f"127.0.0.1:{port} - "
    why = "HTTP/2 request malformed: RST_STREAM PROTOCOL_ERROR"
    assert [line for line in cap.lines if line.startswith(me) and "request" in line] == [
        f"{me}{why} (nghttp2: Invalid HTTP header field was received)",
        f"{me}{why} (nghttp2: Invalid HTTP header field was received)",
        f"{me}{why} (nghttp2: Violation in HTTP messaging rule)",
        f"{me}{why} (userinfo in :authority)",
    ], cap.lines
    assert len(seen.calls) == 1


@rule("RFC9113-8.2.3-cookie-crumbs")
@pytest.mark.parametrize("fields, expected", [
    ([(b"cookie", b"a=1"), (b"x-a", b"1"), (b"cookie", b"b=2"), (b"cookie", b"c=3")],
     [(b"cookie", b"a=1; b=2; c=3"), (b"x-a", b"1")]),
    ([(b"x-a", b"1"), (b"cookie", b"a=1; b=2")], [(b"x-a", b"1"), (b"cookie", b"a=1; b=2")]),
    ([(b"cookie", b"a=1"), (b"cookie", b"")], [(b"cookie", b"a=1; ")]),
], ids=["three-crumbs", "one-field", "empty-crumb"])
def test_cookie_crumbs_joined(serve, seen, fields, expected):
    with serve(seen) as srv:
        scope = one_scope(srv, seen, req(*fields))
    assert headers_of(scope) == [*expected, (b"host", b"x")]


@rule("RFC9113-8.2.3-cookie-empty-first-crumb")
def test_empty_first_cookie_crumb_joined(serve, seen):
    with serve(seen) as srv:
        scope = one_scope(srv, seen, req((b"cookie", b""), (b"cookie", b"b=2")))
    assert headers_of(scope) == [(b"cookie", b"; b=2"), (b"host", b"x")]


# ----------------------------------------------------------------------------------------------
# Content-length against DATA (RFC 9113 §8.1.1)


@rule("RFC9113-8.1.1-content-length")
@pytest.mark.parametrize("declared, pieces, seen_body", [
    (b"5", [b"abc"], [b"abc"]), (b"3", [b"abcde"], []), (b"0", [b"a"], []),
    (b"3", [b"ab", b"cde"], [b"ab"]),
], ids=["less-data", "more-data", "zero-declared", "more-in-a-second-frame"])
def test_content_length_mismatch_is_stream_error(serve, seen, declared, pieces, seen_body):
    """The app was called at HEADERS (the body streams); what it read is the DATA before the
    one that broke the count (never a byte past content-length), each with more_body True, then
    http.disconnect: never more_body False. The app waits in receive() before the DATA comes
    (the stream's unread content is dropped when it is reset: h2-connection-window), so DATA
    that ends the stream short of the length ("less-data") reaches it as it arrives, the
    shortfall showing only at that frame's END_STREAM."""
    with serve(seen) as srv:
        c = h2c(srv)
        c.headers(1, req((b"content-length", declared), method=b"POST"), end_stream=False)
        seen.calls.wait(1)  # the app was called: it awaits receive() before the loop reads more
        for i, piece in enumerate(pieces):
            if i:
                seen.got.wait(i)  # the app has read the piece before this one
            c.data(1, piece, end_stream=i == len(pieces) - 1)
        assert c.outcome(1) == ("reset", PROTOCOL_ERROR)
        events = seen.ends.wait(1)[0]
        served_after(c, seen, 3, 1)
    assert events == [*({"type": "http.request", "body": b, "more_body": True} for b in seen_body),
                      {"type": "http.disconnect"}], events


@rule("RFC9113-8.1.1-content-length")
@pytest.mark.parametrize("fields", [
    [(b"content-length", b"abc")], [(b"content-length", b"-1")], [(b"content-length", b"1, 1")],
    [(b"content-length", b"1"), (b"content-length", b"1")],
    [(b"content-length", b"1"), (b"content-length", b"2")],
    [(b"content-length", b"99999999999999999999")],
], ids=["letters", "negative", "list", "repeated-equal", "repeated-differing", "overflow"])
def test_invalid_content_length_is_stream_error(serve, seen, fields):
    """A content-length that is not one number (RFC 9110 §8.6) is refused at HEADERS: the app is
    never called."""
    with serve(seen) as srv:
        c = h2c(srv)
        c.headers(1, req(*fields, method=b"POST"), end_stream=False)
        c.data(1, b"a")
        assert c.outcome(1) == ("reset", PROTOCOL_ERROR)
        served_after(c, seen, 3, 0)


@rule("RFC9113-8.1.1-content-length")
def test_content_length_with_end_stream_on_headers_is_stream_error(serve, seen):
    with serve(seen) as srv:
        assert_stream_refused(srv, seen, req((b"content-length", b"5"), method=b"POST"))


@rule("RFC9113-8.1.1-content-length")
def test_content_length_matching_data_in_pieces_served(serve, seen):
    with serve(seen) as srv:
        c = h2c(srv)
        c.headers(1, req((b"content-length", b"6"), method=b"POST"), end_stream=False)
        c.data(1, b"abc", end_stream=False)
        c.data(1, b"de", end_stream=False)
        c.data(1, b"f")
        out = c.outcome(1)
    assert out[:2] == ("response", 200) and out[3] == b"abcdef", out
    assert [f for f in out[2] if f[0] != b"date"] == [
        (b"content-type", b"text/plain"), (b"x-target", b"/"), (b"content-length", b"6"),
        (b"server", b"skirr")], out


@rule("RFC9113-8.1-request-trailers")
def test_request_trailers_end_the_body(serve, seen):
    """A trailer HEADERS with END_STREAM ends the body: the app gets more_body False."""
    with serve(seen) as srv:
        c = h2c(srv)
        c.headers(1, req(method=b"POST"), end_stream=False)
        c.data(1, b"ab", end_stream=False)
        c.headers(1, [(b"x-checksum", b"1")])
        out = c.outcome(1)
    assert out[:2] == ("response", 200) and out[3] == b"ab", out
    events = seen.ends.wait(1)[0]
    assert [e["type"] for e in events] == ["http.request"] * len(events), events
    assert [e["more_body"] for e in events] == [True] * (len(events) - 1) + [False], events
    assert b"".join(e["body"] for e in events) == b"ab", events


@rule("RFC9113-8.1-request-trailers")
@pytest.mark.parametrize("trailer, end", [
    ([(b":path", b"/x")], True), ([(b"X-T", b"1")], True), ([(b"connection", b"close")], True),
    ([(b"x-t", b"1")], False),
], ids=["pseudo", "uppercase", "connection-specific", "no-end-stream"])
def test_malformed_request_trailers_are_stream_errors(serve, seen, trailer, end):
    """RFC 9113 §8.1: trailers carry no pseudo-header field and END_STREAM; the field rules hold
    in them too. The app reading the body gets http.disconnect, never more_body False."""
    with serve(seen) as srv:
        c = h2c(srv)
        c.headers(1, req(method=b"POST"), end_stream=False)
        c.data(1, b"ab", end_stream=False)
        seen.got.wait(1)  # the app has read the DATA before the trailers come
        c.headers(1, trailer, end_stream=end)
        assert c.outcome(1) == ("reset", PROTOCOL_ERROR)
        events = seen.ends.wait(1)[0]
        served_after(c, seen, 3, 1)
    assert events == [{"type": "http.request", "body": b"ab", "more_body": True},
                      {"type": "http.disconnect"}], events


# ----------------------------------------------------------------------------------------------
# Header list size (RFC 9113 §6.5.2, §10.5.1)


def list_size(fields: list) -> int:
    return sum(len(n) + len(v) + 32 for n, v in fields)


@rule("RFC9113-10.5.1-header-list-size")
def test_header_list_over_the_limit_refused_at_the_limit_served(serve, seen):
    limit = 4096
    base = req((b"x-pad", b""))
    pad = limit - list_size(base)
    at_limit = req((b"x-pad", b"p" * pad))
    over = req((b"x-pad", b"p" * (pad + 1)))
    assert (list_size(at_limit), list_size(over)) == (limit, limit + 1)
    with serve(seen, http2_max_headers_size=limit) as srv:
        c = h2c(srv)
        settings = c.until(lambda f: isinstance(f, SettingsFrame) and "ACK" not in f.flags)
        assert settings.settings.get(SettingsFrame.MAX_HEADER_LIST_SIZE) == limit
        c.headers(1, at_limit)
        assert c.outcome(1)[:2] == ("response", 200)
        c.headers(3, over)
        assert_own_answer(c.outcome(3), 431, b"Request Header Fields Too Large")
        head_over = req((b"x-pad", b"p" * (pad + 1)), method=b"HEAD")
        c.headers(5, head_over)
        out = c.outcome(5)  # a HEAD's refusal: the same head, no content (RFC 9110 §9.3.2)
        assert out[:2] == ("response", 431) and out[3] == b"", out
        assert (b"content-length", b"31") in out[2], out
        served_after(c, seen, 7, 1)


# ----------------------------------------------------------------------------------------------
# How a connection becomes HTTP/2 (RFC 9113 §3) and the --http modes


DATE = rb"date: [A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT\r\n"


def read_all(sock: socket.socket, timeout: float = IO_TIMEOUT) -> bytes:
    """Every byte until skirr closes."""
    sock.settimeout(timeout)
    out = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return out
        out += chunk


@rule("RFC9113-3.1-h2c-upgrade-ignored")
def test_h2c_upgrade_stays_http11(serve, seen):
    data = (b"GET /u HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n"
            b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n")
    with serve(seen) as srv:
        c = srv.connect()
        c.send(data + b"GET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        got = c.read_until_close()
    one = (rb"HTTP/1\.1 200 OK\r\ncontent-type: text/plain\r\nx-target: %s\r\n"
           rb"content-length: 0\r\n" + DATE + rb"server: skirr\r\n\r\n")
    assert re.fullmatch(one % rb"/u" + one.replace(rb"content-length: 0\r\n",
                                                     rb"content-length: 0\r\nconnection: close\r\n")
                        % rb"/next", got), got
    assert [s["http_version"] for s in seen.calls.items] == ["1.1", "1.1"]


def refusal_505() -> bytes:
    return (rb"HTTP/1\.1 505 HTTP Version Not Supported\r\n"
            rb"content-type: text/plain; charset=utf-8\r\ncontent-length: 26\r\n"
            rb"connection: close\r\n" + DATE + rb"server: skirr\r\n\r\n"
            rb"HTTP Version Not Supported")


@rule("skirr-http-mode-1")
@pytest.mark.parametrize("after", [b"", SettingsFrame(0).serialize()], ids=["preface", "settings"])
def test_http1_only_refuses_the_preface_as_before(serve, seen, after):
    with serve(seen, http="1") as srv:
        c = srv.connect()
        c.send(PREFACE + after)
        got = c.read_until_close()
    assert re.fullmatch(refusal_505(), got), got
    assert len(seen.calls) == 0


@pytest.fixture
def tls(tmp_path: Path) -> TLSFiles:
    return TLSFiles(tmp_path / "tls")


def tls_socket(port: int, tls: TLSFiles, alpn: list | None) -> ssl.SSLSocket:
    ctx = tls.client_context()
    if alpn is not None:
        ctx.set_alpn_protocols(alpn)
    sock = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
    return ctx.wrap_socket(sock, server_hostname="localhost")


@rule("skirr-http-mode-1")
def test_http1_only_offers_http11_alpn(serve, seen, tls):
    with serve(seen, http="1", **tls.server_config()) as srv:
        s = tls_socket(srv.port, tls, ["h2", "http/1.1"])
        try:
            assert s.selected_alpn_protocol() == "http/1.1"
            s.sendall(b"GET /t HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert read_all(s).startswith(b"HTTP/1.1 200 OK\r\n")
        finally:
            s.close()


@rule("skirr-http-mode-2")
@pytest.mark.parametrize("data", [
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"PRI * HTTP/1.1\r\n\r\nSM\r\n\r\n",
    b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n",
], ids=["http11-request", "pri-http11", "bad-preface-tail"])
def test_http2_only_refuses_anything_but_the_preface(serve, seen, data):
    with serve(seen, http="2") as srv:
        c = srv.connect()
        c.send(data)
        h = H2(c.sock, preface=False)
        kinds = []
        while (f := h.read_frame()) is not None:
            kinds.append(f)
    assert [type(f).__name__ for f in kinds] == ["SettingsFrame", "WindowUpdateFrame",
                                                 "GoAwayFrame"], kinds
    settings, window, goaway = kinds
    assert (settings.stream_id, settings.flags, window.stream_id) == (0, set(), 0)
    assert (goaway.last_stream_id, goaway.error_code, goaway.additional_data) == (
        0, PROTOCOL_ERROR, b"")
    assert len(seen.calls) == 0


@rule("skirr-http-mode-2")
@pytest.mark.parametrize("alpn", [None, ["h2", "http/1.1"]], ids=["no-alpn", "h2-offered"])
def test_http2_only_over_tls(serve, seen, tls, alpn):
    with serve(seen, http="2", **tls.server_config()) as srv:
        s = tls_socket(srv.port, tls, alpn)
        try:
            assert s.selected_alpn_protocol() == (None if alpn is None else "h2")
            c = H2(s)
            c.headers(1, req(path=b"/tls"))
            out = c.outcome(1)
        finally:
            s.close()
    assert out[:2] == ("response", 200), out
    scope = seen.calls.wait(1)[0]
    assert (scope["scheme"], scope["http_version"], scope["path"]) == ("https", "2", "/tls")


def _bad(flag: str, value: str, why: str = "") -> tuple:
    return ([flag, value], f"argument {flag}: invalid integer: '{value}'{why}")


INT31 = " (not in 1..2147483647)"


@rule("skirr-http2-cli-errors")
@pytest.mark.parametrize("loop", _proc.LOOPS)
@pytest.mark.parametrize("args, line", [
    (["--http", "3"], "argument --http: invalid choice: '3' (choose from 'auto', '1', '2')"),
    (["--http", "h2"], "argument --http: invalid choice: 'h2' (choose from 'auto', '1', '2')"),
    _bad("--http2-max-concurrent-streams", "0", INT31),
    _bad("--http2-max-concurrent-streams", "x"),
    _bad("--http2-max-concurrent-streams", "2147483648", INT31),
    _bad("--http2-max-headers-size", "0", INT31),
    _bad("--http2-max-headers-size", "1k"),
    _bad("--http2-initial-stream-window-size", "0", INT31),
    _bad("--http2-initial-stream-window-size", "2147483648", INT31),
    _bad("--http2-max-frame-size", "16383", " (not in 16384..16777215)"),
    _bad("--http2-max-frame-size", "16777216", " (not in 16384..16777215)"),
], ids=["http-3", "http-h2", "streams-0", "streams-x", "streams-2**31", "headers-0",
        "headers-1k", "window-0", "window-2**31", "frame-16383", "frame-2**24"])
def test_bad_http2_flag_is_one_line_status_2(tmp_path, loop, args, line):
    """The module does not exist: the usage error comes before any import."""
    status, stderr = _proc.run_to_exit(["--loop", loop, "nosuch:app", *args], tmp_path)
    assert (status, stderr) == (2, f"skirr: error: {line}\n")
