"""Response framing (RFC 9112 §6.1-6.3, §7.1) and the server's own fields (RFC 9110 §6.6.1 Date,
§10.2.4 Server), as produced from the app's http.response.start / http.response.body events.
"""
import re

import pytest

from conftest import Recorder, http_request

IMF_FIXDATE = re.compile(
    rb"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} "
    rb"\d\d:\d\d:\d\d GMT"
)


def scripted(status: int, headers: list, bodies: list, errors: Recorder = None):
    """An app that reads the whole request, then sends start(status, headers) and each
    (body, more_body) of bodies."""

    async def app(scope, receive, send):
        while True:
            msg = await receive()
            if not msg.get("more_body"):
                break
        try:
            await send({"type": "http.response.start", "status": status, "headers": headers})
            for body, more in bodies:
                await send({"type": "http.response.body", "body": body, "more_body": more})
        except Exception as e:  # pragma: no cover - recorded for the assertion
            if errors is not None:
                errors.put(e)
            raise

    return app


def head_fields(head: bytes) -> list:
    """[(lower name, value)] of a raw response head (status-line excluded)."""
    lines = head.rstrip(b"\r\n").split(b"\r\n")[1:]
    out = []
    for line in lines:
        name, _, value = line.partition(b":")
        out.append((name.strip().lower(), value.strip()))
    return out


@pytest.mark.rule("RFC9112-6.3-response-app-content-length")
def test_app_content_length_used_as_is(serve):
    app = scripted(200, [(b"content-length", b"5")], [(b"hel", True), (b"lo", False)])
    with serve(app) as srv:
        c = srv.connect()
        r = c.request(http_request())
        assert r.status == 200
        assert r.get_all(b"content-length") == [b"5"]
        assert r.get(b"transfer-encoding") is None
        assert r.body == b"hello"
        assert c.request(http_request()).body == b"hello"


@pytest.mark.rule("skirr-resp-single-event-content-length")
@pytest.mark.parametrize("body", [b"", b"hello world", b"x" * 100_000])
def test_single_body_event_gets_content_length(serve, body):
    app = scripted(200, [(b"content-type", b"text/plain")], [(body, False)])
    with serve(app) as srv:
        c = srv.connect()
        r = c.request(http_request())
        assert r.status == 200
        assert r.get_all(b"content-length") == [str(len(body)).encode()]
        assert r.get(b"transfer-encoding") is None
        assert r.body == body
        assert c.request(http_request()).status == 200


@pytest.mark.rule("RFC9112-7.1-response-chunked", "skirr-resp-empty-event-no-chunk")
def test_streaming_http11_is_chunked_exact_bytes(serve):
    """Several body events, no content-length, HTTP/1.1: chunked; an empty non-final event
    writes nothing (a zero-size chunk would end the message); the final empty event writes the
    last-chunk."""
    app = scripted(
        200, [], [(b"hello", True), (b"", True), (b" world", True), (b"", False)]
    )
    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        head = c.read_until(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        fields = head_fields(head)
        assert [v for n, v in fields if n == b"transfer-encoding"] == [b"chunked"]
        assert [v for n, v in fields if n == b"content-length"] == []
        body = c.read_until(b"0\r\n\r\n")
        assert body == b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        r = c.request(http_request())  # nothing stray between the two responses
        assert r.status == 200 and r.body == b"hello world"


@pytest.mark.rule("RFC9112-7.1-response-chunked")
def test_streaming_final_event_with_data_exact_bytes(serve):
    app = scripted(200, [], [(b"ab", True), (b"cd", False)])
    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        c.read_until(b"\r\n\r\n")
        assert c.read_until(b"0\r\n\r\n") == b"2\r\nab\r\n2\r\ncd\r\n0\r\n\r\n"


@pytest.mark.rule("RFC9112-7.1-response-chunked")
def test_streaming_large_chunks(serve):
    parts = [bytes([65 + i]) * (10_000 + i * 4097) for i in range(6)]
    app = scripted(200, [], [(p, True) for p in parts] + [(b"", False)])
    with serve(app) as srv:
        c = srv.connect()
        r = c.request(http_request())
        assert r.get(b"transfer-encoding") == b"chunked"
        assert r.body == b"".join(parts)


@pytest.mark.rule("RFC9112-6.3-response-http10-close-delimited")
@pytest.mark.parametrize("keep_alive", [False, True])
def test_streaming_http10_is_close_delimited(serve, keep_alive):
    """HTTP/1.0 has no chunked coding: the body is delimited by closing the connection (RFC 9112
    §6.3 rule 8), even when the client asked for keep-alive."""
    app = scripted(200, [], [(b"hello", True), (b" world", True), (b"", False)])
    req = b"GET / HTTP/1.0\r\n" + (b"Connection: keep-alive\r\n" if keep_alive else b"") + b"\r\n"
    with serve(app) as srv:
        c = srv.connect()
        c.send(req)
        raw = c.read_until_close()
        head, _, body = raw.partition(b"\r\n\r\n")
        fields = head_fields(head + b"\r\n\r\n")
        assert [n for n, v in fields if n in (b"transfer-encoding", b"content-length")] == []
        assert [v for n, v in fields if n == b"connection"] in ([], [b"close"])
        assert body == b"hello world"


@pytest.mark.rule("RFC9110-9.3.2-head-no-content")
def test_head_has_headers_no_body(serve):
    """HEAD: the app's content-length goes out, its body does not (RFC 9110 §9.3.2); the next
    request on the connection is answered."""
    app = scripted(200, [(b"content-length", b"5")], [(b"hello", False)])
    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request("HEAD") + http_request("GET"))
        head = c.read_until(b"\r\n\r\n")
        assert [v for n, v in head_fields(head) if n == b"content-length"] == [b"5"]
        r = c.response()  # parse fails if any body byte of the HEAD response leaked
        assert (r.status, r.body) == (200, b"hello")


