"""WebSocket requests and frames shared by the WebSocket, access-log and metrics cases (issue 14):
the handshake request and client frames, one app answering every way a handshake can be answered,
and the raw requests that reach each answer.

    for data, status in WS_CASES:
        ws_exchange(srv.connect(), data, status)   # the answer checked; a 101 session closed
"""
from __future__ import annotations

from conftest import Client

KEY = b"dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455 §1.3's example nonce
MASK = b"\x37\xfa\x21\x3d"  # RFC 6455 §5.7's masking key


def upgrade(key: bytes = KEY, version: bytes = b"13", target: str = "/ws",
            extra: bytes = b"") -> bytes:
    """A handshake request for target; extra: more field lines (each ending in CRLF)."""
    return (b"GET " + target.encode() + b" HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\n" + extra + b"Sec-WebSocket-Key: " + key
            + b"\r\nSec-WebSocket-Version: " + version + b"\r\n\r\n")


def frame(b0: int, payload: bytes = b"", masked: bool = True, length16: bool = False) -> bytes:
    """A client frame: first byte b0 (FIN, RSV, opcode), the payload masked with MASK."""
    n = len(payload)
    bit = 0x80 if masked else 0
    if n > 65535:  # RFC 6455 §5.2: the 64-bit form
        head = bytes([b0, bit | 127]) + n.to_bytes(8, "big")
    elif length16 or n > 125:
        head = bytes([b0, bit | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([b0, bit | n])
    if not masked:
        return head + payload
    return head + MASK + mask(payload)


def mask(payload: bytes, key: bytes = MASK) -> bytes:
    """payload XOR the 4-byte key repeated (RFC 6455 §5.3), as one big-integer XOR: a byte loop
    in Python cost 5 ms of CPU per 60 KB (2.5 s for the 30 MiB of the flow-control case)."""
    n = len(payload)
    keys = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "little") ^ int.from_bytes(keys, "little")).to_bytes(n, "little")


def ws_upgrade(target: str, key: bytes = KEY, version: bytes = b"13") -> bytes:
    """The access-log and metrics cases' handshake: with a User-Agent (the log's %(a)s)."""
    return upgrade(key, version, target, b"User-Agent: ws-ua\r\n")


WS_CLOSE_1000 = frame(0x88, b"\x03\xe8")  # the client's Close 1000, masked


async def ws_app(scope, receive, send):
    """/chat: accepted (with x-out: o1), closed when the client closes; /deny: websocket.close
    before accept (403); /denial: a 401 denial response of 8 bytes; /fail: raises first (500)."""
    assert scope["type"] == "websocket"
    assert (await receive())["type"] == "websocket.connect"
    path = scope["path"]
    if path == "/deny":
        await send({"type": "websocket.close"})
    elif path == "/denial":
        await send({"type": "websocket.http.response.start", "status": 401,
                    "headers": [(b"www-authenticate", b"Bearer")]})
        await send({"type": "websocket.http.response.body", "body": b"no token"})
    elif path == "/fail":
        raise RuntimeError("ws-fail-before-accept")
    else:
        await send({"type": "websocket.accept", "headers": [(b"x-out", b"o1")]})
        assert (await receive())["type"] == "websocket.disconnect"


# (what the client sends, the status it gets back)
WS_CASES = [
    (ws_upgrade("/chat?room=1"), 101),
    (ws_upgrade("/deny"), 403),
    (ws_upgrade("/denial?x=1"), 401),
    (ws_upgrade("/fail"), 500),
    (ws_upgrade("/chat", key=b"c2hvcnQ="), 400),  # a key of 5 bytes: malformed
    (ws_upgrade("/chat", version=b"8"), 426),
]


def ws_exchange(c: Client, data: bytes, status: int) -> None:
    """Sends one handshake on c and checks the answer's status; an accepted session is then
    closed by the client (Close 1000, echoed by the server) and c reads to EOF."""
    c.send(data)
    raw = c.read_until(b"\r\n\r\n") if status == 101 else c.read_until_close()
    assert raw.startswith(b"HTTP/1.1 %d " % status), raw
    if status == 101:
        c.send(WS_CLOSE_1000)  # the session ends normally: the server echoes the Close
        assert c.read_until_close() == b"\x88\x02\x03\xe8"
