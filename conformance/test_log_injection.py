"""Log injection (issue 35 item 1, CWE-117; spec/operations.toml skirr-log-escape,
skirr-log-escape-json): every byte a client chose that reaches an access line, in every format,
is escaped, so one response is one line with the fields it had.

The rule, per byte (src/core/sk_logesc.h): ``"`` -> ``\\"``, ``\\`` -> ``\\\\``, 0x00-0x1F and
0x7F-0xFF -> ``\\xHH`` (upper-case hex), every other byte as it is. What a client can get to the
server (the parser refuses the rest): in the request-target ``"`` and ``\\`` (llhttp refuses the
controls, DEL and bytes above 0x7E there); in a field value HTAB, ``"``, ``\\`` and obs-text
0x80-0xFF (C1 controls in a latin-1 reading, such as U+0085 NEL and U+009B CSI; UTF-8, valid or
not). Each case asserts the exact line; ``escaped`` below is the rule written out again, and
``unescape`` its inverse, so the properties check that the escaped text gives back the bytes sent.
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
    client bytes too)."""
    while (await receive()).get("more_body"):
        pass
    echo = [v for k, v in scope["headers"] if k == b"x-echo"]
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), *((b"x-out", v) for v in echo)]})
    await send({"type": "http.response.body", "body": b"ok"})


# Field values as a client sends them, one per kind of byte; each parses (the server answers 200)
# and is logged escaped.
UA = b'ua "quoted" \\ back'  # the field delimiter and the escape character
REFERER = b"http://r/\x85\x9b[31mred"  # C1 controls in latin-1: NEL, and CSI + SGR
REQUEST_ID = b"id-\xff\xc3("  # invalid UTF-8
TAB = b"a\tb"  # the one C0 control a field value may carry
UTF8 = "café €".encode()  # valid UTF-8: escaped byte by byte too, as nginx does
# The request-target's two: '"' and '\', which llhttp lets through (RFC 3986 allows neither). The
# exact cases that send them on the wire (this, the refusal without Host, the WebSocket target)
# assume the server answers them; the property asks the server which bytes it accepts.
TARGET = '/a"x\\y?q="1"&b=\\'

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


@rule("skirr-log-escape")
def test_default_line(serve, access):
    """uvicorn's line: the request-target's quote and backslash escaped, as is the LogRecord's
    request_line attribute; a refusal's request line; a WebSocket handshake's target."""
    from _ws import ws_app

    async def both(scope, receive, send):
        await (ws_app if scope["type"] == "websocket" else app)(scope, receive, send)

    with serve(both) as srv:
        c = srv.connect()
        a = addr(c)
        assert c.request(http_request("GET", TARGET, headers=HEADERS)).status == 200
        lines = access.wait(1)
        c2 = srv.connect()
        a2 = addr(c2)
        c2.send(b'GET /no"host\\ HTTP/1.1\r\n\r\n')
        assert c2.response(allow_incomplete=True).status == 400
        access.wait(2)
        c3 = srv.connect()
        a3 = addr(c3)
        ws_exchange(c3, ws_upgrade('/chat?room="1"\\'), 101)
        lines = access.wait(3)
    assert lines == [
        f'{a} - "GET /a\\"x\\\\y?q=\\"1\\"&b=\\\\ HTTP/1.1" 200 OK',
        f'{a2} - "GET /no\\"host\\\\ HTTP/1.1" 400 Bad Request '
        f"(refused: HTTP/1.1 request without Host)",
        f'{a3} - "WebSocket /chat?room=\\"1\\"\\\\" [accepted]',
    ]
    rec = access.records[0]
    assert (rec.client_addr, rec.request_line) == (a, 'GET /a\\"x\\\\y?q=\\"1\\"&b=\\\\ HTTP/1.1')
    assert access.records[2].request_line == 'WebSocket /chat?room=\\"1\\"\\\\'


GUNICORN = ('%(h)s "%(r)s" %(m)s "%(U)s" "%(q)s" %(H)s "%(f)s" "%(a)s" "%({x-request-id}i)s" '
            '"%({x-tab}i)s" "%({x-echo}i)s" "%({x-out}o)s"')


@rule("skirr-log-escape")
def test_gunicorn_atoms(serve, access):
    """Every atom that shows client bytes: r U q, f a, a request field, a response field that
    carries them; gunicorn writes these as they are, skirr escaped."""
    with serve(app, access_log_format=GUNICORN) as srv:
        c = srv.connect()
        assert c.request(http_request("GET", TARGET, headers=HEADERS)).status == 200
        lines = access.wait(1)
    assert lines == [
        '127.0.0.1 "GET /a\\"x\\\\y?q=\\"1\\"&b=\\\\ HTTP/1.1" GET "/a\\"x\\\\y" '
        '"q=\\"1\\"&b=\\\\" HTTP/1.1 "http://r/\\x85\\x9B[31mred" "ua \\"quoted\\" \\\\ back" '
        '"id-\\xFF\\xC3(" "a\\x09b" "caf\\xC3\\xA9 \\xE2\\x82\\xAC" '
        '"caf\\xC3\\xA9 \\xE2\\x82\\xAC"'
    ]


