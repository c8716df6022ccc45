"""Robustness, round 4: what an app raises and how long a stop waits for it (issue 35 items 3 and
12; spec/robustness.toml, round 4).

Item 3: SystemExit, KeyboardInterrupt, GeneratorExit or an app's own BaseException raised by a
WebSocket app fails that session only (500 before the handshake is answered, Close 1011 after
accept), never the server: asyncio's Task.__step re-raises SystemExit and KeyboardInterrupt out of
run_forever() (uvloop runs the same Task), so skirr's own coroutine drives the app, on either loop.
The same holds behind the --health-check-path and --request-id wrappers, and an application
factory or module raising them at load is a clear load error (exit 1). A cancellation of the app's
Task is not its failure; a CancelledError the app raises itself is.

Item 12: a stop (SIGTERM, SIGINT, request_shutdown) while lifespan startup runs gives it
--timeout-graceful-shutdown more seconds; past that one ERROR line says why and the process exits
1 (one process, or a worker under the supervisor). A second signal while lifespan startup or
shutdown hangs exits at once with one WARNING line.

In-process cases run on asyncio and uvloop (the ``serve`` fixture); the process cases name the
loop. Every wait is bounded.
"""
from __future__ import annotations

import asyncio
import logging
import re
import signal
import socket
import time

import pytest

import _proc
from _ws import frame, upgrade
from conftest import Recorder, http_request, record_text
from test_robustness_round3 import (  # noqa: F401 (natives: a fixture)
    ERROR_500,
    RaiseInAwait,
    RaiseInCall,
    natives,
    undated,
    wait_counters,
)


class Fatal(BaseException):
    """A BaseException of the app's own."""


EXCEPTIONS = [SystemExit, KeyboardInterrupt, GeneratorExit, Fatal]
WHERE = ["call", "await", "before-accept", "after-accept"]
CLOSE_1011 = b"\x88\x02\x03\xf3"  # the server's Close, 1011 (RFC 6455 §7.4.1), no reason
CLOSE_1000 = b"\x88\x02\x03\xe8"


async def http_ok(scope, receive, send):
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def ws_raising(exc_type, where: str):
    """A WebSocket app raising exc_type at ``where``; "ok" to HTTP requests."""
    if where == "call":
        bad = RaiseInCall(exc_type)
    elif where == "await":
        bad = RaiseInAwait(exc_type)
    else:
        async def bad(scope, receive, send):
            assert (await receive())["type"] == "websocket.connect"
            if where == "before-accept":
                raise exc_type("raised-before-accept")
            await send({"type": "websocket.accept"})
            assert (await receive()) == {"type": "websocket.receive", "text": "go"}
            raise exc_type("raised-after-accept")

    def app(scope, receive, send):
        # A plain function: the failing app's own call (and a raise in it) is app()'s.
        if scope["type"] == "http":
            return http_ok(scope, receive, send)
        return bad(scope, receive, send)

    return app


def ws_fails(srv, where: str, target: str = "/ws") -> None:
    """One handshake to a failing app: 500 before accept, 101 then Close 1011 after it."""
    c = srv.connect()
    c.send(upgrade(target=target))
    if where == "after-accept":
        assert c.read_until(b"\r\n\r\n").startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
        c.send(frame(0x81, b"go"))
        assert c.read_until_close() == CLOSE_1011
    else:
        assert undated(c.read_until_close()) == ERROR_500
    c.close()  # the server closed first, and now waits for our FIN


def logged(srv, exc_type) -> list:
    return [r for r in srv.errors() if r.exc_info and r.exc_info[0] is exc_type]


# ---------------------------------------------------------------------------------------------
# Item 3: a BaseException from a WebSocket app fails that session, never the server.


@pytest.mark.rule("skirr-errors-base-exceptions-websocket", "skirr-counters-balanced")
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("exc_type", EXCEPTIONS, ids=lambda e: e.__name__)
def test_ws_base_exception_fails_only_its_session(serve, natives, exc_type, where):
    """SystemExit, KeyboardInterrupt, GeneratorExit or the app's own BaseException raised by a
    WebSocket app in app()'s synchronous part, in __await__ or before accept: skirr's 500 and a
    close; after accept: Close 1011 and a close. Logged at ERROR with the exception; the session
    is no longer in flight; twice, then an HTTP request: the server goes on serving."""
    with serve(ws_raising(exc_type, where)) as srv:
        for _ in range(2):  # twice: the first failure left the server whole
            ws_fails(srv, where)
            wait_counters(natives, active_requests=0, connections=0)
        r = srv.get("/after")
        assert (r.status, r.body) == (200, b"ok")
        assert srv.thread.is_alive()
        assert len(logged(srv, exc_type)) == 2, [record_text(r) for r in srv.errors()]
        assert "Exception in ASGI application" in record_text(logged(srv, exc_type)[0])
        assert natives[0].total_requests == 3


