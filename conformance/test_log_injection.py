"""Log injection (issue 35 item 1, CWE-117; spec/operations.toml skirr-log-escape,
skirr-log-escape-json): every byte a client chose that reaches an access line, in every format,
is escaped, so one response is one line with the fields it had.

The rule, per byte (src/core/sk_logesc.h): ``"`` -> ``\\"``, ``\\`` -> ``\\\\``, 0x00-0x1F and
0x7F-0xFF -> ``\\xHH`` (upper-case hex), every other byte as it is. What a client can get to the
server (the parser refuses the rest): in the request-target only ``\\``, in the query (RFC 3986
allows neither ``\\`` nor ``"``; skirr refuses ``"``, controls, DEL and bytes >= 0x80 anywhere in
the target and ``\\`` in the path with 400, spec/http_request_line.toml
RFC9112-3.2-target-grammar, and such a refusal's line shows ``-`` for the request line and none of
the target's bytes); in a field value HTAB, ``"``, ``\\`` and obs-text 0x80-0xFF (C1 controls in a
latin-1 reading, such as U+0085 NEL and U+009B CSI; UTF-8, valid or not). ``"`` and raw bytes reach
the request line's fields when an app or its middleware rewrites the scope (method, raw_path,
query_string, client), as a method override or a proxy-headers middleware does. Each case asserts
the exact line; ``escaped`` below is the rule written out again, and ``unescape`` its inverse, so
the properties check that the escaped text gives back the bytes sent.
"""
from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

import _proc
from _oracle import examples, oracle_settings
from _ws import ws_exchange, ws_upgrade
from conftest import http_request
from test_access_log import access, addr  # noqa: F401  (the access fixture)

rule = pytest.mark.rule


def escaped(data: bytes) -> str:
    """The rule, written out independently of the server's table."""
    out = []
    for b in data:
        if b in (0x22, 0x5C):
            out.append("\\" + chr(b))
        elif 0x20 <= b <= 0x7E:
            out.append(chr(b))
        else:
            out.append(f"\\x{b:02X}")
    return "".join(out)


_ESCAPE = re.compile(r'\\(?:x([0-9A-F]{2})|(["\\]))|([\x20-\x7e])')


def unescape(text: str) -> bytes:
    """The bytes an escaped text stands for; AssertionError for text the rule cannot write (a
    lone backslash, lower-case hex, anything outside printable ASCII, an unescaped quote)."""
    out = bytearray()
    pos = 0
    while pos < len(text):
        m = _ESCAPE.match(text, pos)
        assert m and m[0] != '"', f"not escaped text at {pos}: {text!r}"
        out += bytes([int(m[1], 16)]) if m[1] else (m[2] or m[3]).encode()
        pos = m.end()
    return bytes(out)


async def app(scope, receive, send):
    """200 "ok"; the response field x-out repeats the request's x-echo (so %({x-out}o)s carries
    client bytes too). A request with x-rewrite plays a middleware that puts that field's value
    (client text) in the scope: the method, raw_path /r/VALUE, query_string q=VALUE and the
    client's host (a method override, a path rewrite, a proxy-headers middleware of the app's
    own); so '"' and bytes >= 0x80, which the request-target may not carry, reach the request
    line's fields."""
    while (await receive()).get("more_body"):
        pass
    for k, v in scope["headers"]:
        if k == b"x-rewrite":
            text = v.decode("latin-1")
            scope.update(method=text, raw_path=b"/r/" + v, query_string=b"q=" + v,
                         client=(text, 1))
    echo = [v for k, v in scope["headers"] if k == b"x-echo"]
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), *((b"x-out", v) for v in echo)]})
    await send({"type": "http.response.body", "body": b"ok"})


# Field values as a client sends them, one per kind of byte; each parses (the server answers 200)
# and is logged escaped.
UA = b'ua "quoted" \\ back'  # the field delimiter and the escape character
REFERER = b"http://r/\x85\x9b[31mred"  # C1 controls in latin-1: NEL, and CSI + SGR
REQUEST_ID = b'id-"\\\xff\xc3('  # the quote, the backslash, invalid UTF-8
TAB = b"a\tb"  # the one C0 control a field value may carry
UTF8 = "café €".encode()  # valid UTF-8: escaped byte by byte too, as nginx does
# The request-target's one: '\', accepted in the query only (skirr's lenient query bytes; in the
# path it is 400, as '"' is anywhere: test_refused_target). The exact cases that send it on the
# wire (this, the refusal without Host, the WebSocket target) assume the server accepts it in a
# query; the property asks the server which bytes it accepts in the path and in the query.
TARGET = "/a/b?x\\y&b=\\"
# What the app of the x-rewrite request puts in the scope: the quote, the backslash, a C1 control.
REWRITE = b'"x\\\x85'

