"""The HTTP connection scope (ASGI HTTP & WebSocket spec 2.5, "HTTP Connection Scope").

Each case sends exact request bytes and compares what the application received, key by key, with
what the spec (and RFC 9112 for parsing) says. Every case runs on asyncio and uvloop.
"""
import pytest

from _cases import assert_refused
from conftest import EchoApp, Recorder, http_request, snapshot

SCOPE_KEYS = {
    "type", "asgi", "http_version", "method", "scheme", "path", "raw_path", "query_string",
    "root_path", "headers", "client", "server", "state",
}


def one_scope(srv, app: EchoApp, data: bytes, method: str = "GET") -> dict:
    """Sends data on a fresh connection, expects a 200 and returns the scope the app saw."""
    c = srv.connect()
    before = len(app.calls)
    r = c.request(data, method)
    assert r.status == 200, r
    return app.calls.wait(before + 1)[before]["scope"]


@pytest.mark.rule(
    "ASGI-www-scope-keys",
    "ASGI-www-scope-type-asgi",
    "ASGI-www-scope-scheme",
    "ASGI-www-scope-root-path-default",
)
def test_scope_every_key(serve, echo_app):
    """ASGI www 2.5: type, asgi, http_version, method, scheme, path, raw_path, query_string,
    root_path, headers, client, server, state; client/server are (host, port) tuples."""
    with serve(echo_app) as srv:
        c = srv.connect()
        r = c.request(b"GET /a%20b?x=1&y=%20 HTTP/1.1\r\nHost: example.org:8080\r\n\r\n")
        assert r.status == 200
        scope = echo_app.calls.wait(1)[0]["scope"]
        assert set(scope) - {"extensions"} == SCOPE_KEYS
        assert scope["type"] == "http"
        assert scope["asgi"] == {"version": "3.0", "spec_version": "2.5"}
        assert scope["http_version"] == "1.1"
        assert scope["method"] == "GET"
        assert scope["scheme"] == "http"
        assert scope["path"] == "/a b"
        assert scope["raw_path"] == b"/a%20b"
        assert scope["query_string"] == b"x=1&y=%20"
        assert scope["root_path"] == ""
        assert [tuple(h) for h in scope["headers"]] == [(b"host", b"example.org:8080")]
        assert type(scope["client"]) is tuple
        assert scope["client"] == c.sock.getsockname()
        assert type(scope["server"]) is tuple
        assert scope["server"] == ("127.0.0.1", srv.port)
        assert scope["state"] == {}


@pytest.mark.rule("ASGI-www-scope-path-decoded", "ASGI-www-scope-raw-path")
@pytest.mark.parametrize(
    "target, path, raw_path",
    [
        ("/", "/", b"/"),
        ("/plain/path", "/plain/path", b"/plain/path"),
        ("/a%20b", "/a b", b"/a%20b"),
        ("/caf%C3%A9", "/caf\u00e9", b"/caf%C3%A9"),
        ("/a%2Fb", "/a/b", b"/a%2Fb"),
        ("/%7Euser", "/~user", b"/%7Euser"),
        ("/a+b", "/a+b", b"/a+b"),
    ],
)
def test_path_percent_decoded_raw_path_unmodified(serve, echo_app, target, path, raw_path):
    """path: percent-decoded UTF-8 (ASGI "path"); raw_path: the bytes received."""
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, http_request("GET", target))
        assert scope["path"] == path
        assert scope["raw_path"] == raw_path
        assert scope["query_string"] == b""


@pytest.mark.rule("ASGI-www-scope-query-string")
@pytest.mark.parametrize(
    "target, query",
    [
        ("/p", b""),
        ("/p?", b""),
        ("/p?a=1&a=2", b"a=1&a=2"),
        ("/p?q=%20+x&%C3%A9", b"q=%20+x&%C3%A9"),
        ("/p?next=/a?b", b"next=/a?b"),
    ],
)
def test_query_string_raw_without_question_mark(serve, echo_app, target, query):
    """query_string: the raw bytes after the first "?", not decoded (ASGI "query_string")."""
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, http_request("GET", target))
        assert scope["path"] == "/p"
        assert scope["raw_path"] == b"/p"
        assert scope["query_string"] == query


@pytest.mark.rule("ASGI-www-scope-method")
@pytest.mark.parametrize("method", ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_method_upper_case_as_received(serve, echo_app, method):
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, http_request(method, "/m"), method=method)
        assert scope["method"] == method
        assert scope["path"] == "/m"


