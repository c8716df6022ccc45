"""The ASGI `tls` extension and the scheme on TLS connections (issue 32 items 3 and 4).

Served in-process on both loops with certificates trustme makes for each case; the client is
Python's ssl module and the expected values are computed with cryptography from the same
certificates and with ssl from the same connection.
"""
from __future__ import annotations

import asyncio
import gc
import json
import socket
import ssl

import h11
import pytest
import websockets
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

try:
    from . import _proc
    from .tls_util import TLSFiles
except ImportError:
    import _proc
    from tls_util import TLSFiles

TLS_VERSIONS = {"TLSv1.3": 0x0304, "TLSv1.2": 0x0303}


class ScopeApp:
    """Answers every http request with JSON {scheme, extensions}, and keeps each scope's
    extensions dict; a websocket is accepted and sent the same JSON."""

    def __init__(self) -> None:
        self.extensions: list[dict] = []

    async def __call__(self, scope, receive, send):
        self.extensions.append(scope["extensions"])
        body = json.dumps({"scheme": scope["scheme"], "extensions": scope["extensions"]})
        if scope["type"] == "websocket":
            await receive()
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.send", "text": body})
            await send({"type": "websocket.close"})
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body.encode()})


def tls_connect(port: int, ctx: ssl.SSLContext, name: str = "localhost") -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=_proc.IO_TIMEOUT)
    try:
        return ctx.wrap_socket(sock, server_hostname=name)
    except BaseException:
        sock.close()
        raise


def get_json(tls: socket.socket, conn: h11.Connection, target: str = "/",
             headers: tuple = ()) -> dict:
    _proc.send_request(tls, conn, "GET", target, headers)
    resp = _proc.read_response(tls, conn)
    assert resp.status == 200
    conn.start_next_cycle()
    return json.loads(resp.body)


def pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(Encoding.PEM).decode()


def expected_tls(files: TLSFiles, tls: ssl.SSLSocket, client: bool, error=None) -> dict:
    """What the extension must say, from cryptography (the certificates) and ssl (the
    negotiated version and suite)."""
    server_leaf = x509.load_pem_x509_certificate(files.server.cert_chain_pems[0].bytes())
    ids = {c["name"]: c["id"] & 0xFFFF for c in tls.context.get_ciphers()}
    out = {
        "server_cert": pem(server_leaf),
        "client_cert_chain": [],
        "client_cert_name": None,
        "client_cert_error": error,
        "tls_version": TLS_VERSIONS[tls.version()],
        "cipher_suite": ids[tls.cipher()[0]],
    }
    if client:
        leaf = x509.load_pem_x509_certificate(files.client.cert_chain_pems[0].bytes())
        out["client_cert_chain"] = [pem(leaf)]
        out["client_cert_name"] = leaf.subject.rfc4514_string()
    return out


@pytest.mark.rule("ASGI-tls-extension", "skirr-tls-scheme")
@pytest.mark.parametrize("version", ["TLSv1.3", "TLSv1.2"])
def test_tls_extension_exact_without_client_cert(serve, tmp_path, version):
    files = TLSFiles(tmp_path)
    app = ScopeApp()
    with serve(app, **files.server_config()) as srv:
        ctx = files.client_context()
        ctx.maximum_version = getattr(ssl.TLSVersion, version.replace(".", "_"))
        with tls_connect(srv.port, ctx) as tls:
            got = get_json(tls, h11.Connection(h11.CLIENT))
            assert got["scheme"] == "https"
            assert got["extensions"]["tls"] == expected_tls(files, tls, client=False)
            assert tls.version() == version


@pytest.mark.rule("ASGI-tls-extension", "skirr-tls-client-certs")
@pytest.mark.parametrize("reqs", [1, 2])
def test_tls_extension_exact_with_client_cert(serve, tmp_path, reqs):
    files = TLSFiles(tmp_path)
    app = ScopeApp()
    config = files.server_config(ssl_ca_certs=str(files.ca_pem), ssl_cert_reqs=reqs)
    with serve(app, **config) as srv:
        with tls_connect(srv.port, files.client_context(client_cert=True)) as tls:
            got = get_json(tls, h11.Connection(h11.CLIENT))
            assert got["extensions"]["tls"] == expected_tls(files, tls, client=True)