@pytest.mark.rule("skirr-errors-base-exceptions-websocket")
@pytest.mark.parametrize("exc_type", [SystemExit, KeyboardInterrupt], ids=lambda e: e.__name__)
def test_ws_base_exception_leaves_other_sessions_requests_and_lifespan(serve, natives, exc_type):
    """A WebSocket session and an HTTP request in flight, then another session's app raises after
    accept: the open session still echoes, the HTTP request gets its 200, lifespan shutdown runs
    afterwards and the server exits 0."""
    lifespan = Recorder()
    started = Recorder()
    release = asyncio.Event()  # set on the server's loop, from the echo session

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                lifespan.put(msg["type"])
                await send({"type": msg["type"] + ".complete"})
                if msg["type"] == "lifespan.shutdown":
                    return
        if scope["type"] == "http":
            started.put(scope["path"])
            await asyncio.wait_for(release.wait(), 10)
            await http_ok(scope, receive, send)
            return
        await receive()
        await send({"type": "websocket.accept"})
        while True:
            msg = await receive()
            if msg["type"] == "websocket.disconnect":
                return
            if scope["path"] == "/bad":
                raise exc_type("raised-after-accept")
            if msg["text"] == "release":
                release.set()
            await send({"type": "websocket.send", "text": msg["text"]})

    with serve(app, lifespan="on") as srv:
        echo = srv.connect()
        echo.send(upgrade(target="/echo"))
        assert echo.read_until(b"\r\n\r\n").startswith(b"HTTP/1.1 101 ")
        slow = srv.connect()
        slow.send(http_request("GET", "/slow"))
        started.wait(1)
        ws_fails(srv, "after-accept", "/bad")
        wait_counters(natives, active_requests=2, connections=2)
        echo.send(frame(0x81, b"still"))
        assert echo.read_exact(7) == b"\x81\x05still"
        echo.send(frame(0x81, b"release"))
        assert echo.read_exact(9) == b"\x81\x07release"
        r = slow.response()
        assert (r.status, r.body) == (200, b"ok")
        echo.send(frame(0x88, b"\x03\xe8"))
        assert echo.read_until_close() == CLOSE_1000
        wait_counters(natives, active_requests=0)
        assert len(logged(srv, exc_type)) == 1, [record_text(r) for r in srv.errors()]
    assert lifespan.items == ["lifespan.startup", "lifespan.shutdown"]
    assert srv.server.exit_code == 0


@pytest.mark.rule("skirr-errors-cancelled-websocket", "skirr-counters-balanced")
@pytest.mark.parametrize("where", ["before-accept", "after-accept"])
@pytest.mark.parametrize("how", ["task-cancelled", "app-raises"])
def test_ws_cancellation_is_not_a_failure_but_a_raised_cancelled_error_is(serve, natives, how,
                                                                          where):
    """The app's Task cancelled (here by the app itself; skirr's forced exit and the loop's
    teardown cancel the same way): not logged; before accept 500 (as HTTP), after accept the
    session ends as for a return (Close 1000). A CancelledError the app raises itself (no one
    cancelled its Task) is its failure like any exception: logged, 500 or Close 1011."""

    async def bad(scope, receive, send):
        await receive()
        if where == "after-accept":
            await send({"type": "websocket.accept"})
            await receive()
        if how == "app-raises":
            raise asyncio.CancelledError("raised-by-the-app")
        asyncio.current_task().cancel()
        await asyncio.sleep(1)

    def app(scope, receive, send):
        if scope["type"] == "http":
            return http_ok(scope, receive, send)
        return bad(scope, receive, send)

    with serve(app) as srv:
        c = srv.connect()
        c.send(upgrade())
        if where == "after-accept":
            assert c.read_until(b"\r\n\r\n").startswith(b"HTTP/1.1 101 ")
            c.send(frame(0x81, b"go"))
            if how == "app-raises":
                assert c.read_until_close() == CLOSE_1011  # failed: closed at once
            else:  # the close handshake of a return: the client answers the server's Close
                assert c.read_exact(4) == CLOSE_1000
                c.send(frame(0x88, b"\x03\xe8"))
                assert c.read_until_close() == b""
        else:
            assert undated(c.read_until_close()) == ERROR_500
        c.close()
        wait_counters(natives, active_requests=0, connections=0)
        assert srv.get("/").status == 200
        errors = [record_text(r) for r in srv.errors()]
        if how == "app-raises":
            assert len(logged(srv, asyncio.CancelledError)) == 1, errors
        else:
            assert errors == []


