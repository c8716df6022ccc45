"""Flow control and concurrency over real sockets (DESIGN "Streaming responses", "Fairness"):
a streaming send waits for the socket to drain, a blocked drain can be cancelled, a slow reader
gets every byte in order, and many connections at once are all served.
"""
import asyncio
import socket
import threading
import time

import pytest

from conftest import Recorder, http_request

CHUNK = 64 * 1024


@pytest.mark.rule("skirr-drain-slow-reader-gets-everything")
def test_streaming_send_waits_for_slow_reader(serve):
    """400 chunks of 64 KiB (25 MiB, more than the socket buffers hold): while the client reads
    nothing, the app's sends do not all complete; then the client gets every byte, in order."""
    n_chunks = 400
    progress = Recorder()

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(n_chunks):
            await send({"type": "http.response.body", "body": i.to_bytes(4, "big") * (CHUNK // 4), "more_body": True})
            progress.put(i)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    with serve(app) as srv:
        c = srv.connect(timeout=10.0)
        c.send(http_request())
        time.sleep(1.0)
        done_while_stalled = len(progress)
        assert done_while_stalled < n_chunks, "every send completed while the client read nothing"
        r = c.response()
        assert r.status == 200 and r.get(b"transfer-encoding") == b"chunked"
        assert len(r.body) == n_chunks * CHUNK
        for i in range(n_chunks):
            piece = r.body[i * CHUNK:(i + 1) * CHUNK]
            assert piece == i.to_bytes(4, "big") * (CHUNK // 4), f"chunk {i} corrupted"
        assert len(progress.wait(n_chunks)) == n_chunks


@pytest.mark.rule("skirr-drain-cancel")
def test_blocked_drain_is_cancellable(serve):
    """The client stops reading; a send blocked on drain is cancelled by asyncio.wait_for (the app
    sees TimeoutError from the cancellation); the app then gives up and the server closes the
    connection without completing the message."""
    seen = Recorder()

    async def app(scope, receive, send):
        await receive()
        if scope["path"] == "/ok":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        deadline = time.monotonic() + 10.0
        sent = 0
        while time.monotonic() < deadline:
            try:
                await asyncio.wait_for(
                    send({"type": "http.response.body", "body": b"z" * CHUNK, "more_body": True}), 0.5
                )
            except asyncio.TimeoutError:
                seen.put(("cancelled", sent))
                return
            sent += 1
        seen.put(("never blocked", sent))

    with serve(app) as srv:
        c = srv.connect(timeout=10.0)
        c.send(http_request())
        what, sent = seen.wait(1, timeout=15)[0]
        assert what == "cancelled", (what, sent)
        r = c.response(allow_incomplete=True)
        assert r.status == 200 and not r.complete
        # The server is still serving.
        r = srv.get("/ok")
        assert (r.status, r.body) == (200, b"ok")


@pytest.mark.rule("skirr-concurrency-many-connections")
def test_many_concurrent_connections(serve, echo_app):
    """100 connections, each sending 5 keep-alive requests at once: every response correct."""
    n_conn, n_req = 100, 5
    with serve(echo_app) as srv:
        clients = [srv.connect(timeout=10.0) for _ in range(n_conn)]
        for k, c in enumerate(clients):
            c.send(b"".join(http_request("POST", f"/{k}/{j}", body=b"%d-%d" % (k, j)) for j in range(n_req)))
        for k, c in enumerate(clients):
            for j in range(n_req):
                r = c.response()
                assert (r.status, r.get(b"x-target"), r.body) == (
                    200, f"/{k}/{j}".encode(), b"%d-%d" % (k, j)
                )
        assert len(echo_app.calls.wait(n_conn * n_req, timeout=10)) == n_conn * n_req


@pytest.mark.rule("skirr-concurrency-requests-in-parallel")
def test_concurrent_slow_requests_run_concurrently(serve):
    """20 connections whose app sleeps 0.5 s each: served together, not one after another."""
    async def app(scope, receive, send):
        await receive()
        await asyncio.sleep(0.5)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"slept"})

    with serve(app) as srv:
        clients = [srv.connect() for _ in range(20)]
        t0 = time.monotonic()
        for c in clients:
            c.send(http_request())
        for c in clients:
            assert c.response().body == b"slept"
        elapsed = time.monotonic() - t0
        assert elapsed < 3.0, f"20 concurrent 0.5 s requests took {elapsed:.2f}s"


@pytest.mark.rule("skirr-framing-unread-content-skipped")
def test_large_body_unread_by_app(serve):
    """The app answers without reading a 1 MiB body; the next request on the connection is
    answered correctly or the connection is closed after the first response (never a request
    parsed from body bytes)."""
    seen = Recorder()

    async def app(scope, receive, send):
        seen.put(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ignored your body"})

    body = (b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n" * 30000)[: 1024 * 1024]
    with serve(app) as srv:
        c = srv.connect(timeout=10.0)
        sender = threading.Thread(
            target=lambda: _send_quietly(c.sock, http_request("POST", "/big", body=body) + http_request("GET", "/next"))
        )
        sender.start()
        r1 = c.response()
        assert (r1.status, r1.body) == (200, b"ignored your body")
        r2 = c.response(allow_incomplete=True)
        sender.join(10)
        if r2.status is not None:
            assert (r2.status, r2.body) == (200, b"ignored your body")
            assert seen.wait(2)[:2] == ["/big", "/next"]
        assert "/smuggled" not in seen.items


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass  # the server may close after the first response
