"""WebSockets over a real socket (issue 14, spec/websocket.toml): the handshake, the frame rules a
client can see, and the close handshake, with the ``websockets`` library as the client oracle
where a well-behaved client suffices and raw bytes where the client must misbehave.

Every case runs on both loops (the ``serve`` fixture). The application below answers a plain
HTTP request with 404, as FastAPI does for a websocket route, so an upgrade that is not served as
a WebSocket fails every handshake case here.
"""
from __future__ import annotations

import base64
import hashlib
import os

import pytest
from websockets.sync.client import connect

from conftest import IO_TIMEOUT, Recorder

rule = pytest.mark.rule

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 §1.3
KEY = b"dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455 §1.3's example nonce
ACCEPT = base64.b64encode(hashlib.sha1(KEY + GUID).digest())  # s3pPLMBiTxaQ9kYGzzhZRbK+xOo=
MASK = b"\x37\xfa\x21\x3d"  # RFC 6455 §5.7's masking key


def upgrade(key: bytes = KEY, version: bytes = b"13") -> bytes:
    return (b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: " + version + b"\r\n\r\n")


def frame(b0: int, payload: bytes = b"", masked: bool = True, length16: bool = False) -> bytes:
    """A client frame: first byte b0 (FIN, RSV, opcode), the payload masked with MASK."""
    n = len(payload)
    bit = 0x80 if masked else 0
    head = bytes([b0, bit | 126]) + n.to_bytes(2, "big") if length16 or n > 125 else bytes([b0, bit | n])
    if not masked:
        return head + payload
    return head + MASK + bytes(c ^ MASK[i & 3] for i, c in enumerate(payload))


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
