"""Inherited sockets, Unix socket modes, address conflicts, health check and drain (issue 12).

--fd N and systemd's LISTEN_FDS serve a socket the test binds and passes in; --uds-perms sets the
socket file's mode; an address given twice is a usage error; --health-check-path is answered
without calling the application, 503 while --drain-delay keeps serving after SIGTERM. Bytes a
read stops short of (an urgent byte, a descriptor on a Unix socket) are still read.
"""
from __future__ import annotations

import os
import signal
import socket
import stat
import sys
import time

import pytest

try:
    from . import _proc
except ImportError:
    import _proc
from conftest import Client

pytestmark = _proc.each_loop


@pytest.mark.rule("skirr-cli-address-conflict")
@pytest.mark.parametrize(
    "args, line",
    [
        (["--uds", "/tmp/x.sock", "--port", "9000"], "--uds cannot be used together with --host or --port"),
        (["--uds", "/tmp/x.sock", "--host", "::1"], "--uds cannot be used together with --host or --port"),
        (["--fd", "3", "--port", "9000"], "--fd cannot be used together with --host or --port"),
        (["--fd", "3", "--uds", "/tmp/x.sock"], "--uds and --fd cannot be used together"),
        (["--reload-dir", "."], "--reload-dir needs --reload"),
        (["--reload-include", "*.txt"], "--reload-include needs --reload"),
        (["--uds-perms", "9"], "argument --uds-perms: invalid octal mode: '9'"),
        (["--uds-perms", "600"], "--uds-perms needs --uds"),
        (["--uds-perms", "600", "--port", "9000"], "--uds-perms needs --uds"),
        (["--uds-perms", "600", "--fd", "3"], "--uds-perms needs --uds"),
    ],
    ids=["uds-port", "uds-host", "fd-port", "fd-uds", "reload-dir", "reload-include",
         "bad-perms", "perms-alone", "perms-tcp", "perms-fd"],
)
def test_conflicting_addresses_are_usage_errors(tmp_path, loop, args, line):
    status, stderr = _proc.run_to_exit(["basic:app", "--loop", loop, *args], tmp_path)
    assert (status, stderr) == (2, f"skirr: error: {line}\n")


@pytest.mark.rule("skirr-cli-address-conflict")
def test_uds_perms_needs_uds_everywhere(tmp_path, loop):
    from skirr.config import Config

    with pytest.raises(ValueError) as info:
        Config("basic:app", uds_perms=0o600)
    assert str(info.value) == "uds_perms needs uds"
    assert Config("basic:app", uds="/tmp/x.sock", uds_perms=0o600).uds_perms == 0o600
    with _proc.Skirr(["basic:app", "--loop", loop], tmp_path,
                     env={"SKIRR_UDS_PERMS": "600"}) as proc:
        assert proc.wait() == 2
        assert proc.stderr == "skirr: error: SKIRR_UDS_PERMS needs --uds\n"


@pytest.mark.rule("skirr-cli-fd")
@pytest.mark.parametrize("workers", ["1", "2"])
def test_fd_serves_an_inherited_tcp_socket(tmp_path, loop, workers):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        fd = sock.fileno()
        with _proc.Skirr(["basic:app", "--loop", loop, "--fd", str(fd), "--workers", workers],
                         tmp_path, pass_fds=[fd]) as proc:
            proc.wait_accepting(port)
            r = _proc.request(port)
            assert (r.status, r.body) == (200, b"ok")
            proc.wait_stderr(f"skirr running on http://127.0.0.1:{port}")
            assert proc.stop() == 0


@pytest.mark.rule("skirr-cli-fd")
def test_fd_serves_an_inherited_unix_socket(tmp_path, loop):
    path = str(tmp_path / "s.sock")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(path)
        fd = sock.fileno()
        with _proc.Skirr(["basic:app", "--loop", loop, "--fd", str(fd)], tmp_path,
                         pass_fds=[fd]) as proc:
            proc.wait_accepting(path)
            r = _proc.request(path, target="/scope")
            assert r.status == 200 and b'"server": ["' + path.encode() + b'", null]' in r.body
            assert proc.stop() == 0


