"""h11 as the oracle (spec/h11_oracle.toml): hypothesis generates requests, skirr serves them over
a real socket, h11 parses the same bytes.

- valid requests: the scope skirr builds (method, path, raw_path, query_string, headers,
  http_version) and the body the app receives equal what h11 parses, whole and cut at random
  offsets, and the pipelined canary after each request is served (no byte unaccounted for);
- invalid requests (one defect from a catalogue on a generated request): the exact refusal
  status, "connection: close", the connection closed, the app never answering, no 2xx, the
  canary never served, whole and cut;
- mutated requests (random byte edits of valid ones): whatever skirr does agrees with h11 on
  every request it serves, is the same whole and cut, and never crashes the worker.

One server per test function (module apps, not per example). Examples per property:
$SKIRR_HYPOTHESIS_EXAMPLES (200 by default, 2000 under `make conformance`), derandomized.
"""
from __future__ import annotations

import string

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from _rules import load_spec
from _oracle import (CANARY, OracleApp, comparable, deliver, expected_scope, h11_stream,
                     oracle_settings, read_outcome, scope_fields, send_pieces)

rule = pytest.mark.rule

# Planned rules the generators and checks step around until they are proven (read from spec/, so
# flipping the rule to proven turns the generated cases on).
PROVEN = {r["id"] for r in load_spec() if r["status"] == "proven"}
HTAB_OWS = "RFC9110-5.5-htab-ows-framing-fields" in PROVEN

TCHAR = "!#$%&'*+-.^_`|~" + string.digits + string.ascii_letters
METHODS = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "PATCH", "COPY", "LOCK", "MKCOL",
    "MOVE", "PROPFIND", "PROPPATCH", "SEARCH", "UNLOCK", "BIND", "REBIND", "UNBIND", "ACL",
    "REPORT", "MKACTIVITY", "CHECKOUT", "MERGE", "M-SEARCH", "NOTIFY", "SUBSCRIBE", "UNSUBSCRIBE",
    "PURGE", "MKCALENDAR", "LINK", "UNLINK", "SOURCE", "QUERY",
]
RESERVED = {"host", "content-length", "transfer-encoding", "connection", "expect", "upgrade"}
UNRESERVED = string.ascii_letters + string.digits + "-._~"
SUB_DELIMS = "!$&'()*+,;="
# Not RFC 3986, but in skirr's lenient set (rule RFC9112-3.2-target-grammar), and h11 takes them too.
ODD_PATH = "[]^|"
ODD_QUERY = "[]\\^`{|}"

# -- strategies -----------------------------------------------------------------------------------
# Generation is a large share of the run time, so most strings come from one binary draw mapped
# onto the alphabet that matters (bytes.translate or a per-byte rule), not from per-character draws.


def _table(alphabet: bytes) -> bytes:
    return bytes(alphabet[i % len(alphabet)] for i in range(256))


TCHAR_TABLE = _table(TCHAR.encode())
VALUE_ALPHABET = bytes(range(0x21, 0x7F)) + bytes([0x80, 0x9F, 0xA0, 0xC3, 0xE9, 0xFF]) * 4 + b"  \t"
VALUE_TABLE = _table(VALUE_ALPHABET)
SEG_ALPHABET = (UNRESERVED + SUB_DELIMS + ":@").encode()
HOST_TABLE = _table((string.ascii_lowercase + string.digits + "-.").encode())
OWS_LEAD = [b"", b"", b" ", b"  ", b"\t", b" \t "]
OWS_TRAIL = [b"", b"", b" ", b"\t", b" \t"]


def _path_chars(raw: bytes, extra: bytes = b"", odd: str = ODD_PATH) -> str:
    """Each byte becomes a segment character, a percent-escape of some byte (either hex case),
    one of the `odd` characters skirr (leniently) and h11 both accept, or (from `extra`) '/' or
    '?'."""
    alphabet = SEG_ALPHABET + extra
    out = []
    for b in raw:
        if b % 9 == 0:
            out.append(("%%%02X" if b & 1 else "%%%02x") % ((b * 37 + 11) % 256))
        elif b % 31 == 0:
            out.append(odd[b % len(odd)])
        else:
            out.append(chr(alphabet[b % len(alphabet)]))
    return "".join(out)


