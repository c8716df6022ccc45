"""The request-line (RFC 9112 §2.2, §3, §3.2; RFC 9110 §9.1, §15.6.6): what skirr accepts and
puts in the scope, and what it refuses with which status (spec/http_request_line.toml).

Each case names the bytes sent and the exact status or scope expected.
"""
import string

import pytest

from _cases import H, assert_refused, get, one_scope
from _ws import upgrade

rule = pytest.mark.rule


# -- empty lines before the request-line ---------------------------------------------------------


@rule("RFC9112-2.2-leading-empty-lines")
@pytest.mark.parametrize("lead", [b"\r\n", b"\r\n\r\n\r\n", b"\n"], ids=["crlf", "3crlf", "lf"])
def test_empty_lines_before_request_line_ignored(serve, echo_app, lead):
    """RFC 9112 §2.2: a server SHOULD ignore at least one empty line received before the
    request-line. skirr ignores any number (CRLF or LF), on a fresh connection and between
    pipelined requests."""
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, lead + get(b"/lead"))
        assert (scope["method"], scope["path"]) == ("GET", "/lead")
        c = srv.connect()
        c.send(get(b"/1") + lead + get(b"/2"))
        assert [c.response().get(b"x-target"), c.response().get(b"x-target")] == [b"/1", b"/2"]


# -- method --------------------------------------------------------------------------------------

REGISTERED = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "PATCH", "COPY", "LOCK", "MKCOL",
    "MOVE", "PROPFIND", "PROPPATCH", "SEARCH", "UNLOCK", "BIND", "REBIND", "UNBIND", "ACL",
    "REPORT", "MKACTIVITY", "CHECKOUT", "MERGE", "M-SEARCH", "NOTIFY", "SUBSCRIBE", "UNSUBSCRIBE",
    "PURGE", "MKCALENDAR", "LINK", "UNLINK", "SOURCE", "QUERY",
]


@rule("RFC9110-9.1-registered-methods")
def test_registered_methods_reach_the_app(serve, echo_app):
    """Every method of skirr's table (RFC 9110 §9.3, WebDAV, and the other methods llhttp knows
    for HTTP) reaches the app as the same upper-case str."""
    with serve(echo_app) as srv:
        c = srv.connect()
        for m in REGISTERED:
            r = c.request(f"{m} /m HTTP/1.1\r\nHost: x\r\n\r\n".encode(), m)
            assert r.status == 200, (m, r.status)
        assert [x["scope"]["method"] for x in echo_app.calls.wait(len(REGISTERED))] == REGISTERED


@rule("RFC9110-9.1-unknown-method-501")
@pytest.mark.parametrize(
    "method", [b"FOO", b"GETX", b"G", b"X-Y", b"DESCRIBE", b"GET_PARAMETER", b"get", b"Get"],
    ids=["FOO", "GETX", "G", "X-Y", "rtsp-DESCRIBE", "rtsp-GET_PARAMETER", "lower-get", "Get"],
)
def test_unknown_method_token_is_501(serve, echo_app, method):
    """A method that is a token but not in skirr's table is not implemented: 501 (RFC 9110
    §9.1). Methods are case-sensitive, so "get" is an unknown method, not GET; RTSP methods are
    not HTTP methods."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, method + b" / HTTP/1.1\r\n" + H + b"\r\n", 501)


@rule("RFC9112-3-method-token")
@pytest.mark.parametrize(
    "line", [b"G(T / HTTP/1.1", b"GE\x01T / HTTP/1.1", b"GET\x80 / HTTP/1.1", b"/ HTTP/1.1"],
    ids=["separator", "ctl", "obs-text", "no-method"],
)
def test_method_not_a_token_is_400(serve, echo_app, line):
    """method = token (RFC 9112 §3.1): anything else makes the request-line invalid: 400."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, line + b"\r\n" + H + b"\r\n", 400)


