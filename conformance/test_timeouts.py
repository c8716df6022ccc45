"""Timeouts from skirr's one native timer (spec/flow_control.toml; issue 5 item 3): keep-alive
idle, request head (slowloris: 408 if any byte arrived, else a quiet close), write progress (a
peer that accepts no bytes is disconnected and a waiting send() raises ClientDisconnected); the
keep-alive and head timers never run while a request is in flight.

The timer ticks once a second, so a timeout of T seconds fires between T and T + 1 s after it
starts. Cases use T = 0.5 s and accept [T - 0.1, T + 1 + 0.8] (scheduling slack on a loaded
host); "longer than a timer" below means longer than T + 1 s.
"""
import asyncio
import time

import pytest

from _flow import KIB, MIB, BlockedLoop, Progress, small_client
from conftest import Recorder, http_request

T = 0.5
EARLY, LATE = T - 0.1, T + 1.0 + 0.8


def assert_fired(elapsed: float, what: str) -> None:
    assert EARLY <= elapsed <= LATE, f"{what} after {elapsed:.2f}s; timeout {T:g} s, tick 1 s"


# -- keep-alive ---------------------------------------------------------------------------------


@pytest.mark.rule("RFC9112-9.5-keep-alive-timeout")
def test_idle_connection_closed_after_keep_alive_timeout(serve, echo_app):
    """After a response, an idle persistent connection is closed quietly (no bytes) after
    timeout_keep_alive; the request head timer (longer here) does not apply."""
    with serve(echo_app, timeout_keep_alive=T, timeout_request_head=10.0) as srv:
        c = srv.connect()
        assert c.request(http_request("GET", "/")).status == 200
        t0 = time.monotonic()
        assert c.read_until_close(timeout=5.0) == b""
        assert_fired(time.monotonic() - t0, "idle keep-alive connection closed")


@pytest.mark.rule("skirr-timeout-idle-not-in-flight")
def test_slow_app_outlives_keep_alive_and_head_timeouts(serve):
    """The app takes 1.7 s (longer than both timers plus a tick): the response is complete and
    the connection stays usable."""
    async def app(scope, receive, send):
        await receive()
        if scope["path"] == "/slow":
            await asyncio.sleep(1.7)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": scope["path"].encode()})

    with serve(app, timeout_keep_alive=T, timeout_request_head=T) as srv:
        c = srv.connect()
        r = c.request(http_request("GET", "/slow"))
        assert (r.status, r.body, r.get(b"connection")) == (200, b"/slow", None)
        r = c.request(http_request("GET", "/next"))
        assert (r.status, r.body) == (200, b"/next")


@pytest.mark.rule("skirr-timeout-idle-not-in-flight")
def test_slow_request_body_outlives_keep_alive_and_head_timeouts(serve, echo_app):
    """The head is complete, then the body trickles in over 1.75 s: no timer closes the
    connection while the request is in flight."""
    with serve(echo_app, timeout_keep_alive=T, timeout_request_head=T) as srv:
        c = srv.connect()
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")
        for ch in b"hello":
            time.sleep(0.35)
            c.send(bytes([ch]))
        r = c.response()
        assert (r.status, r.body) == (200, b"hello")


# -- request head -------------------------------------------------------------------------------


@pytest.mark.rule("RFC9110-15.5.9-head-timeout-408")
def test_partial_head_gets_408_and_close(serve, echo_app):
    """Half a request head, then nothing: 408 with connection: close after timeout_request_head,
    then the server closes; the app is never called."""
    with serve(echo_app, timeout_request_head=T) as srv:
        c = srv.connect()
        t0 = time.monotonic()
        c.send(b"GET /slow HTTP/1.1\r\nHost: x\r\nUser-Ag")
        r = c.response()
        assert_fired(time.monotonic() - t0, "408 sent")
        assert (r.status, r.get(b"connection"), r.body) == (408, b"close", b"Request Timeout")
        c.expect_eof()
        assert echo_app.calls.items == []


@pytest.mark.rule("RFC9110-15.5.9-head-timeout-408")
def test_trickled_head_does_not_extend_the_deadline(serve, echo_app):
    """Slowloris: a byte of head every 0.2 s. The deadline runs from the first byte, so the 408
    comes after about timeout_request_head however the bytes trickle."""
    with serve(echo_app, timeout_request_head=T) as srv:
        c = srv.connect()
        t0 = time.monotonic()
        got = b""
        for ch in b"GET / HTTP/1.1\r\nX-Long: aaaaaaaaaaaaaaaaaaaa":
            try:
                c.send(bytes([ch]))
            except OSError:
                break
            got += c.read_for(0.2)
            if got or c.eof:
                break
        elapsed = time.monotonic() - t0
        assert got.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), got[:200]
        assert_fired(elapsed, "408 sent")
        assert echo_app.calls.items == []


