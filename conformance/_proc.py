"""Helpers for the tests that run skirr as a subprocess (test_cli, test_lifespan, test_fastapi).

`Skirr` starts ``python -m skirr ...`` with stdout/stderr going to files (no pipe can fill up),
waits for the port (or socket) to accept, and stops it with a signal; `request` sends one request
over a plain socket and reads the response with h11. Every wait is bounded.
"""
from __future__ import annotations

import dataclasses
import fcntl
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import h11
import pytest

HERE = Path(__file__).resolve().parent
APPS_DIR = HERE / "apps"
EXAMPLES_DIR = HERE.parent / "examples"

LOOPS = ("asyncio", "uvloop")
# Applied to every test of a module (pytestmark): each case runs on both loops.
each_loop = pytest.mark.parametrize("loop", LOOPS)

START_TIMEOUT = 20.0  # seconds for a server to accept (FastAPI imports take a while)
STOP_TIMEOUT = 15.0  # seconds for a server to exit after a signal
IO_TIMEOUT = 10.0  # seconds for any socket operation

Address = int | str  # a TCP port on 127.0.0.1, or a Unix-domain socket path


def _port_pool() -> range:
    """The ports `free_port` hands out: 12,000 (at least 1,000) outside the kernel's ephemeral
    range (``net.ipv4.ip_local_port_range``, 32768-60999 by default), where no ``bind(port 0)``
    and no client's ``connect`` can land: below it, else above it; empty when neither side has
    1,000 (`free_port` then binds port 0)."""
    try:
        low, high = (int(x) for x in
                     Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[:2])
    except (OSError, ValueError):
        low, high = 32768, 60999
    if low - 1024 >= 1000:
        return range(max(1024, low - 12000), low)
    if 65535 - high >= 1000:
        return range(high + 1, min(65536, high + 1 + 12000))
    return range(0)


_PORTS = _port_pool()
# The next-port counter every test process of this user on the machine shares (the xdist workers
# of a run and the two conformance modes that run side by side), under flock.
_PORT_COUNTER = Path(tempfile.gettempdir()) / f"skirr-test-ports-{os.getuid()}"