@pytest.mark.rule("RFC9110-9.3.2-head-no-content")
@pytest.mark.parametrize(
    "headers, bodies",
    [
        ([], [(b"hello", False)]),
        ([], [(b"hel", True), (b"lo", True), (b"", False)]),
    ],
    ids=["single", "streaming"],
)
def test_head_without_app_length_no_body(serve, headers, bodies):
    app = scripted(200, headers, bodies)
    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request("HEAD") + http_request("GET"))
        r1 = c.response("HEAD")
        assert (r1.status, r1.body) == (200, b"")
        r2 = c.response()
        assert (r2.status, r2.body) == (200, b"hello")


@pytest.mark.rule("RFC9110-15.3.5-204-304-no-content", "RFC9110-8.6-no-content-length-in-204")
@pytest.mark.parametrize("status", [204, 304])
@pytest.mark.parametrize("body", [b"", b"ignored", b"i" * 20000], ids=["empty", "small", "20000"])
def test_204_304_no_body_connection_reusable(serve, status, body):
    """204 and 304 never have content (RFC 9110 §15.3.5, §15.4.5): no chunked framing, no body
    bytes (the app's are dropped, 16 KiB or more too, which skirr would otherwise send from the
    app's object), and 204 has no content-length (RFC 9110 §8.6)."""
    app = scripted(status, [(b"etag", b'"v1"')], [(body, False)])
    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request() + http_request())
        head = c.read_until(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 %d " % status)
        fields = head_fields(head)
        assert [n for n, v in fields if n == b"transfer-encoding"] == []
        if status == 204:
            assert [n for n, v in fields if n == b"content-length"] == []
        assert [v for n, v in fields if n == b"etag"] == [b'"v1"']
        nxt = c.read_exact(9)
        assert nxt == b"HTTP/1.1 ", f"bytes after a {status} head: {nxt!r}"
        c.buf = nxt + c.buf
        r = c.response()
        assert r.status == status and r.body == b""


@pytest.mark.rule("RFC9110-6.6.1-date", "RFC9110-10.2.4-server")
def test_date_and_server_fields_once(serve):
    app = scripted(200, [(b"content-type", b"text/plain")], [(b"x", False)])
    with serve(app) as srv:
        c = srv.connect()
        r = c.request(http_request())
        dates = r.get_all(b"date")
        assert len(dates) == 1 and IMF_FIXDATE.fullmatch(dates[0]), dates
        assert r.get_all(b"server") == [b"skirr"]


@pytest.mark.rule("skirr-resp-app-date-server")
def test_app_server_and_date_replace_the_servers(serve):
    app = scripted(
        200,
        [(b"server", b"mine/1.0"), (b"date", b"Tue, 01 Jan 2030 00:00:00 GMT")],
        [(b"x", False)],
    )
    with serve(app) as srv:
        r = srv.get()
        assert r.get_all(b"server") == [b"mine/1.0"]
        assert r.get_all(b"date") == [b"Tue, 01 Jan 2030 00:00:00 GMT"]


@pytest.mark.rule("skirr-resp-app-headers-as-given")
def test_app_headers_order_and_duplicates_kept(serve):
    headers = [
        (b"set-cookie", b"a=1"),
        (b"x-one", b"1"),
        (b"set-cookie", b"b=2"),
        (b"content-type", b"text/plain; charset=utf-8"),
    ]
    app = scripted(200, headers, [(b"x", False)])
    with serve(app) as srv:
        r = srv.get()
        mine = [(n, v) for n, v in r.headers if n in (b"set-cookie", b"x-one", b"content-type")]
        assert mine == headers


@pytest.mark.rule("skirr-resp-status-pass-through")
@pytest.mark.parametrize("status", [201, 299, 404, 418, 503, 599])
def test_status_codes_pass_through(serve, status):
    app = scripted(status, [], [(b"s", False)])
    with serve(app) as srv:
        c = srv.connect()
        r = c.request(http_request())
        assert (r.status, r.body) == (status, b"s")


@pytest.mark.rule("skirr-resp-app-transfer-encoding")
def test_app_transfer_encoding_chunked_not_doubled(serve):
    """The app names transfer-encoding: chunked itself: the body is chunked once, the field
    appears once."""
    app = scripted(200, [(b"transfer-encoding", b"chunked")], [(b"ab", True), (b"cd", False)])
    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        head = c.read_until(b"\r\n\r\n")
        assert [v for n, v in head_fields(head) if n == b"transfer-encoding"] == [b"chunked"]
        assert c.read_until(b"0\r\n\r\n") == b"2\r\nab\r\n2\r\ncd\r\n0\r\n\r\n"
        assert c.request(http_request()).body == b"abcd"


@pytest.mark.rule("RFC9112-9.6-app-connection-close")
def test_app_connection_close_closes(serve):
    """The app sends connection: close: the server closes after the response."""
    app = scripted(200, [(b"connection", b"close")], [(b"bye", False)])
    with serve(app) as srv:
        c = srv.connect()
        r = c.request(http_request())
        assert (r.status, r.body) == (200, b"bye")
        assert r.get_all(b"connection") == [b"close"]
        c.expect_eof()


# -- more of the response head -------------------------------------------------------------------


@pytest.mark.rule("RFC9110-6.6.1-date-fresh")
def test_date_is_the_current_time_on_every_response(serve):
    """RFC 9110 §6.6.1: an origin server with a clock MUST send Date, its best approximation of
    the time the response was generated: within a second or two of the client's clock on each
    response, and later on a response generated later."""
    import email.utils
    import time as _time

    app = scripted(200, [], [(b"x", False)])
    with serve(app) as srv:
        c = srv.connect()
        dates = []
        for _ in range(2):
            r = c.request(http_request())
            when = email.utils.parsedate_to_datetime(r.get(b"date").decode()).timestamp()
            assert abs(when - _time.time()) <= 2.0, (r.get(b"date"), _time.time())
            dates.append(when)
            _time.sleep(1.2)
        assert dates[1] > dates[0], dates


@pytest.mark.rule("RFC9112-4-status-line")
@pytest.mark.parametrize(
    "status, line",
    [(200, b"HTTP/1.1 200 OK\r\n"), (404, b"HTTP/1.1 404 Not Found\r\n"),
     (429, b"HTTP/1.1 429 Too Many Requests\r\n"), (418, b"HTTP/1.1 418 \r\n"),
     (299, b"HTTP/1.1 299 \r\n"), (599, b"HTTP/1.1 599 \r\n")],
    ids=["200", "404", "429", "418-unused", "unregistered-2xx", "unregistered-5xx"],
)
def test_status_line_exact(serve, status, line):
    """status-line = HTTP-version SP status-code SP [ reason-phrase ] (RFC 9112 §4): skirr sends
    HTTP/1.1, the code, and the registered reason phrase; an unregistered code gets an empty
    reason (the SP before it stays)."""
    app = scripted(status, [], [(b"x", False)])
    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        assert c.read_until(b"\r\n") == line


@pytest.mark.rule("RFC9110-6.2-response-version-1.1")
def test_http10_request_gets_http11_status_line(serve):
    """RFC 9110 §6.2: a server sends the highest minor version it conforms to, so an HTTP/1.0
    request is answered "HTTP/1.1 ..." (framed so a 1.0 client can read it: no chunked)."""
    app = scripted(200, [], [(b"hello", False)])
    with serve(app) as srv:
        c = srv.connect()
        c.send(b"GET / HTTP/1.0\r\n\r\n")
        raw = c.read_until_close()
        assert raw.startswith(b"HTTP/1.1 200 OK\r\n"), raw[:100]
        assert raw.endswith(b"\r\n\r\nhello")


@pytest.mark.rule("RFC9110-9.3.2-head-no-content")
@pytest.mark.parametrize("size", [5, 16 * 1024 - 1, 16 * 1024, 1024 * 1024])
def test_head_single_event_sends_no_content_length(serve, size):
    """HEAD and a single body event without an app Content-Length: no body and no framing
    field (RFC 9110 §9.3.2 lets the server omit Content-Length for HEAD), whatever the body's
    size (from 16 KiB skirr sends a GET's body from the app's object); the next response on the
    connection is intact."""
    body = (b"hello" * (size // 5 + 1))[:size]
    app = scripted(200, [(b"x-a", b"1")], [(body, False)])
    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request("HEAD") + http_request())
        head = c.read_until(b"\r\n\r\n")
        names = [n for n, _ in head_fields(head)]
        assert b"content-length" not in names and b"transfer-encoding" not in names, head
        assert b"x-a" in names
        r = c.response()
        assert (r.status, r.body == body) == (200, True)


@pytest.mark.rule("RFC9110-15.4.5-304-content-length-kept")
def test_304_keeps_the_apps_content_length(serve):
    """RFC 9110 §8.6: a 304 MAY carry the Content-Length the 200 would have had; skirr passes the
    app's value and sends no content, and the next response is intact."""
    app = scripted(304, [(b"content-length", b"10")], [(b"", False)])
    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request() + http_request())
        head = c.read_until(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 304 Not Modified\r\n")
        assert [v for n, v in head_fields(head) if n == b"content-length"] == [b"10"]
        assert c.read_exact(9) == b"HTTP/1.1 "


@pytest.mark.rule("skirr-resp-app-date-server")
def test_app_duplicate_date_and_server_passed_as_given(serve):
    """When the app names date or server itself, skirr adds neither and passes the app's
    field-lines as given, duplicates and name case included (the app owns them)."""
    headers = [(b"date", b"a"), (b"date", b"b"), (b"server", b"s1"), (b"Server", b"s2")]
    app = scripted(200, headers, [(b"x", False)])
    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request())
        head = c.read_until(b"\r\n\r\n")
        lines = head.split(b"\r\n")[1:-2]
        assert [ln for ln in lines if ln.lower().startswith((b"date:", b"server:"))] == [
            b"date: a", b"date: b", b"server: s1", b"Server: s2"]


@pytest.mark.rule("ASGI-www-send-status-final")
@pytest.mark.parametrize("status", [100, 101, 103, 199])
def test_informational_status_from_start_is_rejected(serve, status):
    """http.response.start carries the final response: a 1xx status (interim responses are not
    part of ASGI http 2.5, and 101 would announce a protocol switch skirr never makes) is
    rejected like any status outside 200..599 before a byte is written: the app's send raises
    and the client gets a 500 for this request, so the next response stays paired with the next
    request."""
    errors = Recorder()
    app = scripted(status, [], [(b"x", False)], errors)
    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request("GET", "/1xx"))
        r = c.response(allow_incomplete=True)
        assert r.informational == [], r.raw[:200]
        assert r.status == 500, r.raw[:200]
        assert errors.wait(1)


