"""The access log (issue 13): one line per response and per refusal on ``skirr.access``, over real
sockets on both loops; exact text, JSON parsed back, gunicorn atoms, refusals with their reason."""
from __future__ import annotations

import json
import logging
import re
import threading
import time

import pytest

from _bench import BENCH, newest_verdict
from _ws import WS_CASES, ws_app, ws_exchange
from conftest import IO_TIMEOUT, http_request


class AccessCapture(logging.Handler):
    """Collects skirr.access records (attached before the server starts)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.cond = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self.cond:
            self.records.append(record)
            self.cond.notify_all()

    def wait(self, n: int = 1, timeout: float = IO_TIMEOUT) -> list[str]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.records) < n:
                left = deadline - time.monotonic()
                assert left > 0, f"expected {n} access line(s), got {self.lines()}"
                self.cond.wait(left)
            return self.lines()

    def lines(self) -> list[str]:
        return [r.getMessage() for r in self.records]


@pytest.fixture
def access():
    logger = logging.getLogger("skirr.access")
    cap = AccessCapture()
    logger.addHandler(cap)
    level = logger.level
    yield cap
    logger.removeHandler(cap)
    logger.setLevel(level)


async def app(scope, receive, send):
    """200 with x-out: o1, or the status in the path: /status/404; /raise raises."""
    while (await receive()).get("more_body"):
        pass
    path = scope["path"]
    if path == "/raise":
        raise RuntimeError("boom")
    status = int(path.rsplit("/", 1)[1]) if path.startswith("/status/") else 200
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain"), (b"x-out", b"o1")]})
    await send({"type": "http.response.body", "body": b"hello"})


def addr(c) -> str:
    host, port = c.sock.getsockname()[:2]
    return f"{host}:{port}"


@pytest.mark.rule("skirr-access-default-line")
def test_default_line(serve, access):
    with serve(app) as srv:
        c = srv.connect()
        c.addr = addr(c)
        assert c.request(http_request("GET", "/items?id=3")).status == 200
        assert c.request(http_request("POST", "/status/404", body=b"x")).status == 404
        assert c.request(http_request("GET", "/a%20b/%C3%A9")).status == 200
        lines = access.wait(3)
    a = c.addr
    assert lines == [
        f'{a} - "GET /items?id=3 HTTP/1.1" 200 OK',
        f'{a} - "POST /status/404 HTTP/1.1" 404 Not Found',
        f'{a} - "GET /a%20b/%C3%A9 HTTP/1.1" 200 OK',
    ]
    rec = access.records[0]
    assert rec.levelno == logging.INFO and rec.name == "skirr.access"
    assert (rec.client_addr, rec.request_line, rec.status_code) == (a, "GET /items?id=3 HTTP/1.1", 200)


@pytest.mark.rule("skirr-access-default-line")
def test_http10_head_and_root_path(serve, access):
    with serve(app, root_path="/api") as srv:
        c = srv.connect()
        c.addr = addr(c)
        assert c.request(http_request("HEAD", "/x", version="HTTP/1.0"), method="HEAD").status == 200
        lines = access.wait(1)
    assert lines == [f'{c.addr} - "HEAD /api/x HTTP/1.0" 200 OK']


@pytest.mark.rule("skirr-access-app-errors")
def test_app_error_logged_500(serve, access):
    with serve(app) as srv:
        c = srv.connect()
        c.addr = addr(c)
        assert c.request(http_request("GET", "/raise")).status == 500
        lines = access.wait(1)
    assert lines == [f'{c.addr} - "GET /raise HTTP/1.1" 500 Internal Server Error']


@pytest.mark.rule("skirr-access-app-errors")
@pytest.mark.parametrize("method,sent", [("GET", 21), ("HEAD", 0)])  # "Internal Server Error"
def test_app_error_500_bytes_are_its_content(serve, access, method, sent):
    """The 500 skirr sends for a failed app is logged with the content it carried, as a refusal."""
    with serve(app, access_log_format="%(s)s %(b)s %(B)s") as srv:
        c = srv.connect()
        c.send(http_request(method, "/raise"))
        raw = c.read_until_close()
        assert raw.startswith(b"HTTP/1.1 500 ")
        assert len(raw.split(b"\r\n\r\n", 1)[1]) == sent
        lines = access.wait(1)
    assert lines == [f"500 {sent or '-'} {sent}"]


REFUSALS = [
    # (request bytes, config, status, expected request line, reason)
    (b"GET / HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n", {}, 400, "-", "Invalid header token"),
    (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", {}, 505, "-", "HTTP version not supported"),
    (b"BREW / HTTP/1.1\r\nHost: x\r\n\r\n", {}, 501, "-",
     "Invalid method encountered"),
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", {}, 414, "-",
     "request-target too long"),
    (b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(120))
     + b"\r\n", {}, 431, "-", "too many header fields"),
    # The head was read whole but refused: the request line is known and logged.
    (http_request("POST", "/up", body=b"x" * 100), {"limit_request_body": 10}, 413,
     "POST /up HTTP/1.1", "content too large"),
    (b"GET /nohost?a=1 HTTP/1.1\r\n\r\n", {}, 400, "GET /nohost?a=1 HTTP/1.1",
     "HTTP/1.1 request without Host"),
    (b"GET ftp://x/f HTTP/1.1\r\nHost: x\r\n\r\n", {}, 421, "GET ftp://x/f HTTP/1.1",
     "request-target scheme other than http or https"),
]


@pytest.mark.rule("skirr-access-refusals")
@pytest.mark.parametrize("data,config,status,line,reason", REFUSALS,
                         ids=[str(r[2]) for r in REFUSALS])
def test_refusals_logged(serve, access, data, config, status, line, reason):
    from skirr.access import status_text

    with serve(app, **config) as srv:
        c = srv.connect()
        c.addr = addr(c)
        c.send(data)
        r = c.response(allow_incomplete=True)
        assert r.status == status
        lines = access.wait(1)
    assert lines == [f'{c.addr} - "{line}" {status_text(status)} (refused: {reason})']


@pytest.mark.rule("skirr-access-refusals")
def test_408_logged(serve, access):
    with serve(app, timeout_request_head=1) as srv:
        c = srv.connect()
        c.addr = addr(c)
        c.send(b"GET / HTTP/1.1\r\nHost")
        r = c.response(allow_incomplete=True)
        assert r.status == 408
        lines = access.wait(1)
    assert lines == [f'{c.addr} - "-" 408 Request Timeout (refused: request head not complete in '
                     f'time)']


@pytest.mark.rule("skirr-access-refusals")
def test_408_for_stalled_content_logged_as_content(serve, access):
    """--timeout-request-body: the 408 line names the request (its head was complete) and says
    the content, not the head, was not complete in time."""
    async def reader(scope, receive, send):
        while (await receive()).get("more_body"):
            pass

    with serve(reader, timeout_request_body=1) as srv:
        c = srv.connect()
        c.addr = addr(c)
        c.send(b"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 20\r\n\r\nabc")
        r = c.response(allow_incomplete=True)
        assert r.status == 408
        lines = access.wait(1)
    assert lines == [f'{c.addr} - "POST /up HTTP/1.1" 408 Request Timeout (refused: request '
                     f'content not complete in time)']


@pytest.mark.rule("skirr-access-refusals")
def test_503_logged(serve, access):
    import asyncio

    release = threading.Event()
    entered = threading.Event()

    async def slow(scope, receive, send):
        entered.set()
        while not release.is_set():
            await asyncio.sleep(0.01)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    with serve(slow, limit_concurrency=1) as srv:
        c1 = srv.connect()
        c1.addr = addr(c1)
        c1.send(http_request("GET", "/first"))
        assert entered.wait(IO_TIMEOUT)  # /first is in flight: the one place is taken
        c2 = srv.connect()
        c2.addr = addr(c2)
        r = c2.request(http_request("GET", "/second"))
        assert r.status == 503
        release.set()
        assert c1.response().status == 200
        lines = access.wait(2)
    assert lines == [
        f'{c2.addr} - "GET /second HTTP/1.1" 503 Service Unavailable '
        f'(refused: --limit-concurrency reached)',
        f'{c1.addr} - "GET /first HTTP/1.1" 200 OK',
    ]


@pytest.mark.rule("skirr-access-format")
def test_json_format(serve, access):
    with serve(app, access_log_format="json") as srv:
        c = srv.connect()
        c.addr = addr(c)
        req = http_request("GET", "/p?q=1", headers=[("Host", "x"), ("User-Agent", "ua/1"),
                                                     ("Referer", "http://r/"),
                                                     ("X-Request-ID", "abc")])
        assert c.request(req).status == 200
        c2 = srv.connect()
        c2.addr = addr(c2)
        c2.send(b"GET / HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n")
        assert c2.response(allow_incomplete=True).status == 400
        lines = access.wait(2)
    ok, refused = (json.loads(x) for x in lines)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", ok.pop("time"))
    assert isinstance(ok.pop("duration_ms"), float)
    assert ok == {"client": c.addr, "method": "GET", "path": "/p", "query": "q=1",
                  "http_version": "1.1", "status": 200, "bytes": 5, "referer": "http://r/",
                  "user_agent": "ua/1", "request_id": "abc"}
    refused.pop("time")
    assert refused == {"client": c2.addr, "method": None, "path": None, "query": None,
                       "http_version": None, "status": 400, "bytes": 11, "duration_ms": None,
                       "referer": None, "user_agent": None, "request_id": None,
                       "reason": "Invalid header token"}


def _iso(t: str) -> float:
    """Seconds since the epoch of a JSON line's "time" (``YYYY-MM-DDTHH:MM:SS.mmmZ``)."""
    import calendar

    whole, ms = t[:-1].split(".")
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + int(ms) / 1000