@st.composite
def origin_form(draw) -> str:
    path = "/" + _path_chars(draw(st.binary(max_size=40)), b"/")
    if draw(st.booleans()):
        path += "?" + _path_chars(draw(st.binary(max_size=30)), b"/?", ODD_QUERY)
    return path


@st.composite
def host_value(draw) -> str:
    kind = draw(st.sampled_from(["name", "name", "name-port", "ipv6", "ipv4", "empty"]))
    name = draw(st.binary(min_size=1, max_size=15)).translate(HOST_TABLE).decode()
    if kind == "name":
        return name
    if kind == "name-port":
        return f"{name}:{draw(st.integers(0, 65535))}"
    if kind == "ipv6":
        return "[::1]:8080"
    if kind == "ipv4":
        return "127.0.0.1"
    return ""


@st.composite
def target(draw, method: str) -> str:
    kind = draw(st.sampled_from(["origin"] * 6 + ["absolute", "asterisk"]))
    if kind == "asterisk" and method == "OPTIONS":
        return "*"
    if kind == "absolute":
        scheme = draw(st.sampled_from(["http", "https", "HTTP"]))
        host = draw(host_value()) or "h"
        rest = draw(origin_form())
        if draw(st.booleans()):
            rest = rest.lstrip("/")  # "http://h" or "http://h?q"
            rest = "?" + rest.partition("?")[2] if "?" in rest else ""
        return f"{scheme}://{host}{rest}"
    return draw(origin_form())


@st.composite
def field_value(draw) -> bytes:
    """VCHAR and obs-text with SP/HTAB inside, then OWS around (which is not part of it)."""
    core = draw(st.binary(max_size=24)).translate(VALUE_TABLE).strip(b" \t")
    return draw(st.sampled_from(OWS_LEAD)) + core + draw(st.sampled_from(OWS_TRAIL))


field_name = (st.binary(min_size=1, max_size=16)
              .map(lambda b: b.translate(TCHAR_TABLE).decode())
              .filter(lambda n: n.lower() not in RESERVED))
BIG_CHUNK = bytes(range(251)) * 279  # 70,029 bytes: a chunk larger than any one read


@st.composite
def chunked_body(draw) -> tuple:
    """(wire bytes, content) of a chunked body with extensions and trailers."""
    chunks = draw(st.lists(st.binary(min_size=1, max_size=100), max_size=5))
    if draw(st.integers(0, 9)) == 0:
        chunks.append(BIG_CHUNK)
    exts = [b"", b"", b";a", b";a=b", b';q="x \\" y"', b";n=v;m", b";n="]
    wire = b""
    for data in chunks:
        size = "%x" % len(data)
        size = size.upper() if draw(st.booleans()) else size
        size = "0" * draw(st.integers(0, 3)) + size
        wire += size.encode() + draw(st.sampled_from(exts)) + b"\r\n" + data + b"\r\n"
    wire += b"0" * draw(st.integers(1, 3)) + draw(st.sampled_from(exts)) + b"\r\n"
    trailers = draw(st.lists(st.tuples(field_name, field_value()), max_size=3))
    for n, v in trailers:
        wire += n.encode() + b":" + v + b"\r\n"
    return wire + b"\r\n", b"".join(chunks)