def _bindable(port: int, family: socket.AddressFamily, host: str) -> bool:
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def free_port(family: socket.AddressFamily = socket.AF_INET, host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free now and that no other test process on this machine is
    handed until the pool wraps (12,000 ports later; without a pool or a writable counter, a
    port bound to 0 and released, as before).

    Bound to port 0 and released, a port could be the kernel's next pick for another test's
    in-process server (port 0) in the moment before the subprocess binds it: the subprocess then
    failed to bind, and the test talked to the other test's server (CI, stop 52). The ports here
    lie outside the ephemeral range, and a counter shared under a file lock hands each out once.
    """
    try:
        f = open(_PORT_COUNTER, "a+")
    except OSError:
        f = None
    if f is None or not _PORTS:  # no pool, or no counter here: a port the kernel picks
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            return s.getsockname()[1]
    with f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        text = f.read().strip()
        n = int(text) if text.isdigit() else os.getpid()
        for _ in range(len(_PORTS)):
            port = _PORTS[n % len(_PORTS)]
            n += 1
            if _bindable(port, family, host):
                break
        else:
            raise AssertionError(f"no free port in {_PORTS}")
        f.seek(0)
        f.truncate()
        f.write(str(n % len(_PORTS)))
    return port


def ready(sock: socket.socket, write: bool = False, timeout: float = 0.0) -> bool:
    """True when ``sock`` is readable (or writable, ``write``) within ``timeout`` seconds.

    poll(2), not select(2): a worker that has run many cases can hold descriptors above
    FD_SETSIZE (1024), which select.select refuses ("filedescriptor out of range in select()").
    """
    waiter = select.poll()
    waiter.register(sock, select.POLLOUT if write else select.POLLIN)
    return bool(waiter.poll(int(timeout * 1000)))


def connect(addr: Address, timeout: float = IO_TIMEOUT) -> socket.socket:
    """A connected client socket with ``timeout`` on every operation."""
    if isinstance(addr, str):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(addr)
        except BaseException:
            sock.close()
            raise
        return sock
    return socket.create_connection(("127.0.0.1", addr), timeout=timeout)


@dataclasses.dataclass
class Response:
    status: int
    headers: list[tuple[bytes, bytes]]  # lower-cased names, in order
    body: bytes
    chunks: list[bytes]  # the body as h11 delivered it (one item per Data event)
    chunked: bool  # framed with Transfer-Encoding: chunked
    http_version: bytes

    def header(self, name: bytes) -> bytes | None:
        values = [v for k, v in self.headers if k == name]
        assert len(values) <= 1, f"{name!r} appears {len(values)} times"
        return values[0] if values else None


def send_request(
    sock: socket.socket,
    conn: h11.Connection,
    method: str = "GET",
    target: str = "/",
    headers: Sequence[tuple[str, str]] = (),
    body: bytes = b"",
) -> None:
    """Writes one request (Content-Length framed when there is a body)."""
    hdrs = [("host", "localhost"), *headers]
    if body or method in ("POST", "PUT", "PATCH"):
        hdrs.append(("content-length", str(len(body))))
    data = conn.send(h11.Request(method=method, target=target, headers=hdrs))
    if body:
        data += conn.send(h11.Data(data=body))
    data += conn.send(h11.EndOfMessage())
    sock.sendall(data)


def read_response(sock: socket.socket, conn: h11.Connection) -> Response:
    """Reads one whole response with h11 (the socket's timeout bounds every read)."""
    head: h11.Response | None = None
    chunks: list[bytes] = []
    chunked = False
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(sock.recv(65536))
            continue
        if isinstance(event, h11.InformationalResponse):
            continue
        if isinstance(event, h11.Response):
            head = event
            chunked = any(
                k == b"transfer-encoding" and v.lower() == b"chunked" for k, v in event.headers
            )
        elif isinstance(event, h11.Data):
            chunks.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            break
        elif isinstance(event, h11.ConnectionClosed):
            raise AssertionError("connection closed before the response ended")
    assert head is not None
    return Response(
        status=head.status_code,
        headers=[(bytes(k), bytes(v)) for k, v in head.headers],
        body=b"".join(chunks),
        chunks=chunks,
        chunked=chunked,
        http_version=bytes(head.http_version),
    )


def request(
    addr: Address,
    method: str = "GET",
    target: str = "/",
    headers: Sequence[tuple[str, str]] = (),
    body: bytes = b"",
    timeout: float = IO_TIMEOUT,
) -> Response:
    """One request on a new connection; returns the whole response."""
    with connect(addr, timeout) as sock:
        conn = h11.Connection(h11.CLIENT)
        send_request(sock, conn, method, target, headers, body)
        return read_response(sock, conn)


def accepts(addr: Address) -> bool:
    """True when a connection to ``addr`` is accepted right now."""
    try:
        with connect(addr, timeout=1.0):
            return True
    except OSError:
        return False


class Skirr:
    """``python -m skirr ARGS`` as a subprocess; a context manager that kills it on exit.

    Args:
        args: the command-line arguments after ``-m skirr``.
        tmp_path: where stdout, stderr and the apps' event log ($SKIRR_TEST_LOG) go.
        cwd: the working directory (default: conformance/apps, so ``basic:app`` imports).
        env: variables added to the environment.
        pass_fds: descriptors the process inherits (``--fd``).
        command: what runs instead of ``python -m skirr`` (``gunicorn``, a shell wrapper).
        preexec_fn: called in the child before it runs (e.g. to lower an ``RLIMIT_*``).
    """

    def __init__(self, args: Sequence[str], tmp_path: Path, cwd: Path | None = None, *,
                 env: dict[str, str] | None = None, pass_fds: Sequence[int] = (),
                 command: Sequence[str] | None = None,
                 preexec_fn: Callable[[], None] | None = None) -> None:
        self.args = [*(command or [sys.executable, "-m", "skirr"]), *args]
        self.events_path = tmp_path / "events.log"
        self._out_path = tmp_path / "stdout.txt"
        self._err_path = tmp_path / "stderr.txt"
        extra_env = env
        env = dict(os.environ)
        env["SKIRR_TEST_LOG"] = str(self.events_path)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        env.update(extra_env or {})
        with open(self._out_path, "wb") as out, open(self._err_path, "wb") as err:
            self.proc = subprocess.Popen(
                self.args, cwd=str(cwd or APPS_DIR), env=env, stdin=subprocess.DEVNULL,
                stdout=out, stderr=err, pass_fds=tuple(pass_fds), preexec_fn=preexec_fn,
            )

    def __enter__(self) -> Skirr:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT)

    @property
    def stdout(self) -> str:
        return self._out_path.read_text()

    @property
    def stderr(self) -> str:
        return self._err_path.read_text()

    @property
    def events(self) -> list[str]:
        """The app's event log, one event per item."""
        try:
            return self.events_path.read_text().splitlines()
        except FileNotFoundError:
            return []

    def wait_accepting(self, addr: Address, timeout: float = START_TIMEOUT) -> None:
        """Waits until ``addr`` accepts a connection; fails with stderr if the server exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"skirr exited with {self.proc.returncode} before accepting:\n{self.stderr}"
                )
            if isinstance(addr, str) and not os.path.exists(addr):
                time.sleep(0.05)
                continue
            if accepts(addr):
                if self.proc.poll() is not None:  # another process's listener answered
                    continue
                return
            time.sleep(0.05)
        raise AssertionError(f"skirr did not accept on {addr} within {timeout} s:\n{self.stderr}")

    def wait(self, timeout: float = STOP_TIMEOUT) -> int:
        """Waits for exit; returns the status (fails, with stderr, past the timeout)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT)
            raise AssertionError(
                f"skirr did not exit within {timeout} s:\n{self.stderr}"
            ) from None

    def stop(self, signum: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> int:
        """Sends ``signum`` and waits for exit; returns the status."""
        self.proc.send_signal(signum)
        return self.wait(timeout)

    def _wait_until(self, done: Callable[[], bool], what: str, timeout: float,
                    seen: Callable[[], str]) -> None:
        """Polls ``done()`` until true; fails naming ``what`` and ``seen()`` (what there was
        instead) on timeout, or with skirr's stderr when it exits."""
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout} s: {what}; got {seen()}")
            if self.proc.poll() is not None:
                raise AssertionError(f"skirr exited before {what}:\n{self.stderr}")
            time.sleep(0.02)

    def wait_stderr(self, text: str, timeout: float = IO_TIMEOUT) -> str:
        """Waits until the server's stderr holds ``text``; returns the stderr read then.

        A line the server logs after its socket listens (``skirr running on``) may come after
        a client's first connect succeeds: the kernel completes the handshake at listen(2).
        """
        self._wait_until(lambda: text in self.stderr, f"stderr holds {text!r}", timeout,
                         lambda: f"stderr:\n{self.stderr}")
        return self.stderr

    def wait_stdout(self, text: str, timeout: float = IO_TIMEOUT) -> str:
        """Waits until the server's stdout (the access log, by default) holds ``text``; returns
        the stdout read then. Fails with stderr if the server exits first."""
        self._wait_until(lambda: text in self.stdout, f"stdout holds {text!r}", timeout,
                         lambda: f"stdout:\n{self.stdout}")
        return self.stdout

    def wait_event(self, event: str, timeout: float = IO_TIMEOUT) -> None:
        """Waits until the app has logged ``event``."""
        self._wait_until(lambda: event in self.events, f"the app logged {event!r}", timeout,
                         lambda: repr(self.events))


def run_to_exit(args: Sequence[str], tmp_path: Path, cwd: Path | None = None,
                timeout: float = STOP_TIMEOUT) -> tuple[int, str]:
    """Runs ``python -m skirr ARGS`` expecting it to exit by itself; returns (status, stderr)."""
    with Skirr(args, tmp_path, cwd) as proc:
        status = proc.wait(timeout)
        return status, proc.stderr