@pytest.mark.rule("skirr-access-time-is-the-response")
def test_json_time_is_each_responses_own(serve, access):
    """Six responses 50 ms apart, all in one batch (written together after the last): six
    distinct times, increasing, each within its own request's window (issue 36 item 2)."""
    with serve(app, access_log_format="json") as srv:
        c = srv.connect()
        windows = []
        for i in range(6):
            t0 = time.time()
            assert c.request(http_request("GET", f"/n{i}", headers=[("Host", "x")])).status == 200
            windows.append((t0, time.time()))
            time.sleep(0.05)
        lines = access.wait(6)
    got = [json.loads(x) for x in lines]
    assert [g["path"] for g in got] == [f"/n{i}" for i in range(6)]
    times = [_iso(g["time"]) for g in got]
    assert times == sorted(times) and len(set(times)) == 6, times
    for t, (lo, hi) in zip(times, windows):
        assert lo - 0.001 <= t <= hi + 0.001, (t, lo, hi)


@pytest.mark.rule("skirr-access-time-is-the-response")
def test_gunicorn_time_is_the_refusals_own(serve, access):
    """%(t)s of a refusal and of a response a second later: each its own second."""
    with serve(app, access_log_format="%(s)s %(t)s") as srv:
        c = srv.connect()
        c.send(b"GET / HTTP/1.1\r\n\r\n")  # no Host: 400
        assert c.response(allow_incomplete=True).status == 400
        t_refused = time.time()
        time.sleep(1.1)
        c2 = srv.connect()
        assert c2.request(http_request("GET", "/", headers=[("Host", "x")])).status == 200
        t_ok = time.time()
        lines = access.wait(2)
    fmt = "[%d/%b/%Y:%H:%M:%S %z]"
    got = [(x.split(" ", 1)[0], time.mktime(time.strptime(x.split(" ", 1)[1].split(" (refused")[0], fmt)))
           for x in lines]
    assert [g[0] for g in got] == ["400", "200"]
    assert int(t_refused) - 1 <= got[0][1] <= t_refused
    assert int(t_ok) - 1 <= got[1][1] <= t_ok
    assert got[1][1] > got[0][1]


