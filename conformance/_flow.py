"""Helpers for the flow-control, timeout and limit cases (test_flow_*.py, test_timeouts.py,
test_limits.py).

- ``small_client(srv, rcvbuf=, sndbuf=)``: a conftest ``Client`` whose socket buffers are fixed
  before connecting (fixing a size turns the kernel's autotuning off, so how much the kernel can
  hold for a peer that stops reading or writing is known: Linux doubles the value asked for).
- ``kernel_send_buffer_max()``: the most a server socket's send buffer can grow to
  (``net.ipv4.tcp_wmem`` max), the part of a stalled response the kernel may hold.
- ``Progress``: counters the app (server thread) bumps and the test reads, with
  ``wait_stable()``: waits until a counter stops moving (the app is blocked).
- ``send_until_stalled(sock, data)``: writes without blocking until the peer stops taking bytes.
- ``rss()``: this process's resident set, in bytes (the server under test runs in it).
- ``BlockedLoop``: an app whose ``/block`` request blocks the event loop (``time.sleep``) and
  whose other requests answer 200 with their body (or their path when it is empty), with
  ``start(srv)`` (a second connection asks for ``/block``) and ``at(seconds)`` (sleeps until that
  long after the start), ``finish()`` (the blocking request's answer). Input sent during the
  block must be read before any deadline expires.
"""
from __future__ import annotations

import os
import resource
import socket
import stat
import threading
import time
from typing import Optional

import _proc
from conftest import IO_TIMEOUT, Client

KIB = 1024
MIB = 1024 * KIB
HIGH_WATER = 64 * KIB  # skirr's write, body and pipelined-input marks (SK_*_HIGH_WATER)


class BlockedLoop:
    """Input that arrived in time while the loop was blocked (spec/flow_control.toml
    skirr-timeout-ready-input-first). With a timeout of TIMEOUT s: the case's connection makes its
    last progress, then ``start`` has another connection block the loop for BLOCK s, and the case
    sends its input at ``at(SEND)``: after the one-second timer became ready (it ticks at least
    once in the block's first second), before the deadline (0.6 s of slack), while the deadline
    has passed when the loop wakes (0.6 s later). So the timer's sweep and the input are ready
    together, the timer first."""

    TIMEOUT = 2.0
    BLOCK = 2.5
    SEND = 1.3

    def __init__(self) -> None:
        self.t0 = 0.0
        self.blocker: Optional[Client] = None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/block":
            time.sleep(self.BLOCK)  # the app's synchronous work: the whole loop waits
        body = b""
        while True:
            m = await receive()
            if m["type"] == "http.disconnect":
                return
            body += m.get("body", b"")
            if not m.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body or scope["path"].encode()})

    def start(self, srv) -> None:
        """The loop of the running server ``srv`` blocks from now (within a few ms) for BLOCK s."""
        time.sleep(0.1)  # the case's last input has been read
        self.t0 = time.monotonic()
        self.blocker = srv.connect()
        self.blocker.send(b"GET /block HTTP/1.1\r\nHost: x\r\n\r\n")

    def at(self, seconds: float) -> None:
        time.sleep(max(0.0, self.t0 + seconds - time.monotonic()))

    def finish(self) -> tuple:
        """The blocking request's own answer (status, body)."""
        assert self.blocker is not None
        r = self.blocker.response()
        return r.status, r.body


def rss() -> int:
    """This process's resident set (bytes): the server runs in it."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def kernel_send_buffer_max() -> int:
    """net.ipv4.tcp_wmem's maximum: how large an autotuned TCP send buffer may grow."""
    with open("/proc/sys/net/ipv4/tcp_wmem") as f:
        return int(f.read().split()[2])


class _SmallClient(Client):
    def __init__(self, port: int, timeout: float, rcvbuf: Optional[int], sndbuf: Optional[int]):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        if sndbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        sock.settimeout(timeout)
        sock.connect(("127.0.0.1", port))
        self.sock = sock
        self.timeout = timeout
        self.buf = b""
        self.eof = False
        self.reset = False

    @property
    def rcvbuf(self) -> int:
        return self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)

    @property
    def sndbuf(self) -> int:
        return self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)


