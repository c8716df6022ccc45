"""Robustness, round 4: the WebSocket handshake and what an app sends it (issue 35 items 6, 9 and
10; spec/websocket.toml, spec/robustness.toml).

- Item 6: the protocol switch follows the request message (RFC 9110 §7.8), so a handshake that
  carries content is refused (400, closed, the app never called) instead of reading the content
  as the first frames; the other upgrade paths (`--ws none`, HTTP/1.0, `h2c` and unknown tokens)
  are plain HTTP with their bodies read as usual; bytes behind a valid handshake are the
  WebSocket's, bytes behind a refused one reach nothing.
- Item 9: websocket.accept may not send a field the handshake owns (RuntimeError naming it), its
  subprotocol must be one the client offered, and the denial response refuses the fields that
  only a 101 carries.
- Item 10: every integer from the app is checked as a Python int before it narrows (close code,
  the denial's status, the native Server's byte counts), and every format string of the
  extension is ASCII (a `§` in one turned the close-code error into PyUnicode_FromFormatV's).

Every server case runs on asyncio and uvloop (the ``serve`` fixture); exact bytes and exact
exception messages are asserted.
"""
from __future__ import annotations

import base64
import hashlib
import logging
import re
import socket
from pathlib import Path

import pytest

from _ws import KEY, frame, upgrade
from conftest import IO_TIMEOUT, Recorder

rule = pytest.mark.rule

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 §1.3
ACCEPT = base64.b64encode(hashlib.sha1(KEY + GUID).digest())
SMUGGLED = b"\x81\x88\x00\x00\x00\x00SMUGGLED"  # a masked text frame "SMUGGLED" (mask 0)
NEXT = b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n"
DATE = re.compile(rb"\r\ndate: [A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT\r\n")


def undated(raw: bytes) -> bytes:
    """raw with its one Date field's value replaced by DATE (asserts there is exactly one)."""
    out, n = DATE.subn(b"\r\ndate: DATE\r\n", raw, count=2)
    assert n == 1, f"expected one date field, found {n}: {raw[:500]!r}"
    return out


def refusal(status_line: bytes, phrase: bytes) -> bytes:
    """skirr's own refusal (sk_resp_error), date aside."""
    return (status_line + b"\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: "
            + str(len(phrase)).encode() + b"\r\nconnection: close\r\ndate: DATE\r\nserver: skirr"
            b"\r\n\r\n" + phrase)


ERROR_400 = refusal(b"HTTP/1.1 400 Bad Request", b"Bad Request")
ERROR_500 = refusal(b"HTTP/1.1 500 Internal Server Error", b"Internal Server Error")
ANSWER_426 = (b"HTTP/1.1 426 Upgrade Required\r\nsec-websocket-version: 13\r\ncontent-length: 16"
              b"\r\nconnection: close\r\ndate: DATE\r\nserver: skirr\r\n\r\nUpgrade Required")
HEAD_101 = (b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
            b"sec-websocket-accept: " + ACCEPT + b"\r\n")


def close_frame(code: int, reason: bytes = b"") -> bytes:
    """A server's Close frame (unmasked, RFC 6455 §5.5.1)."""
    payload = code.to_bytes(2, "big") + reason
    return bytes([0x88, len(payload)]) + payload


def recording_app(record: Recorder):
    """Any call is recorded as (type, path); an http call answers 200 with its body, a websocket
    one accepts, echoes text and records the websocket.disconnect event."""

    async def app(scope, receive, send):
        record.put((scope["type"], scope["path"]))
        if scope["type"] == "http":
            body = b""
            while True:
                event = await receive()
                body += event.get("body", b"")
                if not event.get("more_body"):
                    break
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", b"%d" % len(body))]})
            await send({"type": "http.response.body", "body": body})
            return
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        while True:
            event = await receive()
            if event["type"] == "websocket.disconnect":
                record.put(event)
                return
            await send({"type": "websocket.send", "text": event["text"]})

    return app


# ---- item 6: what framing a handshake request may carry -----------------------------------------


