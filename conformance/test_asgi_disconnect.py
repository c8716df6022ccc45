"""Client disconnects (ASGI www 2.5 "Disconnect - receive event" and "Disconnected Client - send
exception"; DESIGN "Disconnects"): receive() returns http.disconnect; send() raises
skirr.ClientDisconnected (an OSError subclass), which the server does not log as an application
failure; an OSError the application raises itself is logged.
"""
import asyncio
import socket
import threading
import time

import pytest

from conftest import Recorder, final_piece_app, http_request, record_text, streaming_app


@pytest.mark.rule("skirr-disconnect-while-awaiting-receive")
def test_disconnect_while_app_awaits_receive(serve):
    """The body is complete; the app awaits receive() again; the client closes."""
    waiting = threading.Event()
    seen = Recorder()

    async def app(scope, receive, send):
        first = await receive()
        waiting.set()
        try:
            msg = await asyncio.wait_for(receive(), 5.0)
        except asyncio.TimeoutError:
            msg = "receive() did not return within 5 s of the client closing"
        seen.put((first, msg))

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request("GET", "/"))
        assert waiting.wait(5), "app not called"
        c.close()
        first, msg = seen.wait(1, timeout=8)[0]
        assert first == {"type": "http.request", "body": b"", "more_body": False}
        assert msg == {"type": "http.disconnect"}


@pytest.mark.rule("skirr-disconnect-during-upload", "RFC9112-8-early-eof-content-length")
def test_disconnect_mid_request_body(serve):
    """The client sends 3 of 10 declared bytes and closes: the app reads what came, then gets
    http.disconnect."""
    seen = Recorder()

    async def app(scope, receive, send):
        events = []
        while True:
            try:
                msg = await asyncio.wait_for(receive(), 5.0)
            except asyncio.TimeoutError:
                events.append("timeout")
                break
            events.append(msg)
            if msg["type"] == "http.disconnect" or not msg.get("more_body"):
                break
        seen.put(events)

    with serve(app) as srv:
        c = srv.connect()
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        time.sleep(0.2)
        c.close()
        events = seen.wait(1, timeout=8)[0]
        assert events[-1] == {"type": "http.disconnect"}, events
        for ev in events[:-1]:
            assert ev["type"] == "http.request" and ev["more_body"] is True, ev
        assert b"".join(ev["body"] for ev in events[:-1]) in (b"", b"a", b"ab", b"abc")


@pytest.mark.rule(
    "skirr-disconnect-mid-stream",
    "ASGI-www-send-disconnected-raises",
    "skirr-disconnect-not-logged",
)
@pytest.mark.parametrize("how", ["close", "reset"])
def test_send_after_client_gone_mid_stream(serve, how):
    """The app streams 64 KiB chunks; the client reads the head and goes away. A later send
    raises skirr.ClientDisconnected (an OSError), a blocked drain included; the app lets it
    propagate and the server logs nothing at ERROR for it."""
    import skirr

    streaming = threading.Event()
    seen = Recorder()

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        streaming.set()
        n = 0
        deadline = time.monotonic() + 10.0
        try:
            while time.monotonic() < deadline:
                await send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})
                n += 1
        except BaseException as e:
            seen.put(("raised", e, n))
            raise
        seen.put(("no exception within 10 s", None, n))
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        assert streaming.wait(5)
        c.read_until(b"\r\n\r\n")
        c.read_exact(1000)
        if how == "reset":
            c.abort()
        else:
            c.close()
        what, exc, n = seen.wait(1, timeout=15)[0]
        assert what == "raised", (what, n)
        assert isinstance(exc, skirr.ClientDisconnected), repr(exc)
        assert isinstance(exc, OSError)
    assert srv.errors() == [], [record_text(r) for r in srv.errors()]


@pytest.mark.rule("ASGI-www-send-disconnected-raises", "skirr-disconnect-not-logged")
def test_send_after_disconnect_event_raises(serve):
    """After receive() returned http.disconnect, sending the response raises ClientDisconnected
    (at the start or at the body, since the head may wait for the first body); not logged."""
    import skirr

    waiting = threading.Event()
    seen = Recorder()

    async def app(scope, receive, send):
        await receive()
        waiting.set()
        msg = await asyncio.wait_for(receive(), 5.0)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"late"})
        except BaseException as e:
            seen.put((msg, e))
            raise
        seen.put((msg, None))

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        assert waiting.wait(5)
        c.close()
        msg, exc = seen.wait(1, timeout=8)[0]
        assert msg == {"type": "http.disconnect"}
        assert isinstance(exc, skirr.ClientDisconnected), repr(exc)
    assert srv.errors() == [], [record_text(r) for r in srv.errors()]


