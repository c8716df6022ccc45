"""Robustness, round 3 (issue 11 items 3 and 5 to 10; spec/robustness.toml): skirr's own closes
are announced in the response before them, a bad Content-Length found before any byte left is a
clean 500, several waiters on one request's send()/receive() are all resolved, any exception of
an app (SystemExit and KeyboardInterrupt included) fails only its request, the in-flight counter
stays balanced, send() survives hostile objects, and each request's app() is called in its own
task and context.

The server's counters are read from the native server objects (``natives`` fixture: every
``skirr._native.Server`` the in-process server makes). Every case runs on asyncio and uvloop
(the ``serve`` fixture) and every wait is bounded.
"""
from __future__ import annotations

import asyncio
import contextvars
import gc
import re
import signal
import threading
import time

import h11
import pytest

import _proc
import skirr
import skirr.server
from _flow import KIB, MIB, Progress, small_client
from conftest import Recorder, http_request, record_text

DATE = re.compile(rb"\r\ndate: [A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT\r\n")


def undated(raw: bytes) -> bytes:
    """raw with its one Date field's value replaced by DATE (asserts there is exactly one)."""
    out, n = DATE.subn(b"\r\ndate: DATE\r\n", raw, count=2)
    assert n == 1, f"expected one date field, found {n}: {raw[:500]!r}"
    return out


def head(status_line: bytes, *fields: bytes) -> bytes:
    """The head skirr writes: status line, the given fields, then date and server."""
    return b"\r\n".join((status_line, *fields, b"date: DATE", b"server: skirr")) + b"\r\n\r\n"


# skirr's own 500 (sk_resp_error), byte for byte, date aside.
ERROR_500 = head(
    b"HTTP/1.1 500 Internal Server Error",
    b"content-type: text/plain; charset=utf-8",
    b"content-length: 21",
    b"connection: close",
) + b"Internal Server Error"


@pytest.fixture
def natives(monkeypatch) -> list:
    """Every skirr._native.Server made while the case runs (their counters: active_requests,
    connections, total_requests)."""
    made: list = []
    original = skirr.server.Server._native_server

    def recording(self, *args, **kwargs):
        native = original(self, *args, **kwargs)
        made.append(native)
        return native

    monkeypatch.setattr(skirr.server.Server, "_native_server", recording)
    return made


def counters(natives: list) -> dict:
    (native,) = natives
    return {"active_requests": native.active_requests, "connections": native.connections}


def wait_counters(natives: list, timeout: float = 2.0, **expected: int) -> None:
    """Waits (bounded) until the native server's counters equal ``expected``; asserts they do."""
    deadline = time.monotonic() + timeout
    while True:
        now = counters(natives)
        if all(now[k] == v for k, v in expected.items()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"server counters {now}, expected {expected} within {timeout}s")
        time.sleep(0.01)


