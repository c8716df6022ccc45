"""Validation of the app's send() messages (ASGI www 2.5 "Response Start", "Response Body"; issue 2
§4): out-of-order or malformed messages raise RuntimeError/TypeError in the app, nothing invalid
reaches the wire, and a response that does not match its Content-Length is never sent as if it
were complete.
"""
import time

import pytest

from conftest import Recorder, http_request

START = {"type": "http.response.start", "status": 200, "headers": []}


def body(data: bytes, more: bool = False) -> dict:
    return {"type": "http.response.body", "body": data, "more_body": more}


def run_steps(steps, seen: Recorder, reraise: bool = True):
    """An app that sends `steps` in order, recording ("ok", i) or ("raised", i, exc) per step;
    after the first failure it re-raises (or returns, if reraise is False)."""

    async def app(scope, receive, send):
        await receive()
        for i, msg in enumerate(steps):
            try:
                await send(msg)
            except BaseException as e:
                seen.put(("raised", i, e))
                if reraise:
                    raise
                return
            seen.put(("ok", i))
        seen.put(("done",))

    return app


def wait_outcome(seen: Recorder, timeout: float = 5.0) -> list:
    """Waits until the app recorded a failure or finished; returns everything it recorded."""
    deadline = time.monotonic() + timeout
    while True:
        items = seen.items
        if any(x[0] in ("raised", "done") for x in items):
            return items
        if time.monotonic() > deadline:
            raise AssertionError(f"app neither failed nor finished: {items!r}")
        time.sleep(0.01)


def raised(seen: Recorder) -> tuple:
    items = wait_outcome(seen)
    for x in items:
        if x[0] == "raised":
            return x[1], x[2]
    raise AssertionError(f"no send raised: {items!r}")


def assert_500(r):
    assert r.status == 500, f"expected 500, got {r.status}: {r.raw[:300]!r}"
    assert r.complete and r.body != b""
    assert (r.get(b"content-type") or b"").startswith(b"text/plain"), r.headers


def assert_not_a_complete_success(r):
    """Either a 500 or no complete response at all: never a complete message with the app's
    status."""
    if r.complete:
        assert r.status == 500, f"a complete {r.status} went out: {r.raw[:300]!r}"


def exchange(srv, method="GET"):
    c = srv.connect()
    c.send(http_request(method))
    return c, c.response(method, allow_incomplete=True)


# -- order ------------------------------------------------------------------------------------


@pytest.mark.rule("ASGI-www-send-order")
def test_body_before_start(serve):
    seen = Recorder()
    with serve(run_steps([body(b"x")], seen)) as srv:
        c, r = exchange(srv)
        i, e = raised(seen)
        assert (i, type(e)) == (0, RuntimeError)
        assert_500(r)


@pytest.mark.rule("ASGI-www-send-order")
def test_start_twice(serve):
    seen = Recorder()
    with serve(run_steps([START, START, body(b"x")], seen)) as srv:
        c, r = exchange(srv)
        i, e = raised(seen)
        assert (i, type(e)) == (1, RuntimeError)
        assert_not_a_complete_success(r)


@pytest.mark.rule("ASGI-www-send-after-complete")
@pytest.mark.parametrize("extra", [body(b"more"), body(b""), START], ids=["body", "empty-body", "start"])
def test_message_after_final_body(serve, extra):
    """The response was complete; the extra message raises and nothing more goes out."""
    seen = Recorder()
    with serve(run_steps([START, body(b"done"), extra], seen)) as srv:
        c, r = exchange(srv)
        i, e = raised(seen)
        assert (i, type(e)) == (2, RuntimeError)
        assert (r.status, r.body, r.complete) == (200, b"done", True)
        assert c.read_for(0.3) == b"", "bytes after the complete response"


@pytest.mark.rule("ASGI-www-send-unknown-type")
def test_unknown_message_type(serve):
    seen = Recorder()
    with serve(run_steps([{"type": "http.response.bogus"}], seen)) as srv:
        c, r = exchange(srv)
        i, e = raised(seen)
        assert (i, type(e)) == (0, RuntimeError)
        assert_500(r)


# -- types and values -------------------------------------------------------------------------


@pytest.mark.rule("ASGI-www-send-types")
@pytest.mark.parametrize(
    "headers",
    [
        [("content-type", b"text/plain")],
        [(b"content-type", "text/plain")],
        [(b"x-number", 1)],
        [(None, b"v")],
    ],
    ids=["str-name", "str-value", "int-value", "none-name"],
)
def test_header_not_bytes_is_type_error(serve, headers):
    seen = Recorder()
    start = {"type": "http.response.start", "status": 200, "headers": headers}
    with serve(run_steps([start, body(b"x")], seen)) as srv:
        c, r = exchange(srv)
        i, e = raised(seen)
        assert (i, type(e)) == (0, TypeError)
        assert_500(r)