@rule("RFC9110-9.3.6-connect-501")
@pytest.mark.parametrize(
    "target", [b"example.com:443", b"/", b"http://example.com/", b"*"],
    ids=["authority-form", "origin-form", "absolute-form", "asterisk-form"],
)
def test_connect_is_501(serve, echo_app, target):
    """CONNECT asks for a tunnel, which an ASGI http app cannot provide: 501 whatever the
    target, and nothing after it on the connection is read."""
    data = b"CONNECT " + target + b" HTTP/1.1\r\nHost: example.com:443\r\n\r\n" + get(b"/next")
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, data, 501)


@rule("skirr-request-pri-501")
def test_pri_method_is_501(serve, echo_app):
    """PRI is the HTTP/2 connection preface's method; over HTTP/1.1 it is not implemented: 501.
    With --http 1 the preface itself (PRI * HTTP/2.0) is refused as an unsupported version (505);
    with --http auto it is HTTP/2 (spec/http2.toml h2-prior-knowledge)."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, b"PRI * HTTP/1.1\r\n" + H + b"\r\n", 501)
    with serve(echo_app, http="1") as srv:
        assert_refused(srv, echo_app, b"PRI * HTTP/1.1\r\n" + H + b"\r\n", 501)
        assert_refused(srv, echo_app, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505)


# -- spacing ------------------------------------------------------------------------------------


@rule("RFC9112-3-single-sp")
@pytest.mark.parametrize(
    "line",
    [b"GET  / HTTP/1.1", b"GET /  HTTP/1.1", b"GET / HTTP/1.1 ", b"GET\t/ HTTP/1.1",
     b"GET /\tHTTP/1.1", b" GET / HTTP/1.1"],
    ids=["sp-sp-after-method", "sp-sp-after-target", "sp-after-version", "htab-after-method",
         "htab-after-target", "leading-sp"],
)
def test_request_line_separators_exactly_one_sp(serve, echo_app, line):
    """request-line = method SP request-target SP HTTP-version (RFC 9112 §3): skirr parses
    strictly; other whitespace (extra SP, HTAB, leading SP) makes it invalid: 400."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, line + b"\r\n" + H + b"\r\n", 400)


@rule("RFC9112-2.2-bare-cr")
@pytest.mark.parametrize(
    "data",
    [b"GET / HTTP/1.1\r\rHost: x\r\n\r\n", b"GET /a\rb HTTP/1.1\r\nHost: x\r\n\r\n",
     b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\r\n\r\n",
     b"GET / HTTP/1.1\r\nHost: x\r\n\r\r\n"],
    ids=["after-version", "in-target", "in-value", "before-crlf", "in-empty-line"],
)
def test_bare_cr_is_400(serve, echo_app, data):
    """RFC 9112 §2.2: a bare CR MUST be treated as invalid (or replaced by SP); skirr refuses
    the message: 400."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, data, 400)


# -- HTTP-version -------------------------------------------------------------------------------


@rule("RFC9112-2.3-version-syntax")
@pytest.mark.parametrize(
    "version",
    [b"HTTP/1.10", b"HTTP/01.1", b"http/1.1", b"HTTQ/1.1", b"HTTP/1", b"HTTP/1.", b"HTTP/a.b",
     b"HTTP 1.1"],
    ids=["two-minor-digits", "two-major-digits", "lower-case", "bad-name", "no-minor", "no-minor-digit",
         "letters", "space"],
)
def test_malformed_version_is_400(serve, echo_app, version):
    """HTTP-version = "HTTP" "/" DIGIT "." DIGIT, case-sensitive (RFC 9112 §2.3): anything else
    makes the request-line invalid: 400 (not 505, which is for well-formed versions)."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, b"GET / " + version + b"\r\n" + H + b"\r\n", 400)


@rule("RFC9110-15.6.6-version-505")
@pytest.mark.parametrize(
    "version", [b"HTTP/0.9", b"HTTP/1.2", b"HTTP/1.9", b"HTTP/2.0", b"HTTP/3.0", b"HTTP/9.9"]
)
def test_unsupported_version_is_505(serve, echo_app, version):
    """A well-formed HTTP-version other than 1.0 and 1.1 gets 505 (RFC 9110 §15.6.6); the
    refusal itself is an HTTP/1.1 message."""
    with serve(echo_app) as srv:
        r = assert_refused(srv, echo_app, b"GET / " + version + b"\r\n" + H + b"\r\n", 505)
        assert r.http_version == b"1.1"


