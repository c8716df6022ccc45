"""The ASGI response extensions (issue 17; spec/extensions.toml): http.response.pathsend and
http.response.zerocopysend (files sent with sendfile(2) from the native reactor), trailers and
early hints (RFC 8297). Responses are compared byte for byte (the date field is turned off with
date_header=False so the bytes are fixed).
"""
from __future__ import annotations

import asyncio
import copy
import gc
import os
import socket
import struct
import threading
import time
import weakref

import pytest
import uvloop

from _flow import rss
from conftest import Recorder, http_request

import skirr

START = {"type": "http.response.start", "status": 200, "headers": []}
HEAD_END = b"server: skirr\r\n\r\n"
EXTENSIONS_11 = {
    "http.response.pathsend": {},
    "http.response.zerocopysend": {},
    "http.response.trailers": {},
    "http.response.early_hint": {},
}
EXTENSIONS_10 = {"http.response.pathsend": {}, "http.response.zerocopysend": {}}
GiB = 1 << 30
MiB = 1 << 20


def start(headers=(), trailers=None, status=200) -> dict:
    msg = {"type": "http.response.start", "status": status, "headers": list(headers)}
    if trailers is not None:
        msg["trailers"] = trailers
    return msg


def steps_app(steps_for, seen: Recorder | None = None):
    """An app that sends steps_for(scope) in order. It records ("raised", i, exc) and re-raises
    when a send raises, ("done",) at the end."""

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        for i, msg in enumerate(steps_for(scope)):
            try:
                await send(msg)
            except BaseException as e:
                if seen is not None:
                    seen.put(("raised", i, e))
                raise
        if seen is not None:
            seen.put(("done",))

    return app


def first_raised(seen: Recorder):
    for item in seen.wait(1):
        if item[0] == "raised":
            return item[1], item[2]
    raise AssertionError(f"no send raised: {seen.items!r}")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def warm_loop_libraries() -> None:
    """Makes and closes one loop of each kind, so that what a loop library opens once per process
    (libuv's signal pipe, 2 descriptors, at the first uvloop loop) is open before a case counts
    its baseline: otherwise the first uvloop case of a process counts it as a leak."""
    for new_loop in (asyncio.new_event_loop, uvloop.new_event_loop):
        new_loop().close()