def tls_with_client_cert(serve, files: TLSFiles, client_pem) -> dict:
    """scope["extensions"]["tls"] of one request over a connection presenting the certificate
    chain in client_pem, to a server requiring a client certificate from files' CA."""
    app = ScopeApp()
    config = files.server_config(ssl_ca_certs=str(files.ca_pem), ssl_cert_reqs=2)
    with serve(app, **config) as srv:
        ctx = files.client_context()
        ctx.load_cert_chain(str(client_pem))
        with tls_connect(srv.port, ctx) as tls:
            return get_json(tls, h11.Connection(h11.CLIENT))["extensions"]["tls"]


@pytest.mark.rule("ASGI-tls-extension")
def test_client_chain_through_an_intermediate_is_leaf_first(serve, tmp_path):
    """A client certificate issued by an intermediate CA, sent with it: client_cert_chain is
    [leaf, intermediate] as the client sent them."""
    files = TLSFiles(tmp_path)
    child = files.ca.create_child_ca()
    client = child.issue_cert("chained@example.org")
    client_pem = tmp_path / "chained.pem"
    client_pem.write_bytes(client.private_key_and_cert_chain_pem.bytes())
    got = tls_with_client_cert(serve, files, client_pem)
    sent = [pem(x509.load_pem_x509_certificate(b.bytes())) for b in client.cert_chain_pems]
    assert len(sent) == 2
    assert got["client_cert_chain"] == sent
    assert got["client_cert_name"] == x509.load_pem_x509_certificate(
        client.cert_chain_pems[0].bytes()).subject.rfc4514_string()
    assert got["client_cert_error"] is None


