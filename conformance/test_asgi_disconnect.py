"""Client disconnects (ASGI www 2.5 "Disconnect - receive event" and "Disconnected Client - send
exception"; DESIGN "Disconnects"): receive() returns http.disconnect; send() raises
skirr.ClientDisconnected (an OSError subclass), which the server does not log as an application
failure; an OSError the application raises itself is logged.
"""
import asyncio
import threading
import time

import pytest

from conftest import Recorder, http_request, record_text


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
