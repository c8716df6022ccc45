"""Response backpressure (spec/flow_control.toml; DESIGN "Streaming responses"; the accepted shape
of shared/seeds/002): after every ``http.response.body`` with ``more_body: true``, ``send()``
completes only when the connection's unsent output is below 64 KiB; the final event is not held
back; a single event larger than the mark goes out whole and is drained before ``send()``
returns; a send blocked on drain can be cancelled.

The client fixes its receive buffer (SO_RCVBUF 32 KiB, so the kernel holds 64 KiB on its side and
does not autotune), so while it reads nothing the app can get at most this far ahead:
the server's send buffer (at most net.ipv4.tcp_wmem's maximum) + the client's receive buffer +
the 64 KiB mark + one event.
"""
import asyncio
import hashlib
import os
import socket
import sys
import threading
import time

import pytest

from _flow import (HIGH_WATER, KIB, MIB, Progress, kernel_send_buffer_max, rss,
                   shrink_server_send_buffer, small_client)
from conftest import Recorder, http_request

CHUNK = 64 * KIB
RCVBUF = 32 * KIB


def chunk(i: int) -> bytes:
    """A freshly allocated 64 KiB event whose bytes depend on i (order is checked)."""
    return i.to_bytes(4, "big") * (CHUNK // 4)


def stalled_bound(client) -> int:
    """The most an app may have handed to skirr while this client reads nothing."""
    return kernel_send_buffer_max() + client.rcvbuf + HIGH_WATER + CHUNK


async def reply(send, body: bytes, headers=()) -> None:
    """A 200 with `headers` and `body` as its one, final body event."""
    await send({"type": "http.response.start", "status": 200, "headers": list(headers)})
    await send({"type": "http.response.body", "body": body})


@pytest.mark.rule("skirr-flow-send-backpressure")
def test_streaming_send_pending_until_client_reads(serve):
    """1,024 events of 64 KiB (64 MiB). While the client reads nothing, the app's sends stop:
    exactly one send is pending (started, not completed), and what the app produced fits in the
    kernel buffers + 64 KiB + one event. Once the client reads, every send completes and every
    byte arrives in order."""
    n = 1024
    progress = Progress()

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(n):
            progress.bump("started")
            await send({"type": "http.response.body", "body": chunk(i), "more_body": True})
            progress.bump("done")
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        progress.bump("finished")

    with serve(app) as srv:
        c = small_client(srv, rcvbuf=RCVBUF, timeout=10.0)
        c.send(http_request())
        done = progress.wait_stable("done")
        assert progress.get("started") == done + 1, "no send is pending while the client reads nothing"
        assert done < n
        assert done * CHUNK <= stalled_bound(c), (
            f"the app produced {done * CHUNK} bytes for a client that read nothing"
            f" (bound {stalled_bound(c)})"
        )
        r = c.response()
        assert (r.status, r.get(b"transfer-encoding"), len(r.body)) == (200, b"chunked", n * CHUNK)
        expected = hashlib.sha256(b"".join(chunk(i) for i in range(n))).hexdigest()
        assert hashlib.sha256(r.body).hexdigest() == expected
        progress.wait_for("finished", 1)
        assert (progress.get("done"), progress.get("finished")) == (n, 1)
        assert srv.errors() == []


@pytest.mark.rule("skirr-flow-large-event-whole")
def test_single_huge_event_delivered_whole(serve):
    """One event larger than everything the kernel can hold (tcp_wmem max + 4 MiB, at least
    8 MiB): its send stays pending while the client reads nothing (it is drained before control
    returns to the app), then the client gets it whole."""
    size = max(8 * MIB, kernel_send_buffer_max() + 4 * MIB)
    big = bytes(range(256)) * (size // 256)
    progress = Progress()

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(big) + 3).encode())]})
        progress.bump("started")
        await send({"type": "http.response.body", "body": big, "more_body": True})
        progress.bump("done")
        await send({"type": "http.response.body", "body": b"end", "more_body": False})

    with serve(app) as srv:
        c = small_client(srv, rcvbuf=RCVBUF, timeout=10.0)
        c.send(http_request())
        progress.wait_stable("started", quiet=0.5)  # the client reads nothing meanwhile
        assert progress.get("done") == 0, "the huge event's send completed while nothing was read"
        r = c.response()
        assert (r.status, r.get(b"content-length")) == (200, str(size + 3).encode())
        assert len(r.body) == size + 3
        assert r.body[:size] == big and r.body[size:] == b"end"
        assert progress.get("done") == 1


