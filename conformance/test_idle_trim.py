"""Connections idle across the reactor's one-second tick (issue 37: memory per idle connection).

The tick frees what an idle connection keeps between messages: the transport's input and output
buffers, the HTTP/1.1 parser's head block and field array, the response head's storage and the
scope's addresses, a WebSocket's empty message buffers and the HTTP/1.1 handler it was upgraded
from. The next message makes them again. Each case here crosses a tick (TICK_WAIT) where storage
could be freed, or where it must not be (half a request head, a pipelined request behind a
response), and checks the next exchange byte for byte. That the storage is given back is read
from glibc's own count of the bytes malloc has handed out (mallinfo2: the C side's buffers; the
interpreter's small objects live in its own arenas and are not in it); the memory per connection
is measured in bench/ (make bench-scale: KiB per idle connection).
"""
import ctypes
import os
import time

import pytest
from websockets.sync.client import connect

from conftest import http_request

TICK_WAIT = 1.3  # seconds: at least one tick of the reactor's 1 s timer passes
IO_TIMEOUT = 10.0

rule = pytest.mark.rule


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def malloc_in_use() -> int:
    """Bytes malloc has handed out and not had back (glibc's mallinfo2().uordblks)."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _Mallinfo2
    return libc.mallinfo2().uordblks


IDLE_CONNS = 200
# bytes malloc must get back per idle connection: the parser's head block (512) and field array
# (256), the response head (256) and the output buffer (256) are 1,280 at least; a tick that comes
# while the connections are being answered takes some of them early, hence the margin
TRIM_PER_CONN = 500
# The tick's phase is unknown: a round whose answers straddle a tick (most storage freed before
# the first reading) is repeated, up to this many rounds. With nothing freed no round passes.
ROUNDS = 3


def freed_within_a_tick(make_idle) -> list[int]:
    """Per round until one passes (at most ROUNDS): make_idle() (connections answered, then
    idle), then the bytes malloc got back over TICK_WAIT."""
    drops = []
    for _ in range(ROUNDS):
        make_idle()
        before = malloc_in_use()
        time.sleep(TICK_WAIT)
        drops.append(before - malloc_in_use())
        if drops[-1] >= IDLE_CONNS * TRIM_PER_CONN:
            break
    return drops


def assert_freed(drops: list[int]) -> None:
    """The last round's drop reached IDLE_CONNS * TRIM_PER_CONN bytes. Not judged under
    AddressSanitizer (make sanitize): ASan's allocator serves malloc there and glibc's count stays
    0; the trims still run and the exchanges after them are still checked."""
    if "SKIRR_SAN_PRELOAD" not in os.environ:
        assert drops[-1] >= IDLE_CONNS * TRIM_PER_CONN, drops


@rule("skirr-idle-connection-trimmed")
def test_idle_connections_give_their_storage_back(serve, echo_app):
    """IDLE_CONNS keep-alive connections, each after one request: within a tick malloc gets at
    least TRIM_PER_CONN bytes back per connection (nothing comes back if nothing is freed; a
    round repeated as freed_within_a_tick says), and each connection then serves its next request
    exactly."""
    with serve(echo_app, timeout_keep_alive=30) as srv:
        conns = [srv.connect() for _ in range(IDLE_CONNS)]
        req = http_request("POST", "/warm", [("Host", "x"), ("X-Pad", "p" * 200)], body=b"w")

        def answered():
            for c in conns:
                c.send(req)
            for c in conns:
                assert c.response().body == b"w"

        drops = freed_within_a_tick(answered)
        assert_freed(drops)
        for i, c in enumerate(conns):
            r = c.request(http_request("POST", f"/again/{i}", body=b"again"))
            assert (r.status, r.get(b"x-target"), r.body) == (200, f"/again/{i}".encode(), b"again")


@rule("skirr-idle-connection-trimmed")
def test_keep_alive_request_after_a_tick(serve, echo_app):
    """A request, a tick, a second request on the connection: both exact, the second scope's
    client and server addresses (made again) equal to the first's."""
    with serve(echo_app) as srv:
        c = srv.connect()
        r1 = c.request(http_request("POST", "/1", [("Host", "x"), ("X-A", "1")], body=b"first"))
        time.sleep(TICK_WAIT)
        r2 = c.request(http_request("POST", "/2?q=2", [("Host", "y"), ("X-B", "2" * 700)],
                                    body=b"second"))
        assert (r1.status, r1.get(b"x-target"), r1.body) == (200, b"/1", b"first")
        assert (r2.status, r2.get(b"x-target"), r2.body) == (200, b"/2?q=2", b"second")
        first, second = echo_app.calls.wait(2)
        assert first["scope"]["client"] == second["scope"]["client"] == c.sock.getsockname()
        assert first["scope"]["server"] == second["scope"]["server"] == c.sock.getpeername()
        assert (b"x-b", b"2" * 700) in second["scope"]["headers"]
        assert (b"x-a", b"1") not in second["scope"]["headers"]


@rule("skirr-idle-connection-trimmed")
def test_half_a_head_across_a_tick(serve, echo_app):
    """Half a request head, a tick, the rest: the parser kept what it had (it is inside a
    message), the request is exact."""
    with serve(echo_app) as srv:
        c = srv.connect()
        req = http_request("POST", "/split?a=1", [("Host", "x"), ("X-Long", "v" * 300)],
                           body=b"payload")
        c.send(req[:150])
        time.sleep(TICK_WAIT)
        c.send(req[150:])
        r = c.response()
        assert (r.status, r.get(b"x-target"), r.body) == (200, b"/split?a=1", b"payload")
        (call,) = echo_app.calls.wait(1)
        assert (b"x-long", b"v" * 300) in call["scope"]["headers"]


