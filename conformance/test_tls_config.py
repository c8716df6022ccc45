"""The --ssl-* settings over real TLS (issue 32 items 2, 3, 5 and 6).

In-process cases (the `serve` fixture, both loops) check each setting's effect with Python's ssl
client: versions, cipher suites and their order, no compression, ALPN, SNI, client
certificates and the CRL, session resumption. Command-line cases (``python -m skirr``, both
loops) check every configuration mistake's exact line and status, the startup log, SIGHUP
reloading the files and a session ticket resumed across workers. Certificates are made by
trustme for each case (conformance/tls_util.py).
"""
from __future__ import annotations

import contextlib
import datetime
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import h11
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

try:
    from . import _proc
    from .tls_util import TLSFiles
except ImportError:
    import _proc
    from tls_util import TLSFiles


class CountingApp:
    """Answers 'ok'; counts the scopes it was called with (nothing may reach it on a refused
    handshake)."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope, receive, send):
        self.calls += 1
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})


def connect(port: int, ctx: ssl.SSLContext, name: str | None = "localhost",
            session: ssl.SSLSession | None = None) -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=_proc.IO_TIMEOUT)
    try:
        return ctx.wrap_socket(sock, server_hostname=name, session=session)
    except BaseException:
        sock.close()
        raise


def get(tls: ssl.SSLSocket, target: str = "/") -> _proc.Response:
    """One request on the TLS socket (read to the end: a TLS 1.3 ticket arrives with it)."""
    conn = h11.Connection(h11.CLIENT)
    _proc.send_request(tls, conn, "GET", target)
    return _proc.read_response(tls, conn)


def refused(port: int, ctx: ssl.SSLContext, name: str = "localhost") -> ssl.SSLError:
    """The SSLError a refused client gets (in the handshake, or at its first read under TLS 1.3,
    where the server judges the client's certificate after the client finished)."""
    with pytest.raises(ssl.SSLError) as info:
        with connect(port, ctx, name) as tls:
            get(tls)
    return info.value


def old_client(maximum: ssl.TLSVersion) -> ssl.SSLContext:
    """A client offering at most ``maximum`` (TLS 1.0/1.1 need OpenSSL's security level 0)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ssl.TLSVersion.TLSv1
        ctx.maximum_version = maximum
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    return ctx


def der(pem_bytes: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem_bytes).public_bytes(serialization.Encoding.DER)


# ---- versions ---------------------------------------------------------------------------------


@pytest.mark.rule("RFC8446-versions-1.2-1.3")
def test_tls_1_1_client_gets_protocol_version_alert(serve, tmp_path):
    files = TLSFiles(tmp_path)
    app = CountingApp()
    with serve(app, **files.server_config()) as srv:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            err = refused(srv.port, old_client(ssl.TLSVersion.TLSv1_1))
        assert err.reason == "TLSV1_ALERT_PROTOCOL_VERSION"
        with connect(srv.port, files.client_context()) as tls:
            assert tls.version() == "TLSv1.3"
            assert get(tls).body == b"ok"
    assert app.calls == 1


@pytest.mark.rule("RFC8446-versions-1.2-1.3")
def test_min_version_1_3_refuses_a_1_2_client(serve, tmp_path):
    files = TLSFiles(tmp_path)
    app = CountingApp()
    with serve(app, **files.server_config(ssl_min_version="TLSv1.3")) as srv:
        ctx = files.client_context()
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        assert refused(srv.port, ctx).reason == "TLSV1_ALERT_PROTOCOL_VERSION"
        with connect(srv.port, files.client_context()) as tls:
            assert (tls.version(), get(tls).status) == ("TLSv1.3", 200)
    assert app.calls == 1


@pytest.mark.rule("RFC8446-versions-1.2-1.3")
def test_ssl_version_5_serves_tls_1_2_alone(serve, tmp_path):
    files = TLSFiles(tmp_path)
    with serve(CountingApp(), **files.server_config(ssl_version=5)) as srv:
        with connect(srv.port, files.client_context()) as tls:
            assert (tls.version(), get(tls).status) == ("TLSv1.2", 200)


# ---- cipher suites, compression ---------------------------------------------------------------

AEAD_FS = {"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384",
           "ECDHE-ECDSA-CHACHA20-POLY1305"}  # trustme's certificates are ECDSA


@pytest.mark.rule("RFC9325-ciphers-aead-fs")
@pytest.mark.parametrize("ciphers", [None, "TLSv1"], ids=["unset", "uvicorn-default"])
def test_default_suites_are_aead_fs_only(serve, tmp_path, ciphers):
    files = TLSFiles(tmp_path)
    extra = {} if ciphers is None else {"ssl_ciphers": ciphers}
    app = CountingApp()
    with serve(app, **files.server_config(**extra)) as srv:
        ctx = files.client_context()
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        with connect(srv.port, ctx) as tls:
            assert tls.cipher()[0] in AEAD_FS
        for cbc in ("ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA384"):
            ctx = files.client_context()
            ctx.maximum_version = ssl.TLSVersion.TLSv1_2
            ctx.set_ciphers(cbc)
            assert refused(srv.port, ctx).reason == "SSLV3_ALERT_HANDSHAKE_FAILURE", cbc
    assert app.calls == 0


@pytest.mark.rule("RFC9325-ciphers-aead-fs")
def test_server_order_wins(serve, tmp_path):
    files = TLSFiles(tmp_path)
    with serve(CountingApp(), **files.server_config()) as srv:
        ctx = files.client_context()
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_ciphers("ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES128-GCM-SHA256")
        with connect(srv.port, ctx) as tls:
            assert tls.cipher()[0] == "ECDHE-ECDSA-AES128-GCM-SHA256"


@pytest.mark.rule("RFC9325-ciphers-aead-fs")
def test_ssl_ciphers_selects_the_list(serve, tmp_path):
    files = TLSFiles(tmp_path)
    config = files.server_config(ssl_ciphers="ECDHE-ECDSA-CHACHA20-POLY1305")
    with serve(CountingApp(), **config) as srv:
        ctx = files.client_context()
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        with connect(srv.port, ctx) as tls:
            assert tls.cipher()[0] == "ECDHE-ECDSA-CHACHA20-POLY1305"
            assert get(tls).status == 200


@pytest.mark.rule("RFC9325-no-compression")
@pytest.mark.parametrize("maximum", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_no_compression(serve, tmp_path, maximum):
    files = TLSFiles(tmp_path)
    with serve(CountingApp(), **files.server_config()) as srv:
        ctx = files.client_context()
        ctx.maximum_version = maximum
        ctx.options &= ~ssl.OP_NO_COMPRESSION  # the client offers it
        with connect(srv.port, ctx) as tls:
            assert tls.compression() is None
            assert get(tls).status == 200


# ---- ALPN -------------------------------------------------------------------------------------


@pytest.mark.rule("RFC7301-alpn-http11")
@pytest.mark.parametrize("offer, selected, http", [
    (["h2", "http/1.1"], "http/1.1", "1"), (["http/1.1"], "http/1.1", "auto"),
    (None, None, "auto"), (["http/1.0"], "http/1.0", "auto"), (["http/1.0"], "http/1.0", "1"),
    (["http/1.0", "http/1.1"], "http/1.1", "auto")],
    ids=["h2-and-http11-http1-mode", "http11", "none", "http10", "http10-http1-mode",
         "http10-and-http11"])
def test_alpn_selects_http11(serve, tmp_path, offer, selected, http):
    """The first of skirr's protocols (h2, http/1.1, http/1.0) the client offers; http/1.0 (what
    `curl --http1.0` offers alone) is served by the HTTP/1.x handler. It got
    no_application_protocol (an attack found it; nginx selects http/1.0)."""
    files = TLSFiles(tmp_path)
    with serve(CountingApp(), **files.server_config(http=http)) as srv:
        ctx = files.client_context()
        if offer is not None:
            ctx.set_alpn_protocols(offer)
        with connect(srv.port, ctx) as tls:
            assert tls.selected_alpn_protocol() == selected
            assert get(tls).body == b"ok"


@pytest.mark.rule("RFC7301-alpn-http11")
def test_alpn_without_a_served_protocol_gets_no_application_protocol(serve, tmp_path):
    files = TLSFiles(tmp_path)
    app = CountingApp()
    with serve(app, **files.server_config()) as srv:
        ctx = files.client_context()
        ctx.set_alpn_protocols(["spdy/3", "h3"])
        err = refused(srv.port, ctx)
        assert "tlsv1 alert no application protocol" in str(err)
    assert app.calls == 0


# ---- SNI --------------------------------------------------------------------------------------


@pytest.mark.rule("RFC6066-sni-certificates")
@pytest.mark.parametrize("name, which", [
    ("other.example", "other"), ("OTHER.Example", "other"), ("a.wild.example", "other"),
    ("b.a.wild.example", "default"), ("localhost", "default"), ("unknown.example", "default"),
    (None, "default")])
def test_sni_picks_the_certificate(serve, tmp_path, name, which):
    files = TLSFiles(tmp_path)
    cert, key = files.issue("other", "other.example", "*.wild.example")
    config = files.server_config(ssl_sni=[f"{cert}:{key}"])
    with serve(CountingApp(), **config) as srv:
        ctx = files.client_context()
        ctx.check_hostname = False  # the default certificate does not name the others
        with connect(srv.port, ctx, name) as tls:
            got = tls.getpeercert(binary_form=True)
            assert get(tls).status == 200
    expected = cert.read_bytes() if which == "other" else files.cert_pem.read_bytes()
    assert got == der(expected)


@pytest.mark.rule("RFC6066-sni-certificates", "ASGI-tls-extension")
def test_sni_certificate_is_the_extensions_server_cert(serve, tmp_path):
    files = TLSFiles(tmp_path)
    cert, key = files.issue("other", "other.example")
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["extensions"]["tls"]["server_cert"])
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body"})

    with serve(app, **files.server_config(ssl_sni=[(str(cert), str(key))])) as srv:
        with connect(srv.port, files.client_context(), "other.example") as tls:
            assert get(tls).status == 204
    assert seen == [pem_text(cert)]


def pem_text(path: Path) -> str:
    """The first certificate of the PEM file at ``path``, as the `tls` extension writes it."""
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    return cert.public_bytes(serialization.Encoding.PEM).decode()


@pytest.mark.rule("skirr-tls-reload", "ASGI-tls-extension")
def test_a_reload_gives_new_connections_the_new_server_cert(serve, tmp_path):
    """server_cert is the PEM the SSL_CTX was built with: a connection made before a reload
    keeps the old certificate's, one made after it has the new one's."""
    files = TLSFiles(tmp_path)
    old = pem_text(files.cert_pem)
    new_cert, new_key = files.issue("new", "127.0.0.1", "localhost")
    seen = []
    running = {}

    async def app(scope, receive, send):
        seen.append(scope["extensions"]["tls"]["server_cert"])
        if scope["path"] == "/reload":  # in the loop, as SIGHUP's reload runs
            files.cert_pem.write_bytes(new_cert.read_bytes())
            files.key_pem.write_bytes(new_key.read_bytes())
            running["srv"].server._tls.reload()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body"})

    with serve(app, **files.server_config()) as srv:
        running["srv"] = srv
        with connect(srv.port, files.client_context()) as before:
            assert get(before, "/reload").status == 204
            assert get(before).status == 204
            with connect(srv.port, files.client_context()) as after:
                assert get(after).status == 204
    assert old != pem_text(new_cert)
    assert seen == [old, old, pem_text(new_cert)]


# ---- client certificates and the CRL ----------------------------------------------------------


def stranger_pem(tmp_path) -> str:
    """A client certificate and key from a CA the server does not know."""
    import trustme

    path = tmp_path / "stranger.pem"
    path.write_bytes(trustme.CA().issue_cert("stranger@example.org")
                     .private_key_and_cert_chain_pem.bytes())
    return str(path)


@pytest.mark.rule("skirr-tls-client-certs")
@pytest.mark.parametrize("maximum, reason", [
    (ssl.TLSVersion.TLSv1_3, "TLSV13_ALERT_CERTIFICATE_REQUIRED"),
    (ssl.TLSVersion.TLSv1_2, "SSLV3_ALERT_HANDSHAKE_FAILURE")])
def test_required_refuses_a_client_without_certificate(serve, tmp_path, maximum, reason):
    files = TLSFiles(tmp_path)
    app = CountingApp()
    config = files.server_config(ssl_ca_certs=str(files.ca_pem), ssl_cert_reqs=2)
    with serve(app, **config) as srv:
        ctx = files.client_context()
        ctx.maximum_version = maximum
        assert refused(srv.port, ctx).reason == reason
        ctx = files.client_context()
        ctx.maximum_version = maximum
        ctx.load_cert_chain(stranger_pem(tmp_path))
        assert refused(srv.port, ctx).reason == "TLSV1_ALERT_UNKNOWN_CA"
        with connect(srv.port, files.client_context(client_cert=True)) as tls:
            assert get(tls).status == 200
    assert app.calls == 1


class TLSRecorder:
    def __init__(self) -> None:
        self.tls: list[dict] = []

    async def __call__(self, scope, receive, send):
        self.tls.append(scope["extensions"]["tls"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


@pytest.mark.rule("skirr-tls-client-certs")
def test_optional_lets_a_failed_certificate_through_with_the_reason(serve, tmp_path):
    files = TLSFiles(tmp_path)
    app = TLSRecorder()
    config = files.server_config(ssl_ca_certs=str(files.ca_pem), ssl_cert_reqs=1)
    with serve(app, **config) as srv:
        ctx = files.client_context()
        ctx.load_cert_chain(stranger_pem(tmp_path))
        with connect(srv.port, ctx) as tls:
            assert get(tls).status == 200
        with connect(srv.port, files.client_context()) as tls:
            assert get(tls).status == 200
        with connect(srv.port, files.client_context(client_cert=True)) as tls:
            assert get(tls).status == 200
    stranger, none, good = app.tls
    # OpenSSL's verify result (the last error once the callback let the first through)
    assert stranger["client_cert_error"] == "unable to verify the first certificate"
    assert len(stranger["client_cert_chain"]) == 1 and stranger["client_cert_name"]
    assert (none["client_cert_chain"], none["client_cert_name"], none["client_cert_error"]) == (
        [], None, None)
    assert good["client_cert_error"] is None and len(good["client_cert_chain"]) == 1


def write_crl(files: TLSFiles, revoke: bool) -> str:
    """A CRL signed by the CA, revoking the client certificate when ``revoke``."""
    ca_cert = x509.load_pem_x509_certificate(files.ca.cert_pem.bytes())
    ca_key = serialization.load_pem_private_key(files.ca.private_key_pem.bytes(), None)
    client = x509.load_pem_x509_certificate(files.client.cert_chain_pems[0].bytes())
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateRevocationListBuilder().issuer_name(ca_cert.subject)
               .last_update(now - datetime.timedelta(minutes=5))
               .next_update(now + datetime.timedelta(days=1)))
    if revoke:
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(client.serial_number)
            .revocation_date(now - datetime.timedelta(minutes=5)).build())
    crl = builder.sign(ca_key, hashes.SHA256())
    path = files.dir / ("revoked.crl.pem" if revoke else "empty.crl.pem")
    path.write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    return str(path)


@pytest.mark.rule("skirr-tls-client-certs")
def test_crl_refuses_a_revoked_certificate(serve, tmp_path):
    files = TLSFiles(tmp_path)
    app = CountingApp()
    config = files.server_config(ssl_ca_certs=str(files.ca_pem), ssl_cert_reqs=2,
                                 ssl_crl=write_crl(files, revoke=True))
    with serve(app, **config) as srv:
        err = refused(srv.port, files.client_context(client_cert=True))
        assert err.reason == "SSLV3_ALERT_CERTIFICATE_REVOKED"
    assert app.calls == 0


@pytest.mark.rule("skirr-tls-client-certs")
def test_crl_reports_revoked_when_optional_and_passes_the_rest(serve, tmp_path):
    files = TLSFiles(tmp_path)
    app = TLSRecorder()
    for revoke in (True, False):
        config = files.server_config(ssl_ca_certs=str(files.ca_pem), ssl_cert_reqs=1,
                                     ssl_crl=write_crl(files, revoke))
        with serve(app, **config) as srv:
            with connect(srv.port, files.client_context(client_cert=True)) as tls:
                assert get(tls).status == 200
    assert [t["client_cert_error"] for t in app.tls] == ["certificate revoked", None]


# ---- session resumption -----------------------------------------------------------------------


@pytest.mark.rule("skirr-tls-tickets-workers")
@pytest.mark.parametrize("maximum", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_session_ticket_resumes(serve, tmp_path, maximum):
    files = TLSFiles(tmp_path)
    with serve(CountingApp(), **files.server_config()) as srv:
        ctx = files.client_context()
        ctx.maximum_version = maximum
        with connect(srv.port, ctx) as tls:
            assert get(tls).status == 200
            session = tls.session
            assert not tls.session_reused
        assert session is not None and session.has_ticket
        with connect(srv.port, ctx, session=session) as tls:
            assert get(tls).status == 200
            assert tls.session_reused


@pytest.mark.rule("RFC6066-sni-resumption", "ASGI-tls-extension")
@pytest.mark.parametrize("maximum", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
@pytest.mark.parametrize("first, second, resumed", [
    ("other.example", "localhost", False), ("localhost", "other.example", False),
    ("other.example", None, False), ("other.example", "a.wild.example", True),
    ("other.example", "other.example", True), ("localhost", "localhost", True)])
def test_a_session_resumes_only_under_a_name_of_its_certificate(serve, tmp_path, maximum, first,
                                                                 second, resumed):
    """A session made under one server name and offered under another resumes only when both
    names select the same certificate; otherwise a full handshake with the certificate the new
    name selects, and the scope's server_cert is that one (it named the first certificate on
    TLS 1.3 when OpenSSL resumed across certificates: an attack, stop 57)."""
    files = TLSFiles(tmp_path)
    cert, key = files.issue("other", "other.example", "*.wild.example")
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["extensions"]["tls"]["server_cert"])
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body"})

    def selects(name):
        return pem_text(cert) if name in ("other.example", "a.wild.example") else pem_text(
            files.cert_pem)

    with serve(app, **files.server_config(ssl_sni=[f"{cert}:{key}"])) as srv:
        ctx = files.client_context()
        ctx.check_hostname = False
        ctx.maximum_version = maximum
        with connect(srv.port, ctx, first) as tls:
            assert get(tls).status == 204
            session = tls.session
        with connect(srv.port, ctx, second, session=session) as tls:
            assert get(tls).status == 204
            assert (tls.session_reused, tls.getpeercert(binary_form=True)) == (
                resumed, der(selects(second).encode()))
    assert seen == [selects(first), selects(second)]


def s_client(port: int, files: TLSFiles, *args: str) -> str:
    """`openssl s_client -tls1_3 -msg` asking GET / with Connection: close, reading until the
    server closes (-ign_eof): its stdout (the handshake messages, the cipher line, the answer)."""
    out = subprocess.run(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", "localhost",
         "-CAfile", str(files.ca_pem), "-tls1_3", "-msg", "-ign_eof", *args],
        input=b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        capture_output=True, timeout=20, check=True).stdout.decode()
    assert "HTTP/1.1 200 OK\r\n" in out, out
    return out


@pytest.mark.rule("RFC8446-tls13-suites-order")
def test_tls13_suite_is_the_servers_first_offered(serve, tmp_path):
    files = TLSFiles(tmp_path)
    got = {}
    with serve(CountingApp(), **files.server_config()) as srv:
        for offer in ("", "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_256_GCM_SHA384"):
            out = s_client(srv.port, files, *(["-ciphersuites", offer] if offer else []))
            got[offer] = [line for line in out.splitlines() if ", Cipher is " in line]
    with serve(CountingApp(), **files.server_config(ssl_ciphers="ECDHE-RSA-AES256-GCM-SHA384")) \
            as srv:
        out = s_client(srv.port, files)
        got["--ssl-ciphers"] = [line for line in out.splitlines() if ", Cipher is " in line]
    assert got == {
        "": ["New, TLSv1.3, Cipher is TLS_AES_128_GCM_SHA256"],
        "TLS_CHACHA20_POLY1305_SHA256": ["New, TLSv1.3, Cipher is TLS_CHACHA20_POLY1305_SHA256"],
        "TLS_AES_256_GCM_SHA384": ["New, TLSv1.3, Cipher is TLS_AES_256_GCM_SHA384"],
        "--ssl-ciphers": ["New, TLSv1.3, Cipher is TLS_AES_128_GCM_SHA256"],
    }


@pytest.mark.rule("skirr-tls13-one-ticket")
def test_tls13_one_ticket_then_resumed(serve, tmp_path):
    files = TLSFiles(tmp_path)
    sess = tmp_path / "session.pem"
    with serve(CountingApp(), **files.server_config()) as srv:
        full = s_client(srv.port, files, "-sess_out", str(sess))
        resumed = s_client(srv.port, files, "-sess_in", str(sess))
    tickets = [line for line in full.splitlines()
               if line.startswith("<<< ") and line.endswith(", NewSessionTicket")]
    assert len(tickets) == 1, full
    assert "\nNew, TLSv1.3, Cipher is " in full and "\nReused, TLSv1.3, Cipher is " in resumed


# ---- the command line -------------------------------------------------------------------------


def cli_error(tmp_path, loop, args):
    status, stderr = _proc.run_to_exit(
        ["basic:app", "--loop", loop, "--port", str(_proc.free_port()), *args], tmp_path)
    return status, stderr


def usage_cases(files: TLSFiles, d) -> list:
    cert, key, ca = str(files.cert_pem), str(files.key_pem), str(files.ca_pem)
    return [
        (["--ssl-keyfile", key], "--ssl-keyfile needs --ssl-certfile"),
        (["--ssl-ca-certs", ca], "--ssl-ca-certs needs --ssl-certfile"),
        (["--ssl-cert-reqs", "2"], "--ssl-cert-reqs needs --ssl-certfile"),
        (["--ssl-certfile", f"{d}/missing.pem"], f"--ssl-certfile {d}/missing.pem: No such file"),
        (["--ssl-certfile", cert, "--ssl-keyfile", f"{d}/nokey.pem"],
         f"--ssl-keyfile {d}/nokey.pem: No such file"),
        (["--ssl-certfile", cert, "--ssl-keyfile", key, "--ssl-ca-certs", str(d)],
         f"--ssl-ca-certs {d}: not a file"),
        (["--ssl-certfile", cert, "--ssl-keyfile", key, "--ssl-version", "3"],
         "--ssl-version 3 is not served: use 17 (ssl.PROTOCOL_TLS_SERVER, the default) or 2 "
         "(ssl.PROTOCOL_TLS) for TLS 1.2 and 1.3, or 5 (ssl.PROTOCOL_TLSv1_2) for TLS 1.2 "
         "alone; SSL 3, TLS 1.0 and TLS 1.1 are obsolete (RFC 8996)"),
        (["--ssl-certfile", cert, "--ssl-keyfile", key, "--ssl-cert-reqs", "3"],
         "--ssl-cert-reqs must be 0 (none), 1 (optional) or 2 (required); got 3"),
        (["--ssl-certfile", cert, "--ssl-keyfile", key, "--ssl-cert-reqs", "1"],
         "--ssl-cert-reqs 1 needs --ssl-ca-certs"),
        (["--ssl-certfile", cert, "--ssl-keyfile", key, "--ssl-crl", cert],
         "--ssl-crl needs --ssl-ca-certs"),
        (["--ssl-certfile", cert, "--ssl-keyfile", key, "--ssl-sni", f"{d}/x.pem:{key}"],
         f"--ssl-sni {d}/x.pem: No such file"),
        (["--ssl-certfile", cert, "--ssl-min-version", "TLSv1.1"],
         "argument --ssl-min-version: invalid choice: 'TLSv1.1' (choose from 'TLSv1.2', "
         "'TLSv1.3')"),
    ]


@pytest.mark.rule("skirr-tls-config-errors")
@pytest.mark.parametrize("loop", _proc.LOOPS)
@pytest.mark.parametrize("case", range(12))
def test_usage_mistakes_exit_2(tmp_path, loop, case):
    files = TLSFiles(tmp_path / "certs")
    args, line = usage_cases(files, tmp_path / "certs")[case]
    status, stderr = cli_error(tmp_path, loop, args)
    if line.startswith("argument "):  # argparse's own wording, after its usage line
        assert status == 2 and stderr.endswith(f"skirr: error: {line}\n"), stderr
    else:
        assert (status, stderr) == (2, f"skirr: error: {line}\n")


@pytest.mark.rule("skirr-tls-config-errors")
@pytest.mark.parametrize("loop", _proc.LOOPS)
@pytest.mark.parametrize("flag", ["--ssl-certfile", "--ssl-keyfile", "--ssl-ca-certs",
                                  "--ssl-crl", "--ssl-sni"])
def test_an_unreadable_file_is_a_usage_error(tmp_path, loop, flag):
    """A file that exists but cannot be read (permission denied) is found before anything
    binds, exit 2, as a missing one (and as an unreadable --log-config). Under root, skirr runs
    without the capabilities that let root read any file (setpriv drops CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH from its bounding set)."""
    import shutil

    files = TLSFiles(tmp_path / "certs")
    locked = tmp_path / "locked.pem"
    shutil.copyfile(files.cert_pem, locked)
    locked.chmod(0)
    args = {"--ssl-certfile": str(files.cert_pem), "--ssl-keyfile": str(files.key_pem),
            "--ssl-ca-certs": str(files.ca_pem), "--ssl-crl": write_crl(files, False)}
    args[flag] = f"{locked}:{files.key_pem}" if flag == "--ssl-sni" else str(locked)
    command = None
    if os.geteuid() == 0:
        command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search",
                   sys.executable, "-m", "skirr"]
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(_proc.free_port()),
                      *sum(([k, v] for k, v in args.items()), [])],
                     tmp_path, command=command) as proc:
        status = proc.wait()
        stderr = proc.stderr
    assert (status, stderr) == (2, f"skirr: error: {flag} {locked}: Permission denied\n")


def openssl_cases(files: TLSFiles, d) -> list:
    cert, key, ca = str(files.cert_pem), str(files.key_pem), str(files.ca_pem)
    garbage = d / "garbage.pem"
    garbage.write_text("not a certificate\n")
    enc = d / "enc.key.pem"
    subprocess.run(["openssl", "pkey", "-in", key, "-aes256", "-passout", "pass:secret",
                    "-out", str(enc)], check=True, capture_output=True)
    other_cert, other_key = files.issue("other", "other.example")
    nodns_cert, nodns_key = files.issue("nodns", "10.0.0.1")
    return [
        (["--ssl-certfile", str(garbage), "--ssl-keyfile", key],
         f"--ssl-certfile {garbage}: not a PEM certificate chain (OpenSSL: no start line)"),
        (["--ssl-certfile", cert, "--ssl-keyfile", ca],
         f"--ssl-keyfile {ca}: no PEM private key in it (OpenSSL: unsupported)"),
        (["--ssl-certfile", cert],
         f"--ssl-certfile {cert}: no PEM private key in it: give the key with --ssl-keyfile "
         "(OpenSSL: unsupported)"),
        (["--ssl-certfile", cert, "--ssl-keyfile", str(enc)],
         f"--ssl-keyfile {enc}: the key is encrypted: give --ssl-keyfile-password"),
        (["--ssl-certfile", cert, "--ssl-keyfile", str(enc), "--ssl-keyfile-password", "wrong"],
         f"--ssl-keyfile {enc}: cannot decrypt the key: wrong --ssl-keyfile-password?"),
        (["--ssl-certfile", cert, "--ssl-keyfile", str(other_key)],
         f"--ssl-keyfile {other_key}: the key does not match the certificate of --ssl-certfile "
         f"{cert} (OpenSSL: key values mismatch)"),
        (["--ssl-certfile", cert, "--ssl-keyfile", key, "--ssl-ciphers", "RC4-MD5:NOPE"],
         "--ssl-ciphers RC4-MD5:NOPE: selects no cipher (OpenSSL: no cipher match)"),
        (["--ssl-certfile", cert, "--ssl-keyfile", key, "--ssl-ca-certs", str(garbage),
          "--ssl-cert-reqs", "2"],
         f"--ssl-ca-certs {garbage}: not a PEM CA certificate file (OpenSSL: no start line)"),
        (["--ssl-certfile", cert, "--ssl-keyfile", key, "--ssl-ca-certs", ca, "--ssl-crl",
          str(garbage)],
         f"--ssl-crl {garbage}: not a PEM certificate revocation list (OpenSSL: no start line)"),
        (["--ssl-certfile", cert, "--ssl-keyfile", key, "--ssl-sni",
          f"{other_cert}:{key}"],
         f"--ssl-sni {key}: the key does not match the certificate of --ssl-sni {other_cert} "
         "(OpenSSL: key values mismatch)"),
        (["--ssl-certfile", cert, "--ssl-keyfile", key, "--ssl-sni",
          f"{nodns_cert}:{nodns_key}"],
         f"--ssl-sni {nodns_cert}: the certificate names no DNS subjectAltName to select it by"),
    ]


@pytest.mark.rule("skirr-tls-config-errors")
@pytest.mark.parametrize("loop", _proc.LOOPS)
@pytest.mark.parametrize("case", range(11))
def test_openssl_refusals_exit_1_before_binding(tmp_path, loop, case):
    files = TLSFiles(tmp_path / "certs")
    args, line = openssl_cases(files, tmp_path / "certs")[case]
    port = _proc.free_port()
    with socket.socket() as taken:  # nothing binds first: the port being taken is not the error
        taken.bind(("127.0.0.1", port))
        status, stderr = _proc.run_to_exit(
            ["basic:app", "--loop", loop, "--port", str(port), *args], tmp_path)
    assert (status, stderr) == (1, f"skirr: error: {line}\n")


@pytest.mark.rule("skirr-tls-config-errors")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_supervisor_refuses_before_any_worker(tmp_path, loop):
    files = TLSFiles(tmp_path / "certs")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("x\n")
    status, stderr = cli_error(tmp_path, loop, ["--workers", "2", "--ssl-certfile", str(garbage),
                                                "--ssl-keyfile", str(files.key_pem)])
    assert (status, stderr) == (1, f"skirr: error: --ssl-certfile {garbage}: not a PEM "
                                   "certificate chain (OpenSSL: no start line)\n")


@pytest.mark.rule("skirr-tls-startup-log")
@pytest.mark.parametrize("loop", _proc.LOOPS)
@pytest.mark.parametrize("flags, versions", [
    ([], "TLS 1.2 and up"),
    (["--ssl-min-version", "TLSv1.2"], "TLS 1.2 and up"),
    (["--ssl-min-version", "TLSv1.3"], "TLS 1.3 only"),
    (["--ssl-version", "5"], "TLS 1.2 only"),
])
def test_startup_log_says_tls_and_the_file_path(tmp_path, loop, flags, versions):
    files = TLSFiles(tmp_path / "certs")
    port = _proc.free_port()
    args = ["basic:app", "--loop", loop, "--port", str(port), *flags,
            *files.server_args()]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        stderr = proc.wait_stderr("skirr running on")
        assert (f"INFO:     TLS on: {versions}; files: pread + encrypt (no kernel "
                "TLS)\n") in stderr
        assert f"skirr running on https://127.0.0.1:{port} (Press CTRL+C" in stderr
        with connect(port, files.client_context()) as tls:
            assert get(tls).body == b"ok"
        assert proc.stop() == 0


@pytest.mark.rule("skirr-tls-startup-log")
@pytest.mark.parametrize("loop", _proc.LOOPS)
@pytest.mark.parametrize("kind", ["process", "thread"])
def test_supervisor_startup_line_says_https(tmp_path, loop, kind):
    """With --workers the first line an operator reads is the supervisor's: it names the URL the
    workers serve, https as each worker's own line (it said http://, which gets a 400)."""
    files = TLSFiles(tmp_path / "certs")
    port = _proc.free_port()
    app, env = ("basic:app", None) if kind == "process" else (
        "threads_app:app", {"SKIRR_THREAD_WORKERS_WITH_GIL": "1"})
    args = [app, "--loop", loop, "--port", str(port), "--workers", "2", "--worker-kind", kind,
            *files.server_args()]
    with _proc.Skirr(args, tmp_path, env=env) as proc:
        proc.wait_accepting(port)
        proc._wait_until(lambda: proc.stderr.count("skirr running on") == 2, "two workers serve",
                         _proc.START_TIMEOUT, lambda: proc.stderr)
        stderr = proc.stderr
        assert proc.stop() == 0
    started = [line for line in stderr.splitlines() if "Started supervisor" in line]
    what = "2 worker(s)" if kind == "process" else "1 worker process of 2 threads"
    assert started == [f"INFO:     Started supervisor [{proc.proc.pid}] for {what} on "
                       f"https://127.0.0.1:{port}"], stderr
    assert stderr.count(f"skirr running on https://127.0.0.1:{port} (Press CTRL+C") == 2, stderr


