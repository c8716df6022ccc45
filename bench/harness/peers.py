"""The servers measured: how each is installed, started on a loopback port and stopped.

Owns: the server table (skirr, the peers uvicorn with httptools or h11, granian, hypercorn,
peregrine-server, weft-server, gunicorn with uvicorn-worker, and the limits: the C responder in
limit_http.c and nginx; for the TLS rows (issue 32) skirr, uvicorn, granian, hypercorn,
peregrine-server and nginx each serving TLS itself with the run's test certificate
(env.tls_files()); for the HTTP/2 rows (issue 33) skirr (`--http auto`), hypercorn, granian,
peregrine-server and nginx serving h2c with prior knowledge and h2 over TLS (ALPN); for the
WebSocket rows skirr, uvicorn with websockets or wsproto, granian
and peregrine-server), each one's command line, the peers' venv (bench/.venv-peers, made from the
skirr venv's base interpreter, one peers.txt group at a time, the app's dependencies pinned to the
skirr venv's versions), building the C programs (the limit, the WebSocket load generator
ws_load.c), and `Server`: one server process in its own process
group, pinned to the server CPU, optionally under a tracer, its log in a file.

Never: sends the workload's requests or times anything (workloads.py and measure.py do); a peer
that fails to install is recorded with its reason, never fatal; a server is never left running
(stop() kills its whole process group).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, NamedTuple

from .env import (APPS, BENCH, BUILD, PEERS_FILE, PEERS_VENV, SERVER_CPU, SKIRR_VENV, base_python,
                  log, tls_files, tool_path, venv_python)
from .workloads import ALL_WORKLOADS, BIG, FILE_1M_PATH, JSON_BODY, WORKLOADS, WS_WORKLOADS

# ----------------------------------------------------------------------------------------------
# Installing: a separate venv from the same base interpreter, app dependencies pinned to the skirr
# venv's


def read_peers_file():
    peers = {}
    for line in PEERS_FILE.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, reqs = line.partition(":")
            peers[name.strip()] = reqs.split()
    return peers


def ensure_peers(groups, reinstall=False):
    """Install each requirement group separately; a failure is recorded, never fatal."""
    state_file = PEERS_VENV / "bench-state.json"
    freeze = subprocess.run([venv_python(SKIRR_VENV), "-m", "pip", "freeze"],
                            capture_output=True, text=True).stdout
    constraints = "\n".join(l for l in freeze.splitlines()
                            if l and not l.lower().startswith(("skirr", "-e", "#")))
    base = base_python()
    base_key = hashlib.sha256((base + "\n" + constraints).encode()).hexdigest()
    state = {}
    if state_file.exists():
        state = json.loads(state_file.read_text())
    if state.get("base_key") != base_key or not (PEERS_VENV / "bin" / "python").exists():
        log(f"creating {PEERS_VENV} from {base}")
        shutil.rmtree(PEERS_VENV, ignore_errors=True)
        subprocess.run([base, "-m", "venv", str(PEERS_VENV)], check=True)
        state = {"base_key": base_key, "groups": {}}
    cfile = PEERS_VENV / "constraints.txt"
    cfile.write_text(constraints + "\n")
    pip = [venv_python(PEERS_VENV), "-m", "pip", "install", "-q", "-c", str(cfile)]
    if "app-deps" not in state["groups"]:
        p = subprocess.run(pip + ["fastapi", "pydantic", "uvloop"], capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit("bench: could not install the app's dependencies into the peers' venv:\n"
                             + p.stderr[-2000:])
        state["groups"]["app-deps"] = {"reqs": [], "ok": True, "error": ""}
    specs = read_peers_file()
    for group in groups:
        reqs = specs[group]
        have = state["groups"].get(group)
        if have and have["reqs"] == reqs and (have["ok"] or not reinstall):
            continue
        log(f"installing peer group {group}: {' '.join(reqs)}")
        p = subprocess.run(pip + reqs, capture_output=True, text=True)
        err = "\n".join(l for l in p.stderr.splitlines() if not l.startswith("WARNING: Location"))
        state["groups"][group] = {"reqs": reqs, "ok": p.returncode == 0,
                                  "error": "" if p.returncode == 0 else err[-1500:]}
        state_file.write_text(json.dumps(state, indent=1))
    state_file.write_text(json.dumps(state, indent=1))
    return state["groups"]


def peer_groups(names):
    """The peers.txt groups the named servers need, sorted."""
    return sorted({SERVERS[s].group for s in names if SERVERS[s].group})


def pip_versions(python):
    out = subprocess.run([python, "-m", "pip", "list", "--format", "json"],
                         capture_output=True, text=True).stdout
    try:
        return {d["name"].lower(): d["version"] for d in json.loads(out)}
    except ValueError:
        return {}


def build_c(name, flags=("-O2", "-Wall", "-Wextra")):
    """bench/<name>.c compiled into bench/build/<name> when the source is newer; the path."""
    BUILD.mkdir(parents=True, exist_ok=True)
    exe = BUILD / name
    src = BENCH / f"{name}.c"
    newest = max(f.stat().st_mtime for f in [src, *BENCH.glob("*.h")])  # its shared headers
    if not exe.exists() or exe.stat().st_mtime < newest:
        cc = os.environ.get("CC", "cc")
        subprocess.run([cc, *flags, "-o", str(exe), str(src)], check=True)
    return exe


def build_limit():
    return build_c("limit_http")


def build_ws_load():
    """The WebSocket load generator (bench/ws_load.c), warnings as errors as skirr's own C."""
    return build_c("ws_load", ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"))


def build_scale_client():
    """The scale rows' connection holder (bench/scale_client.c), warnings as errors."""
    return build_c("scale_client", ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"))


def build_fanout_client():
    """The fan-out rows' subscribers and publisher (bench/fanout_client.c), warnings as errors."""
    return build_c("fanout_client", ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"))


# ----------------------------------------------------------------------------------------------
# Command lines: each builder takes (app "module:attr" in bench/apps, port, a private temporary
# folder the server may write into) and returns the argv


NGINX_CONF = """\
worker_processes 1;
daemon off;
user root;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    sendfile on;
    keepalive_requests 100000000;
    keepalive_timeout 75s;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port}{ssl} backlog=4096;{tls}
        location = /json {{ default_type application/json; return 200 '{json}'; }}
        location = /64k {{ default_type application/octet-stream; alias {tmp}/64k.bin; }}
        location = /file_1m {{ default_type application/octet-stream; alias {file_1m}; }}
        location / {{ default_type text/plain; return 200 'Hello, world!'; }}
    }}
}}
"""


def skirr_argv(app, port, tmp):
    # --ws auto is the default, spelled out for the WebSocket rows.
    return [venv_python(SKIRR_VENV), "-m", "skirr", app, "--app-dir", str(APPS), "--loop", "uvloop",
            "--lifespan", "off", "--no-access-log", "--log-level", "warning", "--ws", "auto",
            "--host", "127.0.0.1", "--port", str(port)]


def skirr_access_argv(app, port, tmp):
    """skirr with its access log on (the default line, skirr.access at INFO) to its log file."""
    argv = [a for a in skirr_argv(app, port, tmp) if a != "--no-access-log"]
    argv[argv.index("--log-level") + 1] = "info"
    return argv


METRICS_PORT_FILE = "metrics-port"  # in a skirr-metrics server's tmp folder: its metrics port


def skirr_metrics_argv(app, port, tmp):
    """skirr with --metrics-port on a free loopback port (written to tmp/metrics-port)."""
    mport = free_port()
    (Path(tmp) / METRICS_PORT_FILE).write_text(str(mport))
    return skirr_argv(app, port, tmp) + ["--metrics-port", str(mport)]


def uvicorn_argv(http, access_log=False, ws=None):
    """uvicorn's command line; `ws`: its --ws (websockets, wsproto), else its default (auto)."""
    def argv(app, port, tmp):
        out = [venv_python(PEERS_VENV), "-m", "uvicorn", app, "--app-dir", str(APPS), "--loop",
               "uvloop", "--http", http, "--lifespan", "off", "--no-access-log", "--log-level",
               "warning", "--host", "127.0.0.1", "--port", str(port)]
        if ws:
            out += ["--ws", ws]
        if access_log:  # its access log on (uvicorn.access at INFO), to the server's log file
            out.remove("--no-access-log")
            out[out.index("--log-level") + 1] = "info"
        return out
    return argv


def granian_argv(app, port, tmp):
    # asginl = the ASGI interface without lifespan; one worker, one runtime thread. WebSockets on
    # only for the WebSocket rows' app (the HTTP rows are measured with --no-ws, as before).
    ws = "--ws" if app.partition(":")[0] == WS_APP_MODULE else "--no-ws"
    return [venv_python(PEERS_VENV), "-m", "granian", "--interface", "asginl", "--loop", "uvloop",
            "--workers", "1", "--runtime-threads", "1", "--blocking-threads", "1", "--http", "1",
            ws, "--no-access-log", "--log-level", "warning", "--working-dir", str(APPS),
            "--host", "127.0.0.1", "--port", str(port), app]


def hypercorn_argv(app, port, tmp):
    return [venv_python(PEERS_VENV), "-m", "hypercorn", "--worker-class", "uvloop", "--workers", "1",
            "--log-level", "warning", "--bind", f"127.0.0.1:{port}", app]


def peregrine_argv(app, port, tmp):
    return [venv_python(PEERS_VENV), "-m", "peregrine", "--workers", "1", "--no-lifespan",
            "--no-http2", "--log-level", "warning", "--python-path", str(APPS), "--host",
            "127.0.0.1", "--port", str(port), app]


def weft_argv(app, port, tmp):
    return [venv_python(PEERS_VENV), "-m", "weft", app, "--workers", "1", "--no-lifespan",
            "--app-dir", str(APPS), "--log-level", "warning", "--host", "127.0.0.1", "--port",
            str(port)]


def gunicorn_argv(app, port, tmp):
    return [venv_python(PEERS_VENV), "-m", "gunicorn", "--workers", "1", "--worker-class",
            "uvicorn_worker.UvicornWorker", "--log-level", "warning", "--chdir", str(APPS),
            "--bind", f"127.0.0.1:{port}", app]


def with_workers(argv_of, n):
    """The command line of `argv_of` with `n` worker processes: its "--workers 1" replaced, or
    "--workers n" added (every server here spells it so; gunicorn too)."""
    def argv(app, port, tmp):
        out = argv_of(app, port, tmp)
        if "--workers" in out:
            i = out.index("--workers")
            return out[:i] + ["--workers", str(n)] + out[i + 2:]
        return out + ["--workers", str(n)]
    return argv


def limit_argv(app, port, tmp):
    return [str(BUILD / "limit_http"), str(port)]


def nginx_argv(app, port, tmp):
    tmp = Path(tmp)
    (tmp / "64k.bin").write_bytes(BIG)
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp, port=port, json=JSON_BODY.decode(),
                                      file_1m=FILE_1M_PATH, ssl="", tls=""))
    return [tool_path("nginx"), "-c", str(conf), "-e", str(tmp / "error.log")]


# The scale rows (issue 37): nginx as above with room for 50,000 connections (worker_connections
# is 8,192 in the other rows) and its keep-alive timeout raised as every server's is there
# (SCALE_FLAGS).
NGINX_SCALE = {"worker_connections 8192;": "worker_connections 65536;",
               "keepalive_timeout 75s;": "keepalive_timeout 3600s;",
               "daemon off;": "daemon off;\nworker_rlimit_nofile 131072;"}


def nginx_scale_argv(app, port, tmp):
    argv = nginx_argv(app, port, tmp)
    conf = Path(tmp) / "nginx.conf"
    text = conf.read_text()
    for old, new in NGINX_SCALE.items():
        text = text.replace(old, new)
    conf.write_text(text)
    return argv


# ----------------------------------------------------------------------------------------------
# The TLS rows (issue 32): each server with its own TLS on the run's test certificate
# (env.tls_files(): ECDSA P-256, made by harness/tls.py). Protocols and cipher suites are each
# server's defaults except nginx's, which is set to skirr's defaults (the reference): TLS 1.2 and
# 1.3, forward-secret AEAD suites for TLS 1.2, skirr's TLS 1.3 suites in its order (AES-128-GCM
# first), server order, one session ticket per full handshake, no session cache (nginx's
# default). What each row negotiated is recorded per run.

# nginx's TLS 1.2 list: skirr's default, DEFAULT_CIPHERS in src/ext/sk_tlsctx.c (forward-secret
# AEAD only; the DHE ones are never chosen with the ECDSA certificate). TLS 1.3: TLS13_SUITES and
# the one ticket of the same file, through OpenSSL's configuration commands (nginx's
# ssl_conf_command): with OpenSSL's defaults nginx would encrypt with AES-256-GCM and send two
# tickets, and the TLS cost compared would not be the same work.
NGINX_TLS12_CIPHERS = ("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
                       "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
                       "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"
                       "DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:"
                       "DHE-RSA-CHACHA20-POLY1305")
NGINX_TLS = """
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_ciphers {ciphers};
        ssl_prefer_server_ciphers on;
        ssl_conf_command Ciphersuites {suites};
        ssl_conf_command NumTickets 1;
        ssl_session_tickets on;"""
NGINX_TLS13_SUITES = ("TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                      "TLS_CHACHA20_POLY1305_SHA256")


def nginx_tls_argv(app, port, tmp):
    return _nginx_tls(tmp, port, " ssl")


def _nginx_tls(tmp, port, listen):
    key, cert = tls_files()
    tmp = Path(tmp)
    (tmp / "64k.bin").write_bytes(BIG)
    conf = tmp / "nginx.conf"
    tls = NGINX_TLS.format(cert=cert, key=key, ciphers=NGINX_TLS12_CIPHERS,
                           suites=NGINX_TLS13_SUITES)
    conf.write_text(NGINX_CONF.format(tmp=tmp, port=port, json=JSON_BODY.decode(),
                                      file_1m=FILE_1M_PATH, ssl=listen, tls=tls))
    return [tool_path("nginx"), "-c", str(conf), "-e", str(tmp / "error.log")]


# ----------------------------------------------------------------------------------------------
# The HTTP/2 rows (issue 33): h2c with prior knowledge (RFC 9113 §3.3) on a cleartext port and h2
# over TLS chosen by ALPN (§3.2), each server's own HTTP/2 with its defaults (concurrent streams:
# skirr 100, hypercorn 100, granian 200, nginx 128, all above the rows' 10 a connection; windows
# as each sets them: h2load advertises 1 GiB stream and connection windows, so no row waits on
# the client's window). nginx 1.22 (Debian's nginx-light, built --with-http_v2_module) takes
# `http2` on the listen socket: alone it is h2c with prior knowledge only, with `ssl` it offers
# h2 by ALPN.


def skirr_h2_argv(app, port, tmp):
    """skirr with HTTP/2 (`--http auto`, the default, spelled out: a cleartext connection that
    starts with the client preface is HTTP/2, ALPN offers h2 on TLS)."""
    return skirr_argv(app, port, tmp) + ["--http", "auto"]


def with_args(argv_of, *extra):
    """The command line of `argv_of` with `extra` appended."""
    def argv(app, port, tmp):
        return argv_of(app, port, tmp) + list(extra)
    return argv


def with_option(argv_of, flag, value=None):
    """The command line of `argv_of` with `flag`'s value replaced by `value`, or `flag` (and its
    value) removed when `value` is None."""
    def argv(app, port, tmp):
        out = argv_of(app, port, tmp)
        i = out.index(flag)
        if value is None:
            return out[:i] + out[i + (1 if flag.startswith("--no-") else 2):]
        return out[:i + 1] + [value] + out[i + 2:]
    return argv


def nginx_h2c_argv(app, port, tmp):
    tmp = Path(tmp)
    (tmp / "64k.bin").write_bytes(BIG)
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp, port=port, json=JSON_BODY.decode(),
                                      file_1m=FILE_1M_PATH, ssl=" http2", tls=""))
    return [tool_path("nginx"), "-c", str(conf), "-e", str(tmp / "error.log")]


