"""Persistent connections (RFC 9112 §9.3): HTTP/1.1 is persistent by default, "Connection: close"
ends it, HTTP/1.0 is persistent only with "Connection: keep-alive"; idle connections close after
timeout_keep_alive.
"""
import time

import pytest

from conftest import http_request


@pytest.mark.rule("RFC9112-9.3-http11-persistent")
def test_http11_two_requests_one_connection(serve, echo_app):
    with serve(echo_app) as srv:
        c = srv.connect()
        r1 = c.request(http_request("POST", "/1", body=b"first"))
        r2 = c.request(http_request("POST", "/2", body=b"second"))
        assert (r1.status, r1.get(b"x-target"), r1.body) == (200, b"/1", b"first")
        assert (r2.status, r2.get(b"x-target"), r2.body) == (200, b"/2", b"second")
        for r in (r1, r2):
            assert r.get(b"connection") in (None, b"keep-alive")
        calls = echo_app.calls.wait(2)
        assert calls[0]["scope"]["client"] == calls[1]["scope"]["client"] == c.sock.getsockname()


@pytest.mark.rule("RFC9112-9.6-connection-close")
def test_http11_connection_close(serve, echo_app):
    """A request with "Connection: close": the response says close and the server closes."""
    with serve(echo_app) as srv:
        c = srv.connect()
        r = c.request(http_request("GET", "/", [("Host", "x"), ("Connection", "close")]))
        assert r.status == 200
        assert r.get(b"connection") == b"close"
        c.expect_eof()


@pytest.mark.rule("RFC9110-7.6.1-connection-tokens")
def test_http11_connection_close_token_in_list(serve, echo_app):
    """Connection is a token list, case-insensitive (RFC 9110 §7.6.1)."""
    with serve(echo_app) as srv:
        c = srv.connect()
        r = c.request(http_request("GET", "/", [("Host", "x"), ("Connection", "foo, CLOSE")]))
        assert r.status == 200
        assert r.get(b"connection") == b"close"
        c.expect_eof()


@pytest.mark.rule("RFC9112-9.3-http10-close-by-default")
def test_http10_closes_by_default(serve, echo_app):
    with serve(echo_app) as srv:
        c = srv.connect()
        r = c.request(b"GET /a HTTP/1.0\r\n\r\n")
        assert r.status == 200
        assert r.get(b"connection") in (None, b"close")
        c.expect_eof()


@pytest.mark.rule("RFC9112-9.3-http10-keep-alive")
def test_http10_keep_alive(serve, echo_app):
    """HTTP/1.0 with "Connection: keep-alive": the response says keep-alive, is framed by a
    content-length, and the connection carries a second request."""
    with serve(echo_app) as srv:
        c = srv.connect()
        r1 = c.request(b"POST /a HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nabc")
        assert r1.status == 200
        assert r1.get(b"connection") == b"keep-alive"
        assert r1.get(b"content-length") == b"3"
        assert r1.get(b"transfer-encoding") is None
        assert r1.body == b"abc"
        r2 = c.request(b"GET /b HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        assert r2.status == 200
        assert r2.get(b"x-target") == b"/b"
        assert r2.get(b"connection") == b"keep-alive"
        r3 = c.request(b"GET /c HTTP/1.0\r\n\r\n")
        assert r3.status == 200
        c.expect_eof()
        assert [x["scope"]["path"] for x in echo_app.calls.wait(3)] == ["/a", "/b", "/c"]


@pytest.mark.rule("skirr-keepalive-idle-timeout")
def test_idle_keep_alive_timeout(serve, echo_app):
    """An idle persistent connection is closed after timeout_keep_alive (uvicorn's meaning)."""
    with serve(echo_app, timeout_keep_alive=1.0) as srv:
        c = srv.connect()
        assert c.request(http_request("GET", "/")).status == 200
        t0 = time.monotonic()
        c.expect_eof(timeout=5.0)
        elapsed = time.monotonic() - t0
        assert 0.5 <= elapsed <= 4.0, f"idle connection closed after {elapsed:.2f}s, timeout 1 s"


@pytest.mark.rule("skirr-keepalive-not-while-busy")
def test_keep_alive_not_closed_while_busy(serve):
    """The keep-alive timer does not run while a request is in progress (app slower than it)."""
    import asyncio

    async def app(scope, receive, send):
        await receive()
        await asyncio.sleep(1.5)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"slow"})

    with serve(app, timeout_keep_alive=0.5) as srv:
        c = srv.connect()
        r = c.request(http_request("GET", "/"))
        assert (r.status, r.body) == (200, b"slow")