def widen_send_buffer(client) -> None:
    """Gives a small_client a 4 MiB send buffer again: the stall is measured, now send the rest
    at full speed (with 64 KiB in flight, every window update waits for a delayed ACK)."""
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * MIB)


def small_client(
    srv, rcvbuf: Optional[int] = None, sndbuf: Optional[int] = None, timeout: float = IO_TIMEOUT
) -> _SmallClient:
    """A client of the running server ``srv`` with fixed socket buffer sizes (closed with srv)."""
    c = _SmallClient(srv.port, timeout, rcvbuf, sndbuf)
    srv.clients.append(c)
    return c


class Progress:
    """Named counters shared by the app (server thread) and the test thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._times: dict[str, float] = {}

    def bump(self, name: str) -> None:
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + 1
            self._times[name] = time.monotonic()

    def get(self, name: str) -> int:
        with self._lock:
            return self._counts.get(name, 0)

    def last(self, name: str) -> float:
        """time.monotonic() of the last bump of ``name``."""
        with self._lock:
            return self._times[name]

    def wait_for(self, name: str, value: int, timeout: float = 5.0) -> int:
        """Waits until ``name`` reaches ``value`` (or ``timeout`` seconds pass); returns it.

        The app bumps a counter after its ``await send(...)`` returns, which can be after the
        client has read that send's bytes: a check right after the read races the app's task."""
        deadline = time.monotonic() + timeout
        while (current := self.get(name)) < value and time.monotonic() < deadline:
            time.sleep(0.005)
        return current

    def wait_stable(self, name: str, quiet: float = 0.3, timeout: float = 5.0) -> int:
        """Waits until ``name`` is > 0 and has not moved for ``quiet`` seconds; returns it."""
        deadline = time.monotonic() + timeout
        value, since = self.get(name), time.monotonic()
        while True:
            time.sleep(0.02)
            now = time.monotonic()
            current = self.get(name)
            if current != value:
                value, since = current, now
            elif value > 0 and now - since >= quiet:
                return value
            if now > deadline:
                raise AssertionError(f"counter {name!r} still moving (or 0) after {timeout}s: {value}")


def send_until_stalled(sock: socket.socket, data: bytes, quiet: float = 0.5,
                       timeout: float = 10.0) -> int:
    """Writes data without blocking until the peer takes no byte for ``quiet`` seconds (or all
    of it is written); returns the bytes written. The socket's timeout is restored."""
    view = memoryview(data)
    sent = 0
    saved_timeout = sock.gettimeout()
    sock.setblocking(False)
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    try:
        while sent < len(data) and time.monotonic() - last < quiet:
            if time.monotonic() > deadline:
                raise AssertionError(f"the peer kept taking bytes for {timeout}s ({sent} sent)")
            if not _proc.ready(sock, write=True, timeout=0.05):
                continue
            try:
                n = sock.send(view[sent:sent + 256 * KIB])
            except BlockingIOError:
                continue
            sent += n
            last = time.monotonic()
    finally:
        sock.settimeout(saved_timeout)
    return sent


def shrink_server_send_buffer(client, size: int) -> None:
    """Sets SO_SNDBUF (bytes) on the server's end of `client`'s connection (anything with a
    `.sock`; the server runs in this process: its socket is found among our descriptors by its
    peer address), so the kernel takes the server's output in small steps."""
    want = client.sock.getsockname()
    for name in os.listdir("/proc/self/fd"):
        try:
            if not stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                continue  # socket.fromfd would leak its dup() of a descriptor it then refuses
            s = socket.fromfd(int(name), socket.AF_INET, socket.SOCK_STREAM)
        except OSError:
            continue
        with s:
            try:
                if s.getpeername() != want:
                    continue
            except OSError:
                continue
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
            return
    raise AssertionError(f"no server socket connected to {want}")
