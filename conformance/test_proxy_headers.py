"""Proxy headers (issue 13): Forwarded / X-Forwarded-For / X-Forwarded-Proto from trusted peers
only, over real sockets on both loops; spoofing from an untrusted peer, malformed values; only the
family of --proxy-headers-mode is read (issue 35)."""
from __future__ import annotations

import pytest

from conftest import http_request

PEER = "127.0.0.1"  # every test client connects from here


FWD = {"proxy_headers_mode": "forwarded"}


def request(srv, echo_app, headers):
    c = srv.connect()
    port = c.sock.getsockname()[1]
    r = c.request(http_request("GET", "/", headers=[("Host", "x"), *headers]))
    assert r.status == 200
    c.close()
    scope = echo_app.calls.items[-1]["scope"]
    return scope["client"], scope["scheme"], port


@pytest.mark.rule("skirr-proxy-trusted")
@pytest.mark.parametrize("headers,client,scheme", [
    ([("X-Forwarded-For", "203.0.113.7")], ("203.0.113.7", 0), "http"),
    ([("X-Forwarded-For", "203.0.113.7, 127.0.0.1")], ("203.0.113.7", 0), "http"),
    ([("X-Forwarded-For", "198.51.100.1, 203.0.113.7")], ("203.0.113.7", 0), "http"),
    ([("X-Forwarded-For", "198.51.100.1"), ("X-Forwarded-For", "203.0.113.7")],
     ("203.0.113.7", 0), "http"),
    ([("X-Forwarded-For", "127.0.0.1, 127.0.0.1")], ("127.0.0.1", 0), "http"),
    ([("X-Forwarded-For", "2001:db8::1")], ("2001:db8::1", 0), "http"),
    ([("X-Forwarded-For", "[2001:db8::1]:4711")], ("2001:db8::1", 4711), "http"),
    ([("X-Forwarded-For", "203.0.113.7:8080")], ("203.0.113.7", 8080), "http"),
    ([("X-Forwarded-Proto", "https")], None, "https"),
    ([("X-Forwarded-Proto", "HTTPS")], None, "https"),
    ([("X-Forwarded-Proto", "http, https")], None, "https"),
    ([("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "https")],
     ("203.0.113.7", 0), "https"),
])
def test_trusted_x_forwarded(serve, echo_app, headers, client, scheme):
    with serve(echo_app) as srv:
        got_client, got_scheme, port = request(srv, echo_app, headers)
    assert got_client == (client or (PEER, port))
    assert got_scheme == scheme


@pytest.mark.rule("RFC7239-4-forwarded")
@pytest.mark.parametrize("headers,client,scheme", [
    ([("Forwarded", "for=203.0.113.7")], ("203.0.113.7", 0), "http"),
    ([("Forwarded", "for=203.0.113.7;proto=https")], ("203.0.113.7", 0), "https"),
    ([("Forwarded", 'for="[2001:db8:cafe::17]:4711";proto=https;by=127.0.0.1')],
     ("2001:db8:cafe::17", 4711), "https"),
    ([("Forwarded", 'For="203.0.113.7:80"; Proto=HTTPS')], ("203.0.113.7", 80), "https"),
    ([("Forwarded", "for=198.51.100.1;proto=http, for=203.0.113.7;proto=https")],
     ("203.0.113.7", 0), "https"),
    ([("Forwarded", "for=203.0.113.7;proto=https, for=127.0.0.1;proto=http")],
     ("203.0.113.7", 0), "https"),
    ([("Forwarded", "for=198.51.100.1"), ("Forwarded", "for=203.0.113.7")],
     ("203.0.113.7", 0), "http"),
    ([("Forwarded", "for=_hidden;proto=https")], None, "https"),
    ([("Forwarded", "for=unknown")], None, "http"),
    ([("Forwarded", 'for="\\1\\9\\8.51.100.1"')], ("198.51.100.1", 0), "http"),
    # empty list elements are skipped (RFC 9110 §5.6.1.2), wherever they are
    ([("Forwarded", "for=198.51.100.1, ,for=203.0.113.7")], ("203.0.113.7", 0), "http"),
    ([("Forwarded", "for=203.0.113.7;proto=https, ")], ("203.0.113.7", 0), "https"),
    ([("Forwarded", ", for=203.0.113.7")], ("203.0.113.7", 0), "http"),
    ([("Forwarded", "for=203.0.113.7;;proto=https")], ("203.0.113.7", 0), "https"),
    # in forwarded mode X-Forwarded-* is never read
    ([("Forwarded", "for=203.0.113.7"), ("X-Forwarded-For", "198.51.100.1"),
      ("X-Forwarded-Proto", "https")], ("203.0.113.7", 0), "http"),
])
def test_forwarded(serve, echo_app, headers, client, scheme):
    """--proxy-headers-mode forwarded: RFC 7239 Forwarded sets client and scheme."""
    with serve(echo_app, **FWD) as srv:
        got_client, got_scheme, port = request(srv, echo_app, headers)
    assert got_client == (client or (PEER, port))
    assert got_scheme == scheme


SPOOF = [("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "https"),
         ("Forwarded", "for=198.51.100.9;proto=https")]


@pytest.mark.rule("RFC7239-8.1-one-family")
@pytest.mark.parametrize("mode,headers,client,scheme", [
    # x-forwarded (the default): Forwarded is never read, well formed or not, alone or not
    (None, [("Forwarded", "for=6.6.6.6;proto=https")], None, "http"),
    ("x-forwarded", [("Forwarded", "for=6.6.6.6;proto=https")], None, "http"),
    (None, [("Forwarded", 'for="[2001:db8::6]:66";proto=https')], None, "http"),
    (None, [("Forwarded", "for=6.6.6.6;proto=https"), ("X-Forwarded-For", "203.0.113.7")],
     ("203.0.113.7", 0), "http"),
    (None, [("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "http"),
            ("Forwarded", "for=6.6.6.6;proto=https")], ("203.0.113.7", 0), "http"),
    (None, [("X-Forwarded-Proto", "https"), ("Forwarded", "for=6.6.6.6;proto=http")],
     None, "https"),
    # forwarded: X-Forwarded-For / X-Forwarded-Proto are never read
    ("forwarded", [("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-Proto", "https")],
     None, "http"),
    ("forwarded", [("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-Proto", "https"),
                   ("Forwarded", "for=203.0.113.7")], ("203.0.113.7", 0), "http"),
    ("forwarded", [("X-Forwarded-Proto", "https"), ("Forwarded", "for=garbage!")],
     None, "http"),
])
def test_one_family_only(serve, echo_app, mode, headers, client, scheme):
    """RFC 7239 §8.1: a proxy that sets one family passes the other through from the client, so
    only the family of --proxy-headers-mode is read (issue 35: a client's Forwarded beat the
    X-Forwarded-For nginx set)."""
    config = {} if mode is None else {"proxy_headers_mode": mode}
    with serve(echo_app, **config) as srv:
        got_client, got_scheme, port = request(srv, echo_app, headers)
    assert got_client == (client or (PEER, port))
    assert got_scheme == scheme


@pytest.mark.rule("RFC7239-8.1-one-family")
@pytest.mark.parametrize("mode", ["X-Forwarded", "both", "", "legacy", None, 1])
def test_mode_config_error(mode):
    from skirr.config import Config, ConfigError

    async def app(scope, receive, send):
        pass

    with pytest.raises(ConfigError) as exc:
        Config(app, proxy_headers_mode=mode)
    assert str(exc.value) == (
        f"proxy_headers_mode must be one of x-forwarded, forwarded; got {mode!r}")


@pytest.mark.rule("skirr-proxy-untrusted")
@pytest.mark.parametrize("config", [
    {"forwarded_allow_ips": "10.0.0.1"},
    {"forwarded_allow_ips": "10.0.0.0/8, ::1"},
    {"forwarded_allow_ips": "unix:"},
    {"proxy_headers": False},
    {"proxy_headers": False, "forwarded_allow_ips": "*"},
    {"forwarded_allow_ips": "10.0.0.1", **FWD},
    {"forwarded_allow_ips": "unix:", **FWD},
    {"proxy_headers": False, "forwarded_allow_ips": "*", **FWD},
])
def test_untrusted_peer_ignored(serve, echo_app, config):
    with serve(echo_app, **config) as srv:
        got_client, got_scheme, port = request(srv, echo_app, SPOOF)
    assert got_client == (PEER, port)
    assert got_scheme == "http"


@pytest.mark.rule("skirr-proxy-trusted")
@pytest.mark.parametrize("allow", ["*", "127.0.0.0/8", "10.0.0.1,127.0.0.1", "127.0.0.1/32"])
def test_allow_forms(serve, echo_app, allow):
    with serve(echo_app, forwarded_allow_ips=allow) as srv:
        got_client, _, _ = request(srv, echo_app, [("X-Forwarded-For", "203.0.113.7")])
    assert got_client == ("203.0.113.7", 0)


@pytest.mark.rule("skirr-proxy-trusted")
def test_trusted_hops_skipped(serve, echo_app):
    """With 10.0.0.0/8 trusted too, the walk skips it and stops at the first untrusted."""
    with serve(echo_app, forwarded_allow_ips="127.0.0.1,10.0.0.0/8") as srv:
        got_client, _, _ = request(
            srv, echo_app, [("X-Forwarded-For", "198.51.100.1, 203.0.113.7, 10.1.2.3, 10.0.0.1")])
    assert got_client == ("203.0.113.7", 0)


@pytest.mark.rule("skirr-proxy-trusted")
def test_env_default(serve, echo_app, monkeypatch):
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "10.9.9.9")
    with serve(echo_app) as srv:
        got_client, _, port = request(srv, echo_app, [("X-Forwarded-For", "203.0.113.7")])
    assert got_client == (PEER, port)


MALFORMED = [
    [("X-Forwarded-For", "garbage")],
    [("X-Forwarded-For", "203.0.113.7,,198.51.100.1")],
    [("X-Forwarded-For", "")],
    [("X-Forwarded-For", "203.0.113.7, ")],
    [("X-Forwarded-For", "garbage, 203.0.113.7")],
    [("X-Forwarded-For", "203.0.113.7:99999")],
    [("X-Forwarded-For", "203.0.113.7:")],
    [("X-Forwarded-For", "[2001:db8::1")],
    [("X-Forwarded-For", "[203.0.113.7]")],
    [("X-Forwarded-For", "1.2.3.4.5")],
    [("X-Forwarded-For", "_hidden")],
    [("X-Forwarded-For", ", ".join(["203.0.113.7"] * 999 + ["x"]))],
    [("X-Forwarded-Proto", "ftp")],
    [("X-Forwarded-Proto", "")],
    [("X-Forwarded-Proto", "https ,")],
    [("Forwarded", "for=")],
    [("Forwarded", "for")],
    [("Forwarded", 'for="203.0.113.7')],
    [("Forwarded", "for=203.0.113.7;for=198.51.100.1")],
    [("Forwarded", "for=[2001:db8::1]")],  # IPv6 must be quoted (':' is not a token char)
    [("Forwarded", 'for="203.0.113.7:abc"')],
    [("Forwarded", "for=203.0.113.7 junk")],
    [("Forwarded", "for=203.0.113.7, for=bad!addr")],
    [("Forwarded", "proto=https;for=203.0.113.7;proto")],
    [("Forwarded", ", ".join(["for=203.0.113.7"] * 999 + ["for"]))],
    # a proto= skirr does not serve, or given twice: the whole header, not only the proto
    [("Forwarded", "for=203.0.113.7;proto=ftp")],
    [("Forwarded", "for=203.0.113.7;proto=https;proto=http")],
    [("Forwarded", 'for=203.0.113.7;proto=""')],
]


@pytest.mark.rule("skirr-proxy-malformed")
@pytest.mark.parametrize("headers", MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_ignored_whole(serve, echo_app, headers):
    """Each in the mode that reads it (a Forwarded case in forwarded mode)."""
    config = FWD if headers[0][0] == "Forwarded" else {}
    with serve(echo_app, **config) as srv:
        got_client, got_scheme, port = request(srv, echo_app, headers)
        assert srv.errors() == []
    assert got_client == (PEER, port)
    assert got_scheme == "http"


@pytest.mark.rule("skirr-proxy-malformed")
def test_thousand_items(serve, echo_app):
    items = ", ".join(f"10.0.{i // 250}.{i % 250}" for i in range(1000))
    with serve(echo_app, forwarded_allow_ips="127.0.0.1,10.0.0.0/8") as srv:
        got_client, _, _ = request(srv, echo_app, [("X-Forwarded-For", "203.0.113.7, " + items)])
    with serve(echo_app, forwarded_allow_ips="127.0.0.1,10.0.0.0/8", **FWD) as srv:
        got2, _, _ = request(srv, echo_app, [("Forwarded", ", ".join(
            f"for=10.0.{i // 250}.{i % 250}" for i in range(1000)))])
    assert got_client == ("203.0.113.7", 0)
    assert got2 == ("10.0.0.0", 0)  # every hop trusted: the leftmost


@pytest.mark.rule("skirr-proxy-trusted")
def test_access_log_shows_resolved_client(serve, echo_app):
    import logging

    from test_access_log import AccessCapture

    cap = AccessCapture()
    logging.getLogger("skirr.access").addHandler(cap)
    try:
        with serve(echo_app) as srv:
            request(srv, echo_app, [("X-Forwarded-For", "203.0.113.7")])
            lines = cap.wait(1)
    finally:
        logging.getLogger("skirr.access").removeHandler(cap)
    assert lines == ['203.0.113.7:0 - "GET / HTTP/1.1" 200 OK']


@pytest.mark.rule("skirr-proxy-trusted")
def test_bad_allow_list_is_config_error():
    from skirr.config import Config, ConfigError

    async def app(scope, receive, send):
        pass

    with pytest.raises(ConfigError, match="'10.0.0.300' is not an IP address"):
        Config(app, forwarded_allow_ips="127.0.0.1, 10.0.0.300")
    with pytest.raises(ConfigError, match="'fe80::/200' is not an IP address"):
        Config(app, forwarded_allow_ips="fe80::/200")
