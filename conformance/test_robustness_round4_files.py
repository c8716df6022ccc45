"""Robustness, round 4 (issue 35 items 7 and 8): files an app names never block the event loop,
and every send() that writes waits at the 64 KiB high-water mark.

Item 7 (spec/extensions.toml): ``http.response.pathsend`` opens the path with O_NONBLOCK and
judges the descriptor with fstat(2) before anything reads it, so a FIFO with no writer, a device
or a tty is refused at once (RuntimeError naming it, a 500) while the loop keeps answering other
connections; a relative path is refused (the extension asks for an absolute one); a file of a
pseudo file system (procfs, sysfs), whose stat size is not its length, is refused instead of sent
empty or cut short; a ``zerocopysend`` descriptor that is not a regular file open for reading is
refused, whatever its O_NONBLOCK flag.

Item 8 (spec/flow_control.toml): the sends that write and can repeat within one response or
session (``http.response.early_hint``, ``http.response.trailers`` with ``more_trailers``,
``websocket.send``, ``websocket.http.response.body`` with ``more_body``) complete only when the
connection's unsent output is below 64 KiB, as ``http.response.body`` with ``more_body`` does
(test_flow_response.py): while the client reads nothing, the app cannot get further ahead than
the kernel socket buffers + the mark + one message, measured by counting completed sends (no
timing), and once the client reads every message arrives in order.
"""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from _flow import HIGH_WATER, KIB, Progress, kernel_send_buffer_max, small_client
from _ws import frame, upgrade
from conftest import Recorder, http_request

START = {"type": "http.response.start", "status": 200, "headers": []}
SERVER_END = b"server: skirr\r\n\r\n"
# skirr's own 500 (sk_resp_error) with date_header=False, byte for byte.
ERROR_500 = (b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain; charset=utf-8\r\n"
             b"content-length: 21\r\nconnection: close\r\n" + SERVER_END + b"Internal Server Error")


def recording_app(message_for, seen: Recorder, before=None):
    """An app that sends START, then message_for(scope); records ("raised", exc) when a send
    raises (and re-raises), ("done",) otherwise. before(scope) runs just before the file message."""

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        if scope["path"] == "/other":
            await send(START)
            await send({"type": "http.response.body", "body": b"other"})
            return
        try:
            await send(START)
            if before is not None:
                before(scope)
            await send(message_for(scope))
        except BaseException as e:
            seen.put(("raised", e))
            raise
        seen.put(("done",))

    return app


def refused(seen: Recorder) -> BaseException:
    item = seen.wait(1)[0]
    assert item[0] == "raised", f"the send did not raise: {item!r}"
    return item[1]


def expect_500(c, method: str = "GET") -> None:
    """The client gets skirr's 500 (no body for HEAD) and the connection closes."""
    want = ERROR_500[:-len(b"Internal Server Error")] if method == "HEAD" else ERROR_500
    assert c.read_until_close() == want


def sysfs_file() -> str:
    """A regular file of sysfs (its stat size is 4096 whatever its content)."""
    for name in ("kernel/uevent_seqnum", "kernel/mm/transparent_hugepage/enabled", "power/state"):
        path = "/sys/" + name
        if os.path.isfile(path):
            return path
    raise AssertionError("no sysfs file found: is /sys mounted?")


# ---- item 7: files never block the loop --------------------------------------------------------


# Run by a child process: after 3 s, opens the FIFO argv[1] for writing as soon as a reader waits
# in open(2) (O_NONBLOCK: ENXIO while none does), then closes it. A server stuck in open(2) (the
# bug) holds the GIL, so no thread of the test's process could release it: this child does, and
# the case fails on its time bound instead of hanging.
RELEASE_FIFO = """
import errno, os, sys, time
time.sleep(3.0)
deadline = time.monotonic() + 30.0
while time.monotonic() < deadline:
    try:
        os.close(os.open(sys.argv[1], os.O_WRONLY | os.O_NONBLOCK))
        break
    except OSError as e:
        if e.errno != errno.ENXIO:
            raise
        time.sleep(0.05)
"""


@pytest.mark.rule("ASGI-ext-file-never-blocks")
@pytest.mark.parametrize("method,version", [("GET", "HTTP/1.1"), ("HEAD", "HTTP/1.1"),
                                            ("GET", "HTTP/1.0")])