@pytest.mark.rule("skirr-errors-base-exceptions-wrappers")
@pytest.mark.parametrize("exc_type", [SystemExit, KeyboardInterrupt], ids=lambda e: e.__name__)
def test_base_exceptions_behind_health_check_and_request_id(serve, natives, exc_type):
    """Behind --health-check-path and --request-id (skirr's own ASGI wrappers around the app):
    a WebSocket app raising after accept gets Close 1011, an HTTP app raising before its response
    gets skirr's 500; then the health check still answers 200 and the app is served."""

    async def app(scope, receive, send):
        if scope["type"] == "websocket":
            await receive()
            await send({"type": "websocket.accept"})
            await receive()
            raise exc_type("ws-raised")
        if scope["path"] == "/bad":
            raise exc_type("http-raised")
        await http_ok(scope, receive, send)

    with serve(app, health_check_path="/healthz", request_id=True) as srv:
        ws_fails(srv, "after-accept")
        c = srv.connect()
        c.send(http_request("GET", "/bad"))
        assert undated(c.read_until_close()) == ERROR_500
        c.close()
        wait_counters(natives, active_requests=0, connections=0)
        health = srv.get("/healthz")
        assert (health.status, health.body) == (200, b"OK\n")
        r = srv.get("/")
        assert (r.status, r.body) == (200, b"ok")
        assert re.fullmatch(rb"[0-9a-f]{32}", r.get(b"x-request-id"))
        assert len(logged(srv, exc_type)) == 2, [record_text(r) for r in srv.errors()]


def _recv_all(sock: socket.socket) -> bytes:
    raw = b""
    while chunk := sock.recv(65536):
        raw += chunk
    return raw


@pytest.mark.rule("skirr-errors-base-exceptions-websocket")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_cli_ws_base_exceptions_do_not_end_the_process(tmp_path, loop):
    """`python -m skirr robust4:app`: a WebSocket app raising SystemExit(3) after accept (Close
    1011) and KeyboardInterrupt before accept (500): the process lives on (the issue's exit 3 and
    1), an open session still echoes, HTTP is served, and SIGTERM exits 0 after lifespan
    shutdown."""
    port = _proc.free_port()
    args = ["robust4:app", "--loop", loop, "--port", str(port), "--lifespan", "on"]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        with _proc.connect(port) as echo:
            echo.sendall(upgrade(target="/echo"))
            assert echo.recv(4096).startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
            with _proc.connect(port) as bad:
                bad.sendall(upgrade(target="/exit-after-accept"))
                assert bad.recv(4096).startswith(b"HTTP/1.1 101 ")
                bad.sendall(frame(0x81, b"go"))
                assert _recv_all(bad) == CLOSE_1011
            with _proc.connect(port) as bad:
                bad.sendall(upgrade(target="/interrupt-before"))
                raw = _recv_all(bad)
                assert raw.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
                assert raw.endswith(b"\r\n\r\nInternal Server Error")
            assert proc.proc.poll() is None, proc.stderr
            echo.sendall(frame(0x81, b"alive"))
            assert echo.recv(4096) == b"\x81\x05alive"
        r = _proc.request(port, "GET", "/")
        assert (r.status, r.body) == (200, b"ok")
        assert proc.stop(signal.SIGTERM) == 0, proc.stderr
        stderr = proc.stderr
    assert proc.events == ["startup", "shutdown"]
    assert "SystemExit: 3" in stderr and "KeyboardInterrupt" in stderr


