"""Persistent connections (RFC 9112 §9.3): HTTP/1.1 is persistent by default, "Connection: close"
ends it, HTTP/1.0 is persistent only with "Connection: keep-alive"; idle connections close after
timeout_keep_alive.
"""
import socket
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


# -- how the server closes after the client's own "close" ----------------------------------------

TCP_CLOSE, TCP_CLOSE_WAIT = 7, 8  # tcpi_state values (linux/tcp_states.h)


def tcp_state(sock) -> int:
    """The kernel's TCP state of sock (struct tcp_info's first byte)."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]


def server_still_reads(c, window: float = 0.3) -> bool:
    """After the server's FIN: sends one byte, then tells whether the server's socket still reads
    (it lingers: the byte is taken and the client stays in CLOSE_WAIT for the whole window) or is
    closed (the kernel answers the byte with a reset: the client's socket goes to CLOSE)."""
    assert tcp_state(c.sock) == TCP_CLOSE_WAIT
    c.sock.send(b"x")
    deadline = time.monotonic() + window
    while time.monotonic() < deadline:
        if tcp_state(c.sock) == TCP_CLOSE:
            return False
        time.sleep(0.005)
    assert tcp_state(c.sock) == TCP_CLOSE_WAIT
    return True


async def answer_unread(scope, receive, send):
    """Answers 200 "done" without reading the request's content."""
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"done"})


async def answer_close(scope, receive, send):
    """Reads the whole request, then answers 200 "bye" with its own connection: close."""
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"connection", b"close")]})
    await send({"type": "http.response.body", "body": b"bye"})


LAST_REQUESTS = {
    "1.1-close": b"GET /1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    "1.0": b"GET /1 HTTP/1.0\r\nHost: x\r\n\r\n",
    "1.1-close-with-content": b"POST /1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                             b"Content-Length: 5\r\n\r\nhello",
    "1.1-close-chunked": b"POST /1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
}


@pytest.mark.rule("skirr-close-at-once-after-last")
@pytest.mark.parametrize("name", list(LAST_REQUESTS))
def test_client_close_read_whole_closes_at_once(serve, echo_app, name):
    """The client's own close on a request read whole: the response whole, then the server's
    socket is closed (a later byte is reset), not half-closed and lingering."""
    with serve(echo_app) as srv:
        c = srv.connect()
        c.send(LAST_REQUESTS[name])
        r = c.response()
        body = b"hello" if name.endswith(("content", "chunked")) else b""
        assert (r.status, r.get(b"x-target"), r.get(b"connection"), r.body) == (
            200, b"/1", b"close", body)
        c.expect_eof()
        assert not c.reset
        assert server_still_reads(c) is False
        assert [x["scope"]["path"] for x in echo_app.calls.wait(1)] == ["/1"]


@pytest.mark.rule("skirr-close-at-once-after-last")
def test_request_pipelined_behind_close_lingers(serve, echo_app):
    """A request sent behind the close request: the server half-closes and reads what follows,
    so the client's later bytes are dropped, never answered with a reset."""
    with serve(echo_app) as srv:
        c = srv.connect()
        c.send(http_request("GET", "/1", [("Host", "x"), ("Connection", "close")])
               + http_request("GET", "/2"))
        r = c.response()
        assert (r.status, r.get(b"x-target"), r.get(b"connection")) == (200, b"/1", b"close")
        c.expect_eof()
        assert not c.reset
        assert server_still_reads(c) is True
        assert [x["scope"]["path"] for x in echo_app.calls.wait(1)] == ["/1"]


@pytest.mark.rule("skirr-close-at-once-after-last")
def test_content_left_unread_lingers(serve):
    """The client's close, but the app answered before the content came: the server lingers,
    so the rest of the content arriving after the response gets no reset."""
    with serve(answer_unread) as srv:
        c = srv.connect()
        c.send(b"POST /1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 10\r\n\r\n")
        r = c.response(allow_incomplete=False)
        assert (r.status, r.get(b"connection"), r.body) == (200, b"close", b"done")
        c.expect_eof()
        assert not c.reset
        assert server_still_reads(c) is True


@pytest.mark.rule("skirr-close-at-once-after-last")
def test_app_close_on_keep_alive_request_lingers(serve):
    """The app's own connection: close on a request that asked for nothing: the client may
    already be sending its next request, so the server lingers."""
    with serve(answer_close) as srv:
        c = srv.connect()
        c.send(http_request("GET", "/1"))
        r = c.response()
        assert (r.status, r.get_all(b"connection"), r.body) == (200, [b"close"], b"bye")
        c.expect_eof()
        assert not c.reset
        assert server_still_reads(c) is True


@pytest.mark.rule("skirr-close-at-once-after-last")
def test_stray_crlf_after_close_request_does_not_cut_the_response(serve):
    """A client sends a stray CRLF after its close request (RFC 9112 §2.2: a server should ignore
    one) before reading a response larger than the socket buffers: the response arrives whole,
    then the server's FIN, no reset. The server may not close at once while any of the response
    is unacknowledged (the late CRLF would reset the connection and drop what was still queued:
    128 KB of 1 MB arrived, found by the attack review)."""
    body = bytes(range(256)) * 4096  # 1 MiB

    async def big(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    with serve(big) as srv:
        c = srv.connect()
        c.send(b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        time.sleep(0.05)
        c.send(b"\r\n")
        raw = c.read_until_close(timeout=10)
        assert not c.reset
        head, _, got = raw.partition(b"\r\n\r\n")
        assert head.split(b"\r\n")[0] == b"HTTP/1.1 200 OK" and b"connection: close" in head
        assert len(got) == len(body) and got == body