@pytest.mark.rule("skirr-tls-startup-log", "skirr-tls-scheme")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_the_example_over_https_and_wss(tmp_path, loop):
    """The issue's "done when": python -m skirr app:app --ssl-keyfile k.pem --ssl-certfile c.pem
    serves examples/app.py over HTTPS and WSS."""
    import asyncio
    import json

    import websockets

    files = TLSFiles(tmp_path / "certs")
    port = _proc.free_port()
    args = ["app:app", "--app-dir", str(_proc.EXAMPLES_DIR), "--loop", loop, "--port", str(port),
            "--ssl-keyfile", str(files.key_pem), "--ssl-certfile", str(files.cert_pem)]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port, timeout=_proc.START_TIMEOUT)
        ctx = files.client_context()
        with connect(port, ctx) as tls:
            resp = get(tls)
            assert (resp.status, json.loads(resp.body)) == (200, {"hello": "world"})

        async def echo() -> str:
            async with websockets.connect(f"wss://localhost:{port}/ws", ssl=ctx) as ws:
                await ws.send("over wss")
                return await ws.recv()

        assert asyncio.run(echo()) == "over wss"
        assert proc.stop() == 0


@pytest.mark.rule("skirr-tls-refusal-logs")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_refused_connections_say_why_in_the_logs(tmp_path, loop):
    """--log-level trace: a plain HTTP request on the TLS port is a refusal like any 400 skirr
    answers (access line and trace line); each failed handshake is one DEBUG line and its
    connection-lost trace line says the TLS reason (not 'closed by the client')."""
    files = TLSFiles(tmp_path / "certs")
    stranger = TLSFiles(tmp_path / "stranger")  # a client certificate of another CA
    port = _proc.free_port()
    args = ["basic:app", "--loop", loop, "--port", str(port), "--log-level", "trace",
            *files.server_args(), "--ssl-ca-certs", str(files.ca_pem), "--ssl-cert-reqs", "2"]
    wrong_ca = files.client_context()
    wrong_ca.load_cert_chain(str(stranger.client_pem))
    clients = {
        "unsupported protocol": old_client(ssl.TLSVersion.TLSv1_1),
        "peer did not return a certificate": files.client_context(),
        "certificate verify failed": wrong_ca,
    }
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        with socket.create_connection(("127.0.0.1", port), timeout=_proc.IO_TIMEOUT) as plain:
            plain_addr = "%s:%d" % plain.getsockname()[:2]
            plain.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
            while plain.recv(65536):
                pass
        addrs = {}
        for reason, ctx in clients.items():
            sock = socket.create_connection(("127.0.0.1", port), timeout=_proc.IO_TIMEOUT)
            addrs[reason] = "%s:%d" % sock.getsockname()[:2]
            with pytest.raises(ssl.SSLError):
                with ctx.wrap_socket(sock, server_hostname="localhost") as tls:
                    get(tls)
            sock.close()
        proc.wait_stdout("400 Bad Request")
        proc.wait_stderr(f"{addrs['certificate verify failed']} - HTTP connection lost")
        assert proc.stop() == 0
        out, err = proc.stdout.splitlines(), proc.stderr.splitlines()
    assert [line for line in out if "refused" in line] == [
        f'INFO:     {plain_addr} - "-" 400 Bad Request (refused: plain HTTP request on the TLS '
        'port)']
    assert [line for line in err if plain_addr in line] == [
        f"TRACE:    {plain_addr} - HTTP connection made",
        f"TRACE:    {plain_addr} - HTTP request refused: 400 (plain HTTP request on the TLS port)"]
    for reason, addr in addrs.items():
        assert [line for line in err if addr in line] == [
            f"TRACE:    {addr} - HTTP connection made",
            f"DEBUG:    {addr} - TLS handshake failed: {reason}",
            f"TRACE:    {addr} - HTTP connection lost (TLS handshake failed: {reason})"]