@pytest.mark.rule("RFC9110-15.3.6-205-no-content")
@pytest.mark.parametrize(
    "headers, bodies",
    [([], [(b"hello", False)]), ([(b"content-length", b"5")], [(b"hello", False)]),
     ([(b"transfer-encoding", b"chunked")], [(b"hel", True), (b"lo", False)]),
     ([], [(b"hel", True), (b"lo", True), (b"", False)]), ([], [(b"", False)])],
    ids=["single-event", "app-content-length", "app-chunked", "streamed", "empty"],
)
@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_205_has_no_content_and_says_length_zero(serve, headers, bodies, method):
    """Issue 11 item 4: 205 Reset Content MUST NOT have content (RFC 9110 §15.3.6): exactly one
    'content-length: 0', no transfer-encoding, no body byte; the next response follows."""
    app = scripted(205, headers + [(b"x-a", b"1")], bodies)
    with serve(app) as srv:
        c = srv.connect()
        c.send(http_request(method) + http_request())
        head = c.read_until(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 205 Reset Content\r\n"), head
        fields = head_fields(head)
        assert [v for n, v in fields if n == b"content-length"] == [b"0"]
        assert [n for n, v in fields if n in (b"transfer-encoding", b"connection")] == []
        assert [v for n, v in fields if n == b"x-a"] == [b"1"]
        nxt = c.read_exact(9)
        assert nxt == b"HTTP/1.1 ", f"bytes after a 205 head: {nxt!r}"