@pytest.mark.rule("skirr-flow-final-event-cheap")
def test_final_event_does_not_wait_for_the_client(serve):
    """A final event (more_body false) of 8 MiB completes at once although the client reads
    nothing; the client then gets all of it."""
    size = 8 * MIB
    body = b"f" * size
    done = Recorder()

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body, "more_body": False})
        done.put("final send returned")

    with serve(app) as srv:
        c = small_client(srv, rcvbuf=RCVBUF, timeout=10.0)
        c.send(http_request())
        assert done.wait(1, timeout=2.0) == ["final send returned"]
        r = c.response()
        assert (r.status, r.get(b"content-length"), r.body == body) == (200, str(size).encode(), True)


@pytest.mark.rule("skirr-flow-chunk-at-once")
def test_more_body_chunk_is_sent_before_send_returns(serve):
    """A chunk sent with more_body true is on the wire when its send() returns, even inside the
    app's first step (which 3.12+ runs eagerly, inside the pass over the request's bytes): the app
    then blocks the loop until the client has read that chunk, which only a chunk already sent
    can end before the wait's 5 s."""
    client_read_first = threading.Event()
    waited = Recorder()

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        waited.put(client_read_first.wait(5.0))  # blocks the loop: nothing more is sent meanwhile
        await send({"type": "http.response.body", "body": b"last", "more_body": False})

    with serve(app) as srv:
        c = srv.connect(timeout=10.0)
        c.send(http_request())
        head = c.read_until(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"transfer-encoding: chunked" in head
        assert c.read_until(b"first\r\n") == b"5\r\nfirst\r\n"
        client_read_first.set()
        assert c.read_until(b"0\r\n\r\n") == b"4\r\nlast\r\n0\r\n\r\n"
        assert waited.wait(1, timeout=2.0) == [True]
        assert srv.errors() == []


@pytest.mark.rule("skirr-flow-chunk-at-once")
def test_chunk_to_a_reset_client_inside_the_first_step(serve):
    """The client resets before the app's first step sends anything. Inside the pass (3.12+'s
    eager first step) the chunk's send fails quietly and the reset is handled at the pass's end,
    so the step's sends complete and their bytes are dropped ("sent"); outside it (3.11) send()
    raises ClientDisconnected (ASGI www 2.5 "Disconnected Client - send exception"). Either way
    receive() then gives http.disconnect, nothing is logged as an error, and the next connection
    is served."""
    started, reset = threading.Event(), threading.Event()
    seen = Recorder()

    async def app(scope, receive, send):
        if scope["path"] == "/next":
            await reply(send, b"next")
            return
        await receive()
        started.set()
        reset.wait(5.0)  # blocks the loop: the reset arrives while the first step runs
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"x" * 1000, "more_body": True})
            await send({"type": "http.response.body", "body": b"y" * 1000, "more_body": True})
            seen.put("sent")
        except OSError as e:
            seen.put(type(e).__name__)
        seen.put((await receive())["type"])

    eager = sys.version_info >= (3, 12)  # skirr starts its request Tasks eagerly there
    with serve(app) as srv:
        c = srv.connect(timeout=10.0)
        c.send(http_request())
        assert started.wait(5.0)
        c.abort()
        time.sleep(0.05)  # the RST reaches the server's socket
        reset.set()
        outcome = ["sent" if eager else "ClientDisconnected", "http.disconnect"]
        assert seen.wait(2, timeout=5.0) == outcome
        r = srv.get("/next")
        assert (r.status, r.body) == (200, b"next")
        assert srv.errors() == []


@pytest.mark.rule("skirr-flow-drain-cancellable")
def test_cancel_task_waiting_on_drain(serve):
    """The app's task is cancelled while its send waits on drain: the app sees CancelledError at
    that await, nothing is logged as an application error, the connection is closed without
    completing the message, and the server keeps serving."""
    progress = Progress()
    seen = Recorder()
    handles = Recorder()

    async def app(scope, receive, send):
        await receive()
        if scope["path"] == "/ok":
            await reply(send, b"ok")
            return
        handles.put((asyncio.get_running_loop(), asyncio.current_task()))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            for i in range(10_000):
                progress.bump("started")
                await send({"type": "http.response.body", "body": chunk(i), "more_body": True})
                progress.bump("done")
        except asyncio.CancelledError:
            seen.put(("cancelled", progress.get("started") - progress.get("done")))
            raise
        except BaseException as e:  # pragma: no cover - reported below
            seen.put(("raised", repr(e)))
            raise
        seen.put(("never blocked", progress.get("done")))

    with serve(app) as srv:
        c = small_client(srv, rcvbuf=RCVBUF, timeout=10.0)
        c.send(http_request())
        progress.wait_stable("done")
        loop, task = handles.wait(1)[0]
        loop.call_soon_threadsafe(task.cancel)
        # cancelled at the pending send (1 started, not done)
        assert seen.wait(1, timeout=2.0) == [("cancelled", 1)]
        r = c.response(allow_incomplete=True)
        assert r.status == 200 and not r.complete
        assert c.eof
        assert srv.errors() == []
        r = srv.get("/ok")
        assert (r.status, r.body) == (200, b"ok")