@pytest.mark.rule("skirr-errors-app-oserror-logged")
def test_app_raised_oserror_is_logged(serve):
    """An OSError the application raises itself is an application failure: 500, logged."""
    async def app(scope, receive, send):
        await receive()
        raise OSError("app-own-oserror-5c1")

    with serve(app) as srv:
        r = srv.get()
        assert r.status == 500
    recs = [r for r in srv.errors() if "app-own-oserror-5c1" in record_text(r)]
    assert recs, [record_text(r) for r in srv.errors()]


@pytest.mark.rule("skirr-errors-app-oserror-logged")
def test_app_raised_oserror_mid_stream_is_logged(serve):
    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        raise ConnectionResetError("app-own-reset-9d2")

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        c.read_until_close()
    recs = [r for r in srv.errors() if "app-own-reset-9d2" in record_text(r)]
    assert recs, [record_text(r) for r in srv.errors()]


# -- disconnect timing: what the app sees, and that the worker goes on ---------------------------


def _gone(c, how: str) -> None:
    if how == "reset":
        c.abort()
    else:
        c.close()


@pytest.mark.rule("skirr-disconnect-before-head")
@pytest.mark.parametrize("how", ["close", "reset"])
@pytest.mark.parametrize(
    "partial", [b"G", b"GET /a HTTP/1.1\r\n", b"GET /a HTTP/1.1\r\nHost: x\r\nX-A: 1"],
    ids=["method", "request-line", "mid-fields"],
)
def test_client_gone_before_head_complete(serve, echo_app, how, partial):
    """The client sends part of a request head and closes or resets: the app is never called,
    nothing is logged at ERROR, and the next connection is served."""
    with serve(echo_app) as srv:
        c = srv.connect()
        c.send(partial)
        time.sleep(0.1)
        _gone(c, how)
        time.sleep(0.1)
        r = srv.get("/next")
        assert (r.status, r.get(b"x-target")) == (200, b"/next")
        assert [x["scope"]["path"] for x in echo_app.calls.items] == ["/next"]
    assert srv.errors() == [], [record_text(r) for r in srv.errors()]


@pytest.mark.rule("skirr-disconnect-during-upload")
def test_reset_mid_request_body(serve):
    """The client resets (RST) after 3 of 10 declared bytes: the app's next receive() gives
    http.disconnect; the worker serves the next connection."""
    seen = Recorder()

    async def app(scope, receive, send):
        if scope["path"] == "/next":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"next"})
            return
        events = []
        while True:
            msg = await asyncio.wait_for(receive(), 5.0)
            events.append(msg)
            if msg["type"] == "http.disconnect" or not msg.get("more_body"):
                break
        seen.put(events)

    with serve(app) as srv:
        c = srv.connect()
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        time.sleep(0.2)
        c.abort()
        events = seen.wait(1, timeout=8)[0]
        assert events[-1] == {"type": "http.disconnect"}, events
        assert all(ev.get("more_body") is True for ev in events[:-1]), events
        assert srv.get("/next").body == b"next"
    assert srv.errors() == []


@pytest.mark.rule("skirr-disconnect-while-awaiting-receive")
def test_reset_while_app_awaits_receive(serve):
    """The body is complete and the app waits in receive(); the client resets: the waiting
    receive() returns http.disconnect."""
    waiting = threading.Event()
    seen = Recorder()

    async def app(scope, receive, send):
        await receive()
        waiting.set()
        seen.put(await asyncio.wait_for(receive(), 5.0))

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        assert waiting.wait(5)
        time.sleep(0.05)
        c.abort()
        assert seen.wait(1, timeout=8)[0] == {"type": "http.disconnect"}


@pytest.mark.rule("skirr-disconnect-after-response")
@pytest.mark.parametrize("how", ["close", "reset"])
def test_client_gone_right_after_response(serve, how):
    """The client reads the whole response and goes away at once while the app still runs: the
    app's next receive() gives http.disconnect, nothing is logged, and the worker serves the next
    connection."""
    seen = Recorder()

    async def app(scope, receive, send):
        if scope["path"] == "/next":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"next"})
            return
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})
        msg = await asyncio.wait_for(receive(), 5.0)
        seen.put(msg)

    with serve(app) as srv:
        c = srv.connect()
        r = c.request(http_request())
        assert (r.status, r.body) == (200, b"done")
        _gone(c, how)
        assert seen.wait(1, timeout=8)[0] == {"type": "http.disconnect"}
        assert srv.get("/next").body == b"next"
    assert srv.errors() == [], [record_text(r) for r in srv.errors()]