HEADERS = [("Host", "x"), ("User-Agent", UA), ("Referer", REFERER), ("X-Request-ID", REQUEST_ID),
           ("X-Tab", TAB), ("X-Echo", UTF8)]


# -- the rule, byte by byte ------------------------------------------------------------------------


@rule("skirr-log-escape")
def test_escape_every_byte():
    """Each of the 256 bytes alone, as bytes and as the latin-1 str the server decodes."""
    from skirr._native import log_escape

    for b in range(256):
        one = bytes([b])
        assert log_escape(one) == escaped(one), hex(b)
        assert log_escape(one.decode("latin-1")) == escaped(one), hex(b)
    assert log_escape(b'"') == '\\"' and log_escape("\\") == "\\\\"
    assert log_escape(b"\x1b[2J\r\n") == "\\x1B[2J\\x0D\\x0A"
    assert log_escape("\x85\x9b") == "\\x85\\x9B"  # obs-text decoded as latin-1: C1 controls
    # A str beyond U+00FF (an app's own text, never a client's bytes) is read as UTF-8.
    assert log_escape("€\u2028") == "\\xE2\\x82\\xAC\\xE2\\x80\\xA8"
    assert log_escape(bytearray(b"a\"")) == 'a\\"' and log_escape(memoryview(b"\t")) == "\\x09"
    plain = "GET /items?id=3 HTTP/1.1"
    assert log_escape(plain) is plain  # the fast path: no copy
    with pytest.raises(TypeError, match="log_escape\\(\\) takes str or bytes, not int"):
        log_escape(3)


@rule("skirr-log-escape")
@oracle_settings(examples(500))
@given(st.binary(max_size=64))
def test_escape_property(data):
    """Any bytes: printable ASCII with no unescaped quote, the rule's text, and reversible."""
    from skirr._native import log_escape

    text = log_escape(data)
    assert text == escaped(data)
    assert text.isascii() and text.isprintable()
    assert unescape(text) == data
    assert log_escape(data.decode("latin-1")) == text


# -- every format, over a real socket --------------------------------------------------------------


# The x-rewrite request's fields, as logged (REWRITE escaped: \" x \\ \x85); the host's port is 1.
RW = r'\"x\\\x85'
RW_LINE = rf'{RW} /r/{RW}?q={RW} HTTP/1.1'
RW_HEADERS = [("Host", "x"), ("X-Rewrite", REWRITE), ("X-Echo", REWRITE)]


@rule("skirr-log-escape")
def test_default_line(serve, access):
    """uvicorn's line: the query's backslash escaped, as is the LogRecord's request_line
    attribute; the scope fields an app rewrote (a quote, a C1 control) in the request line and
    client_addr; a refusal's request line; a WebSocket handshake's target."""
    from _ws import ws_app

    async def both(scope, receive, send):
        await (ws_app if scope["type"] == "websocket" else app)(scope, receive, send)

    with serve(both) as srv:
        c = srv.connect()
        a = addr(c)
        assert c.request(http_request("GET", TARGET, headers=HEADERS)).status == 200
        assert c.request(http_request("GET", "/", headers=RW_HEADERS)).status == 200
        access.wait(2)
        c2 = srv.connect()
        a2 = addr(c2)
        c2.send(b"GET /no-host?\\x\\ HTTP/1.1\r\n\r\n")
        assert c2.response(allow_incomplete=True).status == 400
        access.wait(3)
        c3 = srv.connect()
        a3 = addr(c3)
        ws_exchange(c3, ws_upgrade("/chat?room=\\1\\"), 101)
        lines = access.wait(4)
    assert lines == [
        f'{a} - "GET /a/b?x\\\\y&b=\\\\ HTTP/1.1" 200 OK',
        rf'{RW}:1 - "{RW_LINE}" 200 OK',
        f'{a2} - "GET /no-host?\\\\x\\\\ HTTP/1.1" 400 Bad Request '
        f"(refused: HTTP/1.1 request without Host)",
        f'{a3} - "WebSocket /chat?room=\\\\1\\\\" [accepted]',
    ]
    recs = access.records
    assert (recs[0].client_addr, recs[0].request_line) == (a, "GET /a/b?x\\\\y&b=\\\\ HTTP/1.1")
    assert (recs[1].client_addr, recs[1].request_line) == (f"{RW}:1", RW_LINE)
    assert recs[3].request_line == "WebSocket /chat?room=\\\\1\\\\"