@rule("skirr-ws-handshake-without-content")
@pytest.mark.parametrize("data", [
    pytest.param(upgrade(extra=b"Content-Length: 14\r\n") + SMUGGLED, id="content-length"),
    pytest.param(upgrade(extra=b"Transfer-Encoding: chunked\r\n") + b"e\r\n" + SMUGGLED
                 + b"\r\n0\r\n\r\n", id="chunked"),
    pytest.param(upgrade(extra=b"Transfer-Encoding: chunked\r\n") + b"0\r\n\r\n",
                 id="chunked-empty"),
    pytest.param(upgrade(version=b"8", extra=b"Content-Length: 1\r\n") + b"x",
                 id="wrong-version-with-content"),
])
def test_handshake_with_content_is_refused(serve, data):
    """Issue 35 item 6: the handshake's content would be read as the first frames (the app got
    `SMUGGLED` as a message). RFC 9110 §7.8: the switch follows the request message. Any
    Transfer-Encoding or a Content-Length other than 0 gets 400 (not 426: content is checked
    first) and the connection closes; the app is never called."""
    record = Recorder()
    with serve(recording_app(record)) as srv:
        c = srv.connect()
        c.send(data)
        assert undated(c.read_until_close()) == ERROR_400
    assert len(record) == 0


@rule("skirr-ws-handshake-without-content")
def test_handshake_with_content_refusal_is_logged(serve):
    """The access log's refusal line names the rule the handshake broke."""
    lines = Recorder()
    handler = logging.Handler()
    handler.emit = lambda record: lines.put(record.getMessage())
    logger = logging.getLogger("skirr.access")
    logger.addHandler(handler)
    try:
        with serve(recording_app(Recorder())) as srv:
            c = srv.connect()
            c.send(upgrade(extra=b"Content-Length: 14\r\n") + SMUGGLED)
            c.read_until_close()
            line = lines.wait(1)[0]
    finally:
        logger.removeHandler(handler)
    assert line.endswith('"GET /ws HTTP/1.1" 400 Bad Request (refused: WebSocket handshake: the '
                         'request has content (RFC 9110 §7.8))'), line


@rule("skirr-ws-handshake-without-content")
def test_handshake_with_content_length_0_is_accepted(serve):
    """Content-Length: 0 is no content: the handshake is accepted and the bytes right behind
    its head are its first frame."""
    record = Recorder()
    with serve(recording_app(record)) as srv:
        c = srv.connect()
        c.send(upgrade(extra=b"Content-Length: 0\r\n") + frame(0x81, b"early"))
        assert c.read_until(b"\r\n\r\n").startswith(b"HTTP/1.1 101 ")
        assert c.read_exact(7) == b"\x81\x05early"
        c.send(frame(0x88, b"\x03\xe8"))
        assert c.read_until_close() == close_frame(1000)
        assert record.wait(2)[1] == {"type": "websocket.disconnect", "code": 1000, "reason": ""}


@rule("skirr-ws-handshake-pipelining")
@pytest.mark.parametrize("data, answer", [
    pytest.param(upgrade(extra=b"Content-Length: 14\r\n") + SMUGGLED + NEXT, ERROR_400,
                 id="400-content"),
    pytest.param(upgrade(key=b"c2hvcnQ=") + NEXT, ERROR_400, id="400-key"),
    pytest.param(upgrade(version=b"8") + NEXT, ANSWER_426, id="426"),
])
def test_bytes_after_a_refused_handshake_reach_nothing(serve, data, answer):
    """A refused handshake (400, or 426 for another version) is the connection's last exchange:
    the pipelined request behind it is never parsed, the app never called."""
    record = Recorder()
    with serve(recording_app(record)) as srv:
        c = srv.connect()
        c.send(data)
        assert undated(c.read_until_close()) == answer
    assert len(record) == 0


@rule("skirr-ws-handshake-pipelining")
def test_bytes_after_a_valid_handshake_are_frames(serve):
    """Bytes behind a valid handshake's head belong to the WebSocket: a pipelined HTTP request
    there is read as a frame ("G" = 0x47: RSV1 without an extension) and fails it with 1002;
    it never reaches the app as HTTP."""
    record = Recorder()
    with serve(recording_app(record)) as srv:
        c = srv.connect()
        c.send(upgrade() + NEXT)
        assert undated(c.read_until(b"\r\n\r\n")) == HEAD_101 + b"date: DATE\r\nserver: skirr\r\n\r\n"
        assert c.read_until_close() == close_frame(1002)
        assert record.wait(2) == [("websocket", "/ws"),
                                  {"type": "websocket.disconnect", "code": 1002, "reason": ""}]