@pytest.mark.rule("skirr-access-refusals")
@pytest.mark.parametrize("data,status,sent", [
    (b"GET / HTTP/1.1\r\n\r\n", 400, 11),  # "Bad Request"
    (b"HEAD / HTTP/1.1\r\n\r\n", 400, 0),  # no content for HEAD
    (http_request("POST", "/up", body=b"x" * 100), 413, 17),  # "Content Too Large"
], ids=["400", "400-head", "413"])
def test_refusal_bytes_are_its_content(serve, access, data, status, sent):
    """A refusal's logged byte count is the content skirr sent with it (%(b)s, %(B)s, json)."""
    with serve(app, limit_request_body=10, access_log_format="%(s)s %(b)s %(B)s") as srv:
        c = srv.connect()
        c.send(data)
        raw = c.read_until_close()
        assert raw.startswith(b"HTTP/1.1 %d " % status)
        assert raw.endswith(b"\r\n\r\n") if sent == 0 else len(raw.split(b"\r\n\r\n", 1)[1]) == sent
        lines = access.wait(1)
    b = str(sent) if sent else "-"
    assert [x.split(" (refused:")[0] for x in lines] == [f"{status} {b} {sent}"]


@pytest.mark.rule("skirr-access-format")
def test_gunicorn_atoms(serve, access):
    fmt = ('%(h)s %(l)s %(u)s "%(r)s" %(s)s %(b)s %(B)s "%(f)s" "%(a)s" %(m)s %(U)s %(q)s %(H)s '
           '%({x-in}i)s %({x-out}o)s %({x-none}i)s %(D)s %(M)s %(T)s %(L)s %(t)s %(p)s')
    with serve(app, access_log_format=fmt) as srv:
        c = srv.connect()
        c.addr = addr(c)
        req = http_request("GET", "/g?a=b", headers=[("Host", "x"), ("User-Agent", "ua"),
                                                     ("X-In", "i1")])
        assert c.request(req).status == 200
        lines = access.wait(1)
    import os

    host = c.addr.split(':')[0]
    m = re.fullmatch(
        rf'{host} - - "GET /g\?a=b HTTP/1.1" 200 5 5 "-" "ua" GET /g a=b HTTP/1.1 i1 o1 - '
        rf'(\d+) (\d+) (\d+) (\d+\.\d{{6}}) \[\d\d/\w{{3}}/\d{{4}}:\d\d:\d\d:\d\d [+-]\d{{4}}\] '
        rf'<{os.getpid()}>', lines[0])
    assert m, lines[0]
    assert int(m[1]) < 5_000_000


@pytest.mark.rule("skirr-access-format")
@pytest.mark.parametrize("fails", ["raises", "returns"])
@pytest.mark.parametrize("http", ["1.1", "2"])
def test_response_field_atom_of_skirr_500_is_not_the_apps(serve, access, fails, http):
    """An app that starts its response (content-type: x) and then raises, or returns without a
    body, gets skirr's own text/plain 500, over HTTP/1.1 and HTTP/2: %({content-type}o)s is "-",
    not the app's x, which never went out."""
    async def failing(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"x"), (b"x-out", b"o1")]})
        if fails == "raises":
            raise RuntimeError("boom")

    with serve(failing, access_log_format="%(s)s %({content-type}o)s %({x-out}o)s") as srv:
        if http == "2":
            from h2_util import H2Client

            with H2Client.open(srv.port) as c:
                a = c.answer(c.get("/"))
            status, ctype = a.status, a.header(b"content-type")
        else:
            r = srv.get("/")
            status, ctype = r.status, r.get(b"content-type")
        lines = access.wait(1)
    assert (status, ctype) == (500, b"text/plain; charset=utf-8")
    assert lines == ["500 - -"]


@pytest.mark.rule("skirr-access-format")
def test_bad_format_is_config_error():
    import skirr
    from skirr.config import ConfigError

    with pytest.raises(ConfigError, match="invalid access log format"):
        skirr.Config(app, access_log_format="%(nope)s")
    with pytest.raises(ConfigError, match="invalid access log format"):
        skirr.Config(app, access_log_format="%(h)")


@pytest.mark.rule("skirr-access-off")
def test_no_access_log(serve, access):
    with serve(app, access_log=False) as srv:
        assert srv.get("/").status == 200
        time.sleep(0.2)
    assert access.lines() == []


@pytest.mark.rule("skirr-access-off")
def test_logger_not_enabled(serve, access, monkeypatch):
    import skirr.access as mod

    built = []
    monkeypatch.setattr(mod.AccessLog, "line", lambda self, e, now: built.append(e) or "")
    logging.getLogger("skirr.access").setLevel(logging.WARNING)
    with serve(app) as srv:
        assert srv.get("/").status == 200
        time.sleep(0.2)
    assert access.lines() == [] and built == []


@pytest.mark.rule("skirr-access-cost")
def test_access_log_cost_in_bench_results():
    """The newest bench report with the cost rows (bench/COSTS.md from make bench-costs, or
    bench/RESULTS.md from make bench) says skirr's access log on costs at most 1.25x the CPU per
    request of it off (median of the per-round ratios, at least 3 rounds) and less than uvicorn's
    access log on in every round (bench/harness/report.py's lines)."""
    name, ratio = newest_verdict(
        r"^- raw_get, access log on ÷ off \(skirr\): median ([0-9.]+) \([0-9.]+–[0-9.]+\); "
        r"target ≤ ([0-9.]+): (met|MISSED) \(median\), (\d+)/(\d+) rounds")
    assert float(ratio[2]) == 1.25, (name, ratio[0])
    assert float(ratio[1]) <= 1.25 and ratio[3] == "met" and int(ratio[5]) >= 3, (name, ratio[0])
    text = (BENCH / name).read_text()
    vs = re.search(r"^- raw_get, access log on: .*skirr below uvicorn: (met|MISSED) "
                   r"\((\d+)/(\d+) rounds\)", text, re.M)
    assert vs is not None, (name, "no line comparing with uvicorn's access log")
    assert vs[1] == "met" and vs[2] == vs[3], (name, vs[0])