@pytest.mark.rule("skirr-errors-base-exceptions-load")
@pytest.mark.parametrize("loop", _proc.LOOPS)
@pytest.mark.parametrize("factory, line", [
    ("exits_factory", 'application factory "robust4:exits_factory" raised SystemExit: 3'),
    ("interrupt_factory", 'application factory "robust4:interrupt_factory" raised '
                          "KeyboardInterrupt"),
])
def test_factory_raising_system_exit_is_a_load_error(tmp_path, loop, factory, line):
    """--factory whose factory raises SystemExit(3) or KeyboardInterrupt: one `skirr: error:`
    line naming it, no traceback, exit 1 (a load error, not the app's exit status 3)."""
    status, stderr = _proc.run_to_exit([f"robust4:{factory}", "--factory", "--loop", loop,
                                        "--port", str(_proc.free_port())], tmp_path)
    assert (status, stderr) == (1, f"skirr: error: {line}\n")


@pytest.mark.rule("skirr-errors-base-exceptions-load")
@pytest.mark.parametrize("loop", _proc.LOOPS)
@pytest.mark.parametrize("statement, name", [("raise SystemExit(3)", "SystemExit: 3"),
                                             ("raise KeyboardInterrupt", "KeyboardInterrupt")])
def test_module_raising_system_exit_at_import_is_a_load_error(tmp_path, loop, statement, name):
    """A module raising SystemExit(3) (sys.exit() at import) or KeyboardInterrupt while imported:
    its traceback, then one `skirr: error:` line naming it, exit 1 (as for any exception there)."""
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "exits.py").write_text(f"{statement}\n")
    status, stderr = _proc.run_to_exit(["exits:app", "--app-dir", str(apps), "--loop", loop,
                                        "--port", str(_proc.free_port())], tmp_path)
    assert status == 1, stderr
    assert stderr.startswith("Traceback (most recent call last):\n"), stderr
    assert stderr.endswith(f'skirr: error: error while importing module "exits": {name}\n'), stderr


# ---------------------------------------------------------------------------------------------
# Item 12: a stop during a lifespan startup (or shutdown) that never completes is bounded.

STARTUP_LINE = ("ERROR:    Application startup did not complete within 1 s "
                "(--timeout-graceful-shutdown) of the shutdown request: cancelling it, "
                "not serving\n")


def _wait_event(proc: _proc.Skirr, event: str) -> None:
    proc.wait_event(event, _proc.START_TIMEOUT)


def _wait_until(done, what: str, timeout: float = _proc.IO_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.02)


@pytest.mark.rule("skirr-lifespan-startup-stop-bounded")
@pytest.mark.parametrize("signum, loop", [(signal.SIGTERM, "asyncio"), (signal.SIGINT, "uvloop"),
                                          (signal.SIGINT, "asyncio"), (signal.SIGTERM, "uvloop")])
def test_stop_during_startup_that_never_completes_ends_after_the_graceful_timeout(
        tmp_path, signum, loop):
    """One process whose lifespan startup never answers: the first SIGTERM or SIGINT ends it
    --timeout-graceful-shutdown (1 s) later with one ERROR line saying why, the startup is
    cancelled, nothing was ever accepted, exit status 1."""
    port = _proc.free_port()
    args = ["robust4:hang_startup", "--loop", loop, "--port", str(port),
            "--timeout-graceful-shutdown", "1"]
    with _proc.Skirr(args, tmp_path) as proc:
        _wait_event(proc, "startup")
        t0 = time.monotonic()
        proc.proc.send_signal(signum)
        status = proc.wait()
        took = time.monotonic() - t0
        stderr = proc.stderr
    assert status == 1, stderr
    assert 1.0 <= took < 3.0, f"exited {took:.2f} s after the signal:\n{stderr}"
    assert stderr == (f"INFO:     Started server process [{proc.proc.pid}]\n"
                      "INFO:     Waiting for application startup.\n" + STARTUP_LINE)
    assert proc.events == ["startup", "startup-cancelled"]
    assert not _proc.accepts(port)


@pytest.mark.rule("skirr-lifespan-startup-stop-bounded")
def test_request_shutdown_during_startup_that_never_completes_returns_1(loop_name):
    """In process: request_shutdown() while lifespan startup never answers: Server.run()
    returns 1 timeout_graceful_shutdown (0.5 s) later, with the same line, never started."""
    from test_asgi_lifespan import Unstarted

    entered = Recorder()

    async def app(scope, receive, send):
        await receive()
        entered.put("startup")
        try:
            await asyncio.sleep(1000)
        except asyncio.CancelledError:
            entered.put("cancelled")
            raise

    run = Unstarted(app, loop_name, lifespan="on", timeout_graceful_shutdown=0.5)
    entered.wait(1)
    t0 = time.monotonic()
    run.server.request_shutdown()
    assert run.join() == 1
    took = time.monotonic() - t0
    assert 0.5 <= took < 2.5, f"run() returned {took:.2f} s after the request"
    assert entered.items == ["startup", "cancelled"]
    assert not run.server.started.is_set()
    assert run.handler.texts() == [
        "Application startup did not complete within 0.5 s (--timeout-graceful-shutdown) of "
        "the shutdown request: cancelling it, not serving"]


