"""Proxy headers behind a real nginx (Debian's nginx-light), started by the test on loopback ports
with its own configuration (issue 13)."""
from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time

import pytest

from conftest import http_request

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

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
    upstream skirr {{ server 127.0.0.1:{upstream}; }}
    server {{
        listen 127.0.0.1:{port4};
        location /xff {{
            proxy_pass http://skirr;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
        }}
        location /fwd {{
            proxy_pass http://skirr;
            proxy_set_header Forwarded "for=\\"$remote_addr:$remote_port\\";proto=$scheme";
        }}
    }}
    server {{
        listen [::1]:{port6};
        location /fwd {{
            proxy_pass http://skirr;
            proxy_set_header Forwarded "for=\\"[$remote_addr]:$remote_port\\";proto=$scheme";
        }}
    }}
}}
"""


def free_port(family=socket.AF_INET, host="127.0.0.1") -> int:
    with socket.socket(family) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def nginx(tmp_path, upstream: int):
    if not shutil.which(NGINX) and not __import__("os").path.exists(NGINX):
        pytest.fail("nginx is not installed (apt-get install nginx-light; .ci/run does)")
    port4, port6 = free_port(), free_port(socket.AF_INET6, "::1")
    conf = tmp_path / "nginx.conf"
    conf.write_text(CONF.format(tmp=tmp_path, upstream=upstream, port4=port4, port6=port6))
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


def via(port: int, target: str, host: str = "127.0.0.1", headers=()) -> tuple[int, int]:
    """GET target through nginx on a fresh connection: (status, the client's own port)."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam) as s:
        s.settimeout(5)
        s.connect((host, port))
        s.sendall(http_request("GET", target, headers=[("Host", "x"), ("Connection", "close"),
                                                       *headers]))
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        return int(data.split(b" ", 2)[1]), s.getsockname()[1]


@pytest.mark.rule("skirr-proxy-nginx", "skirr-proxy-trusted", "RFC7239-4-forwarded")
def test_behind_nginx(serve, echo_app, tmp_path):
    with serve(echo_app) as srv, nginx(tmp_path, srv.port) as (port4, port6):
        status, _ = via(port4, "/xff")
        assert status == 200
        xff = echo_app.calls.wait(1)[-1]["scope"]
        status, cport = via(port4, "/fwd")
        assert status == 200
        fwd = echo_app.calls.wait(2)[-1]["scope"]
        status, cport6 = via(port6, "/fwd", host="::1")
        assert status == 200
        fwd6 = echo_app.calls.wait(3)[-1]["scope"]
    # X-Forwarded-For: nginx's $remote_addr (port unknown: 0), scheme from X-Forwarded-Proto
    assert (xff["client"], xff["scheme"]) == (("127.0.0.1", 0), "http")
    assert dict(xff["headers"])[b"x-forwarded-for"] == b"127.0.0.1"
    # Forwarded: the exact address and port nginx saw
    assert (fwd["client"], fwd["scheme"]) == (("127.0.0.1", cport), "http")
    assert (fwd6["client"], fwd6["scheme"]) == (("::1", cport6), "http")


@pytest.mark.rule("skirr-proxy-nginx", "skirr-proxy-untrusted")
def test_behind_nginx_untrusted(serve, echo_app, tmp_path):
    """skirr not trusting the proxy: the app sees nginx's own connection."""
    with serve(echo_app, forwarded_allow_ips="10.0.0.1") as srv, \
            nginx(tmp_path, srv.port) as (port4, _):
        status, cport = via(port4, "/fwd", headers=[("X-Forwarded-For", "203.0.113.7")])
        assert status == 200
        scope = echo_app.calls.wait(1)[-1]["scope"]
    host, port = scope["client"]
    assert host == "127.0.0.1" and port not in (0, cport)
    assert scope["scheme"] == "http"