# -- a large final body sent from the app's bytes object (no copy) --------------------------------

BY_REF_MIN = 16 * KIB  # SK_BODY_BY_REF_MIN in sk_exchange.h


def patterned(size: int, salt: int = 0) -> bytes:
    """size bytes that differ from position to position (a shifted or dropped byte shows)."""
    block = bytes((i * 7 + salt) % 251 for i in range(4096))
    return (block * (size // len(block) + 1))[:size]


@pytest.mark.rule("skirr-flow-final-body-by-reference")
def test_large_final_bodies_to_stalled_readers_are_not_copied(serve):
    """16 clients that read nothing (32 KiB receive buffers) are each answered with the same
    8 MiB bytes object. Copied into each connection's output buffer, what the kernel cannot hold
    (most of 16 x 8 MiB) would be the server's memory; sent from the object, the server grows by
    less than 16 MiB. Then every client reads its exact 8 MiB and its next request is answered."""
    n, size = 16, 8 * MIB
    big = patterned(size)
    done = Recorder()

    async def app(scope, receive, send):
        await receive()
        if scope["path"] == "/small":
            await reply(send, b"ok")
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(size).encode())]})
        await send({"type": "http.response.body", "body": big})
        done.put(scope["path"])

    with serve(app) as srv:
        assert srv.get("/small").body == b"ok"  # warm: the loop, the first connection
        clients = [small_client(srv, rcvbuf=32 * KIB, timeout=30.0) for _ in range(n)]
        base = rss()
        for i, c in enumerate(clients):
            c.send(http_request("GET", f"/big/{i}"))
        assert sorted(done.wait(n, timeout=10.0)) == sorted(f"/big/{i}" for i in range(n))
        time.sleep(0.3)  # what the server would buffer is buffered by now
        grown = rss() - base
        assert grown < 16 * MIB, f"the server grew by {grown / MIB:.1f} MiB for {n} stalled readers"
        for c in clients:
            r = c.response()
            assert (r.status, r.get(b"content-length"), r.body == big) == (
                200, str(size).encode(), True)
            c.send(http_request("GET", "/small"))
            r = c.response()
            assert (r.status, r.body) == (200, b"ok")
        assert srv.errors() == []


def framed(shape: str, size: int) -> tuple[bytes, list, bytes, str]:
    """(request, the app's events, the exact bytes the response must end with, method)."""
    body = patterned(size, salt=size % 7)
    if shape == "content-length":
        events = [{"type": "http.response.start", "status": 200,
                   "headers": [(b"content-length", str(size).encode())]},
                  {"type": "http.response.body", "body": body}]
        return http_request(), events, b"\r\n\r\n" + body, "GET"
    if shape == "length-set":  # one final event and no Content-Length: skirr sets it
        events = [{"type": "http.response.start", "status": 200, "headers": []},
                  {"type": "http.response.body", "body": body}]
        return (http_request(), events,
                f"content-length: {size}\r\n".encode(), "GET")
    if shape == "chunked":  # an earlier event: the final one is the last chunk's content
        events = [{"type": "http.response.start", "status": 200, "headers": []},
                  {"type": "http.response.body", "body": b"abc", "more_body": True},
                  {"type": "http.response.body", "body": body}]
        tail = b"3\r\nabc\r\n" + f"{size:x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
        return http_request(), events, tail, "GET"
    if shape == "trailers":
        events = [{"type": "http.response.start", "status": 200, "headers": [], "trailers": True},
                  {"type": "http.response.body", "body": body},
                  {"type": "http.response.trailers", "headers": [(b"x-sum", b"1")]}]
        tail = f"{size:x}\r\n".encode() + body + b"\r\n0\r\nx-sum: 1\r\n\r\n"
        return (http_request(headers=[("Host", "x"), ("TE", "trailers")]), events, tail, "GET")
    assert shape == "head"
    events = [{"type": "http.response.start", "status": 200,
               "headers": [(b"content-length", str(size).encode())]},
              {"type": "http.response.body", "body": body}]
    return http_request("HEAD"), events, f"content-length: {size}\r\n".encode(), "HEAD"