# -- HTTP/2 refusals -------------------------------------------------------------------------------

# kind: (config, method, :path, :scheme, extra fields, content, END_STREAM, status, reason). Each is
# refused once its header block is complete and has passed the checks an app's request passes.
H2_REFUSED = {
    "413-declared": ({"limit_request_body": 10}, "POST", "/up?x=1", "http",
                     [("content-length", "5000")], b"", False, 413,
                     "content-length over --limit-request-body"),
    "413-content": ({"limit_request_body": 10}, "POST", "/up?x=1", "http", [], b"a" * 100, True,
                    413, "content over --limit-request-body"),
    "503": ({"limit_concurrency": 1}, "GET", "/second?q=2", "http", [], b"", True, 503,
            "--limit-concurrency reached"),
    "408": ({"timeout_request_body": 0.5}, "POST", "/slow?s=1", "http", [], b"abc", False, 408,
            "request content not complete in time"),
    "421": ({}, "GET", "/s?x=1", "ftp", [], b"", True, 421, ":scheme other than http or https"),
    "501": ({}, "FOO", "/m?y=1", "http", [], b"", True, 501, "method not implemented"),
}
# kind: (config, fields, status, reason): refused before skirr checked the head as an app's
# request (a header list over --http2-max-headers-size, so not kept whole; CONNECT, whose
# :authority is its target and which has no :path): no request line, as HTTP/1.1's refusals
# before the head is complete.
H2_NO_LINE = {
    "431": ({"http2_max_headers_size": 200},
            [(":method", "GET"), (":scheme", "http"), (":path", "/big?q=1"),
             (":authority", "testserver"), ("x-big", "v" * 300)], 431,
            "request header list larger than --http2-max-headers-size"),
    "501-connect": ({}, [(":method", "CONNECT"), (":authority", "example.com:443")], 501,
                    "CONNECT is not served"),
}
H2_FORMATS = {  # id: access_log_format
    "default": None,
    "json": "json",
    "gunicorn": '"%(r)s" %(m)s %(U)s %(q)s %(H)s %(s)s %(b)s',
}


def h2_app(entered: threading.Event, release: threading.Event):
    """/hold (after any root path) waits for release (entered set on its call); any other path
    reads its content (a disconnect ends it with no response) and answers 200 "ok"."""
    import asyncio

    async def app(scope, receive, send):
        if scope["path"].endswith("/hold"):  # under --root-path too
            entered.set()
            while not release.is_set():
                await asyncio.sleep(0.01)
        else:
            while True:
                m = await receive()
                if m["type"] == "http.disconnect":
                    return
                if not m.get("more_body"):
                    break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
    return app


def h2_line(fmt: str | None, a: str, method: str | None, target: str | None, status: int,
            reason: str) -> str | dict:
    """The access line of an HTTP/2 refusal from a (host:port) of request method and target (None:
    no request line) in format fmt; a dict (without "time") for JSON."""
    from skirr.access import status_text

    text = status_text(status)
    sent = len(text.split(" ", 1)[1])  # the phrase is the content
    path, _, query = (target or "").partition("?")
    if fmt == "json":
        return {"client": a, "method": method, "path": path if method else None,
                "query": query if method else None, "http_version": "2.0" if method else None,
                "status": status, "bytes": sent, "duration_ms": None, "referer": None,
                "user_agent": None, "request_id": None, "reason": reason}
    if fmt is None:
        line = f"{method} {target} HTTP/2.0" if method else "-"
        return f'{a} - "{line}" {text} (refused: {reason})'
    if method is None:  # r m U H "-", q empty
        return f'"-" - -  - {status} {sent} (refused: {reason})'
    return (f'"{method} {target} HTTP/2.0" {method} {path} {query} HTTP/2.0 {status} {sent} '
            f"(refused: {reason})")


def parsed(fmt: str | None, line: str) -> str | dict:
    """A line as h2_line gives it: JSON parsed, its time checked and dropped."""
    if fmt != "json":
        return line
    d = json.loads(line)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", d.pop("time"))
    return d


@pytest.mark.rule("skirr-access-refusals", "skirr-access-format")
@pytest.mark.parametrize("fmt", sorted(H2_FORMATS))
@pytest.mark.parametrize("kind", sorted(H2_REFUSED))
def test_http2_refusal_logs_its_request_line(serve, access, kind, fmt):
    """An HTTP/2 stream skirr refuses after its head was complete and checked (413 from the
    declared length or the content, 503 at --limit-concurrency, 408 for content not complete in
    time, 421 for another :scheme, 501 for a method skirr does not serve) is logged with the
    request line an app's response on it would have, "METHOD PATH?QUERY HTTP/2.0", in the
    default line, JSON (method, path, query, http_version) and gunicorn's r m U q H."""
    from h2_util import H2Client

    config, method, path, scheme, extra, body, end, status, reason = H2_REFUSED[kind]
    entered, release = threading.Event(), threading.Event()
    with serve(h2_app(entered, release), access_log_format=H2_FORMATS[fmt], **config) as srv:
        with H2Client.open(srv.port) as c:
            a = addr(c)
            if kind == "503":  # /hold takes the one place
                hold = c.get("/hold")
                assert entered.wait(IO_TIMEOUT)
            sid = c.request([(":method", method), (":scheme", scheme), (":path", path),
                             (":authority", "testserver"), *extra], body, end=end)
            assert c.answer(sid).status == status
            refused = access.wait(1)[0]
            if kind == "503":
                release.set()
                assert c.answer(hold).status == 200
        lines = access.wait(2 if kind == "503" else 1)
    assert parsed(fmt, refused) == h2_line(H2_FORMATS[fmt], a, method, path, status, reason)
    assert len(lines) == (2 if kind == "503" else 1)