@pytest.mark.rule("ASGI-www-send-types")
def test_body_not_bytes_is_type_error(serve):
    seen = Recorder()
    with serve(run_steps([START, {"type": "http.response.body", "body": "text"}], seen)) as srv:
        c, r = exchange(srv)
        i, e = raised(seen)
        assert (i, type(e)) == (1, TypeError)
        assert_not_a_complete_success(r)


@pytest.mark.rule("RFC9110-5.5-response-fields-validated")
@pytest.mark.parametrize(
    "name, value",
    [
        (b"x-a", b"ok\r\nx-injected: 1"),
        (b"x-a", b"ok\nx-injected: 1"),
        (b"x-a", b"ok\rx-injected: 1"),
        (b"x-a", b"ok\x00x-injected: 1"),
        (b"x-injected: 1\r\nx-a", b"ok"),
        (b"x a", b"ok"),
        (b"", b"ok"),
    ],
    ids=["crlf-value", "lf-value", "cr-value", "nul-value", "crlf-name", "space-name", "empty-name"],
)
def test_invalid_header_rejected(serve, name, value):
    """RFC 9110 §5.5/§5.1: no CR, LF or NUL in values, names are tokens. send raises, the client
    gets a 500 and no injected field."""
    seen = Recorder()
    start = {"type": "http.response.start", "status": 200, "headers": [(name, value)]}
    with serve(run_steps([start, body(b"x")], seen)) as srv:
        c, r = exchange(srv)
        i, e = raised(seen)
        assert i == 0 and isinstance(e, Exception), e
        assert not isinstance(e, OSError), e
        assert_500(r)
        assert b"x-injected" not in r.raw.lower()


@pytest.mark.rule("ASGI-www-send-status-range")
@pytest.mark.parametrize("status", [99, 600, 1000, -200])
def test_status_out_of_range(serve, status):
    seen = Recorder()
    start = {"type": "http.response.start", "status": status, "headers": []}
    with serve(run_steps([start, body(b"x")], seen)) as srv:
        c, r = exchange(srv)
        i, e = raised(seen)
        assert i == 0 and isinstance(e, (RuntimeError, ValueError, TypeError)), e
        assert_500(r)


@pytest.mark.rule("ASGI-www-send-optional-keys", "skirr-resp-empty-final-body")
def test_minimal_messages_accepted(serve):
    """headers, body and more_body are optional (defaults [], b"", False)."""
    seen = Recorder()
    steps = [{"type": "http.response.start", "status": 200}, {"type": "http.response.body"}]
    with serve(run_steps(steps, seen)) as srv:
        c, r = exchange(srv)
        assert (r.status, r.body, r.complete) == (200, b"", True)
        assert r.get(b"content-length") == b"0"
        assert seen.wait(3) == [("ok", 0), ("ok", 1), ("done",)]


@pytest.mark.rule("ASGI-www-send-header-iterables")
def test_header_pairs_as_lists_accepted(serve):
    """headers is an iterable of [name, value] pairs: lists work as well as tuples."""
    seen = Recorder()
    start = {"type": "http.response.start", "status": 200, "headers": [[b"x-a", b"1"], (b"x-b", b"2")]}
    with serve(run_steps([start, body(b"x")], seen)) as srv:
        c, r = exchange(srv)
        assert (r.status, r.get(b"x-a"), r.get(b"x-b"), r.body) == (200, b"1", b"2", b"x")


# -- Content-Length accounting ----------------------------------------------------------------

CL10 = {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"10")]}


@pytest.mark.rule("skirr-resp-content-length-too-long")
def test_content_length_too_long_after_head_sent(serve):
    """CL 10: 5 bytes go out (head on the wire), then 15 more: send raises RuntimeError and the
    connection closes with the message incomplete."""
    seen = Recorder()
    steps = [CL10, body(b"12345", True), body(b"6789012345", True), body(b"", False)]
    with serve(run_steps(steps, seen)) as srv:
        c, r = exchange(srv)
        i, e = raised(seen)
        assert (i, type(e)) == (2, RuntimeError)
        assert r.status == 200 and not r.complete, r
        assert len(r.body) <= 10
        assert c.eof