@pytest.mark.rule("skirr-tls-refusal-logs")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_failed_handshakes_are_not_logged_at_info(tmp_path, loop):
    """The default --log-level info: a failed handshake logs nothing (a port scan cannot flood
    the log); a plain HTTP request still gets its access line."""
    files = TLSFiles(tmp_path / "certs")
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port), *files.server_args()],
                     tmp_path) as proc:
        proc.wait_accepting(port)
        before = proc.wait_stderr("skirr running on")
        with pytest.raises(ssl.SSLError):
            with connect(port, old_client(ssl.TLSVersion.TLSv1_1)) as tls:
                get(tls)
        with socket.create_connection(("127.0.0.1", port), timeout=_proc.IO_TIMEOUT) as plain:
            plain.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            while plain.recv(65536):
                pass
        proc.wait_stdout("(refused: plain HTTP request on the TLS port)")
        assert proc.stop() == 0
        assert "TLS handshake failed" not in proc.stderr
        assert proc.stderr.startswith(before)


# ---- reload -----------------------------------------------------------------------------------


@pytest.mark.rule("skirr-tls-reload")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_sighup_reloads_new_connections_get_the_new_certificate(tmp_path, loop):
    files = TLSFiles(tmp_path / "certs")
    old_der = der(files.cert_pem.read_bytes())
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port), *files.server_args()],
                     tmp_path) as proc:
        proc.wait_accepting(port)
        ctx = files.client_context()
        before = connect(port, ctx)
        try:
            assert get(before).status == 200
            # a new certificate and key in the same files
            new_cert, new_key = files.issue("new", "127.0.0.1", "localhost")
            files.cert_pem.write_bytes(new_cert.read_bytes())
            files.key_pem.write_bytes(new_key.read_bytes())
            proc.proc.send_signal(signal.SIGHUP)
            proc.wait_stderr("SIGHUP: TLS certificates reloaded")
            assert get(before).status == 200  # the open connection keeps working
            assert before.getpeercert(binary_form=True) == old_der
            with connect(port, ctx) as after:
                assert get(after).status == 200
                assert after.getpeercert(binary_form=True) == der(new_cert.read_bytes())
            # a bad file: one error line, the current certificate kept
            files.cert_pem.write_text("garbage\n")
            proc.proc.send_signal(signal.SIGHUP)
            stderr = proc.wait_stderr("TLS reload failed")
            assert (f"ERROR:    SIGHUP: TLS reload failed, keeping the current certificates: "
                    f"--ssl-certfile {files.cert_pem}: not a PEM certificate chain (OpenSSL: no "
                    "start line)\n") in stderr
            assert stderr.count("TLS reload failed") == 1
            with connect(port, ctx) as again:
                assert get(again).status == 200
                assert again.getpeercert(binary_form=True) == der(new_cert.read_bytes())
            assert get(before).status == 200
        finally:
            before.close()
        assert proc.stop() == 0