@pytest.mark.rule("RFC9110-15.5.9-head-timeout-408")
def test_next_request_head_timed_from_its_first_byte(serve, echo_app):
    """On a persistent connection, the next request's head is timed from its first byte (with a
    long keep-alive timeout): half a head after the first response gets 408 after
    timeout_request_head, not after timeout_keep_alive."""
    with serve(echo_app, timeout_request_head=T, timeout_keep_alive=10.0) as srv:
        c = srv.connect()
        assert c.request(http_request("GET", "/one")).status == 200
        time.sleep(0.3)
        t0 = time.monotonic()
        c.send(b"GET /two HTTP/1.1\r\nHo")
        r = c.response()
        assert_fired(time.monotonic() - t0, "408 sent")
        assert (r.status, r.get(b"connection")) == (408, b"close")
        c.expect_eof()
        assert [x["scope"]["path"] for x in echo_app.calls.items] == ["/one"]


@pytest.mark.rule("skirr-timeout-head-no-bytes-quiet")
def test_connection_without_bytes_closed_quietly(serve, echo_app):
    """A connection that sends nothing is closed after timeout_request_head without a response
    (a 408 to a client that asked nothing would be read as the answer to its next request)."""
    with serve(echo_app, timeout_request_head=T, timeout_keep_alive=10.0) as srv:
        c = srv.connect()
        t0 = time.monotonic()
        assert c.read_until_close(timeout=5.0) == b""
        assert_fired(time.monotonic() - t0, "silent connection closed")


# -- request body ------------------------------------------------------------------------------


def body_recorder(events: Recorder):
    """Reads the whole body, recording each receive() event; answers 200 with what it got."""
    async def app(scope, receive, send):
        body = b""
        while True:
            msg = await receive()
            events.put((msg["type"], msg.get("body", b""), msg.get("more_body", False)))
            if msg["type"] != "http.request":
                return
            body += msg["body"]
            if not msg["more_body"]:
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    return app


@pytest.mark.rule("skirr-timeout-request-body")
def test_stalled_body_gets_408_and_the_app_sees_disconnect(serve):
    """Issue 11 item 11: 3 of 10 announced body bytes, then nothing: after timeout_request_body
    the client gets 408 with connection: close and EOF, and the app's receive() returns
    http.disconnect after the 3 bytes."""
    events = Recorder()
    with serve(body_recorder(events), timeout_request_body=T) as srv:
        c = srv.connect()
        c.send(b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        t0 = time.monotonic()
        r = c.response()
        assert_fired(time.monotonic() - t0, "408 sent")
        assert (r.status, r.get(b"connection"), r.body) == (408, b"close", b"Request Timeout")
        c.expect_eof()
        assert events.wait(2) == [("http.request", b"abc", True), ("http.disconnect", b"", False)]


@pytest.mark.rule("skirr-timeout-request-body")
def test_trickling_body_restarts_the_deadline(serve):
    """A byte every 0.35 s for 2.1 s (longer than T + a tick): each byte restarts the body
    deadline, so the request is answered whole."""
    events = Recorder()
    with serve(body_recorder(events), timeout_request_body=T) as srv:
        c = srv.connect()
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\n")
        for ch in b"abcdef":
            time.sleep(0.35)
            c.send(bytes([ch]))
        r = c.response()
        assert (r.status, r.body) == (200, b"abcdef")


@pytest.mark.rule("skirr-timeout-request-body")
def test_body_deadline_does_not_run_while_flow_control_pauses_reading(serve):
    """The app reads nothing for 2.2 s while 256 KiB are sent at once: skirr stops reading at
    64 KiB (flow control), which is not a stalled body; then the app reads all of it."""
    size = 256 * KIB

    async def app(scope, receive, send):
        await asyncio.sleep(2.2)
        total = 0
        while True:
            msg = await receive()
            assert msg["type"] == "http.request", msg
            total += len(msg["body"])
            if not msg["more_body"]:
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(total).encode()})

    with serve(app, timeout_request_body=T) as srv:
        c = srv.connect()
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % size
               + b"x" * size)
        r = c.response()
        assert (r.status, r.body) == (200, str(size).encode())


@pytest.mark.rule("skirr-timeout-request-body")
def test_body_deadline_after_the_response_began_closes_without_408(serve):
    """The app starts a streaming response, then waits for a body that stalls: no 408 can follow
    a started response, so the connection is closed and receive() returns http.disconnect."""
    events = Recorder()

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        while True:
            msg = await receive()
            events.put(msg["type"])
            if msg["type"] == "http.disconnect" or not msg.get("more_body"):
                return

    with serve(app, timeout_request_body=T) as srv:
        c = srv.connect()
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab")
        data = c.read_until_close(timeout=5.0)
        assert data.startswith(b"HTTP/1.1 200 OK\r\n"), data[:100]
        assert b"408" not in data
        assert data.endswith(b"7\r\npartial\r\n"), data[-60:]  # chunked, never completed
        assert events.wait(2)[-1] == "http.disconnect"