@pytest.mark.rule("skirr-cli-fd")
def test_fd_not_open_is_a_usage_error_status_2(tmp_path, loop):
    """A descriptor that is not open: a usage error (exit 2) before the app is imported."""
    status, stderr = _proc.run_to_exit(["basic:app", "--loop", loop, "--fd", "97"], tmp_path)
    assert (status, stderr) == (2, "skirr: error: --fd 97: Bad file descriptor\n")


def _systemd(tmp_path, loop, sock, count="1", extra=()):
    """skirr started as systemd starts a socket-activated service: the socket on descriptor 3,
    LISTEN_PID set to the service's own pid (a wrapper sets both, then execs skirr in place)."""
    fd = sock.fileno()
    script = (
        "import os, sys\n"
        f"os.dup2({fd}, 3)\n"
        "os.environ['LISTEN_PID'] = str(os.getpid())\n"
        f"os.environ['LISTEN_FDS'] = '{count}'\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'skirr', *sys.argv[1:]])\n"
    )
    return _proc.Skirr(["basic:app", "--loop", loop, *extra], tmp_path, pass_fds=[fd],
                       command=[sys.executable, "-c", script])


@pytest.mark.rule("skirr-cli-listen-fds")
def test_listen_fds_socket_activation(tmp_path, loop):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with _systemd(tmp_path, loop, sock) as proc:
            proc.wait_accepting(port)
            assert _proc.request(port).body == b"ok"
            assert proc.stop() == 0


@pytest.mark.rule("skirr-cli-listen-fds")
def test_listen_fds_above_one_is_a_usage_error(tmp_path, loop):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        with _systemd(tmp_path, loop, sock, count="2") as proc:
            assert proc.wait() == 2
            assert proc.stderr == (
                "skirr: error: LISTEN_FDS=2: skirr serves exactly one socket-activated socket\n")


@pytest.mark.rule("skirr-cli-uds-perms")
@pytest.mark.parametrize("perms, mode", [(None, 0o666), ("600", 0o600), ("660", 0o660)])
def test_uds_perms(tmp_path, loop, perms, mode):
    path = str(tmp_path / "s.sock")
    args = ["basic:app", "--loop", loop, "--uds", path]
    if perms:
        args += ["--uds-perms", perms]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(path)
        assert stat.S_IMODE(os.stat(path).st_mode) == mode
        assert proc.stop() == 0


@pytest.mark.rule("skirr-health-check-path", "skirr-drain-delay")
@pytest.mark.parametrize("workers", ["1", "2"])
def test_health_check_and_drain_delay(tmp_path, loop, workers):
    port = _proc.free_port()
    args = ["basic:app", "--loop", loop, "--port", str(port), "--workers", workers,
            "--health-check-path", "/healthz", "--drain-delay", "1.5"]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        # every worker serves (the first to listen answers wait_accepting; a SIGTERM while the
        # other starts ends that one without a drain)
        proc._wait_until(lambda: proc.stderr.count("skirr running on") == int(workers),
                         "every worker serves", _proc.START_TIMEOUT, lambda: proc.stderr)
        r = _proc.request(port, target="/healthz")
        assert (r.status, r.body, r.header(b"content-type")) == (
            200, b"OK\n", b"text/plain; charset=utf-8")
        # The application never saw it: its /scope handler logs every call it gets.
        assert not any(e.startswith("request") for e in proc.events)
        assert _proc.request(port, target="/scope").status == 200
        assert sum(e.startswith("request") for e in proc.events) == 1
        proc.proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        # every process serving has begun its drain (not a fixed sleep: a loaded machine may
        # take longer to deliver the signal, or the supervisor to pass it on to its workers)
        draining = "Draining for 1.5 s: still serving, /healthz answers 503\n"
        proc._wait_until(lambda: proc.stderr.count(draining) == int(workers), "the drain began",
                         _proc.IO_TIMEOUT, lambda: proc.stderr)
        # Draining: new connections are still accepted and served; the health path says 503.
        r = _proc.request(port, target="/healthz")
        assert (r.status, r.body, r.header(b"connection")) == (503, b"draining\n", b"close")
        assert _proc.request(port).body == b"ok"
        assert proc.wait(10) == 0
        assert time.monotonic() - sent >= 1.5
        assert not _proc.accepts(port)