@pytest.mark.rule("ASGI-www-scope-http-version", "RFC9112-3.2-http10-host-optional")
def test_http_1_0_version_and_no_host(serve, echo_app):
    """HTTP/1.0 needs no Host (RFC 9112 §3.2 requires it only of 1.1); http_version "1.0"."""
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, b"GET /old HTTP/1.0\r\n\r\n")
        assert scope["http_version"] == "1.0"
        assert scope["path"] == "/old"
        assert scope["headers"] == []


@pytest.mark.rule("ASGI-www-scope-headers")
def test_common_and_near_miss_field_names_lower_cased(serve, echo_app):
    """The common field names (one shared bytes object each in skirr) in any case, and names
    one letter, one length or one case away from them, all lower-cased exactly."""
    names = [b"HOST", b"User-Agent", b"sEC-wEBsOCKET-kEY", b"Sec-WebSocket-Version", b"TE", b"Te",
             b"Via", b"DNT", b"X-Forwarded-For", b"Hosx", b"Hos", b"Hostt", b"Accepts", b"T",
             b"Via2", b"Upgrade-Insecure-Requests", b"Priority", b"Cookie", b"cookie2"]
    raw = b"GET / HTTP/1.1\r\n" + b"".join(n + b": v%d\r\n" % i for i, n in enumerate(names))
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, raw + b"\r\n")
    assert [tuple(h) for h in scope["headers"]] == [
        (n.lower(), b"v%d" % i) for i, n in enumerate(names)]


@pytest.mark.rule("ASGI-www-scope-headers")
def test_common_and_near_miss_field_values_exact(serve, echo_app):
    """The common field values (one shared bytes object each in skirr) and values one letter,
    one length or one case away from them: every value reaches the app byte for byte, and a
    common one is the same object in two requests' scopes; so is a Host value the request before
    sent too, and a different Host value is the request's own."""
    values = [b"websocket", b"WebSocket", b"websockets", b"Upgrade", b"upgrade", b"UPGRADE",
              b"13", b"1", b"0", b"12", b"keep-alive", b"Keep-Alive", b"keep-alivE", b"close",
              b"*/*", b"*/", b"gzip, deflate, br", b"gzip, deflate, b", b"?0", b"?2",
              b"u=0, i", b"permessage-deflate; client_max_window_bits", b"permessage-deflate"]
    fields = b"".join(b"x-v%d: %s\r\n" % (i, v) for i, v in enumerate(values)) + b"\r\n"
    with serve(echo_app) as srv:
        first = one_scope(srv, echo_app, b"GET / HTTP/1.1\r\nHost: example.org:8080\r\n" + fields)
        second = one_scope(srv, echo_app, b"GET / HTTP/1.1\r\nHost: example.org:8080\r\n" + fields)
        third = one_scope(srv, echo_app, b"GET / HTTP/1.1\r\nHost: example.org:8081\r\n" + fields)
        fourth = one_scope(srv, echo_app, b"GET / HTTP/1.1\r\nHost: example.org:8080\r\n" + fields)
    assert [tuple(h) for h in first["headers"]] == [(b"host", b"example.org:8080")] + [
        (b"x-v%d" % i, v) for i, v in enumerate(values)]
    assert [h[1] for h in second["headers"]] == [h[1] for h in first["headers"]]
    assert [h[1] for h in third["headers"]] == [b"example.org:8081"] + values
    assert [h[1] for h in fourth["headers"]] == [b"example.org:8080"] + values
    # the last Host value is shared with the next request that sends the same
    assert second["headers"][0][1] is first["headers"][0][1]
    # the snapshot is a deep copy, which keeps bytes objects as they are
    shared = {v for (_, v), (_, w) in zip(first["headers"], second["headers"]) if v is w}
    assert shared >= {b"websocket", b"Upgrade", b"upgrade", b"13", b"keep-alive", b"*/*",
                      b"gzip, deflate, br", b"u=0, i"}
    assert b"WebSocket" not in shared and b"keep-alivE" not in shared


@pytest.mark.rule("ASGI-www-scope-headers", "RFC9110-5.5-ows-trimmed")
def test_headers_lower_cased_order_duplicates_trimmed(serve, echo_app):
    """ASGI headers: an iterable of [name, value] byte pairs, names lower-cased, order and
    duplicates kept. Values without leading/trailing whitespace (RFC 9110 §5.5); obs-text kept."""
    raw = (
        b"GET / HTTP/1.1\r\n"
        b"Host: x\r\n"
        b"X-Dup: 1\r\n"
        b"Accept: */*\r\n"
        b"x-dup: 2\r\n"
        b"X-Spaced: \t v  v \t \r\n"
        b"X-Empty:\r\n"
        b"X-Latin: caf\xe9\r\n"
        b"\r\n"
    )
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, raw)
        headers = scope["headers"]
        assert type(headers) is list
        for h in headers:
            assert len(h) == 2 and type(h[0]) is bytes and type(h[1]) is bytes, h
        assert [tuple(h) for h in headers] == [
            (b"host", b"x"),
            (b"x-dup", b"1"),
            (b"accept", b"*/*"),
            (b"x-dup", b"2"),
            (b"x-spaced", b"v  v"),
            (b"x-empty", b""),
            (b"x-latin", b"caf\xe9"),
        ]