@pytest.mark.rule("skirr-lifespan-startup-stop-bounded")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_supervisor_stop_during_a_worker_startup_that_never_completes(tmp_path, loop):
    """--workers 2, the worker's lifespan startup never answers: SIGTERM to the supervisor
    reaches the worker, which ends itself 1 s later (--timeout-graceful-shutdown) with its line,
    well before the supervisor's kill margin (graceful + 5 s); the supervisor exits 1."""
    port = _proc.free_port()
    args = ["robust4:hang_startup", "--loop", loop, "--port", str(port), "--workers", "2",
            "--timeout-graceful-shutdown", "1"]
    with _proc.Skirr(args, tmp_path) as proc:
        _wait_event(proc, "startup")
        t0 = time.monotonic()
        proc.proc.send_signal(signal.SIGTERM)
        status = proc.wait()
        took = time.monotonic() - t0
        stderr = proc.stderr
    assert status == 1, stderr
    assert 1.0 <= took < 4.0, f"exited {took:.2f} s after the signal:\n{stderr}"
    assert stderr.count(STARTUP_LINE) == 1, stderr
    assert "INFO:     SIGTERM: stopping 1 worker(s)\n" in stderr
    assert re.search(r"INFO:     Worker \[\d+\] stopped \(exit status 1\)\n", stderr), stderr
    assert "killing" not in stderr.lower(), stderr
    assert proc.events == ["startup", "startup-cancelled"]


@pytest.mark.rule("skirr-lifespan-hang-second-signal")
@pytest.mark.parametrize("phase", ["startup", "shutdown"])
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_second_signal_during_a_hanging_lifespan_exits_at_once(tmp_path, loop, phase):
    """Lifespan startup (or, after the first SIGTERM, shutdown) hangs with a long
    --timeout-graceful-shutdown (30 s): a second SIGTERM exits at once with status 1 and one
    WARNING line naming what was cancelled."""
    port = _proc.free_port()
    args = [f"robust4:hang_{phase}", "--loop", loop, "--port", str(port),
            "--timeout-graceful-shutdown", "30", "--log-level", "debug"]
    with _proc.Skirr(args, tmp_path) as proc:
        if phase == "shutdown":
            proc.wait_accepting(port)
        else:
            _wait_event(proc, "startup")
        proc.proc.send_signal(signal.SIGTERM)
        _wait_event(proc, phase)
        _wait_until(lambda: "DEBUG:    Received SIGTERM\n" in proc.stderr, "the first signal")
        t0 = time.monotonic()
        proc.proc.send_signal(signal.SIGTERM)
        status = proc.wait()
        took = time.monotonic() - t0
        stderr = _stderr(proc)
    assert status == 1, stderr
    assert took < 2.0, f"exited {took:.2f} s after the second signal:\n{stderr}"
    assert stderr.endswith(f"WARNING:  Forced exit: cancelling application {phase}\n"
                           + (FINISHED if phase == "shutdown" else "")), stderr
    assert proc.events[-1] == f"{phase}-cancelled"


# ---------------------------------------------------------------------------------------------
# Every stop is bounded, also when the application ignores its cancellation (the tasks left get
# 1 s), and a lifespan task failing after startup says why the exit status is 1.

GRACE_LINE = "ERROR:    1 application task(s) ignored cancellation for 1 s (1 {kind}): exiting\n"
DRAIN_TIMEOUT = ("WARNING:  Graceful shutdown timed out after 1 s: closing 1 connection(s), "
                 "1 request(s) in flight\n")
# A server process's last line, uvicorn's (its PID written "PID" by _stopped and _stderr).
FINISHED = "INFO:     Finished server process [PID]\n"
SHUTDOWN_DONE = ("INFO:     Waiting for application shutdown.\n"
                 "INFO:     Application shutdown complete.\n" + FINISHED)