def test_pathsend_fifo_without_writer_does_not_block_the_loop(serve, tmp_path, method, version):
    """A FIFO nobody writes to, named by pathsend: open(2) would wait for a writer, with the whole
    loop (and the GIL). The request gets its 500 and the app a RuntimeError naming the FIFO, and
    a second connection, which asks once the first request is at its pathsend, is answered too:
    both within 1 s of the first request."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    seen = Recorder()
    at_pathsend = threading.Event()

    def before(scope):
        at_pathsend.set()

    app = recording_app(lambda scope: {"type": "http.response.pathsend", "path": str(fifo)},
                        seen, before)
    releaser = subprocess.Popen([sys.executable, "-c", RELEASE_FIFO, str(fifo)])
    try:
        with serve(app, date_header=False) as srv:
            c = srv.connect()
            other = srv.connect()
            t0 = time.monotonic()
            c.send(http_request(method, version=version))
            assert at_pathsend.wait(5.0)
            r = other.request(http_request("GET", "/other"))
            expect_500(c, method)
            elapsed = time.monotonic() - t0
            assert (r.status, r.body) == (200, b"other")
            assert elapsed < 1.0, f"the loop was blocked: {elapsed:.2f} s for two answers"
            exc = refused(seen)
            assert isinstance(exc, RuntimeError), exc
            assert str(exc) == f"http.response.pathsend: {str(fifo)!r} is not a regular file"
    finally:
        releaser.kill()
        releaser.wait()


@pytest.mark.rule("ASGI-ext-file-never-blocks")
@pytest.mark.parametrize("kind", ["pipe", "socket", "tty"])
def test_zerocopysend_of_a_blocking_non_file_is_refused(serve, kind):
    """zerocopysend of a pipe, a socket or a tty whose O_NONBLOCK is cleared (a read would wait
    for the peer, with the loop): refused before anything reads it, a 500 at once."""
    if kind == "pipe":
        ours, theirs = os.pipe()
    elif kind == "socket":
        a, b = socket.socketpair()
        ours, theirs = a.detach(), b.detach()
    else:
        ours, theirs = os.openpty()  # the tty is the pty's slave side: theirs
        ours, theirs = theirs, ours
    os.set_blocking(ours, True)
    seen = Recorder()
    app = recording_app(lambda scope: {"type": "http.response.zerocopysend", "file": ours}, seen)
    try:
        with serve(app, date_header=False) as srv:
            c = srv.connect()
            c.send(http_request())
            expect_500(c)
            exc = refused(seen)
            assert str(exc) == f"http.response.zerocopysend: {ours} is not a regular file"
            assert srv.get("/other").body == b"other"
    finally:
        os.close(ours)
        os.close(theirs)


@pytest.mark.rule("ASGI-ext-file-never-blocks")
@pytest.mark.parametrize("path", ["/dev/null", "/dev/zero", "/dev/tty"])
def test_pathsend_of_a_device_is_refused(serve, path):
    """A character device named by pathsend is opened without blocking and without becoming the
    controlling terminal (O_NOCTTY), and refused. /dev/tty without a terminal cannot be opened:
    refused as such."""
    seen = Recorder()
    app = recording_app(lambda scope: {"type": "http.response.pathsend", "path": path}, seen)
    with serve(app, date_header=False) as srv:
        c = srv.connect()
        c.send(http_request())
        expect_500(c)
        exc = refused(seen)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError as e:  # /dev/tty with no controlling terminal: ENXIO
            assert str(exc) == f"http.response.pathsend: cannot open {path!r}: {e.strerror}"
        else:
            os.close(fd)
            assert str(exc) == f"http.response.pathsend: {path!r} is not a regular file"


@pytest.mark.rule("ASGI-ext-pathsend-absolute")
@pytest.mark.parametrize("form", ["relative-str", "relative-pathlike", "dot", "empty"])
def test_pathsend_relative_path_refused(serve, tmp_path, form):
    """A relative path is refused although it names an existing file from the working
    directory: the extension asks for an absolute path, and a server's working directory is not
    the app's to depend on."""
    import pathlib

    data = tmp_path / "data.txt"
    data.write_bytes(b"secret")
    rel = os.path.relpath(data)
    path = {"relative-str": rel, "relative-pathlike": pathlib.PurePath(rel),
            "dot": "./" + rel, "empty": ""}[form]
    assert form == "empty" or os.path.isfile(path)  # it would resolve to the file
    seen = Recorder()
    app = recording_app(lambda scope: {"type": "http.response.pathsend", "path": path}, seen)
    with serve(app, date_header=False) as srv:
        c = srv.connect()
        c.send(http_request())
        expect_500(c)
        exc = refused(seen)
        assert isinstance(exc, RuntimeError)
        assert str(exc) == f"http.response.pathsend: {path!r} is not an absolute path"


