"""Request-side flow control (spec/flow_control.toml; issue 5 item 2): skirr stops reading a
connection while 64 KiB of request body wait for the application's ``receive()``, and while
64 KiB of pipelined input wait to be parsed; it resumes when the application consumes.

The client fixes its send buffer (SO_SNDBUF 32 KiB: the kernel holds 64 KiB and does not
autotune), writes without blocking until the server stops taking bytes, and counts what it got
out. Everything else sits in the server's receive buffer, whose size the kernel chooses; the
bound asserted (4 MiB) is far below what was offered (16 MiB and more).
"""
import asyncio
import hashlib
import threading

import pytest

from _flow import HIGH_WATER, KIB, MIB, send_until_stalled, small_client, widen_send_buffer
from conftest import Recorder, http_request

SNDBUF = 32 * KIB
STALL_BOUND = 4 * MIB  # bytes a client may get out to a server that stopped reading


@pytest.mark.rule("skirr-flow-request-body-pause")
def test_unconsumed_body_stops_reading_then_resumes(serve):
    """A 16 MiB body; the app does not call receive() until told to. The client's writes stall
    below 4 MiB; the app's first receive() then returns everything skirr buffered, which is the
    64 KiB mark plus at most one 64 KiB read; reading resumes and the app gets the whole body."""
    size = 16 * MIB
    body = bytes(range(256)) * (size // 256)
    go = threading.Event()
    seen = Recorder()

    async def app(scope, receive, send):
        while not go.is_set():
            await asyncio.sleep(0.01)
        msg = await receive()
        first = len(msg["body"])
        h = hashlib.sha256(msg["body"])
        total = first
        while msg.get("more_body"):
            msg = await receive()
            total += len(msg["body"])
            h.update(msg["body"])
        seen.put((first, total, h.hexdigest()))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"%d" % total})

    with serve(app) as srv:
        c = small_client(srv, sndbuf=SNDBUF, timeout=10.0)
        data = http_request("POST", "/", body=body)
        sent = send_until_stalled(c.sock, data)
        assert sent <= STALL_BOUND, f"the server took {sent} bytes of a body nobody consumes"
        widen_send_buffer(c)
        go.set()
        sender = threading.Thread(target=c.sock.sendall, args=(data[sent:],), daemon=True)
        sender.start()
        first, total, digest = seen.wait(1, timeout=10)[0]
        sender.join(10)
        assert HIGH_WATER <= first < 2 * HIGH_WATER, f"skirr buffered {first} bytes of body"
        assert (total, digest) == (size, hashlib.sha256(body).hexdigest())
        r = c.response()
        assert (r.status, r.body) == (200, b"%d" % size)


@pytest.mark.rule("skirr-flow-request-body-pause")
def test_body_read_piecewise_never_buffers_past_mark(serve):
    """An app that consumes slowly (one receive() every 10 ms) never gets a piece larger than the
    64 KiB mark plus one 64 KiB read: skirr reads only as fast as the app consumes."""
    size = 4 * MIB
    body = b"b" * size
    seen = Recorder()

    async def app(scope, receive, send):
        sizes = []
        while True:
            await asyncio.sleep(0.01)
            msg = await receive()
            sizes.append(len(msg["body"]))
            if not msg.get("more_body"):
                break
        seen.put(sizes)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"%d" % sum(sizes)})

    with serve(app) as srv:
        c = small_client(srv, sndbuf=SNDBUF, timeout=10.0)
        sender = threading.Thread(target=c.sock.sendall, args=(http_request("POST", "/", body=body),),
                                  daemon=True)
        sender.start()
        sizes = seen.wait(1, timeout=15)[0]
        sender.join(10)
        assert sum(sizes) == size
        assert max(sizes) < 2 * HIGH_WATER, f"largest piece {max(sizes)}"
        assert c.response().body == b"%d" % size


@pytest.mark.rule("skirr-flow-pipelined-input-bounded")
def test_pipelined_input_bounded_while_response_pending(serve):
    """The first request's app waits; behind it the client pipelines 256 POSTs of 64 KiB
    (16 MiB). The server stops taking bytes (the client stalls below 4 MiB) and starts no other
    request; once the first answers, all 257 are answered in order."""
    n = 256
    go = threading.Event()
    started = Recorder()

    async def app(scope, receive, send):
        started.put(scope["path"])
        total = 0
        while True:
            msg = await receive()
            total += len(msg["body"])
            if not msg.get("more_body"):
                break
        if scope["path"] == "/first":
            while not go.is_set():
                await asyncio.sleep(0.01)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"%s %d" % (scope["path"].encode(), total)})

    with serve(app) as srv:
        c = small_client(srv, sndbuf=SNDBUF, timeout=10.0)
        data = http_request("GET", "/first") + b"".join(
            http_request("POST", f"/{i}", body=bytes([i % 256]) * (64 * KIB)) for i in range(n)
        )
        sent = send_until_stalled(c.sock, data)
        assert sent <= STALL_BOUND, f"the server took {sent} pipelined bytes"
        assert started.items == ["/first"]
        widen_send_buffer(c)
        go.set()
        sender = threading.Thread(target=c.sock.sendall, args=(data[sent:],), daemon=True)
        sender.start()
        assert c.response().body == b"/first 0"
        for i in range(n):
            r = c.response()
            assert (r.status, r.body) == (200, b"/%d %d" % (i, 64 * KIB))
        sender.join(10)
        assert started.wait(n + 1) == ["/first"] + [f"/{i}" for i in range(n)]


@pytest.mark.rule("skirr-flow-request-body-pause")
@pytest.mark.parametrize("size", [HIGH_WATER - 1, HIGH_WATER, HIGH_WATER + 1, 2 * HIGH_WATER])
def test_body_ending_at_the_mark_is_completed(serve, size):
    """The whole body has arrived before the app reads it, and its last byte took the buffered
    body to the 64 KiB mark or past it: the end of the message carries no bytes, so the pause
    must not hold it back; the app reads `size` bytes and then more_body false."""
    seen = Recorder()

    async def app(scope, receive, send):
        await asyncio.sleep(0.3)  # every byte is in before the first receive()
        events = []
        while True:
            try:
                msg = await asyncio.wait_for(receive(), 3.0)
            except asyncio.TimeoutError:
                events.append("receive() did not return within 3 s")
                break
            events.append((msg["type"], len(msg.get("body", b"")), msg.get("more_body", False)))
            if msg["type"] != "http.request" or not msg.get("more_body"):
                break
        seen.put(events)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    with serve(app) as srv:
        c = srv.connect(timeout=10.0)
        c.send(http_request("POST", "/", body=b"a" * size))
        events = seen.wait(1, timeout=10)[0]
        assert sum(e[1] for e in events if isinstance(e, tuple)) == size, events
        assert events[-1] == ("http.request", events[-1][1], False), events
        assert c.response().body == b"ok"