@rule("skirr-idle-connection-trimmed")
def test_pipelined_request_split_across_a_tick(serve, echo_app):
    """A request and the first half of the next in one write, a tick, the second half: the first
    is answered at once, the second exact after the rest arrives."""
    with serve(echo_app) as srv:
        c = srv.connect()
        second = http_request("POST", "/second", body=b"two")
        c.send(http_request("POST", "/first", body=b"one") + second[:20])
        r1 = c.response()
        time.sleep(TICK_WAIT)
        c.send(second[20:])
        r2 = c.response()
        assert (r1.status, r1.get(b"x-target"), r1.body) == (200, b"/first", b"one")
        assert (r2.status, r2.get(b"x-target"), r2.body) == (200, b"/second", b"two")


@rule("skirr-idle-connection-trimmed")
def test_body_across_a_tick(serve, echo_app):
    """A request whose body is half sent when the tick comes: the app gets all of it."""
    with serve(echo_app) as srv:
        c = srv.connect()
        req = http_request("POST", "/body", body=b"0123456789" * 50)
        head_end = req.index(b"\r\n\r\n") + 4
        c.send(req[:head_end + 200])
        time.sleep(TICK_WAIT)
        c.send(req[head_end + 200:])
        r = c.response()
        assert (r.status, r.body) == (200, b"0123456789" * 50)


async def _echo(scope, receive, send):
    assert scope["type"] == "websocket"
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    while True:
        event = await receive()
        if event["type"] == "websocket.disconnect":
            return
        if event.get("text") is not None:
            await send({"type": "websocket.send", "text": event["text"]})
        else:
            await send({"type": "websocket.send", "bytes": event["bytes"]})


@rule("skirr-idle-connection-trimmed")
def test_idle_websockets_release_their_http_handler(serve):
    """IDLE_CONNS accepted WebSockets, idle: within a tick malloc gets at least TRIM_PER_CONN
    bytes back per connection (the HTTP/1.1 handler each was upgraded from, with its parser's
    storage), and each then echoes a message exactly."""
    from _ws import frame, upgrade

    with serve(_echo) as srv:
        conns = []

        def accepted():  # a new batch each round: a WebSocket is upgraded once
            batch = [srv.connect() for _ in range(IDLE_CONNS)]
            for c in batch:
                c.send(upgrade())
            for c in batch:
                assert c.read_until(b"\r\n\r\n").startswith(b"HTTP/1.1 101 ")
            conns.extend(batch)

        drops = freed_within_a_tick(accepted)
        assert_freed(drops)
        for i, c in enumerate(conns):
            text = f"message {i}".encode()
            c.send(frame(0x81, text))
            assert c.read_exact(2 + len(text)) == bytes([0x81, len(text)]) + text


@rule("skirr-idle-connection-trimmed")
def test_websocket_after_ticks(serve):
    """An accepted WebSocket idle across a tick (its HTTP/1.1 handler released, its message
    buffers freed), then messages of 1 byte to 100 KiB, text and binary, a tick between two of
    them: each echoed exactly."""
    with serve(_echo) as srv:
        with connect(f"ws://127.0.0.1:{srv.port}/ws", open_timeout=IO_TIMEOUT,
                     close_timeout=IO_TIMEOUT, max_size=None) as ws:
            time.sleep(TICK_WAIT)
            ws.send("é")
            assert ws.recv(timeout=IO_TIMEOUT) == "é"
            ws.send(bytes(range(256)) * 400)
            assert ws.recv(timeout=IO_TIMEOUT) == bytes(range(256)) * 400
            time.sleep(TICK_WAIT)
            ws.send("x" * 70_000)
            assert ws.recv(timeout=IO_TIMEOUT) == "x" * 70_000


@rule("skirr-idle-connection-trimmed")
def test_websocket_fragment_across_a_tick(serve):
    """The first fragment of a text message, a tick (the half-reassembled message is kept), the
    last fragment: the whole message is echoed as one unmasked text frame."""
    from _ws import frame, upgrade

    with serve(_echo) as srv:
        c = srv.connect()
        c.send(upgrade())
        assert c.read_until(b"\r\n\r\n").startswith(b"HTTP/1.1 101 ")
        c.send(frame(0x01, b"first half, "))  # text, FIN clear
        time.sleep(TICK_WAIT)
        c.send(frame(0x80, b"second half"))  # continuation, FIN set
        expected = b"first half, second half"
        assert c.read_exact(2 + len(expected)) == bytes([0x81, len(expected)]) + expected


@rule("skirr-idle-connection-trimmed")
def test_connections_on_one_address_share_the_server_tuple(serve):
    """Three connections to one listening address: each scope's "server" is the address, and
    the one tuple (made once, not once per connection)."""
    seen = []

    async def app(scope, receive, send):
        seen.append((scope["server"], scope["client"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    with serve(app) as srv:
        conns = [srv.connect() for _ in range(3)]
        for c in conns:
            assert c.request(http_request()).body == b"ok"
        assert [client for _, client in seen] == [c.sock.getsockname() for c in conns]
        assert seen[0][0] == ("127.0.0.1", srv.port)
        assert seen[0][0] is seen[1][0] is seen[2][0]