@rule("skirr-ws-none")
@pytest.mark.parametrize("framing, content", [
    (b"Content-Length: 14\r\n", SMUGGLED),
    (b"Transfer-Encoding: chunked\r\n", b"e\r\n" + SMUGGLED + b"\r\n0\r\n\r\n"),
])
def test_ws_none_reads_the_upgrade_body_as_http(serve, framing, content):
    """--ws none: the upgrade request is plain HTTP, so its content is its body and the request
    behind it is the next one."""
    record = Recorder()
    with serve(recording_app(record), ws="none") as srv:
        c = srv.connect()
        c.send(upgrade(extra=framing) + content + NEXT)
        first, second = c.response(), c.response()
        assert (first.status, first.body) == (200, SMUGGLED)
        assert (second.status, second.body) == (200, b"")
        assert record.wait(2) == [("http", "/ws"), ("http", "/next")]


@rule("RFC9110-7.8-upgrade-http10-ignored")
@pytest.mark.parametrize("framing, content", [
    (b"", b""),
    (b"Content-Length: 14\r\n", SMUGGLED),
])
def test_http10_upgrade_is_plain_http(serve, framing, content):
    """RFC 9110 §7.8: a server MUST ignore Upgrade in an HTTP/1.0 request. With every handshake
    field the request is an http scope, its content its body; never a 101 or a 400."""
    record = Recorder()
    with serve(recording_app(record)) as srv:
        c = srv.connect()
        c.send(upgrade(extra=framing).replace(b" HTTP/1.1\r\n", b" HTTP/1.0\r\n", 1) + content)
        raw = c.read_until_close()
        assert undated(raw) == (b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n"
                                b"date: DATE\r\nserver: skirr\r\n\r\n" % len(content) + content)
        assert record.wait(1) == [("http", "/ws")]


@rule("skirr-ws-other-upgrade-is-http")
@pytest.mark.parametrize("token", [b"h2c", b"foo/2, bar", b"websocketx"])
def test_other_upgrade_tokens_read_their_chunked_body(serve, token):
    """An Upgrade skirr does not take stays HTTP/1.1: a chunked body is read as the body and the
    pipelined request behind it is served next."""
    record = Recorder()
    with serve(recording_app(record)) as srv:
        c = srv.connect()
        c.send(b"POST /up HTTP/1.1\r\nHost: x\r\nUpgrade: " + token + b"\r\nConnection: Upgrade\r\n"
               b"Transfer-Encoding: chunked\r\n\r\ne\r\n" + SMUGGLED + b"\r\n0\r\n\r\n" + NEXT)
        first, second = c.response(), c.response()
        assert (first.status, first.body, second.status) == (200, SMUGGLED, 200)
        assert record.wait(2) == [("http", "/up"), ("http", "/next")]


# ---- item 9: the fields the handshake owns --------------------------------------------------------


def accept_app(record: Recorder, first: dict, then: dict | None = None):
    """Sends `first` and records None, or str() of what it raised; then sends `then` if given,
    else lets the failure out (500 before any answer). Once accepted, records the next event
    (the disconnect)."""

    async def app(scope, receive, send):
        assert (await receive())["type"] == "websocket.connect"
        try:
            await send(first)
        except (RuntimeError, TypeError, ValueError) as exc:
            record.put(f"{type(exc).__name__}: {exc}")
            if then is None:
                raise
            await send(then)
            return
        record.put(None)
        if first["type"] == "websocket.accept":
            record.put(await receive())

    return app


OWNED = [
    (b"Connection", b"Upgrade", ""),
    (b"upgrade", b"websocket", ""),
    (b"sec-websocket-accept", ACCEPT, ""),
    (b"Sec-WebSocket-Extensions", b"permessage-deflate",
     ": skirr negotiates permessage-deflate itself"),
    (b"sec-websocket-protocol", b"chat", ": use websocket.accept's 'subprotocol'"),
]