def nginx_h2_argv(app, port, tmp):
    return _nginx_tls(tmp, port, " ssl http2")


# The idle-connection rows only: each server's keep-alive timeout raised to 120 s where its default
# (5 s: skirr, uvicorn, hypercorn) could close connections opened first before the last one is
# (opening 500 TLS connections takes seconds on a loaded machine); memory is not what it changes.
IDLE_KEEPALIVE = {
    "skirr": ["--timeout-keep-alive", "120"], "skirr-tls": ["--timeout-keep-alive", "120"],
    "uvicorn-tls": ["--timeout-keep-alive", "120"], "hypercorn-tls": ["--keep-alive", "120"],
}


# The scale rows (issue 37): every server's idle keep-alive timeout raised to an hour (longer than
# a row; granian has none for HTTP/1.1; nginx's is in NGINX_SCALE), its WebSocket keepalive pings
# off (0 = none for skirr, uvicorn's wsproto and peregrine; uvicorn's websockets takes no "none"
# from the command line and 0 there means a ping at every turn, so a day: no ping in a row; granian
# sends none), and the connection caps raised above the row's count: peregrine's per worker
# (4,096), granian's --backpressure (concurrent connections per worker; by default its backlog,
# 1,024, so it would not answer the 1,025th).
# Memory is not what the timeouts change: no timer fires during a row.
SCALE_FLAGS = {
    "skirr": {"http": ["--timeout-keep-alive", "3600"], "ws": ["--ws-ping-interval", "0"]},
    "uvicorn-httptools": {"http": ["--timeout-keep-alive", "3600"]},
    "uvicorn-websockets": {"ws": ["--ws-ping-interval", "86400"]},
    "uvicorn-wsproto": {"ws": ["--ws-ping-interval", "0"]},
    "hypercorn": {"http": ["--keep-alive", "3600"]},
    "granian": {"http": ["--backpressure", "100000"], "ws": ["--backpressure", "100000"]},
    "peregrine": {"http": ["--keep-alive", "3600000", "--max-connections", "100000"],
                  "ws": ["--ws-ping-interval", "0", "--max-connections", "100000"]},
}


