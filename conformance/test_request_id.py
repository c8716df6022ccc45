"""--request-id (issue 13): X-Request-ID kept or made, seen by the app, sent back, in the access
log; traceparent untouched. Over real sockets on both loops."""
from __future__ import annotations

import logging
import re

import pytest

from _ws import WS_CLOSE_1000, ws_app, ws_upgrade
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


def ws_answer(srv, target: str, headers: bytes = b"") -> tuple[bytes, dict[bytes, list[bytes]]]:
    """The status line and fields of the answer to a handshake for target (a 101 is closed
    by the client's Close 1000 after it)."""
    c = srv.connect()
    c.send(ws_upgrade(target)[:-2] + headers + b"\r\n")
    head = c.read_until(b"\r\n\r\n")
    if head.startswith(b"HTTP/1.1 101 "):
        c.send(WS_CLOSE_1000)
    c.close()
    lines = head.split(b"\r\n")
    fields: dict[bytes, list[bytes]] = {}
    for line in lines[1:]:
        if line:
            n, v = line.split(b":", 1)
            fields.setdefault(n.strip().lower(), []).append(v.strip())
    return lines[0], fields


@pytest.mark.rule("skirr-request-id")
def test_websocket_handshake_gets_one(serve):
    """The 101 and a denial response carry the id; the websocket scope has it; the access line
    (JSON) shows it; an incoming valid id is kept (issue 36 item 5)."""
    scopes = []

    async def app(scope, receive, send):
        scopes.append([(n, v) for n, v in scope["headers"] if n == b"x-request-id"])
        await ws_app(scope, receive, send)

    cap = AccessCapture()
    logging.getLogger("skirr.access").addHandler(cap)
    try:
        with serve(app, request_id=True, access_log_format="%(s)s %({x-request-id}i)s") as srv:
            made_line, made = ws_answer(srv, "/chat")
            kept_line, kept = ws_answer(srv, "/chat", b"X-Request-ID: ws-rid-1\r\n")
            denial_line, denial = ws_answer(srv, "/denial", b"X-Request-ID: ws-rid-2\r\n")
            lines = cap.wait(3)
    finally:
        logging.getLogger("skirr.access").removeHandler(cap)
    assert made_line == kept_line == b"HTTP/1.1 101 Switching Protocols"
    assert denial_line == b"HTTP/1.1 401 Unauthorized"
    rid = made[b"x-request-id"][0]
    assert re.fullmatch(rb"[0-9a-f]{32}", rid)
    assert made[b"x-out"] == [b"o1"]  # the app's own accept headers still there
    assert kept[b"x-request-id"] == [b"ws-rid-1"]
    assert denial[b"x-request-id"] == [b"ws-rid-2"]
    assert denial[b"www-authenticate"] == [b"Bearer"]
    assert scopes == [[(b"x-request-id", rid)], [(b"x-request-id", b"ws-rid-1")],
                      [(b"x-request-id", b"ws-rid-2")]]
    assert sorted(lines) == sorted([f"101 {rid.decode()}", "101 ws-rid-1", "401 ws-rid-2"])


@pytest.mark.rule("skirr-request-id")
def test_websocket_app_own_id_wins(serve):
    async def app(scope, receive, send):
        await receive()
        await send({"type": "websocket.accept", "headers": [(b"X-Request-ID", b"mine")]})
        await receive()

    with serve(app, request_id=True) as srv:
        line, fields = ws_answer(srv, "/")
    assert line == b"HTTP/1.1 101 Switching Protocols"
    assert fields[b"x-request-id"] == [b"mine"]


@pytest.mark.rule("skirr-request-id")
def test_answers_skirr_writes_itself_carry_none(serve, echo_app):
    """skirr's own answers carry no X-Request-ID (the middleware sees only what the app sends):
    a 413 refusal before the app runs, the 500 of an app that failed before answering, the 403
    of a websocket.close before accept. The app saw the id in the last two (its scope)."""
    scopes = []

    async def app(scope, receive, send):
        scopes.append([v for n, v in scope["headers"] if n == b"x-request-id"])
        if scope["type"] == "websocket":
            await receive()
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["path"] == "/fail":
            raise RuntimeError("fails before answering")
        await echo_app(scope, receive, send)

    with serve(app, request_id=True, limit_request_body=5) as srv:
        c = srv.connect()
        too_large = c.request(http_request("POST", "/", headers=[
            ("Host", "x"), ("X-Request-ID", "rid-413"), ("Content-Length", "6")], body=b"123456"))
        c.close()
        failed_path = srv.connect()
        failed = failed_path.request(http_request("GET", "/fail", headers=[
            ("Host", "x"), ("X-Request-ID", "rid-500")]))
        failed_path.close()
        line, fields = ws_answer(srv, "/chat", b"X-Request-ID: rid-403\r\n")
    assert (too_large.status, too_large.get(b"x-request-id")) == (413, None)
    assert (failed.status, failed.get(b"x-request-id")) == (500, None)
    assert line == b"HTTP/1.1 403 Forbidden" and b"x-request-id" not in fields
    assert scopes[-2:] == [[b"rid-500"], [b"rid-403"]]