PSEUDO = ("is on a pseudo file system (procfs, sysfs, ...) whose size is not its length: read it "
          "and send http.response.body")


@pytest.mark.rule("ASGI-ext-file-pseudo-fs")
@pytest.mark.parametrize("which", ["procfs", "sysfs", "procfs-zerocopysend"])
def test_pseudo_fs_file_refused(serve, which):
    """/proc/self/status has content but stat size 0 (it was sent as an empty 200); a sysfs file
    says 4096 for a few bytes (it was cut short with a reset). Both are refused with a 500 and a
    RuntimeError naming the file."""
    path = sysfs_file() if which == "sysfs" else "/proc/self/status"
    seen = Recorder()
    files = []

    def message(scope):
        if which == "procfs-zerocopysend":
            f = open(path, "rb")
            files.append(f)
            return {"type": "http.response.zerocopysend", "file": f.fileno(), "count": 10}
        return {"type": "http.response.pathsend", "path": path}

    try:
        with serve(recording_app(message, seen), date_header=False) as srv:
            c = srv.connect()
            c.send(http_request())
            expect_500(c)
            exc = refused(seen)
            name = repr(files[0].fileno()) if files else repr(path)
            kind = "zerocopysend" if files else "pathsend"
            assert str(exc) == f"http.response.{kind}: {name} {PSEUDO}"
    finally:
        for f in files:
            f.close()


@pytest.mark.rule("ASGI-ext-file-pseudo-fs")
@pytest.mark.parametrize("where", ["tmp", "shm"])
def test_really_empty_regular_file_still_served(serve, tmp_path, where):
    """A zero-size file of a real file system (the test's tmp directory, tmpfs /dev/shm) is a
    200 with content-length 0, told apart from a procfs file by its file system, not its size."""
    if where == "shm":
        fd, name = __import__("tempfile").mkstemp(dir="/dev/shm")
        os.close(fd)
    else:
        name = str(tmp_path / "empty")
        open(name, "wb").close()
    seen = Recorder()
    app = recording_app(lambda scope: {"type": "http.response.pathsend", "path": name}, seen)
    try:
        with serve(app, date_header=False) as srv:
            c = srv.connect()
            c.send(http_request() + http_request())
            one = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n" + SERVER_END
            assert c.read_exact(2 * len(one)) == one + one
            assert seen.wait(2) == [("done",), ("done",)]
            assert srv.errors() == []
    finally:
        if where == "shm":
            os.unlink(name)


@pytest.mark.rule("ASGI-ext-file-errors")
@pytest.mark.parametrize("mode", ["write-only", "o-path"])
def test_zerocopysend_descriptor_not_open_for_reading(serve, tmp_path, mode):
    """A regular file's descriptor that cannot be read (O_WRONLY, O_PATH) is refused before the
    head: a 500, not a head followed by a reset when sendfile(2) fails."""
    p = tmp_path / "data"
    p.write_bytes(b"0123456789")
    fd = os.open(p, os.O_WRONLY if mode == "write-only" else os.O_PATH)
    seen = Recorder()
    app = recording_app(lambda scope: {"type": "http.response.zerocopysend", "file": fd}, seen)
    try:
        with serve(app, date_header=False) as srv:
            c = srv.connect()
            c.send(http_request())
            expect_500(c)
            assert str(refused(seen)) == f"http.response.zerocopysend: {fd} is not open for reading"
    finally:
        os.close(fd)


# ---- item 8: every send that writes waits at the high-water mark ------------------------------

RCVBUF = 32 * KIB
LINK = b"</" + b"a" * 1000 + b">; rel=preload"
HINT_WIRE = b"HTTP/1.1 103 Early Hints\r\nlink: " + LINK + b"\r\n\r\n"
UNIT = 1 * KIB  # the payload of one body chunk, trailer field or WebSocket message


def stalled_bound(client, unit_wire: int) -> int:
    """The most an app may have handed to skirr while this client reads nothing."""
    return kernel_send_buffer_max() + client.rcvbuf + HIGH_WATER + unit_wire