@pytest.mark.rule("skirr-access-refusals")
@pytest.mark.parametrize("fmt", ["default", "json"])
@pytest.mark.parametrize("kind", sorted(H2_NO_LINE))
def test_http2_refusal_before_the_head_was_checked_logs_no_request_line(serve, access, kind,
                                                                        fmt):
    """A 431 (the header list over --http2-max-headers-size: not kept whole) and CONNECT's 501
    (no :path; refused before skirr's checks of the head) log "-" (JSON: method, path, query and
    http_version null), as HTTP/1.1's refusals before the head is complete."""
    from h2_util import H2Client

    config, fields, status, reason = H2_NO_LINE[kind]
    with serve(app, access_log_format=H2_FORMATS[fmt], **config) as srv:
        with H2Client.open(srv.port) as c:
            a = addr(c)
            assert c.answer(c.request(fields)).status == status
        lines = access.wait(1)
    assert [parsed(H2_FORMATS[fmt], x) for x in lines] == [
        h2_line(H2_FORMATS[fmt], a, None, None, status, reason)]


@pytest.mark.rule("skirr-access-refusals")
@pytest.mark.parametrize("fmt", sorted(H2_FORMATS))
def test_http2_refusal_line_is_the_app_responses(serve, access, fmt):
    """Under --root-path, the request line of a refused stream (413) is the one the same
    request served by the app is logged with: the root path before :path, an empty query
    dropped with its '?'."""
    from h2_util import H2Client

    def post(c, path, length):
        return c.request([(":method", "POST"), (":scheme", "http"), (":path", path),
                          (":authority", "testserver"), ("content-length", str(length))],
                         b"a" * length)

    paths = ["/r?a=1", "/e?", "/"]
    with serve(app, root_path="/api", limit_request_body=10,
               access_log_format=H2_FORMATS[fmt]) as srv:
        with H2Client.open(srv.port) as c:
            for p in paths:
                assert c.answer(post(c, p, 2)).status == 200
                assert c.answer(post(c, p, 20)).status == 413
        lines = access.wait(2 * len(paths))
    fields = ("method", "path", "query", "http_version")
    for i, p in enumerate(paths):
        served, refused = lines[2 * i], lines[2 * i + 1]
        if fmt == "json":
            served, refused = json.loads(served), json.loads(refused)
            assert [refused[k] for k in fields] == [served[k] for k in fields], p
            assert (served["status"], refused["status"]) == (200, 413)
        else:
            quoted = served.split('"')[1]
            assert quoted == f"POST /api{p.rstrip('?')} HTTP/2.0", served
            assert refused.split('"')[1] == quoted, p
            if fmt == "gunicorn":  # m U q H too (q may be empty)
                atoms = [x.split('"')[2].split(" ")[:5] for x in (served, refused)]
                assert atoms[1] == atoms[0], p


def status_text_phrase(status: int) -> str:
    """The reason phrase skirr's own response carries as its content."""
    from skirr.access import status_text

    return status_text(status).split(" ", 1)[1]


@pytest.mark.rule("skirr-access-refusals")
@pytest.mark.parametrize("method,kind", [("GET", "421"), ("HEAD", "421"), ("HEAD", "413-declared"),
                                         ("HEAD", "503")])
def test_http2_refusal_bytes_are_its_content(serve, access, method, kind):
    """An HTTP/2 refusal's logged byte count is the content skirr sent with it (%(b)s, %(B)s):
    the phrase, none for HEAD (its content-length still says the phrase's), as over HTTP/1.1."""
    from h2_util import H2Client

    config, _, path, scheme, extra, body, end, status, _ = H2_REFUSED[kind]
    entered, release = threading.Event(), threading.Event()
    with serve(h2_app(entered, release), access_log_format="%(m)s %(s)s %(b)s %(B)s",
               **config) as srv:
        with H2Client.open(srv.port) as c:
            if kind == "503":
                hold = c.get("/hold")
                assert entered.wait(IO_TIMEOUT)
            sid = c.request([(":method", method), (":scheme", scheme), (":path", path),
                             (":authority", "testserver"), *extra], body, end=end)
            a = c.answer(sid)
            refused = access.wait(1)[0]
            if kind == "503":
                release.set()
                assert c.answer(hold).status == 200
    sent = len(a.body)
    assert (a.status, a.ended, int(a.header(b"content-length"))) == (
        status, True, len(status_text_phrase(status)))
    assert sent == (0 if method == "HEAD" else len(status_text_phrase(status)))
    assert refused == f"{method} {status} {sent or '-'} {sent} (refused: {H2_REFUSED[kind][-1]})"


# -- A refusal's client and root path (stop 57) ---------------------------------------------------

# The proxy fields every case below sends (both families: only --proxy-headers-mode's is read).
PROXY_FIELDS = [("X-Forwarded-For", "203.0.113.7"), ("Forwarded", 'for="203.0.113.9:4711"')]
PROXY_MODES = {  # id: (config, the client a line names; None: the peer, the test's socket)
    "x-forwarded": ({}, "203.0.113.7:0"),
    "forwarded": ({"proxy_headers_mode": "forwarded"}, "203.0.113.9:4711"),
    "untrusted": ({"forwarded_allow_ips": "10.0.0.1"}, None),
    "off": ({"proxy_headers": False, "forwarded_allow_ips": "*"}, None),
}