@rule("RFC9112-3-http09-refused")
@pytest.mark.parametrize(
    "data", [b"GET /\r\n\r\n", b"GET /\r\nHost: x\r\n\r\n", b"GET\r\n\r\n"],
    ids=["simple-request", "simple-with-field", "method-only"],
)
def test_http09_simple_request_is_400(serve, echo_app, data):
    """An HTTP/0.9 simple-request (no HTTP-version) is not a valid HTTP/1.1 request-line: 400,
    never a response without a status-line."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, data, 400)


# -- request-target forms -----------------------------------------------------------------------


@rule("RFC9112-3.2-target-form")
@pytest.mark.parametrize(
    "target",
    [b"a", b"?a", b"a/b", b"http:/p", b"mailto:x", b"example.com:80", b"%2F"],
    ids=["relative", "query-only", "relative-path", "scheme-no-authority", "urn", "authority-form",
         "escaped-slash-first"],
)
def test_target_in_no_form_is_400(serve, echo_app, target):
    """RFC 9112 §3.2: the request-target is origin-form (starts with "/"), absolute-form
    (scheme "://" authority ...), authority-form (CONNECT only) or asterisk-form. A target in
    none of these forms is invalid: 400."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, get(target), 400)


@rule("RFC9112-3.2-target-chars")
@pytest.mark.parametrize(
    "target",
    [b"/a b", b"/a\x01b", b"/a\x7f", b"/a\x80", b"/caf\xc3\xa9", b"/a\x00b"],
    ids=["space", "ctl", "del", "obs-text", "raw-utf8", "nul"],
)
def test_target_bytes_outside_vchar_are_400(serve, echo_app, target):
    """A request-target holds visible ASCII only (RFC 9112 §3.2, RFC 3986): SP, controls and
    bytes >= 0x80 are refused with 400 (raw UTF-8 must be percent-encoded)."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, get(target), 400)


@rule("RFC9112-3.2-target-form")
@pytest.mark.parametrize("method", [b"GET", b"HEAD", b"POST", b"OPTIONS", b"PUT"])
def test_authority_form_without_connect_is_400(serve, echo_app, method):
    """authority-form (RFC 9112 §3.2.3) is only for CONNECT: with any other method the target
    is in no form it may take: 400 (not 501, which is CONNECT's own answer)."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, method + b" example.com:80 HTTP/1.1\r\n" + H + b"\r\n", 400,
                       method=method.decode())


@rule("RFC9112-3.2-target-form")
@pytest.mark.parametrize("line", [b"GET  HTTP/1.1", b"OPTIONS  HTTP/1.1", b"GET "],
                         ids=["get", "options", "line-ends"])