@pytest.mark.rule("skirr-timeout-request-body")
def test_body_timeout_zero_means_none(serve):
    """timeout_request_body=0: a body that stalls for longer than a tick plus T is still
    answered once it completes."""
    events = Recorder()
    with serve(body_recorder(events), timeout_request_body=0) as srv:
        c = srv.connect()
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")
        assert c.read_for(2.0) == b""
        c.send(b"cd")
        r = c.response()
        assert (r.status, r.body) == (200, b"abcd")


# -- write progress -----------------------------------------------------------------------------


@pytest.mark.rule("skirr-timeout-write-progress")
def test_stalled_reader_disconnected_and_send_raises(serve):
    """The client reads nothing of an endless stream: timeout_write after the kernel last took
    a byte, the connection is closed and the app's waiting send() raises ClientDisconnected
    (not logged as an application error); the client sees an incomplete message."""
    import skirr

    progress = Progress()
    seen = Recorder()

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            while True:
                await send({"type": "http.response.body", "body": b"w" * (64 * KIB), "more_body": True})
                progress.bump("done")
        except BaseException as e:
            seen.put((type(e), time.monotonic()))
            raise

    with serve(app, timeout_write=T) as srv:
        c = small_client(srv, rcvbuf=32 * KIB, timeout=10.0)
        c.send(http_request())
        exc_type, when = seen.wait(1, timeout=10)[0]
        assert exc_type is skirr.ClientDisconnected
        assert_fired(when - progress.last("done"), "stalled connection closed")
        r = c.response(allow_incomplete=True)
        assert r.status == 200 and not r.complete
        assert srv.errors() == []


@pytest.mark.rule("skirr-timeout-write-progress")
def test_stalled_reader_of_final_body_disconnected(serve):
    """The same for a response sent as one final 16 MiB event (its send returns at once): the
    peer accepts nothing, so the connection is closed after timeout_write and the rest of the
    body is dropped; reading afterwards gives an incomplete message and then EOF."""
    size = 16 * MIB
    done = Recorder()

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"w" * size})
        done.put("sent")

    with serve(app, timeout_write=T) as srv:
        c = small_client(srv, rcvbuf=32 * KIB, timeout=10.0)
        c.send(http_request())
        assert done.wait(1) == ["sent"]
        time.sleep(LATE + 0.2)
        r = c.response(allow_incomplete=True)
        assert (r.status, r.get(b"content-length")) == (200, str(size).encode())
        assert not r.complete and len(r.body) < size
        assert c.eof


# -- input that arrived while the loop was blocked ------------------------------------------------


@pytest.mark.rule("skirr-timeout-ready-input-first")
def test_body_byte_sent_during_a_blocked_loop_is_read_before_the_body_deadline(serve):
    """Another request blocks the loop 2.5 s (time.sleep); the last body byte arrives 1.3 s into
    the block, within timeout_request_body (2 s), and the deadline has passed when the loop wakes:
    the byte is read first, so the request is answered 200, never 408."""
    app = BlockedLoop()
    with serve(app, timeout_request_body=app.TIMEOUT) as srv:
        c = srv.connect()
        c.send(b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\na")
        app.start(srv)
        app.at(app.SEND)
        c.send(b"b")
        r = c.response()
        assert (r.status, r.body, r.get(b"connection")) == (200, b"ab", None)
        assert app.finish() == (200, b"/block")
        r = c.request(http_request("GET", "/next"))
        assert (r.status, r.body) == (200, b"/next")


@pytest.mark.rule("skirr-timeout-ready-input-first")
def test_request_sent_during_a_blocked_loop_is_read_before_the_keep_alive_deadline(serve):
    """An idle persistent connection sends its next request (a POST: not safe to retry) 1.3 s
    into a 2.5 s block, within timeout_keep_alive (2 s) of its last response: the request is read
    before the keep-alive deadline expires, so it is answered, not lost to a close or a reset."""
    app = BlockedLoop()
    with serve(app, timeout_keep_alive=app.TIMEOUT) as srv:
        c = srv.connect()
        r = c.request(http_request("GET", "/first"))
        assert (r.status, r.body) == (200, b"/first")
        app.start(srv)
        app.at(app.SEND)
        c.send(b"POST /late HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        r = c.response()
        assert (r.status, r.body, r.get(b"connection")) == (200, b"abc", None)
        assert app.finish() == (200, b"/block")