@rule("RFC6455-4.2.2-handshake-fields-owned")
@pytest.mark.parametrize("name, value, hint", OWNED, ids=[n.decode() for n, _, _ in OWNED])
def test_accept_refuses_a_field_the_handshake_owns(serve, name, value, hint):
    """Issue 35 item 9: websocket.accept's headers repeated upgrade and sec-websocket-accept in
    the 101 (RFC 6455 §4.1: the client fails such a handshake). Each field the handshake owns
    raises RuntimeError naming it (any case); the app lets it out: 500, no 101."""
    record = Recorder()
    msg = {"type": "websocket.accept", "headers": [(b"x-ok", b"1"), (name, value)]}
    with serve(accept_app(record, msg)) as srv:
        c = srv.connect()
        c.send(upgrade(extra=b"Sec-WebSocket-Protocol: chat\r\n"))
        assert undated(c.read_until_close()) == ERROR_500
        assert record.wait(1) == [
            f"RuntimeError: 'websocket.accept' header '{name.decode().lower()}' is the server's to"
            f" send{hint} (RFC 6455 section 4.2.2)"]


@rule("RFC6455-4.2.2-handshake-fields-owned")
@pytest.mark.parametrize("framing", [(b"content-length", b"5"), (b"Transfer-Encoding", b"chunked")])
def test_accept_framing_fields_dropped_date_and_server_replaced(serve, framing):
    """The 101 has no content: the app's content-length or chunked transfer-encoding is dropped
    (as from any 1xx, RFC 9110 §8.6, RFC 9112 §6.1; both at once, or another coding, raise as
    for any response); its date and server replace skirr's, as in every response. The head is
    exactly skirr's fields, then the app's."""
    record = Recorder()
    msg = {"type": "websocket.accept", "headers": [
        framing, (b"date", b"today"), (b"server", b"mine"), (b"x-a", b"1")]}
    with serve(accept_app(record, msg)) as srv:
        c = srv.connect()
        c.send(upgrade())
        assert c.read_until(b"\r\n\r\n") == HEAD_101 + (
            b"date: today\r\nserver: mine\r\nx-a: 1\r\n\r\n")
        c.send(frame(0x88, b"\x03\xe8"))
        assert c.read_until_close() == close_frame(1000)


@rule("RFC6455-4.2.2-subprotocol-offered")
@pytest.mark.parametrize("offer, chosen", [
    (b"Sec-WebSocket-Protocol: chat, superchat\r\n", "graphql-ws"),
    (b"Sec-WebSocket-Protocol: chat\r\n", "Chat"),  # names are compared exactly
    (b"", "chat"),  # the client offered none
])
def test_subprotocol_not_offered_is_refused(serve, offer, chosen):
    """RFC 6455 §4.2.2: the subprotocol is one of the client's Sec-WebSocket-Protocol values
    (§4.1: a client fails the connection on another). Another raises RuntimeError naming it."""
    record = Recorder()
    with serve(accept_app(record, {"type": "websocket.accept", "subprotocol": chosen})) as srv:
        c = srv.connect()
        c.send(upgrade(extra=offer))
        assert undated(c.read_until_close()) == ERROR_500
        assert record.wait(1) == [
            f"RuntimeError: ASGI 'subprotocol' {chosen!r} is not one the client offered in "
            "Sec-WebSocket-Protocol (RFC 6455 section 4.2.2)"]


@rule("RFC6455-4.2.2-subprotocol-offered")
def test_subprotocol_offered_in_a_second_field_is_sent(serve):
    """Every Sec-WebSocket-Protocol field of the client counts: the second one's element is sent
    back, once."""
    record = Recorder()
    with serve(accept_app(record, {"type": "websocket.accept", "subprotocol": "v3"})) as srv:
        c = srv.connect()
        c.send(upgrade(extra=b"Sec-WebSocket-Protocol: chat\r\nSec-WebSocket-Protocol: v3\r\n"))
        assert undated(c.read_until(b"\r\n\r\n")) == HEAD_101 + (
            b"sec-websocket-protocol: v3\r\ndate: DATE\r\nserver: skirr\r\n\r\n")


DENIAL_OWNED = [
    (b"sec-websocket-accept", ACCEPT, ""),
    (b"sec-websocket-extensions", b"permessage-deflate",
     ": skirr negotiates permessage-deflate itself"),
    (b"Sec-WebSocket-Protocol", b"chat", ": use websocket.accept's 'subprotocol'"),
]