GUNICORN = ('%(h)s "%(r)s" %(m)s "%(U)s" "%(q)s" %(H)s "%(f)s" "%(a)s" "%({x-request-id}i)s" '
            '"%({x-tab}i)s" "%({x-echo}i)s" "%({x-out}o)s"')


@rule("skirr-log-escape")
def test_gunicorn_atoms(serve, access):
    """Every atom that shows client bytes: r U q, f a, a request field, a response field that
    carries them, and h m r U q of the scope an app rewrote; gunicorn writes these as they are,
    skirr escaped."""
    with serve(app, access_log_format=GUNICORN) as srv:
        c = srv.connect()
        assert c.request(http_request("GET", TARGET, headers=HEADERS)).status == 200
        assert c.request(http_request("GET", "/", headers=RW_HEADERS)).status == 200
        lines = access.wait(2)
    assert lines == [
        '127.0.0.1 "GET /a/b?x\\\\y&b=\\\\ HTTP/1.1" GET "/a/b" "x\\\\y&b=\\\\" HTTP/1.1 '
        '"http://r/\\x85\\x9B[31mred" "ua \\"quoted\\" \\\\ back" "id-\\"\\\\\\xFF\\xC3(" '
        '"a\\x09b" "caf\\xC3\\xA9 \\xE2\\x82\\xAC" "caf\\xC3\\xA9 \\xE2\\x82\\xAC"',
        rf'{RW} "{RW_LINE}" {RW} "/r/{RW}" "q={RW}" HTTP/1.1 "-" "-" "-" "-" "{RW}" "{RW}"',
    ]


@rule("skirr-log-escape")
def test_websocket_handshake_atoms(serve, access):
    """A WebSocket handshake's fields: the target's query, User-Agent, Sec-WebSocket-Protocol
    (its items reach the app as scope subprotocols, as received) and Origin, escaped."""
    from _ws import upgrade, ws_app

    fmt = '"%(r)s" %(s)s "%(a)s" "%({sec-websocket-protocol}i)s" "%({origin}i)s"'
    extra = (b'User-Agent: ws\x9b"ua\r\nSec-WebSocket-Protocol: chat, "x\x85\\\r\n'
             b"Origin: http://o\xc3\xa9\r\n")
    with serve(ws_app, access_log_format=fmt) as srv:
        ws_exchange(srv.connect(), upgrade(target="/chat?\\q\\", extra=extra), 101)
        lines = access.wait(1)
    assert lines == ['"GET /chat?\\\\q\\\\ HTTP/1.1" 101 "ws\\x9B\\"ua" '
                     '"chat, \\"x\\x85\\\\" "http://o\\xC3\\xA9"']


@rule("skirr-log-escape")
def test_environment_atom(serve, access, monkeypatch):
    """%({name}e)s: the variable's bytes, escaped like the rest (the operator's, but one line)."""
    monkeypatch.setenv("SKIRR_TEST_ENV", 'a"b\nc')
    with serve(app, access_log_format='"%({SKIRR_TEST_ENV}e)s"') as srv:
        assert srv.connect().request(http_request("GET", "/")).status == 200
        assert access.wait(1) == ['"a\\"b\\x0Ac"']


