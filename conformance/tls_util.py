"""Certificates for the TLS cases (issue 32), made by trustme (the test oracle's certificate
maker): a CA, a server certificate for 127.0.0.1 and localhost, a client certificate, and files
for them in a directory.

`TLSFiles(tmp_path)` writes every PEM file a case needs and gives its paths; `client_context()`
is Python's ssl client (the oracle) trusting the CA, optionally with the client certificate.
Generated certificates are never committed: each case makes its own under tmp_path.
"""
from __future__ import annotations

import ssl
from pathlib import Path

import trustme

SERVER_NAMES = ("127.0.0.1", "localhost")
CLIENT_IDENTITY = "client@example.org"


class TLSFiles:
    """A CA (``ca``), a server certificate (``server``) and a client certificate (``client``)
    and their PEM files under ``directory``: ``ca_pem``, ``cert_pem`` (the server's chain, leaf
    first), ``key_pem``, ``client_pem`` (the client's chain and key in one file)."""

    def __init__(self, directory: Path, names: tuple[str, ...] = SERVER_NAMES) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.dir = directory
        self.ca = trustme.CA()
        self.server = self.ca.issue_cert(*names)
        self.client = self.ca.issue_cert(CLIENT_IDENTITY)
        self.ca_pem = self._write("ca.pem", self.ca.cert_pem.bytes())
        self.cert_pem = self._write("cert.pem", b"".join(
            blob.bytes() for blob in self.server.cert_chain_pems))
        self.key_pem = self._write("key.pem", self.server.private_key_pem.bytes())
        self.client_pem = self._write("client.pem", self.client.private_key_and_cert_chain_pem.bytes())

    def _write(self, name: str, data: bytes) -> Path:
        path = self.dir / name
        path.write_bytes(data)
        return path

    def issue(self, stem: str, *names: str) -> tuple[Path, Path]:
        """Another server certificate of this CA for ``names``: (certfile, keyfile) written as
        ``<stem>.cert.pem`` and ``<stem>.key.pem``."""
        cert = self.ca.issue_cert(*names)
        return (self._write(f"{stem}.cert.pem", b"".join(b.bytes() for b in cert.cert_chain_pems)),
                self._write(f"{stem}.key.pem", cert.private_key_pem.bytes()))

    def server_config(self, **extra: object) -> dict[str, object]:
        """skirr.Config keyword arguments serving TLS with the server certificate."""
        return {"ssl_certfile": str(self.cert_pem), "ssl_keyfile": str(self.key_pem), **extra}

    def server_args(self) -> list[str]:
        """The same as command-line flags: ["--ssl-certfile", PATH, "--ssl-keyfile", PATH]."""
        return ["--ssl-certfile", str(self.cert_pem), "--ssl-keyfile", str(self.key_pem)]

    def client_context(self, client_cert: bool = False) -> ssl.SSLContext:
        """Python's ssl client trusting the CA (hostname checked), with the client certificate
        when asked."""
        ctx = ssl.create_default_context(cafile=str(self.ca_pem))
        if client_cert:
            ctx.load_cert_chain(str(self.client_pem))
        return ctx