def wait_for(cond, timeout: float = 5.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        time.sleep(0.02)


@pytest.fixture
def data_file(tmp_path):
    p = tmp_path / "data.txt"
    p.write_bytes(b"0123456789" * 10)
    return p


# ---- scope ----------------------------------------------------------------------------------


@pytest.mark.rule("ASGI-ext-scope-advertised")
def test_extensions_advertised(serve):
    seen = Recorder()

    async def app(scope, receive, send):
        seen.put((scope["http_version"], copy.deepcopy(scope["extensions"])))
        scope["extensions"]["http.response.pathsend"]["x"] = 1  # must not leak to the next one
        scope["extensions"]["mine"] = {}
        await send(START)
        await send({"type": "http.response.body", "body": b""})

    with serve(app) as srv:
        c = srv.connect()
        for _ in range(2):
            assert c.request(http_request()).status == 200
        c10 = srv.connect()
        c10.send(http_request(version="HTTP/1.0"))
        assert c10.response().status == 200
        got = seen.wait(3)
    assert got == [("1.1", EXTENSIONS_11), ("1.1", EXTENSIONS_11), ("1.0", EXTENSIONS_10)]


@pytest.mark.rule("ASGI-ext-scope-advertised")
@pytest.mark.parametrize("access_log", [False, True])  # the log's record holds the scope a while
def test_extensions_an_app_can_still_reach_are_never_handed_out_again(serve, access_log):
    """skirr may hand a finished request's extensions dict to a later request only when nothing
    can reach it any more and it is as made. Earlier requests, keep-alive and pipelined, on
    HTTP/1.1 and 1.0, keep references (to the dict, to one of its values, to the whole scope),
    delete, add, swap or replace a key, or write into a value; later requests get dicts that are none
    of the kept ones and read exactly as advertised, even after the kept ones are written to from
    a later request."""
    kept = []  # objects an earlier request's app still holds
    seen = Recorder()

    async def app(scope, receive, send):
        ext = scope["extensions"]
        path = scope["path"]
        reachable = [k for k in kept if k is ext or any(k is v for v in ext.values())]
        seen.put((path, copy.deepcopy(ext), len(reachable)))
        if path == "/keep-dict":
            kept.append(ext)
        elif path == "/keep-value":
            kept.append(ext["http.response.pathsend"])
        elif path == "/keep-scope":
            kept.append(scope)
        elif path == "/del":
            del ext["http.response.zerocopysend"]
        elif path == "/write":
            ext["http.response.pathsend"]["x"] = 1
        elif path == "/add":
            ext["mine"] = {}
        elif path == "/swap":  # as many keys as made, one of them another
            del ext["http.response.zerocopysend"]
            ext["mine"] = {}
        elif path == "/replace":
            ext["http.response.pathsend"] = {}
        elif path == "/write-then-empty":
            ext["http.response.pathsend"]["x"] = 1
            del ext["http.response.pathsend"]["x"]
        elif path == "/late-writes":
            for k in kept:
                target = k["extensions"] if "extensions" in k else k
                target["late"] = {}
                for v in list(target.values()):
                    v["late"] = 1
        await send(START)
        await send({"type": "http.response.body", "body": b""})

    paths = ["/keep-dict", "/", "/keep-value", "/", "/keep-scope", "/", "/del", "/", "/write",
             "/", "/add", "/", "/swap", "/", "/replace", "/", "/write-then-empty", "/", "/",
             "/late-writes", "/", "/"]
    with serve(app, access_log=access_log) as srv:
        c = srv.connect()
        for path in paths:
            assert c.request(http_request(target=path)).status == 200
        c.send(b"".join(http_request(target=p) for p in paths))
        assert [c.response().status for _ in paths] == [200] * len(paths)
        c10 = srv.connect()
        for path in ["/keep-dict", "/", "/"]:
            c10.send(http_request(target=path, version="HTTP/1.0"))
            assert c10.response().status == 200
            c10 = srv.connect()
        got = seen.wait(2 * len(paths) + 3)
        reused = sum(n._ext_reused for n in srv.server._natives)
    if not access_log:  # with it on, the log's records may hold every dict of so short a run
        assert reused > 0  # the checks above saw dicts handed out again, not only new ones
    expected = [(p, EXTENSIONS_11, 0) for p in paths] * 2
    expected += [(p, EXTENSIONS_10, 0) for p in ["/keep-dict", "/", "/"]]
    assert got == expected
    assert len(kept) == 7


@pytest.mark.rule("ASGI-ext-scope-advertised")
@pytest.mark.parametrize("access_log", [False, True])
def test_extensions_after_more_requests_than_skirr_keeps(serve, access_log):
    """skirr keeps up to 128 finished requests' extensions dicts per HTTP version to hand out
    again, oldest first. A dict an app keeps for good sits in that line and is dropped from it
    when it is full; one the app wrote into is dropped at once (what it holds is freed with its
    request, or when the access log has written its line, not requests later). Across 400 requests (sequential and pipelined in batches of
    50) no request sees either, each sees exactly the advertised dicts, also after the kept one
    is written to, and dicts were handed out again."""
    kept = []
    seen = Recorder()

    class Sentinel:
        pass

    written = []  # a weak reference to what /write put into its dict

    async def app(scope, receive, send):
        ext = scope["extensions"]
        reachable = [k for k in kept if k is ext or any(k is v for v in ext.values())]
        freed = written[0]() is None if scope["path"] == "/freed" else None
        seen.put((copy.deepcopy(ext), len(reachable), freed))
        if scope["path"] == "/keep":
            kept.append(ext)
        elif scope["path"] == "/write":
            obj = Sentinel()
            written.append(weakref.ref(obj))
            ext["http.response.trailers"]["x"] = obj
        elif scope["path"] == "/late-write":
            kept[0]["http.response.pathsend"]["late"] = 1
        await send(START)
        await send({"type": "http.response.body", "body": b""})

    paths = ["/keep", "/write"] + ["/"] * 4 + ["/freed"] + ["/"] * 193 + ["/late-write"]
    paths += ["/"] * 199
    with serve(app, access_log=access_log) as srv:
        c = srv.connect()
        for path in paths[:200]:
            if path == "/freed":
                time.sleep(0.3)  # the access log writes a line within 50 ms (FLUSH_DELAY)
            assert c.request(http_request(target=path)).status == 200
        for i in range(200, 400, 50):
            c.send(b"".join(http_request(target=p) for p in paths[i:i + 50]))
            assert [c.response().status for _ in range(50)] == [200] * 50
        got = seen.wait(len(paths))
        reused = sum(n._ext_reused for n in srv.server._natives)
    assert got == [(EXTENSIONS_11, 0, True if p == "/freed" else None) for p in paths]
    assert kept[0]["http.response.pathsend"] == {"late": 1}
    assert reused > 0


@pytest.mark.rule("ASGI-ext-scope-advertised")
def test_extensions_of_a_request_the_garbage_collector_frees(serve):
    """A request whose app left it in a reference cycle (its send callable in a list holding
    itself) is freed by the garbage collector, which then clears the objects it found unreachable,
    the request's extensions dict among them, after skirr has put that dict in line to hand out
    again. The requests after the collection still see exactly the advertised dicts, never an
    emptied one (stop 53: a dict put in line was no longer checked when handed out), and dicts are
    handed out again after it. The access log is off: its record would keep the dict held."""
    seen = Recorder()

    async def app(scope, receive, send):
        seen.put((scope["path"], copy.deepcopy(scope["extensions"])))
        if scope["path"] == "/cycle":
            held = [send]
            held.append(held)  # only the collector frees the request now
        elif scope["path"] == "/gc":
            gc.collect()
        await send(START)
        await send({"type": "http.response.body", "body": b""})

    paths = ["/cycle", "/gc", "/", "/", "/", "/", "/", "/"]
    with serve(app, access_log=False) as srv:
        c = srv.connect()
        for path in paths[:4]:
            assert c.request(http_request(target=path)).status == 200
        before = sum(n._ext_reused for n in srv.server._natives)
        for path in paths[4:]:
            assert c.request(http_request(target=path)).status == 200
        got = seen.wait(len(paths))
        after = sum(n._ext_reused for n in srv.server._natives)
    assert got == [(p, EXTENSIONS_11) for p in paths]
    assert after > before  # the emptied dict was dropped from the line, not left at its head


# ---- pathsend and zerocopysend --------------------------------------------------------------


@pytest.mark.rule("ASGI-ext-pathsend")
def test_pathsend_with_and_without_content_length(serve, data_file):
    def steps(scope):
        hs = [(b"content-length", b"100")] if scope["path"] == "/cl" else []
        return [start(hs), {"type": "http.response.pathsend", "path": str(data_file)}]

    with serve(steps_app(steps), date_header=False) as srv:
        c = srv.connect()
        c.send(http_request(target="/cl") + http_request(target="/"))
        raw = c.read_exact(2 * (len(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n" + HEAD_END) + 100))
        c.send(http_request(target="/cl"))  # the connection is still usable
        third = c.response()
        assert srv.errors() == []
    one = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n" + HEAD_END + data_file.read_bytes()
    assert raw == one + one
    assert third.status == 200 and third.body == data_file.read_bytes()


@pytest.mark.rule("ASGI-ext-pathsend")
def test_pathsend_path_like_and_empty_file(serve, tmp_path):
    empty = tmp_path / "empty"
    empty.write_bytes(b"")

    def steps(scope):
        return [start(), {"type": "http.response.pathsend", "path": empty}]  # a PathLike

    with serve(steps_app(steps), date_header=False) as srv:
        c = srv.connect()
        c.send(http_request())
        assert c.read_exact(len(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n" + HEAD_END)) == (
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n" + HEAD_END)
        assert c.read_for(0.2) == b""


@pytest.mark.rule("ASGI-ext-zerocopysend")
def test_zerocopysend_ranges_chunked(serve, tmp_path):
    p = tmp_path / "abc"
    p.write_bytes(b"abcdefghij")
    seen = Recorder()

    async def app(scope, receive, send):
        with open(p, "rb") as f:
            await send(start())
            # an explicit offset leaves the file position alone
            await send({"type": "http.response.zerocopysend", "file": f, "offset": 2, "count": 3,
                        "more_body": True})
            await send({"type": "http.response.body", "body": b"--", "more_body": True})
            # no offset: from the position (0), which moves past the range
            await send({"type": "http.response.zerocopysend", "file": f.fileno(), "count": 4,
                        "more_body": True})
            seen.put(f.tell())
            await send({"type": "http.response.zerocopysend", "file": f})  # the rest, final
            seen.put(f.tell())

    with serve(app, date_header=False) as srv:
        c = srv.connect()
        c.send(http_request())
        head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n" + HEAD_END
        body = b"3\r\ncde\r\n2\r\n--\r\n4\r\nabcd\r\n6\r\nefghij\r\n0\r\n\r\n"
        assert c.read_exact(len(head + body)) == head + body
        assert seen.wait(2) == [4, 10]
        assert srv.errors() == []


@pytest.mark.rule("ASGI-ext-zerocopysend")
def test_zerocopysend_with_content_length(serve, tmp_path):
    p = tmp_path / "abc"
    p.write_bytes(b"abcdefghij")

    async def app(scope, receive, send):
        fd = os.open(p, os.O_RDONLY)
        try:
            await send(start([(b"content-length", b"7")]))
            await send({"type": "http.response.zerocopysend", "file": fd, "offset": 0, "count": 3,
                        "more_body": True})
            await send({"type": "http.response.zerocopysend", "file": fd, "offset": 6,
                        "more_body": False})
        finally:
            os.close(fd)

    with serve(app, date_header=False) as srv:
        c = srv.connect()
        c.send(http_request())
        want = b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\n" + HEAD_END + b"abcghij"
        assert c.read_exact(len(want)) == want
        c.send(http_request())  # kept alive
        assert c.response().body == b"abcghij"


@pytest.mark.rule("ASGI-ext-file-head")
@pytest.mark.parametrize("kind", ["pathsend", "zerocopysend"])
def test_head_sends_no_file_bytes(serve, data_file, kind):
    async def app(scope, receive, send):
        await send(start())
        if kind == "pathsend":
            await send({"type": "http.response.pathsend", "path": str(data_file)})
        else:
            with open(data_file, "rb") as f:
                await send({"type": "http.response.zerocopysend", "file": f})

    with serve(app, date_header=False) as srv:
        c = srv.connect()
        c.send(http_request("HEAD") + http_request("GET"))
        head = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n" + HEAD_END
        want = head + head + data_file.read_bytes()
        assert c.read_exact(len(want)) == want
        assert c.read_for(0.2) == b""


@pytest.mark.rule("ASGI-ext-file-errors")
@pytest.mark.parametrize("case", ["missing-path", "directory", "pipe", "count-too-large"])
def test_file_that_cannot_be_sent_before_head(serve, tmp_path, data_file, case):
    seen = Recorder()
    r_fd, w_fd = os.pipe()

    def steps(scope):
        if case == "missing-path":
            return [start(), {"type": "http.response.pathsend", "path": str(tmp_path / "nope")}]
        if case == "directory":
            return [start(), {"type": "http.response.pathsend", "path": str(tmp_path)}]
        if case == "pipe":
            return [start(), {"type": "http.response.zerocopysend", "file": r_fd}]
        return [start(), {"type": "http.response.zerocopysend", "file": os.open(data_file, 0),
                          "count": 101}]

    try:
        warm_loop_libraries()
        fds_before = open_fds()
        with serve(steps_app(steps, seen)) as srv:
            fds_idle = open_fds()
            c = srv.connect()
            c.send(http_request())
            r = c.response()
            assert r.status == 500
            c.expect_eof()
            i, exc = first_raised(seen)
            assert i == 1 and isinstance(exc, RuntimeError), exc
            wait_for(lambda: srv.errors(), what="the app's error logged")
            assert "Exception in ASGI application" in srv.errors()[0].getMessage()
            if case == "missing-path":
                assert "cannot open" in str(exc) and "nope" in str(exc)
            elif case == "count-too-large":
                assert "fewer than the count 101" in str(exc)
            else:
                assert "is not a regular file" in str(exc)
            c.close()
            # the descriptor skirr duplicated or opened is closed (the test's own are counted)
            wait_for(lambda: open_fds() <= fds_idle + (1 if case == "count-too-large" else 0),
                     what="descriptors back to idle")
        assert open_fds() <= fds_before + (1 if case == "count-too-large" else 0)
    finally:
        os.close(r_fd)
        os.close(w_fd)


@pytest.mark.rule("ASGI-ext-file-errors")
def test_file_that_cannot_be_sent_after_head(serve, tmp_path):
    seen = Recorder()

    def steps(scope):
        return [start(), {"type": "http.response.body", "body": b"partial", "more_body": True},
                {"type": "http.response.pathsend", "path": str(tmp_path / "nope")}]

    with serve(steps_app(steps, seen), date_header=False) as srv:
        c = srv.connect()
        c.send(http_request())
        r = c.response(allow_incomplete=True)
        assert r.status == 200 and not r.complete and r.body == b"partial"
        assert c.eof
        i, exc = first_raised(seen)
        assert i == 2 and "cannot open" in str(exc)


@pytest.mark.rule("ASGI-ext-file-short")
def test_file_shorter_than_content_length_known(serve, data_file):
    seen = Recorder()

    def steps(scope):
        return [start([(b"content-length", b"200")]),
                {"type": "http.response.pathsend", "path": str(data_file)}]

    with serve(steps_app(steps, seen)) as srv:
        c = srv.connect()
        c.send(http_request())
        assert c.response().status == 500
        c.expect_eof()
        i, exc = first_raised(seen)
        assert str(exc) == "Response content shorter than Content-Length"


@pytest.mark.rule("ASGI-ext-file-short")
def test_file_that_shrinks_while_sent(serve, tmp_path):
    p = tmp_path / "big"
    size = 256 * MiB
    with open(p, "wb") as f:
        f.truncate(size)
    seen = Recorder()

    def steps(scope):
        return [start([(b"content-length", str(size).encode())]),
                {"type": "http.response.pathsend", "path": str(p)}]

    with serve(steps_app(steps, seen)) as srv:
        c = srv.connect()
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        c.send(http_request())
        c.read_until(b"\r\n\r\n")
        assert seen.wait(1) == [("done",)]  # the final send completed; the file is in flight
        time.sleep(0.2)
        os.truncate(p, 1 * MiB)  # shrinks under the sending reactor
        got = 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                d = c.sock.recv(MiB)
            except ConnectionResetError:
                break
            if not d:
                break
            got += len(d)
        assert got < size, "a shrunk file was sent as complete"
        wait_for(lambda: srv.errors(), what="the shrink logged")
        assert "the file ended before the bytes promised" in srv.errors()[0].getMessage()


@pytest.mark.rule("ASGI-ext-file-backpressure")
def test_large_sparse_file_to_slow_reader_rss_flat(serve, tmp_path):
    p = tmp_path / "sparse"
    with open(p, "wb") as f:
        f.truncate(GiB)

    def steps(scope):
        return [start([(b"content-type", b"application/octet-stream")]),
                {"type": "http.response.pathsend", "path": str(p)}]

    with serve(steps_app(steps)) as srv:
        c = srv.connect(timeout=30)
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        c.send(http_request())
        head = c.read_until(b"\r\n\r\n")
        assert b"content-length: 1073741824\r\n" in head
        base = rss()
        peak = base
        buf = bytearray(MiB)
        view = memoryview(buf)
        got = len(c.buf)
        c.buf = b""
        # slow for the first 2 s (64 KiB then a pause), then as fast as it can
        t_slow = time.monotonic() + 2.0
        deadline = time.monotonic() + 60
        while got < GiB and time.monotonic() < deadline:
            slow = time.monotonic() < t_slow
            n = c.sock.recv_into(view[: 64 * 1024] if slow else view)
            if n == 0:
                break
            got += n
            if slow:
                time.sleep(0.005)
            if got % (64 * MiB) < n or slow:
                peak = max(peak, rss())
        assert got == GiB
        assert peak - base < 32 * MiB, f"RSS grew by {(peak - base) / MiB:.1f} MiB"
        assert srv.errors() == []


@pytest.mark.rule("ASGI-ext-file-disconnect")
def test_reset_mid_file_releases_descriptor(serve, tmp_path):
    p = tmp_path / "sparse"
    with open(p, "wb") as f:
        f.truncate(GiB)
    seen = Recorder()

    def steps(scope):
        if scope["method"] == "HEAD":
            return [start(), {"type": "http.response.body", "body": b""}]
        return [start(), {"type": "http.response.pathsend", "path": str(p)}]

    with serve(steps_app(steps, seen)) as srv:
        warm = srv.connect()  # the idle count is taken with one connection open and answered
        warm.request(http_request("HEAD"), method="HEAD")
        fds_idle = open_fds()
        c = srv.connect()
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        c.send(http_request())
        c.read_exact(256 * 1024)
        assert seen.wait(2) == [("done",), ("done",)]
        assert open_fds() == fds_idle + 3  # the client socket, and the server's socket and file
        c.abort()
        srv.clients.remove(c)
        wait_for(lambda: open_fds() == fds_idle, what="descriptor count back to idle")
        assert srv.errors() == []
        warm.close()


@pytest.mark.rule("ASGI-ext-file-disconnect")
def test_zerocopysend_waiting_raises_client_disconnected(serve, tmp_path):
    p = tmp_path / "sparse"
    with open(p, "wb") as f:
        f.truncate(64 * MiB)
    seen = Recorder()

    async def app(scope, receive, send):
        await send(start())
        with open(p, "rb") as f:
            try:
                for _ in range(64):
                    await send({"type": "http.response.zerocopysend", "file": f, "count": MiB,
                                "more_body": True})
            except skirr.ClientDisconnected as e:
                seen.put(("disconnected", f.tell()))
                raise
        seen.put(("finished",))

    with serve(app) as srv:
        fds_idle = open_fds()
        c = srv.connect()
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        c.send(http_request())
        c.read_exact(512 * 1024)
        time.sleep(0.2)
        c.abort()
        srv.clients.remove(c)
        kind, pos = seen.wait(1)[0]
        assert kind == "disconnected" and pos < 64 * MiB
        wait_for(lambda: open_fds() == fds_idle, what="descriptor count back to idle")
        assert srv.errors() == []  # a server-made disconnect is not the app's failure


@pytest.mark.rule("ASGI-ext-file-write-timeout")
def test_stalled_file_closes_on_write_timeout(serve, tmp_path):
    p = tmp_path / "sparse"
    with open(p, "wb") as f:
        f.truncate(64 * MiB)

    def steps(scope):
        return [start(), {"type": "http.response.pathsend", "path": str(p)}]

    with serve(steps_app(steps), timeout_write=1.0) as srv:
        fds_idle = open_fds()
        c = srv.connect()
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        c.send(http_request())
        c.read_until(b"\r\n\r\n")
        # never read again: the server gives up after 1 s (+ a timer tick) and drops the file
        wait_for(lambda: open_fds() == fds_idle + 1, timeout=6.0,
                 what="the server's socket and file closed")


# ---- Starlette --------------------------------------------------------------------------------


def recording(app, types: list):
    async def wrapped(scope, receive, send):
        async def rec_send(msg):
            types.append(msg["type"])
            await send(msg)

        await app(scope, receive, rec_send)

    return wrapped


@pytest.mark.rule("ASGI-ext-starlette-fileresponse")
def test_starlette_fileresponse_and_staticfiles(serve, tmp_path):
    from starlette.applications import Starlette
    from starlette.responses import FileResponse
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    content = bytes(range(256)) * 4096  # 1 MiB
    (tmp_path / "f.bin").write_bytes(content)
    (tmp_path / "static").mkdir()
    (tmp_path / "static" / "a.txt").write_bytes(b"static text\n")

    async def file(request):
        return FileResponse(tmp_path / "f.bin")

    app = Starlette(routes=[Route("/file", file, methods=["GET", "HEAD"]),
                            Mount("/static", StaticFiles(directory=tmp_path / "static"))])
    types: list = []
    with serve(recording(app, types)) as srv:
        c = srv.connect()
        r = c.request(http_request(target="/file"))
        assert r.status == 200 and r.body == content
        assert r.get(b"content-length") == b"1048576"
        assert types == ["http.response.start", "http.response.pathsend"]
        r = c.request(http_request("HEAD", target="/file"), method="HEAD")
        assert r.status == 200 and r.body == b"" and r.get(b"content-length") == b"1048576"
        r = c.request(http_request(target="/static/a.txt"))
        assert r.status == 200 and r.body == b"static text\n"
        assert types[-1] == "http.response.pathsend"
        r = c.request(http_request(target="/file", headers=[("Host", "x"),
                                                             ("Range", "bytes=10-19")]))
        assert r.status == 206 and r.body == content[10:20]
        assert r.get(b"content-range") == b"bytes 10-19/1048576"
        assert srv.errors() == []


# ---- trailers ---------------------------------------------------------------------------------

TE = [("Host", "x"), ("TE", "trailers")]


def trailers_steps(scope):
    return [start(trailers=True), {"type": "http.response.body", "body": b"hello"},
            {"type": "http.response.trailers", "headers": [(b"x-checksum", b"abc")],
             "more_trailers": True},
            {"type": "http.response.trailers", "headers": [(b"x-b", b"1")]}]


@pytest.mark.rule("ASGI-ext-trailers-sent")
def test_trailers_sent_with_te_trailers(serve):
    with serve(steps_app(trailers_steps), date_header=False) as srv:
        c = srv.connect()
        c.send(http_request(headers=TE))
        want = (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n" + HEAD_END +
                b"5\r\nhello\r\n0\r\nx-checksum: abc\r\nx-b: 1\r\n\r\n")
        assert c.read_exact(len(want)) == want
        c.send(http_request(headers=TE))
        r = c.response()  # h11 reads the trailer section as part of a complete message
        assert r.complete and r.body == b"hello"


@pytest.mark.rule("ASGI-ext-trailers-sent")
def test_trailers_after_file_piece(serve, data_file):
    def steps(scope):
        return [start(trailers=True), {"type": "http.response.pathsend", "path": str(data_file)},
                {"type": "http.response.trailers", "headers": [(b"x-sum", b"1")]}]

    with serve(steps_app(steps), date_header=False) as srv:
        c = srv.connect()
        c.send(http_request(headers=TE))
        want = (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n" + HEAD_END + b"64\r\n" +
                data_file.read_bytes() + b"\r\n0\r\nx-sum: 1\r\n\r\n")
        assert c.read_exact(len(want)) == want


@pytest.mark.rule("ASGI-ext-trailers-dropped")
def test_trailers_dropped_without_te(serve):
    seen = Recorder()
    with serve(steps_app(trailers_steps, seen), date_header=False) as srv:
        c = srv.connect()
        c.send(http_request() + http_request(headers=[("Host", "x"), ("TE", "gzip")]))
        one = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n" + HEAD_END + b"hello"
        assert c.read_exact(2 * len(one)) == one + one
        assert c.read_for(0.2) == b""
        assert seen.wait(2) == [("done",), ("done",)]


@pytest.mark.rule("ASGI-ext-trailers-dropped")
def test_trailers_dropped_with_app_content_length(serve):
    def steps(scope):
        return [start([(b"content-length", b"5")], trailers=True),
                {"type": "http.response.body", "body": b"hello"},
                {"type": "http.response.trailers", "headers": [(b"x-a", b"1")]}]

    with serve(steps_app(steps), date_header=False) as srv:
        c = srv.connect()
        c.send(http_request(headers=TE))
        one = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n" + HEAD_END + b"hello"
        assert c.read_exact(len(one)) == one
        c.send(http_request(headers=TE))
        assert c.response().body == b"hello"


@pytest.mark.rule("ASGI-ext-trailers-forbidden")
@pytest.mark.parametrize("name", [b"content-length", b"Transfer-Encoding", b"host",
                                  b"authorization", b"set-cookie", b"content-type", b"trailer"])
def test_forbidden_trailer_refused(serve, name):
    seen = Recorder()

    def steps(scope):
        return [start(trailers=True), {"type": "http.response.body", "body": b"hello"},
                {"type": "http.response.trailers", "headers": [(name, b"1")]}]

    with serve(steps_app(steps, seen), date_header=False) as srv:
        c = srv.connect()
        c.send(http_request(headers=TE))
        r = c.response(allow_incomplete=True)
        assert not r.complete and r.body == b"hello"
        assert c.eof
        i, exc = first_raised(seen)
        assert i == 2 and isinstance(exc, RuntimeError)
        assert str(exc) == ("field name not allowed in a trailer section (RFC 9110 §6.5.1): " +
                            name.decode())


@pytest.mark.rule("ASGI-ext-trailers-forbidden")
@pytest.mark.parametrize("case", ["not-announced", "before-final-body"])
def test_trailers_out_of_order(serve, case):
    seen = Recorder()

    def steps(scope):
        if case == "not-announced":
            return [start(), {"type": "http.response.body", "body": b"x", "more_body": True},
                    {"type": "http.response.trailers", "headers": []}]
        return [start(trailers=True), {"type": "http.response.body", "body": b"x",
                                       "more_body": True},
                {"type": "http.response.trailers", "headers": []}]

    with serve(steps_app(steps, seen)) as srv:
        c = srv.connect()
        c.send(http_request(headers=TE))
        r = c.response(allow_incomplete=True)
        assert not r.complete
        i, exc = first_raised(seen)
        assert i == 2 and isinstance(exc, RuntimeError)
        assert ("did not say 'trailers': True" in str(exc) if case == "not-announced"
                else "before the final body" in str(exc))


@pytest.mark.rule("ASGI-ext-trailers-forbidden")
def test_app_returning_without_announced_trailers(serve):
    def steps(scope):
        return [start(trailers=True), {"type": "http.response.body", "body": b"hello"}]

    with serve(steps_app(steps)) as srv:
        c = srv.connect()
        c.send(http_request(headers=TE))
        r = c.response(allow_incomplete=True)
        assert not r.complete and r.body == b"hello"
        wait_for(lambda: srv.errors(), what="the app's failure logged")
        assert "returned without completing response" in srv.errors()[0].getMessage()


# ---- early hints ------------------------------------------------------------------------------

HINT_A = {"type": "http.response.early_hint", "links": [b"</a.css>; rel=preload; as=style"]}
HINT_B = {"type": "http.response.early_hint",
          "links": [b"</b.js>; rel=preload; as=script", b"</c.woff2>; rel=preload; as=font"]}


@pytest.mark.rule("RFC8297-early-hints")
def test_early_hints_before_response(serve):
    def steps(scope):
        return [HINT_A, HINT_B, start(), {"type": "http.response.body", "body": b"ok"}]

    with serve(steps_app(steps), date_header=False) as srv:
        c = srv.connect()
        c.send(http_request())
        want = (b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>; rel=preload; as=style\r\n\r\n"
                b"HTTP/1.1 103 Early Hints\r\nlink: </b.js>; rel=preload; as=script\r\n"
                b"link: </c.woff2>; rel=preload; as=font\r\n\r\n"
                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n" + HEAD_END + b"ok")
        assert c.read_exact(len(want)) == want
        c.send(http_request())
        r = c.response()
        assert [i.status_code for i in r.informational] == [103, 103] and r.body == b"ok"


@pytest.mark.rule("RFC8297-early-hints")
def test_no_early_hints_to_http10(serve):
    def steps(scope):
        return [HINT_A, start(), {"type": "http.response.body", "body": b"ok"}]

    with serve(steps_app(steps), date_header=False) as srv:
        c = srv.connect()
        c.send(http_request(version="HTTP/1.0"))
        assert c.read_until_close() == (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n"
                                        b"connection: close\r\n" + HEAD_END + b"ok")


@pytest.mark.rule("ASGI-ext-early-hint-order")
@pytest.mark.parametrize("case", ["after-start", "control-character"])
def test_early_hint_refused(serve, case):
    seen = Recorder()

    def steps(scope):
        if case == "after-start":
            return [start(), HINT_A]
        return [{"type": "http.response.early_hint", "links": [b"</a>\r\nx: y"]}, start()]

    with serve(steps_app(steps, seen)) as srv:
        c = srv.connect()
        c.send(http_request())
        r = c.response()
        assert r.status == 500 and r.informational == []
        i, exc = first_raised(seen)
        assert isinstance(exc, RuntimeError)
        assert i == (1 if case == "after-start" else 0)
        if case == "after-start":
            assert "after 'http.response.start'" in str(exc)
        else:
            assert "control character" in str(exc)