@pytest.mark.rule("skirr-disconnect-pipelined-pending")
def test_client_gone_with_pipelined_requests_pending(serve):
    """Three pipelined requests, the first one slow; the client closes before any response: the
    running app sees http.disconnect; the requests behind it are never answered (and, if they
    were started, see http.disconnect too); nothing is logged; the next connection is served."""
    started = threading.Event()
    seen = Recorder()

    async def app(scope, receive, send):
        if scope["path"] == "/next":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"next"})
            return
        await receive()
        started.set()
        seen.put((scope["path"], await asyncio.wait_for(receive(), 5.0)))

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request("GET", "/1") + http_request("GET", "/2") + http_request("GET", "/3"))
        assert started.wait(5)
        c.close()
        first = seen.wait(1, timeout=8)[0]
        assert first == ("/1", {"type": "http.disconnect"})
        time.sleep(0.3)
        for path, msg in seen.items:
            assert msg == {"type": "http.disconnect"}, (path, msg)
        assert srv.get("/next").body == b"next"
    assert srv.errors() == [], [record_text(r) for r in srv.errors()]


# -- cancellation during drain -----------------------------------------------------------------

CHUNK = 64 * 1024


def _streaming_until_blocked(seen: Recorder, after_block):
    """An app that streams 64 KiB events to a client that reads nothing, until a send stays
    pending for 0.3 s; then it runs after_block(pending_send_task) and records the outcome."""

    async def app(scope, receive, send):
        if scope["path"] == "/next":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"next"})
            return
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            task = asyncio.ensure_future(
                send({"type": "http.response.body", "body": b"z" * CHUNK, "more_body": True}))
            done, _ = await asyncio.wait({task}, timeout=0.3)
            if not done:
                seen.put(("blocked",))
                await after_block(task)
                return
            task.result()
        seen.put(("never blocked",))

    return app


@pytest.mark.rule("skirr-drain-cancel")
def test_cancelled_drain_raises_cancelled_error(serve):
    """A send() blocked on a full socket is cancelled: the awaiting code gets CancelledError, the
    app then returns, the connection is closed without a complete message, and the worker
    serves the next connection (no error escapes to the loop)."""
    seen = Recorder()

    async def cancel(task):
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            seen.put(("cancelled",))
        except BaseException as e:  # pragma: no cover - recorded for the assertion
            seen.put(("raised", repr(e)))
        else:
            seen.put(("completed",))

    with serve(_streaming_until_blocked(seen, cancel)) as srv:
        c = srv.connect(timeout=10.0)
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
        c.send(http_request())
        assert seen.wait(2, timeout=15)[:2] == [("blocked",), ("cancelled",)]
        r = c.response(allow_incomplete=True)
        assert r.status == 200 and not r.complete
        assert srv.get("/next").body == b"next"


@pytest.mark.rule("skirr-drain-client-disconnect")
@pytest.mark.parametrize("how", ["close", "reset"])
def test_client_gone_while_drain_blocked(serve, how):
    """The client goes away while a send() waits for the socket to drain: that send ends with
    ClientDisconnected within a second (not at the write timeout), never logged."""
    import skirr

    seen = Recorder()
    gone_at = []

    async def wait_for_it(task):
        try:
            await asyncio.wait_for(task, 5.0)
        except BaseException as e:
            seen.put(("raised", e, time.monotonic()))
            return
        seen.put(("completed", None, time.monotonic()))

    with serve(_streaming_until_blocked(seen, wait_for_it)) as srv:
        c = srv.connect(timeout=10.0)
        c.send(http_request())
        assert seen.wait(1, timeout=15)[0] == ("blocked",)
        gone_at.append(time.monotonic())
        _gone(c, how)
        what, exc, when = seen.wait(2, timeout=10)[1]
        assert what == "raised" and isinstance(exc, skirr.ClientDisconnected), (what, exc)
        assert when - gone_at[0] < 1.5, f"send ended {when - gone_at[0]:.2f}s after the client left"
        assert srv.get("/next").body == b"next"
    assert srv.errors() == [], [record_text(r) for r in srv.errors()]


@pytest.mark.rule("skirr-disconnect-half-close")
def test_client_half_close_is_a_disconnect(serve):
    """The client sends a whole request and shuts down its sending side (FIN): skirr takes it as
    the client going away: the connection is closed promptly, the app (if started) gets
    http.disconnect at its next receive(), nothing is logged, the next connection is served."""
    seen = Recorder()

    async def app(scope, receive, send):
        if scope["path"] == "/next":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"next"})
            return
        first = await receive()
        await asyncio.sleep(0.2)
        seen.put((first, await asyncio.wait_for(receive(), 5.0)))

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request("GET", "/h"))
        c.sock.shutdown(socket.SHUT_WR)
        c.read_until_close(timeout=3.0)
        time.sleep(0.5)
        for first, after in seen.items:
            assert first["type"] == "http.request" and after == {"type": "http.disconnect"}
        assert srv.get("/next").body == b"next"
    assert srv.errors() == [], [record_text(r) for r in srv.errors()]