def h1_head(method: str, target: str, fields=(), content: bytes = b"") -> bytes:
    """An HTTP/1.1 request head with Host and PROXY_FIELDS, then fields, then content."""
    lines = [f"{method} {target} HTTP/1.1", "Host: x",
             *(f"{k}: {v}" for k, v in [*PROXY_FIELDS, *fields])]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + content


# kind: (config, request, status, request line, reason). Each head passed every check an app's
# request passes; the 413 of the declared length and the 503 come before an exchange, the others
# (the chunk's 413 and 400, the content's 408) after it: its scope's client then.
H1_REFUSED = {
    "413-declared": ({"limit_request_body": 10},
                     h1_head("POST", "/up?x=1", [("Content-Length", "100")]), 413,
                     "POST /up?x=1 HTTP/1.1", "content too large"),
    "413-content": ({"limit_request_body": 10},
                    h1_head("POST", "/up?x=1", [("Transfer-Encoding", "chunked")], b"64\r\n"),
                    413, "POST /up?x=1 HTTP/1.1", "content too large"),
    "400-chunk": ({}, h1_head("POST", "/c?x=1", [("Transfer-Encoding", "chunked")], b"zz\r\n"),
                  400, "POST /c?x=1 HTTP/1.1", "Invalid character in chunk size"),
    "408": ({"timeout_request_body": 1},
            h1_head("POST", "/slow?s=1", [("Content-Length", "20")], b"abc"), 408,
            "POST /slow?s=1 HTTP/1.1", "request content not complete in time"),
    "503": ({"limit_concurrency": 1}, h1_head("GET", "/second?q=2"), 503,
            "GET /second?q=2 HTTP/1.1", "--limit-concurrency reached"),
}
# kind: (config, request, status, request line, reason): a head not read whole, or read whole and
# refused as invalid: its fields are not trusted, the line names the peer whatever they say.
H1_PEER = {
    "400-no-host": ({}, b"GET /nohost?a=1 HTTP/1.1\r\nX-Forwarded-For: 203.0.113.7\r\n\r\n", 400,
                    "GET /nohost?a=1 HTTP/1.1", "HTTP/1.1 request without Host"),
    "431": ({}, b"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 203.0.113.7\r\n"
            + b"".join(b"X-%d: v\r\n" % i for i in range(120)) + b"\r\n", 431, "-",
            "too many header fields"),
    "408-head": ({"timeout_request_head": 1},
                 b"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 203.0.113.7\r\n", 408, "-",
                 "request head not complete in time"),
}


def h1_refused(serve, access, kind: str, config: dict, data: bytes, status: int):
    """Sends one HTTP/1.1 request skirr refuses with status (503: while /hold takes the one
    place); (its access record, the socket's address)."""
    entered, release = threading.Event(), threading.Event()
    with serve(h2_app(entered, release), **config) as srv:
        if kind == "503":
            hold = srv.connect()
            hold.send(http_request("GET", "/hold"))
            assert entered.wait(IO_TIMEOUT)
        c = srv.connect()
        a = addr(c)
        c.send(data)
        assert c.response(allow_incomplete=True).status == status
        access.wait(1)
        rec = access.records[0]
        if kind == "503":
            release.set()
            assert hold.response().status == 200
            access.wait(2)
    return rec, a


@pytest.mark.rule("skirr-access-refusals", "skirr-proxy-trusted")
@pytest.mark.parametrize("mode", sorted(PROXY_MODES))
@pytest.mark.parametrize("kind", sorted(H1_REFUSED))
def test_refusal_names_the_client_the_proxy_gave(serve, access, kind, mode):
    """An HTTP/1.1 refusal of a head that passed the checks names the client its scope has (or
    would have had): the one a trusted proxy's X-Forwarded-For or, in forwarded mode, Forwarded
    gives; the peer when the peer is not trusted or --proxy-headers is off. In the line and the
    record's client_addr."""
    from skirr.access import status_text

    config, data, status, line, reason = H1_REFUSED[kind]
    proxy, client = PROXY_MODES[mode]
    rec, a = h1_refused(serve, access, kind, {**config, **proxy}, data, status)
    client = client or a
    assert rec.getMessage() == f'{client} - "{line}" {status_text(status)} (refused: {reason})'
    assert rec.client_addr == client


@pytest.mark.rule("skirr-access-refusals")
@pytest.mark.parametrize("kind", sorted(H1_PEER))
def test_refusal_of_a_head_not_checked_names_the_peer(serve, access, kind):
    """A head not read whole (431, 408) or read whole and refused as invalid (400 without Host):
    the line names the peer, whatever X-Forwarded-For says."""
    from skirr.access import status_text

    config, data, status, line, reason = H1_PEER[kind]
    rec, a = h1_refused(serve, access, kind, config, data, status)
    assert rec.getMessage() == f'{a} - "{line}" {status_text(status)} (refused: {reason})'


@pytest.mark.rule("skirr-access-refusals", "skirr-access-format")
@pytest.mark.parametrize("fmt", ["gunicorn", "json"])
@pytest.mark.parametrize("mode", ["x-forwarded", "forwarded"])
def test_refusal_client_in_every_format(serve, access, fmt, mode):
    """gunicorn's %(h)s is the proxy's client's host, JSON's client its host:port."""
    config, data, status, line, reason = H1_REFUSED["413-declared"]
    proxy, client = PROXY_MODES[mode]
    form = "json" if fmt == "json" else '%(h)s "%(r)s" %(s)s'
    rec, _ = h1_refused(serve, access, "413-declared",
                        {**config, **proxy, "access_log_format": form}, data, status)
    if fmt == "json":
        d = json.loads(rec.getMessage())
        assert (d["client"], d["method"], d["path"], d["query"], d["status"]) == (
            client, "POST", "/up", "x=1", 413)
    else:
        host = client.rsplit(":", 1)[0]
        assert rec.getMessage() == f'{host} "{line}" 413 (refused: {reason})'


