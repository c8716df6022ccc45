"""--server-header/--no-server-header, --date-header/--no-date-header, --header NAME:VALUE
(issue 13), on responses and on refusals, and --health-check-path's methods and exact path (issue
12), over real sockets on both loops."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import http_request


async def app(scope, receive, send):
    extra = [(b"server", b"app/1"), (b"date", b"app-date")] if scope["path"] == "/own" else []
    await send({"type": "http.response.start", "status": 200, "headers": extra})
    await send({"type": "http.response.body", "body": b"ok"})


def names(r):
    return [n for n, _ in r.headers]


@pytest.mark.rule("skirr-header-options")
def test_defaults(serve):
    with serve(app) as srv:
        r = srv.get("/")
    assert r.get(b"server") == b"skirr" and r.get(b"date") is not None


@pytest.mark.rule("skirr-header-options")
def test_no_server_no_date(serve):
    with serve(app, server_header=False, date_header=False) as srv:
        r = srv.get("/")
        own = srv.get("/own")
        c = srv.connect()
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n")
        refused = c.response(allow_incomplete=True)
    assert names(r) == [b"content-length"]
    assert own.get(b"server") == b"app/1" and own.get(b"date") == b"app-date"
    assert refused.status == 400
    assert names(refused) == [b"content-type", b"content-length", b"connection"]


@pytest.mark.rule("skirr-header-options")
def test_extra_headers_everywhere(serve):
    hdrs = ["X-Frame-Options: DENY", "strict-transport-security:max-age=63072000", "X-Empty:"]
    with serve(app, headers=hdrs) as srv:
        r = srv.get("/")
        c = srv.connect()
        c.send(b"BREW / HTTP/1.1\r\nHost: x\r\n\r\n")
        refused = c.response(allow_incomplete=True)
    for resp in (r, refused):
        assert resp.get(b"x-frame-options") == b"DENY"
        assert resp.get(b"strict-transport-security") == b"max-age=63072000"
        assert resp.get(b"x-empty") == b""
        assert resp.get(b"server") == b"skirr"
    assert refused.status == 501


@pytest.mark.rule("skirr-header-options")
def test_server_header_replaced(serve):
    with serve(app, headers=["Server: edge"]) as srv:
        r = srv.get("/")
        own = srv.get("/own")
    assert r.get_all(b"server") == [b"edge"]
    assert own.get_all(b"server") == [b"app/1"]


@pytest.mark.rule("skirr-header-options")
@pytest.mark.parametrize("bad", ["NoColon", "bad name:1", ":v", "x-a:1\r\nx-b: 2", "x-a:\x00",
                                 "x-a:caf\u20ac", "(x):1"])
def test_invalid_header_is_usage_error(bad):
    from skirr.config import Config, ConfigError

    with pytest.raises(ConfigError, match="header"):
        Config(app, headers=[bad])
    if "\x00" in bad:
        return  # a command line cannot carry NUL
    p = subprocess.run([sys.executable, "-m", "skirr", "nomodule:app", "--header", bad],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert p.stderr.startswith("skirr: error: header ") and p.stderr.count("\n") == 1


@pytest.mark.rule("skirr-header-options")
def test_server_header_replaced_exact_bytes(serve):
    """--header server:X is the one server line (as uvicorn), beside the other --header lines."""
    with serve(app, date_header=False, headers=["Server: edge", "X-A: 1"]) as srv:
        c = srv.connect()
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        head = c.read_until(b"\r\n\r\n")
    assert head == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nserver: edge\r\nx-a: 1\r\n\r\n"


OWNED = [
    ("content-length:5", "content-length is a framing field skirr writes for each response "
                         "itself (RFC 9112 §6)"),
    ("Transfer-Encoding: chunked", "transfer-encoding is a framing field skirr writes for each "
                                   "response itself (RFC 9112 §6)"),
    *[(f"{name}:x", f"{name} is a connection-specific field skirr manages itself "
                    "(RFC 9110 §7.6.1)")
      for name in ("connection", "keep-alive", "upgrade", "te", "trailer", "proxy-connection")],
    ("date:yesterday", "date is written by skirr for each response (--no-date-header turns it "
                       "off)"),
    *[(f"{name}:x", f"{name} is written by skirr in each WebSocket handshake's 101 "
                    "(RFC 6455 §4.2.2)")
      for name in ("sec-websocket-accept", "sec-websocket-extensions", "sec-websocket-protocol")],
]


@pytest.mark.rule("skirr-header-owned-fields")
@pytest.mark.parametrize("field,why", OWNED)
def test_owned_field_is_usage_error(field, why):
    from skirr.config import Config

    message = f"header {field!r}: {why}"
    with pytest.raises(ValueError) as info:
        Config(app, headers=[field])
    assert str(info.value) == message
    name, _, value = field.partition(":")
    with pytest.raises(ValueError) as info:
        Config(app, headers=[(name, value)])
    assert str(info.value) == f"header {(name, value)!r}: {why}"
    p = subprocess.run([sys.executable, "-m", "skirr", "nomodule:app", "--header", field],
                       capture_output=True, text=True, timeout=30)
    assert (p.returncode, p.stderr) == (2, f"skirr: error: {message}\n")


@pytest.mark.rule("skirr-header-owned-fields")
def test_owned_field_from_environment_is_usage_error():
    env = dict(os.environ, SKIRR_HEADER="x-ok: 1\ncontent-length: 5")
    p = subprocess.run([sys.executable, "-m", "skirr", "nomodule:app"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert (p.returncode, p.stderr) == (2, "skirr: error: SKIRR_HEADER: header 'content-length: "
                                           "5': content-length is a framing field skirr writes "
                                           "for each response itself (RFC 9112 §6)\n")


@pytest.mark.rule("skirr-health-check-path")
def test_health_check_path_answers_any_method_exact_path(serve, echo_app):
    with serve(echo_app, health_check_path="/healthz") as srv:
        answers = {}
        for method in ("GET", "POST", "DELETE", "OPTIONS", "HEAD"):
            c = srv.connect()
            c.send(f"{method} /healthz?probe=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                   "\r\n".encode())
            r = c.response(method=method)
            answers[method] = (r.status, r.body)
            c.close()
        other = srv.get("/healthz/")
    assert answers == {"GET": (200, b"OK\n"), "POST": (200, b"OK\n"), "DELETE": (200, b"OK\n"),
                       "OPTIONS": (200, b"OK\n"), "HEAD": (200, b"")}
    assert [c["scope"]["path"] for c in echo_app.calls.items] == ["/healthz/"]
    assert other.status == 200


# What the startup check keeps for skirr's own HTTP/2 answers beside the server's fields: 512
# bytes (their :status, content-type, content-length, cache-control, x-request-id), then date
# and "server: skirr" (RFC 9113 §6.5.2's measure: name + value + 32 bytes)
OWN = 512 + (32 + 4 + 29) + (32 + 6 + 5)


@pytest.mark.rule("skirr-header-options")
@pytest.mark.parametrize("over", [0, 1])
def test_header_fields_too_big_for_an_http2_head_are_a_usage_error(serve, over):
    """--header fields that leave skirr's own HTTP/2 response over 65,536 bytes (one byte over):
    a usage error at startup, unless only HTTP/1.1 is served (--http 1); at the limit the server
    starts and its 500 goes out whole over HTTP/2."""
    from skirr.config import Config, ConfigError

    from h2_util import H2Client

    value = "v" * (65536 - OWN - (32 + 5) + over)
    field = f"x-big:{value}"
    size = 65536 + over
    message = (f"headers: skirr's own HTTP/2 responses would carry {size:,} bytes of fields "
               "(RFC 9113 §6.5.2: name + value + 32 bytes each; the server, date and --header "
               "fields with 512 for its own), over the 65,536 an "
               "HTTP/2 response head may hold: send fewer or shorter --header fields, or serve "
               "HTTP/1.1 only (--http 1)")
    Config(app, headers=[field], http="1")
    if over:
        with pytest.raises(ConfigError) as info:
            Config(app, headers=[field])
        assert str(info.value) == message
        p = subprocess.run([sys.executable, "-m", "skirr", "nomodule:app", "--header", field],
                           capture_output=True, text=True, timeout=30)
        assert (p.returncode, p.stderr) == (2, f"skirr: error: {message}\n")
        env = dict(os.environ, SKIRR_HEADER=field)  # the same field from the environment
        p = subprocess.run([sys.executable, "-m", "skirr", "nomodule:app"], env=env,
                           capture_output=True, text=True, timeout=30)
        assert (p.returncode, p.stderr) == (2, f"skirr: error: SKIRR_HEADER: {message}\n")
        for only_http1 in (["--http", "1"], ["--no-date-header", "--no-server-header"]):
            # accepted (the next thing to fail is the import): with --http 1 no HTTP/2 answer
            # is made; without date and server the set fits
            p = subprocess.run([sys.executable, "-m", "skirr", "nomodule:app", *only_http1],
                               env=env, capture_output=True, text=True, timeout=30)
            assert p.returncode == 1 and "nomodule" in p.stderr and "headers:" not in p.stderr
        return

    async def raising(scope, receive, send):
        raise RuntimeError("boom")

    rid = "r" * 200  # the longest X-Request-ID kept (skirr.request_id)
    with serve(raising, headers=[field], health_check_path="/healthz", request_id=True) as srv:
        with H2Client.open(srv.port) as c:
            a = c.answer(c.get("/"))
            h = c.answer(c.get("/healthz", extra=[("x-request-id", rid)]))
    assert (a.status, a.body, a.ended, a.reset) == (500, b"Internal Server Error", True, None)
    assert a.header(b"x-big") == value.encode()
    assert (h.status, h.body, h.ended, h.reset) == (200, b"OK\n", True, None)
    assert (h.header(b"cache-control"), h.header(b"x-request-id"), h.header(b"x-big")) == (
        b"no-store", rid.encode(), value.encode())


@pytest.mark.rule("skirr-header-options")
@pytest.mark.parametrize("over", [0, 1])
def test_the_native_server_refuses_server_fields_too_big_for_http2(over):
    """The extension alone (skirr._native.Server, without skirr.Config's check first) refuses
    server fields that would leave skirr's own HTTP/2 answers over 65,536 bytes, as Config does,
    and takes them at the limit or with HTTP/1.1 only (http=1); the size is measured by the one
    C function Config's message quotes (h2_own_fields_size)."""
    import socket

    from skirr import _native

    value = b"v" * (65536 - OWN - (32 + 5) + over)
    server, extra = b"server: skirr\r\n", b"x-big: " + value + b"\r\n"
    assert _native.h2_own_fields_size(server, extra, True) == 65536 + over
    assert _native.h2_own_fields_size(server, extra, False) == 65536 + over - (32 + 4 + 29)
    with socket.socket() as s:
        kwargs = dict(server_header=server, headers=extra)
        _native.Server(lambda *a: None, None, s.fileno(), http=1, **kwargs)
        if not over:
            _native.Server(lambda *a: None, None, s.fileno(), **kwargs)
            return
        with pytest.raises(ValueError) as info:
            _native.Server(lambda *a: None, None, s.fileno(), **kwargs)
        _native.Server(lambda *a: None, None, s.fileno(), date_header=False, **kwargs)
    assert str(info.value) == ("server_header and headers carry too much for an HTTP/2 response "
                               "head: 65537 bytes with skirr's own (RFC 9113 section 6.5.2), "
                               "over 65536")
