"""Request content (RFC 9112 §6, §7.1) delivered as ASGI "http.request" events, and
Expect: 100-continue (RFC 9110 §10.1.1).
"""
import asyncio
import socket
import threading
import time

import pytest

from conftest import Recorder, http_request


def check_request_events(events, body: bytes):
    """ASGI: every event is http.request with bytes body; more_body True on all but the last."""
    assert events, "no events"
    for ev in events:
        assert ev["type"] == "http.request", ev
        assert type(ev["body"]) is bytes, ev
    assert [ev.get("more_body", False) for ev in events] == [True] * (len(events) - 1) + [False]
    assert b"".join(ev["body"] for ev in events) == body


@pytest.mark.rule("ASGI-www-request-no-content")
def test_no_body_single_event(serve, echo_app):
    """A GET without content: exactly one event, empty body, more_body False."""
    with serve(echo_app) as srv:
        c = srv.connect()
        assert c.request(http_request("GET", "/")).status == 200
        assert echo_app.calls.wait(1)[0]["events"] == [
            {"type": "http.request", "body": b"", "more_body": False}
        ]


@pytest.mark.rule("ASGI-www-request-no-content")
def test_content_length_zero(serve, echo_app):
    with serve(echo_app) as srv:
        c = srv.connect()
        r = c.request(http_request("POST", "/", [("Host", "x"), ("Content-Length", "0")]))
        assert (r.status, r.body) == (200, b"")
        check_request_events(echo_app.calls.wait(1)[0]["events"], b"")


@pytest.mark.rule("ASGI-www-request-body-events")
@pytest.mark.parametrize("size", [1, 5, 65536, 1024 * 1024 + 7])
def test_content_length_body(serve, echo_app, size):
    body = bytes(i % 251 for i in range(size))
    with serve(echo_app) as srv:
        c = srv.connect()
        r = c.request(http_request("POST", "/", body=body))
        assert r.status == 200
        assert r.body == body
        check_request_events(echo_app.calls.wait(1)[0]["events"], body)


@pytest.mark.rule("ASGI-www-request-body-events")
def test_content_length_body_in_pieces(serve, echo_app):
    """Head and content arrive in separate segments, the content in several."""
    with serve(echo_app) as srv:
        c = srv.connect()
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n")
        for piece in (b"hel", b"lo ", b"world"):
            time.sleep(0.05)
            c.send(piece)
        r = c.response()
        assert (r.status, r.body) == (200, b"hello world")
        check_request_events(echo_app.calls.wait(1)[0]["events"], b"hello world")


@pytest.mark.rule(
    "ASGI-www-request-body-events",
    "RFC9112-7.1.1-chunk-ext-ignored",
    "RFC9112-7.1.2-trailers-dropped",
)
def test_chunked_body_with_extensions_and_trailers(serve, echo_app):
    """Chunk extensions are ignored, trailer fields accepted (RFC 9112 §7.1.1, §7.1.2)."""
    data = (
        b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;name=value\r\nhello\r\n"
        b"1;a;b=\"q\"\r\n \r\n"
        b"A\r\n0123456789\r\n"
        b"a\r\nabcdefghij\r\n"
        b"0\r\nX-Trailer: one\r\nX-Other: two\r\n\r\n"
    )
    with serve(echo_app) as srv:
        c = srv.connect()
        r = c.request(data)
        assert (r.status, r.body) == (200, b"hello 0123456789abcdefghij")
        check_request_events(echo_app.calls.wait(1)[0]["events"], b"hello 0123456789abcdefghij")
        # The connection stays in sync after the trailers.
        assert c.request(http_request("GET", "/next")).get(b"x-target") == b"/next"


@pytest.mark.rule("ASGI-www-request-body-events", "RFC9112-6.3-framing-split-invariant")
def test_chunked_body_split_everywhere(serve, echo_app):
    """The same chunked request sent one byte per write (with a short pause now and then)."""
    data = (
        b"POST /s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n4;x=y\r\ndefg\r\n0\r\n\r\n"
    )
    with serve(echo_app) as srv:
        c = srv.connect()
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(data)):
            c.send(data[i:i + 1])
            if i % 8 == 0:
                time.sleep(0.005)
        r = c.response()
        assert (r.status, r.body) == (200, b"abcdefg")
        check_request_events(echo_app.calls.wait(1)[0]["events"], b"abcdefg")


@pytest.mark.rule("ASGI-www-request-body-events")
def test_chunked_large_body(serve, echo_app):
    body = bytes(i % 253 for i in range(300_000))
    chunks = [body[i:i + 7000] for i in range(0, len(body), 7000)]
    data = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    data += b"".join(b"%x\r\n%s\r\n" % (len(ch), ch) for ch in chunks) + b"0\r\n\r\n"
    with serve(echo_app) as srv:
        c = srv.connect()
        r = c.request(data)
        assert r.status == 200 and r.body == body
        check_request_events(echo_app.calls.wait(1)[0]["events"], body)


