"""One reason phrase per status (issue 36 item 8; rule skirr-status-one-phrase).

Every phrase skirr writes comes from one table, the C core's (``sk_resp_reason_phrase``): the
status line, the body of skirr's own refusals, and the default access log line. The table is
checked against RFC 9110 §15 (and the IANA registry for the codes RFC 9110 does not define),
written out here; then every status skirr sends itself is checked on the wire and in its access
line, and so is each status whose phrase RFC 9110 changed (Python's ``http.HTTPStatus`` keeps the
old ones before 3.13: 413 "Request Entity Too Large"). Every case runs on asyncio and uvloop.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from _ws import WS_CLOSE_1000, ws_app, ws_upgrade
from conftest import IO_TIMEOUT, http_request

# RFC 9110 §15: every status code it defines, with its reason phrase (306 and 418 are unused).
RFC9110 = {
    100: "Continue", 101: "Switching Protocols",
    200: "OK", 201: "Created", 202: "Accepted", 203: "Non-Authoritative Information",
    204: "No Content", 205: "Reset Content", 206: "Partial Content",
    300: "Multiple Choices", 301: "Moved Permanently", 302: "Found", 303: "See Other",
    304: "Not Modified", 305: "Use Proxy", 307: "Temporary Redirect", 308: "Permanent Redirect",
    400: "Bad Request", 401: "Unauthorized", 402: "Payment Required", 403: "Forbidden",
    404: "Not Found", 405: "Method Not Allowed", 406: "Not Acceptable",
    407: "Proxy Authentication Required", 408: "Request Timeout", 409: "Conflict", 410: "Gone",
    411: "Length Required", 412: "Precondition Failed", 413: "Content Too Large",
    414: "URI Too Long", 415: "Unsupported Media Type", 416: "Range Not Satisfiable",
    417: "Expectation Failed", 421: "Misdirected Request", 422: "Unprocessable Content",
    426: "Upgrade Required",
    500: "Internal Server Error", 501: "Not Implemented", 502: "Bad Gateway",
    503: "Service Unavailable", 504: "Gateway Timeout", 505: "HTTP Version Not Supported",
}
# The IANA HTTP Status Code Registry's codes that RFC 9110 does not define (other RFCs').
IANA_OTHERS = {
    102: "Processing", 103: "Early Hints", 207: "Multi-Status", 208: "Already Reported",
    226: "IM Used", 423: "Locked", 424: "Failed Dependency", 425: "Too Early",
    428: "Precondition Required", 429: "Too Many Requests",
    431: "Request Header Fields Too Large", 451: "Unavailable For Legal Reasons",
    506: "Variant Also Negotiates", 507: "Insufficient Storage", 508: "Loop Detected",
    510: "Not Extended", 511: "Network Authentication Required",
}

PHRASES = {**RFC9110, **IANA_OTHERS}


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.cond = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self.cond:
            self.lines.append(record.getMessage())
            self.cond.notify_all()

    def wait(self, n: int) -> list[str]:
        deadline = time.monotonic() + IO_TIMEOUT
        with self.cond:
            while len(self.lines) < n:
                left = deadline - time.monotonic()
                assert left > 0, f"expected {n} access line(s), got {self.lines}"
                self.cond.wait(left)
            return list(self.lines)


@pytest.fixture
def access():
    logger = logging.getLogger("skirr.access")
    cap = _Lines()
    logger.addHandler(cap)
    yield cap
    logger.removeHandler(cap)


def _addr(c) -> str:
    host, port = c.sock.getsockname()[:2]
    return f"{host}:{port}"


def _split(raw: bytes) -> tuple[bytes, bytes]:
    """(status line, body) of one whole response read to the close."""
    head, _, body = raw.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0], body


async def app(scope, receive, send):
    """GET /status/N answers N with body "x"; /raise raises before answering."""
    while (await receive()).get("more_body"):
        pass
    if scope["path"] == "/raise":
        raise RuntimeError("app failed")
    status = int(scope["path"].rsplit("/", 1)[1]) if scope["path"].startswith("/status/") else 200
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", b"1")]})
    await send({"type": "http.response.body", "body": b"x"})


@pytest.mark.rule("skirr-status-one-phrase")
def test_the_one_table_is_rfc9110s():
    from skirr import _native
    from skirr.access import status_text

    assert _native.reason_phrases() == PHRASES
    # The access log reads the same table, on every Python version.
    for status, phrase in PHRASES.items():
        assert status_text(status) == f"{status} {phrase}"
    assert [status_text(s) for s in (306, 418, 299, 599)] == ["306", "418", "299", "599"]


# (request bytes, config, status, the access line's request line, refusal reason or None)
REFUSALS = [
    pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n", {}, 400, "-",
                 "Invalid header token", id="400"),
    pytest.param(http_request("POST", "/up", body=b"x" * 100), {"limit_request_body": 10}, 413,
                 "POST /up HTTP/1.1", "content too large", id="413"),
    pytest.param(b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", {}, 414, "-",
                 "request-target too long", id="414"),
    pytest.param(b"GET ftp://x/f HTTP/1.1\r\nHost: x\r\n\r\n", {}, 421, "GET ftp://x/f HTTP/1.1",
                 "request-target scheme other than http or https", id="421"),
    pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(120))
                 + b"\r\n", {}, 431, "-", "too many header fields", id="431"),
    pytest.param(http_request("GET", "/raise"), {}, 500, "GET /raise HTTP/1.1", None, id="500"),
    pytest.param(b"BREW / HTTP/1.1\r\nHost: x\r\n\r\n", {}, 501, "-", "Invalid method encountered",
                 id="501"),
    pytest.param(b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", {}, 505, "-", "HTTP version not supported",
                 id="505"),
    pytest.param(b"GET / HTTP/1.1\r\nHost", {"timeout_request_head": 1}, 408, "-",
                 "request head not complete in time", id="408"),
]


@pytest.mark.rule("skirr-status-one-phrase")
@pytest.mark.parametrize("data, config, status, line, reason", REFUSALS)
def test_refusal_names_its_status_once(serve, access, data, config, status, line, reason):
    phrase = PHRASES[status]
    with serve(app, **config) as srv:
        c = srv.connect()
        a = _addr(c)
        c.send(data)
        status_line, body = _split(c.read_until_close())
        lines = access.wait(1)
    assert status_line == f"HTTP/1.1 {status} {phrase}".encode()
    assert body == phrase.encode()
    suffix = f" (refused: {reason})" if reason else ""
    assert lines == [f'{a} - "{line}" {status} {phrase}{suffix}']


@pytest.mark.rule("skirr-status-one-phrase")
def test_503_over_capacity_names_its_status_once(serve, access):
    release = threading.Event()
    entered = threading.Event()

    async def slow(scope, receive, send):
        entered.set()
        while not release.is_set():
            await asyncio.sleep(0.01)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    with serve(slow, limit_concurrency=1) as srv:
        first = srv.connect()
        first.send(http_request("GET", "/first"))
        assert entered.wait(IO_TIMEOUT)  # /first is in flight: the one place is taken
        c = srv.connect()
        a = _addr(c)
        c.send(http_request("GET", "/second"))
        status_line, body = _split(c.read_until_close())
        release.set()
        assert first.response().status == 200
        lines = access.wait(2)
    assert (status_line, body) == (b"HTTP/1.1 503 Service Unavailable", b"Service Unavailable")
    assert lines[0] == (f'{a} - "GET /second HTTP/1.1" 503 Service Unavailable '
                        "(refused: --limit-concurrency reached)")


@pytest.mark.rule("skirr-status-one-phrase")
@pytest.mark.parametrize("status", [200, 404, 413, 414, 416, 422, 431, 418, 299])
def test_app_status_has_the_same_phrase_on_the_wire_and_in_the_log(serve, access, status):
    """Where RFC 9110 renamed a status (413, 414, 416, 422) the app's response and its access
    line both say the new name; a code without one has an empty reason in the status line (RFC
    9112 §4) and the number alone in the log."""
    phrase = PHRASES.get(status, "")
    with serve(app) as srv:
        c = srv.connect()
        a = _addr(c)
        c.send(http_request("GET", f"/status/{status}"))
        assert c.read_until(b"\r\n") == f"HTTP/1.1 {status} {phrase}\r\n".encode()
        lines = access.wait(1)
    assert lines == [f'{a} - "GET /status/{status} HTTP/1.1" {status} {phrase}'.rstrip()]


@pytest.mark.rule("skirr-status-one-phrase")
def test_100_continue_status_line(serve):
    async def reader(scope, receive, send):
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    with serve(reader) as srv:
        c = srv.connect()
        a = _addr(c)
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
        assert c.read_until(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        c.send(b"ok")
        assert c.read_until(b"\r\n") == b"HTTP/1.1 200 OK\r\n"


@pytest.mark.rule("skirr-status-one-phrase")
@pytest.mark.parametrize("target, version, status, line", [
    ("/chat", b"13", 101, None),
    ("/deny", b"13", 403, '"WebSocket /deny" 403'),
    ("/fail", b"13", 500, '"WebSocket /fail" 500'),
    ("/chat", b"8", 426, '"GET /chat HTTP/1.1" 426 Upgrade Required (refused: WebSocket '
                         'handshake: Sec-WebSocket-Version is not 13 (RFC 6455 §4.4))'),
])
def test_websocket_answers_name_their_status_once(serve, access, target, version, status, line):
    """The handshake's answers: status lines and refusal bodies from the one table; the access
    line in uvicorn's words for a WebSocket ([accepted], or the status alone when the app
    denied it), with the phrase for a refusal."""
    phrase = PHRASES[status]
    with serve(ws_app) as srv:
        c = srv.connect()
        a = _addr(c)
        c.send(ws_upgrade(target, version=version))
        if status == 101:
            assert c.read_until(b"\r\n\r\n").startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
            c.send(WS_CLOSE_1000)
            c.read_until_close()
        else:
            status_line, body = _split(c.read_until_close())
            assert (status_line, body) == (f"HTTP/1.1 {status} {phrase}".encode(), phrase.encode())
        lines = access.wait(1)
    expected = '"WebSocket /chat" [accepted]' if status == 101 else line
    assert lines == [f"{a} - {expected}"]
