"""docs/deployment.md, run as written (issue 36 item 10).

Each snippet is read from the document and run with only its addresses, paths and the `skirr`
executable substituted (each substituted text must occur exactly once, so a changed document
fails here instead of being half-substituted):

- the nginx server block, in a real nginx (Debian's nginx-light, loopback ports) in front of
  skirr started by the document's command lines, over the TCP and the Unix-socket upstream:
  plain HTTP and a WebSocket session, the client nginx saw as the application's client;
- the systemd units: the socket bound and listening as skirr.socket says (TCP and the commented
  Unix-socket form), passed as systemd passes it (descriptor 3, LISTEN_PID, LISTEN_FDS=1) to the
  service's ExecStart run in its WorkingDirectory with its Environment; ExecReload rolls the
  workers, KillSignal ends the service within TimeoutStopSec, and a connection made while the
  service is down waits in the socket's backlog for the next start;
- the Kubernetes container's command (its --host made 127.0.0.1: loopback only here) with the
  readiness and liveness probes' paths and ports against its --health-check-path and --port, and
  its shutdown inside terminationGracePeriodSeconds.
"""
from __future__ import annotations

import configparser
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

try:
    from . import _proc
    from ._ws import KEY, WS_CLOSE_1000, frame, upgrade
except ImportError:
    import _proc
    from _ws import KEY, WS_CLOSE_1000, frame, upgrade

pytestmark = _proc.each_loop

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "deployment.md"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
# The accept value of RFC 6455 §1.3's example key (_ws.KEY)
ACCEPT = b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="

# The documents' `main:app`: answers every HTTP request and every WebSocket message with what its
# scope says (type, client, scheme, header names, worker pid); supports lifespan.
MAIN_PY = '''
import json, os

def seen(scope):
    return json.dumps({"type": scope["type"], "client": scope.get("client"),
                       "scheme": scope["scheme"], "pid": os.getpid(),
                       "headers": sorted({k.decode("latin-1") for k, _ in scope["headers"]})})

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] == "websocket":
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            await send({"type": "websocket.send", "text": message["text"] + " " + seen(scope)})
    while (await receive()).get("more_body"):
        pass
    body = seen(scope).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})
'''


def doc() -> str:
    return DOC.read_text(encoding="utf-8")


def section(title: str) -> str:
    """The text of the `## title` section of docs/deployment.md."""
    text = doc()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def fenced(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.M | re.S)


def substitute(text: str, *pairs: tuple[str, str]) -> str:
    """text with each (old, new) replaced; each old must occur exactly once."""
    for old, new in pairs:
        assert text.count(old) == 1, f"docs/deployment.md: {old!r} occurs {text.count(old)} times"
        text = text.replace(old, new)
    return text


def app_dir(tmp_path: Path) -> Path:
    """A WorkingDirectory holding main.py (the documents' main:app)."""
    where = tmp_path / "srv-app"
    where.mkdir()
    (where / "main.py").write_text(MAIN_PY)
    return where


@contextlib.contextmanager
def short_dir():
    """A directory with a short path, for Unix sockets (108 bytes at most)."""
    where = tempfile.mkdtemp(prefix="sk-", dir="/tmp")
    try:
        yield Path(where)
    finally:
        shutil.rmtree(where, ignore_errors=True)


def skirr_argv(line: str, workers: str = "2") -> list[str]:
    """A documented `skirr ...` command line as argv, `$(nproc)` as `workers`."""
    argv = shlex.split(line.replace("$(nproc)", workers))
    assert argv[0] == "skirr", line
    return argv


def venv_skirr() -> str:
    """The `skirr` console script of the interpreter running the suite (what the documents'
    `skirr` and `/srv/app/.venv/bin/skirr` are)."""
    path = Path(sys.executable).parent / "skirr"
    assert path.is_file(), f"{path}: the skirr console script is not installed beside {sys.executable}"
    return str(path)