def _stubborn_unit(proc: _proc.Skirr, port: int, what: str) -> socket.socket:
    """Starts a request (what="http") or a WebSocket session that ignores cancellation."""
    proc.wait_accepting(port)
    client = _proc.connect(port)
    if what == "http":
        client.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        _wait_event(proc, "request")
    else:
        client.sendall(upgrade(target="/ws"))
        assert client.recv(4096).startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
        _wait_event(proc, "session")
    return client


def _stopped(proc: _proc.Skirr, signum: int = signal.SIGTERM) -> tuple[int, float, str]:
    t0 = time.monotonic()
    proc.proc.send_signal(signum)
    status = proc.wait()
    return status, time.monotonic() - t0, _stderr(proc)


def _stderr(proc: _proc.Skirr) -> str:
    """The server's stderr with its process id written ``PID``."""
    return proc.stderr.replace(f"[{proc.proc.pid}]", "[PID]")


@pytest.mark.rule("skirr-stop-bounded-cancel-ignored")
@pytest.mark.parametrize("loop", _proc.LOOPS)
@pytest.mark.parametrize("what", ["http", "websocket"])
def test_request_ignoring_cancellation_ends_the_process_1_s_later(tmp_path, loop, what):
    """A request, or a WebSocket session after accept, that catches and ignores every
    cancellation: SIGTERM drains for --timeout-graceful-shutdown (1 s), cancels it, lifespan
    shutdown completes, 1 s later one ERROR line names it and the process exits 1 (asyncio.run
    and the issue: alive for ever, a second signal a bare 143)."""
    port = _proc.free_port()
    args = ["robust4:stubborn", "--loop", loop, "--port", str(port),
            "--timeout-graceful-shutdown", "1", "--no-access-log"]
    with _proc.Skirr(args, tmp_path) as proc:
        with _stubborn_unit(proc, port, what):
            status, took, stderr = _stopped(proc)
    assert status == 1, stderr
    assert 2.0 <= took < 4.0, f"exited {took:.2f} s after the signal:\n{stderr}"
    assert stderr.endswith(
        "INFO:     Shutting down\n" + DRAIN_TIMEOUT + SHUTDOWN_DONE
        + GRACE_LINE.format(kind=what)), stderr
    assert "Task was destroyed" not in stderr, stderr
    assert proc.events.count(f"{what}-cancelled") == 1, proc.events
    assert proc.events[-1] in ("shutdown", f"{what}-cancelled"), proc.events


@pytest.mark.rule("skirr-stop-bounded-cancel-ignored")
@pytest.mark.parametrize("loop", _proc.LOOPS)
@pytest.mark.parametrize("phase", ["startup", "shutdown"])
def test_lifespan_ignoring_cancellation_ends_the_process_1_s_later(tmp_path, loop, phase):
    """Lifespan startup (stopped during it) or shutdown that never answers and ignores its
    cancellation: after its bound (startup: --timeout-graceful-shutdown, 1 s; shutdown: that
    plus 4 s) it is cancelled with its line, 1 s later one ERROR line names the lifespan task,
    exit 1: within the supervisor's kill bound of graceful + 5 s."""
    port = _proc.free_port()
    args = [f"robust4:stubborn_{phase}", "--loop", loop, "--port", str(port),
            "--timeout-graceful-shutdown", "1"]
    with _proc.Skirr(args, tmp_path) as proc:
        if phase == "startup":
            _wait_event(proc, "startup")
        else:
            proc.wait_accepting(port)
        status, took, stderr = _stopped(proc)
    assert status == 1, stderr
    if phase == "startup":
        assert 2.0 <= took < 4.0, f"exited {took:.2f} s after the signal:\n{stderr}"
        assert stderr == ("INFO:     Started server process [PID]\n"
                          "INFO:     Waiting for application startup.\n" + STARTUP_LINE
                          + GRACE_LINE.format(kind="lifespan")), stderr
    else:
        assert 5.5 <= took < 6.0 + 1.5, f"exited {took:.2f} s after the signal:\n{stderr}"
        assert stderr.endswith(
            "INFO:     Waiting for application shutdown.\n"
            "ERROR:    Application shutdown did not complete within 1 s "
            "(--timeout-graceful-shutdown plus 4 s): cancelling it\n"
            + FINISHED + GRACE_LINE.format(kind="lifespan")), stderr
    assert proc.events == ["startup", *(["shutdown"] if phase == "shutdown" else []),
                           f"{phase}-cancelled"], proc.events


