"""WebSockets over a real socket (issue 14, spec/websocket.toml): the handshake, the frame rules a
client can see, and the close handshake, with the ``websockets`` library as the client oracle
where a well-behaved client suffices and raw bytes where the client must misbehave.

Every case runs on both loops (the ``serve`` fixture). The application below answers a plain
HTTP request with 404, as FastAPI does for a websocket route, so an upgrade that is not served as
a WebSocket fails every handshake case here.
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import random
import threading
import time
import zlib

import pytest
from fastapi import FastAPI, WebSocket  # module level: the route's annotations are strings here
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from _ws import KEY, frame, upgrade
from conftest import IO_TIMEOUT, Recorder, record_text

rule = pytest.mark.rule

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 §1.3
ACCEPT = base64.b64encode(hashlib.sha1(KEY + GUID).digest())  # s3pPLMBiTxaQ9kYGzzhZRbK+xOo=


def close_frame(code: int, reason: bytes = b"") -> bytes:
    """A server's Close frame (unmasked, RFC 6455 §5.5.1)."""
    payload = code.to_bytes(2, "big") + reason
    return bytes([0x88, len(payload)]) + payload


def make_app(record: Recorder, close_before_accept: bool = False):
    """Echoes every message; records the websocket.disconnect event. Reached as HTTP (what skirr
    does today with an upgrade request) it answers 404, as a framework's websocket route does."""

    async def app(scope, receive, send):
        if scope["type"] != "websocket":
            await send({"type": "http.response.start", "status": 404,
                        "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        assert (await receive())["type"] == "websocket.connect"
        if close_before_accept:
            await send({"type": "websocket.close"})
            return
        await send({"type": "websocket.accept"})
        while True:
            event = await receive()
            if event["type"] == "websocket.disconnect":
                record.put(event)
                return
            if event.get("text") is not None:
                await send({"type": "websocket.send", "text": event["text"]})
            else:
                await send({"type": "websocket.send", "bytes": event["bytes"]})

    return app


def handshake(c) -> None:
    """Sends the upgrade and reads a 101 with the right Sec-WebSocket-Accept."""
    c.send(upgrade())
    head = c.read_until(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101 "), head
    fields = {line.split(b":", 1)[0].strip().lower(): line.split(b":", 1)[1].strip()
              for line in head.split(b"\r\n")[1:] if b":" in line}
    assert fields.get(b"sec-websocket-accept") == ACCEPT, head


def wait_logged(srv, want: str) -> None:
    """Waits (at most IO_TIMEOUT) for an error record whose text holds `want`."""
    deadline = time.monotonic() + IO_TIMEOUT
    while not [r for r in srv.errors() if want in record_text(r)]:
        assert time.monotonic() < deadline, [record_text(r) for r in srv.errors()]
        time.sleep(0.01)


def fails_with(srv, frames: bytes, code: int) -> None:
    """After a handshake, the frames make the server send a Close with `code` and close."""
    c = srv.connect()
    handshake(c)
    c.send(frames)
    assert c.read_until_close() == close_frame(code)


@rule("RFC6455-4.2.2-accept")
def test_handshake_and_echo(serve):
    """RFC 6455 §4.2.2: a valid upgrade gets 101 with the right accept value; messages echo."""
    record = Recorder()
    with serve(make_app(record)) as srv:
        with connect(f"ws://127.0.0.1:{srv.port}/ws", open_timeout=IO_TIMEOUT,
                     close_timeout=IO_TIMEOUT) as ws:
            ws.send("héllo")
            assert ws.recv(timeout=IO_TIMEOUT) == "héllo"
            ws.send(b"\x00\xff")
            assert ws.recv(timeout=IO_TIMEOUT) == b"\x00\xff"


@rule("ASGI-websocket-close-before-accept-403")
def test_close_before_accept_is_403(serve):
    """ASGI websocket spec: websocket.close before websocket.accept is answered with 403."""
    with serve(make_app(Recorder(), close_before_accept=True)) as srv:
        c = srv.connect()
        c.send(upgrade())
        assert c.response().status == 403


@rule("RFC6455-4.4-wrong-version-426")
def test_wrong_version_is_426(serve):
    """RFC 6455 §4.4: a version other than 13 gets 426 naming the version the server speaks."""
    with serve(make_app(Recorder())) as srv:
        c = srv.connect()
        c.send(upgrade(version=b"8"))
        r = c.response()
        assert r.status == 426
        assert r.get(b"sec-websocket-version") == b"13"


@rule("RFC6455-4.2.1-malformed-upgrade-400")
def test_short_key_is_400(serve):
    """RFC 6455 §4.2.1: the key must decode to 16 bytes; 15 bytes get 400."""
    with serve(make_app(Recorder())) as srv:
        c = srv.connect()
        c.send(upgrade(key=base64.b64encode(os.urandom(15))))
        assert c.response().status == 400


@rule("RFC6455-5.1-unmasked-client-frame")
def test_unmasked_frame_fails_1002(serve):
    """RFC 6455 §5.1 and §5.7's unmasked "Hello": a server must fail it with 1002."""
    with serve(make_app(Recorder())) as srv:
        fails_with(srv, b"\x81\x05Hello", 1002)


@rule("RFC6455-5.2-reserved-bits-opcodes")
def test_rsv1_without_extension_fails_1002(serve):
    """RFC 6455 §5.2: RSV1 set with no extension negotiated fails with 1002."""
    with serve(make_app(Recorder())) as srv:
        fails_with(srv, frame(0xC1, b"x"), 1002)


@rule("RFC6455-5.4-fragments-reassembled")
def test_fragments_with_ping_between(serve):
    """RFC 6455 §5.4: "Hel" + ping + "lo" is one message "Hello" (and the ping gets its pong)."""
    with serve(make_app(Recorder())) as srv:
        c = srv.connect()
        handshake(c)
        c.send(frame(0x01, b"Hel") + frame(0x89, b"p") + frame(0x80, b"lo"))
        assert c.read_exact(3) == b"\x8a\x01p"
        assert c.read_exact(7) == b"\x81\x05Hello"


@rule("RFC6455-5.5.2-ping-answered")
def test_ping_gets_pong(serve):
    """RFC 6455 §5.5.2: the websockets client's ping is answered with a matching pong."""
    with serve(make_app(Recorder())) as srv:
        with connect(f"ws://127.0.0.1:{srv.port}/ws", open_timeout=IO_TIMEOUT,
                     close_timeout=IO_TIMEOUT) as ws:
            assert ws.ping(b"are you there").wait(IO_TIMEOUT)


@rule("RFC6455-8.1-invalid-utf8-1007")
def test_invalid_utf8_fails_1007(serve):
    """RFC 6455 §8.1: a text message with an encoded surrogate (ED A0 80) fails with 1007."""
    with serve(make_app(Recorder())) as srv:
        fails_with(srv, frame(0x81, b"ok\xed\xa0\x80"), 1007)


@rule("skirr-ws-max-size-1009")
def test_message_over_max_size_fails_1009(serve):
    """--ws-max-size 1024: a 1025-byte binary message fails with 1009."""
    with serve(make_app(Recorder()), ws_max_size=1024) as srv:
        fails_with(srv, frame(0x82, b"x" * 1025), 1009)


# -- a protocol failure behind messages already decoded ---------------------------------------------
# Autobahn 3.2, 3.3, 4.1.3, 4.1.4, 4.2.3, 4.2.4, 5.15: a valid message and a frame that fails the
# connection arrive together. The failure waits until the app has taken every message decoded
# before it and come back to receive() (its echo goes out first), then the Close goes out.

@rule("skirr-ws-failure-after-queued-messages")
@pytest.mark.parametrize("bad, code, max_size", [
    pytest.param(frame(0x83, b"x"), 1002, None, id="reserved-opcode-1002"),
    pytest.param(frame(0xA1, b"x"), 1002, None, id="rsv2-1002"),
    pytest.param(frame(0x81, b"ok\xed\xa0\x80"), 1007, None, id="invalid-utf8-1007"),
    pytest.param(frame(0x82, b"x" * 1025), 1009, 1024, id="over-max-size-1009"),
])
def test_failure_waits_for_the_message_before_it(serve, bad, code, max_size):
    """A valid text frame and a failing frame in ONE send: the app gets the text, its echo
    arrives before the Close with the failure's code, and the app's next receive() is
    websocket.disconnect with that code."""
    record = Recorder()
    opts = {"ws_max_size": max_size} if max_size else {}
    with serve(make_app(record), **opts) as srv:
        c = srv.connect()
        handshake(c)
        c.send(frame(0x81, b"Hello") + bad)
        assert c.read_until_close() == b"\x81\x05Hello" + close_frame(code)
        event = record.wait(1)[0]
        assert event["type"] == "websocket.disconnect" and event["code"] == code


@rule("skirr-ws-failure-after-queued-messages")
def test_failure_waits_for_every_queued_message(serve):
    """Three messages then a reserved opcode in one send: three echoes in order, then 1002."""
    with serve(make_app(Recorder())) as srv:
        c = srv.connect()
        handshake(c)
        c.send(frame(0x81, b"a") + frame(0x82, b"bc") + frame(0x81, b"def") + frame(0x8B))
        assert c.read_until_close() == (b"\x81\x01a" + b"\x82\x02bc" + b"\x81\x03def"
                                        + close_frame(1002))


@rule("skirr-ws-failure-after-queued-messages")
def test_app_closing_while_a_failure_is_held_gets_the_failure(serve):
    """The app answers the text with websocket.close 4000 while the reserved opcode behind it is
    held: the peer's failure is what ends the connection (Close 1002, no close handshake), and
    the app's next receive() is websocket.disconnect 1002."""
    record = Recorder()

    async def app(scope, receive, send):
        await receive()
        await send({"type": "websocket.accept"})
        record.put((await receive()).get("text"))
        await send({"type": "websocket.close", "code": 4000})
        record.put(await receive())

    with serve(app) as srv:
        c = srv.connect()
        handshake(c)
        c.send(frame(0x81, b"Hello") + frame(0x83))
        assert c.read_until_close() == close_frame(1002)
        got = record.wait(2)
        assert got[0] == "Hello"
        assert got[1]["type"] == "websocket.disconnect" and got[1]["code"] == 1002


@rule("skirr-ws-failure-after-queued-messages")
def test_failure_waits_for_the_app_at_most_the_close_timeout(serve):
    """An app that never calls receive() again does not keep a failed connection open: the
    Close 1002 goes out after the close timeout (10 s), with no echo before it."""
    async def app(scope, receive, send):
        import asyncio

        await receive()
        await send({"type": "websocket.accept"})
        await asyncio.sleep(60)

    with serve(app) as srv:
        c = srv.connect()
        handshake(c)
        start = time.monotonic()
        c.send(frame(0x81, b"Hello") + frame(0x83))
        assert c.read_until_close(timeout=20) == close_frame(1002)
        assert 8 < time.monotonic() - start < 15


@rule("RFC6455-7.4-close-code-to-app")
def test_client_close_reaches_app(serve):
    """RFC 6455 §7.4 / ASGI: the client's Close 4000 "bye" becomes websocket.disconnect with that
    code and reason, and the server answers with a Close."""
    record = Recorder()
    with serve(make_app(record)) as srv:
        with connect(f"ws://127.0.0.1:{srv.port}/ws", open_timeout=IO_TIMEOUT,
                     close_timeout=IO_TIMEOUT) as ws:
            ws.close(4000, "bye")
            assert ws.protocol.close_rcvd is not None  # the server answered with a Close
            assert ws.protocol.close_rcvd.code == 4000
        event = record.wait(1)[0]
        assert event["code"] == 4000
        assert event.get("reason") == "bye"


@rule("RFC6455-7.4.1-invalid-close-code-1002")
def test_close_code_1005_on_the_wire_fails_1002(serve):
    """RFC 6455 §7.4.1: 1005 must never be sent; received, it fails with 1002."""
    with serve(make_app(Recorder())) as srv:
        fails_with(srv, frame(0x88, b"\x03\xed"), 1002)


@rule("RFC6455-5.2-non-minimal-length-accepted")
def test_non_minimal_length_accepted(serve):
    """RFC 6455 §5.2: "Hi" with its length in the 16-bit form is still the message "Hi"."""
    with serve(make_app(Recorder())) as srv:
        c = srv.connect()
        handshake(c)
        c.send(frame(0x81, b"Hi", length16=True))
        assert c.read_exact(4) == b"\x81\x02Hi"


# -- the ASGI side: scope, accept, denial, errors, disconnects --------------------------------------

def scope_app(record: Recorder, accept: dict | None = None):
    """Records the scope and the first event, then accepts with `accept`'s extra keys and waits
    for the disconnect (recorded too)."""

    async def app(scope, receive, send):
        record.put(dict(scope))
        record.put(await receive())
        await send({"type": "websocket.accept", **(accept or {})})
        record.put(await receive())

    return app


@rule("ASGI-websocket-scope")
def test_scope(serve):
    """ASGI websocket 2.4: every key of the scope, exactly, for a request with a query, two
    subprotocols over two fields, and a root_path."""
    record = Recorder()
    with serve(scope_app(record), root_path="/api") as srv:
        c = srv.connect()
        c.send(b"GET /ws/caf%C3%A9?x=1&y=%20 HTTP/1.1\r\nHost: example.com\r\nUpgrade: websocket\r\n"
               b"Connection: keep-alive, Upgrade\r\nSec-WebSocket-Key: " + KEY + b"\r\n"
               b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: chat, superchat\r\n"
               b"Sec-WebSocket-Protocol: v3\r\n\r\n")
        assert c.read_until(b"\r\n\r\n").startswith(b"HTTP/1.1 101 ")
        scope, connect = record.wait(2)[:2]
        c.send(frame(0x88, b"\x03\xe8"))  # the client's Close 1000
        assert record.wait(3)[2] == {"type": "websocket.disconnect", "code": 1000, "reason": ""}
    assert connect == {"type": "websocket.connect"}
    client = scope.pop("client")
    server = scope.pop("server")
    assert client[0] == "127.0.0.1" and isinstance(client[1], int)
    assert server == ("127.0.0.1", srv.port)
    assert scope == {
        "type": "websocket",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "scheme": "ws",
        "path": "/api/ws/café",
        "raw_path": b"/api/ws/caf%C3%A9",
        "query_string": b"x=1&y=%20",
        "root_path": "/api",
        "headers": [(b"host", b"example.com"), (b"upgrade", b"websocket"),
                    (b"connection", b"keep-alive, Upgrade"), (b"sec-websocket-key", KEY),
                    (b"sec-websocket-version", b"13"),
                    (b"sec-websocket-protocol", b"chat, superchat"),
                    (b"sec-websocket-protocol", b"v3")],
        "subprotocols": ["chat", "superchat", "v3"],
        "extensions": {"websocket.http.response": {}},
        "state": {},
    }


@pytest.mark.rule("skirr-proxy-trusted", "ASGI-websocket-scope")
@pytest.mark.parametrize("proto,scheme", [("https", "wss"), ("wss", "wss"), ("http", "ws"),
                                          ("ws", "ws"), ("ftp", "ws")])
def test_scope_scheme_from_x_forwarded_proto(serve, proto, scheme):
    """From a trusted peer (127.0.0.1, the default --forwarded-allow-ips), X-Forwarded-Proto
    sets the websocket scope's scheme: https or wss give wss, http or ws give ws; anything else
    is ignored (the connection's own ws)."""
    record = Recorder()
    with serve(scope_app(record)) as srv:
        c = srv.connect()
        c.send(b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               b"Sec-WebSocket-Key: " + KEY + b"\r\nSec-WebSocket-Version: 13\r\n"
               b"X-Forwarded-Proto: " + proto.encode() + b"\r\n\r\n")
        assert c.read_until(b"\r\n\r\n").startswith(b"HTTP/1.1 101 ")
        scope = record.wait(2)[0]
        c.send(frame(0x88, b"\x03\xe8"))
        record.wait(3)
    assert scope["scheme"] == scheme


@rule("ASGI-websocket-accept-subprotocol-headers")
def test_accept_subprotocol_and_headers(serve):
    """ASGI websocket.accept: `subprotocol` becomes Sec-WebSocket-Protocol (the websockets client
    sees it negotiated) and `headers` are added to the 101."""
    record = Recorder()
    app = scope_app(record, {"subprotocol": "superchat", "headers": [(b"x-extra", b"yes")]})
    with serve(app) as srv:
        with connect(f"ws://127.0.0.1:{srv.port}/", subprotocols=["chat", "superchat"],
                     open_timeout=IO_TIMEOUT, close_timeout=IO_TIMEOUT) as ws:
            assert ws.subprotocol == "superchat"
            assert ws.response.status_code == 101
            assert ws.response.headers["x-extra"] == "yes"
            assert ws.response.headers["server"] == "skirr"
        assert record.wait(3)[2]["code"] == 1000


@rule("ASGI-websocket-denial-response")
def test_denial_response(serve):
    """ASGI websocket.http.response extension: start + body (in two parts) is the HTTP response,
    sent instead of the 101, and the connection is closed after it."""

    async def app(scope, receive, send):
        await receive()
        await send({"type": "websocket.http.response.start", "status": 401,
                    "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
        await send({"type": "websocket.http.response.body", "body": b"no ", "more_body": True})
        await send({"type": "websocket.http.response.body", "body": b"token"})

    with serve(app) as srv:
        c = srv.connect()
        c.send(upgrade())
        r = c.response()
        assert (r.status, r.body) == (401, b"no token")
        assert r.get(b"www-authenticate") == b"Bearer"
        assert r.get(b"connection") == b"close"
        c.expect_eof()


@rule("RFC6455-4.2.1-frames-behind-head")
def test_frames_right_behind_the_head_are_kept(serve):
    """Frames sent in the same packet as the upgrade request are the connection's first
    messages: they reach the app once it accepts."""
    with serve(make_app(Recorder())) as srv:
        c = srv.connect()
        c.send(upgrade() + frame(0x81, b"early") + frame(0x82, b"\x01\x02"))
        assert c.read_until(b"\r\n\r\n").startswith(b"HTTP/1.1 101 ")
        assert c.read_exact(7) == b"\x81\x05early"
        assert c.read_exact(4) == b"\x82\x02\x01\x02"


@rule("skirr-ws-other-upgrade-is-http")
def test_other_upgrade_is_plain_http(serve, echo_app):
    """An Upgrade skirr does not take (h2c) is ignored: the request, body included, is HTTP."""
    with serve(echo_app) as srv:
        c = srv.connect()
        c.send(b"POST /x HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\n"
               b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nContent-Length: 5\r\n\r\nhello")
        r = c.response()
        assert (r.status, r.body) == (200, b"hello")


@rule("skirr-ws-none")
def test_ws_none_passes_the_upgrade_as_http(serve):
    """--ws none (uvicorn's flag): the upgrade reaches the app as an http scope (404 here)."""
    with serve(make_app(Recorder()), ws="none") as srv:
        c = srv.connect()
        c.send(upgrade())
        assert c.response().status == 404


@rule("ASGI-websocket-app-error")
@pytest.mark.parametrize("when", ["raise", "return"])
def test_app_failing_before_accept_is_500(serve, when):
    """An app that raises, or returns, before answering the handshake: 500, logged."""

    async def app(scope, receive, send):
        await receive()
        if when == "raise":
            raise RuntimeError("ws-boom-before-accept")

    with serve(app) as srv:
        c = srv.connect()
        c.send(upgrade())
        assert c.response().status == 500
        c.expect_eof()
        wait_logged(srv, "ws-boom-before-accept" if when == "raise" else "without sending handshake")


@rule("ASGI-websocket-app-error")
def test_app_raising_after_accept_closes_1011(serve):
    """An app that raises after accept: the client gets a Close with 1011 (internal error)."""

    async def app(scope, receive, send):
        await receive()
        await send({"type": "websocket.accept"})
        await receive()
        raise RuntimeError("ws-boom-after-accept")

    with serve(app) as srv:
        fails_with(srv, frame(0x81, b"go"), 1011)
        assert [r for r in srv.errors() if "ws-boom-after-accept" in record_text(r)]


@rule("RFC6455-7.1.5-peer-vanished-1006")
def test_peer_vanishing_is_1006(serve):
    """RFC 6455 §7.1.5: a TCP close without a Close frame is websocket.disconnect 1006."""
    record = Recorder()
    with serve(make_app(record)) as srv:
        c = srv.connect()
        handshake(c)
        c.sock.close()
        assert record.wait(1)[0] == {"type": "websocket.disconnect", "code": 1006, "reason": ""}


@rule("ASGI-websocket-send-after-close")
def test_send_after_close_raises_client_disconnected(serve):
    """ASGI websocket: send() after the connection closed raises skirr.ClientDisconnected (an
    OSError), not logged as an application error."""
    import skirr

    record = Recorder()

    async def app(scope, receive, send):
        await receive()
        await send({"type": "websocket.accept"})
        record.put(await receive())
        try:
            await send({"type": "websocket.send", "text": "late"})
        except BaseException as e:
            record.put(e)
            raise

    with serve(app) as srv:
        with connect(f"ws://127.0.0.1:{srv.port}/", open_timeout=IO_TIMEOUT,
                     close_timeout=IO_TIMEOUT) as ws:
            ws.close(1001)
        event, exc = record.wait(2)[:2]
        assert event == {"type": "websocket.disconnect", "code": 1001, "reason": ""}
        assert isinstance(exc, skirr.ClientDisconnected) and isinstance(exc, OSError)
        time.sleep(0.05)
        assert srv.errors() == [], [record_text(r) for r in srv.errors()]


@rule("ASGI-websocket-send-after-close")
@pytest.mark.parametrize("accept", [True, False], ids=["after-accept", "before-accept-403"])
def test_send_after_own_close_is_the_apps_error(serve, accept):
    """After the app's own websocket.close, send() raises ClientDisconnected naming the app's
    close; let out, it is logged at error as any app failure (the client did not leave)."""
    import skirr

    record = Recorder()

    async def app(scope, receive, send):
        await receive()
        if accept:
            await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 1000})
        try:
            await send({"type": "websocket.send", "text": "late"})
        except BaseException as e:
            record.put(e)
            raise

    with serve(app) as srv:
        c = srv.connect()
        c.send(upgrade())
        head = c.read_until(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101 " if accept else b"HTTP/1.1 403 "), head
        exc = record.wait(1)[0]
        assert type(exc) is skirr.ClientDisconnected
        assert str(exc) == "the application closed this WebSocket (websocket.close was sent)"
        deadline = time.monotonic() + IO_TIMEOUT
        while not srv.errors() and time.monotonic() < deadline:
            time.sleep(0.01)
        errors = srv.errors()
        assert [r.getMessage() for r in errors] == ["Exception in ASGI application"], \
            [record_text(r) for r in errors]
        c.close()


@rule("RFC6455-7.1.2-server-close")
def test_server_close_code_and_reason(serve):
    """RFC 6455 §5.5.1: the app's websocket.close (4001, "done") is a Close frame with that code
    and reason; the client's answer completes the handshake and the server closes TCP."""
    record = Recorder()

    async def app(scope, receive, send):
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 4001, "reason": "done"})
        record.put(await receive())

    with serve(app) as srv:
        c = srv.connect()
        handshake(c)
        assert c.read_exact(8) == close_frame(4001, b"done")
        c.send(frame(0x88, b"\x0f\xa1"))
        c.expect_eof()
        assert record.wait(1)[0]["type"] == "websocket.disconnect"
        with connect(f"ws://127.0.0.1:{srv.port}/", open_timeout=IO_TIMEOUT,
                     close_timeout=IO_TIMEOUT) as ws:
            with pytest.raises(ConnectionClosed):
                ws.recv(timeout=IO_TIMEOUT)
            assert (ws.close_code, ws.close_reason) == (4001, "done")


@rule("skirr-ws-ping-keepalive")
def test_keepalive_ping_then_timeout(serve):
    """--ws-ping-interval 1 --ws-ping-timeout 1: an idle connection gets a ping; a client that
    never answers it gets a Close 1011 and the connection closes."""
    with serve(make_app(Recorder()), ws_ping_interval=1.0, ws_ping_timeout=1.0) as srv:
        c = srv.connect()
        handshake(c)
        ping = c.read_exact(6)
        assert ping[:2] == b"\x89\x04"
        assert c.read_until_close(timeout=IO_TIMEOUT) == close_frame(1011, b"keepalive ping timeout")


@rule("skirr-ws-ping-keepalive")
def test_keepalive_answered_keeps_the_connection(serve):
    """The websockets client answers the server's pings: after 3 ping intervals it still echoes."""
    with serve(make_app(Recorder()), ws_ping_interval=1.0, ws_ping_timeout=1.0) as srv:
        with connect(f"ws://127.0.0.1:{srv.port}/", open_timeout=IO_TIMEOUT,
                     close_timeout=IO_TIMEOUT) as ws:
            time.sleep(3.2)
            ws.send("still here")
            assert ws.recv(timeout=IO_TIMEOUT) == "still here"


@rule("RFC6455-5.4-fragments-reassembled")
def test_large_messages_echo(serve):
    """Messages of 1 MiB both ways (many reads, output over the high-water mark)."""
    with serve(make_app(Recorder())) as srv:
        with connect(f"ws://127.0.0.1:{srv.port}/", open_timeout=IO_TIMEOUT,
                     close_timeout=IO_TIMEOUT, max_size=None) as ws:
            for i in range(3):
                data = bytes([i]) * (1 << 20)
                ws.send(data)
                assert ws.recv(timeout=IO_TIMEOUT) == data
            ws.send("é" * 100_000)
            assert ws.recv(timeout=IO_TIMEOUT) == "é" * 100_000


@rule("RFC6455-8.1-invalid-utf8-1007")
def test_invalid_utf8_across_fragments_fails_1007(serve):
    """A 4-byte sequence split over fragments is valid; an invalid continuation in a later
    fragment fails with 1007."""
    with serve(make_app(Recorder())) as srv:
        c = srv.connect()
        handshake(c)
        c.send(frame(0x01, b"\xf0\x9f") + frame(0x80, b"\x98\x80"))
        assert c.read_exact(6) == b"\x81\x04\xf0\x9f\x98\x80"
        c.send(frame(0x01, b"\xf0\x9f") + frame(0x80, b"\x28\x80"))
        assert c.read_until_close() == close_frame(1007)


@rule("skirr-ws-config")
def test_ws_config_values_checked():
    """skirr.Config refuses a --ws mode it does not have and non-positive WebSocket limits."""
    import skirr
    from skirr.config import ConfigError

    for bad in ({"ws": "wsproto"}, {"ws_max_size": 0}, {"ws_max_queue": 0},
                {"ws_ping_interval": -1}, {"ws_ping_timeout": float("nan")}):
        with pytest.raises(ConfigError):
            skirr.Config(lambda s, r, se: None, **bad)
    c = skirr.Config(lambda s, r, se: None)
    assert (c.ws, c.ws_max_size, c.ws_max_queue, c.ws_ping_interval, c.ws_ping_timeout,
            c.ws_per_message_deflate) == ("auto", 16 * 1024 * 1024, 32, 20.0, 20.0, True)


@rule("skirr-ws-fastapi")
def test_fastapi_websocket_endpoint(serve):
    """A FastAPI @app.websocket route: receive_text, send_json, iter_text, close with a code."""
    api = FastAPI()

    @api.websocket("/chat/{room}")
    async def chat(websocket: WebSocket, room: str):
        await websocket.accept()
        first = await websocket.receive_text()
        await websocket.send_json({"room": room, "first": first})
        async for text in websocket.iter_text():
            if text == "bye":
                await websocket.close(code=4002)
                return
            await websocket.send_text(text.upper())

    with serve(api) as srv:
        with connect(f"ws://127.0.0.1:{srv.port}/chat/blue", open_timeout=IO_TIMEOUT,
                     close_timeout=IO_TIMEOUT) as ws:
            ws.send("hi")
            assert json.loads(ws.recv(timeout=IO_TIMEOUT)) == {"room": "blue", "first": "hi"}
            ws.send("abc")
            assert ws.recv(timeout=IO_TIMEOUT) == "ABC"
            ws.send("bye")
            with pytest.raises(ConnectionClosed):
                ws.recv(timeout=IO_TIMEOUT)
            assert ws.close_code == 4002


@rule("RFC6455-7.1.2-server-close")
def test_app_returning_after_accept_closes_1000(serve):
    """An app that returns after accept without closing: a Close 1000, and the handshake is
    completed with the client's answer (the websockets client sees a clean close)."""

    async def app(scope, receive, send):
        await receive()
        await send({"type": "websocket.accept"})

    with serve(app) as srv:
        with connect(f"ws://127.0.0.1:{srv.port}/", open_timeout=IO_TIMEOUT,
                     close_timeout=IO_TIMEOUT) as ws:
            with pytest.raises(ConnectionClosed):
                ws.recv(timeout=IO_TIMEOUT)
            assert ws.close_code == 1000
        assert srv.errors() == [], [record_text(r) for r in srv.errors()]


@rule("ASGI-websocket-app-error")
def test_app_driving_its_own_session_is_refused(serve):
    """The object asyncio's Task runs for a session (Task.get_coro()) is skirr's: an app that
    steps, throws into or closes it from inside its own step gets ValueError ("coroutine already
    executing", as a running coroutine answers), and calling it is a TypeError, as is calling
    skirr's done callback (reached through the Task's callbacks) before the Task is done; the
    session goes on and ends once (Close 1000, nothing logged). (Stepping it from inside freed the
    running coroutine: a crash.)"""
    record = Recorder()

    async def app(scope, receive, send):
        await receive()
        task = asyncio.current_task()
        session = task.get_coro()
        done_callback = task._callbacks[0][0]  # skirr's: the only one added
        for call in [lambda: session.send(None), lambda: session.throw(ValueError("x")),
                     lambda: session.close(), lambda: next(session), lambda: session(task),
                     lambda: done_callback(task), lambda: done_callback(None)]:
            try:
                call()
            except (ValueError, TypeError) as exc:
                record.put((type(exc).__name__, str(exc)))
            else:
                record.put("no exception")
        await send({"type": "websocket.accept"})
        event = await receive()
        await send({"type": "websocket.send", "text": event["text"]})

    with serve(app) as srv:
        with connect(f"ws://127.0.0.1:{srv.port}/", open_timeout=IO_TIMEOUT,
                     close_timeout=IO_TIMEOUT) as ws:
            ws.send("still here")
            assert ws.recv(timeout=IO_TIMEOUT) == "still here"
            with pytest.raises(ConnectionClosed):
                ws.recv(timeout=IO_TIMEOUT)
            assert ws.close_code == 1000
        got = record.wait(7)
        assert got[:4] == [("ValueError", "coroutine already executing")] * 4
        assert got[4][0] == "TypeError" and "not callable" in got[4][1], got[4]
        assert got[5:] == [
            ("TypeError", "a WebSocket session's done callback runs once its Task is done"),
            ("TypeError", "a WebSocket session's done callback takes its Task")]
        assert srv.errors() == [], [record_text(r) for r in srv.errors()]


@rule("ASGI-websocket-denial-response", "ASGI-websocket-app-error")
@pytest.mark.parametrize("when", ["return", "raise"])
def test_denial_started_then_app_ends_is_500(serve, when):
    """An app that starts a denial response and returns or raises before any body: nothing of
    it was sent, so the client gets skirr's 500 (as for an app failing before answering), the
    access log a 500 line and the error log the reason."""

    async def app(scope, receive, send):
        await receive()
        await send({"type": "websocket.http.response.start", "status": 401,
                    "headers": [(b"content-type", b"text/plain")]})
        if when == "raise":
            raise RuntimeError("ws-boom-mid-denial")

    with serve(app) as srv:
        c = srv.connect()
        c.send(upgrade())
        r = c.response()
        assert r.status == 500
        assert r.get(b"connection") == b"close"
        c.expect_eof()
        wait_logged(srv, "ws-boom-mid-denial" if when == "raise"
                    else "returned without completing the denial response")


@rule("ASGI-websocket-send-after-close")
@pytest.mark.parametrize("message", ["start", "body"])
def test_denial_after_the_client_left_raises_client_disconnected(serve, message):
    """A denial message after the client went away (before the answer, or in the middle of a
    denial response) raises skirr.ClientDisconnected, as any send() after a disconnect does
    (ASGI www 2.5 "Disconnected Client - send exception"), not a RuntimeError about the order of
    messages; nothing is logged."""
    import skirr

    record = Recorder()
    started, left = threading.Event(), threading.Event()

    async def app(scope, receive, send):
        await receive()
        started.set()
        if message == "body":
            await send({"type": "websocket.http.response.start", "status": 403,
                        "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "websocket.http.response.body", "body": b"x" * 10,
                        "more_body": True})
        await asyncio.get_running_loop().run_in_executor(None, left.wait, IO_TIMEOUT)
        await asyncio.sleep(0.2)  # the server sees the reset first
        try:
            if message == "start":
                await send({"type": "websocket.http.response.start", "status": 403,
                            "headers": []})
            else:
                await send({"type": "websocket.http.response.body", "body": b"late"})
        except BaseException as e:
            record.put(e)
            raise

    with serve(app) as srv:
        c = srv.connect()
        c.send(upgrade())
        assert started.wait(IO_TIMEOUT)
        if message == "body":
            c.read_until(b"\r\n\r\n")
        c.abort()
        left.set()
        exc = record.wait(1)[0]
        assert isinstance(exc, skirr.ClientDisconnected), repr(exc)
        time.sleep(0.05)
        assert srv.errors() == [], [record_text(r) for r in srv.errors()]


@rule("skirr-ws-shutdown-1012")
def test_shutdown_closes_with_1012(serve):
    """A graceful shutdown sends every open WebSocket a Close 1012 (service restart, as uvicorn)
    and the app sees the disconnect once the client answers."""
    record = Recorder()
    with serve(make_app(record)) as srv:
        c = srv.connect()
        handshake(c)
        srv.server.request_shutdown()
        assert c.read_exact(4) == close_frame(1012)
        c.send(frame(0x88, b"\x03\xf4"))
        c.expect_eof()
        assert record.wait(1)[0]["type"] == "websocket.disconnect"
        srv.thread.join(10)  # let this shutdown finish: a second request forces exit
        assert not srv.thread.is_alive() and srv.server.exit_code == 0


@rule("skirr-ws-flow-control")
def test_reading_stops_while_the_app_does_not_receive(serve):
    """Flow control: while the app does not call receive(), skirr stops reading (the client's
    send blocks once the socket buffers are full); once it does, every message arrives, in
    order, none lost."""
    import threading

    go = threading.Event()
    record = Recorder()
    count, size = 512, 60000  # about 30 MiB, far more than the socket buffers hold

    async def app(scope, receive, send):
        import asyncio

        await receive()
        await send({"type": "websocket.accept"})
        while not go.is_set():
            await asyncio.sleep(0.01)
        got = 0
        for i in range(count):
            ev = await receive()
            assert ev["bytes"] == bytes([i & 0xFF]) * size, i
            got += 1
        record.put(got)
        await send({"type": "websocket.send", "text": str(got)})

    with serve(app, ws_ping_interval=0) as srv:  # no keepalive ping among the bytes read
        c = srv.connect()
        handshake(c)
        msgs = [frame(0x82, bytes([i & 0xFF]) * size) for i in range(count)]
        wire = b"".join(msgs)
        c.sock.settimeout(1.0)
        sent = 0
        try:
            while sent < len(wire):
                sent += c.sock.send(wire[sent:sent + 65536])
        except TimeoutError:
            pass
        assert sent < len(wire), "the server read 30 MiB the app never asked for"
        go.set()
        c.sock.settimeout(IO_TIMEOUT)
        c.sock.sendall(wire[sent:])
        assert record.wait(1, timeout=20)[0] == count
        assert c.read_exact(5) == b"\x81\x03" + str(count).encode()


# -- permessage-deflate (RFC 7692) ------------------------------------------------------------------

def pmd_handshake(c, offer: bytes) -> dict:
    """Sends an upgrade offering `offer` in Sec-WebSocket-Extensions; returns the 101's fields."""
    c.send(upgrade()[:-2] + b"Sec-WebSocket-Extensions: " + offer + b"\r\n\r\n")
    head = c.read_until(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101 "), head
    return {line.split(b":", 1)[0].strip().lower(): line.split(b":", 1)[1].strip()
            for line in head.split(b"\r\n")[1:] if b":" in line}


@rule("RFC7692-7.1-negotiation")
@pytest.mark.parametrize("offer, answer", [
    # Chrome's offer (and the websockets client's): no value, so the server names the window the
    # client compresses with, 12 bits (§7.1.2.2), and its inflater keeps 4 KiB, not 32 KiB
    (b"permessage-deflate; client_max_window_bits",
     b"permessage-deflate; client_max_window_bits=12"),
    # Firefox's offer: without the parameter the answer may not name it (§7.1.2.2)
    (b"permessage-deflate", b"permessage-deflate"),
    (b"permessage-deflate; client_max_window_bits=15",
     b"permessage-deflate; client_max_window_bits=12"),
    (b"permessage-deflate; client_max_window_bits=8",
     b"permessage-deflate; client_max_window_bits=8"),
    (b"permessage-deflate; server_no_context_takeover; client_no_context_takeover",
     b"permessage-deflate; server_no_context_takeover; client_no_context_takeover"),
    (b"permessage-deflate; server_max_window_bits=10; client_max_window_bits=12",
     b"permessage-deflate; server_max_window_bits=10; client_max_window_bits=12"),
    # §7.1.2.1: an offer naming server_max_window_bits is answered naming it, 15 too (it was
    # left out, and the websockets client refused the answer: an attack, stop 57)
    (b"permessage-deflate; server_max_window_bits=15",
     b"permessage-deflate; server_max_window_bits=15"),
    (b"permessage-deflate; server_max_window_bits=14; client_max_window_bits",
     b"permessage-deflate; server_max_window_bits=14; client_max_window_bits=12"),
    # an offer skirr cannot take (8 bits: zlib; an unknown parameter) is skipped for the next
    (b"permessage-deflate; server_max_window_bits=8, permessage-deflate; x=1, "
     b"permessage-deflate; server_max_window_bits=\"9\"",
     b"permessage-deflate; server_max_window_bits=9"),
    (b"x-webkit-deflate-frame, permessage-deflate; server_max_window_bits=16", None),
])
def test_permessage_deflate_negotiation(serve, offer, answer):
    """RFC 7692 §7.1: the first acceptable offer is answered with the parameters it asked for,
    client_max_window_bits at most 12; none acceptable: no Sec-WebSocket-Extensions in the 101
    (and RSV1 stays an error)."""
    with serve(make_app(Recorder())) as srv:
        c = srv.connect()
        fields = pmd_handshake(c, offer)
        assert fields.get(b"sec-websocket-extensions") == answer
        if answer is None:
            c.send(frame(0xC1, b"x"))
            assert c.read_until_close() == close_frame(1002)


@rule("RFC7692-7.1-negotiation")
def test_permessage_deflate_off(serve):
    """--no-ws-per-message-deflate: an offer is not answered."""
    with serve(make_app(Recorder()), ws_per_message_deflate=False) as srv:
        c = srv.connect()
        assert b"sec-websocket-extensions" not in pmd_handshake(c, b"permessage-deflate")


@rule("RFC7692-7.2-compressed-messages")
@pytest.mark.parametrize("params", [{}, {"server_no_context_takeover": True,
                                         "client_no_context_takeover": True},
                                    {"server_max_window_bits": 9, "client_max_window_bits": 9},
                                    {"server_max_window_bits": 15}])
def test_permessage_deflate_echo(serve, params):
    """RFC 7692 §7.2: compressed messages both ways with the websockets client (which checks the
    server's frames), context takeover on and off, small windows; the app sees plain text."""
    from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory

    factory = ClientPerMessageDeflateFactory(**params)
    with serve(make_app(Recorder())) as srv:
        with connect(f"ws://127.0.0.1:{srv.port}/", extensions=[factory], compression=None,
                     open_timeout=IO_TIMEOUT, close_timeout=IO_TIMEOUT, max_size=None) as ws:
            assert [type(e).__name__ for e in ws.protocol.extensions] == ["PerMessageDeflate"]
            for text in ("hello " * 1000, "héllo", "", "x" * 200_000):
                ws.send(text)
                assert ws.recv(timeout=IO_TIMEOUT) == text
            data = os.urandom(100_000)
            ws.send(data)
            assert ws.recv(timeout=IO_TIMEOUT) == data


# 5,000 incompressible bytes: sent twice, the second copy is 5,000 bytes back, past a 4 KiB window
BLOCK = random.Random(7692).randbytes(5000)
TAIL = b"\x00\x00\xff\xff"  # RFC 7692 §7.2.2


@rule("RFC7692-7.1.2-window-bits")
def test_permessage_deflate_websockets_client_default(serve):
    """The websockets client with its default compression (it offers client_max_window_bits, as
    Chrome does): it is told 12 bits for its compressor and keeps 15 for its decompressor (the
    server's smaller window is not announced); JSON, a block repeated 5,000 bytes back and text
    round-trip, compressed both ways."""
    with serve(make_app(Recorder())) as srv:
        with connect(f"ws://127.0.0.1:{srv.port}/", open_timeout=IO_TIMEOUT,
                     close_timeout=IO_TIMEOUT, max_size=None) as ws:
            (ext,) = ws.protocol.extensions
            assert (type(ext).__name__, ext.local_max_window_bits, ext.remote_max_window_bits) == (
                "PerMessageDeflate", 12, 15)
            chat = json.dumps([{"id": i, "user": f"user{i % 7}", "text": "hello " * (i % 5)}
                               for i in range(60)])
            for message in (chat, BLOCK, BLOCK, BLOCK + BLOCK, "héllo " * 2000, chat):
                ws.send(message)
                assert ws.recv(timeout=IO_TIMEOUT) == message


@rule("RFC7692-7.1.2-window-bits")
def test_permessage_deflate_server_window_is_12_bits(serve):
    """The server compresses with a 4 KiB window (12 bits) whatever maximum was agreed (15 here):
    its echo of a block sent again, 5,000 bytes after the first, inflates with a 12-bit window
    (a 15-bit compressor would point back into the first echo)."""
    with serve(make_app(Recorder())) as srv:
        c = srv.connect()
        assert pmd_handshake(c, b"permessage-deflate")[b"sec-websocket-extensions"] == (
            b"permessage-deflate")
        inflater = zlib.decompressobj(wbits=-12)
        for _ in range(2):
            c.send(frame(0x82, BLOCK))  # uncompressed (RSV1 clear), echoed compressed
            b0, payload = read_frame(c)
            assert b0 == 0xC2  # FIN, RSV1 (compressed), binary
            assert inflater.decompress(payload + TAIL) == BLOCK


@rule("RFC7692-7.1.2-window-bits")
@pytest.mark.parametrize("wbits", [12, 15])
def test_permessage_deflate_client_window_is_the_answer(serve, wbits):
    """Offered client_max_window_bits without a value, the answer is 12 and the inflater keeps a
    4 KiB window: a client that compresses with 12 bits is echoed; one that points 5,000 bytes
    back into its previous message (15 bits, past what it agreed to) fails with 1007."""
    with serve(make_app(Recorder())) as srv:
        c = srv.connect()
        assert pmd_handshake(c, b"permessage-deflate; client_max_window_bits")[
            b"sec-websocket-extensions"] == b"permessage-deflate; client_max_window_bits=12"
        deflater = zlib.compressobj(wbits=-wbits)
        inflater = zlib.decompressobj(wbits=-15)
        for n in range(2):
            z = deflater.compress(BLOCK) + deflater.flush(zlib.Z_SYNC_FLUSH)
            assert z.endswith(TAIL)
            assert (len(z) < 100) == (n == 1 and wbits == 15)  # the second a back-reference
            c.send(frame(0xC2, z[:-4]))
            if n == 1 and wbits == 15:
                assert c.read_until_close() == close_frame(1007)
                break
            b0, payload = read_frame(c)
            assert b0 == 0xC2
            assert inflater.decompress(payload + TAIL) == BLOCK


def read_frame(c) -> tuple[int, bytes]:
    """One unmasked server frame: (first byte, payload)."""
    b0, b1 = c.read_exact(2)
    n = b1 & 0x7F
    if n == 126:
        n = int.from_bytes(c.read_exact(2), "big")
    elif n == 127:
        n = int.from_bytes(c.read_exact(8), "big")
    return b0, c.read_exact(n)


def deflated(data: bytes) -> bytes:
    """A message's permessage-deflate payload (RFC 7692 §7.2.1: the 00 00 FF FF tail removed)."""
    z = zlib.compressobj(wbits=-15)
    out = z.compress(data) + z.flush(zlib.Z_SYNC_FLUSH)
    assert out.endswith(b"\x00\x00\xff\xff")
    return out[:-4]


@rule("RFC7692-7.2.2-inflate-bounded-1009")
def test_compressed_message_inflating_past_max_size_fails_1009(serve):
    """A 16 MiB run of zeros compresses to about 16 KiB: with --ws-max-size 65536 it is refused
    with 1009 while inflating (the app never sees it); the same message at 65536 bytes passes."""
    with serve(make_app(Recorder()), ws_max_size=65536) as srv:
        c = srv.connect()
        pmd_handshake(c, b"permessage-deflate")
        c.send(frame(0xC2, deflated(b"\0" * 65536)))
        b0, payload = read_frame(c)
        assert b0 == 0xC2  # FIN, RSV1 (compressed), binary
        assert zlib.decompressobj(wbits=-15).decompress(payload + b"\x00\x00\xff\xff") == (
            b"\0" * 65536)
        bomb = deflated(b"\0" * (16 << 20))
        assert len(bomb) < 20_000
        c.send(frame(0xC2, bomb))
        assert c.read_until_close() == close_frame(1009)


@rule("skirr-ws-max-size-1009")
@pytest.mark.parametrize("mem_level", [1, 8])
def test_compressed_message_within_max_size_passes_though_longer_on_the_wire(serve, mem_level):
    """--ws-max-size bounds a compressed message's inflated size: 65,536 random bytes, which
    deflate makes longer (65,557 bytes with zlib's default memLevel 8, 68,117 with memLevel 1),
    pass --ws-max-size 65536 and are echoed whole. On the wire each frame of a compressed message
    may be at most zlib's deflateBound for any settings (65536 + 8193 + 1025 + 5 = 74,759
    bytes): a frame header announcing one byte more is refused with 1009 before its payload is
    read; an uncompressed message still gets nothing over 65,536."""
    data = random.Random(mem_level).randbytes(65536)
    z = zlib.compressobj(wbits=-15, memLevel=mem_level)
    wire = z.compress(data) + z.flush(zlib.Z_SYNC_FLUSH)
    assert wire.endswith(b"\x00\x00\xff\xff") and len(wire) - 4 > 65536
    with serve(make_app(Recorder()), ws_max_size=65536) as srv:
        c = srv.connect()
        pmd_handshake(c, b"permessage-deflate")
        c.send(frame(0xC2, wire[:-4]))
        b0, payload = read_frame(c)
        assert b0 == 0xC2
        assert zlib.decompressobj(wbits=-15).decompress(payload + b"\x00\x00\xff\xff") == data
        # 0xC2, masked 127-length form, 74,760: nothing of the payload follows
        c.send(bytes([0xC2, 0xFF]) + (74760).to_bytes(8, "big") + b"\x00" * 4)
        assert c.read_until_close() == close_frame(1009)
        c = srv.connect()
        pmd_handshake(c, b"permessage-deflate")
        c.send(bytes([0x82, 0xFF]) + (65537).to_bytes(8, "big") + b"\x00" * 4)
        assert c.read_until_close() == close_frame(1009)


@rule("skirr-ws-max-size-1009")
@pytest.mark.parametrize("size, piece", [(12_000, 1), (65_536, 64)], ids=["zeros-1", "random-64"])
def test_compressed_message_flushed_every_fragment_passes(serve, size, piece):
    """A sender may flush its compressor at every fragment (RFC 7692 §7.2.1): each fragment then
    carries a sync flush's 4 or more bytes, so 12,000 zero bytes in 1-byte fragments or 65,536
    random bytes in 64-byte ones are far longer on the wire than inflated. They are within
    --ws-max-size 65536 inflated, so they pass and are echoed whole (the wire bound applies to
    each frame; before, to the message's total, and they were refused 1009: stop 58's attack)."""
    data = (b"\0" * size) if size == 12_000 else random.Random(7).randbytes(size)
    z = zlib.compressobj(wbits=-15)
    pieces = [z.compress(data[i:i + piece]) + z.flush(zlib.Z_SYNC_FLUSH)
              for i in range(0, size, piece)]
    pieces[-1] = pieces[-1][:-4]  # RFC 7692 §7.2.1: the message's tail removed
    assert sum(map(len, pieces)) > 65536 + 8193 + 1025 + 5
    with serve(make_app(Recorder()), ws_max_size=65536) as srv:
        c = srv.connect()
        pmd_handshake(c, b"permessage-deflate")
        last = len(pieces) - 1  # the first frame: binary, RSV1; FIN on the last
        c.send(b"".join(frame((0x42 if k == 0 else 0x00) | (0x80 if k == last else 0), p)
                        for k, p in enumerate(pieces)))
        b0, payload = read_frame(c)
        assert b0 == 0xC2
        assert zlib.decompressobj(wbits=-15).decompress(payload + b"\x00\x00\xff\xff") == data


@rule("RFC7692-7.2-compressed-messages")
def test_compressed_invalid_utf8_fails_1007(serve):
    """A compressed text message is UTF-8 checked after inflating: an encoded surrogate is 1007;
    bytes that are not DEFLATE are 1007 too."""
    with serve(make_app(Recorder())) as srv:
        c = srv.connect()
        pmd_handshake(c, b"permessage-deflate")
        c.send(frame(0xC1, deflated(b"ok\xed\xa0\x80")))
        assert c.read_until_close() == close_frame(1007)
        c = srv.connect()
        pmd_handshake(c, b"permessage-deflate")
        c.send(frame(0xC1, b"\xff\xff\xff\xff"))
        assert c.read_until_close() == close_frame(1007)


@rule("skirr-ws-failure-after-queued-messages")
def test_compressed_failure_waits_for_the_message_before_it(serve):
    """permessage-deflate: a compressed "Hello" and a compressed message inflating past
    --ws-max-size in one send: the compressed echo of "Hello" comes first, then the Close 1009."""
    with serve(make_app(Recorder()), ws_max_size=65536) as srv:
        c = srv.connect()
        pmd_handshake(c, b"permessage-deflate")
        c.send(frame(0xC1, deflated(b"Hello")) + frame(0xC2, deflated(b"\0" * (1 << 20))))
        b0, payload = read_frame(c)
        assert b0 == 0xC1  # FIN, RSV1 (compressed), text
        assert zlib.decompressobj(wbits=-15).decompress(payload + b"\x00\x00\xff\xff") == b"Hello"
        assert c.read_until_close() == close_frame(1009)


@rule("skirr-ws-config")
@pytest.mark.parametrize("args", [["--ws", "wsproto"], ["--ws-max-size", "0"],
                                  ["--ws-ping-interval", "-1"], ["--ws-max-queue", "x"]])
def test_ws_cli_usage_errors(args):
    """The CLI refuses a bad WebSocket option as a usage error (exit 2, the option named)."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "skirr", *args, "app:app"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert args[0] in p.stderr