@pytest.mark.rule("RFC9112-9.6-nothing-after-close")
def test_request_after_connection_close_is_not_served(serve, echo_app):
    """A request pipelined after one with "Connection: close" is never handed to the app
    (RFC 9112 §9.6: the server closes after the response to the close request)."""
    with serve(echo_app) as srv:
        c = srv.connect()
        c.send(
            http_request("GET", "/first", [("Host", "x"), ("Connection", "close")])
            + http_request("GET", "/second")
        )
        r = c.response()
        assert (r.status, r.get(b"x-target"), r.get(b"connection")) == (200, b"/first", b"close")
        c.expect_eof()
        assert [x["scope"]["path"] for x in echo_app.calls.wait(1)] == ["/first"]
        assert len(echo_app.calls.items) == 1


CLOSE_WINS = [
    (b"1.0", [b"Connection: keep-alive, close"]),
    (b"1.0", [b"Connection: close, keep-alive"]),
    (b"1.0", [b"Connection: keep-alive", b"Connection: close"]),
    (b"1.0", [b"Connection: CLOSE", b"Connection: Keep-Alive"]),
    (b"1.0", [b"Connection: ,keep-alive ,, Close ,"]),
    (b"1.1", [b"Connection: keep-alive, close"]),
    (b"1.1", [b"Connection: keep-alive", b"Connection: close"]),
    (b"1.1", [b"Connection: upgrade", b"Connection: cLoSe"]),
]


@pytest.mark.rule("RFC9112-9.6-close-wins")
@pytest.mark.parametrize("version, fields", CLOSE_WINS,
                         ids=[f"{v.decode()}-{i}" for i, (v, _) in enumerate(CLOSE_WINS)])
def test_close_token_wins_and_nothing_follows(serve, echo_app, version, fields):
    """Issue 11 item 2: a 'close' token anywhere in the Connection field-lines, with keep-alive
    before or after it: one response saying close, then EOF; the pipelined /2 never reaches the
    app (RFC 9112 §9.6: the server MUST NOT process further requests)."""
    head = b"GET /1 HTTP/" + version + b"\r\nHost: x\r\n" + b"".join(f + b"\r\n" for f in fields)
    with serve(echo_app) as srv:
        c = srv.connect()
        c.send(head + b"\r\n" + b"GET /2 HTTP/1.1\r\nHost: x\r\n\r\n")
        r = c.response()
        assert (r.status, r.get(b"x-target"), r.get(b"connection")) == (200, b"/1", b"close")
        c.expect_eof()
        assert [x["scope"]["path"] for x in echo_app.calls.items] == ["/1"]


@pytest.mark.rule("RFC9112-9.6-close-wins")
@pytest.mark.parametrize(
    "version, fields, persists",
    [(b"1.0", [b"Connection: Keep-Alive"], True), (b"1.0", [b"Connection: foo, keep-alive"], True),
     (b"1.0", [b"Connection: foo", b"Connection: keep-alive"], True), (b"1.0", [], False),
     (b"1.0", [b"Connection: keep-alive-x"], False), (b"1.1", [], True),
     (b"1.1", [b"Connection: keep-alive"], True), (b"1.1", [b"Connection: closed"], True)],
    ids=["1.0-ka", "1.0-list", "1.0-two-lines", "1.0-none", "1.0-not-a-token", "1.1-none",
         "1.1-ka", "1.1-closed-is-not-close"],
)
def test_persistence_from_the_tokens(serve, echo_app, version, fields, persists):
    head = b"GET /1 HTTP/" + version + b"\r\nHost: x\r\n" + b"".join(f + b"\r\n" for f in fields)
    with serve(echo_app) as srv:
        c = srv.connect()
        r = c.request(head + b"\r\n")
        assert r.status == 200
        if persists:
            assert r.get(b"connection") == (b"keep-alive" if version == b"1.0" else None)
            assert c.request(http_request("GET", "/2")).get(b"x-target") == b"/2"
        else:
            assert r.get(b"connection") == b"close"
            c.expect_eof()