@rule("skirr-log-escape-json")
def test_json(serve, access):
    """json: the values are the escaped text the other formats show (what json.loads gives
    back), the line is ASCII, one line, valid JSON; the scope an app rewrote; a refusal's
    request line too."""
    with serve(app, access_log_format="json") as srv:
        c = srv.connect()
        a = addr(c)
        assert c.request(http_request("GET", TARGET, headers=HEADERS)).status == 200
        assert c.request(http_request("GET", "/", headers=RW_HEADERS)).status == 200
        access.wait(2)
        c2 = srv.connect()
        a2 = addr(c2)
        c2.send(b"GET /no-host?\\x\\ HTTP/1.1\r\n\r\n")
        assert c2.response(allow_incomplete=True).status == 400
        line, rewritten, refused = access.wait(3)
    for x in (line, rewritten, refused):
        assert x.isascii() and x.isprintable()
    got, rw = json.loads(line), json.loads(rewritten)
    for x in (got, rw):
        del x["time"], x["duration_ms"]
    assert json.loads(refused) | {"time": None} == {
        "time": None, "client": a2, "method": "GET", "path": "/no-host", "query": r"\\x\\",
        "http_version": "1.1", "status": 400, "bytes": 11, "duration_ms": None,
        "referer": None, "user_agent": None, "request_id": None,
        "reason": "HTTP/1.1 request without Host"}
    assert got == {"client": a, "method": "GET", "path": "/a/b", "query": r"x\\y&b=\\",
                   "http_version": "1.1", "status": 200, "bytes": 2,
                   "referer": "http://r/\\x85\\x9B[31mred",
                   "user_agent": 'ua \\"quoted\\" \\\\ back', "request_id": r'id-\"\\\xFF\xC3('}
    assert rw == {"client": f"{RW}:1", "method": RW, "path": f"/r/{RW}", "query": f"q={RW}",
                  "http_version": "1.1", "status": 200, "bytes": 2, "referer": None,
                  "user_agent": None, "request_id": None}
    # json.dumps adds its own escapes on top: a JSON reader sees the text, not the raw bytes
    assert '"user_agent":"ua \\\\\\"quoted\\\\\\" \\\\\\\\ back"' in line


# -- the refusal: a request-target with '"' never reaches a line -----------------------------------

# Targets refused by the request-target grammar (RFC 9112 §3.2, RFC 3986; spec
# RFC9112-3.2-target-grammar, -pct-encoded, RFC9112-3.2.1-fragment-400, -target-chars), each with
# the quote or another byte a log line would have to escape, and the reason skirr logs (llhttp's
# words for the bytes >= 0x80 it refuses first). Each is refused when the
# target is complete, before the field lines are read, so the line shows "-" for the request line
# and none of the target's or the fields' bytes.
NOT_IN_TARGET = "byte not allowed in the request-target"
REFUSED_TARGETS = [
    (b'/a"x', NOT_IN_TARGET),  # the issue's: logged as "GET /a"x HTTP/1.1" before
    (b'/?q="1"', NOT_IN_TARGET),
    (b"/a\\x", NOT_IN_TARGET),  # '\' is lenient in the query only
    (b"/a<b>", NOT_IN_TARGET),
    (b"/caf\xc3\xa9", "Invalid char in url path"),  # raw UTF-8: llhttp's own refusal
    (b"/a?\x85\x9b", "Invalid char in url query"),  # C1 controls in a latin-1 reading
    (b'/a#"', "fragment in the request-target"),
    (b'/a%"', "invalid percent-encoding in the request-target"),
]
REFUSED_FORMATS = {
    "default": None,
    "gunicorn": '%(h)s "%(r)s" %(m)s "%(U)s" "%(q)s" %(H)s %(s)s %(b)s "%(f)s" "%(a)s"',
    "json": "json",
}


@rule("skirr-access-refusals", "skirr-log-escape")
@pytest.mark.parametrize("fmt", list(REFUSED_FORMATS))
def test_refused_target(serve, access, fmt):
    """A request-target carrying '"' (or another byte outside the grammar) is 400 and logged as
    the refusal it is: "-" for the request line, the reason, no field the client wrote."""
    with serve(app, access_log_format=REFUSED_FORMATS[fmt]) as srv:
        clients = []
        for target, _ in REFUSED_TARGETS:
            c = srv.connect()
            clients.append(addr(c))
            c.send(b"GET " + target + b' HTTP/1.1\r\nHost: x\r\nUser-Agent: u"a\r\n'
                   b'Referer: http://r/"\r\n\r\n')
            raw = c.read_until_close()
            assert raw.startswith(b"HTTP/1.1 400 Bad Request\r\n"), (target, raw)
            assert raw.endswith(b"\r\n\r\nBad Request")
            c.close()
        lines = access.wait(len(REFUSED_TARGETS))
    for (target, reason), a, line, rec in zip(REFUSED_TARGETS, clients, lines, access.records):
        if fmt == "default":
            assert line == f'{a} - "-" 400 Bad Request (refused: {reason})', target
            assert (rec.client_addr, rec.request_line, rec.status_code) == (a, "-", 400)
        elif fmt == "gunicorn":
            assert line == f'127.0.0.1 "-" - "-" "" - 400 11 "-" "-" (refused: {reason})', target
        else:
            got = json.loads(line)
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", got.pop("time"))
            assert got == {"client": a, "method": None, "path": None, "query": None,
                           "http_version": None, "status": 400, "bytes": 11,
                           "duration_ms": None, "referer": None, "user_agent": None,
                           "request_id": None, "reason": reason}, target


