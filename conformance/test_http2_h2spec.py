"""h2spec's server cases (h2spec 2.6, github.com/summerwind/h2spec: its generic, http2 and hpack
groups), written again from RFC 9113 and RFC 7541 as raw frames to the real server
(spec/http2.toml RFC9113-h2spec-server-cases), ids as h2spec numbers them ("http2/5.1/12"); then
further checks of the same kind that h2spec lacks ("extra/...").

Every case is a row of the tables below (GENERIC, HTTP2, HPACK, EXTRA): the bytes the client writes once the connection is up (h2spec's
handshake: the preface and a SETTINGS, then the server's SETTINGS and the ACK of ours), with a
`Wait` between them where h2spec waits, and the outcomes expected, in order, each exact:

- GOAWAY(code, last_stream_id): a connection error, and then the connection closed;
- RST(stream, code): a stream error on that stream;
- RESPONSE(stream, status, body): the app's answer (`app` below), complete;
- PING_ACK(data), SETTINGS_ACK, DATA(stream, length): the frame the case is about;
- CLOSED: the connection closed with none of these first.

After the last outcome, unless the connection ended, a PING must still be acknowledged: a stream
error or a success left the connection usable. Where h2spec accepts two answers (a stream error or
a connection error, GOAWAY or a bare close) the row asserts the one skirr gives: nghttp2 makes most
of RFC 9113's stream errors connection errors, as §5.4.1 allows. The client reads with
H2Client.frames_until (conformance/h2_util.py): h2's state machine never sees these frames.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import hpack
import pytest
from h2.errors import ErrorCodes as E
from hyperframe.frame import (DataFrame, GoAwayFrame, HeadersFrame, PingFrame, RstStreamFrame,
                              SettingsFrame)

from h2_util import ConnectionClosed, H2Client, hpack_int, raw_frame

RULE = "RFC9113-h2spec-server-cases"
pytestmark = pytest.mark.rule(RULE)

SHORT = 2.0  # seconds: the wait for the close that must follow a GOAWAY
# Frame types and flags (RFC 9113 §6)
DATA_, HEADERS_, PRIORITY_, RST_STREAM_, SETTINGS_, PUSH_PROMISE_, PING_, GOAWAY_, \
    WINDOW_UPDATE_, CONTINUATION_ = range(10)
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
# SETTINGS identifiers (RFC 9113 §6.5.2)
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, \
    MAX_HEADER_LIST_SIZE = range(1, 7)
PING_DATA = b"h2spec\x00\x00"
BODY = b"hello"  # the app's answer to anything but a POST


async def app(scope, receive, send):
    """200 with the request's body for a POST, BODY otherwise (read whole first)."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        m = await receive()
        if m["type"] != "http.request":
            return
        body += m.get("body", b"")
        if not m.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body",
                "body": body if scope["method"] == "POST" else BODY})


# ---- what the client writes ---------------------------------------------------------------------


def fields(*extra, method=b"GET", path=b"/", scheme=b"http", authority=b"testserver") -> list:
    return [(b":method", method), (b":scheme", scheme), (b":path", path),
            (b":authority", authority), *extra]


def block(flds: list) -> bytes:
    """A field block from a fresh encoder (literals and static indexes: no reference to what an
    earlier block put in the server's dynamic table)."""
    return hpack.Encoder().encode(flds, huffman=False)


def lit(name: bytes, value: bytes, first: int = 0x00) -> bytes:
    """A literal field, new name, no Huffman (RFC 7541 §6.2): without indexing (0x00), with
    incremental indexing (0x40), never indexed (0x10)."""
    return bytes([first, len(name)]) + name + bytes([len(value)]) + value


GET = block(fields())
POST = block(fields(method=b"POST"))
DUMMY = block([(b"x-dummy0", b"dummy")])  # h2spec's dummy header block for CONTINUATIONs


def headers(sid: int, blk: bytes = GET, end_stream: bool = True, end_headers: bool = True,
            flags: int = 0) -> bytes:
    return raw_frame(HEADERS_, flags | (END_STREAM if end_stream else 0)
                     | (END_HEADERS if end_headers else 0), sid, blk)


def post(sid: int, extra: tuple = ()) -> bytes:
    """A POST's HEADERS, its body to follow."""
    return headers(sid, block(fields(*extra, method=b"POST")), end_stream=False)


def data(sid: int, payload: bytes = b"test", end_stream: bool = True, flags: int = 0) -> bytes:
    return raw_frame(DATA_, flags | (END_STREAM if end_stream else 0), sid, payload)


def cont(sid: int, blk: bytes = DUMMY, end_headers: bool = True) -> bytes:
    return raw_frame(CONTINUATION_, END_HEADERS if end_headers else 0, sid, blk)


def priority(sid: int, dep: int = 0, weight: int = 255, exclusive: bool = False) -> bytes:
    return raw_frame(PRIORITY_, 0, sid, ((dep | (exclusive << 31)).to_bytes(4, "big")
                                         + bytes([weight])))


def rst(sid: int, code: int = E.CANCEL) -> bytes:
    return raw_frame(RST_STREAM_, 0, sid, int(code).to_bytes(4, "big"))


