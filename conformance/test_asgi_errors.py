"""Application failures (DESIGN "Errors"; issue 2 §4): before http.response.start -> 500; after it
-> the connection is closed without a terminating chunk or a complete message; returning without
responding -> 500. Failures are logged at ERROR on ``skirr.error``; the server keeps serving.
"""
import time

import pytest

from conftest import Recorder, http_request, record_text


class Boom(Exception):
    pass


def logged(srv, marker: str) -> list:
    return [r for r in srv.errors() if marker in record_text(r)]


@pytest.mark.rule("skirr-errors-500-before-start", "skirr-errors-logged")
def test_exception_before_start_is_500_and_logged(serve):
    async def app(scope, receive, send):
        raise Boom("boom-before-start-3f9")

    with serve(app) as srv:
        c = srv.connect()
        r = c.request(http_request())
        assert r.status == 500
        assert r.body != b""
        assert r.get_all(b"content-length") == [str(len(r.body)).encode()]
        assert (r.get(b"content-type") or b"").startswith(b"text/plain"), r.headers
        assert srv.get().status == 500  # a fresh connection is served (and fails) alike
    assert logged(srv, "boom-before-start-3f9"), [record_text(x) for x in srv.errors()]


@pytest.mark.rule("skirr-errors-500-before-start")
def test_exception_after_reading_body_is_500(serve):
    async def app(scope, receive, send):
        while (await receive()).get("more_body"):
            pass
        raise Boom("boom-after-body")

    with serve(app) as srv:
        c = srv.connect()
        r = c.request(http_request("POST", body=b"payload"))
        assert r.status == 500 and r.body != b""


@pytest.mark.rule("skirr-errors-close-after-start", "skirr-errors-logged")
def test_exception_mid_stream_no_terminating_chunk(serve):
    """Chunked response, one chunk out, then the app raises: the wire carries the head and
    exactly that chunk, then the connection closes (no 0\\r\\n\\r\\n)."""
    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        raise Boom("boom-mid-stream")

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        raw = c.read_until_close()
        head, sep, rest = raw.partition(b"\r\n\r\n")
        assert sep and head.startswith(b"HTTP/1.1 200 "), raw
        assert b"\r\ntransfer-encoding: chunked" in head.lower()
        assert rest == b"4\r\npart\r\n"
    assert logged(srv, "boom-mid-stream")


@pytest.mark.rule("skirr-errors-close-after-start")
def test_exception_mid_content_length_body_incomplete(serve):
    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"10")]})
        await send({"type": "http.response.body", "body": b"12345", "more_body": True})
        raise Boom("boom-mid-length")

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        r = c.response(allow_incomplete=True)
        assert r.status == 200 and not r.complete and r.body == b"12345"


@pytest.mark.rule("skirr-errors-close-after-start")
def test_exception_after_start_before_body(serve):
    """Start accepted, no body yet, then a failure: never a complete 200 (a 500 is allowed
    because no byte of the 200 left)."""
    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise Boom("boom-after-start")

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        r = c.response(allow_incomplete=True)
        if r.complete:
            assert r.status == 500, r.raw


@pytest.mark.rule("skirr-errors-return-without-response")
def test_return_without_response_is_500(serve):
    seen = Recorder()

    async def app(scope, receive, send):
        seen.put(scope["path"])
        await receive()

    with serve(app) as srv:
        c = srv.connect()
        r = c.request(http_request("GET", "/silent"))
        assert r.status == 500 and r.body != b""
        assert seen.wait(1) == ["/silent"]


@pytest.mark.rule("skirr-errors-return-unfinished")
@pytest.mark.parametrize("framing", ["chunked", "content-length"])
def test_return_after_start_without_final_body(serve, framing):
    """The app returns with the response unfinished: connection closed, message incomplete."""
    headers = [(b"content-length", b"10")] if framing == "content-length" else []

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"abc", "more_body": True})

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        raw = c.read_until_close()
        assert b"\r\n0\r\n\r\n" not in raw.partition(b"\r\n\r\n")[2]
        c.buf, c.eof = raw, True
        r = c.response(allow_incomplete=True)
        assert r.status == 200 and not r.complete and r.body == b"abc"


@pytest.mark.rule("skirr-errors-return-unfinished")
def test_return_after_start_only(serve):
    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        r = c.response(allow_incomplete=True)
        if r.complete:
            assert r.status == 500, r.raw


@pytest.mark.rule("skirr-errors-server-survives")
def test_server_survives_failures(serve):
    """After a burst of failing requests on several connections, a good one is served."""
    async def app(scope, receive, send):
        await receive()
        if scope["path"] == "/ok":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        if scope["path"] == "/mid":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"x", "more_body": True})
        raise Boom("burst")

    with serve(app) as srv:
        for i in range(10):
            c = srv.connect()
            c.send(http_request("GET", "/mid" if i % 2 else "/fail"))
            c.read_until_close() if i % 2 else c.response()
            c.close()
        r = srv.get("/ok")
        assert (r.status, r.body) == (200, b"ok")