@pytest.mark.rule("skirr-half-close-written-output-sent")
def test_half_close_does_not_drop_a_response_waiting_for_a_slow_reader(serve):
    """A 32 MiB response, complete on the server's side but mostly unsent (the client reads only
    its first bytes), then the client's FIN: every byte still arrives, then EOF."""
    body = bytes(range(256)) * 131072  # 32 MiB: more than loopback socket buffers hold

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request("GET", "/big"))
        head = c.read_until(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n"), head
        time.sleep(0.3)  # the server now holds most of the body, waiting for the reader
        c.sock.shutdown(socket.SHUT_WR)
        rest = c.read_until_close(timeout=10.0)
        assert len(rest) == len(body) and rest == body
    assert srv.errors() == [], [record_text(r) for r in srv.errors()]


@pytest.mark.rule("skirr-half-close-written-output-sent")
def test_half_close_after_pipelined_requests_keeps_the_completed_response(serve):
    """Two pipelined GETs and a FIN in one send: the first response, completed and held back
    while the second request starts, is sent whole; whatever follows is whole responses only."""
    async def app(scope, receive, send):
        await receive()
        body = scope["path"].encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})

    for _ in range(20):
        with serve(app) as srv:
            c = srv.connect()
            c.send(http_request("GET", "/1") + http_request("GET", "/2"))
            c.sock.shutdown(socket.SHUT_WR)
            data = c.read_until_close(timeout=5.0)
        assert data.startswith(b"HTTP/1.1 200 OK\r\n"), data
        responses = data.split(b"HTTP/1.1 ")[1:]
        assert len(responses) in (1, 2), data
        for i, r in enumerate(responses):
            head, _, rest = r.partition(b"\r\n\r\n")
            assert rest == b"/%d" % (i + 1), data


def read_until_end(sock: socket.socket) -> tuple[bytes, str]:
    got = b""
    try:
        while True:
            d = sock.recv(65536)
            if not d:
                return got, "fin"
            got += d
    except ConnectionResetError:
        return got, "reset"


@pytest.mark.rule("skirr-disconnect-close-delimited-cut")
@pytest.mark.parametrize("ends", ["write timeout", "server stopping"])
def test_close_before_a_whole_close_delimited_body_left_is_a_reset(serve, ends):
    """The app streams its HTTP/1.0 response (no content-length: the close alone ends it, RFC
    9112 §6.3) and hands over its final piece, 8 MB, while the client reads nothing; the write
    timeout, or the server stopping past its graceful timeout, closes the connection with most
    of it still in skirr. That close is a reset: a FIN would make the part that arrived read as
    the whole body. (It was a FIN: the body counted as complete once the app's final piece was
    written, not once it had left.)"""
    size = 8_000_000

    config = {"timeout_write": 1.0} if ends == "write timeout" else {
        "timeout_write": 30.0, "timeout_graceful_shutdown": 0.5}
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.settimeout(10)
    with serve(final_piece_app(size), **config) as srv:
        s.connect(("127.0.0.1", srv.port))
        s.sendall(b"GET / HTTP/1.0\r\nhost: localhost\r\n\r\n")
        if ends == "write timeout":
            time.sleep(2.5)  # the client reads nothing until skirr gave up on it
    got, end = read_until_end(s)  # once the server stopped, for "server stopping"
    s.close()
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"content-length" not in head.lower()
    assert b"transfer-encoding" not in head.lower() and len(body) < 1000 + size
    assert end == "reset"


@pytest.mark.rule("skirr-disconnect-close-delimited-cut")
@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_half_close_cuts_a_streamed_response(serve, version):
    """The client half-closes while its streamed response goes out. HTTP/1.0's body ends only
    at the close (RFC 9112 §6.3): skirr resets, so the part sent never reads as the whole body.
    HTTP/1.1's is chunked: a FIN, and the missing last-chunk shows the cut."""
    started = threading.Event()
    with serve(streaming_app(started)) as srv:
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(b"GET / HTTP/%s\r\nhost: localhost\r\n\r\n" % version.encode())
        assert started.wait(5)
        s.shutdown(socket.SHUT_WR)
        got, end = read_until_end(s)
        s.close()
    head, _, body = got.partition(b"\r\n\r\n")
    assert not body.endswith(b"END") and not body.endswith(b"0\r\n\r\n")
    if version == "1.0":
        assert b"transfer-encoding" not in head.lower()
        assert end == "reset"
    else:
        assert head.startswith(b"HTTP/1.1 200 OK") and b"transfer-encoding: chunked" in head
        assert end == "fin"
