"""Refusals: bad or over-limit requests get one clear status, "connection: close", and the
connection closed; the application is never called; the server keeps serving (DESIGN "Bad input";
issue 2 §3). Statuses: RFC 9112 §2.2/§3/§5/§6/§7, RFC 9110 §15.5.14, §15.5.15, §15.6.2, §15.6.6,
RFC 6585 §5.
"""
import pytest

from conftest import Recorder, http_request

H = b"Host: x\r\n"

BAD_400 = {
    # request-line (RFC 9112 §3)
    "space-in-target": b"GET /a b HTTP/1.1\r\n" + H + b"\r\n",
    "ctl-in-target": b"GET /a\x01b HTTP/1.1\r\n" + H + b"\r\n",
    "bad-protocol-name": b"GET / HTTQ/1.1\r\n" + H + b"\r\n",
    # "#" is not in origin-form (absolute-path [ "?" query ], RFC 9112 §3.2.1, RFC 3986 §3.4):
    # an invalid request-line gets 400 (RFC 9112 §3.2)
    "fragment-in-path": b"GET /a#frag HTTP/1.1\r\n" + H + b"\r\n",
    "fragment-in-query": b"GET /a?q=1#frag HTTP/1.1\r\n" + H + b"\r\n",
    # Host (RFC 9112 §3.2)
    "missing-host": b"GET / HTTP/1.1\r\n\r\n",
    "two-hosts": b"GET / HTTP/1.1\r\nHost: x\r\nHost: x\r\n\r\n",
    "two-different-hosts": b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    # message body length (RFC 9112 §6.1, §6.3)
    "cl-and-te": b"POST / HTTP/1.1\r\n" + H
    + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "cl-not-a-number": b"POST / HTTP/1.1\r\n" + H + b"Content-Length: abc\r\n\r\n",
    "cl-negative": b"POST / HTTP/1.1\r\n" + H + b"Content-Length: -1\r\n\r\n",
    "cl-trailing-junk": b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 5x\r\n\r\nhello",
    "cl-two-different": b"POST / HTTP/1.1\r\n" + H
    + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    "cl-plus-sign": b"POST / HTTP/1.1\r\n" + H + b"Content-Length: +5\r\n\r\nhello",
    "cl-overflow": b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 99999999999999999999999\r\n\r\n",
    # RFC 9112 §6.3 rule 4: chunked not the final coding of a request -> MUST 400 and close
    "te-gzip-not-final": b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: gzip\r\n\r\n",
    "te-chunked-then-gzip": b"POST / HTTP/1.1\r\n" + H
    + b"Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n",
    "te-chunked-twice": b"POST / HTTP/1.1\r\n" + H
    + b"Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
    # RFC 9112 §6.1: Transfer-Encoding in an HTTP/1.0 message means faulty framing
    "te-in-http10": b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    # chunked framing (RFC 9112 §7.1)
    "chunk-size-overflow": b"POST / HTTP/1.1\r\n" + H
    + b"Transfer-Encoding: chunked\r\n\r\nfffffffffffffffffffff\r\n",
    "chunk-size-not-hex": b"POST / HTTP/1.1\r\n" + H
    + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",
    "chunk-data-no-crlf": b"POST / HTTP/1.1\r\n" + H
    + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX\r\n0\r\n\r\n",
    # field syntax (RFC 9112 §5, RFC 9110 §5.5)
    "obs-fold": b"GET / HTTP/1.1\r\n" + H + b"X-A: a\r\n b\r\n\r\n",
    "nul-in-value": b"GET / HTTP/1.1\r\n" + H + b"X-A: a\x00b\r\n\r\n",
    "space-in-name": b"GET / HTTP/1.1\r\n" + H + b"X A: a\r\n\r\n",
    "space-before-colon": b"GET / HTTP/1.1\r\n" + H + b"X-A : a\r\n\r\n",
    "no-colon": b"GET / HTTP/1.1\r\n" + H + b"X-A\r\n\r\n",
    # bare LF (RFC 9112 §2.2: strict parsing, no lenient flags)
    "bare-lf-everywhere": b"GET / HTTP/1.1\nHost: x\n\n",
    "bare-lf-in-fields": b"GET / HTTP/1.1\r\nHost: x\nX-A: a\r\n\r\n",
}

BAD_OTHER = {
    "te-gzip-chunked-501": (
        b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501
    ),
    "unknown-method-501": (b"FOO / HTTP/1.1\r\n" + H + b"\r\n", 501),
    # CONNECT asks for a tunnel (RFC 9110 §9.3.6), which an ASGI http app cannot provide; a 2xx
    # would switch the client to tunnel mode. Not implemented -> 501 (RFC 9110 §9.1).
    "connect-501": (b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 501),
    "http-2.0-505": (b"GET / HTTP/2.0\r\n" + H + b"\r\n", 505),
    "http-1.2-505": (b"GET / HTTP/1.2\r\n" + H + b"\r\n", 505),
}


def assert_refused(srv, app, data: bytes, status: int, method: str = "GET"):
    """Sends data on a fresh connection: exactly one response with `status` and connection:
    close, then the server closes; the app was never called; a fresh connection still works."""
    c = srv.connect()
    c.send(data)
    r = c.response(method)
    assert r.status == status, f"expected {status}, got {r.status}: {r.raw[:300]!r}"
    assert r.get(b"connection") == b"close"
    c.expect_eof()
    assert app.calls.items == [], f"the app was called: {app.calls.items!r}"
    ok = srv.get("/after")
    assert ok.status == 200
    assert [x["scope"]["path"] for x in app.calls.wait(1)] == ["/after"]