def settings(*pairs, flags: int = 0, sid: int = 0) -> bytes:
    return raw_frame(SETTINGS_, flags, sid,
                     b"".join(k.to_bytes(2, "big") + v.to_bytes(4, "big") for k, v in pairs))


def ping(payload: bytes = PING_DATA, flags: int = 0, sid: int = 0) -> bytes:
    return raw_frame(PING_, flags, sid, payload)


def goaway(code: int = E.NO_ERROR, last: int = 0, debug: bytes = b"", sid: int = 0) -> bytes:
    return raw_frame(GOAWAY_, 0, sid, last.to_bytes(4, "big") + int(code).to_bytes(4, "big")
                     + debug)


def window_update(sid: int, increment: int) -> bytes:
    return raw_frame(WINDOW_UPDATE_, 0, sid, increment.to_bytes(4, "big"))


@dataclasses.dataclass(frozen=True)
class Wait:
    """Read until a frame `until` accepts arrives (h2spec's waits); `want`: what that frame must
    be (as `seen` describes it)."""
    what: str
    until: Callable
    want: Optional[tuple] = None


SETTINGS_ACKED = Wait("SETTINGS ACK", lambda f: isinstance(f, SettingsFrame) and "ACK" in f.flags)


def ended(sid: int) -> Wait:
    return Wait(f"stream {sid} ended", lambda f: f.stream_id == sid and "END_STREAM" in f.flags)


def reset(sid: int, code: int) -> Wait:
    return Wait(f"stream {sid} reset", lambda f: isinstance(f, RstStreamFrame)
                and f.stream_id == sid, ("RST_STREAM", sid, name(code)))


def head_of(sid: int) -> Wait:
    return Wait(f"stream {sid}'s HEADERS", lambda f: isinstance(f, HeadersFrame)
                and f.stream_id == sid)


def data_of(sid: int, length: int) -> Wait:
    return Wait(f"stream {sid}'s DATA", lambda f: isinstance(f, DataFrame)
                and f.stream_id == sid, ("DATA", sid, length))


# ---- what the server answers --------------------------------------------------------------------


def name(code: int) -> str:
    try:
        return E(code).name
    except ValueError:
        return hex(code)


def GOAWAY(code: int, last: int) -> tuple:
    return ("GOAWAY", name(code), last, "then closed")


def RST(sid: int, code: int) -> tuple:
    return ("RST_STREAM", sid, name(code))


def RESPONSE(sid: int, status: int = 200, body: bytes = BODY) -> tuple:
    return ("response", sid, status, body)


def PING_ACK(payload: bytes = PING_DATA) -> tuple:
    return ("PING ACK", payload)


def DATA(sid: int, length: int) -> tuple:
    return ("DATA", sid, length)


SETTINGS_ACK = ("SETTINGS ACK",)
CLOSED = ("closed",)


def seen(f) -> tuple:
    """A DATA or RST_STREAM frame as the outcomes name it."""
    if isinstance(f, DataFrame):
        return DATA(f.stream_id, len(f.data))
    if isinstance(f, RstStreamFrame):
        return RST(f.stream_id, f.error_code)
    return (type(f).__name__,)


def outcome(c: H2Client, data_counts: bool) -> tuple:
    """The next thing the server does that a case is about (see the module docstring); DATA
    frames count alone when data_counts, else only as a response's body."""
    status: dict = {}
    bodies: dict = {}

    def decisive(f) -> bool:
        if isinstance(f, HeadersFrame) and f.stream_id not in status:
            status[f.stream_id] = int(dict(f.fields)[b":status"])
        if isinstance(f, DataFrame):
            bodies[f.stream_id] = bodies.get(f.stream_id, b"") + bytes(f.data)
        return (isinstance(f, (GoAwayFrame, RstStreamFrame))
                or isinstance(f, (PingFrame, SettingsFrame)) and "ACK" in f.flags
                or isinstance(f, (HeadersFrame, DataFrame)) and "END_STREAM" in f.flags
                or data_counts and isinstance(f, DataFrame))

    f = c.frames_until(decisive)[-1]
    if isinstance(f, ConnectionClosed):
        return CLOSED
    if isinstance(f, GoAwayFrame):
        try:
            rest = c.frames_until(lambda f: False, timeout=SHORT)
            after = "then closed" if len(rest) == 1 else f"then {rest}"
        except AssertionError:
            after = f"left open {SHORT} s"
        return ("GOAWAY", name(f.error_code), f.last_stream_id, after)
    if isinstance(f, RstStreamFrame) or data_counts and "END_STREAM" not in f.flags:
        return seen(f)
    if isinstance(f, PingFrame):
        return PING_ACK(bytes(f.opaque_data))
    if isinstance(f, SettingsFrame):
        return SETTINGS_ACK
    return RESPONSE(f.stream_id, status.get(f.stream_id), bodies.get(f.stream_id, b""))


def handshake(c: H2Client) -> dict:
    """h2spec's: the server's first frame is its SETTINGS (returned as a dict), then the ACK of
    ours."""
    first = c.frames_until(lambda f: True)[0]
    assert isinstance(first, SettingsFrame) and "ACK" not in first.flags, first
    c.frames_until(SETTINGS_ACKED.until)
    return dict(first.settings)


# ---- the cases ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    id: str
    send: tuple        # bytes to write, Wait to read until
    expect: tuple      # outcome tuples, in order