@pytest.mark.rule("skirr-access-refusals", "skirr-proxy-trusted")
@pytest.mark.parametrize("mode", sorted(PROXY_MODES))
@pytest.mark.parametrize("kind", sorted(H2_REFUSED))
def test_http2_refusal_names_the_client_the_proxy_gave(serve, access, kind, mode):
    """Over HTTP/2 too: a refused stream whose head passed the checks (413 of the declared length
    or the content, 503, 408, 421, 501) names the client its scope has or would have had."""
    from h2_util import H2Client

    config, method, path, scheme, extra, body, end, status, reason = H2_REFUSED[kind]
    proxy, client = PROXY_MODES[mode]
    fields = [(k.lower(), v) for k, v in PROXY_FIELDS]
    entered, release = threading.Event(), threading.Event()
    with serve(h2_app(entered, release), **config, **proxy) as srv:
        with H2Client.open(srv.port) as c:
            a = addr(c)
            if kind == "503":
                hold = c.get("/hold")
                assert entered.wait(IO_TIMEOUT)
            sid = c.request([(":method", method), (":scheme", scheme), (":path", path),
                             (":authority", "testserver"), *extra, *fields], body, end=end)
            assert c.answer(sid).status == status
            access.wait(1)
            rec = access.records[0]
            if kind == "503":
                release.set()
                assert c.answer(hold).status == 200
                access.wait(2)
    assert rec.getMessage() == h2_line(None, client or a, method, path, status, reason)
    assert rec.client_addr == (client or a)


# (method, request-target, the request line an app's response and a refusal log under /api)
H1_TARGETS = [
    ("POST", "/r?a=1", "POST /api/r?a=1 HTTP/1.1"),
    ("POST", "/e?", "POST /api/e HTTP/1.1"),
    ("POST", "/", "POST /api/ HTTP/1.1"),
    ("POST", "http://h/a?b=1", "POST /api/a?b=1 HTTP/1.1"),  # absolute-form: its path
    ("POST", "http://h", "POST /api/ HTTP/1.1"),
    ("POST", "http://h?z", "POST /api/?z HTTP/1.1"),
    ("OPTIONS", "*", "OPTIONS /api* HTTP/1.1"),  # the scope's raw_path: root_path then "*"
]


@pytest.mark.rule("skirr-access-refusals")
@pytest.mark.parametrize("fmt", sorted(H2_FORMATS))
def test_refusal_line_is_the_app_responses(serve, access, fmt):
    """Under --root-path and a trusted proxy, an HTTP/1.1 refusal of a head that passed the
    checks (413 from its declared length) is logged as the same request served by the app: the
    client the proxy gave, the root path first, an absolute-form target's path, an empty query
    dropped with its '?', asterisk-form as the scope's raw_path has it."""
    with serve(app, root_path="/api", limit_request_body=10,
               access_log_format=H2_FORMATS[fmt]) as srv:
        for method, target, _ in H1_TARGETS:
            for n, status in ((2, 200), (20, 413)):
                c = srv.connect()
                c.send(h1_head(method, target, [("Content-Length", str(n))], b"a" * n))
                assert c.response(allow_incomplete=True).status == status, target
                c.close()
                access.wait(len(access.records) + 1)
        lines = access.wait(2 * len(H1_TARGETS))
    fields = ("client", "method", "path", "query", "http_version")
    for i, (method, target, line) in enumerate(H1_TARGETS):
        served, refused = lines[2 * i], lines[2 * i + 1]
        if fmt == "json":
            served, refused = json.loads(served), json.loads(refused)
            assert [refused[k] for k in fields] == [served[k] for k in fields], target
            assert (served["client"], served["status"], refused["status"]) == (
                "203.0.113.7:0", 200, 413)
        elif fmt == "default":
            assert served == f'203.0.113.7:0 - "{line}" 200 OK', target
            assert refused == (f'203.0.113.7:0 - "{line}" 413 Content Too Large (refused: '
                               f'content too large)'), target
        else:  # r m U q H
            assert refused.split('"')[1] == served.split('"')[1] == line, target
            atoms = [x.split('"')[2].split(" ")[:5] for x in (served, refused)]
            assert atoms[1] == atoms[0], target


# (config, request, status, request line under --root-path /api)
H1_ROOT = {
    # heads that passed the checks, refused before or after their exchange
    "503": ({"limit_concurrency": 1}, http_request("GET", "/second?q=2"), 503,
            "GET /api/second?q=2 HTTP/1.1"),
    "413-content": ({"limit_request_body": 10},
                    b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n",
                    413, "POST /api/up HTTP/1.1"),
    "408": ({"timeout_request_body": 1},
            b"POST /slow?s=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\nabc", 408,
            "POST /api/slow?s=1 HTTP/1.1"),
    # heads refused as invalid: the target as received, the root path first when origin-form
    "400-no-host": ({}, b"GET /nohost?a=1 HTTP/1.1\r\n\r\n", 400, "GET /api/nohost?a=1 HTTP/1.1"),
    "421": ({}, b"GET ftp://x/f HTTP/1.1\r\nHost: x\r\n\r\n", 421, "GET ftp://x/f HTTP/1.1"),
    "400-asterisk": ({}, b"POST * HTTP/1.1\r\nHost: x\r\n\r\n", 400, "POST * HTTP/1.1"),
}


@pytest.mark.rule("skirr-access-refusals")
@pytest.mark.parametrize("kind", sorted(H1_ROOT))
def test_refusal_line_has_the_root_path(serve, access, kind):
    """--root-path: an HTTP/1.1 refusal's request line puts it first, as an app's response and
    HTTP/2's refusals do; a target refused as invalid that is not origin-form (absolute-form,
    asterisk-form) is logged as received."""
    config, data, status, line = H1_ROOT[kind]
    rec, a = h1_refused(serve, access, kind, {**config, "root_path": "/api"}, data, status)
    assert rec.getMessage().split('"')[:2] == [f"{a} - ", line]


