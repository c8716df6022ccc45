"""Connection and request limits (spec/flow_control.toml; issue 5 item 5): --limit-concurrency
(503 with connection: close beyond it), --limit-max-requests (+ jitter: the server shuts down
gracefully, exit status 0), --limit-connections (accepting pauses; the kernel backlog holds new
connections until one closes).
"""
import asyncio
import random
import socket
import threading
import time

import pytest

from conftest import Recorder, http_request
from _ws import WS_CLOSE_1000, upgrade


def blocking_app(release: threading.Event, started: Recorder):
    """/slow waits until release is set; every other path answers at once."""

    async def app(scope, receive, send):
        await receive()
        started.put(scope["path"])
        if scope["path"] == "/slow":
            while not release.is_set():
                await asyncio.sleep(0.01)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": scope["path"].encode()})

    return app


# -- limit_concurrency ---------------------------------------------------------------------------


@pytest.mark.rule("RFC9110-15.6.4-limit-concurrency-503")
def test_over_limit_concurrency_gets_503_and_close(serve):
    """limit_concurrency=2: with two requests in flight a third gets 503 with connection: close
    (it never reaches the app) and the connection is closed; once they finish, requests are
    served again."""
    release = threading.Event()
    started = Recorder()
    with serve(blocking_app(release, started), limit_concurrency=2) as srv:
        a, b = srv.connect(), srv.connect()
        a.send(http_request("GET", "/slow"))
        b.send(http_request("GET", "/slow"))
        assert started.wait(2) == ["/slow", "/slow"]
        c = srv.connect()
        r = c.request(http_request("GET", "/third"))
        assert (r.status, r.get(b"connection"), r.body) == (503, b"close", b"Service Unavailable")
        c.expect_eof()
        assert started.items == ["/slow", "/slow"]
        release.set()
        assert a.response().body == b"/slow" and b.response().body == b"/slow"
        r = srv.get("/after")
        assert (r.status, r.body) == (200, b"/after")
        # the refused request was not counted as one in flight
        r = a.request(http_request("GET", "/again"))
        assert (r.status, r.body) == (200, b"/again")


@pytest.mark.rule("RFC9110-15.6.4-limit-concurrency-503")
def test_limit_concurrency_on_a_persistent_connection(serve):
    """A persistent connection's next request is refused the same way when the server is at
    capacity, after its earlier response was delivered intact."""
    release = threading.Event()
    started = Recorder()
    with serve(blocking_app(release, started), limit_concurrency=1) as srv:
        a = srv.connect()
        assert a.request(http_request("GET", "/one")).body == b"/one"
        b = srv.connect()
        b.send(http_request("GET", "/slow"))
        assert started.wait(2) == ["/one", "/slow"]
        r = a.request(http_request("GET", "/two"))
        assert (r.status, r.get(b"connection")) == (503, b"close")
        a.expect_eof()
        release.set()
        assert b.response().body == b"/slow"


