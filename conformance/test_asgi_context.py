"""Where the application runs (issue 2 §6, DESIGN "ASGI glue"): each request is a task of the
running loop (the loop the Config names), in its own contextvars context.
"""
import asyncio
import contextvars
import re
import sys

import pytest

from conftest import Recorder, http_request

REQUEST_VAR = contextvars.ContextVar("REQUEST_VAR", default=None)


def ctx_app(seen: Recorder):
    async def app(scope, receive, send):
        loop = asyncio.get_running_loop()
        seen.put(
            {
                "path": scope["path"],
                "var": REQUEST_VAR.get(),
                "task": asyncio.current_task(),
                "loop": type(loop).__module__ + "." + type(loop).__qualname__,
            }
        )
        REQUEST_VAR.set(scope["path"])
        await receive()
        await asyncio.sleep(0)
        assert REQUEST_VAR.get() == scope["path"]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(REQUEST_VAR.get()).encode()})

    return app


@pytest.mark.rule("skirr-asgi-fresh-context")
def test_context_var_not_shared_between_requests(serve):
    """A ContextVar set by request 1 is invisible to the next request on the same connection, to
    pipelined requests and to other connections."""
    seen = Recorder()
    with serve(ctx_app(seen)) as srv:
        c = srv.connect()
        assert c.request(http_request("GET", "/1")).body == b"/1"
        assert c.request(http_request("GET", "/2")).body == b"/2"
        c.send(http_request("GET", "/3") + http_request("GET", "/4"))
        assert [c.response().body, c.response().body] == [b"/3", b"/4"]
        assert srv.get("/5").body == b"/5"
        records = seen.wait(5)
        assert [(x["path"], x["var"]) for x in records] == [
            ("/1", None), ("/2", None), ("/3", None), ("/4", None), ("/5", None)
        ]


@pytest.mark.rule("skirr-asgi-task-per-request")
def test_app_runs_in_a_task_per_request(serve):
    seen = Recorder()
    with serve(ctx_app(seen)) as srv:
        c = srv.connect()
        c.send(http_request("GET", "/a") + http_request("GET", "/b"))
        c.response(), c.response()
        a, b = seen.wait(2)
        assert a["task"] is not None and b["task"] is not None
        assert isinstance(a["task"], asyncio.Task) or hasattr(a["task"], "cancel")
        assert a["task"] is not b["task"]


@pytest.mark.rule("skirr-asgi-task-name")
def test_each_request_task_has_its_own_name(serve):
    """Keep-alive and pipelined requests: every Task's name is distinct, in the interpreter's
    format (skirr's own, counted, on 3.11; asyncio's lazy default on 3.12+)."""
    seen = Recorder()
    with serve(ctx_app(seen)) as srv:
        c = srv.connect()
        c.request(http_request("GET", "/1"))
        c.send(http_request("GET", "/2") + http_request("GET", "/3"))
        c.response(), c.response()
        srv.get("/4")
        names = [x["task"].get_name() for x in seen.wait(4)]
    pattern = r"skirr-request-(\d+)" if sys.version_info < (3, 12) else r"Task-(\d+)"
    numbers = [int(re.fullmatch(pattern, n).group(1)) for n in names]
    assert numbers == sorted(set(numbers)), names  # distinct and increasing in request order


@pytest.mark.rule("skirr-asgi-configured-loop")
def test_app_runs_on_the_configured_loop(serve, loop_name):
    seen = Recorder()
    with serve(ctx_app(seen)) as srv:
        srv.get("/")
        loop = seen.wait(1)[0]["loop"]
        if loop_name == "uvloop":
            assert loop.startswith("uvloop"), loop
        else:
            assert loop.startswith("asyncio"), loop