def with_tls(argv_of, key_flag, cert_flag, before_last=False):
    """The command line of `argv_of` with the test key and certificate given as `key_flag` and
    `cert_flag` (after the other options, or before the last argument: granian's app)."""
    def argv(app, port, tmp):
        key, cert = tls_files()
        out = argv_of(app, port, tmp)
        flags = [key_flag, key, cert_flag, cert]
        return out[:-1] + flags + out[-1:] if before_last else out + flags
    return argv


WS_APP_MODULE = WS_WORKLOADS["ws_echo_64"]["app"].partition(":")[0]
# What the HTTP/2 rows serve (every server, nginx included, answers these three).
H2_WORKLOADS = {"raw_get", "get_64k", "fastapi_json"}


class Peer(NamedTuple):
    argv: Callable  # (app, port, tmp) -> argv
    group: str | None  # its peers.txt group; None: nothing to install
    kind: str  # "skirr", "peer" or "limit"
    serves: set  # the workloads it can serve
    workers: int = 0  # worker processes under a manager (the workers row); 0: one process, pinned
    tls: bool = False  # serves TLS (the TLS rows): checked and loaded over https
    h2: str | None = None  # the HTTP/2 rows: "h2c" (prior knowledge) or "h2" (TLS, ALPN h2)


SERVERS = {
    "skirr": Peer(skirr_argv, None, "skirr", ALL_WORKLOADS | set(WS_WORKLOADS)),
    # The cost rows (issue 13): a feature on against off, the server's output to its log file.
    "skirr-access-log": Peer(skirr_access_argv, None, "skirr", ALL_WORKLOADS),
    "skirr-metrics": Peer(skirr_metrics_argv, None, "skirr", ALL_WORKLOADS),
    "uvicorn-access-log": Peer(uvicorn_argv("httptools", access_log=True), "uvicorn", "peer",
                               ALL_WORKLOADS),
    "uvicorn-httptools": Peer(uvicorn_argv("httptools"), "uvicorn", "peer", ALL_WORKLOADS),
    "uvicorn-h11": Peer(uvicorn_argv("h11"), "uvicorn", "peer", ALL_WORKLOADS),
    "granian": Peer(granian_argv, "granian", "peer", ALL_WORKLOADS | set(WS_WORKLOADS)),
    "hypercorn": Peer(hypercorn_argv, "hypercorn", "peer", ALL_WORKLOADS),
    "peregrine": Peer(peregrine_argv, "peregrine", "peer", ALL_WORKLOADS | set(WS_WORKLOADS)),
    "weft": Peer(weft_argv, "weft", "peer", ALL_WORKLOADS),
    "gunicorn-uvicorn": Peer(gunicorn_argv, "gunicorn-uvicorn", "peer", ALL_WORKLOADS),
    # The WebSocket rows' uvicorn: httptools for the handshake, each WebSocket implementation.
    "uvicorn-websockets": Peer(uvicorn_argv("httptools", ws="websockets"), "uvicorn-ws", "peer",
                               set(WS_WORKLOADS)),
    "uvicorn-wsproto": Peer(uvicorn_argv("httptools", ws="wsproto"), "uvicorn-ws", "peer",
                            set(WS_WORKLOADS)),
    "limit-c": Peer(limit_argv, None, "limit", set(WORKLOADS) - {"file_1m", "fastapi_cpu"}),
    "nginx": Peer(nginx_argv, None, "limit",
                  {"raw_get", "get_64k", "fastapi_json", "pipelined_get", "file_1m"}),
    "nginx-scale": Peer(nginx_scale_argv, None, "limit",
                        {"raw_get", "fastapi_json", "raw_get_close", "fastapi_json_close"}),
    # The TLS rows (issue 32): uvicorn and hypercorn through CPython's ssl, granian with rustls,
    # peregrine with BoringSSL, nginx (the reference) and skirr with OpenSSL.
    "skirr-tls": Peer(with_tls(skirr_argv, "--ssl-keyfile", "--ssl-certfile"), None, "skirr",
                      ALL_WORKLOADS, tls=True),
    "uvicorn-tls": Peer(with_tls(uvicorn_argv("httptools"), "--ssl-keyfile", "--ssl-certfile"),
                        "uvicorn", "peer", ALL_WORKLOADS, tls=True),
    "granian-tls": Peer(with_tls(granian_argv, "--ssl-keyfile", "--ssl-certificate", True),
                        "granian", "peer", ALL_WORKLOADS, tls=True),
    "hypercorn-tls": Peer(with_tls(hypercorn_argv, "--keyfile", "--certfile", True), "hypercorn",
                          "peer", ALL_WORKLOADS, tls=True),
    "peregrine-tls": Peer(with_tls(peregrine_argv, "--tls-key", "--tls-cert", True), "peregrine",
                          "peer", ALL_WORKLOADS, tls=True),
    "nginx-tls": Peer(nginx_tls_argv, None, "limit",
                      {"raw_get", "get_64k", "fastapi_json", "pipelined_get", "file_1m"},
                      tls=True),
    # The HTTP/2 rows (issue 33): h2c with prior knowledge, and h2 over TLS (ALPN) on the run's
    # test certificate. Every server in the mode skirr's `--http auto` is: HTTP/1.1 and HTTP/2 on
    # one port (the preface on cleartext, ALPN on TLS): granian with `--http auto` (its HTTP rows
    # keep `--http 1`), peregrine without its `--no-http2`, hypercorn as it is.
    "skirr-h2c": Peer(skirr_h2_argv, None, "skirr", H2_WORKLOADS, h2="h2c"),
    "skirr-h2": Peer(with_tls(skirr_h2_argv, "--ssl-keyfile", "--ssl-certfile"), None, "skirr",
                     H2_WORKLOADS, tls=True, h2="h2"),
    "hypercorn-h2c": Peer(hypercorn_argv, "hypercorn", "peer", H2_WORKLOADS, h2="h2c"),
    "hypercorn-h2": Peer(with_tls(hypercorn_argv, "--keyfile", "--certfile", True), "hypercorn",
                         "peer", H2_WORKLOADS, tls=True, h2="h2"),
    "granian-h2c": Peer(with_option(granian_argv, "--http", "auto"), "granian", "peer", H2_WORKLOADS,
                        h2="h2c"),
    "granian-h2": Peer(with_tls(with_option(granian_argv, "--http", "auto"), "--ssl-keyfile",
                                "--ssl-certificate", True), "granian", "peer", H2_WORKLOADS,
                       tls=True, h2="h2"),
    "peregrine-h2c": Peer(with_option(peregrine_argv, "--no-http2"), "peregrine", "peer",
                          H2_WORKLOADS, h2="h2c"),
    "peregrine-h2": Peer(with_tls(with_option(peregrine_argv, "--no-http2"), "--tls-key",
                                  "--tls-cert", True), "peregrine", "peer", H2_WORKLOADS,
                         tls=True, h2="h2"),
    "nginx-h2c": Peer(nginx_h2c_argv, None, "limit", H2_WORKLOADS, h2="h2c"),
    "nginx-h2": Peer(nginx_h2_argv, None, "limit", H2_WORKLOADS, tls=True, h2="h2"),
    # The workers row: a manager and its worker processes, unpinned (the load generator shares the
    # CPUs). skirr-w1 is plain skirr (one process, no supervisor) in the same setup, the baseline
    # that CPU per request must not grow from.
    "skirr-w1": Peer(skirr_argv, None, "skirr", ALL_WORKLOADS, 1),
    "skirr-w2": Peer(with_workers(skirr_argv, 2), None, "skirr", ALL_WORKLOADS, 2),
    "uvicorn-w2": Peer(with_workers(uvicorn_argv("httptools"), 2), "uvicorn", "peer",
                       ALL_WORKLOADS, 2),
    "granian-w2": Peer(with_workers(granian_argv, 2), "granian", "peer", ALL_WORKLOADS, 2),
    "gunicorn-uvicorn-w2": Peer(with_workers(gunicorn_argv, 2), "gunicorn-uvicorn", "peer",
                                ALL_WORKLOADS, 2),
    # The threads profile (issue 34, a free-threaded Python): 2 event loops, one per thread, in one
    # worker process (skirr's --worker-kind thread, under its supervisor: 2 processes) and
    # granian's 2 workers, which a free-threaded build of granian runs as threads of its one
    # process. `workers` 1: unpinned like the workers row, without waiting for worker processes.
    "skirr-t2": Peer(with_args(with_workers(skirr_argv, 2), "--worker-kind", "thread"), None,
                     "skirr", ALL_WORKLOADS, 1),
    "granian-t2": Peer(with_workers(granian_argv, 2), "granian", "peer", ALL_WORKLOADS, 1),
}