def case(cid: str, send, *expect) -> pytest.param:
    send = send if isinstance(send, tuple) else (send,)
    return pytest.param(Case(cid, send, expect), id=cid)


def hpack_case(cid: str, blk: bytes, *expect) -> pytest.param:
    """A GET whose field block is `blk`."""
    return case(cid, headers(1, blk), *expect)


def malformed(cid: str, blk: bytes) -> pytest.param:
    """A request RFC 9113 §8.1.1 calls malformed: RST_STREAM PROTOCOL_ERROR on its stream."""
    return case(cid, headers(1, blk), RST(1, E.PROTOCOL_ERROR))


# RFC 7541 Appendix A: :method GET (2), :scheme http (6), :path / (4); :authority by name (1)
STATIC = b"\x82\x86\x84"
AUTHORITY = hpack_int(1, 4) + bytes([len(b"testserver")]) + b"testserver"
BASE = STATIC + AUTHORITY
CONNECTION_LIMIT = 100  # skirr's SETTINGS_MAX_CONCURRENT_STREAMS (h2-settings)
SERVER_SETTINGS = {MAX_CONCURRENT_STREAMS: 100, INITIAL_WINDOW_SIZE: 1048576, MAX_FRAME_SIZE: 16384,
                   MAX_HEADER_LIST_SIZE: 65536, ENABLE_PUSH: 0}

GENERIC = [
    # 2: streams and multiplexing
    case("generic/2/1", (priority(1), ping()), PING_ACK()),
    case("generic/2/2", (settings((INITIAL_WINDOW_SIZE, 0)), SETTINGS_ACKED, headers(1),
                         window_update(1, 1)), DATA(1, 1)),
    case("generic/2/3", (settings((INITIAL_WINDOW_SIZE, 0)), SETTINGS_ACKED, headers(1),
                         priority(1), window_update(1, 1)), DATA(1, 1)),
    case("generic/2/4", (headers(1), rst(1), ping()), PING_ACK()),
    case("generic/2/5", (headers(1), ended(1), priority(1), ping()), PING_ACK()),
    # 3.1 DATA, 3.2 HEADERS
    case("generic/3.1/1", (post(1), data(1)), RESPONSE(1, body=b"test")),
    case("generic/3.1/2", (post(1), data(1, end_stream=False), data(1)),
         RESPONSE(1, body=b"testtest")),
    case("generic/3.1/3", (post(1), data(1, b"\x05test" + b"\x00" * 5, flags=PADDED)),
         RESPONSE(1, body=b"test")),
    case("generic/3.2/1", headers(1), RESPONSE(1)),
    case("generic/3.2/2", headers(1, bytes([8]) + GET + b"\x00" * 8, flags=PADDED), RESPONSE(1)),
    case("generic/3.2/3", headers(1, b"\x00\x00\x00\x00\xff" + GET, flags=PRIORITY_FLAG),
         RESPONSE(1)),
    # 3.3 PRIORITY
    case("generic/3.3/1", (priority(1, weight=0), headers(1)), RESPONSE(1)),
    case("generic/3.3/2", (priority(1, weight=255), headers(1)), RESPONSE(1)),
    case("generic/3.3/3", (priority(3, dep=1, weight=0), headers(1)), RESPONSE(1)),
    case("generic/3.3/4", (priority(1, weight=0, exclusive=True), headers(1)), RESPONSE(1)),
    case("generic/3.3/5", (priority(3), headers(1)), RESPONSE(1)),
    # 3.4 RST_STREAM, 3.5 SETTINGS, 3.7 PING, 3.8 GOAWAY
    case("generic/3.4/1", (headers(1, end_stream=False), rst(1), ping()), PING_ACK()),
    case("generic/3.5/1", settings((HEADER_TABLE_SIZE, 4096), (ENABLE_PUSH, 1),
                                   (MAX_CONCURRENT_STREAMS, 100), (INITIAL_WINDOW_SIZE, 65535),
                                   (MAX_FRAME_SIZE, 16384), (MAX_HEADER_LIST_SIZE, 100)),
         SETTINGS_ACK),
    case("generic/3.7/1", ping(), PING_ACK()),
    # a GOAWAY from the client, no stream open: skirr closes at once, the PING unanswered
    case("generic/3.8/1", (goaway(debug=b"h2spec"), ping()), CLOSED),
    # 3.9 WINDOW_UPDATE, 3.10 CONTINUATION
    case("generic/3.9/1", (window_update(0, 1), ping()), PING_ACK()),
    case("generic/3.9/2", (headers(1), window_update(1, 1)), RESPONSE(1)),
    case("generic/3.10/1", (headers(1, GET[:5], end_headers=False), cont(1, GET[5:])), RESPONSE(1)),
    case("generic/3.10/2", (headers(1, GET[:5], end_headers=False), cont(1, GET[5:10], False),
                            cont(1, GET[10:])), RESPONSE(1)),
    # 4: HTTP message exchanges
    case("generic/4/1", headers(1), RESPONSE(1)),
    case("generic/4/2", headers(1, block(fields(method=b"HEAD"))), RESPONSE(1, body=b"")),
    case("generic/4/3", (post(1), data(1)), RESPONSE(1, body=b"test")),
    case("generic/4/4", (post(1, ((b"trailer", b"x-test"),)), data(1, end_stream=False),
                         headers(1, block([(b"x-test", b"ok")]))), RESPONSE(1, body=b"test")),
    # 5: HPACK, each representation after h2spec's request fields (h2spec's bytes)
    hpack_case("generic/5/1", GET + b"\xba", RESPONSE(1)),
    hpack_case("generic/5/2", GET + b"\x40\x87\xb5\x05\xb1\x61\xcc\x5a\x93\x84\x9c\x48\xac\xa4",
               RESPONSE(1)),
    hpack_case("generic/5/3", GET + b"\x40\x0auser-agent\x06h2spec", RESPONSE(1)),
    hpack_case("generic/5/4", GET + b"\x40\x06x-test\x06h2spec", RESPONSE(1)),
    hpack_case("generic/5/5", GET + b"\x40\x85\xf2\xb2\x4a\x84\xff\x84\x9c\x48\xac\xa4",
               RESPONSE(1)),
    hpack_case("generic/5/6", GET + b"\x00\x0auser-agent\x06h2spec", RESPONSE(1)),
    hpack_case("generic/5/7", GET + b"\x00\x87\xb5\x05\xb1\x61\xcc\x5a\x93\x84\x9c\x48\xac\xa4",
               RESPONSE(1)),
    hpack_case("generic/5/8", GET + b"\x00\x06x-test\x06h2spec", RESPONSE(1)),
    hpack_case("generic/5/9", GET + b"\x00\x85\xf2\xb2\x4a\x84\xff\x84\x9c\x48\xac\xa4",
               RESPONSE(1)),
    hpack_case("generic/5/10", GET + b"\x10\x0auser-agent\x06h2spec", RESPONSE(1)),
    hpack_case("generic/5/11", GET + b"\x10\x87\xb5\x05\xb1\x61\xcc\x5a\x93\x84\x9c\x48\xac\xa4",
               RESPONSE(1)),
    hpack_case("generic/5/12", GET + b"\x10\x85\xf2\xb2\x4a\x84\xff\x84\x9c\x48\xac\xa4",
               RESPONSE(1)),
    hpack_case("generic/5/13", GET + b"\x10\x85\xf2\xb2\x4a\x84\xff\x84\x9c\x48\xac\xa4",
               RESPONSE(1)),
    hpack_case("generic/5/14", hpack_int(128, 5, 0x20) + GET, RESPONSE(1)),
    hpack_case("generic/5/15", b"\x3f\x61\x3f\xe1\x1f" + GET, RESPONSE(1)),
]