def client_cert_with_subject(files: TLSFiles, subject: x509.Name, path) -> None:
    """Writes to path a client certificate (and its key) with subject, signed by the CA."""
    import datetime

    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ca_cert = x509.load_pem_x509_certificate(files.ca.cert_pem.bytes())
    ca_key = serialization.load_pem_private_key(files.ca.private_key_pem.bytes(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .sign(ca_key, hashes.SHA256()))
    path.write_bytes(cert.public_bytes(Encoding.PEM) + key.private_bytes(
        Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


N = x509.NameOID
A = x509.NameAttribute
RDN = x509.RelativeDistinguishedName
SUBJECTS = {
    # every type of RFC 4514's table, an emailAddress and a serialNumber (dotted OIDs)
    "types": x509.Name([
        RDN([A(N.COUNTRY_NAME, "FR")]), RDN([A(N.STATE_OR_PROVINCE_NAME, "Île-de-France")]),
        RDN([A(N.LOCALITY_NAME, "Paris")]), RDN([A(N.STREET_ADDRESS, "1 rue X")]),
        RDN([A(N.DOMAIN_COMPONENT, "org")]), RDN([A(N.DOMAIN_COMPONENT, "example")]),
        RDN([A(N.ORGANIZATION_NAME, "Acme")]), RDN([A(N.ORGANIZATIONAL_UNIT_NAME, "Ops")]),
        RDN([A(N.USER_ID, "jd")]), RDN([A(N.SERIAL_NUMBER, "42")]),
        RDN([A(N.COMMON_NAME, "José")]), RDN([A(N.EMAIL_ADDRESS, "jose@example.org")]),
    ]),
    # a multi-valued RDN (kept in its order, '+'), escaping, UTF-8 and a BMPString
    "escaping": x509.Name([
        RDN([A(N.ORGANIZATION_NAME, "Acme, Inc.")]),
        RDN([A(N.ORGANIZATIONAL_UNIT_NAME, "#lead")]),
        RDN([A(N.ORGANIZATIONAL_UNIT_NAME, "Bür;o+x\\y",
               _type=x509.name._ASN1Type.BMPString)]),
        RDN([A(N.COMMON_NAME, ' José <a>"q"#'), A(N.USER_ID, "trailing ")]),
        RDN([A(N.EMAIL_ADDRESS, "a=b@example.org"), A(N.COMMON_NAME, "second")]),
    ]),
}


@pytest.mark.rule("ASGI-tls-client-cert-name")
@pytest.mark.parametrize("subject", sorted(SUBJECTS))
def test_client_cert_name_is_rfc4514_as_cryptography_writes_it(serve, tmp_path, subject):
    files = TLSFiles(tmp_path)
    client_pem = tmp_path / "named.pem"
    client_cert_with_subject(files, SUBJECTS[subject], client_pem)
    got = tls_with_client_cert(serve, files, client_pem)
    expected = x509.load_pem_x509_certificate(client_pem.read_bytes()).subject.rfc4514_string()
    assert got["client_cert_name"] == expected
    assert got["client_cert_error"] is None


@pytest.mark.rule("ASGI-tls-extension")
def test_tls_extension_once_per_connection_copied_per_request(serve, tmp_path):
    """Two requests on one connection: equal dicts, each its own (and its own chain list), the
    PEM strings made once; an app's change to one is not seen by the next request."""
    files = TLSFiles(tmp_path)

    seen: list[dict] = []

    async def app(scope, receive, send):
        tls = scope["extensions"]["tls"]
        seen.append((dict(tls), list(tls["client_cert_chain"])))
        tls["client_cert_chain"].append("changed by the app")
        tls["tls_version"] = 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    config = files.server_config(ssl_ca_certs=str(files.ca_pem), ssl_cert_reqs=2)
    with serve(app, **config) as srv:
        with tls_connect(srv.port, files.client_context(client_cert=True)) as tls:
            conn = h11.Connection(h11.CLIENT)
            for _ in range(2):
                _proc.send_request(tls, conn, "GET", "/")
                assert _proc.read_response(tls, conn).status == 200
                conn.start_next_cycle()
            (first, chain1), (second, chain2) = seen
            assert first["tls_version"] == second["tls_version"] == TLS_VERSIONS[tls.version()]
            leaf = pem(x509.load_pem_x509_certificate(files.client.cert_chain_pems[0].bytes()))
            assert chain1 == chain2 == [leaf]
            assert first["client_cert_chain"] is not second["client_cert_chain"]
            assert first["server_cert"] is second["server_cert"]  # made once per connection


@pytest.mark.rule("ASGI-tls-extension")
def test_tls_extension_exact_when_dicts_are_handed_out_again(serve, tmp_path):
    """skirr hands finished TLS requests' extensions dicts out again (its tls entry refilled
    from the new request's connection) instead of copying each time: over two connections, one
    with a client certificate and one without, requests taking turns, each request still sees
    exactly its own connection's values, whatever the app wrote into an earlier request's dict
    (its chain list appended to, a value changed), and dicts were handed out again."""
    files = TLSFiles(tmp_path)
    seen: list[tuple[str, dict]] = []

    async def app(scope, receive, send):
        tls = scope["extensions"]["tls"]
        seen.append((scope["path"], {**tls, "client_cert_chain": list(tls["client_cert_chain"])}))
        tls["client_cert_chain"].append("changed by the app")
        tls["tls_version"] = 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    config = files.server_config(ssl_ca_certs=str(files.ca_pem), ssl_cert_reqs=1)
    # the access log off: its records would hold every dict of so short a run
    with serve(app, access_log=False, **config) as srv:
        with tls_connect(srv.port, files.client_context(client_cert=True)) as a, \
                tls_connect(srv.port, files.client_context()) as b:
            expect = {"/a": expected_tls(files, a, client=True),
                      "/b": expected_tls(files, b, client=False)}
            conns = {"/a": (a, h11.Connection(h11.CLIENT)), "/b": (b, h11.Connection(h11.CLIENT))}
            for i in range(40):
                path = "/a" if i % 3 else "/b"
                tls, conn = conns[path]
                _proc.send_request(tls, conn, "GET", path)
                assert _proc.read_response(tls, conn).status == 200
                conn.start_next_cycle()
        reused = sum(n._ext_reused for n in srv.server._natives)
    assert len(seen) == 40
    assert [got == expect[path] for path, got in seen] == [True] * 40
    assert reused > 0


@pytest.mark.rule("ASGI-tls-extension")
def test_tls_extension_exact_after_the_garbage_collector_frees_a_request(serve, tmp_path):
    """A TLS request left in a reference cycle by its app is freed by the garbage collector,
    which then clears its extensions dict (tls entry, certificate list) after skirr has put it
    in line to hand out again. The requests after the collection see exactly their connection's
    tls values, and dicts are handed out again after it (the emptied one does not stay at the
    head of the line, making every later request's dict new)."""
    files = TLSFiles(tmp_path)
    seen: list[tuple[str, dict]] = []

    async def app(scope, receive, send):
        tls = scope["extensions"]["tls"]
        seen.append((scope["path"], {**tls, "client_cert_chain": list(tls["client_cert_chain"])}))
        if scope["path"] == "/cycle":
            held = [send]
            held.append(held)
        elif scope["path"] == "/gc":
            gc.collect()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    config = files.server_config(ssl_ca_certs=str(files.ca_pem), ssl_cert_reqs=1)
    paths = ["/cycle", "/gc", "/", "/", "/", "/", "/", "/"]
    with serve(app, access_log=False, **config) as srv:
        with tls_connect(srv.port, files.client_context(client_cert=True)) as a:
            expect = expected_tls(files, a, client=True)
            conn = h11.Connection(h11.CLIENT)
            before = 0
            for i, path in enumerate(paths):
                if i == 4:
                    before = sum(n._ext_reused for n in srv.server._natives)
                _proc.send_request(a, conn, "GET", path)
                assert _proc.read_response(a, conn).status == 200
                conn.start_next_cycle()
        after = sum(n._ext_reused for n in srv.server._natives)
    assert seen == [(p, expect) for p in paths]
    assert after > before


@pytest.mark.rule("ASGI-tls-extension", "skirr-tls-scheme")
def test_cleartext_has_no_tls_extension(serve, tmp_path):
    app = ScopeApp()
    with serve(app) as srv:
        resp = srv.get("/")
        got = json.loads(resp.body)
        assert got["scheme"] == "http"
        assert "tls" not in got["extensions"]


@pytest.mark.rule("skirr-tls-scheme")
def test_trusted_proxy_forwarded_proto_still_decides(serve, tmp_path):
    """--proxy-headers rules are unchanged: a trusted peer's X-Forwarded-Proto: http wins over
    the connection's TLS (the tls extension stays: the connection is TLS)."""
    files = TLSFiles(tmp_path)
    app = ScopeApp()
    with serve(app, **files.server_config()) as srv:
        with tls_connect(srv.port, files.client_context()) as tls:
            conn = h11.Connection(h11.CLIENT)
            got = get_json(tls, conn, headers=(("x-forwarded-proto", "http"),))
            assert got["scheme"] == "http"
            assert "tls" in got["extensions"]
            assert get_json(tls, conn)["scheme"] == "https"


@pytest.mark.rule("ASGI-tls-extension", "skirr-tls-scheme")
def test_wss_scope_with_the_websockets_client(serve, tmp_path):
    files = TLSFiles(tmp_path)
    app = ScopeApp()
    ctx = files.client_context(client_cert=True)
    config = files.server_config(ssl_ca_certs=str(files.ca_pem), ssl_cert_reqs=2)
    with serve(app, **config) as srv:

        async def talk():
            async with websockets.connect(f"wss://localhost:{srv.port}/", ssl=ctx) as ws:
                return json.loads(await ws.recv()), ws.transport.get_extra_info("ssl_object")

        got, sslobj = asyncio.run(talk())
        assert got["scheme"] == "wss"
        assert set(got["extensions"]) == {"websocket.http.response", "tls"}
        tls = got["extensions"]["tls"]
        assert tls["client_cert_name"] == x509.load_pem_x509_certificate(
            files.client.cert_chain_pems[0].bytes()).subject.rfc4514_string()
        assert tls["tls_version"] == TLS_VERSIONS[sslobj.version()]
        ids = {c["name"]: c["id"] & 0xFFFF for c in ctx.get_ciphers()}
        assert tls["cipher_suite"] == ids[sslobj.cipher()[0]]