def test_empty_target_is_400(serve, echo_app, line):
    """request-target is never empty (RFC 9112 §3.2): nothing between the method's SP and the
    version, or the line ending after that SP, is an invalid request-line: 400."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, line + b"\r\n" + H + b"\r\n", 400)


# -- the request-target grammar, byte by byte (issue 35 item 2) ---------------------------------

PCHAR = set((string.ascii_letters + string.digits + "-._~" + "!$&'()*+,;=" + ":@").encode())
LENIENT_PATH = set(b"[]^|")  # the WHATWG URL Standard leaves these unencoded in paths
LENIENT_QUERY = set(b"[]\\^`{|}")  # ... and these in queries
PATH_OK = PCHAR | set(b"/?") | LENIENT_PATH  # "?" ends the path: the query starts
QUERY_OK = PCHAR | set(b"/?") | LENIENT_QUERY


def _split(target: bytes) -> tuple:
    path, q, query = target.partition(b"?")
    return path, query if q else b""


@rule("RFC9112-3.2-target-grammar")
@pytest.mark.parametrize("byte", range(256), ids=lambda b: f"0x{b:02x}")
def test_every_byte_in_the_path_and_in_the_query(serve, echo_app, byte):
    """RFC 9112 §3.2 with RFC 3986 §3.3 (path: pchar and "/") and §3.4 (query: pchar, "/" and
    "?"), plus skirr's lenient bytes ("[" "]" "^" "|" in both, "\\" "`" "{" "}" in the query):
    each byte 0x00-0xFF between "/a" and "z", and between "/a?x=" and "z". An allowed byte reaches
    raw_path or query_string unchanged; any other gets the request-line's 400 and the app is never
    called ("%" before "z" is not a pct-encoding)."""
    b = bytes([byte])
    with serve(echo_app) as srv:
        for target, allowed in ((b"/a" + b + b"z", byte in PATH_OK),
                                (b"/a?x=" + b + b"z", byte in QUERY_OK)):
            if allowed:
                scope = one_scope(srv, echo_app, get(target))
                assert (scope["raw_path"], scope["query_string"]) == _split(target), target
            else:
                assert_refused(srv, echo_app, get(target), 400)


@rule("RFC9112-3.2-target-grammar")
def test_the_issue_target_is_refused_like_any_invalid_request_line(serve, echo_app):
    """The target of issue 35 ('<', '>', '{', '}' and '`' in a path) gets exactly the bytes of the
    400 that any invalid request-line gets (here: two SP after the method), Date aside."""
    def without_date(raw: bytes) -> bytes:
        return b"\r\n".join(line for line in raw.split(b"\r\n") if not line.lower().startswith(b"date:"))

    with serve(echo_app) as srv:
        bad_target = assert_refused(srv, echo_app, get(b"/a<b>{c}|d^e`f"), 400)
        two_sp = assert_refused(srv, echo_app, b"GET  / HTTP/1.1\r\n" + H + b"\r\n", 400)
        assert without_date(bad_target.raw) == without_date(two_sp.raw)


@rule("RFC9112-3.2-target-grammar")
@pytest.mark.parametrize(
    "target, raw_path, query",
    [
        (b"/a[1]/b|c^d?x[]=1&y[k]=v", b"/a[1]/b|c^d", b"x[]=1&y[k]=v"),
        (b"/fonts?family=A|B&t={x}&s=a\\b&g=`^`", b"/fonts", b"family=A|B&t={x}&s=a\\b&g=`^`"),
        (b"//a//?b?c/d?", b"//a//", b"b?c/d?"),
        (b"http://h/a[1]?x{}=|", b"/a[1]", b"x{}=|"),
    ],
    ids=["brackets-pipe-caret", "query-lenient", "empty-segments-and-question-marks", "absolute-form"],
)
def test_lenient_bytes_reach_the_app(serve, echo_app, target, raw_path, query):
    """What browsers send unencoded (WHATWG URL Standard) reaches the app as received, in the
    origin-form and in the absolute-form's path and query."""
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, get(target))
        assert (scope["raw_path"], scope["query_string"]) == (raw_path, query)


@rule("RFC9112-3.2-target-grammar")
@pytest.mark.parametrize(
    "target",
    [b"http://h/a\"b", b"http://h/a{b", b"http://h/a\\b", b"http://h?a<b", b"http://h:80/x?y>z",
     b"https://h/caf\xc3\xa9", b"/a<b>{c}|d^e`f"],
    ids=["absolute-path-quote", "absolute-path-brace", "absolute-path-backslash", "absolute-query-lt",
         "absolute-port-query-gt", "absolute-utf8", "issue-35"],
)
def test_bytes_outside_the_grammar_are_400(serve, echo_app, target):
    """The absolute-form's path and query are held to the origin-form's rules (its authority to
    the Host field's): a byte outside them is 400."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, get(target), 400)


@rule("RFC9112-3.2-target-grammar", "RFC9112-3.2-target-pct-encoded")
@pytest.mark.parametrize("target", ['/ws"x', "/ws{x}", "/ws?x=<y>", "/ws%zz"],
                         ids=["quote", "brace-in-path", "lt-in-query", "bad-pct"])
def test_websocket_handshake_target_is_held_to_the_grammar(serve, echo_app, target):
    """A WebSocket opening handshake is an HTTP request (RFC 6455 §4.1): its target is parsed by
    the same rules, and a bad one gets the same 400 before any app sees a scope."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, upgrade(target=target), 400)