def reload_and_wait(proc: _proc.Skirr, count: int) -> None:
    """Sends SIGHUP and waits for the ``count``-th reload line."""
    proc.proc.send_signal(signal.SIGHUP)
    proc._wait_until(lambda: proc.stderr.count("SIGHUP: TLS certificates reloaded") == count,
                     f"reload {count}", _proc.IO_TIMEOUT, lambda: proc.stderr)


@pytest.mark.rule("skirr-tls-session-id-context")
@pytest.mark.parametrize("loop", _proc.LOOPS)
@pytest.mark.parametrize("maximum", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_a_crl_reload_revokes_the_sessions_of_the_certificates_it_revokes(tmp_path, loop,
                                                                          maximum):
    """A session made before a reload resumes after a reload of the same files, and never
    after the CRL changed: the revoked client then gets a full handshake and is refused."""
    files = TLSFiles(tmp_path / "certs")
    crl = tmp_path / "certs" / "current.crl.pem"
    crl.write_bytes(Path(write_crl(files, revoke=False)).read_bytes())
    port = _proc.free_port()
    args = ["basic:app", "--loop", loop, "--port", str(port), *files.server_args(),
            "--ssl-ca-certs", str(files.ca_pem), "--ssl-cert-reqs", "2", "--ssl-crl", str(crl)]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        ctx = files.client_context(client_cert=True)
        ctx.maximum_version = maximum
        with connect(port, ctx) as tls:
            assert get(tls).status == 200
            session = tls.session
        reload_and_wait(proc, 1)  # the same files: the session still resumes
        with connect(port, ctx, session=session) as tls:
            assert get(tls).status == 200
            assert tls.session_reused
            session = tls.session
        crl.write_bytes(Path(write_crl(files, revoke=True)).read_bytes())
        reload_and_wait(proc, 2)
        with pytest.raises(ssl.SSLError) as info:
            with connect(port, ctx, session=session) as tls:
                get(tls)
        assert info.value.reason == "SSLV3_ALERT_CERTIFICATE_REVOKED"
        assert proc.stop() == 0


@pytest.mark.rule("skirr-tls-session-id-context")
@pytest.mark.parametrize("maximum", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
@pytest.mark.parametrize("change", ["ca", "cert_reqs"])
@pytest.mark.parametrize("name", ["localhost", "other.example"], ids=["default", "sni"])
def test_a_session_resumes_only_under_the_verification_it_was_made_with(serve, tmp_path,
                                                                        monkeypatch, maximum,
                                                                        change, name):
    """Three servers with one ticket key (as a supervisor's workers share): the second, with
    the same settings, resumes the first's session; the third, with another CA file or
    --ssl-cert-reqs, makes a full handshake instead. The same through an --ssl-sni
    certificate's context (other.example)."""
    import skirr

    files = TLSFiles(tmp_path)
    make = skirr.Config.tls_context
    monkeypatch.setattr(skirr.Config, "tls_context",
                        lambda self, ticket_key=None: make(self, bytes(range(80))))
    sni_cert, sni_key = files.issue("sni", "other.example")
    first = files.server_config(ssl_ca_certs=str(files.ca_pem), ssl_cert_reqs=1,
                                ssl_sni=[f"{sni_cert}:{sni_key}"])
    if change == "ca":
        other = tmp_path / "two-cas.pem"
        other.write_bytes(files.ca_pem.read_bytes() + TLSFiles(tmp_path / "x").ca_pem.read_bytes())
        second = dict(first, ssl_ca_certs=str(other))
    else:
        second = dict(first, ssl_cert_reqs=2)
    ctx = files.client_context(client_cert=True)
    ctx.maximum_version = maximum
    reused = []
    session = None
    for config in (first, first, second):
        with serve(CountingApp(), **config) as srv:
            with connect(srv.port, ctx, name, session=session) as tls:
                assert get(tls).status == 200
                assert ("DNS", name) in tls.getpeercert()["subjectAltName"]
                reused.append(tls.session_reused)
                session = tls.session
    assert reused == [False, True, False]


# ---- workers ----------------------------------------------------------------------------------


@contextlib.contextmanager
def two_tls_workers(tmp_path: Path, loop: str) -> Iterator[tuple[TLSFiles, int, _proc.Skirr]]:
    """skirr with --workers 2 serving workers_app over TLS (certificates in tmp_path/certs),
    yielded once both workers serve (each logs its running line): (files, port, proc)."""
    files = TLSFiles(tmp_path / "certs")
    port = _proc.free_port()
    args = ["workers_app:app", "--loop", loop, "--port", str(port), "--workers", "2",
            *files.server_args()]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        proc._wait_until(lambda: proc.stderr.count("skirr running on") == 2, "two workers serve",
                         _proc.START_TIMEOUT, lambda: proc.stderr)
        yield files, port, proc


@pytest.mark.rule("skirr-tls-tickets-workers")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_ticket_from_one_worker_resumes_on_another(tmp_path, loop):
    with two_tls_workers(tmp_path, loop) as (files, port, proc):
        ctx = files.client_context()
        with connect(port, ctx) as tls:
            issuer = get(tls).body.split()[0]
            session = tls.session
        resumed_by = set()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (resumed_by - {issuer}):
            with connect(port, ctx, session=session) as tls:
                pid = get(tls).body.split()[0]
                assert tls.session_reused, pid
                resumed_by.add(pid)
        assert resumed_by - {issuer}, f"every reconnect went to worker {issuer!r}"
        assert proc.stop() == 0


@pytest.mark.rule("skirr-tls-reload")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_workers_sighup_with_a_bad_file_keeps_the_workers(tmp_path, loop):
    with two_tls_workers(tmp_path, loop) as (files, port, proc):
        files.key_pem.write_text("garbage\n")
        proc.proc.send_signal(signal.SIGHUP)
        stderr = proc.wait_stderr("TLS reload failed")
        assert (f"ERROR:    SIGHUP: TLS reload failed, keeping the current workers: "
                f"--ssl-keyfile {files.key_pem}: no PEM private key in it (OpenSSL: unsupported)"
                "\n") in stderr
        assert "restarting" not in stderr
        with connect(port, files.client_context()) as tls:
            assert get(tls).status == 200
        assert proc.stop() == 0


@pytest.mark.rule("skirr-tls-reload")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_workers_sighup_rolls_onto_the_new_certificate(tmp_path, loop):
    import re

    with two_tls_workers(tmp_path, loop) as (files, port, proc):
        old = re.findall(r"Started worker \[(\d+)\]", proc.stderr)
        assert len(old) == 2
        new_cert, new_key = files.issue("new", "127.0.0.1", "localhost")
        files.cert_pem.write_bytes(new_cert.read_bytes())
        files.key_pem.write_bytes(new_key.read_bytes())
        proc.proc.send_signal(signal.SIGHUP)
        proc._wait_until(lambda: all(f"Worker [{p}] stopped (exit status 0)" in proc.stderr
                                     for p in old), "the roll done", 30, lambda: proc.stderr)
        assert "TLS reload failed" not in proc.stderr
        for _ in range(4):  # whichever worker the kernel picks
            with connect(port, files.client_context()) as tls:
                assert get(tls).status == 200
                assert tls.getpeercert(binary_form=True) == der(new_cert.read_bytes())
        assert proc.stop() == 0


@pytest.mark.rule("skirr-workers-dead-slot")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_workers_a_dead_slot_with_a_bad_key_on_disk_gets_no_new_connections(tmp_path, loop):
    """A worker killed after its key file was spoilt on disk (a certificate rotation gone wrong)
    cannot restart: every new TLS connection is answered within 1 s by the other worker, and
    once the file is good again the slot serves its share."""
    import re

    with two_tls_workers(tmp_path, loop) as (files, port, proc):
        victim, other = (int(p) for p in re.findall(r"Started worker \[(\d+)\]", proc.stderr))
        key = files.key_pem.read_bytes()
        files.key_pem.write_text("garbage\n")
        os.kill(victim, signal.SIGKILL)
        proc.wait_stderr("restarting in 0.1 s")
        ctx = files.client_context()
        for _ in range(20):
            began = time.monotonic()
            sock = socket.create_connection(("127.0.0.1", port), timeout=1.0)
            with ctx.wrap_socket(sock, server_hostname="localhost") as tls:
                r = get(tls)
            assert (r.status, r.body.decode()) == (200, f"{other} v1")
            assert time.monotonic() - began < 1.0
        assert "Slot 0 has no serving worker: its new connections go to the other slot(s)" in \
            proc.stderr
        files.key_pem.write_bytes(key)
        proc.wait_stderr("Slot 0 serves again: it gets its share of new connections")
        pids = set()
        deadline = time.monotonic() + 20
        while len(pids) < 2 and time.monotonic() < deadline:
            with connect(port, ctx) as tls:
                pids.add(int(get(tls).body.split()[0]))
        assert other in pids and victim not in pids and len(pids) == 2, pids
        assert proc.stop() == 0


@pytest.mark.rule("skirr-tls-config-errors")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_config_refuses_a_password_callable_with_workers(tmp_path, loop):
    """skirr.Config (the Python API): a key password that is not a str cannot be handed to
    worker processes; a usage error when the Config is made."""
    import skirr
    from skirr.config import ConfigError

    files = TLSFiles(tmp_path)
    with pytest.raises(ConfigError) as info:
        skirr.Config("workers_app:app", loop=loop, workers=2, ssl_keyfile_password=lambda: "x",
                     **files.server_config())
    assert str(info.value) == ("ssl_keyfile_password must be a str with workers or reload (each "
                               "worker process is given it)")
    config = skirr.Config("workers_app:app", loop=loop, ssl_keyfile_password=lambda: "x",
                          **files.server_config())  # one process: any form
    assert config.tls_context() is not None