_SHORT_READ_APP = '''
import os, time
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b""
    while True:
        event = await receive()
        body += event.get("body", b"")
        if not event.get("more_body"):
            break
    if scope["path"] == "/block":
        open(FLAG, "w").close()
        time.sleep(0.3)  # holds the loop: what the client sends meanwhile is read at once
    out = b"%s %d" % (scope["path"].encode(), len(body))
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", b"%d" % len(out))]})
    await send({"type": "http.response.body", "body": out})
'''


def _plain(out: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(out), out)


def _request(path: str, body: bytes = b"") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {len(body)}\r\n" if body else \
        f"GET {path} HTTP/1.1\r\nhost: x\r\nx-a: 1\r\n"
    return head.encode() + b"\r\n" + body


@pytest.mark.rule("skirr-connections-short-reads")
@pytest.mark.parametrize("family, how, where", [
    ("tcp", "urgent", "head"),
    ("tcp", "urgent", "between"),
    ("tcp", "urgent", "body"),
    ("unix", "urgent", "between"),
    ("unix", "descriptor", "head"),
    ("unix", "descriptor", "body"),
])
def test_bytes_a_read_leaves_behind_are_read(tmp_path, loop, family, how, where):
    """Two requests on one connection, sent while the server's loop is held, so that one read
    meets all their bytes, split (in the first request's head, between the two requests, or in
    the first's 1,000-byte body) by something the kernel stops a read at: a TCP (or, since
    Linux 5.15, Unix) urgent byte (MSG_OOB), or a descriptor (SCM_RIGHTS) sent with the rest of
    the first request, the second request in a write of its own. Both requests are answered,
    exact: the urgent byte is not data (skirr does not set SO_OOBINLINE) and the descriptor is
    closed unread. Edge-triggered, a read that came back short there once left the rest unread
    until the keep-alive timeout reset the connection."""
    import array

    flag = tmp_path / "blocking"
    (tmp_path / "shortread.py").write_text(f"FLAG = {str(flag)!r}\n" + _SHORT_READ_APP)
    body = b"b" * 1000 if where == "body" else b""
    first, second = _request("/a", body), _request("/b")
    data = first + second
    cut = {"head": 20, "between": len(first), "body": len(first) - 400}[where]
    args = ["shortread:app", "--app-dir", str(tmp_path), "--loop", loop, "--no-access-log",
            "--no-server-header", "--no-date-header"]
    if family == "unix":
        addr = str(tmp_path / "s.sock")
        args += ["--uds", addr]
    else:
        addr = _proc.free_port()
        args += ["--port", str(addr)]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(addr)
        with _proc.connect(addr) as blocking, _proc.connect(addr) as sock:
            blocker, client = Client(0, sock=blocking), Client(0, sock=sock)
            blocker.send(_request("/block"))
            deadline = time.monotonic() + 10
            while not flag.exists():
                assert time.monotonic() < deadline, "the /block app never ran"
                time.sleep(0.01)
            sock.sendall(data[:cut])
            if how == "urgent":
                try:
                    sock.send(b"Z", socket.MSG_OOB)
                except OSError as e:  # Unix sockets have urgent bytes since Linux 5.15
                    pytest.skip(f"this kernel sends no urgent byte on a {family} socket: {e}")
                sock.sendall(data[cut:])
            else:  # the descriptor rides on the rest of the first request; a read stops after it
                with open(os.devnull, "rb") as f:
                    fds = array.array("i", [f.fileno()])
                    sock.sendmsg([first[cut:]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
                sock.sendall(second)
            assert blocker.read_exact(len(_plain(b"/block 0"))) == _plain(b"/block 0")
            a, b = _plain(b"/a %d" % len(body)), _plain(b"/b 0")
            assert client.read_exact(len(a) + len(b)) == a + b
        assert proc.stop() == 0