@rule("RFC9112-3.2-target-pct-encoded")
@pytest.mark.parametrize(
    "target",
    [b"/a%", b"/a%2", b"/a%zz", b"/a%4g", b"/a%%41", b"/%/", b"/?q=100%", b"/?q=%zz", b"/?q=%?1",
     b"http://h/%zz", b"http://h?%g0"],
    ids=["end", "one-digit", "not-hex", "second-not-hex", "percent-percent", "before-slash",
         "query-end", "query-not-hex", "query-before-question", "absolute-path", "absolute-query"],
)
def test_bad_pct_encoding_is_400(serve, echo_app, target):
    """pct-encoded = "%" HEXDIG HEXDIG (RFC 3986 §2.1), in the path and in the query: any other
    "%" makes the request-target invalid: 400."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, get(target), 400)


@rule("RFC9112-3.2-target-pct-encoded")
def test_pct_encodings_of_any_octet_and_case_are_accepted(serve, echo_app):
    """Upper and lower case hex, of any octet, pass through raw_path and query_string as
    received (the path is decoded into scope["path"], UTF-8 with replacement)."""
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, get(b"/%2f%2F%aA%7e%41?q=%41%7e%ff%00"))
        assert (scope["raw_path"], scope["query_string"], scope["path"]) == (
            b"/%2f%2F%aA%7e%41", b"q=%41%7e%ff%00", "///\ufffd~A")


@rule("RFC9112-3.2.1-fragment-400")
@pytest.mark.parametrize("target", [b"/a#f", b"/a?q#f", b"/#", b"/a?q=1#", b"http://h/a#f", b"http://h#f",
                                    b"ftp://h#f/x"])
def test_fragment_in_target_is_400(serve, echo_app, target):
    """origin-form = absolute-path [ "?" query ] has no fragment, nor has the absolute-form as a
    request-target: a "#" anywhere (the authority included, whatever the scheme) makes the
    request-target invalid: 400."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, get(target), 400)


@rule("RFC9112-3.2.2-absolute-form")
@pytest.mark.parametrize(
    "target, path, raw_path, query, host",
    [
        (b"http://example.com/p?q=1", "/p", b"/p", b"q=1", b"example.com"),
        (b"http://example.com", "/", b"/", b"", b"example.com"),
        (b"http://example.com?x=1", "/", b"/", b"x=1", b"example.com"),
        (b"http://example.com:8080/a%20b/c", "/a b/c", b"/a%20b/c", b"", b"example.com:8080"),
        (b"https://[::1]:443/s", "/s", b"/s", b"", b"[::1]:443"),
        (b"HTTP://EXAMPLE.COM/Up", "/Up", b"/Up", b"", b"EXAMPLE.COM"),
    ],
    ids=["path-query", "no-path", "query-no-path", "port-escape", "https-ipv6", "upper-case"],
)
def test_absolute_form_path_query_and_host_from_url(serve, echo_app, target, path, raw_path, query,
                                                    host):
    """RFC 9112 §3.2.2: a server MUST accept the absolute-form, and an origin server MUST use the
    target's authority instead of the Host field. path, raw_path and query_string come from the
    URL ("/" when its path is empty); the Host value in headers is the URL's authority (the app
    gets one answer to "which host"); the other fields are unchanged."""
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, get(target, b"X-A: 1\r\n"))
        assert (scope["path"], scope["raw_path"], scope["query_string"]) == (path, raw_path, query)
        assert [tuple(h) for h in scope["headers"]] == [(b"host", host), (b"x-a", b"1")]


@rule("RFC9110-7.4-misdirected-scheme-421")
@pytest.mark.parametrize("target", [b"ftp://example.com/p", b"ws://example.com/", b"httpx://e/",
                                    b"file://x/etc/passwd"])