@pytest.mark.rule("skirr-flow-final-body-by-reference")
def test_answer_before_a_large_upload_is_read(serve):
    """The app answers a 512 KiB upload with a 60 KiB body without reading the upload, and the
    client (4 KiB receive buffer) reads only once it has sent everything: skirr keeps reading and
    discarding the upload while the answer waits to be sent (it is under the 64 KiB mark, as it
    was when it was copied), so neither side waits on the other; the client gets the exact body
    and the connection serves its next request."""
    answer = patterned(60 * KIB)
    upload = patterned(512 * KIB, salt=3)

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body",
                    "body": answer if scope["method"] == "POST" else b"next"})

    with serve(app) as srv:
        c = small_client(srv, rcvbuf=4 * KIB, timeout=10.0)
        c.send(http_request("POST", body=upload))
        r = c.response()
        assert (r.status, r.body == answer) == (200, True)
        c.send(http_request())
        r = c.response()
        assert (r.status, r.body) == (200, b"next")
        assert srv.errors() == []


@pytest.mark.rule("skirr-flow-final-body-by-reference")
def test_file_after_a_large_body_still_being_sent(serve, tmp_path):
    """Pipelined: a 2 MiB body, then http.response.pathsend of a file, to a client with a 4 KiB
    receive buffer (and the server's send buffer at 16 KiB) that reads the end of the body
    slowly: the second request starts as less than 64 KiB of the first response is unsent,
    while the rest of the body is still queued by reference; that rest is copied ahead of the
    file as any output would be, and both responses arrive exact and in order."""
    first = patterned(2 * MIB)
    path = tmp_path / "f.bin"
    path.write_bytes(patterned(300 * KIB, salt=5))
    started = Recorder()

    async def app(scope, receive, send):
        await receive()
        started.put(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if scope["path"] == "/a":
            await send({"type": "http.response.body", "body": first})
        elif scope["path"] == "/warm":
            await send({"type": "http.response.body", "body": b"warm"})
        else:
            await send({"type": "http.response.pathsend", "path": str(path)})

    with serve(app) as srv:
        c = small_client(srv, rcvbuf=4 * KIB, timeout=10.0)
        assert srv.get("/warm").status == 200  # the server has accepted c by now
        shrink_server_send_buffer(c, 16 * KIB)
        c.send(http_request("GET", "/a") + http_request("GET", "/f"))
        assert started.wait(2, timeout=5.0) == ["/warm", "/a"]
        head = c.read_until(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"content-length: 2097152\r\n" in head
        got = c.read_exact(len(first) - 256 * KIB)
        # then slowly, 4 KiB every 5 ms: each time the kernel makes room it takes a little more
        # of the body, so when less than 64 KiB is unsent the rest is still queued by reference
        # and the pipelined request starts
        while len(started.items) < 3 and len(got) < len(first):
            got += c.read_exact(min(4 * KIB, len(first) - len(got)))
            time.sleep(0.005)
        assert started.items == ["/warm", "/a", "/f"], "the pipelined request never started"
        assert len(got) < len(first), "the pipelined request only started once the body was read"
        got += c.read_exact(len(first) - len(got))
        assert got == first
        r = c.response()
        assert (r.status, r.body == path.read_bytes()) == (200, True)
        assert srv.errors() == []


@pytest.mark.rule("skirr-flow-final-body-by-reference")
def test_pipelined_large_bodies_queue_by_reference_in_order(serve, tmp_path):
    """Pipelined: three 300 KiB bodies, then http.response.pathsend of a file, to a client with a
    4 KiB receive buffer (the server's send buffer at 16 KiB): each body is queued by reference
    behind the unsent rest of the one before (a chain of ranges, each with the next response's
    head after it), the file after them (the ranges still queued copied ahead of it); all four
    responses arrive exact and in order, and once they are sent the server holds no reference to
    any body."""
    bodies = [patterned(300 * KIB, salt=k) for k in range(3)]
    before = [sys.getrefcount(b) for b in bodies]
    path = tmp_path / "f.bin"
    path.write_bytes(patterned(100 * KIB, salt=7))

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if scope["path"] == "/f":
            await send({"type": "http.response.pathsend", "path": str(path)})
        elif scope["path"] == "/warm":
            await send({"type": "http.response.body", "body": b"warm"})
        else:
            await send({"type": "http.response.body", "body": bodies[int(scope["path"][1:])]})

    with serve(app) as srv:
        c = small_client(srv, rcvbuf=4 * KIB, timeout=10.0)
        assert srv.get("/warm").status == 200  # the server has accepted c by now
        shrink_server_send_buffer(c, 16 * KIB)
        c.send(b"".join(http_request("GET", p) for p in ("/0", "/1", "/2", "/f")))
        got = []
        for _ in range(4):
            r = c.response()
            got.append((r.status, r.body))
            time.sleep(0.01)
        assert got == [(200, bodies[0]), (200, bodies[1]), (200, bodies[2]),
                       (200, path.read_bytes())]
        deadline = time.monotonic() + 5.0
        while [sys.getrefcount(b) for b in bodies] != before and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [sys.getrefcount(b) for b in bodies] == before
        assert srv.errors() == []


@pytest.mark.rule("skirr-flow-final-body-by-reference")
@pytest.mark.parametrize("size", [BY_REF_MIN - 1, BY_REF_MIN, MIB + 3])
@pytest.mark.parametrize("shape", ["content-length", "length-set", "chunked", "trailers", "head"])
def test_large_final_body_framed_exactly(serve, shape, size):
    """Either side of the 16 KiB threshold, every framing: the response ends with exactly the
    expected bytes (HEAD: the head ends the response, no body byte follows), and the next request
    on the connection is answered right after it."""
    request, events, tail, method = framed(shape, size)

    async def app(scope, receive, send):
        await receive()
        if scope["path"] == "/next":
            await reply(send, b"next")
            return
        for event in events:
            await send(event)

    with serve(app) as srv:
        c = srv.connect()
        c.send(request)
        head = c.read_until(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        if shape in ("length-set", "head"):
            assert tail in head
            rest = b"" if method == "HEAD" else c.read_exact(size)
            assert rest == (b"" if method == "HEAD" else events[-1]["body"])
        elif shape == "content-length":
            assert (head[-4:] + c.read_exact(size)) == tail
        else:
            assert b"transfer-encoding: chunked\r\n" in head
            assert c.read_exact(len(tail)) == tail
        c.send(http_request("GET", "/next"))
        r = c.response()
        assert (r.status, r.body) == (200, b"next")
        assert c.buf == b""
        assert srv.errors() == []


@pytest.mark.rule("skirr-flow-final-body-by-reference")
def test_pipelined_requests_behind_large_final_bodies_in_order(serve):
    """Eight pipelined requests in one write, each answered with its own 100 KiB body: every
    response arrives whole and in order."""
    bodies = [patterned(100 * KIB, salt=i) for i in range(8)]

    async def app(scope, receive, send):
        await receive()
        i = int(scope["path"].rsplit("/", 1)[1])
        await reply(send, bodies[i])

    with serve(app) as srv:
        c = srv.connect()
        c.send(b"".join(http_request("GET", f"/p/{i}") for i in range(8)))
        for i in range(8):
            r = c.response()
            assert (r.status, r.body == bodies[i]) == (200, True), f"response {i}"
        assert srv.errors() == []


@pytest.mark.rule("skirr-flow-final-body-by-reference")
def test_reset_mid_large_final_body_releases_it(serve):
    """A client reads 64 KiB of an 8 MiB final body and resets: the server drops the reference it
    held to the app's bytes object (its reference count returns to what it was), logs nothing as
    an application error, and keeps serving."""
    big = patterned(8 * MIB)
    before = sys.getrefcount(big)
    done = Recorder()

    async def app(scope, receive, send):
        await receive()
        if scope["path"] == "/ok":
            await reply(send, b"ok")
            return
        await reply(send, big)
        done.put("sent")

    with serve(app) as srv:
        c = small_client(srv, rcvbuf=32 * KIB, timeout=10.0)
        c.send(http_request())
        assert done.wait(1) == ["sent"]
        c.read_exact(64 * KIB)
        assert sys.getrefcount(big) > before  # still held: most of it is unsent
        c.abort()
        deadline = time.monotonic() + 5.0
        while sys.getrefcount(big) > before and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sys.getrefcount(big) == before
        r = srv.get("/ok")
        assert (r.status, r.body) == (200, b"ok")
        assert srv.errors() == []