@pytest.mark.rule("skirr-stop-bounded-cancel-ignored")
@pytest.mark.parametrize("signum, loop", [(signal.SIGTERM, "asyncio"), (signal.SIGINT, "uvloop"),
                                          (signal.SIGINT, "asyncio"), (signal.SIGTERM, "uvloop")])
def test_a_signal_while_cancelled_tasks_are_waited_for_exits_at_once(tmp_path, signum, loop):
    """While skirr waits the 1 s for a cancelled request that ignores it, a second SIGTERM or
    SIGINT ends the wait at once: one WARNING 'Forced exit' line, exit 1 (the issue: 143 with
    nothing said, or 1 with asyncio's 'Task was destroyed but it is pending!')."""
    port = _proc.free_port()
    args = ["robust4:stubborn", "--loop", loop, "--port", str(port),
            "--timeout-graceful-shutdown", "1", "--no-access-log"]
    with _proc.Skirr(args, tmp_path) as proc:
        with _stubborn_unit(proc, port, "http"):
            proc.proc.send_signal(signal.SIGTERM)
            proc.wait_stderr("INFO:     Application shutdown complete.\n")
            time.sleep(0.2)  # into the 1 s wait (a signal before it is a forced exit too)
            status, took, stderr = _stopped(proc, signum)
    assert status == 1, stderr
    assert took < 0.9, f"exited {took:.2f} s after the second signal:\n{stderr}"
    assert stderr.endswith(SHUTDOWN_DONE + "WARNING:  Forced exit: 1 application task(s) still "
                           "running after their cancellation (1 http)\n"), stderr
    assert "Task was destroyed" not in stderr, stderr


@pytest.mark.rule("skirr-stop-bounded-cancel-ignored")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_supervisor_worker_ignoring_cancellation_ends_itself_before_the_kill(tmp_path, loop):
    """--workers 2, a request ignoring its cancellation in one worker: SIGTERM to the supervisor;
    that worker logs the line and ends itself with status 1 about 2 s later (drain 1 s + 1 s),
    well before the supervisor's kill (graceful + 5 s); the other worker exits 0, the
    supervisor 1."""
    port = _proc.free_port()
    args = ["robust4:stubborn", "--loop", loop, "--port", str(port), "--workers", "2",
            "--timeout-graceful-shutdown", "1", "--no-access-log"]
    with _proc.Skirr(args, tmp_path) as proc:
        _wait_until(lambda: proc.stderr.count("skirr running on") == 2, "both workers serve")
        with _stubborn_unit(proc, port, "http"):
            status, took, stderr = _stopped(proc)
    assert status == 1, stderr
    assert 2.0 <= took < 4.0, f"exited {took:.2f} s after the signal:\n{stderr}"
    assert stderr.count(GRACE_LINE.format(kind="http")) == 1, stderr
    assert re.search(r"INFO:     Worker \[\d+\] stopped \(exit status 1\)\n", stderr), stderr
    assert re.search(r"INFO:     Worker \[\d+\] stopped \(exit status 0\)\n", stderr), stderr
    assert "killing" not in stderr.lower() and "SIGKILL" not in stderr, stderr


@pytest.mark.rule("skirr-lifespan-failed-after-startup")
@pytest.mark.parametrize("loop", _proc.LOOPS)
@pytest.mark.parametrize("app, line", [
    ("exits_after_startup", "ERROR:    the application raised SystemExit(4) in the 'lifespan' "
                            "protocol after startup completed\n"),
    ("fails_after_startup", "ERROR:    Exception in 'lifespan' protocol\n"),
])
def test_lifespan_failing_after_startup_says_why_the_exit_status_is_1(tmp_path, loop, app, line):
    """The lifespan task raises SystemExit(4) (or RuntimeError) after lifespan.startup.complete:
    logged as after startup (not 'during startup'), requests are still served, and SIGTERM exits
    1 with lifespan shutdown skipped and one line saying so."""
    port = _proc.free_port()
    args = [f"robust4:{app}", "--loop", loop, "--port", str(port), "--no-access-log"]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        proc.wait_event("exit")
        proc.wait_stderr(line)
        r = _proc.request(port, "GET", "/")
        assert (r.status, r.body) == (200, b"ok")
        status, took, stderr = _stopped(proc)
    assert status == 1, stderr
    assert took < 2.0, f"exited {took:.2f} s after the signal:\n{stderr}"
    assert stderr.count(line) == 1, stderr
    assert "during startup" not in stderr, stderr
    assert stderr.endswith(
        "INFO:     Shutting down\n"
        "ERROR:    Application shutdown skipped: the 'lifespan' task failed after startup "
        "(exit status 1)\n" + FINISHED), stderr
    assert proc.events == ["startup", "exit"]