@pytest.mark.rule("ASGI-www-scope-root-path")
def test_root_path_prefixes_path_and_raw_path(serve, echo_app):
    """Config root_path="/api": root_path "/api", and (as uvicorn does) path and raw_path carry
    the prefix: request /x -> path "/api/x", raw_path b"/api/x"."""
    with serve(echo_app, root_path="/api") as srv:
        scope = one_scope(srv, echo_app, http_request("GET", "/x?q=1"))
        assert scope["root_path"] == "/api"
        assert scope["path"] == "/api/x"
        assert scope["raw_path"] == b"/api/x"
        assert scope["query_string"] == b"q=1"
        scope = one_scope(srv, echo_app, http_request("GET", "/a%20b"))
        assert scope["path"] == "/api/a b"
        assert scope["raw_path"] == b"/api/a%20b"


@pytest.mark.rule("RFC9112-3.2.2-absolute-form")
def test_absolute_form_target(serve, echo_app):
    """RFC 9112 §3.2.2: a server MUST accept the absolute-form; path and query come from it."""
    with serve(echo_app) as srv:
        scope = one_scope(
            srv, echo_app, b"GET http://example.com/p?q=1 HTTP/1.1\r\nHost: example.com\r\n\r\n"
        )
        assert scope["path"] == "/p"
        assert scope["raw_path"] == b"/p"
        assert scope["query_string"] == b"q=1"


@pytest.mark.rule("ASGI-www-scope-client-server-tcp")
def test_client_and_server_per_connection(serve, echo_app):
    """client is the peer's (host, port): two connections, two client ports; same server."""
    with serve(echo_app) as srv:
        c1, c2 = srv.connect(), srv.connect()
        assert c1.request(http_request("GET", "/1")).status == 200
        assert c2.request(http_request("GET", "/2")).status == 200
        assert c1.request(http_request("GET", "/3")).status == 200
        calls = echo_app.calls.wait(3)
        assert [x["scope"]["client"] for x in calls] == [
            c1.sock.getsockname(), c2.sock.getsockname(), c1.sock.getsockname()
        ]
        assert all(x["scope"]["server"] == ("127.0.0.1", srv.port) for x in calls)


@pytest.mark.rule("skirr-scope-fresh-per-request")
def test_fresh_scope_per_request(serve):
    """Every request gets its own mutable dict; nothing mutable is shared between requests
    (DESIGN "Scope"). Request 1 mutates everything it can; requests 2 (same connection) and
    3 (another connection) see pristine scopes."""
    seen = Recorder()

    async def app(scope, receive, send):
        seen.put((snapshot(scope), scope))
        if scope["path"] == "/mutate":
            scope["x-mutated"] = True
            scope["path"] = "/mutated"
            scope["headers"].append((b"x-injected", b"1"))
            scope["asgi"]["version"] = "mutated"
            scope["state"]["k"] = "v"
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    with serve(app) as srv:
        c = srv.connect()
        assert c.request(http_request("GET", "/mutate")).status == 200
        assert c.request(http_request("GET", "/next")).status == 200
        assert srv.get("/other").status == 200
        (s1, live1), (s2, live2), (s3, live3) = seen.wait(3)
        for snap in (s2, s3):
            assert "x-mutated" not in snap
            assert [tuple(h) for h in snap["headers"]] == [(b"host", b"x")]
            assert snap["asgi"] == {"version": "3.0", "spec_version": "2.5"}
            assert snap["state"] == {}
        assert s2["path"] == "/next" and s3["path"] == "/other"
        assert live1 is not live2 and live1 is not live3
        for key in ("headers", "asgi", "state"):
            assert live1[key] is not live2[key], key
            assert live1[key] is not live3[key], key


@pytest.mark.rule("skirr-scope-split-invariant")
def test_scope_same_when_split_at_every_offset(serve, echo_app):
    """The same request, sent in two writes split at every byte offset (DESIGN "Tests": whole or
    split at any byte boundary), gives the same scope and body every time."""
    import socket
    import time

    data = (
        b"POST /sp%20lit?q=1 HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nx-a:  2 \r\n"
        b"Content-Length: 5\r\n\r\nhello"
    )

    def key(call):
        s = call["scope"]
        return (s["method"], s["path"], s["raw_path"], s["query_string"],
                [tuple(h) for h in s["headers"]], call["body"])

    with serve(echo_app) as srv:
        whole = one_scope(srv, echo_app, data, "POST")
        expected = key(echo_app.calls.items[-1])
        assert expected[1:4] == ("/sp lit", b"/sp%20lit", b"q=1")
        assert whole["method"] == "POST"
        for i in range(1, len(data)):
            c = srv.connect()
            c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c.send(data[:i])
            time.sleep(0.005)
            c.send(data[i:])
            r = c.response("POST")
            assert (r.status, r.body) == (200, b"hello"), i
            assert key(echo_app.calls.wait(i + 1)[i]) == expected, f"split at {i}"
            c.close()