@pytest.mark.rule("ASGI-www-receive-after-response")
def test_receive_after_response_is_disconnect(serve):
    """After the body is complete and the response sent, receive() gives http.disconnect
    (ASGI www: "Disconnect - receive event"), even though the connection stays open."""
    seen = Recorder()

    async def app(scope, receive, send):
        events = []
        while True:
            msg = await receive()
            events.append(msg)
            if not msg.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})
        try:
            after = await asyncio.wait_for(receive(), 3.0)
        except asyncio.TimeoutError:
            after = "receive() did not return within 3 s"
        seen.put((events, after))

    with serve(app) as srv:
        c = srv.connect()
        r = c.request(http_request("POST", "/", body=b"abc"))
        assert (r.status, r.body) == (200, b"done")
        events, after = seen.wait(1)[0]
        check_request_events(events, b"abc")
        assert after == {"type": "http.disconnect"}
        # The connection itself is still good.
        assert c.request(http_request("GET", "/")).status == 200


@pytest.mark.rule("ASGI-www-receive-after-response")
@pytest.mark.parametrize("body", [b"", b"abc"], ids=["no-content", "content"])
def test_receive_after_response_without_reading_is_disconnect(serve, body):
    """The app responds without reading the request and then calls receive(): http.disconnect,
    not the unread http.request (ASGI www: "Sent to the application if receive is called after
    a response has been sent"); the connection still serves the next request."""
    seen = Recorder()

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})
        try:
            after = await asyncio.wait_for(receive(), 3.0)
        except asyncio.TimeoutError:
            after = "receive() did not return within 3 s"
        seen.put(after)

    with serve(app) as srv:
        c = srv.connect()
        r = c.request(http_request("POST", "/", body=body))
        assert (r.status, r.body) == (200, b"done")
        assert seen.wait(1) == [{"type": "http.disconnect"}]
        assert c.request(http_request("GET", "/")).status == 200


# -- Expect: 100-continue ------------------------------------------------------------------------

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


@pytest.mark.rule("RFC9110-10.1.1-100-continue-on-first-receive")
def test_100_continue_sent_when_app_first_receives(serve):
    """The interim 100 goes out only when the app first awaits receive() (issue 2 §3): nothing
    arrives while the app sleeps, then exactly "HTTP/1.1 100 Continue\\r\\n\\r\\n"; the client then
    sends the content and gets the final response."""
    entered = threading.Event()
    receiving = threading.Event()
    seen = Recorder()

    async def app(scope, receive, send):
        entered.set()
        await asyncio.sleep(0.5)
        receiving.set()
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        seen.put(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"got " + body})

    with serve(app) as srv:
        c = srv.connect()
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        assert entered.wait(5), "app not called"
        early = c.read_for(0.3)
        assert early == b"", f"bytes before the app awaited receive(): {early!r}"
        assert receiving.wait(5)
        assert c.read_exact(len(CONTINUE)) == CONTINUE
        c.send(b"hello")
        r = c.response("POST")
        assert (r.status, r.body) == (200, b"got hello")
        assert r.informational == []
        assert seen.wait(1) == [b"hello"]
        # Only one 100 per request; the connection goes on.
        r2 = c.request(http_request("GET", "/"))
        assert r2.status == 200 and r2.informational == []


@pytest.mark.rule("RFC9110-10.1.1-no-100-if-not-read")
def test_no_100_continue_when_app_does_not_read(serve):
    """An app that responds without reading gets no 100 sent: the first bytes are the final
    response."""
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"no thanks"})

    with serve(app) as srv:
        c = srv.connect()
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        first = c.read_exact(12)
        assert first == b"HTTP/1.1 200", first
        c.buf = first + c.buf
        r = c.response("POST")
        assert (r.status, r.body, r.informational) == (200, b"no thanks", [])


@pytest.mark.rule("RFC9110-10.1.1-no-100-for-http10")
def test_no_100_continue_for_http10(serve, echo_app):
    """Expect: 100-continue from an HTTP/1.0 client is ignored (RFC 9110 §10.1.1)."""
    with serve(echo_app) as srv:
        c = srv.connect()
        c.send(b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello")
        r = c.response("POST")
        assert (r.status, r.body, r.informational) == (200, b"hello", [])


@pytest.mark.rule("RFC9110-10.1.1-100-continue-body-already-sent")
def test_100_continue_body_already_sent(serve, echo_app):
    """The client sent the content without waiting: the app reads it; a 100 before the final
    response is allowed, the final response carries the body."""
    with serve(echo_app) as srv:
        c = srv.connect()
        r = c.request(
            b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello",
            "POST",
        )
        assert (r.status, r.body) == (200, b"hello")
        assert [i.status_code for i in r.informational] in ([], [100])