def count_for(unit_wire: int) -> int:
    """Messages enough to be twice over any bound: the sends must stop before the last."""
    return 2 * (kernel_send_buffer_max() + 2 * RCVBUF + HIGH_WATER) // unit_wire + 64


def read_all(c, n: int) -> bytes:
    """Exactly n bytes from the client (joined once)."""
    parts, have = [c.buf], len(c.buf)
    c.buf = b""
    while have < n:
        data = c._recv(what=f"{n} bytes")
        assert data, f"peer closed after {have} of {n} bytes"
        parts.append(data)
        have += len(data)
    out = b"".join(parts)
    c.buf = out[n:]
    return out[:n]


def assert_stalled(progress: Progress, n: int, unit_wire: int, c) -> int:
    done = progress.wait_stable("done")
    assert progress.get("started") == done + 1, "no send is pending while the client reads nothing"
    assert done < n, f"all {n} sends completed for a client that read nothing"
    assert done * unit_wire <= stalled_bound(c, unit_wire), (
        f"the app produced {done * unit_wire} bytes for a client that read nothing"
        f" (bound {stalled_bound(c, unit_wire)})")
    return done


@pytest.mark.rule("skirr-flow-every-send-waits")
def test_early_hints_wait_for_a_client_that_reads_nothing(serve):
    """Early hints of 1 KiB in a loop to a client that reads nothing: exactly one send is pending
    once the kernel buffers and the 64 KiB mark are full; then the client reads every hint, in
    order, and the final response."""
    n = count_for(len(HINT_WIRE))
    progress = Progress()

    async def app(scope, receive, send):
        for _ in range(n):
            progress.bump("started")
            await send({"type": "http.response.early_hint", "links": [LINK]})
            progress.bump("done")
        await send(START)
        await send({"type": "http.response.body", "body": b"ok"})
        progress.bump("finished")

    with serve(app, date_header=False) as srv:
        c = small_client(srv, rcvbuf=RCVBUF, timeout=10.0)
        c.send(http_request())
        assert_stalled(progress, n, len(HINT_WIRE), c)
        final = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n" + SERVER_END + b"ok"
        assert read_all(c, n * len(HINT_WIRE) + len(final)) == HINT_WIRE * n + final
        progress.wait_for("finished", 1)
        assert (progress.get("done"), progress.get("finished")) == (n, 1)
        assert srv.errors() == []


@pytest.mark.rule("skirr-flow-every-send-waits")
def test_trailers_with_more_trailers_wait(serve):
    """http.response.trailers with more_trailers True, one 1 KiB field each, to a client that
    said TE: trailers and reads nothing: the sends stop at the mark, then every field arrives in
    the trailer section, in order."""
    value = b"v" * (UNIT - 16)
    unit_wire = len(b"x-t000000: ") + len(value) + 2
    n = count_for(unit_wire)
    progress = Progress()

    async def app(scope, receive, send):
        await send({**START, "trailers": True})
        await send({"type": "http.response.body", "body": b"body"})
        for i in range(n):
            progress.bump("started")
            await send({"type": "http.response.trailers", "headers": [(b"x-t%06d" % i, value)],
                        "more_trailers": True})
            progress.bump("done")
        await send({"type": "http.response.trailers", "headers": [], "more_trailers": False})
        progress.bump("finished")

    with serve(app, date_header=False) as srv:
        c = small_client(srv, rcvbuf=RCVBUF, timeout=10.0)
        c.send(http_request(headers=[("Host", "x"), ("TE", "trailers")]))
        assert_stalled(progress, n, unit_wire, c)
        want = (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n" + SERVER_END
                + b"4\r\nbody\r\n0\r\n"
                + b"".join(b"x-t%06d: " % i + value + b"\r\n" for i in range(n)) + b"\r\n")
        assert read_all(c, len(want)) == want
        progress.wait_for("finished", 1)
        assert (progress.get("done"), progress.get("finished")) == (n, 1)


def ws_message(payload: bytes) -> bytes:
    """A server's binary message (unmasked, one frame)."""
    return frame(0x82, payload, masked=False)