# -- skirr's own stderr handler (one write per batch, no LogRecord) --------------------------------

# The app of the stderr case: /override plays a middleware that put client text in the scope's
# method, raw_path, query_string and client (a method override, a path rewrite, a proxy-headers
# middleware of the app's own).
STDERR_APP = """
async def app(scope, receive, send):
    if scope["path"] == "/override":
        scope["method"] = 'PATCH"\\x1b'
        scope["raw_path"] = b'/over"ride\\\\\\xc3\\xa9'
        scope["query_string"] = b'q="1"'
        scope["client"] = ('6.6.6.6"\\n', 0)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})
"""


@rule("skirr-log-escape")
@_proc.each_loop
def test_stderr_fast_path(tmp_path, loop):
    """The default line as skirr's own handler writes it (the batch path that builds lines
    without a LogRecord): the same escaped text, one line per response, for the client's bytes
    and for what an app put in its scope; a refused target's line (the general path) as "-"."""
    (tmp_path / "logapp.py").write_text(STDERR_APP)
    port = _proc.free_port()
    args = ["logapp:app", "--app-dir", str(tmp_path), "--lifespan", "off", "--loop", loop,
            "--port", str(port)]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        with _proc.connect(port) as sock:
            sock.sendall(http_request("GET", TARGET, headers=HEADERS)
                         + http_request("GET", "/override") + http_request("GET", "/plain?x=1"))
            got = b""
            while got.count(b"HTTP/1.1 200") < 3:
                data = sock.recv(65536)
                assert data, got
                got += data
            client = "127.0.0.1:%d" % sock.getsockname()[1]
            proc.wait_stdout("/plain?x=1")
        with _proc.connect(port) as sock:
            sock.sendall(b'GET /a"x HTTP/1.1\r\nHost: x\r\n\r\n')
            got = b""
            while data := sock.recv(65536):
                got += data
            assert got.startswith(b"HTTP/1.1 400 Bad Request\r\n"), got
            refused = "127.0.0.1:%d" % sock.getsockname()[1]
            proc.wait_stdout("(refused:")
        assert proc.stop() == 0
        lines = proc.stdout.splitlines()  # skirr's own access handler writes to stdout
    assert lines == [
        f'INFO:     {client} - "GET /a/b?x\\\\y&b=\\\\ HTTP/1.1" 200 OK',
        r'INFO:     6.6.6.6\"\x0A:0 - "PATCH\"\x1B /over\"ride\\\xC3\xA9?q=\"1\" HTTP/1.1" 200 OK',
        f'INFO:     {client} - "GET /plain?x=1 HTTP/1.1" 200 OK',
        f'INFO:     {refused} - "-" 400 Bad Request (refused: {NOT_IN_TARGET})',
    ]


# -- the property: any bytes the server accepts, one line with its fields --------------------------

# A field value's bytes (VCHAR, obs-text, and SP/HTAB inside: the parser trims them at the edges).
VALUE_BYTES = bytes(range(0x21, 0x7F)) + bytes(range(0x80, 0x100))
QUOTED = r'"((?:[^"\\]|\\.)*)"'