@rule("skirr-log-escape")
def test_websocket_handshake_atoms(serve, access):
    """A WebSocket handshake's fields: the target, User-Agent, Sec-WebSocket-Protocol (its
    items reach the app as scope subprotocols, as received) and Origin, escaped."""
    from _ws import upgrade, ws_app

    fmt = '"%(r)s" %(s)s "%(a)s" "%({sec-websocket-protocol}i)s" "%({origin}i)s"'
    extra = (b'User-Agent: ws\x9b"ua\r\nSec-WebSocket-Protocol: chat, "x\x85\\\r\n'
             b"Origin: http://o\xc3\xa9\r\n")
    with serve(ws_app, access_log_format=fmt) as srv:
        ws_exchange(srv.connect(), upgrade(target='/chat?"q"', extra=extra), 101)
        lines = access.wait(1)
    assert lines == ['"GET /chat?\\"q\\" HTTP/1.1" 101 "ws\\x9B\\"ua" '
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
    back), the line is ASCII, one line, valid JSON; a refusal's request line too."""
    with serve(app, access_log_format="json") as srv:
        c = srv.connect()
        a = addr(c)
        assert c.request(http_request("GET", TARGET, headers=HEADERS)).status == 200
        access.wait(1)
        c2 = srv.connect()
        a2 = addr(c2)
        c2.send(b'GET /no"host\\?\x5c" HTTP/1.1\r\n\r\n')
        assert c2.response(allow_incomplete=True).status == 400
        line, refused = access.wait(2)
    assert line.isascii() and line.isprintable()
    got = json.loads(line)
    del got["time"], got["duration_ms"]
    assert json.loads(refused) | {"time": None} == {
        "time": None, "client": a2, "method": "GET", "path": '/no\\"host\\\\',
        "query": '\\\\\\"', "http_version": "1.1", "status": 400, "bytes": 11,
        "duration_ms": None, "referer": None, "user_agent": None, "request_id": None,
        "reason": "HTTP/1.1 request without Host"}
    assert got == {"client": a, "method": "GET", "path": '/a\\"x\\\\y',
                   "query": 'q=\\"1\\"&b=\\\\', "http_version": "1.1", "status": 200,
                   "bytes": 2, "referer": "http://r/\\x85\\x9B[31mred",
                   "user_agent": 'ua \\"quoted\\" \\\\ back', "request_id": "id-\\xFF\\xC3("}
    # json.dumps adds its own escapes on top: a JSON reader sees the text, not the raw bytes
    assert '"user_agent":"ua \\\\\\"quoted\\\\\\" \\\\\\\\ back"' in line


# -- skirr's own stderr handler (one write per batch, no LogRecord) --------------------------------

# The app of the stderr case: /override plays a middleware that put client text in the scope's
# method and client (a method override, a proxy-headers middleware of the app's own).
STDERR_APP = """
async def app(scope, receive, send):
    if scope["path"] == "/override":
        scope["method"] = 'PATCH"\\x1b'
        scope["client"] = ('6.6.6.6"\\n', 0)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})
"""


@rule("skirr-log-escape")
@_proc.each_loop
def test_stderr_fast_path(tmp_path, loop):
    """The default line as skirr's own handler writes it (the batch path that builds lines
    without a LogRecord): the same escaped text, one line per response, for the client's bytes
    and for what an app put in its scope."""
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
            proc.wait_stderr("/plain?x=1")
        assert proc.stop() == 0
        lines = [x for x in proc.stderr.splitlines() if x.startswith("INFO:") and ' - "' in x]
    assert lines == [
        f'INFO:     {client} - "GET /a\\"x\\\\y?q=\\"1\\"&b=\\\\ HTTP/1.1" 200 OK',
        'INFO:     6.6.6.6\\"\\x0A:0 - "PATCH\\"\\x1B /override HTTP/1.1" 200 OK',
        f'INFO:     {client} - "GET /plain?x=1 HTTP/1.1" 200 OK',
    ]


# -- the property: any bytes the server accepts, one line with its fields --------------------------

# A field value's bytes (VCHAR, obs-text, and SP/HTAB inside: the parser trims them at the edges).
VALUE_BYTES = bytes(range(0x21, 0x7F)) + bytes(range(0x80, 0x100))
QUOTED = r'"((?:[^"\\]|\\.)*)"'


def accepted_target_bytes(srv) -> bytes:
    """The bytes of 0x00-0xFF (but '?', the query's start) that the server lets through in a
    request-target, asked of the server itself (one request each): the property generates
    targets from these, so it follows the request-target grammar skirr enforces."""
    ok = bytearray()
    for b in range(256):
        if b == 0x3F:
            continue
        c = srv.connect()
        c.send(b"GET /a" + bytes([b]) + b"b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
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


def _target(alphabet: bytes):
    def seg(min_size):
        return st.binary(min_size=min_size, max_size=16).map(
            lambda b: bytes(alphabet[x % len(alphabet)] for x in b))
    # a query is never empty: "/p?" has the query_string b"" and is logged as "/p"
    return st.tuples(seg(0), st.one_of(st.none(), seg(1))).map(
        lambda t: b"/" + t[0] + (b"" if t[1] is None else b"?" + t[1]))


def _requests(alphabet: bytes):
    return st.lists(st.tuples(_target(alphabet), _value(), _value(), _value()), min_size=1,
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
        alphabet = accepted_target_bytes(srv)
        access.wait(255)  # the probes' lines (a refusal is logged too)
        del access.records[:]
        c = srv.connect()

        @oracle_settings(min(examples(60), 300))
        @given(_requests(alphabet))
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