@rule("RFC6455-4.2.2-handshake-fields-owned")
@pytest.mark.parametrize("name, value, hint", DENIAL_OWNED,
                         ids=[n.decode() for n, _, _ in DENIAL_OWNED])
def test_denial_refuses_the_fields_of_a_101(serve, name, value, hint):
    """websocket.http.response.start: the fields that only a 101 carries raise RuntimeError; the
    app then sends a 403 denial instead."""
    record = Recorder()
    start = {"type": "websocket.http.response.start", "status": 401, "headers": [(name, value)]}
    with serve(accept_app(record, start, {"type": "websocket.close"})) as srv:
        c = srv.connect()
        c.send(upgrade(extra=b"Sec-WebSocket-Protocol: chat\r\n"))
        assert c.read_until_close().startswith(b"HTTP/1.1 403 Forbidden\r\n")
        assert record.wait(1)[0] == (
            f"RuntimeError: 'websocket.http.response.start' header '{name.decode().lower()}' is"
            f" the server's to send{hint} (RFC 6455 section 4.2.2)")


@rule("RFC6455-4.2.2-handshake-fields-owned")
def test_denial_426_may_carry_upgrade(serve):
    """A denial is an HTTP response: a 426 with upgrade and sec-websocket-version (RFC 9110
    §7.8 wants Upgrade in a 426) is sent as given, with skirr's connection: close."""

    async def app(scope, receive, send):
        await receive()
        await send({"type": "websocket.http.response.start", "status": 426, "headers": [
            (b"upgrade", b"websocket"), (b"sec-websocket-version", b"13")]})
        await send({"type": "websocket.http.response.body", "body": b"v13"})

    with serve(app) as srv:
        c = srv.connect()
        c.send(upgrade(version=b"13"))
        assert undated(c.read_until_close()) == (
            b"HTTP/1.1 426 Upgrade Required\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\n"
            b"content-length: 3\r\nconnection: close\r\ndate: DATE\r\nserver: skirr\r\n\r\nv13")


# ---- item 10: integers from the app, and the extension's format strings ---------------------------


def close_app(record: Recorder, close: dict):
    """Accepts, sends `close`; records what it raised (then closes with 1000), or None."""

    async def app(scope, receive, send):
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        try:
            await send(close)
            record.put(None)
        except (TypeError, ValueError) as exc:
            record.put(f"{type(exc).__name__}: {exc}")
            await send({"type": "websocket.close", "code": 1000})
        record.put(await receive())

    return app


BAD_CODES = [99999, -4294966296, 2**64, 2**63, -1, 0, 999, 1004, 1005, 1006, 1015, 1016, 2999,
             5000, 65535 + 1000]


@rule("RFC6455-7.4-app-close-code-checked")
@pytest.mark.parametrize("code", BAD_CODES)
def test_invalid_close_code_raises_naming_it(serve, code):
    """Issue 35 item 10: 99999 raised PyUnicode_FromFormatV's complaint about its own format, and
    -4294966296 wrapped through (int) to 1000 and was sent. A code outside 1000-1003, 1007-1014,
    3000-4999 raises ValueError naming it, before anything is sent: the app's next close (1000)
    is the first frame the client sees."""
    record = Recorder()
    with serve(close_app(record, {"type": "websocket.close", "code": code})) as srv:
        c = srv.connect()
        c.send(upgrade())
        assert c.read_until(b"\r\n\r\n").startswith(b"HTTP/1.1 101 ")
        assert c.read_exact(4) == close_frame(1000)
        c.send(frame(0x88, b"\x03\xe8"))
        c.expect_eof()
        assert record.wait(1)[0] == (
            f"ValueError: WebSocket close code {code} may not be sent (RFC 6455 section 7.4)")


