"""Disconnects noticed whatever the application is doing (spec/flow_control.toml; issue 5 item 4;
ASGI www 2.5 "Disconnect - receive event" and "Disconnected Client - send exception"): while the
app is busy (its next receive() returns http.disconnect), while its receive() waits, while a
send waits on drain (the send raises ClientDisconnected at once, long before timeout_write), and
while pipelined requests wait behind the current one (they never reach the app).
"""
import asyncio
import threading
import time

import pytest

from _flow import KIB, Progress, send_until_stalled, small_client
from conftest import Recorder, http_request

PROMPT = 1.0  # seconds: a disconnect is noticed within this (the write timeout here is 30 s)


@pytest.mark.rule("ASGI-www-disconnect-while-busy")
@pytest.mark.parametrize("how", ["close", "reset"])
def test_disconnect_while_app_busy_seen_at_next_receive(serve, how):
    """The app is busy (not awaiting receive) when the client goes; its next receive() returns
    http.disconnect at once."""
    busy = threading.Event()
    gone = threading.Event()
    seen = Recorder()

    async def app(scope, receive, send):
        first = await receive()
        busy.set()
        while not gone.is_set():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # the server has had time to notice
        t0 = time.monotonic()
        try:
            msg = await asyncio.wait_for(receive(), 2.0)
        except asyncio.TimeoutError:
            msg = "receive() did not return"
        seen.put((first, msg, time.monotonic() - t0))

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request("GET", "/"))
        assert busy.wait(5)
        c.close() if how == "close" else c.abort()
        gone.set()
        first, msg, waited = seen.wait(1, timeout=5)[0]
        assert first == {"type": "http.request", "body": b"", "more_body": False}
        assert msg == {"type": "http.disconnect"}
        assert waited < 0.1
        assert srv.errors() == []


@pytest.mark.rule("ASGI-www-disconnect-while-busy")
def test_disconnect_wakes_receive_waiting_for_body(serve):
    """The app's receive() waits for more of a body the client never finishes; the client
    closes: that receive() returns http.disconnect within a second."""
    waiting = threading.Event()
    seen = Recorder()

    async def app(scope, receive, send):
        first = await receive()
        waiting.set()
        try:
            msg = await asyncio.wait_for(receive(), 5.0)
        except asyncio.TimeoutError:
            msg = "receive() did not return"
        seen.put((first, msg, time.monotonic()))

    with serve(app) as srv:
        c = srv.connect()
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
        assert waiting.wait(5)
        time.sleep(0.1)
        t0 = time.monotonic()
        c.close()
        first, msg, when = seen.wait(1, timeout=8)[0]
        assert first == {"type": "http.request", "body": b"0123456789", "more_body": True}
        assert msg == {"type": "http.disconnect"}
        assert when - t0 < PROMPT


@pytest.mark.rule("ASGI-www-disconnect-while-draining")
@pytest.mark.parametrize("how", ["close", "reset"])
def test_disconnect_while_send_waits_on_drain(serve, how):
    """The app's send waits on drain (the client reads nothing); the client closes or resets:
    that send raises ClientDisconnected within a second (timeout_write is 30 s), and nothing is
    logged as an application error."""
    import skirr

    progress = Progress()
    seen = Recorder()

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            for _ in range(100_000):
                progress.bump("started")
                await send({"type": "http.response.body", "body": b"d" * (64 * KIB), "more_body": True})
                progress.bump("done")
        except BaseException as e:
            seen.put((type(e), time.monotonic()))
            raise

    with serve(app, timeout_write=30.0) as srv:
        c = small_client(srv, rcvbuf=32 * KIB, timeout=10.0)
        c.send(http_request())
        done = progress.wait_stable("done")
        assert progress.get("started") == done + 1  # a send is waiting on drain
        t0 = time.monotonic()
        c.close() if how == "close" else c.abort()
        exc_type, when = seen.wait(1, timeout=5)[0]
        assert exc_type is skirr.ClientDisconnected
        assert when - t0 < PROMPT, f"send raised {when - t0:.2f}s after the client left"
        assert srv.errors() == []


@pytest.mark.rule("ASGI-www-disconnect-between-pipelined")
def test_disconnect_with_pipelined_input_buffered(serve):
    """Behind a request whose app waits in receive(), the client has pipelined more than skirr
    buffers (so skirr is no longer reading the socket); the client closes: the waiting receive()
    returns http.disconnect within a second and no pipelined request reaches the app."""
    started = Recorder()
    seen = Recorder()

    async def app(scope, receive, send):
        started.put(scope["path"])
        first = await receive()
        try:
            msg = await asyncio.wait_for(receive(), 5.0)
        except asyncio.TimeoutError:
            msg = "receive() did not return"
        seen.put((first["type"], msg, time.monotonic()))

    with serve(app) as srv:
        c = small_client(srv, sndbuf=32 * KIB, timeout=10.0)
        data = http_request("GET", "/first") + b"".join(
            http_request("POST", f"/{i}", body=b"p" * (16 * KIB)) for i in range(512)
        )
        sent = send_until_stalled(c.sock, data)
        assert sent < len(data)
        assert started.wait(1) == ["/first"]
        t0 = time.monotonic()
        c.abort()  # unread input on our side: a reset, as a crashed client would
        kind, msg, when = seen.wait(1, timeout=8)[0]
        assert (kind, msg) == ("http.request", {"type": "http.disconnect"})
        assert when - t0 < PROMPT
        time.sleep(0.2)
        assert started.items == ["/first"]