def websocket_app(started: Recorder):
    """A WebSocket session stays open until the client closes it; HTTP answers at once."""

    async def app(scope, receive, send):
        if scope["type"] == "websocket":
            assert (await receive())["type"] == "websocket.connect"
            started.put("ws")
            await send({"type": "websocket.accept"})
            while (await receive())["type"] != "websocket.disconnect":
                pass
            started.put("ws-end")
            return
        await receive()
        started.put(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": scope["path"].encode()})

    return app


@pytest.mark.rule("skirr-limit-concurrency-websocket")
def test_open_websocket_counts_towards_limit_concurrency(serve):
    """limit_concurrency=1: an open WebSocket session holds the place, so a request and a second
    handshake get 503 with connection: close (the app sees neither); once the session closed, a
    request is served."""
    started = Recorder()
    with serve(websocket_app(started), limit_concurrency=1) as srv:
        ws = srv.connect()
        ws.send(upgrade(target="/chat"))
        assert ws.read_until(b"\r\n\r\n").startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
        assert started.wait(1) == ["ws"]
        for data in (http_request("GET", "/during"), upgrade(target="/second")):
            c = srv.connect()
            r = c.request(data)
            assert (r.status, r.get(b"connection")) == (503, b"close")
            c.expect_eof()
        ws.send(WS_CLOSE_1000)
        ws.read_until_close()
        assert started.wait(2) == ["ws", "ws-end"]
        assert srv.get("/after").status == 200
        assert started.wait(3) == ["ws", "ws-end", "/after"]


# -- limit_max_requests --------------------------------------------------------------------------


def wait_stopped(srv, timeout: float = 3.0) -> None:
    srv.thread.join(timeout)
    assert not srv.thread.is_alive(), "the server did not stop after limit_max_requests"


@pytest.mark.rule("skirr-limit-max-requests")
def test_limit_max_requests_stops_gracefully(serve, echo_app):
    """limit_max_requests=3: three requests are answered, then the server shuts down on its own
    (graceful: exit status 0) and stops listening."""
    with serve(echo_app, limit_max_requests=3) as srv:
        c = srv.connect()
        for i in range(3):
            r = c.request(http_request("GET", f"/{i}"))
            assert (r.status, r.body) == (200, b"")
        wait_stopped(srv)
        assert srv.exc is None and srv.server.exit_code == 0
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()
        assert [x["scope"]["path"] for x in echo_app.calls.items] == ["/0", "/1", "/2"]


@pytest.mark.rule("skirr-limit-max-requests")
def test_limit_max_requests_lets_the_last_request_finish(serve):
    """The request that reaches the limit is still in flight when the shutdown starts: it
    completes (with connection: close) before the server exits 0."""
    release = threading.Event()
    started = Recorder()
    with serve(blocking_app(release, started), limit_max_requests=1) as srv:
        c = srv.connect()
        c.send(http_request("GET", "/slow"))
        assert started.wait(1) == ["/slow"]
        time.sleep(0.3)  # the limit is seen; shutdown waits for the request
        assert srv.thread.is_alive()
        release.set()
        r = c.response()
        assert (r.status, r.body, r.get(b"connection")) == (200, b"/slow", b"close")
        c.expect_eof()
        c.close()  # else the server lingers up to 2 s for our FIN
        wait_stopped(srv)
        assert srv.server.exit_code == 0


@pytest.mark.rule("skirr-limit-max-requests", "skirr-close-announced-max-requests")
def test_limit_max_requests_last_response_announces_the_close(serve, echo_app):
    """limit_max_requests=2 on one keep-alive connection, the second request sent at once: the
    first response stays persistent, the second (the last this server serves) says
    'connection: close' and the connection ends after it, whatever the watcher's timing."""
    for _ in range(5):
        with serve(echo_app, limit_max_requests=2) as srv:
            c = srv.connect()
            r1 = c.request(http_request("GET", "/1"))
            r2 = c.request(http_request("GET", "/2"))
            assert (r1.status, r1.get(b"connection")) == (200, None)
            assert (r2.status, r2.get(b"connection")) == (200, b"close")
            c.expect_eof()
            c.close()
            wait_stopped(srv)
            assert srv.server.exit_code == 0


@pytest.mark.rule("skirr-limit-max-requests")
def test_limit_max_requests_jitter(serve, echo_app, monkeypatch):
    """limit_max_requests=2, jitter=3: the limit is 2 + random.randint(0, 3); with randint
    pinned to its top, the server answers exactly 5 requests (one per connection) and stops."""
    calls = []

    def top(a, b):
        calls.append((a, b))
        return b

    monkeypatch.setattr(random, "randint", top)
    with serve(echo_app, limit_max_requests=2, limit_max_requests_jitter=3) as srv:
        served = 0
        for i in range(8):
            try:
                c = srv.connect()
                r = c.request(http_request("GET", f"/{i}"))
            except (OSError, AssertionError):
                break
            assert r.status == 200
            served += 1
            time.sleep(0.2)  # longer than the 50 ms check
        wait_stopped(srv)
        assert (calls, served, srv.server.exit_code) == ([(0, 3)], 5, 0)


# -- limit_connections ---------------------------------------------------------------------------


@pytest.mark.rule("skirr-limit-connections")
def test_limit_connections_pauses_accepting(serve, echo_app):
    """limit_connections=2: a third connection completes its TCP handshake (the kernel backlog)
    but its request is not served while two are open, for longer than a timer tick; when one
    closes, the third is accepted and answered."""
    with serve(echo_app, limit_connections=2) as srv:
        a, b = srv.connect(), srv.connect()
        assert a.request(http_request("GET", "/a")).status == 200
        assert b.request(http_request("GET", "/b")).status == 200
        c = srv.connect()  # accepted by the kernel, not by skirr
        c.send(http_request("GET", "/c"))
        assert c.read_for(2.5) == b"", "a connection over limit_connections was served"
        assert [x["scope"]["path"] for x in echo_app.calls.items] == ["/a", "/b"]
        a.close()
        r = c.response()
        assert (r.status, r.get(b"x-target")) == (200, b"/c")
        assert b.request(http_request("GET", "/b2")).status == 200


@pytest.mark.rule("skirr-limit-connections")
def test_default_limit_connections_from_rlimit(serve, echo_app):
    """limit_connections=None (the default) derives the cap from the soft RLIMIT_NOFILE,
    keeping max(64, limit // 8) descriptors for the application; 0 means no cap."""
    import resource

    import skirr
    from skirr.config import default_limit_connections

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    expected = 0 if soft == resource.RLIM_INFINITY else max(1, soft - max(64, soft // 8))
    assert default_limit_connections() == expected
    assert skirr.Config(echo_app, limit_connections=0).connection_limit == 0
    assert skirr.Config(echo_app, limit_connections=7).connection_limit == 7
    with serve(echo_app) as srv:
        assert srv.config.limit_connections is None
        assert srv.config.connection_limit == expected
        assert srv.get("/").status == 200


@pytest.mark.rule("skirr-limit-max-requests")
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_cli_limit_max_requests_exits_zero(tmp_path, loop):
    """`python -m skirr basic:app --limit-max-requests 2` (with the other issue 5 flags set)
    answers two requests, logs why it stops, and exits 0 on its own."""
    from _proc import Skirr, free_port, request

    port = free_port()
    args = ["basic:app", "--port", str(port), "--loop", loop, "--lifespan", "off",
            "--limit-max-requests", "2", "--limit-max-requests-jitter", "0",
            "--limit-concurrency", "4", "--limit-connections", "8",
            "--timeout-request-head", "1", "--timeout-write", "1"]
    with Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        assert [request(port).status for _ in range(2)] == [200, 200]
        assert proc.wait(5.0) == 0
        assert "Maximum request limit of 2 exceeded" in proc.stderr


@pytest.mark.rule("skirr-limit-connections-logged")
def test_limit_connections_pause_and_resume_are_logged(serve, echo_app):
    """Issue 11 item 13: reaching limit_connections is a warning with the limit, and accepting
    again is logged at info with the count; a second pause within 5 s is not logged again."""
    import logging

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.DEBUG)
    logger = logging.getLogger("skirr.error")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        with serve(echo_app, limit_connections=2) as srv:
            a, b = srv.connect(), srv.connect()
            assert a.request(http_request("GET", "/a")).status == 200
            assert b.request(http_request("GET", "/b")).status == 200
            a.close()
            c = srv.connect()
            assert c.request(http_request("GET", "/c")).status == 200  # paused again: 2 open
            b.close()
            assert c.request(http_request("GET", "/c2")).status == 200
            time.sleep(0.3)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    lines = [(r.levelname, r.getMessage()) for r in records
             if "accepting" in r.getMessage()]
    assert lines[:2] == [
        ("WARNING", "--limit-connections 2 reached: accepting paused until a connection closes"),
        ("INFO", "accepting resumed with 1 connections open"),
    ], lines
    assert [w for w in lines[2:] if w[0] == "WARNING"] == [], lines