def get(addr: _proc.Address, target: str = "/") -> dict:
    r = _proc.request(addr, target=target)
    assert r.status == 200, (r.status, r.body)
    return json.loads(r.body)


# -- nginx ------------------------------------------------------------------------------------

# What the test adds around the document's block: its own files, in the foreground.
NGINX_HARNESS = """
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
{block}
}}
"""

UPGRADE_LINES = ("        proxy_set_header Upgrade $http_upgrade;",
                 "        proxy_set_header Connection $connection_upgrade;")


def nginx_doc() -> tuple[str, str, str]:
    """The section's nginx block (the one with the upstreams) and skirr's two command lines
    (for skirr_tcp, for skirr_unix)."""
    text = section("Behind nginx")
    (block,) = [b for b in fenced(text, "nginx") if "upstream skirr_tcp" in b]
    (commands,) = fenced(text, "sh")
    tcp, unix = [x for x in commands.splitlines() if x.strip()]
    assert "--uds" not in tcp and "--uds" in unix, commands
    return block, tcp, unix


@contextlib.contextmanager
def nginx(tmp_path: Path, block: str):
    if not os.path.exists(NGINX):
        pytest.fail("nginx is not installed (apt-get install nginx-light; .ci/run does)")
    port = _proc.free_port()
    block = substitute(block, ("listen 80;", f"listen 127.0.0.1:{port};"))
    conf = tmp_path / "nginx.conf"
    conf.write_text(NGINX_HARNESS.format(tmp=tmp_path, block=block))
    proc = subprocess.Popen([NGINX, "-p", str(tmp_path), "-c", str(conf), "-e",
                             str(tmp_path / "error.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not _proc.accepts(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                log = tmp_path / "error.log"
                pytest.fail(f"nginx did not start: {log.read_text() if log.exists() else ''}")
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def from_client(port: int) -> socket.socket:
    """A connection to nginx from 127.0.0.2 (an address nginx sees, not skirr's trusted peer)."""
    sock = socket.socket()
    sock.settimeout(_proc.IO_TIMEOUT)
    sock.bind(("127.0.0.2", 0))
    sock.connect(("127.0.0.1", port))
    return sock


def read_head(sock: socket.socket) -> tuple[bytes, dict[bytes, bytes], bytes]:
    """(status line, {lower-case name: value}, the bytes after the head)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a complete head: {data!r}"
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    status, *lines = head.split(b"\r\n")
    fields = {}
    for line in lines:
        name, value = line.split(b":", 1)
        fields[name.strip().lower()] = value.strip()
    return status, fields, rest


def read_frame(sock: socket.socket, buf: bytes) -> tuple[int, bytes, bytes]:
    """One unmasked server frame: (first byte, payload, what followed it)."""
    def need(n: int) -> None:
        nonlocal buf
        while len(buf) < n:
            chunk = sock.recv(65536)
            assert chunk, f"closed inside a frame: {buf!r}"
            buf += chunk
    need(2)
    b0, n = buf[0], buf[1] & 0x7F
    assert buf[1] & 0x80 == 0, "a server frame is never masked"
    at = 2
    if n == 126:
        need(4)
        n, at = int.from_bytes(buf[2:4], "big"), 4
    need(at + n)
    return b0, buf[at:at + n], buf[at + n:]


def via_nginx_http(port: int) -> tuple[int, dict]:
    """GET /scope through nginx with the client's own Forwarded: (status, what the app saw)."""
    with from_client(port) as sock:
        sock.sendall(b"GET /scope HTTP/1.1\r\nHost: example.test\r\n"
                     b"Forwarded: for=6.6.6.6;proto=https\r\nConnection: close\r\n\r\n")
        status, _, rest = read_head(sock)
        while chunk := sock.recv(65536):
            rest += chunk
    return int(status.split()[1]), json.loads(rest)


def via_nginx_websocket(port: int) -> tuple[bytes, dict[bytes, bytes], dict | None]:
    """A WebSocket session through nginx: handshake, one text message, Close 1000. Returns (the
    status line, the response's fields, what the app saw (None when no 101 came))."""
    with from_client(port) as sock:
        sock.sendall(upgrade(KEY, target="/chat"))
        status, fields, rest = read_head(sock)
        if not status.startswith(b"HTTP/1.1 101 "):
            return status, fields, None
        sock.sendall(frame(0x81, b"hello"))
        b0, payload, rest = read_frame(sock, rest)
        assert b0 == 0x81, (b0, payload)
        text = payload.decode()
        assert text.startswith("hello "), text
        sock.sendall(WS_CLOSE_1000)
        b0, payload, rest = read_frame(sock, rest)
        assert (b0, payload[:2]) == (0x88, b"\x03\xe8"), (b0, payload)
        return status, fields, json.loads(text[len("hello "):])


@pytest.mark.rule("skirr-deploy-nginx-doc")
@pytest.mark.parametrize("upstream", ["tcp", "unix", "unix-without-allow-unix"])
def test_nginx_block_as_documented(tmp_path, loop, upstream):
    """The document's block and command lines; over skirr_unix also without the
    `--forwarded-allow-ips unix:` the document says it needs: the client is then lost."""
    block, tcp_line, unix_line = nginx_doc()
    workdir = app_dir(tmp_path)
    with short_dir() as short:
        sock_path = str(short / "skirr.sock")
        skirr_port = _proc.free_port()
        block = substitute(block, ("server 127.0.0.1:8000;", f"server 127.0.0.1:{skirr_port};"),
                           ("server unix:/run/skirr/skirr.sock;", f"server unix:{sock_path};"))
        if upstream == "tcp":
            args, addr = skirr_argv(tcp_line)[1:] + ["--port", str(skirr_port)], skirr_port
        else:
            line = substitute(unix_line, ("/run/skirr/skirr.sock", sock_path))
            if upstream == "unix-without-allow-unix":
                line = substitute(line, (" --forwarded-allow-ips unix:", ""))
            args, addr = skirr_argv(line)[1:], sock_path
            block = substitute(block, ("proxy_pass http://skirr_tcp;", "proxy_pass http://skirr_unix;"))
        with _proc.Skirr([*args, "--loop", loop], tmp_path, cwd=workdir) as proc:
            proc.wait_accepting(addr)
            with nginx(tmp_path, block) as port:
                status, http_scope = via_nginx_http(port)
                ws_status, ws_fields, ws_scope = via_nginx_websocket(port)
            rc = proc.stop()
            assert rc == 0, proc.stderr
    assert status == 200
    assert ws_status == b"HTTP/1.1 101 Switching Protocols"
    assert (ws_fields[b"upgrade"].lower(), ws_fields[b"sec-websocket-accept"]) == (b"websocket", ACCEPT)
    assert (http_scope["type"], ws_scope["type"]) == ("http", "websocket")
    if upstream == "unix-without-allow-unix":
        # a Unix-socket peer has no address; untrusted, its proxy headers are not read
        assert (http_scope["client"], http_scope["scheme"]) == (None, "http")
        assert (ws_scope["client"], ws_scope["scheme"]) == (None, "ws")
    else:
        # X-Forwarded-For: nginx's $remote_addr (port unknown: 0); the scheme nginx's
        assert (http_scope["client"], http_scope["scheme"]) == (["127.0.0.2", 0], "http")
        assert (ws_scope["client"], ws_scope["scheme"]) == (["127.0.0.2", 0], "ws")
    # the client's own Forwarded never reaches the app (the block clears the other family)
    assert "forwarded" not in http_scope["headers"]
    assert {"x-forwarded-for", "x-forwarded-proto"} <= set(http_scope["headers"])


@pytest.mark.rule("skirr-deploy-nginx-doc")
def test_nginx_block_without_its_upgrade_lines_passes_no_websocket(tmp_path, loop):
    """What the two Upgrade/Connection lines do: without them nginx sends skirr a plain GET."""
    block, tcp_line, _ = nginx_doc()
    skirr_port = _proc.free_port()
    block = substitute(block, ("server 127.0.0.1:8000;", f"server 127.0.0.1:{skirr_port};"))
    block = "\n".join(x for x in block.splitlines() if not x.startswith(UPGRADE_LINES))
    with _proc.Skirr([*skirr_argv(tcp_line)[1:], "--port", str(skirr_port), "--loop", loop],
                     tmp_path, cwd=app_dir(tmp_path)) as proc:
        proc.wait_accepting(skirr_port)
        with nginx(tmp_path, block) as port:
            status, _, scope = via_nginx_websocket(port)
        assert proc.stop() == 0
    assert (status, scope) == (b"HTTP/1.1 200 OK", None)


@pytest.mark.rule("skirr-deploy-nginx-doc")
@pytest.mark.parametrize("ping", ["0.5", "0"])
def test_nginx_keeps_an_idle_websocket_that_skirr_pings(tmp_path, loop, ping):
    """The document: nginx closes a proxied connection silent for proxy_read_timeout, skirr's
    keepalive pings keep an idle WebSocket below it. Scaled: proxy_read_timeout 2s added to the
    block, --ws-ping-interval 0.5 (0: no pings, and nginx closes the session)."""
    block, tcp_line, _ = nginx_doc()
    skirr_port = _proc.free_port()
    block = substitute(block, ("server 127.0.0.1:8000;", f"server 127.0.0.1:{skirr_port};"),
                       ("proxy_http_version 1.1;", "proxy_http_version 1.1; proxy_read_timeout 2s;"))
    args = [*skirr_argv(tcp_line)[1:], "--port", str(skirr_port), "--loop", loop,
            "--ws-ping-interval", ping]
    with _proc.Skirr(args, tmp_path, cwd=app_dir(tmp_path)) as proc:
        proc.wait_accepting(skirr_port)
        with nginx(tmp_path, block) as port, from_client(port) as sock:
            sock.sendall(upgrade(KEY, target="/chat"))
            status, _, rest = read_head(sock)
            assert status == b"HTTP/1.1 101 Switching Protocols"
            # idle past proxy_read_timeout, answering each ping with a pong as every client
            # does (RFC 6455 §5.5.2); then one message
            pings, closed, end = 0, False, time.monotonic() + 3.5
            while not closed and time.monotonic() < end:
                sock.settimeout(max(0.01, end - time.monotonic()))
                try:
                    b0, payload, rest = read_frame(sock, rest)
                except TimeoutError:
                    break
                except (AssertionError, OSError):
                    closed = True
                    break
                assert b0 == 0x89, (b0, payload)
                pings += 1
                sock.sendall(frame(0x8A, payload))
            sock.settimeout(_proc.IO_TIMEOUT)
            echoed = None
            if not closed:
                with contextlib.suppress(OSError):
                    sock.sendall(frame(0x81, b"still"))
                with contextlib.suppress(AssertionError, OSError):
                    while True:
                        b0, payload, rest = read_frame(sock, rest)
                        if b0 == 0x89:
                            sock.sendall(frame(0x8A, payload))
                        else:
                            echoed = (b0, payload[:6])
                            break
        assert proc.stop() == 0
    if ping == "0":
        assert (pings, echoed) == (0, None)  # nginx closed the silent session
    else:
        assert pings >= 2 and echoed == (0x81, b"still ")  # pinged, alive after 3.5 s


# -- systemd ----------------------------------------------------------------------------------

def unit(name: str) -> tuple[configparser.ConfigParser, str]:
    """/etc/systemd/system/NAME as written in the document: (parsed, text)."""
    text = section("systemd with socket activation")
    m = re.search(rf"`/etc/systemd/system/{re.escape(name)}`:\s*\n\s*```ini\n(.*?)^```", text,
                  re.M | re.S)
    assert m, f"docs/deployment.md has no {name}"
    parser = configparser.ConfigParser(interpolation=None, comment_prefixes=("#", ";"))
    parser.optionxform = str  # systemd's keys are case-sensitive
    parser.read_string(m.group(1))
    return parser, m.group(1)


def systemd_start(sock: socket.socket, service: configparser.ConfigParser, workdir: Path,
                  tmp_path: Path, loop: str) -> _proc.Skirr:
    """The service started as systemd starts it: in WorkingDirectory with Environment, the socket
    on descriptor 3, LISTEN_PID its own pid and LISTEN_FDS=1, ExecStart exec'd in place."""
    svc = service["Service"]
    documented = svc["WorkingDirectory"]
    argv = shlex.split(svc["ExecStart"])
    assert argv[0] == f"{documented}/.venv/bin/skirr", argv
    argv[0] = venv_skirr()
    env = dict(x.split("=", 1) for x in shlex.split(svc["Environment"]))
    env["SKIRR_LOOP"] = loop  # each loop; the unit itself leaves --loop at auto
    script = (
        "import os, sys\n"
        f"os.dup2({sock.fileno()}, 3)\n"
        "os.environ['LISTEN_PID'] = str(os.getpid())\n"
        "os.environ['LISTEN_FDS'] = '1'\n"
        "os.execv(sys.argv[1], sys.argv[1:])\n"
    )
    return _proc.Skirr(argv, tmp_path, cwd=workdir, env=env, pass_fds=[sock.fileno()],
                       command=[sys.executable, "-c", script])


def wait_for(done, timeout: float, what: str, proc: _proc.Skirr) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}\n{proc.stderr}")
        time.sleep(0.05)


@pytest.mark.rule("skirr-deploy-systemd-doc")
@pytest.mark.parametrize("listen", ["tcp", "unix"])
def test_systemd_units_as_documented(tmp_path, loop, listen):
    sock_unit, sock_text = unit("skirr.socket")
    service, _ = unit("skirr.service")
    assert service["Unit"]["Requires"] == "skirr.socket"
    svc = service["Service"]
    backlog = int(sock_unit["Socket"]["Backlog"])
    workers = int(dict(x.split("=", 1) for x in shlex.split(svc["Environment"]))["WEB_CONCURRENCY"])
    workdir = app_dir(tmp_path)
    with short_dir() as short, contextlib.ExitStack() as stack:
        if listen == "tcp":
            host, port = sock_unit["Socket"]["ListenStream"].rsplit(":", 1)
            assert (host, port) == ("127.0.0.1", "8000")
            sock = stack.enter_context(socket.socket())
            sock.bind((host, 0))  # a free port for the document's 8000
            addr: _proc.Address = sock.getsockname()[1]
        else:
            m = re.search(r"^# or ListenStream=(/\S+) with SocketMode=(0\d+)$", sock_text, re.M)
            assert m, sock_text
            path = str(short / os.path.basename(m.group(1)))
            sock = stack.enter_context(socket.socket(socket.AF_UNIX))
            sock.bind(path)
            os.chmod(path, int(m.group(2), 8))
            addr = path
        sock.listen(backlog)
        for run in ("first", "second"):
            (tmp_path / run).mkdir()
        with systemd_start(sock, service, workdir, tmp_path / "first", loop) as proc:
            proc.wait_accepting(addr)
            assert f"for {workers} worker(s)" in proc.wait_stderr("Started supervisor [")
            wait_for(lambda: proc.stderr.count("Started worker [") >= workers, 30,
                     f"{workers} workers started", proc)
            pids = {get(addr)["pid"] for _ in range(3)}
            # ExecReload, $MAINPID being the service's (the supervisor's) pid
            reload = shlex.split(svc["ExecReload"].replace("$MAINPID", str(proc.proc.pid)))
            subprocess.run(reload, check=True, timeout=10)
            wait_for(lambda: proc.stderr.count("stopped (exit status 0)") >= workers, 60,
                     "ExecReload rolled every worker", proc)
            assert not pids & {get(addr)["pid"] for _ in range(3)}
            # KillSignal, within TimeoutStopSec
            assert proc.stop(getattr(signal, svc["KillSignal"]),
                             timeout=float(svc["TimeoutStopSec"])) == 0
        # The service is down, the socket is not: a connection waits in its backlog and the
        # next start answers it.
        waiting = _proc.connect(addr)
        waiting.sendall(b"GET /queued HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        with waiting, systemd_start(sock, service, workdir, tmp_path / "second", loop) as proc:
            status, _, rest = read_head(waiting)
            while chunk := waiting.recv(65536):
                rest += chunk
            assert status == b"HTTP/1.1 200 OK" and json.loads(rest)["type"] == "http"
            assert proc.stop(getattr(signal, svc["KillSignal"]),
                             timeout=float(svc["TimeoutStopSec"])) == 0


@pytest.mark.rule("skirr-deploy-systemd-doc")
def test_systemd_timeout_stop_covers_the_graceful_shutdown(loop):
    """TimeoutStopSec holds skirr's default --timeout-graceful-shutdown plus --drain-delay."""
    import skirr

    service, _ = unit("skirr.service")
    config = skirr.Config("main:app", loop=loop)
    assert config.timeout_graceful_shutdown + config.drain_delay < float(
        service["Service"]["TimeoutStopSec"])


# -- Kubernetes -------------------------------------------------------------------------------

def k8s_container() -> dict:
    (manifest,) = fenced(section("Kubernetes"), "yaml")
    deployment = yaml.safe_load(manifest)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return {"pod": pod, **container}


def option(argv: list[str], name: str) -> str:
    assert argv.count(name) == 1, (name, argv)
    return argv[argv.index(name) + 1]


@pytest.mark.rule("skirr-deploy-k8s-doc")
def test_kubernetes_container_as_documented(tmp_path, loop):
    c = k8s_container()
    argv = list(c["command"])
    assert argv[0] == "skirr"
    port = int(option(argv, "--port"))
    health = option(argv, "--health-check-path")
    drain = float(option(argv, "--drain-delay"))
    graceful = float(option(argv, "--timeout-graceful-shutdown"))
    grace = c["pod"]["terminationGracePeriodSeconds"]
    # What the manifest relies on: the probes ask skirr's health path on skirr's port; the
    # readiness probe fails within the drain delay (the endpoint leaves before the listener
    # closes); drain and graceful shutdown end inside the grace period.
    assert [p["containerPort"] for p in c["ports"]] == [port]
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": health, "port": port}, probe
    ready = c["readinessProbe"]
    assert ready["periodSeconds"] * ready["failureThreshold"] < drain
    assert drain + graceful < grace
    # The command, on loopback and a free port
    free = _proc.free_port()
    argv[argv.index("--host") + 1] = "127.0.0.1"
    argv[argv.index("--port") + 1] = str(free)
    with _proc.Skirr([*argv[1:], "--loop", loop], tmp_path, cwd=app_dir(tmp_path),
                     command=[venv_skirr()]) as proc:
        proc.wait_accepting(free)
        r = _proc.request(free, target=health)
        assert (r.status, r.body) == (200, b"OK\n")
        assert get(free)["type"] == "http"
        proc.proc.send_signal(signal.SIGTERM)  # what Kubernetes sends on deletion
        sent = time.monotonic()
        time.sleep(0.3)
        r = _proc.request(free, target=health)  # the readiness probe during the drain
        assert (r.status, r.body) == (503, b"draining\n")
        assert get(free)["type"] == "http"  # still serving
        assert proc.wait(grace) == 0
        took = time.monotonic() - sent
    assert drain <= took < grace
