"""The HTTP connection scope (ASGI HTTP & WebSocket spec 2.5, "HTTP Connection Scope").

Each case sends exact request bytes and compares what the application received, key by key, with
what the spec (and RFC 9112 for parsing) says. Every case runs on asyncio and uvloop.
"""
import pytest

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


@pytest.mark.parametrize("method", ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_method_upper_case_as_received(serve, echo_app, method):
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, http_request(method, "/m"), method=method)
        assert scope["method"] == method
        assert scope["path"] == "/m"


def test_http_1_0_version_and_no_host(serve, echo_app):
    """HTTP/1.0 needs no Host (RFC 9112 §3.2 requires it only of 1.1); http_version "1.0"."""
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, b"GET /old HTTP/1.0\r\n\r\n")
        assert scope["http_version"] == "1.0"
        assert scope["path"] == "/old"
        assert scope["headers"] == []


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


def test_absolute_form_target(serve, echo_app):
    """RFC 9112 §3.2.2: a server MUST accept the absolute-form; path and query come from it."""
    with serve(echo_app) as srv:
        scope = one_scope(
            srv, echo_app, b"GET http://example.com/p?q=1 HTTP/1.1\r\nHost: example.com\r\n\r\n"
        )
        assert scope["path"] == "/p"
        assert scope["raw_path"] == b"/p"
        assert scope["query_string"] == b"q=1"


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