@pytest.mark.rule("ASGI-www-scope-path-decoded")
@pytest.mark.parametrize(
    "target, path, raw_path",
    [("/a%3Fb?c", "/a?b", b"/a%3Fb"), ("/%00", "/\x00", b"/%00"), ("/%e2%82%ac", "/\u20ac", b"/%e2%82%ac"),
     ("/%F0%9F%98%80", "/\U0001F600", b"/%F0%9F%98%80"), ("/a%252F", "/a%2F", b"/a%252F")],
    ids=["escaped-question-mark", "escaped-nul", "lower-hex", "4-byte-utf8", "double-escape"],
)
def test_path_decoded_once(serve, echo_app, target, path, raw_path):
    """Each %XX is decoded exactly once, whatever it encodes ("?" stays in the path, NUL is a
    character of the str); the result is UTF-8 decoded."""
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, http_request("GET", target))
        assert (scope["path"], scope["raw_path"]) == (path, raw_path)


@pytest.mark.rule("ASGI-www-scope-path-invalid-utf8")
@pytest.mark.parametrize(
    "target, path",
    [("/a%C3", "/a\ufffd"), ("/%FF%FE", "/\ufffd\ufffd"), ("/%C3%28", "/\ufffd("),
     ("/%ED%A0%80", "/\ufffd\ufffd\ufffd"), ("/%C0%AF", "/\ufffd\ufffd"), ("/ok%E2%82", "/ok\ufffd")],
    ids=["truncated", "invalid-bytes", "bad-continuation", "surrogate", "overlong", "truncated-3"],
)
def test_path_invalid_utf8_replaced(serve, echo_app, target, path):
    """ASGI: path is the decoded UTF-8 str. Percent-escapes that are not valid UTF-8 cannot be
    decoded: skirr decides to replace each invalid sequence with U+FFFD (what
    urllib.parse.unquote and uvicorn give) rather than refuse the request; raw_path keeps the
    exact bytes for apps that need them."""
    from urllib.parse import unquote

    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, http_request("GET", target))
        assert scope["path"] == path == unquote(target)
        assert scope["raw_path"] == target.encode()


@pytest.mark.rule("ASGI-www-scope-path-bad-escape")
@pytest.mark.parametrize(
    "target",
    ["/a%zz", "/a%2", "/a%", "/%%41", "/%G1", "/a%2?q"],
    ids=["not-hex", "one-digit-at-end", "percent-at-end", "percent-then-escape", "bad-first-digit",
         "one-digit-before-query"],
)
def test_path_malformed_escape_never_reaches_path(serve, echo_app, target):
    """A "%" not followed by two hex digits is no escape and no path byte (RFC 3986 §2.1): the
    request-target is invalid, 400 before any scope is built, so path never holds a "%" that
    decoding did not produce (it used to be kept literally, as urllib.parse.unquote keeps it)."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, http_request("GET", target), 400)


@pytest.mark.rule("ASGI-www-scope-http-version")
def test_http_version_11(serve, echo_app):
    with serve(echo_app) as srv:
        assert one_scope(srv, echo_app, http_request())["http_version"] == "1.1"


@pytest.mark.rule("ASGI-www-scope-state-shallow-copy")
def test_state_is_a_shallow_copy_per_request(serve):
    """ASGI lifespan state: each request scope gets a shallow copy of what startup stored.
    Rebinding a key in one request is not seen by the next; a mutable value is the same object
    (shallow), as the spec says."""
    seen = Recorder()
    shared = []

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    scope["state"].update({"n": 1, "shared": shared})
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await receive()
        seen.put((dict(scope["state"]), scope["state"]))
        scope["state"]["n"] += 1
        scope["state"]["new"] = True
        scope["state"]["shared"].append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    with serve(app, lifespan="on") as srv:
        c = srv.connect()
        assert c.request(http_request("GET", "/1")).status == 200
        assert c.request(http_request("GET", "/2")).status == 200
        (first, live1), (second, live2) = seen.wait(2)
        assert first == {"n": 1, "shared": shared} and second == {"n": 1, "shared": shared}
        assert live1 is not live2
        assert shared == ["/1", "/2"]
