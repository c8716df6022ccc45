"""Every place where skirr deliberately reads a request differently from h11 (spec/h11_oracle.toml,
rules skirr-h11-*). Each case feeds the same bytes to h11 (server role) and to skirr, and checks
both sides: what h11 does, and what skirr does instead. A change in either shows up here.
"""
import h11
import pytest

from _cases import H, get
from _oracle import CANARY, OracleApp, h11_stream, read_outcome

TE = b"POST /c HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
POST = b"POST /c HTTP/1.1\r\n" + H

# (divergence rule, family rule, bytes, what h11 does, what skirr does)
#   h11:   "error" (RemoteProtocolError), "accepts" (one complete request), or "partial"
#   skirr: a refusal status, or "served" (the request and the canary after it are answered)
CASES = {
    "connect": ("skirr-h11-connect-501", "RFC9110-9.3.6-connect-501",
                b"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n", "accepts", 501),
    "fragment": ("skirr-h11-fragment-400", "RFC9112-3.2.1-fragment-400", get(b"/a?q#f"), "accepts", 400),
    "quote-in-path": ("skirr-h11-target-grammar-400", "RFC9112-3.2-target-grammar", get(b'/a"b'), "accepts", 400),
    "issue-35-path": ("skirr-h11-target-grammar-400", "RFC9112-3.2-target-grammar", get(b"/a<b>{c}|d^e`f"),
                      "accepts", 400),
    "backslash-in-path": ("skirr-h11-target-grammar-400", "RFC9112-3.2-target-grammar", get(b"/a\\b"),
                          "accepts", 400),
    "lt-in-query": ("skirr-h11-target-grammar-400", "RFC9112-3.2-target-grammar", get(b"/a?x=<y>"), "accepts", 400),
    "quote-in-absolute-form": ("skirr-h11-target-grammar-400", "RFC9112-3.2-target-grammar",
                               get(b'http://h/a"b'), "accepts", 400),
    "bad-pct-in-path": ("skirr-h11-target-grammar-400", "RFC9112-3.2-target-pct-encoded", get(b"/a%zz"),
                        "accepts", 400),
    "bad-pct-in-query": ("skirr-h11-target-grammar-400", "RFC9112-3.2-target-pct-encoded", get(b"/?q=100%"),
                         "accepts", 400),
    "relative-target": ("skirr-h11-target-form-400", "RFC9112-3.2-target-form", get(b"a/b"), "accepts", 400),
    "authority-form-get": ("skirr-h11-target-form-400", "RFC9112-3.2-target-form", get(b"h:80"), "accepts", 400),
    "asterisk-with-get": ("skirr-h11-target-form-400", "RFC9112-3.2.4-asterisk-form-options-only",
                          get(b"*"), "accepts", 400),
    "scheme-without-authority": ("skirr-h11-target-form-400", "RFC9112-3.2-target-form", get(b"http:/p"), "accepts", 400),
    "lower-case-method": ("skirr-h11-method-table-501", "RFC9110-9.1-unknown-method-501",
                          b"get / HTTP/1.1\r\n" + H + b"\r\n", "accepts", 501),
    "unknown-method": ("skirr-h11-method-table-501", "RFC9110-9.1-unknown-method-501",
                       b"FROB / HTTP/1.1\r\n" + H + b"\r\n", "accepts", 501),
    "http-2.0": ("skirr-h11-version-505", "RFC9110-15.6.6-version-505", get(version=b"HTTP/2.0"), "accepts", 505),
    "http-0.9": ("skirr-h11-version-505", "RFC9110-15.6.6-version-505", get(version=b"HTTP/0.9"), "accepts", 505),
    "leading-crlf": ("skirr-h11-leading-empty-lines", "RFC9112-2.2-leading-empty-lines",
                     b"\r\n" + get(b"/c"), "error", "served"),
    "bare-lf": ("skirr-h11-bare-lf-400", "RFC9112-2.2-bare-lf-400", b"GET / HTTP/1.1\nHost: x\n\n", "accepts", 400),
    "obs-fold": ("skirr-h11-obs-fold-400", "RFC9112-5.2-obs-fold-400", get(b"/", b"X-A: a\r\n b\r\n"), "accepts", 400),
    "ctl-in-value": ("skirr-h11-ctl-400", "RFC9110-5.5-ctl-in-value", get(b"/", b"X-A: a\x01b\r\n"), "accepts", 400),
    "del-in-value": ("skirr-h11-ctl-400", "RFC9110-5.5-ctl-in-value", get(b"/", b"X-A: a\x7f\r\n"), "accepts", 400),
    "ctl-in-trailer": ("skirr-h11-ctl-400", "RFC9112-7.1.2-trailer-syntax-400",
                       TE + b"1\r\na\r\n0\r\nX: \x01\r\n\r\n", "accepts", 400),
    "host-syntax": ("skirr-h11-host-syntax-400", "RFC9112-3.2-host-syntax",
                    b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", "accepts", 400),
    "cl-identical-lines": ("skirr-h11-cl-duplicates-400", "RFC9110-8.6-cl-duplicates-400",
                           POST + b"Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc", "accepts", 400),
    "cl-identical-list": ("skirr-h11-cl-duplicates-400", "RFC9110-8.6-cl-duplicates-400",
                          POST + b"Content-Length: 3, 3\r\n\r\nabc", "accepts", 400),
    "cl-overflow": ("skirr-h11-cl-overflow-400", "RFC9112-6.3-cl-overflow-400",
                    POST + b"Content-Length: 99999999999999999999\r\n\r\nabc", "partial", 400),
    "te-in-http10": ("skirr-h11-te-http10-400", "RFC9112-6.1-te-http10-400",
                     b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "accepts", 400),
    "te-identity": ("skirr-h11-te-not-chunked-400", "RFC9112-6.3-chunked-not-final-400",
                    POST + b"Transfer-Encoding: identity\r\n\r\n", "error", 400),
    "te-chunked-twice": ("skirr-h11-te-not-chunked-400", "RFC9112-6.1-chunked-once",
                         POST + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "error", 400),
    "te-empty-element": ("skirr-h11-te-empty-elements", "RFC9110-5.6.1-te-empty-elements",
                         POST + b"Transfer-Encoding: , chunked\r\n\r\n1\r\na\r\n0\r\n\r\n", "error", "served"),
    "chunk-size-sp": ("skirr-h11-chunk-size-ws-400", "RFC9112-7.1-chunk-size-trailing-ws-400",
                      TE + b"5 \r\nhello\r\n0\r\n\r\n", "accepts", 400),
    "chunk-size-17-digits": ("skirr-h11-chunk-size-overflow-400", "RFC9112-7.1-chunk-size-overflow-400",
                             TE + b"10000000000000000\r\nhello\r\n0\r\n\r\n", "partial", 400),
    "chunk-ext-space": ("skirr-h11-chunk-ext-400", "RFC9112-7.1.1-chunk-ext-syntax-400",
                        TE + b"5;a b\r\nhello\r\n0\r\n\r\n", "accepts", 400),
    "chunk-ext-ctl": ("skirr-h11-chunk-ext-400", "RFC9112-7.1.1-chunk-ext-syntax-400",
                      TE + b"5;\x01\r\nhello\r\n0\r\n\r\n", "accepts", 400),
    "chunk-ext-bws-after-semicolon": ("skirr-h11-chunk-ext-400", "RFC9112-7.1.1-chunk-ext-bws-400",
                                      TE + b"5; a=b\r\nhello\r\n0\r\n\r\n", "accepts", 400),
    "trailer-content-length": ("skirr-h11-trailer-framing-400", "RFC9110-6.5.1-trailer-framing-400",
                               TE + b"1\r\na\r\n0\r\nContent-Length: 1\r\n\r\n", "accepts", 400),
}


def h11_verdict(data: bytes) -> str:
    """What plain h11 does with data (no skirr normalisation): its first request only."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    try:
        while True:
            ev = conn.next_event()
            if ev is h11.NEED_DATA:
                return "partial"
            if isinstance(ev, h11.EndOfMessage):
                return "accepts"
    except h11.RemoteProtocolError:
        return "error"


@pytest.mark.parametrize(
    "data, h11_does, skirr_does",
    [pytest.param(d, h, s, id=k, marks=pytest.mark.rule(r, f)) for k, (r, f, d, h, s) in CASES.items()],
)
def test_divergence(serve, data, h11_does, skirr_does):
    assert h11_verdict(data) == h11_does
    app = OracleApp()
    with serve(app) as srv:
        c = srv.connect()
        c.send(data + CANARY)
        out = read_outcome(c, idle=2.0)
        if skirr_does == "served":
            assert out.refusal is None and [t for _, t, _, _ in out.served] == [b"/c", b"/canary"], out
        else:
            assert (out.served, out.refusal, out.closed) == ([], skirr_does, True), out


@pytest.mark.rule("skirr-h11-te-value-raw", "RFC9112-6.1-chunked-case-insensitive")
def test_transfer_encoding_value_as_received(serve):
    """h11 lower-cases the Transfer-Encoding value it hands on; skirr gives the app the bytes
    received (ASGI headers are the received values)."""
    data = POST + b"Transfer-Encoding: Chunked\r\n\r\n1\r\na\r\n0\r\n\r\n"
    assert h11_stream(data).requests[0].headers[-1] == (b"transfer-encoding", b"chunked")
    app = OracleApp()
    with serve(app) as srv:
        c = srv.connect()
        c.send(data + CANARY)
        read_outcome(c)
        rec = app.records(c.sock.getsockname()[1])[0]
        assert rec["headers"][-1] == (b"transfer-encoding", b"Chunked")


@pytest.mark.rule("skirr-h11-absolute-form-host", "RFC9112-3.2.2-absolute-form")
def test_absolute_form_authority_replaces_host(serve):
    """h11 hands on the absolute-form target and the Host field as received; skirr splits the
    target into path and query and gives the app the target's authority as the Host value."""
    data = b"GET http://a.example:8080/p?q HTTP/1.1\r\nHost: b.example\r\n\r\n"
    req = h11_stream(data).requests[0]
    assert (req.target, req.headers) == (b"http://a.example:8080/p?q", [(b"host", b"b.example")])
    app = OracleApp()
    with serve(app) as srv:
        c = srv.connect()
        c.send(data + CANARY)
        read_outcome(c)
        rec = app.records(c.sock.getsockname()[1])[0]
        assert (rec["raw_path"], rec["query_string"], rec["headers"]) == (
            b"/p", b"q", [(b"host", b"a.example:8080")])


@pytest.mark.rule("skirr-h11-upgrade-ignored", "skirr-framing-upgrade-not-taken")
def test_upgrade_is_not_a_switch(serve):
    """h11 pauses after a request with Upgrade (it proposes a protocol switch); skirr treats one
    it does not take (h2c: not WebSocket) as a plain request and goes on with the next one."""
    data = get(b"/c", b"Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\n"
               b"HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n")
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data + CANARY)
    events = [type(conn.next_event()).__name__ for _ in range(2)]
    assert events == ["Request", "EndOfMessage"] and conn.next_event() is h11.PAUSED
    app = OracleApp()
    with serve(app) as srv:
        c = srv.connect()
        c.send(data + CANARY)
        assert [t for _, t, _, _ in read_outcome(c).served] == [b"/c", b"/canary"]


@pytest.mark.rule("skirr-h11-http10-keep-alive", "RFC9112-9.3-http10-keep-alive")
def test_http10_keep_alive_honoured(serve):
    """h11 never keeps an HTTP/1.0 connection open; skirr honours Connection: keep-alive."""
    data = b"GET /c HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    conn.next_event(), conn.next_event()
    conn.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
    conn.send(h11.EndOfMessage())
    assert conn.our_state is h11.MUST_CLOSE
    app = OracleApp()
    with serve(app) as srv:
        c = srv.connect()
        c.send(data + CANARY)
        assert [t for _, t, _, _ in read_outcome(c).served] == [b"/c", b"/canary"]