# ----------------------------------------------------------------------------------------------
# Running one


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port):
    hexport = f":{port:04X}"
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            for line in Path(f).read_text().splitlines()[1:]:
                parts = line.split()
                if parts[1].endswith(hexport) and parts[3] == "0A":
                    return True
        except OSError:
            pass
    return False


def require_listening(port):
    """A readiness check that sends nothing (so a traced server's first connection is the
    measured one): ConnectionRefusedError until the port listens."""
    if not listening(port):
        raise ConnectionRefusedError


def proc_tree(root):
    """root and all its descendants (pids)."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


class Server:
    """One server serving `app` on a free loopback port, in its own process group, its output in
    logdir/<tag>.log. `wrap` goes before the command (a tracer: strace, valgrind); `pin` puts the
    server (inside the tracer) on the server CPU with taskset (a string: on those CPUs, e.g.
    "0,1"); `pythonpath`: folders searched before the apps' and the venv's (an overlay of
    packages); `extra`: arguments appended to the server's command line. A context manager: leaving the `with` block stops it."""

    def __init__(self, name, app, logdir, tag, wrap=(), pin=True, pythonpath=(), extra=()):
        self.name, self.app = name, app
        self.traced = bool(wrap)
        self.port = free_port()
        self.tmp = tempfile.mkdtemp(prefix=f"bench-{name}-")
        argv = SERVERS[name].argv(app, self.port, self.tmp) + list(extra)
        cpus = pin if isinstance(pin, str) else SERVER_CPU if pin else None
        self.argv = list(wrap) + (["taskset", "-c", cpus] if cpus else []) + argv
        self.logpath = Path(logdir) / f"{tag}.log"
        self.logpath.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([*map(str, pythonpath), str(APPS)]))
        env.pop("VIRTUAL_ENV", None)
        self._log = open(self.logpath, "wb")
        self.proc = subprocess.Popen(self.argv, cwd=APPS, env=env, stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def wait_ready(self, check, timeout=30.0):
        """Calls check(port) until it returns; RuntimeError with the log's tail if the server
        exits first or `timeout` seconds pass."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                check(self.port)
                return
            except ConnectionRefusedError:
                last = "connection refused"
            except Exception as exc:  # noqa: BLE001
                last = f"{type(exc).__name__}: {exc}"
                if "refused" not in str(exc).lower():
                    time.sleep(0.2)
            time.sleep(0.05)
        raise RuntimeError(f"not ready after {timeout:.0f}s ({last}): {self.log_tail()}")

    def pids(self):
        return proc_tree(self.proc.pid)

    def wait_processes(self, count, timeout=30.0, settle=1.0):
        """Waits until the process tree has at least `count` processes (a manager and its
        workers) and has not changed for `settle` seconds; returns the pids. RuntimeError when
        that does not happen within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        last, since = None, time.monotonic()
        while time.monotonic() < deadline:
            pids = sorted(self.pids())
            if pids != last:
                last, since = pids, time.monotonic()
            elif len(pids) >= count and time.monotonic() - since >= settle:
                return pids
            time.sleep(0.1)
        raise RuntimeError(f"expected {count} processes, have {len(last or [])} after "
                           f"{timeout:.0f}s: {self.log_tail()}")

    def log_size(self):
        """Bytes the server's log (its stdout and stderr) holds so far."""
        if not self._log.closed:
            self._log.flush()
        return self.logpath.stat().st_size

    def log_since(self, offset):
        """What the server logged after `offset` bytes (log_size()), decoded; "" when nothing."""
        if not self._log.closed:
            self._log.flush()
        with open(self.logpath, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def log_tail(self, n=1200):
        try:
            if not self._log.closed:
                self._log.flush()
            data = self.logpath.read_bytes()
        except OSError:
            return ""
        return data[-n:].decode(errors="replace").strip()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        """SIGINT, then SIGTERM, then SIGKILL until it exits. Untraced: SIGINT to the main process
        (a master stops its workers itself) with 8 s to exit, then the whole group, 4 s each.
        Traced: every signal to the whole group (the tracer and its server), 60 s after SIGINT
        (valgrind writes its dump), then 8 s each."""
        if self.traced:
            steps = ((signal.SIGINT, 60, os.killpg), (signal.SIGTERM, 8, os.killpg),
                     (signal.SIGKILL, 8, os.killpg))
        else:
            steps = ((signal.SIGINT, 8, os.kill), (signal.SIGTERM, 4, os.killpg),
                     (signal.SIGKILL, 4, os.killpg))
        if self.proc.poll() is None:
            for sig, wait, kill in steps:
                try:
                    kill(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        # Whatever of its group outlived it (a worker), by the group we created.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