@pytest.mark.parametrize("data", list(BAD_400.values()), ids=list(BAD_400))
def test_400(serve, echo_app, data):
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, data, 400)


@pytest.mark.parametrize("data, status", list(BAD_OTHER.values()), ids=list(BAD_OTHER))
def test_501_505(serve, echo_app, data, status):
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, data, status)


# -- 413: content over limit_request_body ------------------------------------------------------


def test_413_content_length_over_limit(serve, echo_app):
    """Config limit_request_body=10: a declared Content-Length of 11 is refused from the head."""
    with serve(echo_app, limit_request_body=10) as srv:
        assert_refused(srv, echo_app, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n", 413)


def test_413_limit_itself_accepted(serve, echo_app):
    with serve(echo_app, limit_request_body=10) as srv:
        c = srv.connect()
        r = c.request(http_request("POST", "/", body=b"0123456789"))
        assert (r.status, r.body) == (200, b"0123456789")


# -- 414: request-target longer than 8190 bytes -------------------------------------------------


def test_414_target_limit_boundary(serve, echo_app):
    """The limit counts the bytes of the request-target: 8190 accepted, 8191 refused."""
    at_limit = "/" + "a" * 8189
    with serve(echo_app) as srv:
        c = srv.connect()
        r = c.request(http_request("GET", at_limit))
        assert r.status == 200
        assert echo_app.calls.wait(1)[0]["scope"]["raw_path"] == at_limit.encode()
    echo_app.calls = Recorder()
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, http_request("GET", at_limit + "a"), 414)


def test_414_long_query_counts(serve, echo_app):
    """The query is part of the request-target."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, http_request("GET", "/?" + "q" * 8189), 414)


# -- 431: field section too large ---------------------------------------------------------------


def fields(n: int) -> bytes:
    """A GET whose field section has exactly n field-lines (Host included)."""
    return b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-F%d: v\r\n" % i for i in range(n - 1)) + b"\r\n"


def test_431_field_count_boundary(serve, echo_app):
    """100 field-lines accepted, 101 refused (limit_request_fields=100)."""
    with serve(echo_app) as srv:
        c = srv.connect()
        assert c.request(fields(100)).status == 200
        assert len(echo_app.calls.wait(1)[0]["scope"]["headers"]) == 100
    echo_app.calls = Recorder()
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, fields(101), 431)


def big_field_section(total: int) -> bytes:
    """A GET whose field names plus values (the quantity sk_http.h limits) total `total` bytes:
    "Host"+"x" (5) plus X-Big (5) and a value of total - 10 bytes."""
    return b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"v" * (total - 10) + b"\r\n\r\n"


def test_431_field_section_size_boundary(serve, echo_app):
    """limit_request_field_size=65536 bytes of field names plus values (sk_http.h
    max_field_section): exactly 65536 accepted, 65537 refused."""
    with serve(echo_app) as srv:
        c = srv.connect()
        assert c.request(big_field_section(65536)).status == 200
    echo_app.calls = Recorder()
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, big_field_section(65537), 431)


def test_431_field_section_far_over(serve, echo_app):
    """Many ordinary fields adding up to well over 64 KiB."""
    data = b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(
        b"X-F%d: %s\r\n" % (i, b"v" * 1000) for i in range(80)
    ) + b"\r\n"
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, data, 431)


# -- refusals after good requests on the same connection ---------------------------------------


@pytest.mark.parametrize(
    "bad, status",
    [
        (b"GET / HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/1.2\r\n" + H + b"\r\n", 505),
        (b"FOO / HTTP/1.1\r\n" + H + b"\r\n", 501),
    ],
    ids=["400", "505", "501"],
)
def test_refusal_pipelined_after_good_request(serve, echo_app, bad, status):
    """The good request is answered first, then the refusal, then the connection closes."""
    with serve(echo_app) as srv:
        c = srv.connect()
        c.send(http_request("GET", "/good") + bad)
        r1 = c.response()
        assert (r1.status, r1.get(b"x-target")) == (200, b"/good")
        r2 = c.response()
        assert r2.status == status
        assert r2.get(b"connection") == b"close"
        c.expect_eof()
        assert [x["scope"]["path"] for x in echo_app.calls.wait(1)] == ["/good"]


def test_refusal_on_second_request_of_keep_alive(serve, echo_app):
    """A bad request in a later write on a kept-alive connection."""
    with serve(echo_app) as srv:
        c = srv.connect()
        assert c.request(http_request("GET", "/1")).status == 200
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n")
        r = c.response()
        assert r.status == 400 and r.get(b"connection") == b"close"
        c.expect_eof()
        assert len(echo_app.calls.items) == 1


def test_refusal_to_head_request_has_no_body(serve, echo_app):
    """HEAD with a bad field: the refusal keeps HEAD semantics (sk_resp_error head_request)."""
    with serve(echo_app) as srv:
        c = srv.connect()
        c.send(b"HEAD / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n")
        r = c.response("HEAD")
        assert r.status == 400 and r.body == b""
        c.expect_eof()