def wait_until(predicate, timeout: float = 3.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s")
        time.sleep(0.01)


async def wait_event(event: threading.Event, timeout: float = 5.0) -> None:
    """Awaits (polling, so the loop runs) until the test thread sets event."""
    deadline = time.monotonic() + timeout
    while not event.is_set():
        if time.monotonic() > deadline:
            raise RuntimeError("the test never released the app")
        await asyncio.sleep(0.005)


def start(status: int = 200, headers=()) -> dict:
    return {"type": "http.response.start", "status": status, "headers": list(headers)}


def body(data: bytes = b"", more: bool = False) -> dict:
    return {"type": "http.response.body", "body": data, "more_body": more}


# ---------------------------------------------------------------------------------------------
# Item 3: a close skirr decides is announced in the head of the response before it.


def answer_at_once(data: bytes = b"ok", streamed: bool = False):
    """An app that answers without reading the request body."""

    async def app(scope, receive, send):
        await send(start(200, [(b"x-app", b"1")]))
        if streamed:
            await send(body(data, more=True))
            await send(body(b""))
        else:
            await send(body(data))

    return app


UNREAD = [
    # (request head, streamed response, expected head fields after x-app)
    pytest.param(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n", False,
                 [b"content-length: 2", b"connection: close"], id="cl-10MB-single"),
    pytest.param(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n", True,
                 [b"transfer-encoding: chunked", b"connection: close"], id="cl-10MB-streamed"),
    pytest.param(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1048577\r\n\r\n", False,
                 [b"content-length: 2", b"connection: close"], id="cl-1MiB+1"),
    pytest.param(b"POST / HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 2000000\r\n\r\n",
                 False, [b"content-length: 2", b"connection: close"], id="http10-keepalive-2MB"),
]


@pytest.mark.rule("skirr-close-announced-unread-content")
@pytest.mark.parametrize("request_head,streamed,fields", UNREAD)
def test_unread_content_over_limit_close_is_announced(serve, natives, request_head, streamed,
                                                      fields):
    """The app answers without reading a Content-Length body of which more than 1 MiB is
    unread: skirr will close rather than read and drop it, so the head says 'connection: close'
    and the connection closes right after the response."""
    with serve(answer_at_once(streamed=streamed)) as srv:
        c = srv.connect()
        c.send(request_head)
        raw = undated(c.read_until_close())
        version = b"HTTP/1.1 200 OK"
        payload = b"2\r\nok\r\n0\r\n\r\n" if streamed else b"ok"
        assert raw == head(version, b"x-app: 1", *fields) + payload
        c.close()  # the server closed first, and now waits for our FIN
        wait_counters(natives, active_requests=0, connections=0)


@pytest.mark.rule("skirr-close-announced-unread-content")
def test_unread_content_after_partial_read_close_is_announced(serve, natives):
    """The app reads one event of a 10 MB upload and answers: more than 1 MiB is still unread,
    so the head says 'connection: close' and the connection closes after it."""
    got = Recorder()

    async def app(scope, receive, send):
        msg = await receive()
        got.put((len(msg["body"]) > 0, msg["more_body"]))
        await send(start(200))
        await send(body(b"ok"))

    with serve(app) as srv:
        c = srv.connect()
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n" + b"a" * 65536)
        raw = undated(c.read_until_close())
        assert raw == head(b"HTTP/1.1 200 OK", b"content-length: 2", b"connection: close") + b"ok"
        assert got.items == [(True, True)]
        c.close()  # the server closed first, and now waits for our FIN
        wait_counters(natives, active_requests=0, connections=0)


@pytest.mark.rule("skirr-close-announced-unread-content")
def test_unread_chunked_content_close_is_announced(serve, natives):
    """A chunked body the app does not read: how much is left is unknown, so skirr never reads it
    to drop it; the head says 'connection: close' and the connection closes after it."""
    with serve(answer_at_once()) as srv:
        c = srv.connect()
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        raw = undated(c.read_until_close())
        assert raw == head(b"HTTP/1.1 200 OK", b"x-app: 1", b"content-length: 2",
                           b"connection: close") + b"ok"
        c.close()  # the server closed first, and now waits for our FIN
        wait_counters(natives, active_requests=0, connections=0)


@pytest.mark.rule("skirr-close-announced-unread-content")
def test_unread_content_at_limit_is_discarded_and_connection_kept(serve, natives):
    """Exactly 1 MiB unread is within the discard limit: no close is announced, skirr reads and
    drops the 1 MiB the client then sends, and the next request on the connection is served."""
    with serve(answer_at_once()) as srv:
        c = srv.connect()
        c.send(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n")
        r = c.response()
        assert (r.status, r.body, r.get(b"connection")) == (200, b"ok", None)
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".ljust(1048576, b"z") + http_request("GET", "/b"))
        r = c.response()
        assert (r.status, r.body, r.get(b"connection")) == (200, b"ok", None)
        wait_counters(natives, active_requests=0, connections=1)


@pytest.mark.rule("skirr-close-announced-unread-content")
def test_content_read_whole_keeps_connection(serve, natives):
    """The contrast: a 2 MB body the app reads whole leaves nothing to drop: no close, the
    connection carries the next request."""

    async def app(scope, receive, send):
        n = 0
        while True:
            msg = await receive()
            n += len(msg["body"])
            if not msg["more_body"]:
                break
        await send(start(200))
        await send(body(str(n).encode()))

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request("POST", "/", body=b"b" * 2_000_000))
        r = c.response()
        assert (r.status, r.body, r.get(b"connection")) == (200, b"2000000", None)
        r = c.request(http_request("POST", "/", body=b"xyz"))
        assert (r.status, r.body, r.get(b"connection")) == (200, b"3", None)
        wait_counters(natives, active_requests=0, connections=1)


@pytest.mark.rule("skirr-close-announced-continue-unsent")
@pytest.mark.parametrize("streamed", [False, True], ids=["single", "streamed"])
def test_expect_continue_never_asked_close_is_announced(serve, natives, streamed):
    """Expect: 100-continue and an app that answers without reading: no 100 goes out, and since
    the client may still be waiting to send the body skirr closes after the response, which says
    'connection: close'."""
    with serve(answer_at_once(streamed=streamed)) as srv:
        c = srv.connect()
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        raw = undated(c.read_until_close())
        framing = b"transfer-encoding: chunked" if streamed else b"content-length: 2"
        payload = b"2\r\nok\r\n0\r\n\r\n" if streamed else b"ok"
        assert raw == head(b"HTTP/1.1 200 OK", b"x-app: 1", framing, b"connection: close") + payload
        c.close()  # the server closed first, and now waits for our FIN
        wait_counters(natives, active_requests=0, connections=0)


@pytest.mark.rule("skirr-close-announced-close-delimited")
def test_http10_keepalive_streamed_close_is_announced(serve, natives):
    """HTTP/1.0 asked for keep-alive, but the app streams: HTTP/1.0 has no chunked coding, so
    the body is delimited by skirr's close, and the head says 'connection: close' (not
    keep-alive)."""
    with serve(answer_at_once(streamed=True)) as srv:
        c = srv.connect()
        c.send(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        raw = undated(c.read_until_close())
        assert raw == head(b"HTTP/1.1 200 OK", b"x-app: 1", b"connection: close") + b"ok"
        c.close()  # the server closed first, and now waits for our FIN
        wait_counters(natives, active_requests=0, connections=0)


@pytest.fixture
def shutdown_began(monkeypatch) -> threading.Event:
    """Set in the loop step that calls native.shutdown() (Server._drain's first step): an app
    resumed after the test sees it runs after skirr's shutdown began."""
    event = threading.Event()
    original = skirr.server.Server._drain

    async def drain(self, natives):
        event.set()
        await original(self, natives)

    monkeypatch.setattr(skirr.server.Server, "_drain", drain)
    return event


@pytest.mark.rule("skirr-close-announced-shutdown")
@pytest.mark.parametrize("streamed", [False, True], ids=["single", "streamed"])
def test_response_during_shutdown_close_is_announced(serve, natives, shutdown_began, streamed):
    """A request in flight when the graceful shutdown begins: its response, whose head is built
    after that, says 'connection: close'; the connection closes after it and the server stops."""
    release = threading.Event()
    started = Recorder()

    async def app(scope, receive, send):
        await receive()
        started.put(scope["path"])
        await wait_event(release)
        await send(start(200))
        if streamed:
            await send(body(b"slow", more=True))
            await send(body(b""))
        else:
            await send(body(b"slow"))

    with serve(app, timeout_graceful_shutdown=5.0) as srv:
        c = srv.connect()
        c.send(http_request("GET", "/slow"))
        assert started.wait(1) == ["/slow"]
        srv.server.request_shutdown()
        assert shutdown_began.wait(3), "the graceful shutdown did not begin"
        release.set()
        raw = undated(c.read_until_close())
        framing = b"transfer-encoding: chunked" if streamed else b"content-length: 4"
        payload = b"4\r\nslow\r\n0\r\n\r\n" if streamed else b"slow"
        assert raw == head(b"HTTP/1.1 200 OK", framing, b"connection: close") + payload
        c.close()
        srv.thread.join(5)
        assert not srv.thread.is_alive() and srv.server.exit_code == 0
        assert counters(natives) == {"active_requests": 0, "connections": 0}


@pytest.mark.rule("skirr-shutdown-idle-grace")
def test_request_on_idle_connection_as_shutdown_begins_is_answered(serve, natives, shutdown_began):
    """A keep-alive connection idle when the graceful shutdown begins stays open for the grace: the
    client's next request on it (sent as the shutdown began) is answered, with 'connection:
    close', instead of meeting a closed connection (it may be a POST no client can retry)."""

    async def app(scope, receive, send):
        got = await receive()
        await send(start(200))
        await send(body(scope["method"].encode() + b" " + got["body"]))

    with serve(app, timeout_graceful_shutdown=5.0) as srv:
        c = srv.connect()
        c.send(http_request("GET", "/first"))
        first = undated(c.read_until(b"\r\n\r\n") + c.read_exact(4))
        assert first == head(b"HTTP/1.1 200 OK", b"content-length: 4") + b"GET "
        srv.server.request_shutdown()
        assert shutdown_began.wait(3), "the graceful shutdown did not begin"
        time.sleep(0.2)  # the shutdown step has run; the connection is inside its grace
        c.send(http_request("POST", "/next", body=b"data"))
        raw = undated(c.read_until_close(3))
        assert raw == head(b"HTTP/1.1 200 OK", b"content-length: 9", b"connection: close") + b"POST data"
        c.close()
        srv.thread.join(5)
        assert not srv.thread.is_alive() and srv.server.exit_code == 0
        assert counters(natives) == {"active_requests": 0, "connections": 0}


@pytest.mark.rule("skirr-shutdown-idle-grace")
@pytest.mark.parametrize("keep_alive, low, high", [(5.0, 0.8, 2.5), (0.3, 0.15, 1.2)],
                         ids=["grace-1s", "keep-alive-0.3s"])
def test_idle_connection_closes_quietly_after_the_grace(serve, natives, keep_alive, low, high):
    """An idle keep-alive connection gets no more bytes when the shutdown begins and is closed
    quietly once the grace (1 s, or --timeout-keep-alive when shorter) has passed; then the server
    exits 0."""

    async def app(scope, receive, send):
        await send(start(200))
        await send(body(b"ok"))

    with serve(app, timeout_graceful_shutdown=5.0, timeout_keep_alive=keep_alive) as srv:
        c = srv.connect()
        c.send(http_request("GET", "/"))
        assert undated(c.read_until(b"\r\n\r\n") + c.read_exact(2)) == (
            head(b"HTTP/1.1 200 OK", b"content-length: 2") + b"ok")
        t0 = time.monotonic()
        srv.server.request_shutdown()
        assert c.read_until_close(5) == b""
        elapsed = time.monotonic() - t0
        assert low <= elapsed <= high, f"closed {elapsed:.2f} s after the shutdown began"
        srv.thread.join(5)
        assert not srv.thread.is_alive() and srv.server.exit_code == 0


# ---------------------------------------------------------------------------------------------
# Item 5: a response found invalid before any byte of it was written gets a clean 500.

MISMATCH = [
    pytest.param(b"10", [body(b"12345")], "Response content shorter than Content-Length",
                 marks=pytest.mark.rule("skirr-resp-content-length-short"), id="short-final"),
    pytest.param(b"10", [body(b"")], "Response content shorter than Content-Length",
                 marks=pytest.mark.rule("skirr-resp-content-length-short"), id="empty-final"),
    pytest.param(b"3", [body(b"12345")], "Response content longer than Content-Length",
                 marks=pytest.mark.rule("skirr-resp-content-length-too-long"), id="long-final"),
    pytest.param(b"3", [body(b"12345", more=True)], "Response content longer than Content-Length",
                 marks=pytest.mark.rule("skirr-resp-content-length-too-long"), id="long-first-more"),
    pytest.param(b"0", [body(b"x", more=True)], "Response content longer than Content-Length",
                 marks=pytest.mark.rule("skirr-resp-content-length-too-long"), id="zero-then-byte"),
    # a final body of 16 KiB or more is sent from the app's bytes (no copy): refused alike
    pytest.param(b"40000", [body(b"s" * 20000)], "Response content shorter than Content-Length",
                 marks=pytest.mark.rule("skirr-resp-content-length-short"), id="short-final-large"),
    pytest.param(b"16384", [body(b"l" * 20000)], "Response content longer than Content-Length",
                 marks=pytest.mark.rule("skirr-resp-content-length-too-long"),
                 id="long-final-large"),
]


@pytest.mark.rule("skirr-close-announced-500")
@pytest.mark.parametrize("length,events,message", MISMATCH)
def test_content_length_mismatch_before_head_is_clean_500(serve, natives, length, events,
                                                          message):
    """The app's Content-Length and its first body event disagree, so nothing of its response
    was written yet: the client gets skirr's complete 500 with 'connection: close' (never an
    empty reply), the app's send raises RuntimeError, and the connection closes."""
    raised = Recorder()

    async def app(scope, receive, send):
        await receive()
        await send(start(200, [(b"content-length", length)]))
        try:
            for event in events:
                await send(event)
        except RuntimeError as exc:
            raised.put(str(exc))
            raise

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request("GET", "/") + http_request("GET", "/never"))
        assert undated(c.read_until_close()) == ERROR_500
        assert raised.wait(1) == [message]
        c.close()  # the server closed first, and now waits for our FIN
        wait_counters(natives, active_requests=0, connections=0)
        assert srv.get("/after").status == 500  # the server keeps serving (and failing) alike
        assert natives[0].total_requests == 2  # the pipelined /never was never started
    assert any(message in record_text(r) for r in srv.errors())


@pytest.mark.rule("skirr-resp-content-length-short")
def test_content_length_short_after_head_still_aborts(serve, natives):
    """The contrast: once bytes of the response were written, a short final event cannot become
    a 500: the connection closes with the message incomplete."""

    async def app(scope, receive, send):
        await receive()
        await send(start(200, [(b"content-length", b"10")]))
        await send(body(b"12345", more=True))
        await send(body(b"678"))

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        r = c.response(allow_incomplete=True)
        assert (r.status, r.complete, r.body) == (200, False, b"12345")
        c.close()  # the server closed first, and now waits for our FIN
        wait_counters(natives, active_requests=0, connections=0)


# ---------------------------------------------------------------------------------------------
# Item 6: several waiters on one request's send() and receive().

BLOCK = 64 * KIB


def block(task: int, i: int) -> bytes:
    """A 64 KiB event naming its task and index in every 8 bytes (order and integrity)."""
    return (bytes([task]) + i.to_bytes(4, "big") + b"abc") * (BLOCK // 8)


@pytest.mark.rule("skirr-concurrent-send-drain")
def test_two_tasks_streaming_to_slow_reader_deliver_everything(serve, natives):
    """Two tasks of one request each send 200 events of 64 KiB with more_body (a heartbeat
    beside a data task, at full size) to a client that stalls and reads slowly: while it
    stalls both tasks wait in send() at once; every waiting send resumes when the output drains;
    all 25 MiB arrive, each task's events in its order, and both tasks finish."""
    n = 200
    progress = Progress()
    finished = Recorder()

    async def app(scope, receive, send):
        await receive()
        await send(start(200))

        async def stream(task: int) -> None:
            for i in range(n):
                progress.bump(f"started{task}")
                await send(body(block(task, i), more=True))
                progress.bump(f"done{task}")
            finished.put(task)

        await asyncio.gather(stream(1), stream(2))
        await send(body(b""))

    with serve(app) as srv:
        c = small_client(srv, rcvbuf=32 * KIB, timeout=10.0)
        c.send(http_request())
        # The client reads nothing: both tasks end up waiting in send() for drain, together.
        wait_until(lambda: progress.get("started1") > 0 and progress.get("started2") > 0,
                   what="both tasks sending")
        progress.wait_stable("started1")
        progress.wait_stable("started2")
        assert progress.get("started1") == progress.get("done1") + 1
        assert progress.get("started2") == progress.get("done2") + 1
        assert progress.get("done1") + progress.get("done2") < 2 * n
        # Then it reads slowly: a pause after every MiB.
        raw = bytearray(c.buf)
        c.buf = b""
        deadline = time.monotonic() + 20
        next_pause = MIB
        while not raw.endswith(b"\r\n0\r\n\r\n"):
            assert time.monotonic() < deadline, f"stuck after {len(raw)} bytes"
            data = c._recv(what="response bytes")
            assert data, f"closed after {len(raw)} bytes"
            raw += data
            if len(raw) >= next_pause:
                next_pause += MIB
                time.sleep(0.02)
        assert finished.wait(2) and sorted(finished.items) == [1, 2]
        head_end = raw.index(b"\r\n\r\n") + 4
        assert raw[:head_end].startswith(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n")
        chunks = bytes(raw[head_end:])
        # De-chunk: every chunk is one whole 64 KiB event (10000 hex), then the last chunk.
        frame = b"10000\r\n"
        payloads = []
        pos = 0
        while chunks[pos:pos + len(frame)] == frame:
            payloads.append(chunks[pos + len(frame):pos + len(frame) + BLOCK])
            assert chunks[pos + len(frame) + BLOCK:pos + len(frame) + BLOCK + 2] == b"\r\n"
            pos += len(frame) + BLOCK + 2
        assert chunks[pos:] == b"0\r\n\r\n"
        assert len(payloads) == 2 * n  # 25 MiB
        order = {1: [], 2: []}
        for p in payloads:
            task, i = p[0], int.from_bytes(p[1:5], "big")
            assert p == block(task, i), f"event {task}/{i} corrupted"
            order[task].append(i)
        assert order == {1: list(range(n)), 2: list(range(n))}
        wait_counters(natives, active_requests=0, connections=1)


@pytest.mark.rule("skirr-waiters-resolved-at-end")
def test_send_waiting_for_drain_completes_when_sibling_sends_final_body(serve, natives):
    """A task waits in send() for drain (the client reads nothing) while another task of the
    request sends the final body: the response is complete, so the waiting send returns None
    (it is not left pending and raises nothing); the client gets every byte; the request ends
    and the connection carries the next request."""
    waiting = Recorder()
    outcome = Recorder()

    async def app(scope, receive, send):
        await receive()
        if scope["path"] == "/next":
            await send(start(200))
            await send(body(b"next"))
            return
        await send(start(200))

        async def data() -> None:
            i = 0
            try:
                while True:
                    fut = send(body(block(1, i), more=True))
                    waiting.put(i)
                    await fut
                    i += 1
            except RuntimeError as exc:  # sent after the sibling completed the response
                outcome.put(("after-complete", i, str(exc)))
            except BaseException as exc:
                outcome.put(("raised", i, repr(exc)))
                raise

        task = asyncio.ensure_future(data())
        # Wait until the data task stops making sends: it waits for drain (the client reads
        # nothing).
        count = -1
        for _ in range(50):
            await asyncio.sleep(0.2)
            if len(waiting) == count:
                break
            count = len(waiting)
        else:
            raise RuntimeError("the data task never stalled")
        assert not task.done()
        stalled_at = waiting.items[-1]
        await send(body(b"end"))
        await asyncio.wait_for(task, 5)
        outcome.put(("final-sent", stalled_at))

    with serve(app) as srv:
        c = small_client(srv, rcvbuf=32 * KIB, timeout=10.0)
        c.send(http_request("GET", "/"))
        # The client reads nothing until the app has seen the stall and sent the final body.
        (kind, next_i, message), (final, stalled_at) = outcome.wait(2, timeout=15)
        r = c.response()
        assert kind == "after-complete" and final == "final-sent"
        assert message == ("Unexpected ASGI message 'http.response.body' sent, after response "
                           "already completed.")
        # the waiting send returned None: the same task's next send came, and was refused
        assert next_i == stalled_at + 1
        assert r.status == 200 and r.complete
        assert r.body == b"".join(block(1, i) for i in range(stalled_at + 1)) + b"end"
        r = c.request(http_request("GET", "/next"))
        assert (r.status, r.body) == (200, b"next")
        wait_counters(natives, active_requests=0, connections=1)


@pytest.mark.rule("skirr-concurrent-receive-fcfs")
def test_concurrent_receive_served_in_call_order(serve, natives):
    """Three tasks wait in receive() at once (A, then B, then C): each piece of the chunked body
    goes to the longest-waiting one, one event each, in call order; a receive() cancelled while
    waiting consumes no event."""
    got = Recorder()
    ready = Recorder()

    async def app(scope, receive, send):
        async def rcv(name: str) -> None:
            got.put((name, await receive()))

        tasks = []
        for name in ("A", "X", "B", "C"):
            tasks.append(asyncio.ensure_future(rcv(name)))
            await asyncio.sleep(0)  # each task is waiting in receive() before the next calls it
        tasks[1].cancel()  # X gives up: its place goes, and no event is lost with it
        await asyncio.sleep(0)
        ready.put("waiting")
        await asyncio.wait_for(asyncio.gather(tasks[0], tasks[2], tasks[3]), 5)
        last = await receive()
        await send(start(200))
        await send(body(repr(sorted(last.items())).encode()))

    with serve(app) as srv:
        c = srv.connect()
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        ready.wait(1)
        for i, piece in enumerate((b"aaa", b"bbb", b"ccc")):
            c.send(b"3\r\n" + piece + b"\r\n")
            got.wait(i + 1)
        c.send(b"0\r\n\r\n")
        r = c.response()
        assert got.items == [
            ("A", {"type": "http.request", "body": b"aaa", "more_body": True}),
            ("B", {"type": "http.request", "body": b"bbb", "more_body": True}),
            ("C", {"type": "http.request", "body": b"ccc", "more_body": True}),
        ]
        assert (r.status, r.body) == (
            200, b"[('body', b''), ('more_body', False), ('type', 'http.request')]")
        wait_counters(natives, active_requests=0, connections=1)


def waiting_app(outcomes: Recorder, ready: Recorder, ending: str):
    """Two tasks wait in send() for drain and two in receive() (the body was read whole); then
    the request ends as ``ending`` says: 'client' (the test closes the client), 'app-raises'
    (the app's own coroutine raises), 'response-complete' (the app sends the final body)."""

    async def app(scope, receive, send):
        msg = await receive()
        assert msg["more_body"] is False
        await send(start(200))
        if scope["path"] == "/ok":
            await send(body(b"ok"))
            return

        progress = {"send1": [0, 0], "send2": [0, 0]}  # sends started, sends completed

        async def sender(name: str) -> None:
            i = 0
            try:
                while True:
                    progress[name][0] += 1
                    await send(body(block(1, i), more=True))
                    progress[name][1] += 1
                    i += 1
            except BaseException as exc:
                outcomes.put((name, type(exc).__name__))
                if not isinstance(exc, Exception):
                    raise

        async def receiver(name: str) -> None:
            outcomes.put((name, await receive()))

        tasks = [asyncio.ensure_future(f(n)) for f, n in
                 ((sender, "send1"), (sender, "send2"), (receiver, "recv1"), (receiver, "recv2"))]
        # Until both senders have one send pending that has not moved for 0.2 s: each waits for
        # drain (the client reads nothing); the receivers wait for an event.
        before = None
        for _ in range(50):
            await asyncio.sleep(0.2)
            now = [tuple(v) for v in progress.values()]
            if now == before and all(started == done + 1 for started, done in now):
                break
            before = now
        else:
            raise RuntimeError(f"the senders never both waited for drain: {progress}")
        assert not any(t.done() for t in tasks)
        ready.put("waiting")
        if ending == "app-raises":
            await asyncio.sleep(0.05)
            raise ValueError("app fails with waiters pending")
        if ending == "response-complete":
            await send(body(b""))
        await asyncio.wait_for(asyncio.gather(*tasks), 5)

    return app


@pytest.mark.rule("skirr-waiters-resolved-at-end")
@pytest.mark.parametrize("how", ["close", "reset"])
def test_every_waiter_resolved_when_client_leaves(serve, natives, how):
    """Two sends waiting for drain and two receives waiting for an event when the client goes:
    both sends raise ClientDisconnected, both receives return http.disconnect, the request ends
    (active_requests and connections back to 0) and nothing is logged."""
    outcomes, ready = Recorder(), Recorder()
    with serve(waiting_app(outcomes, ready, "client")) as srv:
        c = small_client(srv, rcvbuf=32 * KIB)
        c.send(http_request())
        ready.wait(1, timeout=2)
        c.abort() if how == "reset" else c.close()
        got = dict(outcomes.wait(4, timeout=3))
        assert got == {
            "send1": "ClientDisconnected", "send2": "ClientDisconnected",
            "recv1": {"type": "http.disconnect"}, "recv2": {"type": "http.disconnect"},
        }
        wait_counters(natives, active_requests=0, connections=0)
        assert srv.get("/ok").body == b"ok"
        assert srv.errors() == []


@pytest.mark.rule("skirr-waiters-resolved-at-end")
def test_every_waiter_resolved_when_app_fails(serve, natives):
    """The app's coroutine raises while its tasks wait in send() and receive(): the response is
    aborted (incomplete), both sends raise ClientDisconnected, both receives return
    http.disconnect, and the request is no longer in flight."""
    outcomes, ready = Recorder(), Recorder()
    with serve(waiting_app(outcomes, ready, "app-raises")) as srv:
        c = small_client(srv, rcvbuf=32 * KIB)
        c.send(http_request())
        ready.wait(1, timeout=2)
        got = dict(outcomes.wait(4, timeout=3))
        assert got == {
            "send1": "ClientDisconnected", "send2": "ClientDisconnected",
            "recv1": {"type": "http.disconnect"}, "recv2": {"type": "http.disconnect"},
        }
        r = c.response(allow_incomplete=True)
        assert (r.status, r.complete) == (200, False)
        c.close()  # the server closed first, and now waits for our FIN
        wait_counters(natives, active_requests=0, connections=0)
    assert [r for r in srv.errors() if "app fails with waiters pending" in record_text(r)]


@pytest.mark.rule("skirr-waiters-resolved-at-end")
def test_every_waiter_resolved_when_response_completes(serve, natives):
    """The app sends the final body while two tasks wait in send() for drain and two in
    receive(): the sends return (the response is complete; their next send is refused with
    RuntimeError), the receives return http.disconnect, the client gets a complete response."""
    outcomes, ready = Recorder(), Recorder()
    with serve(waiting_app(outcomes, ready, "response-complete")) as srv:
        c = small_client(srv, rcvbuf=32 * KIB, timeout=10.0)
        c.send(http_request())
        ready.wait(1, timeout=2)
        r = c.response()
        assert (r.status, r.complete) == (200, True)
        got = dict(outcomes.wait(4, timeout=3))
        assert got == {
            "send1": "RuntimeError", "send2": "RuntimeError",
            "recv1": {"type": "http.disconnect"}, "recv2": {"type": "http.disconnect"},
        }
        wait_counters(natives, active_requests=0, connections=1)


@pytest.mark.rule("skirr-waiters-resolved-at-end")
def test_every_waiter_resolved_when_server_closes(serve, natives):
    """The graceful shutdown times out with tasks waiting in send() and receive(): closing the
    connection resolves every one of them (ClientDisconnected, http.disconnect), the app ends
    and the server stops with exit status 0."""
    outcomes, ready = Recorder(), Recorder()
    with serve(waiting_app(outcomes, ready, "client"), timeout_graceful_shutdown=0.3) as srv:
        c = small_client(srv, rcvbuf=32 * KIB)
        c.send(http_request())
        ready.wait(1, timeout=2)
        srv.server.request_shutdown()
        got = dict(outcomes.wait(4, timeout=4))
        assert got == {
            "send1": "ClientDisconnected", "send2": "ClientDisconnected",
            "recv1": {"type": "http.disconnect"}, "recv2": {"type": "http.disconnect"},
        }
        srv.thread.join(5)
        assert not srv.thread.is_alive() and srv.server.exit_code == 0
        assert counters(natives) == {"active_requests": 0, "connections": 0}


# ---------------------------------------------------------------------------------------------
# Items 7 and 8: any exception of an app fails only its request; the counters stay balanced.


class Fatal(BaseException):
    """A BaseException of the app's own."""


EXCEPTIONS = [SystemExit, KeyboardInterrupt, Fatal]


class RaiseInCall:
    """A class-based app whose synchronous __call__ raises (no coroutine is ever made)."""

    def __init__(self, exc_type):
        self.exc_type = exc_type

    def __call__(self, scope, receive, send):
        raise self.exc_type("raised-in-call")


class RaiseInAwait:
    """An app returning an awaitable whose __await__ raises."""

    def __init__(self, exc_type):
        self.exc_type = exc_type

    def __call__(self, scope, receive, send):
        exc_type = self.exc_type

        class Awaitable:
            def __await__(self):
                raise exc_type("raised-in-await")

        return Awaitable()


def raising_app(exc_type, where: str):
    if where == "call":
        return RaiseInCall(exc_type)
    if where == "await":
        return RaiseInAwait(exc_type)

    async def app(scope, receive, send):
        if where == "before-first-await":
            raise exc_type("raised-before-first-await")
        await receive()
        if where == "after-first-await":
            raise exc_type("raised-after-first-await")
        await send(start(200))
        await send(body(b"part", more=True))
        raise exc_type("raised-after-head")

    return app


WHERE = ["call", "await", "before-first-await", "after-first-await", "after-head"]


@pytest.mark.rule("skirr-errors-base-exceptions", "skirr-counters-balanced")
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("exc_type", EXCEPTIONS, ids=lambda e: e.__name__)
def test_base_exception_fails_only_its_request(serve, natives, exc_type, where):
    """SystemExit, KeyboardInterrupt or the app's own BaseException, raised in app()'s
    synchronous part, in __await__, before or after the first await: the client gets skirr's
    500 and the connection closes; raised after the head: the chunked message is left
    incomplete. Either way it is logged at ERROR with the exception, the request is no longer in
    flight, and the server goes on serving."""
    app = raising_app(exc_type, where)
    with serve(app) as srv:
        for _ in range(2):  # twice: the first failure left the server whole
            c = srv.connect()
            c.send(http_request())
            raw = c.read_until_close()
            if where == "after-head":
                assert undated(raw) == head(b"HTTP/1.1 200 OK", b"transfer-encoding: chunked") + (
                    b"4\r\npart\r\n")
            else:
                assert undated(raw) == ERROR_500
            c.close()  # the server closed first, and now waits for our FIN
            wait_counters(natives, active_requests=0, connections=0)
        assert srv.thread.is_alive()
        logged = [r for r in srv.errors() if r.exc_info and r.exc_info[0] is exc_type]
        assert len(logged) == 2, [record_text(r) for r in srv.errors()]
        assert "raised-" in record_text(logged[0])
        assert natives[0].total_requests == 2


@pytest.mark.rule("skirr-errors-base-exceptions", "skirr-counters-balanced")
@pytest.mark.parametrize("where", ["call", "before-first-await", "after-first-await"])
@pytest.mark.parametrize("exc_type", EXCEPTIONS, ids=lambda e: e.__name__)
def test_base_exception_leaves_other_requests_and_lifespan(serve, natives, exc_type, where):
    """Ten requests in flight, one of them raises: the other nine get their 200, lifespan
    shutdown runs afterwards and the server exits with status 0."""
    release = threading.Event()
    started = Recorder()
    lifespan = Recorder()
    bad = raising_app(exc_type, where)

    def app(scope, receive, send):
        # A plain function: a /bad app raising in its __call__ raises in app()'s synchronous part.
        if scope["type"] == "http" and scope["path"] == "/bad":
            return bad(scope, receive, send)
        return serve_one(scope, receive, send)

    async def serve_one(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                lifespan.put(msg["type"])
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await receive()
        started.put(scope["path"])
        await wait_event(release)
        await send(start(200))
        await send(body(scope["path"].encode()))

    with serve(app, lifespan="on") as srv:
        good = []
        for i in range(9):
            c = srv.connect()
            c.send(http_request("GET", f"/good{i}"))
            good.append(c)
        started.wait(9)
        b = srv.connect()
        b.send(http_request("GET", "/bad"))
        assert undated(b.read_until_close()) == ERROR_500
        b.close()
        wait_counters(natives, active_requests=9, connections=9)
        release.set()
        assert [c.response().body for c in good] == [f"/good{i}".encode() for i in range(9)]
        wait_counters(natives, active_requests=0)
    assert lifespan.items == ["lifespan.startup", "lifespan.shutdown"]
    assert srv.server.exit_code == 0


class Cancelled:
    """An app whose task cancels itself before answering."""

    async def __call__(self, scope, receive, send):
        await receive()
        asyncio.current_task().cancel()
        await asyncio.sleep(1)


async def returns_without_response(scope, receive, send):
    await receive()


async def returns_unfinished(scope, receive, send):
    await receive()
    await send(start(200))
    await send(body(b"x", more=True))


async def bad_length(scope, receive, send):
    await receive()
    await send(start(200, [(b"content-length", b"9")]))
    await send(body(b"x"))


async def bad_message(scope, receive, send):
    await send({"type": "http.response.nonsense"})


def failing_apps():
    return {
        "/system-exit-call": RaiseInCall(SystemExit),
        "/interrupt-before-await": raising_app(KeyboardInterrupt, "before-first-await"),
        "/fatal-after-await": raising_app(Fatal, "after-first-await"),
        "/exit-after-head": raising_app(SystemExit, "after-head"),
        "/value-error": raising_app(ValueError, "after-first-await"),
        "/cancelled": Cancelled(),
        "/no-response": returns_without_response,
        "/unfinished": returns_unfinished,
        "/bad-length": bad_length,
        "/bad-message": bad_message,
    }


@pytest.mark.rule("skirr-counters-balanced")
def test_limit_concurrency_one_after_every_error_path(serve, natives):
    """After requests ending in every error path (BaseExceptions in app()'s synchronous part,
    before and after the first await and after the head, an Exception, a cancellation, a return
    without or in the middle of a response, a bad Content-Length, an unknown message, a client
    gone mid-drain), active_requests is exactly 0 and limit_concurrency=1 still admits exactly
    one request: a second one at the same time gets 503, one after it is served."""
    release = threading.Event()
    started = Recorder()
    apps = failing_apps()

    def app(scope, receive, send):
        # A plain function: the failing app's own call (and a raise in it) is app()'s.
        if scope["path"] in apps:
            return apps[scope["path"]](scope, receive, send)
        return others(scope, receive, send)

    async def others(scope, receive, send):
        path = scope["path"]
        if path == "/drain":
            await send(start(200))
            while True:
                await send(body(block(0, 0), more=True))
        await receive()
        started.put(path)
        if path == "/slow":
            await wait_event(release)
        await send(start(200))
        await send(body(path.encode()))

    with serve(app, limit_concurrency=1) as srv:
        for path in apps:
            c = srv.connect()
            c.send(http_request("GET", path))
            c.read_until_close()
            c.close()  # the server closed first, and now waits for our FIN
            wait_counters(natives, active_requests=0, connections=0)
        c = small_client(srv, rcvbuf=32 * KIB)
        c.send(http_request("GET", "/drain"))
        wait_counters(natives, active_requests=1)
        time.sleep(0.2)
        c.abort()
        wait_counters(natives, active_requests=0, connections=0)
        slow = srv.connect()
        slow.send(http_request("GET", "/slow"))
        assert started.wait(1) == ["/slow"]
        for _ in range(3):
            r = srv.get("/second")
            assert (r.status, r.get(b"connection")) == (503, b"close")
        release.set()
        assert slow.response().body == b"/slow"
        assert srv.get("/third").body == b"/third"
        wait_counters(natives, active_requests=0)
        assert natives[0].total_requests == len(apps) + 1 + 1 + 1  # the 503s are not counted


# ---------------------------------------------------------------------------------------------
# Item 9: send() with objects that run the app's code while being read.


class ReplacesPrevious:
    """A header pair whose iteration replaces (and frees) the previous pair's name and value."""

    def __init__(self, victim: list, headers: list | None = None):
        self.victim = victim
        self.headers = headers

    def __iter__(self):
        self.victim[0] = b"x-replaced"
        self.victim[1] = b"Z" * 4000
        if self.headers is not None:
            self.headers.clear()
        gc.collect()
        # New objects of the same size, likely to take the freed blocks: read from freed memory,
        # the old value would show up as Qs.
        self.filler = [bytes(b"Q") * 4000 for _ in range(32)]
        return iter([b"x-b", b"2"])


@pytest.mark.rule("skirr-send-hostile-objects")
@pytest.mark.parametrize("clear_list", [False, True], ids=["replace-pair", "replace-and-clear"])
def test_header_pair_iteration_mutating_previous_pair(serve, natives, clear_list):
    """A header pair whose __iter__ replaces the previous pair's name and value (and empties
    the headers list): the response carries the pairs as they were when skirr read them, byte
    for byte (never freed memory)."""

    async def app(scope, receive, send):
        await receive()
        value = bytes(b"A" * 4000)  # only the pair's list refers to it
        victim = [bytes(b"x-") + b"a", value]
        del value
        headers = [victim]
        headers.append(ReplacesPrevious(victim, headers if clear_list else None))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send(body(b"ok"))

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        r = c.response()
        assert undated(r.raw) == head(b"HTTP/1.1 200 OK", b"x-a: " + b"A" * 4000, b"x-b: 2",
                                      b"content-length: 2") + b"ok"
        wait_counters(natives, active_requests=0)


class MutatesOnBool:
    """A more_body value whose __bool__ empties the message and tries to resize the body."""

    def __init__(self, msg: dict, seen: Recorder):
        self.msg = msg
        self.seen = seen

    def __bool__(self):
        data = self.msg["body"]
        self.msg.clear()
        try:
            data[:] = b""
        except BufferError as exc:
            self.seen.put(("BufferError", str(exc)))
        else:
            self.seen.put(("resized", bytes(data)))
        return False


@pytest.mark.rule("skirr-send-hostile-objects")
def test_more_body_bool_mutating_message_and_body(serve, natives):
    """more_body's __bool__ empties the message dict and tries to empty the bytearray body
    skirr is reading: the body cannot be resized while skirr holds it (BufferError), and the
    response carries the body as it was."""
    seen = Recorder()

    async def app(scope, receive, send):
        await receive()
        await send(start(200))
        msg = {"type": "http.response.body", "body": bytearray(b"hello")}
        msg["more_body"] = MutatesOnBool(msg, seen)
        await send(msg)

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        r = c.response()
        assert (r.status, r.body, r.get(b"content-length")) == (200, b"hello", b"5")
        assert seen.wait(1)[0][0] == "BufferError"
        wait_counters(natives, active_requests=0)


class SendsInside:
    """A value of the message (more_body, via __bool__; the headers, via __iter__) whose own code
    calls send() with a message that would complete the response, and records what it raised."""

    def __init__(self, send, seen: Recorder):
        self.send = send
        self.seen = seen

    def _send_inside(self) -> None:
        try:
            self.send({"type": "http.response.body", "body": b"inner"})
        except RuntimeError as exc:
            self.seen.put(("RuntimeError", str(exc)))
        else:
            self.seen.put(("accepted", None))

    def __bool__(self):
        self._send_inside()
        return False

    def __iter__(self):
        self._send_inside()
        return iter([(b"x-a", b"1")])


REENTERED = "send() called again while a send() of this request is still reading its message"


@pytest.mark.rule("skirr-send-hostile-objects")
@pytest.mark.parametrize("where", ["more_body", "headers"])
def test_send_reentered_from_its_own_message(serve, natives, where):
    """The message's own code (more_body.__bool__, headers.__iter__) calls send() with a
    message that would complete the response: that inner send raises RuntimeError at once and
    changes nothing; the outer send goes on as if it had not happened (F3: it raised
    ClientDisconnected, unlogged)."""
    seen = Recorder()

    async def app(scope, receive, send):
        await receive()
        if where == "headers":
            await send({"type": "http.response.start", "status": 200,
                        "headers": SendsInside(send, seen)})
            await send({"type": "http.response.body", "body": b"outer"})
        else:
            await send(start(200))
            await send({"type": "http.response.body", "body": b"outer",
                        "more_body": SendsInside(send, seen)})

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        r = c.response()
        assert (r.status, r.body) == (200, b"outer")
        assert seen.wait(1) == [("RuntimeError", REENTERED)]
        assert c.request(http_request()).body == b"outer"  # the connection is still in step
        wait_counters(natives, active_requests=0)
    assert srv.errors() == [], [record_text(x) for x in srv.errors()]


class RaisingPair:
    def __iter__(self):
        raise LookupError("pair-refuses")


@pytest.mark.rule("skirr-send-hostile-objects")
def test_header_pair_iteration_raising(serve, natives):
    """A header pair whose __iter__ raises: the app's send raises that exception, nothing was
    written, so the client gets skirr's 500."""
    raised = Recorder()

    async def app(scope, receive, send):
        await receive()
        try:
            await send(start(200, [(b"x-a", b"1"), RaisingPair()]))
        except LookupError as exc:
            raised.put(str(exc))
            raise

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        assert undated(c.read_until_close()) == ERROR_500
        assert raised.wait(1) == ["pair-refuses"]
        c.close()  # the server closed first, and now waits for our FIN
        wait_counters(natives, active_requests=0, connections=0)


# ---------------------------------------------------------------------------------------------
# Item 10: each request's app() is called in its own task, in its own fresh context.

VAR = contextvars.ContextVar("robustness_round3", default=None)
in_send = threading.local()


class ContextApp:
    """Class-based: __call__ (synchronous) records what it sees and sets VAR; so does the
    coroutine. Every send() call is made with a flag up, so a nested app() call would see it."""

    def __init__(self, seen: Recorder):
        self.seen = seen

    def __call__(self, scope, receive, send):
        path = scope["path"]
        self.seen.put(("call", path, VAR.get(), asyncio.current_task(),
                       getattr(in_send, "flag", False)))
        VAR.set(f"call{path}")
        return self.run(scope, receive, send)

    async def run(self, scope, receive, send):
        path = scope["path"]
        self.seen.put(("run", path, VAR.get(), asyncio.current_task(), False))
        VAR.set(f"run{path}")
        await receive()
        for msg in (start(200), body(path.encode())):
            in_send.flag = True
            try:
                aw = send(msg)
            finally:
                in_send.flag = False
            await aw


@pytest.mark.rule("skirr-asgi-app-called-in-own-task", "skirr-asgi-fresh-context")
@pytest.mark.parametrize("n", [2, 3])
def test_pipelined_app_call_in_own_task_and_context(serve, natives, n):
    """n pipelined requests in one write to a class-based app: each __call__ runs inside its
    own request's Task (the same task its coroutine then runs in, a different one per request),
    never inside another request's send(), and sees none of the ContextVar values the requests
    before it set in their __call__ or coroutine."""
    seen = Recorder()
    with serve(ContextApp(seen)) as srv:
        c = srv.connect()
        c.send(b"".join(http_request("GET", f"/{i}") for i in range(n)))
        assert [c.response().body for _ in range(n)] == [f"/{i}".encode() for i in range(n)]
        items = seen.wait(2 * n)
        calls = [x for x in items if x[0] == "call"]
        runs = [x for x in items if x[0] == "run"]
        assert [(p, v, f) for _, p, v, _, f in calls] == [(f"/{i}", None, False) for i in range(n)]
        assert [(p, v) for _, p, v, _, _ in runs] == [(f"/{i}", f"call/{i}") for i in range(n)]
        tasks = [t for _, _, _, t, _ in calls]
        assert all(t is not None for t in tasks)
        assert [t for _, _, _, t, _ in runs] == tasks
        assert len({id(t) for t in tasks}) == n
        wait_counters(natives, active_requests=0, connections=1)


class MiddlewareSetsVar:
    """Middleware that sets VAR in its synchronous __call__ and records what it found there."""

    def __init__(self, inner, seen: Recorder):
        self.inner = inner
        self.seen = seen

    def __call__(self, scope, receive, send):
        self.seen.put((scope["path"], VAR.get()))
        VAR.set(scope["path"])
        return self.inner(scope, receive, send)


@pytest.mark.rule("skirr-asgi-app-called-in-own-task", "skirr-asgi-fresh-context")
def test_keepalive_and_pipelined_middleware_sees_fresh_context(serve, natives, echo_app):
    """Middleware setting a ContextVar in __call__: each request, sequential on one connection,
    pipelined behind another, or on another connection, finds it unset."""
    seen = Recorder()
    with serve(MiddlewareSetsVar(echo_app, seen)) as srv:
        c = srv.connect()
        assert c.request(http_request("GET", "/1")).status == 200
        c.send(http_request("GET", "/2") + http_request("POST", "/3", body=b"x") +
               http_request("GET", "/4"))
        assert [c.response().status for _ in range(3)] == [200, 200, 200]
        assert srv.get("/5").status == 200
        assert seen.wait(5) == [("/1", None), ("/2", None), ("/3", None), ("/4", None),
                                ("/5", None)]


# ---------------------------------------------------------------------------------------------
# Items 7 and 8 as a user meets them: `python -m skirr` with such an app, then SIGTERM.


@pytest.mark.rule("skirr-errors-base-exceptions", "skirr-counters-balanced")
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_cli_base_exceptions_then_limit_and_sigterm(tmp_path, loop):
    """`python -m skirr robust3:app --limit-concurrency 1`: SystemExit and KeyboardInterrupt
    raised in app(), before and after the first await each get a 500 (after the head: an
    incomplete message) and the process lives on; then --limit-concurrency 1 admits exactly one
    request (a concurrent one gets 503); then SIGTERM on the idle server exits 0 at once (no
    request counted in flight), after lifespan shutdown."""
    port = _proc.free_port()
    args = ["robust3:app", "--loop", loop, "--port", str(port), "--limit-concurrency", "1",
            "--lifespan", "on"]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        for path in ("/exit-in-call", "/interrupt-before", "/exit-after"):
            r = _proc.request(port, "GET", path)
            assert (r.status, r.body, r.header(b"connection")) == (
                500, b"Internal Server Error", b"close"), path
        with _proc.connect(port) as sock:
            sock.sendall(b"GET /interrupt-after-head HTTP/1.1\r\nHost: x\r\n\r\n")
            raw = b""
            while chunk := sock.recv(65536):
                raw += chunk
        assert raw.startswith(b"HTTP/1.1 200 OK\r\n") and raw.endswith(b"\r\n\r\n4\r\npart\r\n")
        assert proc.proc.poll() is None, proc.stderr
        with _proc.connect(port) as slow:
            conn = h11.Connection(h11.CLIENT)
            _proc.send_request(slow, conn, "GET", "/slow?s=1.0")
            proc.wait_event("slow-start")
            r = _proc.request(port, "GET", "/second")
            assert (r.status, r.header(b"connection")) == (503, b"close")
            assert _proc.read_response(slow, conn).body == b"done"
        assert _proc.request(port, "GET", "/ok").body == b"ok"
        started = time.monotonic()
        status = proc.stop(signal.SIGTERM, timeout=10)
        took = time.monotonic() - started
        assert status == 0, proc.stderr
        assert took < 3, f"SIGTERM on an idle server took {took:.1f}s:\n{proc.stderr}"
        assert "in flight" not in proc.stderr, proc.stderr
        assert proc.events == ["startup", "slow-start", "shutdown"]
        for name in ("SystemExit", "KeyboardInterrupt"):
            assert name in proc.stderr
