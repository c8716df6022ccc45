"""Behind nginx (Debian's nginx-light, started here on loopback with its own config): a flood of
requests while skirr's workers roll on SIGHUP gets zero 5xx, over TCP and over a Unix socket,
with keep-alive upstream connections (issue 12 §6)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest

try:
    from . import _proc
    from .test_workers import Load, _serving_pids, _wait_for
except ImportError:
    import _proc
    from test_workers import Load, _serving_pids, _wait_for

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

CONF = """
{user}
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
daemon off;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    upstream skirr {{ server {upstream}; keepalive 16; keepalive_timeout 4s; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://skirr;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_next_upstream error timeout;
        }}
    }}
}}
"""


@pytest.mark.rule("skirr-nginx-roll")
@pytest.mark.parametrize("kind", ["tcp", "uds"])
def test_sighup_roll_behind_nginx_has_no_5xx(tmp_path, kind):
    if not os.path.exists(NGINX):
        pytest.fail("nginx-light is not installed (.ci/run installs it)")
    version = tmp_path / "version"
    version.write_text("v1")
    if kind == "tcp":
        skirr_port = _proc.free_port()
        addr, upstream, bind = skirr_port, f"127.0.0.1:{skirr_port}", ["--port", str(skirr_port)]
    else:
        path = str(tmp_path / "skirr.sock")
        addr, upstream, bind = path, f"unix:{path}", ["--uds", path]
    port = _proc.free_port()
    (tmp_path / "nginx.conf").write_text(CONF.format(
        tmp=tmp_path, upstream=upstream, port=port,
        # As root, nginx's workers would run as nobody and not reach pytest's private tmp dir.
        user="user root;" if os.geteuid() == 0 else ""))
    with _proc.Skirr(["workers_app:app", "--workers", "2", *bind], tmp_path,
                     env={"SKIRR_TEST_VERSION_FILE": str(version)}) as proc:
        proc.wait_accepting(addr)
        if kind == "tcp":
            _serving_pids(addr, 2)
        nginx = subprocess.Popen([NGINX, "-c", str(tmp_path / "nginx.conf"), "-p", str(tmp_path)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_for(lambda: _proc.accepts(port), 10, "nginx accepts")
            with Load(port, new=2, keep=2) as load:
                time.sleep(0.5)
                version.write_text("v2")
                proc.proc.send_signal(signal.SIGHUP)
                _wait_for(lambda: proc.stderr.count("stopped (exit status 0)") >= 2, 30,
                          "the roll", proc)
                time.sleep(0.5)
        finally:
            nginx.send_signal(signal.SIGQUIT)
            try:
                nginx.wait(10)
            except subprocess.TimeoutExpired:
                nginx.kill()
                nginx.wait(5)
        # Load records any status other than 200 (a 502/504 from nginx) as a failure.
        assert load.failures == [], load.failures
        assert load.answers[-1][2] == "v2" and load.answers[0][2] == "v1"
        assert proc.stop() == 0