@pytest.mark.rule("skirr-resp-content-length-too-long")
def test_content_length_too_long_single_event(serve):
    """CL 10 and one final event of 20 bytes: RuntimeError; no complete 200 reaches the client."""
    seen = Recorder()
    with serve(run_steps([CL10, body(b"x" * 20)], seen)) as srv:
        c, r = exchange(srv)
        i, e = raised(seen)
        assert (i, type(e)) == (1, RuntimeError)
        assert_not_a_complete_success(r)


@pytest.mark.rule("skirr-resp-content-length-short")
def test_content_length_short_closes_incomplete(serve):
    """CL 10: 3 bytes, then a final event of 2: the connection closes, message incomplete."""
    seen = Recorder()
    steps = [CL10, body(b"abc", True), body(b"de", False)]
    with serve(run_steps(steps, seen, reraise=False)) as srv:
        c, r = exchange(srv)
        wait_outcome(seen)
        assert r.status == 200 and not r.complete, r
        assert r.body in (b"abc", b"abcde"), r.body
        assert c.eof


@pytest.mark.rule("skirr-resp-content-length-short")
def test_content_length_short_send_raises(serve):
    """The final event that leaves the body short is rejected with RuntimeError."""
    seen = Recorder()
    steps = [CL10, body(b"abc", True), body(b"de", False)]
    with serve(run_steps(steps, seen)) as srv:
        c, r = exchange(srv)
        i, e = raised(seen)
        assert (i, type(e)) == (2, RuntimeError)


@pytest.mark.rule("skirr-resp-content-length-short")
def test_content_length_short_single_event(serve):
    """CL 10 and one final event of 5 bytes: no complete 200."""
    seen = Recorder()
    with serve(run_steps([CL10, body(b"12345")], seen, reraise=False)) as srv:
        c, r = exchange(srv)
        wait_outcome(seen)
        assert_not_a_complete_success(r)


@pytest.mark.rule("skirr-resp-invalid-framing-fields")
@pytest.mark.parametrize(
    "headers",
    [
        [(b"content-length", b"abc")],
        [(b"content-length", b"-1")],
        [(b"content-length", b"1"), (b"content-length", b"2")],
        [(b"content-length", b"1"), (b"transfer-encoding", b"chunked")],
        [(b"transfer-encoding", b"gzip")],
    ],
    ids=["cl-not-number", "cl-negative", "cl-twice-different", "cl-and-te", "te-not-chunked"],
)
def test_invalid_framing_fields_rejected(serve, headers):
    """Framing the server cannot honour (RFC 9110 §8.6, RFC 9112 §6.1) is refused at send:
    the app gets an error and the client a 500, never a message with contradictory framing."""
    seen = Recorder()
    start = {"type": "http.response.start", "status": 200, "headers": headers}
    with serve(run_steps([start, body(b"x")], seen)) as srv:
        c, r = exchange(srv)
        i, e = raised(seen)
        assert i == 0 and isinstance(e, (RuntimeError, ValueError)), e
        assert_500(r)


@pytest.mark.rule("RFC9110-5.5-response-fields-validated")
@pytest.mark.parametrize(
    "name, value",
    [(b"x-a", b"a\x01b"), (b"x-a", b"a\x7fb"), (b"x-a", b"a\x1bb"), (b"x:a", b"v"), (b"x(a", b"v"),
     (b"x-\xe9", b"v")],
    ids=["soh-value", "del-value", "esc-value", "colon-name", "paren-name", "obs-text-name"],
)
def test_control_bytes_and_bad_names_rejected(serve, name, value):
    """Other control bytes in a value, and names with separators or bytes >= 0x80, are refused at
    http.response.start like CR/LF/NUL: the client gets a 500."""
    seen = Recorder()
    start = {"type": "http.response.start", "status": 200, "headers": [(name, value)]}
    with serve(run_steps([start, body(b"x")], seen)) as srv:
        c, r = exchange(srv)
        i, e = raised(seen)
        assert i == 0 and isinstance(e, Exception) and not isinstance(e, OSError), e
        assert_500(r)


@pytest.mark.rule("RFC9110-5.5-response-fields-validated")
@pytest.mark.parametrize("value", [b"a\tb", b"caf\xe9", b"", b"!~"], ids=["htab", "obs-text", "empty", "vchar"])
def test_valid_value_bytes_sent_as_given(serve, value):
    """HTAB inside a value, obs-text, an empty value: valid field values, sent as given."""
    seen = Recorder()
    start = {"type": "http.response.start", "status": 200, "headers": [(b"x-a", value)]}
    with serve(run_steps([start, body(b"x")], seen)) as srv:
        c = srv.connect()
        c.send(http_request())
        head = c.read_until(b"\r\n\r\n")
        assert b"\r\nx-a: " + value + b"\r\n" in head, head