@rule("RFC6455-7.4-app-close-code-checked")
@pytest.mark.parametrize("code", [1000, 1001, 1003, 1007, 1010, 1011, 1012, 1014, 3000, 4999])
def test_valid_close_code_is_sent(serve, code):
    """Every code RFC 6455 §7.4.1/§7.4.2 lets an endpoint send, 1012-1014 included (IANA
    registered), goes out as the Close frame's code."""
    record = Recorder()
    with serve(close_app(record, {"type": "websocket.close", "code": code, "reason": "r"})) as srv:
        c = srv.connect()
        c.send(upgrade())
        assert c.read_until(b"\r\n\r\n").startswith(b"HTTP/1.1 101 ")
        assert c.read_exact(5) == close_frame(code, b"r")
        c.send(frame(0x88, code.to_bytes(2, "big")))
        c.expect_eof()
        assert record.wait(1)[0] is None


@rule("RFC6455-7.4-app-close-code-checked")
@pytest.mark.parametrize("close, error", [
    ({"code": "1000"}, "TypeError: ASGI 'code' must be an int, not str"),
    ({"code": 1000.0}, "TypeError: ASGI 'code' must be an int, not float"),
    ({"code": 1000, "reason": "é" * 62},
     "ValueError: WebSocket close reason of 124 bytes is longer than 123 (RFC 6455 section 5.5)"),
])
def test_malformed_close_raises(serve, close, error):
    """A code that is not an int, or a reason over 123 UTF-8 bytes (RFC 6455 §5.5: a control
    frame's payload is at most 125), raises with the value's type or size."""
    record = Recorder()
    with serve(close_app(record, {"type": "websocket.close", **close})) as srv:
        c = srv.connect()
        c.send(upgrade())
        assert c.read_until(b"\r\n\r\n").startswith(b"HTTP/1.1 101 ")
        assert c.read_exact(4) == close_frame(1000)
        c.send(frame(0x88, b"\x03\xe8"))
        c.expect_eof()
        assert record.wait(1)[0] == error


@rule("skirr-app-integers-range-checked")
@pytest.mark.parametrize("start, error", [
    ({"status": 2**64}, "RuntimeError: ASGI 'status' must be in 200..599, got 18446744073709551616"),
    ({"status": -4294966896}, "RuntimeError: ASGI 'status' must be in 200..599, got -4294966896"),
    ({"status": 199}, "RuntimeError: ASGI 'status' must be in 200..599, got 199"),
    ({"status": "403"}, "TypeError: ASGI 'status' must be an int, not str"),
    ({}, "RuntimeError: 'websocket.http.response.start' message is missing 'status'"),
])
def test_denial_status_checked_before_narrowing(serve, start, error):
    """websocket.http.response.start's status is checked as a Python int before it narrows to the
    serializer's int (2**64 raised OverflowError's "too large to convert to C long"; -4294966896
    is 400 in 32 bits), as http.response.start's is; the app then denies with 403."""
    record = Recorder()
    msg = {"type": "websocket.http.response.start", **start}
    with serve(accept_app(record, msg, {"type": "websocket.close"})) as srv:
        c = srv.connect()
        c.send(upgrade())
        assert c.read_until_close().startswith(b"HTTP/1.1 403 Forbidden\r\n")
        assert record.wait(1)[0] == error


@rule("skirr-app-integers-range-checked")
@pytest.mark.parametrize("kwargs, error", [
    ({"ws_max_size": -1},
     "ValueError: ws_max_size must be in 0..18446744073709551615, got -1"),
    ({"ws_max_size": 2**64},
     "ValueError: ws_max_size must be in 0..18446744073709551615, got 18446744073709551616"),
    ({"limit_request_body": -5},
     "ValueError: limit_request_body must be in 0..18446744073709551615, got -5"),
    ({"limit_request_body": 1.5}, "TypeError: limit_request_body must be an int, not float"),
    ({"limit_request_fields": 2**32},
     "ValueError: limit_request_fields must be at most 4294967295, got 4294967296"),
])
def test_native_server_counts_do_not_wrap(kwargs, error):
    """skirr._native.Server took ws_max_size and limit_request_body with the "K" format, which
    wraps (-1 became 2**64-1, no limit), and narrowed limit_request_fields to 32 bits unchecked.
    skirr.Config refuses such values first; the native type refuses them too."""
    from skirr import _native

    with socket.socket() as s:
        with pytest.raises((TypeError, ValueError)) as info:
            _native.Server(lambda *a: None, None, s.fileno(), **kwargs)
    assert f"{info.type.__name__}: {info.value}" == error