@pytest.mark.rule("skirr-stop-bounded-cancel-ignored")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_task_of_the_app_ignoring_cancellation_ends_the_process_1_s_later(tmp_path, loop):
    """A task the application created itself (not a request's) that ignores cancellation: the
    stop is clean up to lifespan shutdown, then the task is cancelled (as asyncio.run does) and
    1 s later one ERROR line names it ('other') and the process exits 1."""
    port = _proc.free_port()
    args = ["robust4:stubborn", "--loop", loop, "--port", str(port),
            "--timeout-graceful-shutdown", "1", "--no-access-log"]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        r = _proc.request(port, "GET", "/spawn")
        assert (r.status, r.body) == (200, b"ok")
        status, took, stderr = _stopped(proc)
    assert status == 1, stderr
    assert 1.0 <= took < 2.5, f"exited {took:.2f} s after the signal:\n{stderr}"
    assert stderr.endswith("INFO:     Shutting down\n" + SHUTDOWN_DONE
                           + GRACE_LINE.format(kind="other")), stderr
    assert proc.events == ["startup", "spawned", "shutdown", "other-cancelled"], proc.events


@pytest.mark.rule("skirr-stop-bounded-cancel-ignored")
def test_request_shutdown_while_cancelled_tasks_are_waited_for_returns_1_at_once(loop_name,
                                                                                   monkeypatch):
    """In process (Server.run() in a thread: no signal handlers): a lifespan startup ignoring
    its cancellation, request_shutdown() (startup bound 0.3 s, cancelled), then a second
    request_shutdown() during the wait for it: run() returns 1 at once with the Forced exit line.
    The wait (CANCEL_GRACE, 1 s) is 5 s here: a loaded machine's second request still lands in
    it, and 'at once' (under 0.7 s) is far from its end."""
    import skirr.server
    from test_asgi_lifespan import Unstarted

    monkeypatch.setattr(skirr.server, "CANCEL_GRACE", 5.0)

    entered = Recorder()

    async def app(scope, receive, send):
        await receive()
        entered.put("startup")
        while True:
            try:
                await asyncio.sleep(1000)
            except asyncio.CancelledError:
                entered.put("cancelled")

    run = Unstarted(app, loop_name, lifespan="on", timeout_graceful_shutdown=0.3)
    entered.wait(1)
    run.server.request_shutdown()
    entered.wait(2)  # cancelled: the wait began
    time.sleep(0.2)
    t0 = time.monotonic()
    run.server.request_shutdown()
    assert run.join() == 1
    took = time.monotonic() - t0
    assert took < 0.7, f"run() returned {took:.2f} s after the second request"
    assert run.handler.texts(logging.WARNING) == [
        "Application startup did not complete within 0.3 s (--timeout-graceful-shutdown) of "
        "the shutdown request: cancelling it, not serving",
        "Forced exit: 1 application task(s) still running after their cancellation "
        "(1 lifespan)"]


@pytest.mark.rule("skirr-stop-bounded-cancel-ignored")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_async_generator_whose_clean_up_never_ends_is_abandoned_1_s_later(tmp_path, loop):
    """An async generator of the app left open, whose finally never ends: the loop's
    shutdown_asyncgens() (asyncio.run: unbounded) gets 1 s, then one ERROR line and exit 1."""
    port = _proc.free_port()
    args = ["robust4:endless_agen", "--loop", loop, "--port", str(port), "--no-access-log"]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        r = _proc.request(port, "GET", "/")
        assert (r.status, r.body) == (200, b"ok")
        status, took, stderr = _stopped(proc)
    assert status == 1, stderr
    assert 1.0 <= took < 2.5, f"exited {took:.2f} s after the signal:\n{stderr}"
    assert stderr.endswith(
        SHUTDOWN_DONE + "ERROR:    Async generator(s) did not close within 1 s: exiting\n"), stderr
    assert "Task was destroyed" not in stderr, stderr
    assert proc.events[:3] == ["startup", "shutdown", "agen-closing"], proc.events
