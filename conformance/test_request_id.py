"""--request-id (issue 13): X-Request-ID kept or made, seen by the app, sent back, in the access
log; traceparent untouched. Over real sockets on both loops."""
from __future__ import annotations

import logging
import re

import pytest

from conftest import http_request
from test_access_log import AccessCapture

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def ask(srv, headers):
    c = srv.connect()
    r = c.request(http_request("GET", "/", headers=[("Host", "x"), *headers]))
    c.close()
    return r


@pytest.mark.rule("skirr-request-id")
def test_kept_made_and_replaced(serve, echo_app):
    with serve(echo_app, request_id=True) as srv:
        kept = ask(srv, [("X-Request-ID", "abc-123"), ("traceparent", TRACEPARENT)])
        made = ask(srv, [])
        bad = ask(srv, [("X-Request-ID", "has space"), ("X-Request-ID", "x" * 201),
                        ("X-Request-ID", "\"q\"")])
        calls = echo_app.calls.wait(3)
    seen = [[(n, v) for n, v in c["scope"]["headers"] if n in (b"x-request-id", b"traceparent")]
            for c in calls]
    assert kept.get(b"x-request-id") == b"abc-123"
    assert seen[0] == [(b"x-request-id", b"abc-123"), (b"traceparent", TRACEPARENT.encode())]
    new = made.get(b"x-request-id")
    assert re.fullmatch(rb"[0-9a-f]{32}", new) and seen[1] == [(b"x-request-id", new)]
    new_bad = bad.get(b"x-request-id")
    assert re.fullmatch(rb"[0-9a-f]{32}", new_bad) and seen[2] == [(b"x-request-id", new_bad)]
    assert new != new_bad


@pytest.mark.rule("skirr-request-id")
def test_app_own_id_wins_and_off_by_default(serve):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"X-Request-ID", b"mine")]})
        await send({"type": "http.response.body", "body": b""})

    with serve(app, request_id=True) as srv:
        assert srv.get("/").get_all(b"x-request-id") == [b"mine"]
    with serve(app) as srv:  # off: nothing added, nothing changed
        r = ask(srv, [("X-Request-ID", "in")])
        assert r.get_all(b"x-request-id") == [b"mine"]


@pytest.mark.rule("skirr-request-id")
def test_access_log_shows_it(serve, echo_app):
    cap = AccessCapture()
    logging.getLogger("skirr.access").addHandler(cap)
    try:
        with serve(echo_app, request_id=True, access_log_format="%(r)s %({x-request-id}i)s") as srv:
            ask(srv, [("X-Request-ID", "rid-9")])
            lines = cap.wait(1)
    finally:
        logging.getLogger("skirr.access").removeHandler(cap)
    assert lines == ["GET / HTTP/1.1 rid-9"]