@st.composite
def valid_request(draw) -> bytes:
    method = draw(st.sampled_from(METHODS))
    version = draw(st.sampled_from(["1.1"] * 4 + ["1.0"]))
    tgt = draw(target(method))
    fields = [(n.encode(), v)
              for n, v in draw(st.lists(st.tuples(field_name, field_value()), max_size=8))]
    if version == "1.1" or draw(st.booleans()):
        host = (draw(st.sampled_from([b"Host", b"host", b"HOST"])), draw(host_value()).encode())
        fields.insert(draw(st.integers(0, len(fields))), host)
    if version == "1.0":
        fields.append((b"Connection", b"keep-alive"))
    framing = draw(st.sampled_from(["none", "cl", "chunked"] if version == "1.1" else ["none", "cl"]))
    body = b""
    if framing == "cl":
        body = draw(st.one_of(st.binary(max_size=300),
                              st.integers(1, 100_000).map(lambda n: b"x" * n)))
        value = b"0" * draw(st.integers(0, 3)) + str(len(body)).encode()
        trail = [b"", b" ", b"  "] + ([b"\t", b" \t"] if HTAB_OWS else [])
        fields.append((b"Content-Length", draw(st.sampled_from([b"", b" ", b"\t"])) + value
                       + draw(st.sampled_from(trail))))
    elif framing == "chunked":
        body, _content = draw(chunked_body())
        te = draw(st.sampled_from([b"chunked", b"Chunked", b" chunked ", b"CHUNKED"]
                                  + ([b"chunked\t", b"\tchunked \t"] if HTAB_OWS else [])))
        fields.append((b"Transfer-Encoding", te))
    head = f"{method} {tgt} HTTP/{version}\r\n".encode()
    head += b"".join(n + b":" + v + b"\r\n" for n, v in fields)
    return head + b"\r\n" + body


def cut_points() -> st.SearchStrategy:
    """Up to four cut offsets (taken modulo the stream's length)."""
    return st.lists(st.integers(1, 1 << 30), max_size=4)


# -- the valid-request property -------------------------------------------------------------------


def check_served(app: OracleApp, c, outcome, expected: list) -> None:
    port = c.sock.getsockname()[1]
    assert outcome.refusal is None, f"refused with {outcome.refusal}"
    assert not outcome.silent, "the server went silent before the canary"
    assert [t for _, t, _, _ in outcome.served][-1] == b"/canary", outcome.served
    recs = app.records(port)
    got = [comparable(scope_fields(r)) for r in recs[:-1]]
    want = [comparable(expected_scope(p)) for p in expected]
    assert got == want
    assert all(s == 200 for s, _, _, _ in outcome.served)


@rule("skirr-h11-oracle-valid", "skirr-h11-oracle-split-invariant")
def test_valid_requests_match_h11(serve):
    app = OracleApp()

    with serve(app) as srv:
        @oracle_settings()
        @given(data=valid_request(), cuts=cut_points())
        def prop(data, cuts):
            note(f"request bytes: {data!r}")
            parsed = h11_stream(data)
            assert parsed.end == "idle" and len(parsed.requests) == 1, (
                f"generator bug: h11 does not take {data!r}: {parsed}")
            stream = data + CANARY
            for how in ("whole", "cut"):
                c, port = deliver(srv, stream, cuts, how)
                note(f"{how}: cuts {sorted({x % len(stream) for x in cuts})}")
                outcome = read_outcome(c, idle=5.0)  # valid input: silence is a failure
                check_served(app, c, outcome, parsed.requests)
                c.close()
                app.forget(port)

        prop()
        assert srv.thread.is_alive()


