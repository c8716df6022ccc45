"""Field lines (RFC 9112 §5, RFC 9110 §5): the syntax skirr accepts, the values it puts in the
scope, and the malformed field-lines it refuses with 400 (spec/http_fields.toml).
"""
import pytest

from _cases import H, assert_refused, get, one_scope

rule = pytest.mark.rule

TCHARS = b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@rule("RFC9110-5.6.2-tchar-names")
def test_every_tchar_accepted_in_a_name(serve, echo_app):
    """field-name = token: every tchar is accepted; the scope has the name lower-cased."""
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, get(b"/", TCHARS + b": v\r\n"))
        assert [tuple(h) for h in scope["headers"]] == [(b"host", b"x"), (TCHARS.lower(), b"v")]


@rule("RFC9112-5-name-token")
@pytest.mark.parametrize(
    "name",
    [b"X(A", b"X)A", b"X,A", b"X/A", b"X;A", b"X<A", b"X=A", b"X>A", b"X?A", b"X@A", b"X[A",
     b"X\\A", b"X]A", b"X{A", b"X}A", b'X"A', b"X A", b"X\x01A", b"X\x7fA", b"X\x80A", b"X\xe9"],
    ids=["lparen", "rparen", "comma", "slash", "semicolon", "lt", "eq", "gt", "question", "at",
         "lbracket", "backslash", "rbracket", "lbrace", "rbrace", "dquote", "space", "ctl", "del",
         "obs-text", "latin1"],
)
def test_name_with_non_tchar_is_400(serve, echo_app, name):
    """A field-name byte that is not a tchar (separators, SP, controls, bytes >= 0x80) makes the
    field-line invalid: 400."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, get(b"/", name + b": v\r\n"), 400)


@rule("RFC9112-5.1-ws-before-colon")
@pytest.mark.parametrize("line", [b"X-A : a", b"X-A\t: a", b"Host : x"], ids=["sp", "htab", "host"])
def test_whitespace_before_colon_is_400(serve, echo_app, line):
    """RFC 9112 §5.1: a server MUST reject, with 400, a field-line with whitespace between the
    name and the colon (it would let a proxy and skirr disagree on the name)."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, get(b"/", line + b"\r\n"), 400)


@rule("RFC9112-5-empty-name")
@pytest.mark.parametrize("line", [b": a", b":"], ids=["value", "bare-colon"])
def test_empty_name_is_400(serve, echo_app, line):
    """field-name is a token of at least one byte: an empty name is invalid: 400."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, get(b"/", line + b"\r\n"), 400)


@rule("RFC9112-5-no-colon")
@pytest.mark.parametrize("line", [b"X-A", b"X-A a", b"X-A\ta"], ids=["name-only", "sp", "htab"])
def test_line_without_colon_is_400(serve, echo_app, line):
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, get(b"/", line + b"\r\n"), 400)


@rule("RFC9112-5.2-obs-fold-400")
@pytest.mark.parametrize(
    "fields", [b"X-A: a\r\n b\r\n", b"X-A: a\r\n\tb\r\n", b"X-A: a\r\n  \r\n",
               b"X-A:\r\n b\r\n"],
    ids=["sp", "htab", "whitespace-only", "empty-then-fold"],
)
def test_obs_fold_is_400(serve, echo_app, fields):
    """RFC 9112 §5.2: a server MUST either reject obs-fold with 400 or replace it with SP. skirr
    rejects: unfolding hides field content from intermediaries that do not."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, get(b"/", fields), 400)


@rule("RFC9112-2.2-whitespace-before-first-field")
@pytest.mark.parametrize("line", [b" Host: x", b"\tHost: x", b" X-A: 1"], ids=["sp", "htab", "other"])
def test_whitespace_line_after_request_line_is_400(serve, echo_app, line):
    """RFC 9112 §2.2: whitespace between the start-line and the first field MUST be rejected or
    the line ignored; skirr rejects with 400."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, b"GET / HTTP/1.1\r\n" + line + b"\r\n" + H + b"\r\n", 400)


@rule("RFC9110-5.5-nul-in-value")
@pytest.mark.parametrize("value", [b"a\x00b", b"\x00", b"a\x00"], ids=["inside", "only", "end"])
def test_nul_in_value_is_400(serve, echo_app, value):
    """RFC 9110 §5.5: NUL in a field value MUST be rejected or replaced; skirr rejects: 400."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, get(b"/", b"X-A: " + value + b"\r\n"), 400)


@rule("RFC9110-5.5-ctl-in-value")
@pytest.mark.parametrize(
    "ctl", [b"\x01", b"\x08", b"\x0b", b"\x0c", b"\x1b", b"\x1f", b"\x7f"],
    ids=["soh", "bs", "vt", "ff", "esc", "us", "del"],
)
def test_other_ctl_in_value_is_400(serve, echo_app, ctl):
    """RFC 9110 §5.5: field values with other CTLs are invalid, though a recipient MAY keep them.
    skirr refuses with 400: a control byte in a header is never what a client meant, and
    passing it on hands the app bytes that break logs and downstream parsers."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, get(b"/", b"X-A: a" + ctl + b"b\r\n"), 400)


@rule("RFC9110-5.5-value-bytes-kept")
def test_value_bytes_kept_as_received(serve, echo_app):
    """Every VCHAR, obs-text byte, and SP/HTAB inside the value reach the scope unchanged (no
    decoding, no folding of inner whitespace)."""
    vchar = bytes(range(0x21, 0x7F))
    obs = bytes(range(0x80, 0x100))
    value = vchar + b" \t " + obs + b"\tend"
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, get(b"/", b"X-All: " + value + b"\r\n"))
        assert [tuple(h) for h in scope["headers"]] == [(b"host", b"x"), (b"x-all", value)]


@rule("RFC9110-5.5-ows-trimmed")
@pytest.mark.parametrize(
    "raw, value",
    [(b"X-A:a", b"a"), (b"X-A:   a", b"a"), (b"X-A: a   ", b"a"), (b"X-A:\t a \t", b"a"),
     (b"X-A: a b", b"a b"), (b"X-A:", b""), (b"X-A:  \t ", b"")],
    ids=["no-ows", "leading", "trailing", "both-htab", "inner-kept", "empty", "ows-only"],
)
def test_leading_and_trailing_ows_not_in_value(serve, echo_app, raw, value):
    """field-line = field-name ":" OWS field-value OWS (RFC 9112 §5): the OWS around the value is
    not part of it; whitespace inside is."""
    with serve(echo_app) as srv:
        scope = one_scope(srv, echo_app, get(b"/", raw + b"\r\n"))
        assert [tuple(h) for h in scope["headers"]] == [(b"host", b"x"), (b"x-a", value)]


@rule("RFC9112-2.2-bare-lf-400")
@pytest.mark.parametrize(
    "data",
    [b"GET / HTTP/1.1\nHost: x\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\nX-A: a\r\n\r\n",
     b"GET / HTTP/1.1\r\nHost: x\r\n\n", b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\n\r\n",
     b"GET / HTTP/1.1\nHost: x\n\n"],
    ids=["after-request-line", "after-field", "end-of-head", "field-then-crlf", "everywhere"],
)
def test_bare_lf_is_400(serve, echo_app, data):
    """RFC 9112 §2.2 lets a recipient accept a bare LF as a line terminator (MAY); skirr does not:
    400. A proxy in front that splits lines differently is how requests get smuggled, and every
    real client sends CRLF."""
    with serve(echo_app) as srv:
        assert_refused(srv, echo_app, data, 400)