def test_absolute_form_with_another_scheme_is_421(serve, echo_app, target):
    """RFC 9110 §7.4: skirr is the origin server for http and https targets only; an
    absolute-form target with any other scheme is refused with 421 Misdirected Request (it
    used to be served as if it were http) and never reaches the app."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, get(target), 421)


@rule("RFC9110-4.2.4-userinfo-400")
@pytest.mark.parametrize("target", [b"http://u@example.com/p", b"http://u:pw@example.com:80/",
                                    b"http://@example.com/"], ids=["user", "user-password", "empty"])
def test_userinfo_in_absolute_form_is_400(serve, echo_app, target):
    """RFC 9110 §4.2.4: userinfo in an http(s) URI is deprecated; a recipient SHOULD treat it as an
    error. skirr refuses it with 400 rather than hand the app a Host value with credentials in
    it."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, get(target), 400)


@rule("RFC9112-3.2.4-asterisk-form")
def test_asterisk_form_for_options(serve, echo_app):
    """OPTIONS * (RFC 9112 §3.2.4, a server-wide OPTIONS): accepted; path "*", raw_path b"*",
    query_string b""."""
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, b"OPTIONS * HTTP/1.1\r\n" + H + b"\r\n", "OPTIONS")
        assert (scope["method"], scope["path"], scope["raw_path"], scope["query_string"]) == (
            "OPTIONS", "*", b"*", b"")


@rule("RFC9112-3.2.4-asterisk-form-options-only")
@pytest.mark.parametrize("method", [b"GET", b"POST", b"HEAD", b"DELETE"])
def test_asterisk_form_with_another_method_is_400(serve, echo_app, method):
    """The asterisk-form is only used for a server-wide OPTIONS request (RFC 9112 §3.2.4): with any
    other method the target is invalid: 400."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, method + b" * HTTP/1.1\r\n" + H + b"\r\n", 400,
                       method=method.decode())


@rule("RFC9112-3.2.4-asterisk-form-exact")
@pytest.mark.parametrize("line", [b"GET *x", b"OPTIONS *x", b"OPTIONS */a", b"OPTIONS **"],
                         ids=["get", "options", "options-slash", "options-two-stars"])
def test_asterisk_followed_by_more_is_400(serve, echo_app, line):
    """asterisk-form = "*" exactly: "*x", "*/a" are in no request-target form: 400, with OPTIONS
    too."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, line + b" HTTP/1.1\r\n" + H + b"\r\n", 400)


# -- Host ---------------------------------------------------------------------------------------


@rule("RFC9112-3.2-host-required")
@pytest.mark.parametrize(
    "data", [b"GET / HTTP/1.1\r\n\r\n", b"GET / HTTP/1.1\r\nX-Host: x\r\n\r\n",
             b"GET http://example.com/ HTTP/1.1\r\n\r\n"],
    ids=["no-fields", "other-field", "absolute-form"],
)
def test_http11_without_host_is_400(serve, echo_app, data):
    """RFC 9112 §3.2: a server MUST respond 400 to an HTTP/1.1 request that lacks a Host field
    (absolute-form included)."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, data, 400)


@rule("RFC9112-3.2-host-once")
@pytest.mark.parametrize(
    "fields", [b"Host: x\r\nHost: x\r\n", b"Host: a\r\nHost: b\r\n", b"HOST: x\r\nhost: y\r\n",
               b"Host: x\r\nX-A: 1\r\nHost: x\r\n"],
    ids=["same", "different", "case", "apart"],
)
def test_more_than_one_host_is_400(serve, echo_app, fields):
    """RFC 9112 §3.2: more than one Host field-line MUST get 400 (names compared
    case-insensitively)."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, b"GET / HTTP/1.1\r\n" + fields + b"\r\n", 400)