# The CPython calls whose format string must be ASCII (PyUnicode_FromFormatV raises ValueError
# otherwise), and the argument that is the format.
FORMAT_CALLS = {
    "PyErr_Format": 1, "PyErr_FormatV": 1, "PyUnicode_FromFormat": 0, "PyUnicode_FromFormatV": 0,
    "PyErr_WarnFormat": 2, "PyErr_ResourceWarning": 2, "PyBytes_FromFormat": 0,
    "PyBytes_FromFormatV": 0,
}
EXT = Path(__file__).resolve().parent.parent / "src" / "ext"
TOKEN = re.compile(rb'''/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|[A-Za-z_]\w*|\S''',
                   re.S)
ESCAPE = re.compile(rb"\\(x[0-9A-Fa-f]+|[0-7]{1,3}|.)", re.S)


def format_strings(source: bytes) -> list:
    """(line, call, format bytes or None when the format is not a string literal) of every
    FORMAT_CALLS call in C source; adjacent literals are joined and escapes decoded."""
    tokens = [(m.group(), source.count(b"\n", 0, m.start()) + 1) for m in TOKEN.finditer(source)
              if not m.group().startswith((b"/*", b"//"))]
    found = []
    for i, (tok, line) in enumerate(tokens):
        name = tok.decode("latin-1")
        if name not in FORMAT_CALLS or i + 1 >= len(tokens) or tokens[i + 1][0] != b"(":
            continue
        depth, arg, j = 0, 0, i + 2
        while arg < FORMAT_CALLS[name] and j < len(tokens):  # skip to the format argument
            t = tokens[j][0]
            depth += t in (b"(", b"[", b"{")
            depth -= t in (b")", b"]", b"}")
            arg += t == b"," and depth == 0
            j += 1
        literal = b""
        while j < len(tokens) and tokens[j][0].startswith(b'"'):
            literal += ESCAPE.sub(_unescape, tokens[j][0][1:-1])
            j += 1
        found.append((line, name, literal if j < len(tokens) and literal else None))
    return found


def _unescape(m: re.Match) -> bytes:
    e = m.group(1)
    if e[:1] == b"x":
        return bytes([int(e[1:], 16) & 0xFF])
    if e[:1].isdigit():
        return bytes([int(e, 8) & 0xFF])
    return {b"n": b"\n", b"t": b"\t", b"r": b"\r", b"0": b"\0"}.get(e, e)


@rule("skirr-c-format-strings-ascii")
def test_the_checker_finds_a_non_ascii_format():
    """The checker below sees through comments, line breaks, adjacent literals and escapes: it
    finds the format that broke websocket.close (the § in it) and a variable format."""
    src = ('/* PyErr_Format(x, "§") */\nPyErr_Format(PyExc_ValueError,\n'
           '  "WebSocket close code %ld may not be sent "\n  "(RFC 6455 §7.4)", code);\n'
           'PyUnicode_FromFormat(fmt, 1);\nPyErr_Format(f(a, b), "\\xc2\\xa7 %d", 2);\n'
           'PyErr_WarnFormat(PyExc_Warning, 1, "ok %s", "§");\n').encode()
    assert format_strings(src) == [
        (2, "PyErr_Format", "WebSocket close code %ld may not be sent (RFC 6455 §7.4)".encode()),
        (5, "PyUnicode_FromFormat", None),
        (6, "PyErr_Format", b"\xc2\xa7 %d"),
        (7, "PyErr_WarnFormat", b"ok %s"),
    ]


@rule("skirr-c-format-strings-ascii")
def test_every_format_string_of_the_extension_is_ascii():
    """Every PyErr_Format/PyUnicode_FromFormat (and kin) format in src/ext is a string literal of
    ASCII bytes: PyUnicode_FromFormatV refuses anything else, replacing the error it was asked
    to raise with its own. A `§` or other non-ASCII text goes in through a %s argument."""
    bad, seen = [], 0
    for path in sorted(EXT.glob("*.[ch]")):
        for line, call, fmt in format_strings(path.read_bytes()):
            seen += 1
            if fmt is None or not fmt.isascii():
                bad.append(f"{path.name}:{line}: {call} {fmt!r}")
    assert seen >= 30  # the scan finds the extension's calls (33 at issue 35)
    assert bad == []