def accepted_target_bytes(srv, prefix: bytes) -> bytes:
    """The bytes of 0x00-0xFF that the server lets through after ``prefix`` ("/a" for the path,
    but '?', the query's start; "/a?b" for the query), asked of the server itself (one request
    each): the property generates targets from these, so it follows the request-target grammar
    skirr enforces ('\\' in the query, not in the path)."""
    ok = bytearray()
    for b in range(256):
        if b == 0x3F and b"?" not in prefix:
            continue
        c = srv.connect()
        c.send(b"GET " + prefix + bytes([b])
               + b"b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        if c.read_until_close().startswith(b"HTTP/1.1 200 "):
            ok.append(b)
        c.close()
    return bytes(ok)


def _value():
    inner = st.binary(min_size=0, max_size=12).map(
        lambda b: bytes((VALUE_BYTES + b" \t")[x % (len(VALUE_BYTES) + 2)] for x in b))
    edge = st.binary(min_size=1, max_size=4).map(
        lambda b: bytes(VALUE_BYTES[x % len(VALUE_BYTES)] for x in b))
    return st.tuples(edge, inner, edge).map(lambda t: t[0] + t[1] + t[2])


def _target(path: bytes, query: bytes):
    def seg(alphabet, min_size):
        return st.binary(min_size=min_size, max_size=16).map(
            lambda b: bytes(alphabet[x % len(alphabet)] for x in b))
    # a query is never empty: "/p?" has the query_string b"" and is logged as "/p"
    return st.tuples(seg(path, 0), st.one_of(st.none(), seg(query, 1))).map(
        lambda t: b"/" + t[0] + (b"" if t[1] is None else b"?" + t[1]))


def _requests(path: bytes, query: bytes):
    return st.lists(st.tuples(_target(path, query), _value(), _value(), _value()), min_size=1,
                    max_size=6)


def _raw(target: bytes, ua: bytes, ref: bytes, echo: bytes) -> bytes:
    return (b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nUser-Agent: " + ua + b"\r\nReferer: "
            + ref + b"\r\nX-Echo: " + echo + b"\r\n\r\n")


def _fields(fmt: str, line: str) -> list[bytes]:
    """The client's bytes a record shows, read back: it must be one line with every field."""
    assert "\n" not in line and "\r" not in line and line.isascii() and line.isprintable(), line
    if fmt == "json":
        obj = json.loads(line)
        query = obj["query"]
        target = obj["path"] + ("?" + query if query else "")
        return [unescape(v) for v in (target, obj["user_agent"], obj["referer"])]
    if fmt == "default":
        m = re.fullmatch(rf'127\.0\.0\.1:\d+ - {QUOTED} 200 OK', line)
        assert m, line
        method, target, version = m[1].split(" ")
        assert (method, version) == ("GET", "HTTP/1.1")
        return [unescape(target)]
    m = re.fullmatch(rf"{QUOTED} {QUOTED} {QUOTED} {QUOTED} {QUOTED}", line)
    assert m, line
    method, target, version = m[1].split(" ")
    assert (method, version) == ("GET", "HTTP/1.1")
    return [unescape(x) for x in (target, m[2], m[3], m[4], m[5])]


@rule("skirr-log-escape", "skirr-log-escape-json")
@pytest.mark.parametrize("fmt", ["default", "gunicorn", "json"])
def test_every_line_parses_back(serve, access, monkeypatch, fmt):
    """For any target and field values the server accepts, each response's record is one
    printable-ASCII line with the fields the format has, and each field unescapes to the bytes
    the client sent (the target, User-Agent, Referer, a request field and the response field
    that repeats it)."""
    import skirr.access

    monkeypatch.setattr(skirr.access, "FLUSH_DELAY", 0.002)  # the lines' content, not timing
    config = {"default": {}, "json": {"access_log_format": "json"},
              "gunicorn": {"access_log_format":
                           '"%(r)s" "%(a)s" "%(f)s" "%({x-echo}i)s" "%({x-out}o)s"'}}[fmt]
    with serve(app, **config) as srv:
        path, query = accepted_target_bytes(srv, b"/a"), accepted_target_bytes(srv, b"/a?b")
        assert b"\\" in query  # the one escaped byte a target can carry is generated
        access.wait(255 + 256)  # the probes' lines (a refusal is logged too)
        del access.records[:]
        c = srv.connect()

        @oracle_settings(min(examples(60), 300))
        @given(_requests(path, query))
        def check(reqs):
            before = len(access.records)
            c.send(b"".join(_raw(*r) for r in reqs))
            for _ in reqs:
                assert c.response().status == 200
            lines = access.wait(before + len(reqs))[before:]
            assert len(lines) == len(reqs)
            for (target, ua, ref, echo), line in zip(reqs, lines):
                sent = {"default": [target], "json": [target, ua, ref],
                        "gunicorn": [target, ua, ref, echo, echo]}[fmt]
                assert _fields(fmt, line) == sent

        check()
