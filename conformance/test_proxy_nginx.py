"""Proxy headers behind a real nginx (Debian's nginx-light), started by the test on loopback ports
with its own configuration (issue 13)."""
from __future__ import annotations

import contextlib
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from _proc import free_port
from conftest import http_request

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

ROOT = Path(__file__).resolve().parent.parent

CONF = """
daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    {maps}
    upstream skirr {{ server 127.0.0.1:{upstream}; keepalive 4; }}
    server {{
        listen 127.0.0.1:{port4};
        listen [::1]:{port6};
        location / {{
            proxy_pass http://skirr;
            {directives}
        }}
    }}
}}
"""


def documented_blocks() -> dict[str, tuple[str, list[str]]]:
    """The nginx blocks of docs/deployment.md, as they are written there: {mode: (the
    document's map blocks, the location's proxy_set_header / proxy_http_version lines)}. The
    first block is the default mode's (x-forwarded), the one with a Forwarded header the
    forwarded mode's."""
    text = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    blocks = {}
    bodies = re.findall(r"^```nginx\n(.*?)^```", text, re.M | re.S)
    # every map of the document (one http {}): the second block uses the first's $connection_upgrade
    maps = "\n".join(re.findall(r"^map .*?^\}", "".join(bodies), re.M | re.S))
    for body in bodies:
        location = re.search(r"location / \{(.*?)\n    \}", body, re.S).group(1)
        lines = [re.sub(r";\s*#.*$", ";", x.strip()) for x in location.splitlines()
                 if re.match(r"\s*proxy_(set_header|http_version)\b", x)]
        mode = "forwarded" if any(x.startswith("proxy_set_header Forwarded \"for=")
                                  for x in lines) else "x-forwarded"
        assert mode not in blocks, f"two {mode} blocks in docs/deployment.md"
        blocks[mode] = (maps, lines)
    assert set(blocks) == {"x-forwarded", "forwarded"}, blocks
    return blocks


@contextlib.contextmanager
def nginx(tmp_path, upstream: int, maps: str, directives: list[str]):
    if not shutil.which(NGINX) and not __import__("os").path.exists(NGINX):
        pytest.fail("nginx is not installed (apt-get install nginx-light; .ci/run does)")
    port4, port6 = free_port(), free_port(socket.AF_INET6, "::1")
    conf = tmp_path / "nginx.conf"
    conf.write_text(CONF.format(tmp=tmp_path, upstream=upstream, port4=port4, port6=port6,
                                maps=maps, directives="\n            ".join(directives)))
    proc = subprocess.Popen([NGINX, "-p", str(tmp_path), "-c", str(conf), "-e",
                             str(tmp_path / "error.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port4), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log = tmp_path / "error.log"
                    pytest.fail(f"nginx did not start: {log.read_text() if log.exists() else ''}")
                time.sleep(0.05)
        yield port4, port6
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def via(port: int, host: str = "127.0.0.1", source: str | None = None,
        headers=()) -> tuple[int, str, int]:
    """GET / through nginx on a fresh connection from source (an address of this machine):
    (status, the client's own address and port)."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam) as s:
        s.settimeout(5)
        if source is not None:
            s.bind((source, 0))
        s.connect((host, port))
        s.sendall(http_request("GET", "/", headers=[("Host", "x"), ("Connection", "close"),
                                                    *headers]))
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        here = s.getsockname()
        return int(data.split(b" ", 2)[1]), here[0], here[1]


# A client's own proxy headers (issue 35: the first is the whole attack of item 5)
ATTACKS = {
    "forwarded": [("Forwarded", "for=6.6.6.6;proto=https")],
    "x-forwarded": [("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-Proto", "https")],
    "both": [("Forwarded", "for=6.6.6.6;proto=https"), ("X-Forwarded-For", "6.6.6.6"),
             ("X-Forwarded-Proto", "https")],
}
# The round-3 default block (no `Forwarded ""` line) was the one attacked: skirr alone must hold
BLOCKS = ["x-forwarded", "x-forwarded-uncleared", "forwarded"]


@pytest.mark.rule("skirr-proxy-nginx", "skirr-proxy-trusted", "RFC7239-4-forwarded",
                  "RFC7239-8.1-one-family")
@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_behind_nginx(serve, echo_app, tmp_path, block, attack):
    """docs/deployment.md's block in a real nginx; the client (127.0.0.2 and ::1, neither
    trusted; nginx reaches skirr from 127.0.0.1, trusted) sends its own proxy headers. The app
    sees the client nginx saw, over http (nginx's scheme here)."""
    mode = "forwarded" if block == "forwarded" else "x-forwarded"
    maps, directives = documented_blocks()[mode]
    if block == "x-forwarded-uncleared":
        directives = [x for x in directives if x != 'proxy_set_header Forwarded "";']
        assert len(directives) == len(documented_blocks()[mode][1]) - 1
    with serve(echo_app, proxy_headers_mode=mode) as srv, \
            nginx(tmp_path, srv.port, maps, directives) as (port4, port6):
        status, chost, cport = via(port4, source="127.0.0.2", headers=ATTACKS[attack])
        assert status == 200
        scope4 = echo_app.calls.wait(1)[-1]["scope"]
        status, chost6, cport6 = via(port6, host="::1", headers=ATTACKS[attack])
        assert status == 200
        scope6 = echo_app.calls.wait(2)[-1]["scope"]
    assert chost == "127.0.0.2" and chost6 == "::1"
    if mode == "x-forwarded":
        # X-Forwarded-For: nginx's $remote_addr (port unknown: 0) appended to the client's own
        # list, walked from the right; scheme from X-Forwarded-Proto, which nginx overwrites
        assert (scope4["client"], scope4["scheme"]) == (("127.0.0.2", 0), "http")
        assert (scope6["client"], scope6["scheme"]) == (("::1", 0), "http")
    else:
        # Forwarded: the exact address and port nginx saw
        assert (scope4["client"], scope4["scheme"]) == (("127.0.0.2", cport), "http")
        assert (scope6["client"], scope6["scheme"]) == (("::1", cport6), "http")
    # what the app receives of the other family: nothing, where the documented block clears it
    names = [n for n, _ in scope4["headers"]]
    if block == "x-forwarded":
        assert b"forwarded" not in names
    elif block == "forwarded":
        assert b"x-forwarded-for" not in names and b"x-forwarded-proto" not in names
    else:
        assert (b"forwarded" in names) == (attack != "x-forwarded")


@pytest.mark.rule("skirr-proxy-nginx", "skirr-proxy-untrusted")
@pytest.mark.parametrize("mode", ["x-forwarded", "forwarded"])
def test_behind_nginx_untrusted(serve, echo_app, tmp_path, mode):
    """skirr not trusting the proxy: the app sees nginx's own connection."""
    maps, directives = documented_blocks()[mode]
    with serve(echo_app, forwarded_allow_ips="10.0.0.1", proxy_headers_mode=mode) as srv, \
            nginx(tmp_path, srv.port, maps, directives) as (port4, _):
        status, _, cport = via(port4, source="127.0.0.2", headers=ATTACKS["both"])
        assert status == 200
        scope = echo_app.calls.wait(1)[-1]["scope"]
    host, port = scope["client"]
    assert host == "127.0.0.1" and port not in (0, cport)
    assert scope["scheme"] == "http"