@pytest.mark.rule("skirr-flow-every-send-waits")
def test_websocket_send_waits(serve):
    """websocket.send of 1 KiB messages to a client that reads nothing stops at the mark; then
    every message arrives in order and the close follows."""
    payload = b"m" * UNIT
    unit_wire = len(ws_message(payload))
    n = count_for(unit_wire)
    progress = Progress()

    async def app(scope, receive, send):
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        for _ in range(n):
            progress.bump("started")
            await send({"type": "websocket.send", "bytes": payload})
            progress.bump("done")
        await send({"type": "websocket.close", "code": 1000})
        progress.bump("finished")

    with serve(app, date_header=False) as srv:
        c = small_client(srv, rcvbuf=RCVBUF, timeout=10.0)
        c.send(upgrade())
        assert_stalled(progress, n, unit_wire, c)
        assert c.read_until(b"\r\n\r\n").startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
        want = ws_message(payload) * n + frame(0x88, b"\x03\xe8", masked=False)
        assert read_all(c, len(want)) == want
        progress.wait_for("finished", 1)
        assert (progress.get("done"), progress.get("finished")) == (n, 1)


@pytest.mark.rule("skirr-flow-every-send-waits")
def test_websocket_denial_body_waits(serve):
    """websocket.http.response.body with more_body True (a denial response) to a client that
    reads nothing stops at the mark, as an HTTP body does; then the whole response arrives."""
    chunk = b"d" * UNIT
    unit_wire = len(b"%x\r\n" % UNIT) + UNIT + 2
    n = count_for(unit_wire)
    progress = Progress()

    async def app(scope, receive, send):
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.http.response.start", "status": 403, "headers": []})
        for _ in range(n):
            progress.bump("started")
            await send({"type": "websocket.http.response.body", "body": chunk, "more_body": True})
            progress.bump("done")
        await send({"type": "websocket.http.response.body", "body": b""})
        progress.bump("finished")

    with serve(app, date_header=False) as srv:
        c = small_client(srv, rcvbuf=RCVBUF, timeout=10.0)
        c.send(upgrade())
        assert_stalled(progress, n, unit_wire, c)
        r = c.response()
        assert (r.status, r.body == chunk * n, r.complete) == (403, True, True)
        progress.wait_for("finished", 1)
        assert (progress.get("done"), progress.get("finished")) == (n, 1)


@pytest.mark.rule("skirr-flow-every-send-waits")
@pytest.mark.parametrize("end", ["denial", "close"])
def test_websocket_send_waiting_while_another_task_ends_it(serve, end):
    """A send() that waits at the mark in one task (a denial body with more_body True, or a
    websocket.send) while the app's own task ends the exchange (the last denial body, or
    websocket.close): once the client has read everything, the waiting send() returns as any
    other completed send (its bytes were written), never ClientDisconnected: the client did not
    leave. (A finished denial closes the connection once written: that close used to fail the
    waiting send.)"""
    chunk = b"d" * (kernel_send_buffer_max() + 2 * RCVBUF + 2 * HIGH_WATER)
    outcome: list[str] = []

    async def app(scope, receive, send):
        import asyncio

        assert (await receive())["type"] == "websocket.connect"
        if end == "denial":
            await send({"type": "websocket.http.response.start", "status": 403, "headers": []})
            big_message = {"type": "websocket.http.response.body", "body": chunk,
                           "more_body": True}
            last = {"type": "websocket.http.response.body", "body": b"end"}
        else:
            await send({"type": "websocket.accept"})
            big_message = {"type": "websocket.send", "bytes": chunk}
            last = {"type": "websocket.close", "code": 1000}

        async def big():
            try:
                await send(big_message)
                outcome.append("returned")
            except Exception as exc:
                outcome.append(type(exc).__name__)

        waiting = asyncio.ensure_future(big())
        await asyncio.sleep(0.3)  # the client reads nothing: big() is waiting for drain
        outcome.append("waiting" if not waiting.done() else "not waiting")
        await send(last)
        await waiting

    with serve(app, date_header=False) as srv:
        c = small_client(srv, rcvbuf=RCVBUF, timeout=10.0)
        c.send(upgrade())
        time.sleep(0.6)
        if end == "denial":
            r = c.response()
            assert (r.status, r.body == chunk + b"end", r.complete) == (403, True, True)
        else:
            assert c.read_until(b"\r\n\r\n").startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
            want = (bytes([0x82, 127]) + len(chunk).to_bytes(8, "big") + chunk
                    + frame(0x88, b"\x03\xe8", masked=False))
            assert read_all(c, len(want)) == want
            c.send(frame(0x88, b"\x03\xe8"))
        deadline = time.monotonic() + 5
        while len(outcome) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert outcome == ["waiting", "returned"]