@rule("skirr-h11-oracle-split-invariant")
def test_valid_request_every_offset(serve):
    """A few generated requests, each cut into two writes at every offset."""
    app = OracleApp()

    with serve(app) as srv:
        @oracle_settings(n=max(5, min(25, oracle_settings().max_examples // 80)))
        @given(data=valid_request())
        def prop(data):
            parsed = h11_stream(data)
            stream = data + CANARY
            if len(stream) > 1500:
                return
            for cut in range(1, len(stream)):
                c = srv.connect()
                port = c.sock.getsockname()[1]
                send_pieces(c, stream, [cut], pause=0.0002)
                outcome = read_outcome(c, idle=5.0)  # valid input: silence is a failure
                check_served(app, c, outcome, parsed.requests)
                c.close()
                app.forget(port)

        prop()


# -- the invalid-request property -----------------------------------------------------------------

H = b"Host: x\r\n"


def _defects() -> dict:
    """name -> strategy of (request bytes, the status skirr must answer with). Each request has
    exactly one defect, on top of generated parts (start line, fields, values)."""
    start = st.sampled_from([b"GET /p HTTP/1.1\r\n", b"POST /p?q=1 HTTP/1.1\r\n", b"HEAD / HTTP/1.1\r\n"])
    fields = st.lists(st.tuples(field_name, field_value()), max_size=4).map(
        lambda fs: b"".join(n.encode() + b": " + v.strip() + b"\r\n" for n, v in fs))
    ws = st.sampled_from([b" ", b"\t"])
    ctl = st.sampled_from([bytes([b]) for b in [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F]])
    not_tchar = st.sampled_from([bytes([b]) for b in range(256) if chr(b) not in TCHAR and b != 0x3A])
    post = b"POST / HTTP/1.1\r\n" + H
    te = b"POST /c HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"

    def req(method_line=b"GET / HTTP/1.1\r\n", extra=b""):
        return method_line + H + extra + b"\r\n"

    def bare_lf(t):
        line, more, where = t
        if where == 0:  # after the request-line
            return line.replace(b"\r\n", b"\n") + H + more + b"\r\n"
        if where == 1:  # after a field-line
            return line + H.replace(b"\r\n", b"\n") + more + b"\r\n"
        return line + H + more + b"\n"  # the empty line

    def name_char(t):
        line, name, bad, i = t
        name = name.encode()
        return line + H + name[:i] + bad + name[i:] + b": v\r\n\r\n"

    def ctl_value(t):
        line, c, where = t
        return line + H + b"X-A: " + [c + b"a", b"a" + c + b"b", b"a" + c][where] + b"\r\n\r\n"

    d = {
        # field and line syntax
        "bare-lf": (st.tuples(start, fields, st.integers(0, 2)).map(bare_lf), 400),
        "bare-cr": (st.tuples(start, fields).map(lambda t: t[0] + H + b"X-A: a\rb\r\n" + t[1] + b"\r\n"), 400),
        "obs-fold": (st.tuples(start, fields, ws).map(
            lambda t: t[0] + H + b"X-A: a\r\n" + t[2] + b"b\r\n" + t[1] + b"\r\n"), 400),
        "ws-before-colon": (st.tuples(start, field_name, ws).map(
            lambda t: t[0] + H + t[1].encode() + t[2] + b": v\r\n\r\n"), 400),
        "name-char": (st.tuples(start, field_name, not_tchar, st.integers(0, 16)).map(name_char), 400),
        "ctl-in-value": (st.tuples(start, ctl, st.integers(0, 2)).map(ctl_value), 400),
        "empty-name": (start.map(lambda s: s + H + b": v\r\n\r\n"), 400),
        "no-colon": (st.tuples(start, field_name).map(lambda t: t[0] + H + t[1].encode() + b"\r\n\r\n"), 400),
        "ws-first-line": (st.tuples(start, ws).map(lambda t: t[0] + t[1] + H + b"\r\n"), 400),
        # Host
        "no-host": (st.tuples(start, fields).map(lambda t: t[0] + t[1] + b"\r\n"), 400),
        "two-hosts": (st.tuples(start, fields, host_value()).map(
            lambda t: t[0] + H + t[1] + b"host: " + t[2].encode() + b"\r\n\r\n"), 400),
        "host-char": (st.tuples(start, st.sampled_from(list(b' /@?#"<{\x80\xff'))).map(
            lambda t: t[0] + b"Host: a" + bytes([t[1]]) + b"b\r\n\r\n"), 400),
        # request-line
        "target-char": (st.tuples(st.sampled_from([b" ", b"#", b"\x00", b"\x01", b"\x7f", b"\x80", b"\xff",
                                                   b'"', b"<", b">", b"\\", b"`", b"{", b"}"]),
                                  st.integers(1, 5)).map(
            lambda t: b"GET /abcde"[:t[1] + 4] + t[0] + b"x HTTP/1.1\r\n" + H + b"\r\n"), 400),
        "target-query-char": (st.tuples(st.sampled_from([b"#", b"\x01", b"\x7f", b"\x80", b'"', b"<", b">"]),
                                        st.integers(0, 3)).map(
            lambda t: b"GET /a?b=cde"[:t[1] + 6] + t[0] + b"x HTTP/1.1\r\n" + H + b"\r\n"), 400),
        "target-pct": (st.sampled_from([b"/a%", b"/a%2", b"/a%zz", b"/a%4g", b"/?q=100%", b"/?q=%zz",
                                        b"http://h/%zz", b"http://h?%g0"]).map(
            lambda t: b"GET " + t + b" HTTP/1.1\r\n" + H + b"\r\n"), 400),
        "target-form": (st.sampled_from([b"a", b"?a", b"a/b", b"http:/p", b"mailto:x", b"h:80", b"%2F"]).map(
            lambda t: b"GET " + t + b" HTTP/1.1\r\n" + H + b"\r\n"), 400),
        "version-malformed": (st.sampled_from([b"HTTP/1.10", b"HTTP/01.1", b"http/1.1", b"HTTP/1",
                                               b"HTTP/a.b", b"HTTQ/1.1", b"HTTP/1.1 "]).map(
            lambda v: b"GET / " + v + b"\r\n" + H + b"\r\n"), 400),
        "version-unsupported": (st.tuples(st.integers(0, 9), st.integers(0, 9))
                                .filter(lambda t: t not in ((1, 0), (1, 1)))
                                .map(lambda t: b"GET / HTTP/%d.%d\r\n" % t + H + b"\r\n"), 505),
        "method-unknown": (st.text(string.ascii_uppercase + "-_", min_size=1, max_size=12)
                           .filter(lambda m: m not in METHODS + ["CONNECT", "PRI"])
                           .map(lambda m: req(m.encode() + b" / HTTP/1.1\r\n")), 501),
        "method-lower": (st.sampled_from(METHODS).map(lambda m: req(m.lower().encode() + b" / HTTP/1.1\r\n")), 501),
        "connect": (st.sampled_from([b"h:443", b"/", b"http://h/"]).map(
            lambda t: req(b"CONNECT " + t + b" HTTP/1.1\r\n")), 501),
        # Content-Length and Transfer-Encoding
        "cl-invalid": (st.sampled_from([b"+5", b"-5", b"0x5", b"5x", b"5 5", b"", b"1_0", b"5.0", b"5,5",
                                        b"5, 5", b",5"]).map(
            lambda v: post + b"Content-Length: " + v + b"\r\n\r\nhello"), 400),
        "cl-twice": (st.tuples(st.integers(0, 9), st.integers(0, 9)).map(
            lambda t: post + b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % t + b"x" * 9), 400),
        "cl-overflow": (st.integers(20, 40).map(lambda n: post + b"Content-Length: " + b"9" * n + b"\r\n\r\n"), 400),
        "cl-and-te": (st.sampled_from([b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
                                       b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n"]).map(
            lambda f: post + f + b"\r\n0\r\n\r\n"), 400),
        "te-not-final": (st.sampled_from([b"identity", b"gzip", b"chunked, gzip", b"chunked;q=1",
                                          b"chunked, chunked"]).map(
            lambda v: post + b"Transfer-Encoding: " + v + b"\r\n\r\n0\r\n\r\n"), 400),
        "te-unknown": (st.sampled_from([b"gzip", b"deflate", b"br", b"x-y"]).map(
            lambda v: post + b"Transfer-Encoding: " + v + b", chunked\r\n\r\n0\r\n\r\n"), 501),
        "te-http10": (st.just(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), 400),
        # chunked content
        "chunk-size": (st.sampled_from([b"zz", b"-5", b"+5", b"0x5", b"", b"5x", b" 5", b"5 ", b"5\t",
                                        b"f" * 17, b"1" + b"0" * 16]).map(
            lambda z: te + z + b"\r\nhello\r\n0\r\n\r\n"), 400),
        "chunk-crlf": (st.sampled_from([b"helloXX\r\n", b"hello\n", b"hello\rx", b"helloo\r\n"]).map(
            lambda c: te + b"5\r\n" + c + b"0\r\n\r\n"), 400),
        "chunk-ext": (st.sampled_from([b";", b";a b", b";\x01", b';a="open', b" ;a", b"; a", b";a =b",
                                       b";a= b", b";" + b"n" * 4097]).map(
            lambda e: te + b"5" + e + b"\r\nhello\r\n0\r\n\r\n"), 400),
        "trailer-framing": (st.sampled_from([b"Content-Length: 1", b"Transfer-Encoding: chunked"]).map(
            lambda t: te + b"5\r\nhello\r\n0\r\n" + t + b"\r\n\r\n"), 400),
        "trailer-syntax": (st.sampled_from([b"X : 1", b"X: \x01", b"X: a\r\n b", b"X", b"X(: 1"]).map(
            lambda t: te + b"5\r\nhello\r\n0\r\n" + t + b"\r\n\r\n"), 400),
        # limits (the server runs with limit_request_body=1,000,000)
        "target-414": (st.integers(8190, 8400).map(lambda n: req(b"GET /" + b"a" * n + b" HTTP/1.1\r\n")), 414),
        "fields-431": (st.integers(100, 120).map(
            lambda n: req(extra=b"".join(b"X-%d: v\r\n" % i for i in range(n)))), 431),
        "field-size-431": (st.integers(65527, 66000).map(lambda n: req(extra=b"X-Big: " + b"v" * n + b"\r\n")), 431),
        "cl-413": (st.integers(1_000_001, 10**15).map(lambda n: post + b"Content-Length: %d\r\n\r\n" % n), 413),
        "chunked-413": (st.integers(1_000_001, 10**12).map(lambda n: te + b"%x\r\nhello" % n), 413),
    }
    return {k: strat.map(lambda raw, status=status: (raw, status)) for k, (strat, status) in d.items()}


DEFECTS = _defects()


@rule("skirr-h11-oracle-invalid", "skirr-refusal-one-sink")
def test_invalid_requests_refused(serve):
    app = OracleApp()

    with serve(app, limit_request_body=1_000_000) as srv:
        @oracle_settings()
        @given(kind=st.sampled_from(sorted(DEFECTS)), data=st.data(), cuts=cut_points())
        def prop(kind, data, cuts):
            raw, status = data.draw(DEFECTS[kind], label=kind)
            note(f"{kind}: {raw[:300]!r} -> {status}")
            stream = raw + CANARY
            for how in ("whole", "cut"):
                c, port = deliver(srv, stream, cuts, how)
                outcome = read_outcome(c, idle=3.0)
                assert outcome.served == [], f"{how}: the app answered {outcome.served}"
                assert (outcome.refusal, outcome.refusal_close, outcome.closed) == (status, True, True), (
                    how, outcome)
                assert outcome.extra == b"", outcome.extra
                # The app may have been started by a valid head whose content is bad: then it
                # ends with http.disconnect, never with a complete body.
                for rec in app.records(port):
                    assert not rec["complete"], rec
                    assert rec["path"] != "/canary"
                c.close()
                app.forget(port)

        prop()
        assert srv.thread.is_alive()


# -- the mutation property ------------------------------------------------------------------------

INTERESTING = [b"\r", b"\n", b"\r\n", b" ", b"\t", b":", b",", b";", b"\x00", b"\x7f", b"\x80", b"\xff",
               b"#", b"?", b"%", b"/", b"0", b"a", b"H", b"=", b'"']


@st.composite
def mutated(draw) -> bytes:
    data = bytearray(draw(valid_request().filter(lambda d: len(d) < 2000)))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["insert", "replace", "delete", "dup"]))
        i = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "insert":
            data[i:i] = draw(st.sampled_from(INTERESTING))
        elif op == "replace" and data:
            data[i:i + 1] = draw(st.sampled_from(INTERESTING))
        elif op == "delete" and data:
            del data[i:i + draw(st.integers(1, 3))]
        elif op == "dup":
            j = draw(st.integers(i, min(len(data), i + 20)))
            data[j:j] = data[i:j]
    return bytes(data)


def _lenient_divergence(stream: bytes, skirr_count: int, h11_result) -> bool:
    """True when skirr serving more requests than h11 is one of the documented cases where
    skirr is the more lenient (spec/h11_oracle.toml): Transfer-Encoding with empty list
    elements before chunked."""
    return b"Only Transfer-Encoding: chunked is supported" in h11_result.error.encode()


def _planned_close(last: dict) -> bool:
    """skirr closed after this request although h11 keeps the connection: tolerated while the
    planned rule RFC9110-5.5-htab-ows-framing-fields is open (an HTAB in Connection makes
    skirr miss "keep-alive" or "close")."""
    return not HTAB_OWS and any(n == b"connection" and b"\t" in v for n, v in last["headers"])


@rule("skirr-h11-oracle-mutations", "skirr-h11-oracle-split-invariant")
def test_mutated_requests_agree_with_h11(serve):
    app = OracleApp()

    with serve(app, limit_request_body=1_000_000) as srv:
        @oracle_settings()
        @given(raw=mutated(), cuts=cut_points())
        def prop(raw, cuts):
            note(f"mutated bytes: {raw!r}")
            stream = raw + CANARY
            ref = h11_stream(stream)
            note(f"h11: {len(ref.requests)} request(s), then {ref.end} {ref.error}")

            def deliver_both(idle: float) -> tuple:
                """Both deliveries of the stream, each on a fresh connection: their keys, and
                whether either ended in silence."""
                keys, silent = [], False
                for how in ("whole", "cut"):
                    c, port = deliver(srv, stream, cuts, how)
                    outcome = read_outcome(c, idle=idle, owed=lambda served: len(served) < max(
                        len(ref.requests), sum(r["complete"] for r in app.records(port))))
                    note(f"{how}: {outcome.key()}")
                    recs = [r for r in app.records(port) if r["complete"]]
                    # every 2xx came from the app, and every complete app call was answered
                    assert all(s == 200 for s, _, _, _ in outcome.served)
                    assert len(recs) == len(outcome.served), (recs, outcome.served)
                    if outcome.refusal is not None:
                        assert 400 <= outcome.refusal <= 599 and outcome.refusal_close, outcome
                        assert outcome.extra == b"", outcome.extra
                    got = [comparable(scope_fields(r)) for r in recs]
                    want = [comparable(expected_scope(p)) for p in ref.requests]
                    n = min(len(got), len(want))
                    assert got[:n] == want[:n], "skirr and h11 read a request differently"
                    if len(got) > len(want):
                        assert _lenient_divergence(stream, len(got), ref), (
                            f"skirr served {len(got)} request(s), h11 parsed {len(want)} then {ref.end}"
                            f" {ref.error}")
                    if len(got) < len(want) and outcome.refusal is None and not (
                            outcome.closed and got and _planned_close(recs[-1])):
                        # skirr waits for content h11 thinks complete: a framing disagreement
                        raise AssertionError(
                            f"skirr served {len(got)} and went {'silent' if outcome.silent else 'closed'};"
                            f" h11 parsed {len(want)} complete request(s)")
                    keys.append((outcome.key(), got))
                    silent = silent or outcome.silent
                    c.close()
                    app.forget(port)
                return keys, silent

            keys, silent = deliver_both(0.3)
            if keys[0] != keys[1] and silent:
                # A refusal is owed by neither count `owed` knows (h11's error is not one): one
                # delivery may have gone quiet only because the machine is loaded. Deliver both
                # again, waiting 3 s of silence: a real disagreement repeats.
                note(f"retried after silence: {keys}")
                keys, silent = deliver_both(3.0)
            assert keys[0] == keys[1], "whole and cut deliveries differ"

        prop()
        assert srv.thread.is_alive()
