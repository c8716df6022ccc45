"""Helpers shared by the request-side cases (refusals, request-line, fields, framing, oracle).

    assert_refused(srv, app, data, 400)   # one response, connection: close, EOF, app never called
    call = one_call(srv, app, data)       # a 200 from the echo app; returns what the app saw
    send_in_pieces(client, data, [3, 17]) # separate writes split at those offsets
"""
from __future__ import annotations

import socket
import time
from typing import Optional, Sequence

from conftest import Client, EchoApp, Response, http_request

H = b"Host: x\r\n"


def get(target: bytes = b"/", extra: bytes = b"", version: bytes = b"HTTP/1.1") -> bytes:
    """A GET with Host: x plus the extra field-lines (each ending in CRLF)."""
    return b"GET " + target + b" " + version + b"\r\n" + H + extra + b"\r\n"


def send_in_pieces(c: Client, data: bytes, offsets: Sequence[int], pause: float = 0.002) -> None:
    """Writes data in separate segments cut at the given offsets (TCP_NODELAY, a short pause
    between writes so the server usually reads them apart)."""
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    cuts = sorted({o for o in offsets if 0 < o < len(data)})
    start = 0
    for cut in cuts + [len(data)]:
        c.send(data[start:cut])
        start = cut
        if cut != len(data):
            time.sleep(pause)


def assert_refused(
    srv,
    app: EchoApp,
    data: bytes,
    status: int,
    method: str = "GET",
    offsets: Optional[Sequence[int]] = None,
    check_after: bool = True,
) -> Response:
    """Sends data on a fresh connection (whole, or cut at offsets): exactly one response with
    `status` and "connection: close", then the server closes; the app was never called; a fresh
    connection is still served."""
    before = len(app.calls)
    c = srv.connect()
    if offsets:
        send_in_pieces(c, data, offsets)
    else:
        c.send(data)
    r = c.response(method)
    assert r.status == status, f"expected {status}, got {r.status}: {r.raw[:300]!r}"
    assert r.get(b"connection") == b"close", r.headers
    assert r.get(b"content-length") == str(len(r.body)).encode() or method == "HEAD", r.headers
    c.expect_eof()
    assert len(app.calls) == before, f"the app was called: {app.calls.items[before:]!r}"
    if check_after:
        ok = srv.get("/after")
        assert ok.status == 200
        assert app.calls.wait(before + 1)[before]["scope"]["path"] == "/after"
    return r


def one_call(srv, app: EchoApp, data: bytes, method: str = "GET") -> dict:
    """Sends data on a fresh connection, expects a 200 from the echo app and returns its record
    ({"scope", "events", "body"})."""
    c = srv.connect()
    before = len(app.calls)
    r = c.request(data, method)
    assert r.status == 200, f"expected 200, got {r.status}: {r.raw[:300]!r}"
    return app.calls.wait(before + 1)[before]


def one_scope(srv, app: EchoApp, data: bytes, method: str = "GET") -> dict:
    return one_call(srv, app, data, method)["scope"]


__all__ = ["H", "get", "send_in_pieces", "assert_refused", "one_call", "one_scope", "http_request"]