@pytest.mark.rule("skirr-errors-app-cancelled")
def test_cancelled_before_start_is_500_not_logged(serve):
    import asyncio

    tasks = []

    async def app(scope, receive, send):
        if scope["path"] == "/check":  # a later request reports how the first task ended
            state = b"cancelled" if tasks[0].cancelled() else b"not cancelled"
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": state})
            return
        tasks.append(asyncio.current_task())
        asyncio.current_task().cancel()
        await asyncio.sleep(0)

    with serve(app) as srv:
        r = srv.get("/")
        assert r.status == 500 and r.body != b""
        r = srv.get("/check")
        assert (r.status, r.body) == (200, b"cancelled")
    assert srv.errors() == [], [record_text(x) for x in srv.errors()]


@pytest.mark.rule("skirr-errors-app-cancelled")
@pytest.mark.parametrize("where", ["before-start", "mid-stream"])
def test_cancelled_error_raised_by_the_app_itself_is_logged(serve, where):
    """An app that raises CancelledError itself (no one cancelled its Task: an inner task's
    cancellation let through) failed like with any exception: 500 or a close, and logged."""
    import asyncio

    async def app(scope, receive, send):
        if where == "mid-stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"part", "more_body": True})
        raise asyncio.CancelledError("app-raised-cancel-5d1")

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        if where == "mid-stream":
            raw = c.read_until_close()
            assert raw.endswith(b"4\r\npart\r\n"), raw
        else:
            assert c.response().status == 500
        deadline = time.monotonic() + 3
        while not srv.errors() and time.monotonic() < deadline:
            time.sleep(0.02)
        texts = [record_text(x) for x in srv.errors()]
    assert len(texts) == 1 and "Exception in ASGI application" in texts[0], texts
    assert "app-raised-cancel-5d1" in texts[0], texts


@pytest.mark.rule("skirr-errors-app-cancelled")
def test_cancelled_mid_stream_closes_without_completing(serve):
    import asyncio

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        asyncio.current_task().cancel()
        await asyncio.sleep(0)

    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        raw = c.read_until_close()
        head, sep, rest = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ") and rest == b"4\r\npart\r\n", raw
    assert srv.errors() == [], [record_text(x) for x in srv.errors()]


class AwaitableApp:
    """An ASGI app whose call returns an object with __await__, not a coroutine."""

    class _Call:
        def __init__(self, send):
            self.send = send

        def __await__(self):
            yield from self.send({"type": "http.response.start", "status": 200, "headers": []}).__await__()
            yield from self.send({"type": "http.response.body", "body": b"awaited"}).__await__()

    def __call__(self, scope, receive, send):
        return self._Call(send)


@pytest.mark.rule("skirr-asgi-awaitable-app")
def test_app_returning_an_awaitable_is_served(serve):
    with serve(AwaitableApp()) as srv:
        r = srv.get("/")
        assert (r.status, r.body) == (200, b"awaited")


@pytest.mark.rule("skirr-asgi-awaitable-app", "skirr-errors-logged")
def test_app_returning_a_non_awaitable_is_500_and_logged(serve):
    def app(scope, receive, send):
        return 42

    with serve(app) as srv:
        assert srv.get("/").status == 500
    assert [r for r in srv.errors() if "not awaitable" in record_text(r)], [
        record_text(x) for x in srv.errors()
    ]


@pytest.mark.rule("skirr-errors-server-survives")
@pytest.mark.parametrize("when", ["sync", "awaited"])
def test_app_driving_its_own_request_is_refused(serve, when):
    """The object asyncio's Task runs for a request (Task.get_coro()) is skirr's: an app that
    steps, throws into or closes it from inside its own step, in the call's synchronous part or
    after an await, gets ValueError ("coroutine already executing", as a running coroutine
    answers) and its response goes out whole. (Stepping it from inside freed the running
    coroutine: a crash of the worker.)"""
    import asyncio

    record = Recorder()

    def drive_self():
        session = asyncio.current_task().get_coro()
        for call in [lambda: session.send(None), lambda: session.throw(ValueError("x")),
                     lambda: session.close(), lambda: next(session)]:
            try:
                call()
            except ValueError as exc:
                record.put(str(exc))
            else:
                record.put("no exception")

    def app(scope, receive, send):
        if when == "sync":
            drive_self()

        async def rest():
            if when == "awaited":
                await asyncio.sleep(0)
                drive_self()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"still here"})

        return rest()

    with serve(app) as srv:
        r = srv.get("/")
        assert (r.status, r.body) == (200, b"still here")
        assert srv.get("/").status == 200  # and the server serves on
    assert record.wait(8) == ["coroutine already executing"] * 8
    assert srv.errors() == [], [record_text(x) for x in srv.errors()]