# A HEADERS frame one octet over SETTINGS_MAX_FRAME_SIZE (h2spec: five 4000-octet fields)
BIG_HEADERS = block(fields(*[(b"x-dummy%d" % i, b"x" * 4000) for i in range(5)]))

HTTP2 = [
    # 4.1 frame format, 4.2 frame size, 4.3 header compression
    case("http2/4.1/1", (raw_frame(0x16, 0, 0, b"\x00" * 8), ping()), PING_ACK()),
    case("http2/4.1/2", ping(b"\x00" * 8, flags=0x16), PING_ACK(b"\x00" * 8)),
    case("http2/4.1/3", ping(b"\x00" * 8, sid=0x80000000), PING_ACK(b"\x00" * 8)),
    case("http2/4.2/1", (post(1), data(1, b"x" * 16384)), RESPONSE(1, body=b"x" * 16384)),
    case("http2/4.2/2", (post(1), data(1, b"x" * 16385)), GOAWAY(E.FRAME_SIZE_ERROR, 1)),
    case("http2/4.2/3", headers(1, BIG_HEADERS), GOAWAY(E.FRAME_SIZE_ERROR, 0)),
    case("http2/4.3/1", raw_frame(HEADERS_, END_STREAM | END_HEADERS, 1, b"\x40"),
         GOAWAY(E.COMPRESSION_ERROR, 1)),
    case("http2/4.3/2", (headers(1, end_headers=False), priority(1), cont(1)),
         GOAWAY(E.PROTOCOL_ERROR, 1)),
    case("http2/4.3/3", (headers(1, end_headers=False), headers(3), cont(1)),
         GOAWAY(E.PROTOCOL_ERROR, 1)),
    # 5.1 stream states
    case("http2/5.1/1", data(1), GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/5.1/2", rst(1), GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/5.1/3", window_update(1, 100), GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/5.1/4", cont(1, GET), GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/5.1/5", (headers(1), data(1)), GOAWAY(E.STREAM_CLOSED, 1)),
    case("http2/5.1/6", (headers(1), headers(1)), GOAWAY(E.STREAM_CLOSED, 1)),
    case("http2/5.1/7", (headers(1), cont(1)), GOAWAY(E.PROTOCOL_ERROR, 1)),
    case("http2/5.1/8", (post(1), rst(1), data(1)), GOAWAY(E.STREAM_CLOSED, 1)),
    case("http2/5.1/9", (post(1), rst(1), headers(1)), GOAWAY(E.STREAM_CLOSED, 1)),
    case("http2/5.1/10", (post(1), rst(1), cont(1)), GOAWAY(E.PROTOCOL_ERROR, 1)),
    case("http2/5.1/11", (headers(1), ended(1), data(1)), GOAWAY(E.STREAM_CLOSED, 1)),
    case("http2/5.1/12", (headers(1), ended(1), headers(1)), GOAWAY(E.STREAM_CLOSED, 1)),
    case("http2/5.1/13", (headers(1), ended(1), cont(1)), GOAWAY(E.PROTOCOL_ERROR, 1)),
    # 5.1.1 stream identifiers, 5.1.2 concurrency
    case("http2/5.1.1/1", headers(2), GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/5.1.1/2", (headers(5), ended(5), headers(3)), GOAWAY(E.PROTOCOL_ERROR, 5)),
    case("http2/5.1.2/1", (settings((INITIAL_WINDOW_SIZE, 0)), SETTINGS_ACKED,
                           b"".join(headers(1 + 2 * i) for i in range(CONNECTION_LIMIT + 1))),
         GOAWAY(E.PROTOCOL_ERROR, 2 * CONNECTION_LIMIT - 1)),
    # 5.3.1 stream dependencies, 5.4.1 connection errors, 5.5 extensions
    case("http2/5.3.1/1", headers(1, b"\x00\x00\x00\x01\x0f" + GET, flags=PRIORITY_FLAG),
         GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/5.3.1/2", priority(1, dep=1), GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/5.4.1/1", ping(b"\x00" * 8, sid=3), GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/5.4.1/2", ping(b"\x00" * 8, sid=3), GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/5.5/1", (raw_frame(0x16, 0, 0, b"\x00" * 8), ping()), PING_ACK()),
    case("http2/5.5/2", (headers(1, end_headers=False), raw_frame(0x16, 0, 0, b"\x00" * 8)),
         GOAWAY(E.PROTOCOL_ERROR, 1)),
    # 6.1 DATA, 6.2 HEADERS, 6.3 PRIORITY, 6.4 RST_STREAM
    case("http2/6.1/1", (post(1), data(0)), GOAWAY(E.PROTOCOL_ERROR, 1)),
    case("http2/6.1/2", (headers(1), data(1)), GOAWAY(E.STREAM_CLOSED, 1)),
    case("http2/6.1/3", (post(1), raw_frame(DATA_, END_STREAM | PADDED, 1, b"\x06Test")),
         GOAWAY(E.PROTOCOL_ERROR, 1)),
    case("http2/6.2/1", (headers(1, end_headers=False), priority(1), cont(1)),
         GOAWAY(E.PROTOCOL_ERROR, 1)),
    case("http2/6.2/2", (headers(1, end_headers=False), headers(3), cont(1)),
         GOAWAY(E.PROTOCOL_ERROR, 1)),
    case("http2/6.2/3", headers(0), GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/6.2/4", raw_frame(HEADERS_, END_STREAM | END_HEADERS | PADDED, 1,
                                  bytes([len(GET) + 2]) + GET),
         GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/6.3/1", priority(0, dep=1), GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/6.3/2", (post(1), raw_frame(PRIORITY_, 0, 1, b"\x80\x00\x00\x01")),
         GOAWAY(E.FRAME_SIZE_ERROR, 1)),
    case("http2/6.4/1", rst(0), GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/6.4/2", rst(1), GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/6.4/3", (post(1), raw_frame(RST_STREAM_, 0, 1, b"\x00\x00\x00")),
         GOAWAY(E.FRAME_SIZE_ERROR, 1)),
    # 6.5 SETTINGS
    case("http2/6.5/1", raw_frame(SETTINGS_, ACK, 0, b"\x00"), GOAWAY(E.FRAME_SIZE_ERROR, 0)),
    case("http2/6.5/2", settings((MAX_CONCURRENT_STREAMS, 100), sid=1),
         GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/6.5/3", raw_frame(SETTINGS_, 0, 0, b"\x00\x03\x00"),
         GOAWAY(E.FRAME_SIZE_ERROR, 0)),
    case("http2/6.5.2/1", settings((ENABLE_PUSH, 2)), GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/6.5.2/2", settings((INITIAL_WINDOW_SIZE, 2 ** 31)),
         GOAWAY(E.FLOW_CONTROL_ERROR, 0)),
    case("http2/6.5.2/3", settings((MAX_FRAME_SIZE, 16383)), GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/6.5.2/4", settings((MAX_FRAME_SIZE, 16777216)), GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/6.5.2/5", (settings((0xFF, 1)), ping()), SETTINGS_ACK, PING_ACK()),
    case("http2/6.5.3/1", (settings((INITIAL_WINDOW_SIZE, 100), (INITIAL_WINDOW_SIZE, 1)),
                           SETTINGS_ACKED, headers(1)), DATA(1, 1)),
    case("http2/6.5.3/2", settings((ENABLE_PUSH, 0)), SETTINGS_ACK),
    # 6.7 PING, 6.8 GOAWAY
    case("http2/6.7/1", ping(), PING_ACK()),
    case("http2/6.7/2", (ping(b"unexpect", flags=ACK), ping(b"expected")), PING_ACK(b"expected")),
    case("http2/6.7/3", ping(b"\x00" * 8, sid=1), GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/6.7/4", ping(b"\x00" * 6), GOAWAY(E.FRAME_SIZE_ERROR, 0)),
    case("http2/6.8/1", goaway(sid=1), GOAWAY(E.PROTOCOL_ERROR, 0)),
    # 6.9 WINDOW_UPDATE, 6.9.1 the flow-control window, 6.9.2 its initial size
    case("http2/6.9/1", window_update(0, 0), GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("http2/6.9/2", (post(1), window_update(1, 0)), GOAWAY(E.PROTOCOL_ERROR, 1)),
    case("http2/6.9/3", raw_frame(WINDOW_UPDATE_, 0, 0, b"\x00\x00\x01"),
         GOAWAY(E.FRAME_SIZE_ERROR, 0)),
    case("http2/6.9.1/1", (settings((INITIAL_WINDOW_SIZE, 1)), SETTINGS_ACKED, headers(1)),
         DATA(1, 1)),
    case("http2/6.9.1/2", (window_update(0, 2 ** 31 - 1), window_update(0, 2 ** 31 - 1)),
         GOAWAY(E.FLOW_CONTROL_ERROR, 0)),
    case("http2/6.9.1/3", (post(1), window_update(1, 2 ** 31 - 1), window_update(1, 2 ** 31 - 1)),
         RST(1, E.FLOW_CONTROL_ERROR)),
    case("http2/6.9.2/1", (settings((INITIAL_WINDOW_SIZE, 0)), SETTINGS_ACKED, headers(1),
                           head_of(1), settings((INITIAL_WINDOW_SIZE, 1))),
         SETTINGS_ACK, DATA(1, 1)),
    case("http2/6.9.2/2", (settings((INITIAL_WINDOW_SIZE, 3)), SETTINGS_ACKED, headers(1),
                           data_of(1, 3), settings((INITIAL_WINDOW_SIZE, 2)), SETTINGS_ACKED,
                           window_update(1, 2)),
         DATA(1, 1)),
    case("http2/6.9.2/3", raw_frame(SETTINGS_, 0, 0, b"\x00\x04\x80\x00\x00\x00"),
         GOAWAY(E.FLOW_CONTROL_ERROR, 0)),
    # 6.10 CONTINUATION
    case("http2/6.10/1", (headers(1, end_headers=False), cont(1, DUMMY, False), cont(1)),
         RESPONSE(1)),
    case("http2/6.10/2", (headers(1, POST, end_stream=False, end_headers=False),
                          cont(1, DUMMY, False), data(1)),
         GOAWAY(E.PROTOCOL_ERROR, 1)),
    case("http2/6.10/3", (headers(1, end_headers=False), cont(0)), GOAWAY(E.PROTOCOL_ERROR, 1)),
    case("http2/6.10/4", (headers(1), cont(1)), GOAWAY(E.PROTOCOL_ERROR, 1)),
    case("http2/6.10/5", (headers(1, end_headers=False), cont(1), cont(1)),
         GOAWAY(E.PROTOCOL_ERROR, 1)),
    case("http2/6.10/6", (headers(1, POST, end_stream=False, end_headers=False), data(1),
                          cont(1, DUMMY, False), cont(0)),
         GOAWAY(E.PROTOCOL_ERROR, 1)),
    # 7 error codes: a GOAWAY from the client (no stream open) closes at once, as generic/3.8/1
    case("http2/7/1", (goaway(0xFF), ping()), CLOSED),
    case("http2/7/2", (post(1), rst(1, 0xFF), ping()), PING_ACK()),
    # 8.1 request/response exchange, 8.1.2 header fields (RFC 7540's numbering, h2spec's)
    case("http2/8.1/1", (post(1), data(1, end_stream=False),
                         headers(1, block([(b"x-test", b"ok")]), end_stream=False)),
         RST(1, E.PROTOCOL_ERROR)),
    malformed("http2/8.1.2/1", block(fields((b"X-TEST", b"ok")))),
    malformed("http2/8.1.2.1/1", block(fields((b":test", b"ok")))),
    malformed("http2/8.1.2.1/2", block(fields((b":status", b"200")))),
    case("http2/8.1.2.1/3", (post(1), data(1, end_stream=False),
                             headers(1, block([(b":method", b"POST")]))),
         RST(1, E.PROTOCOL_ERROR)),
    malformed("http2/8.1.2.1/4", block([(b":method", b"GET"), (b":scheme", b"http"),
                                        (b":path", b"/"), (b"x-test", b"ok"),
                                        (b":authority", b"testserver")])),
    malformed("http2/8.1.2.2/1", block(fields((b"connection", b"keep-alive")))),
    malformed("http2/8.1.2.2/2", block(fields((b"te", b"trailers, deflate")))),
    malformed("http2/8.1.2.3/1", block(fields(path=b""))),
    malformed("http2/8.1.2.3/2", block(fields()[1:])),
    malformed("http2/8.1.2.3/3", block(fields()[:1] + fields()[2:])),
    malformed("http2/8.1.2.3/4", block(fields()[:2] + fields()[3:])),
    malformed("http2/8.1.2.3/5", block(fields()[:1] + fields())),
    malformed("http2/8.1.2.3/6", block(fields()[:2] + fields()[1:])),
    malformed("http2/8.1.2.3/7", block(fields()[:3] + fields()[2:])),
    case("http2/8.1.2.6/1", (post(1, ((b"content-length", b"1"),)), data(1)),
         RST(1, E.PROTOCOL_ERROR)),
    case("http2/8.1.2.6/2", (post(1, ((b"content-length", b"1"),)), data(1, end_stream=False),
                             data(1)),
         RST(1, E.PROTOCOL_ERROR)),
    # 8.2 server push: a client's PUSH_PROMISE
    case("http2/8.2/1", raw_frame(PUSH_PROMISE_, END_HEADERS, 1, b"\x00\x00\x00\x03" + GET),
         GOAWAY(E.PROTOCOL_ERROR, 0)),
]

HPACK = [
    hpack_case("hpack/2.3.3/1", GET + b"\xc6", GOAWAY(E.COMPRESSION_ERROR, 1)),
    hpack_case("hpack/2.3.3/2", GET + b"\x7f\x07\x00", GOAWAY(E.COMPRESSION_ERROR, 1)),
    hpack_case("hpack/4.2/1", GET + b"\x21", GOAWAY(E.COMPRESSION_ERROR, 1)),
    hpack_case("hpack/5.2/1", GET + b"\x00\x85\xf2\xb2\x4a\x84\xff\x84\x49\x50\x9f\xff",
               GOAWAY(E.COMPRESSION_ERROR, 1)),
    hpack_case("hpack/5.2/2", GET + b"\x00\x85\xf2\xb2\x4a\x84\xff\x83\x49\x50\x90",
               GOAWAY(E.COMPRESSION_ERROR, 1)),
    hpack_case("hpack/5.2/3", GET + b"\x00\x85\xf2\xb2\x4a\x84\xff\x87\x49\x51\xff\xff\xff\xfa\x7f",
               GOAWAY(E.COMPRESSION_ERROR, 1)),
    hpack_case("hpack/6.1/1", GET + b"\x80", GOAWAY(E.COMPRESSION_ERROR, 1)),
    hpack_case("hpack/6.3/1", hpack_int(4097, 5, 0x20) + GET, GOAWAY(E.COMPRESSION_ERROR, 1)),
]

# Beyond h2spec, the sweep's further checks of the same kind.
EXTRA = [
    # each SETTINGS parameter alone (generic/3.5/1 sends them together)
    *[case(f"extra/3.5/{ident}", settings((ident, value)), SETTINGS_ACK)
      for ident, value in ((HEADER_TABLE_SIZE, 4096), (ENABLE_PUSH, 1),
                           (MAX_CONCURRENT_STREAMS, 100), (INITIAL_WINDOW_SIZE, 65535),
                           (MAX_FRAME_SIZE, 16384), (MAX_HEADER_LIST_SIZE, 65535), (0xFF, 1))],
    # field names and values RFC 9113 §8.2.1 makes malformed, connection-specific fields (§8.2.2)
    *[malformed(f"extra/8.2.1/{i}", block(fields(f)))
      for i, f in enumerate([(b"x-test", b"a\x00b"), (b"x-test", b"a\rb"), (b"x-test", b"a\nb"),
                             (b"x-test", b" ab"), (b"x-test", b"ab\t"), (b"x test", b"ab"),
                             (b"x-test\x7f", b"ab"), (b"", b"ab"), (b"x:test", b"ab")], 1)],
    *[malformed(f"extra/8.2.2/{i}", block(fields(f)))
      for i, f in enumerate([(b"keep-alive", b"timeout=5"), (b"proxy-connection", b"keep-alive"),
                             (b"transfer-encoding", b"chunked"), (b"upgrade", b"h2c")], 1)],
    case("extra/8.2.2/5", headers(1, block(fields((b"te", b"trailers")))), RESPONSE(1)),
    # §8.3.1, §8.5: :authority with userinfo, OPTIONS with an empty :path, CONNECT's fields
    malformed("extra/8.3.1/1", block(fields(authority=b"user@testserver"))),
    malformed("extra/8.3.1/2", block(fields(method=b"OPTIONS", path=b""))),
    malformed("extra/8.5/1", block(fields(method=b"CONNECT"))),
    malformed("extra/8.5/2", block([(b":method", b"CONNECT")])),
    # §8.1.1 content-length
    case("extra/8.1.1/1", (post(1, ((b"content-length", b"4"),)), data(1)),
         RESPONSE(1, body=b"test")),
    case("extra/8.1.1/2", (post(1, ((b"content-length", b"10"),)), data(1)),
         RST(1, E.PROTOCOL_ERROR)),
    case("extra/8.1.1/3", headers(1, block(fields((b"content-length", b"4"), method=b"POST"))),
         RST(1, E.PROTOCOL_ERROR)),
    # §8.1: trailers without END_STREAM
    case("extra/8.1/1", (post(1), data(1, end_stream=False),
                         headers(1, block([(b"x-t", b"1")]), end_stream=False)),
         RST(1, E.PROTOCOL_ERROR)),
    # §5.1 closed: frames on a stream the server reset, or that ended both ways, are ignored
    case("extra/5.1/1", (post(1, ((b"content-length", b"1"),)), data(1, end_stream=False),
                         reset(1, E.PROTOCOL_ERROR), data(1, b"more"), ping()),
         PING_ACK()),
    case("extra/5.1/2", (post(1, ((b"content-length", b"1"),)), data(1, end_stream=False),
                         reset(1, E.PROTOCOL_ERROR), headers(1, block([(b"x-trailer", b"1")])),
                         ping()),
         PING_ACK()),
    case("extra/5.1/3", (headers(1), ended(1), window_update(1, 1), ping()), PING_ACK()),
    case("extra/5.1/4", (headers(1), ended(1), rst(1), ping()), PING_ACK()),
    # §5.1 idle: DATA, WINDOW_UPDATE, RST_STREAM on a server-initiated (even) stream
    case("extra/5.1/5", data(2, b"x", end_stream=False), GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("extra/5.1/6", window_update(2, 1), GOAWAY(E.PROTOCOL_ERROR, 0)),
    case("extra/5.1/7", rst(2), GOAWAY(E.PROTOCOL_ERROR, 0)),
    # §5.3.1 a PRIORITY on an open stream naming itself
    case("extra/5.3.1/1", (post(1), priority(1, dep=1)), GOAWAY(E.PROTOCOL_ERROR, 1)),
    # §6.8: a client's GOAWAY after its request: the request is still answered, then the close
    case("extra/6.8/1", (headers(1), goaway()), RESPONSE(1), CLOSED),
    # §8.4: a PUSH_PROMISE on an open client stream
    case("extra/8.4/1", (post(1), raw_frame(PUSH_PROMISE_, END_HEADERS, 1,
                                            b"\x00\x00\x00\x02" + GET)),
         GOAWAY(E.PROTOCOL_ERROR, 1)),
    # HPACK: a table size of 0 (responses still decodable), a size update after a field (RFC 7541
    # §4.2), an integer past 2^32 (§5.1), a string longer than the block (§5.2), and the dynamic
    # table kept by a request refused as malformed (RFC 9113 §4.3)
    case("extra/hpack/1", (settings((HEADER_TABLE_SIZE, 0)), SETTINGS_ACKED, headers(1),
                           ended(1), headers(3)), RESPONSE(3)),
    hpack_case("extra/hpack/2", STATIC + b"\x20" + AUTHORITY, GOAWAY(E.COMPRESSION_ERROR, 1)),
    hpack_case("extra/hpack/3", BASE + b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f",
               GOAWAY(E.COMPRESSION_ERROR, 1)),
    hpack_case("extra/hpack/4", BASE + b"\x00\x06x-test\x7f\xff\x7f",
               GOAWAY(E.COMPRESSION_ERROR, 1)),
    case("extra/hpack/5", (headers(1, BASE + lit(b"x-dyn", b"v", 0x40) + lit(b"X-UP", b"1")),
                           headers(3, BASE + b"\xbe")),
         RST(1, E.PROTOCOL_ERROR), RESPONSE(3)),
]


def run(c: H2Client, case: Case) -> list:
    """Writes the case's bytes (reading at each Wait), then reads one outcome per expected one.
    The frames between two waits go out in one write, read by skirr in one go on loopback: no
    app's response comes between a request and the frames written with it."""
    out = b""
    for step in case.send:
        if isinstance(step, Wait):
            c.send_raw(out)
            out = b""
            f = c.frames_until(step.until)[-1]
            assert not isinstance(f, ConnectionClosed), f"closed while waiting for {step.what}"
            if step.want is not None:
                assert seen(f) == step.want, f"{step.what}: {f}"
        else:
            out += step
    c.send_raw(out)
    return [outcome(c, data_counts=want[0] == "DATA") for want in case.expect]


def still_open(c: H2Client, got: list) -> None:
    """A connection the outcomes did not end still answers a PING."""
    if got[-1] == CLOSED or got[-1][0] == "GOAWAY":
        return
    c.send_raw(ping(b"and then"))
    assert outcome(c, False) == PING_ACK(b"and then")


@pytest.mark.parametrize("case", GENERIC + HTTP2 + HPACK + EXTRA)
def test_h2spec_case(serve, case):
    with serve(app) as srv:
        with H2Client.open(srv.port) as c:
            handshake(c)
            got = run(c, case)
            assert got == list(case.expect)
            still_open(c, got)


@pytest.mark.parametrize("cid", ["generic/1/1", "http2/3.5/1"])
def test_h2spec_preface(serve, cid):
    """The client's preface and SETTINGS: the server's first frame is its SETTINGS (h2-settings's
    values), not an ACK."""
    with serve(app) as srv:
        with H2Client.open(srv.port) as c:
            assert handshake(c) == SERVER_SETTINGS


def test_h2spec_invalid_preface(serve):
    """http2/3.5/2: bytes that are not the preface. With --http 2 (h2spec's server: HTTP/2 only)
    the server's SETTINGS and connection window, then GOAWAY PROTOCOL_ERROR naming no stream, then
    the close (--http auto reads such bytes as HTTP/1.1: h2-prior-knowledge)."""
    with serve(app, http="2") as srv:
        with H2Client.open(srv.port, preface=False) as c:
            c.send_raw(b"INVALID CONNECTION PREFACE\r\n\r\n")
            first = c.frames_until(lambda f: isinstance(f, SettingsFrame))
            assert [type(f).__name__ for f in first] == ["SettingsFrame"]
            assert dict(first[0].settings) == SERVER_SETTINGS
            assert outcome(c, False) == GOAWAY(E.PROTOCOL_ERROR, 0)