# -- WebSocket handshakes (issue 14) ----------------------------------------------------------------

def run_ws_cases(srv, access) -> list[str]:
    """Each case on its own connection, one after the other (so the lines come in this order);
    returns the client addresses."""
    addrs = []
    for n, (data, status) in enumerate(WS_CASES, 1):
        c = srv.connect()
        addrs.append(addr(c))
        ws_exchange(c, data, status)
        access.wait(n)  # in order: the next case starts once this line is there
    return addrs


WS_400 = "WebSocket handshake: Sec-WebSocket-Key is not base64 of 16 bytes (RFC 6455 §4.2.1)"
WS_426 = "WebSocket handshake: Sec-WebSocket-Version is not 13 (RFC 6455 §4.4)"


@pytest.mark.rule("skirr-ws-access-log", "skirr-access-refusals")
def test_ws_default_lines(serve, access):
    """uvicorn's words for a handshake's answer: [accepted] for the 101, the status alone when
    the app denied it; a malformed handshake is a refusal with its request line and reason."""
    with serve(ws_app) as srv:
        a = run_ws_cases(srv, access)
    assert access.lines() == [
        f'{a[0]} - "WebSocket /chat?room=1" [accepted]',
        f'{a[1]} - "WebSocket /deny" 403',
        f'{a[2]} - "WebSocket /denial?x=1" 401',
        f'{a[3]} - "WebSocket /fail" 500',
        f'{a[4]} - "GET /chat HTTP/1.1" 400 Bad Request (refused: {WS_400})',
        f'{a[5]} - "GET /chat HTTP/1.1" 426 Upgrade Required (refused: {WS_426})',
    ]
    rec = access.records[0]
    assert rec.levelno == logging.INFO and rec.name == "skirr.access"
    assert (rec.client_addr, rec.request_line, rec.status_code) == (
        a[0], "WebSocket /chat?room=1", 101)


@pytest.mark.rule("skirr-ws-access-log")
def test_ws_gunicorn_atoms(serve, access):
    """A handshake is the GET it is for r, m, U, q, H; s is 101 when accepted; b/B the content
    bytes of a denial; %({name}o)s the app's headers (accept's or the denial's)."""
    fmt = ('%(h)s "%(r)s" %(s)s %(b)s %(B)s %(m)s %(U)s "%(q)s" %(H)s %(a)s %({x-out}o)s '
           '%({www-authenticate}o)s %(D)s')
    with serve(ws_app, access_log_format=fmt) as srv:
        run_ws_cases(srv, access)
    lines = access.lines()
    host = "127.0.0.1"
    expected = [
        f'{host} "GET /chat?room=1 HTTP/1.1" 101 - 0 GET /chat "room=1" HTTP/1.1 ws-ua o1 -',
        f'{host} "GET /deny HTTP/1.1" 403 9 9 GET /deny "" HTTP/1.1 ws-ua - -',
        f'{host} "GET /denial?x=1 HTTP/1.1" 401 8 8 GET /denial "x=1" HTTP/1.1 ws-ua - Bearer',
        f'{host} "GET /fail HTTP/1.1" 500 21 21 GET /fail "" HTTP/1.1 ws-ua - -',
    ]
    assert [x.rsplit(" ", 1)[0] for x in lines[:4]] == expected
    assert all(0 <= int(x.rsplit(" ", 1)[1]) < 5_000_000 for x in lines[:4]), lines
    assert lines[4:] == [
        f'{host} "GET /chat HTTP/1.1" 400 11 11 GET /chat "" HTTP/1.1 - - - - (refused: {WS_400})',
        f'{host} "GET /chat HTTP/1.1" 426 16 16 GET /chat "" HTTP/1.1 - - - - (refused: {WS_426})',
    ]


@pytest.mark.rule("skirr-ws-access-log")
def test_ws_json(serve, access):
    """json: the handshake's fields, "websocket": true, status 101 when accepted."""
    with serve(ws_app, access_log_format="json") as srv:
        a = run_ws_cases(srv, access)
    got = [json.loads(x) for x in access.lines()]
    for g in got:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", g.pop("time"))
    for g in got[:4]:
        assert isinstance(g.pop("duration_ms"), float)

    def ws(i, path, query, status, nbytes):
        return {"client": a[i], "method": "GET", "path": path, "query": query,
                "http_version": "1.1", "status": status, "bytes": nbytes, "referer": None,
                "user_agent": "ws-ua", "request_id": None, "websocket": True}

    def refused(i, status, nbytes, reason):
        return {"client": a[i], "method": "GET", "path": "/chat", "query": "",
                "http_version": "1.1", "status": status, "bytes": nbytes, "duration_ms": None,
                "referer": None, "user_agent": None, "request_id": None, "reason": reason}

    assert got == [
        ws(0, "/chat", "room=1", 101, 0),
        ws(1, "/deny", "", 403, 9),
        ws(2, "/denial", "x=1", 401, 8),
        ws(3, "/fail", "", 500, 21),
        refused(4, 400, 11, WS_400),
        refused(5, 426, 16, WS_426),
    ]


@pytest.mark.rule("skirr-ws-access-log", "skirr-access-off")
@pytest.mark.parametrize("off", ["no-access-log", "logger-level"])
def test_ws_access_log_off(serve, access, monkeypatch, off):
    """--no-access-log, or skirr.access above INFO: no line, and no line is built."""
    import skirr.access as mod

    built = []
    monkeypatch.setattr(mod.AccessLog, "line", lambda self, e, now: built.append(e) or "")
    config = {"access_log": False} if off == "no-access-log" else {}
    if off == "logger-level":
        logging.getLogger("skirr.access").setLevel(logging.WARNING)
    with serve(ws_app, **config) as srv:
        for data, status in WS_CASES:
            ws_exchange(srv.connect(), data, status)
        time.sleep(0.2)
    assert access.lines() == [] and built == []