@rule("RFC9112-3.2-host-syntax")
@pytest.mark.parametrize(
    "value", [b"a b", b"x/y", b"x@y", b"a\x80", b"x?y", b"x#y", b'x"y'],
    ids=["space", "slash", "at", "obs-text", "question", "hash", "quote"],
)
def test_invalid_host_value_is_400(serve, echo_app, value):
    """RFC 9112 §3.2: a Host whose value is not uri-host [ ":" port ] is invalid: 400."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, b"GET / HTTP/1.1\r\nHost: " + value + b"\r\n\r\n", 400)


@rule("RFC9112-3.2-host-valid-forms")
@pytest.mark.parametrize(
    "value", [b"", b"example.com", b"example.com:8080", b"[::1]:80", b"127.0.0.1", b"xn--e1a.x:1",
              b"a-b.c_d~e%20"],
    ids=["empty", "name", "name-port", "ipv6", "ipv4", "idna", "unreserved-pct"],
)
def test_valid_host_values_accepted(serve, echo_app, value):
    """An empty Host (allowed when the target has no authority) and every uri-host [":" port]
    form are accepted and passed unchanged in headers."""
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, b"GET / HTTP/1.1\r\nHost: " + value + b"\r\n\r\n")
        assert [tuple(h) for h in scope["headers"]] == [(b"host", value)]


@rule("RFC9112-3.2-http10-host-optional")
def test_http10_without_host_accepted(serve, echo_app):
    """Host is required of HTTP/1.1 only: an HTTP/1.0 request without it is served."""
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, b"GET /old HTTP/1.0\r\n\r\n")
        assert (scope["http_version"], scope["path"], scope["headers"]) == ("1.0", "/old", [])


# -- the authority, wherever it comes from (issue 11 item 1) -----------------------------------

BAD_AUTHORITIES = [b"", b":80", b"a:b", b"[::1", b"[zz]", b"a%2", b"a%zz", b"[::1]x", b"a:8o"]
BAD_IDS = ["empty", "port-only", "port-letters", "unclosed-bracket", "bad-ip-literal",
           "short-pct", "bad-pct", "after-bracket", "port-letter-o"]


@rule("RFC9112-3.2.2-authority-syntax")
@pytest.mark.parametrize("authority", BAD_AUTHORITIES, ids=BAD_IDS)
def test_invalid_absolute_form_authority_is_400(serve, echo_app, authority):
    """The absolute-form's authority replaces Host, so it is held to the same syntax, and its host
    may not be empty (RFC 9110 §4.2.1): 400 however valid the Host field is."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, get(b"http://" + authority + b"/x"), 400)


@rule("RFC9112-3.2.2-authority-syntax")
@pytest.mark.parametrize("authority", BAD_AUTHORITIES[1:], ids=BAD_IDS[1:])
def test_the_same_values_in_host_are_400(serve, echo_app, authority):
    """One validator for both sources: each of those values in a Host field is refused too (the
    empty one aside: an empty Host is allowed, RFC 9112 §3.2)."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, b"GET / HTTP/1.1\r\nHost: " + authority + b"\r\n\r\n", 400)


@rule("RFC9112-3.2.2-authority-syntax")
@pytest.mark.parametrize(
    "authority",
    [b"example.com", b"a%2e.b:8", b"127.0.0.1:1", b"[::1]:8", b"[2001:db8::a:1]", b"[v1.x:y]",
     b"xn--e1a.x", b"a-b.c_d~e!$&'()*+,;="],
    ids=["name", "pct", "ipv4-port", "ipv6-port", "ipv6", "ipvfuture", "idna", "sub-delims"],
)
def test_valid_absolute_form_authorities_reach_the_app_as_host(serve, echo_app, authority):
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, get(b"http://" + authority + b"/x"))
        assert [tuple(h) for h in scope["headers"]] == [(b"host", authority)]


@rule("RFC9112-3.2.2-authority-syntax")
def test_http10_absolute_form_without_host_gets_host_from_authority(serve, echo_app):
    """RFC 9112 §3.2.2: the target's authority is the host; an HTTP/1.0 request may send no Host
    field, and the app still sees one answer to "which host"."""
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, b"GET http://example.org:81/x HTTP/1.0\r\nX-A: 1\r\n\r\n")
        assert (scope["path"], [tuple(h) for h in scope["headers"]]) == (
            "/x", [(b"x-a", b"1"), (b"host", b"example.org:81")])
