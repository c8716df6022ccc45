"""Logging as an operator switching from uvicorn sees it (issue 36): uvicorn's logging
configuration with the word swapped, its startup and shutdown lines, access lines on stdout and
the rest on stderr; a client leaving a streaming response is not an application failure; a
failed lifespan startup prints one traceback; a --log-config that fails names its cause.

uvicorn is installed in the test venv (Makefile TEST_DEPS) as the oracle: its LOGGING_CONFIG,
its formatters, and its own output for the same failing application."""
from __future__ import annotations

import json
import logging
import sys
import time

import h11
import pytest

import _proc
from conftest import Recorder, http_request, record_text
from test_metrics import scrape

EXAMPLES = _proc.APPS_DIR.parent.parent / "examples"


def get(port: int, target: str = "/", raw: bytes | None = None) -> tuple[int, str]:
    """One request from a socket whose address we know: (status, "127.0.0.1:PORT")."""
    with _proc.connect(port) as sock:
        here = "%s:%d" % sock.getsockname()[:2]
        if raw is not None:
            sock.sendall(raw)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
            return int(data.split(b" ", 2)[1]), here
        conn = h11.Connection(h11.CLIENT)
        _proc.send_request(sock, conn, "GET", target)
        return _proc.read_response(sock, conn).status, here


def uvicorn_config_swapped(replacement: str = "skirr") -> dict:
    """uvicorn's documented default configuration with the word ``uvicorn`` replaced."""
    from uvicorn.config import LOGGING_CONFIG

    return json.loads(json.dumps(LOGGING_CONFIG).replace("uvicorn", replacement))


# ---- item 9: uvicorn's configuration, streams and lines ----------------------------------------

@pytest.mark.rule("skirr-log-uvicorn-config", "skirr-log-streams", "skirr-log-server-lines")
@_proc.each_loop
@pytest.mark.parametrize("config", ["default", "uvicorn-swapped"])
def test_uvicorn_config_with_the_word_swapped(tmp_path, loop, config):
    """skirr's default and uvicorn's LOGGING_CONFIG with 'uvicorn' -> 'skirr' as --log-config
    give the same lines on the same streams: access lines on stdout, the rest on stderr, the
    startup and shutdown lines in uvicorn's words."""
    args = ["basic:app", "--loop", loop, "--port", str(port := _proc.free_port())]
    if config != "default":
        cfg = tmp_path / "log.json"
        cfg.write_text(json.dumps(uvicorn_config_swapped()))
        args += ["--log-config", str(cfg)]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        status, me = get(port, "/items?id=3")
        assert status == 200
        status, me2 = get(port, raw=b"GET / HTTP/1.1\r\nHost: x\r\n" +
                          b"".join(b"X-%d: v\r\n" % i for i in range(101)) + b"\r\n")
        assert status == 431
        assert proc.stop() == 0
        pid = proc.proc.pid
        out, err = proc.stdout, proc.stderr
    assert out.splitlines() == [
        f'INFO:     {me} - "GET /items?id=3 HTTP/1.1" 200 OK',
        f'INFO:     {me2} - "-" 431 Request Header Fields Too Large (refused: too many header '
        'fields)',
    ], out
    assert err.splitlines() == [
        f"INFO:     Started server process [{pid}]",
        "INFO:     Waiting for application startup.",
        "INFO:     Application startup complete.",
        f"INFO:     skirr running on http://127.0.0.1:{port} (Press CTRL+C to quit)",
        "INFO:     Shutting down",
        "INFO:     Waiting for application shutdown.",
        "INFO:     Application shutdown complete.",
        f"INFO:     Finished server process [{pid}]",
    ], err


def _record(name: str, level: int, msg: str, args: tuple | None = None) -> logging.LogRecord:
    rec = logging.LogRecord(name, level, __file__, 1, msg, args, None)
    return rec


@pytest.mark.rule("skirr-log-uvicorn-config")
@pytest.mark.parametrize("use_colors", [False, True])
def test_formatters_format_as_uvicorns(use_colors):
    """skirr.logging's formatters give uvicorn's formatters' text, coloured or not, for every
    level (levelprefix, color_message) and for access records (client_addr, request_line, the
    status with its phrase coloured by class, the request line bold)."""
    import uvicorn.logging as ul

    import skirr.logging as sl

    fmt = "%(levelprefix)s %(message)s"
    for level in (5, logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR,
                  logging.CRITICAL):
        rec = _record("skirr.error", level, "Started server process [%d]", (42,))
        rec.color_message = "Started server process [\x1b[36m%d\x1b[0m]"
        want = ul.DefaultFormatter(fmt, use_colors=use_colors).format(rec)
        assert sl.DefaultFormatter(fmt, use_colors=use_colors).format(rec) == want
    afmt = '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s'
    for status in (101, 200, 304, 404, 500):
        urec = _record("uvicorn.access", logging.INFO, '%s - "%s %s HTTP/%s" %d',
                       ("127.0.0.1:5000", "GET", "/a?b=1", "1.1", status))
        want = ul.AccessFormatter(afmt, use_colors=use_colors).format(urec)
        srec = _record("skirr.access", logging.INFO, "the line")
        srec.__dict__.update(client_addr="127.0.0.1:5000", request_line="GET /a?b=1 HTTP/1.1",
                             status_code=status)
        assert sl.AccessFormatter(afmt, use_colors=use_colors).format(srec) == want, status
        assert srec.status_code == status  # the record keeps the number


@pytest.mark.rule("skirr-log-streams")
@_proc.each_loop
def test_custom_access_format_on_stdout(tmp_path, loop):
    """A gunicorn or JSON --access-log-format line is the whole line on stdout, through the
    swapped uvicorn configuration as through the default."""
    cfg = tmp_path / "log.json"
    cfg.write_text(json.dumps(uvicorn_config_swapped()))
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port), "--log-config", str(cfg),
                      "--access-log-format", '%(h)s "%(r)s" %(s)s'], tmp_path) as proc:
        proc.wait_accepting(port)
        status, me = get(port, "/x")
        assert status == 200
        assert proc.stop() == 0
        out, err = proc.stdout, proc.stderr
    assert out == f'127.0.0.1 "GET /x HTTP/1.1" 200\n'
    assert '"GET /x' not in err


@pytest.mark.rule("skirr-log-streams")
@_proc.each_loop
def test_root_only_log_config_gets_every_line(tmp_path, loop):
    """A --log-config that configures only the root logger (as many JSON-logging setups do)
    gets skirr's lines, server and access, through its own handler and format: skirr adds no
    handler of its own (uvicorn's lines reach such a configuration the same way)."""
    cfg = tmp_path / "root.json"
    cfg.write_text(json.dumps({
        "version": 1, "disable_existing_loggers": False,
        "formatters": {"f": {"format": "ROOT %(name)s %(levelname)s %(message)s"}},
        "handlers": {"h": {"class": "logging.StreamHandler", "formatter": "f",
                           "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["h"], "level": "INFO"},
    }))
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port), "--log-config", str(cfg)],
                     tmp_path) as proc:
        proc.wait_accepting(port)
        proc.wait_stderr("(Press CTRL+C to quit)")
        status, me = get(port, "/x")
        assert status == 200
        proc.wait_stderr('"GET /x HTTP/1.1"')
        assert proc.stop() == 0
        pid = proc.proc.pid
        out, err = proc.stdout, proc.stderr
    assert out == ""
    lines = err.splitlines()
    assert lines[0] == f"ROOT skirr.error INFO Started server process [{pid}]", err
    assert f'ROOT skirr.access INFO {me} - "GET /x HTTP/1.1" 200 OK' in lines, err
    assert lines[-1] == f"ROOT skirr.error INFO Finished server process [{pid}]", err
    assert all(line.startswith("ROOT skirr.") for line in lines), err


@pytest.mark.rule("skirr-log-level-over-config")
@_proc.each_loop
@pytest.mark.parametrize("level", [None, "warning", "trace"])
def test_log_level_wins_over_log_config(tmp_path, loop, level):
    """uvicorn's configuration swapped (skirr.error and skirr.access at INFO) as --log-config:
    without --log-level its levels stand; --log-level warning silences the INFO lines of both
    loggers, --log-level trace shows the connection lines (uvicorn applies its --log-level after
    its --log-config the same way)."""
    cfg = tmp_path / "log.json"
    cfg.write_text(json.dumps(uvicorn_config_swapped()))
    port = _proc.free_port()
    args = ["basic:app", "--loop", loop, "--port", str(port), "--log-config", str(cfg)]
    if level:
        args += ["--log-level", level]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        status, me = get(port, "/x")
        assert status == 200
        assert proc.stop() == 0
        pid = proc.proc.pid
        out, err = proc.stdout, proc.stderr
    access = f'INFO:     {me} - "GET /x HTTP/1.1" 200 OK'
    if level == "warning":
        assert (out, err) == ("", ""), (out, err)
        return
    assert out.splitlines() == [access], out
    assert f"INFO:     Started server process [{pid}]" in err.splitlines(), err
    trace = [line for line in err.splitlines() if line.startswith("TRACE:")]
    if level is None:
        assert trace == [], err
    else:
        assert f"TRACE:    {me} - HTTP connection made" in trace, err


# ---- item 1: a client leaving is not an application failure ------------------------------------

@pytest.mark.rule("skirr-disconnect-cause-not-logged")
@_proc.each_loop
def test_example_stream_client_leaves(tmp_path, loop):
    """The repository's example app (FastAPI/Starlette StreamingResponse) streaming when the
    client leaves: Starlette turns send()'s ClientDisconnected into its own ClientDisconnect,
    which reaches skirr; that is logged at debug, never at error (uvicorn logs nothing)."""
    port, mport = _proc.free_port(), _proc.free_port()
    with _proc.Skirr(["app:app", "--loop", loop, "--port", str(port), "--log-level", "debug",
                      "--metrics-port", str(mport)], tmp_path, cwd=EXAMPLES) as proc:
        proc.wait_accepting(port)
        with _proc.connect(port) as sock:
            here = "%s:%d" % sock.getsockname()[:2]
            sock.sendall(b"GET /stream?count=100&delay=0.05 HTTP/1.1\r\nHost: x\r\n\r\n")
            got = b""
            while b"chunk 1\n" not in got:
                chunk = sock.recv(65536)
                assert chunk, got
                got += chunk
        err = proc.wait_stderr("Client disconnected: ")
        counted = disconnects(scrape(mport))
        assert proc.stop() == 0
        err, out = proc.stderr, proc.stdout
    assert ("DEBUG:    Client disconnected: the application ended with ClientDisconnect()"
            in err.splitlines()), err
    assert "ERROR" not in err and "Traceback" not in err, err
    assert f'INFO:     {here} - "GET /stream?count=100&delay=0.05 HTTP/1.1" 200 OK' in out.splitlines()
    assert counted == counts(http_absorbed=1)


def disconnects(m: dict) -> dict:
    """skirr_client_disconnects_total's samples from a scrape: {(kind, app_exception): n}."""
    return {(dict(labels)["kind"], dict(labels)["app_exception"]): n
            for (name, labels), n in m.items() if name == "skirr_client_disconnects_total"}


def counts(**nonzero: int) -> dict:
    """Every (kind, app_exception) pair, 0 unless given as kind_app=n (http_absorbed=1)."""
    out = {(k, a): 0 for k in ("http", "websocket") for a in ("none", "absorbed", "error")}
    for key, n in nonzero.items():
        kind, app = key.split("_")
        out[(kind, app)] = n
    return out


def _wait_counted(mport: int, timeout: float = 5.0) -> dict:
    """The disconnect counters once one is counted (the count follows the app's end and its log
    line in the same step), or as they are after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        got = disconnects(scrape(mport))
        if sum(got.values()) or time.monotonic() > deadline:
            return got
        time.sleep(0.02)


def _streaming_app(seen: Recorder, finish):
    """Streams 64 KiB chunks until send() raises, then ``finish(exc)`` (raises)."""
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        deadline = time.monotonic() + 10.0
        try:
            while time.monotonic() < deadline:
                await send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})
        except OSError as exc:
            seen.put(exc)
            finish(exc)
        seen.put(None)
    return app


def _reraise(exc):
    raise exc


def _cause(exc):
    raise RuntimeError("stream aborted") from exc


def _context(exc):
    raise RuntimeError("stream aborted")


def _cleanup_bug(exc):
    try:
        raise exc
    finally:
        {}["session"]  # a cleanup bug while the disconnect propagates: KeyError, context only


def _starlette(exc):
    from starlette.requests import ClientDisconnect
    raise ClientDisconnect()  # as StreamingResponse does: `except OSError: raise ClientDisconnect()`


def _anyio(exc):
    import anyio
    raise anyio.BrokenResourceError()


def _swallow(exc):
    pass


def _group(exc):
    raise ExceptionGroup("unhandled errors in a TaskGroup", [exc])


def _group_of_cause(exc):
    try:
        _cause(exc)
    except RuntimeError as inner:
        raise ExceptionGroup("unhandled errors in a TaskGroup", [ValueError("other"), inner])


def _streamed_to_a_leaving_client(serve, finish) -> tuple:
    seen = Recorder()
    mport = _proc.free_port()
    with serve(_streaming_app(seen, finish), log_level="debug", metrics_port=mport) as srv:
        c = srv.connect()
        c.send(http_request())
        c.read_until(b"\r\n\r\n")
        c.read_exact(1000)
        c.close()
        exc = seen.wait(1, timeout=15)[0]
        counted = _wait_counted(mport)
    records = [r for r in srv._error_log.records if r.name == "skirr.error"]
    return exc, records, srv.errors(), counted


@pytest.mark.rule("skirr-disconnect-cause-not-logged", "skirr-metrics-disconnects")
@pytest.mark.parametrize("finish", [_reraise, _cause, _group, _group_of_cause, _starlette, _anyio],
                         ids=["same", "cause", "group", "group-member-cause", "starlette-context",
                              "anyio-context"])
def test_wrapped_disconnect_is_the_clients_departure(serve, finish):
    """An exception that is the ClientDisconnected skirr raised after the client left or a
    wrapper of it (its __cause__, an exception group's members, at any depth; Starlette's
    ClientDisconnect or anyio's BrokenResourceError raised while handling it, its __context__):
    one debug line naming what the app raised, nothing at error, one disconnect counted as
    absorbed."""
    import skirr

    exc, records, errors, counted = _streamed_to_a_leaving_client(serve, finish)
    assert isinstance(exc, skirr.ClientDisconnected), repr(exc)
    assert errors == [], [record_text(r) for r in errors]
    debug = [r for r in records if r.getMessage().startswith("Client disconnected")]
    assert len(debug) == 1 and debug[0].levelno == logging.DEBUG, [
        record_text(r) for r in records]
    what = {_reraise: "ClientDisconnected('client disconnected')",
            _cause: "RuntimeError('stream aborted')",
            _group: "ExceptionGroup('unhandled errors in a TaskGroup', "
                    "[ClientDisconnected('client disconnected')])",
            _group_of_cause: "ExceptionGroup('unhandled errors in a TaskGroup', "
                             "[ValueError('other'), RuntimeError('stream aborted')])",
            _starlette: "ClientDisconnect()",
            _anyio: "BrokenResourceError()"}[finish]
    assert debug[0].getMessage() == f"Client disconnected: the application ended with {what}"
    assert counted == counts(http_absorbed=1)


@pytest.mark.rule("skirr-disconnect-cause-not-logged", "skirr-metrics-disconnects")
@pytest.mark.parametrize("finish", [_context, _cleanup_bug], ids=["context", "cleanup-bug"])
def test_raised_while_handling_the_disconnect_is_an_app_error(serve, finish):
    """An exception raised while handling the ClientDisconnected (its __context__ only, not a
    known disconnect wrapper: a RuntimeError in the except block, a KeyError of a cleanup bug in
    a finally block) is the application's own failure: 'Exception in ASGI application' at error
    with the whole chain, nothing at debug; the disconnect is counted with app_exception
    'error'."""
    import skirr

    exc, records, errors, counted = _streamed_to_a_leaving_client(serve, finish)
    assert isinstance(exc, skirr.ClientDisconnected), repr(exc)
    assert [(r.levelno, r.getMessage()) for r in records
            if r.getMessage().startswith(("Client disc", "Exception"))] == [
        (logging.ERROR, "Exception in ASGI application")]
    text = record_text(errors[0])
    last = {_context: "RuntimeError: stream aborted", _cleanup_bug: "KeyError: 'session'"}[finish]
    assert text.rstrip().splitlines()[-1] == last, text
    assert "skirr._native.ClientDisconnected: client disconnected" in text, text
    assert "During handling of the above exception, another exception occurred:" in text, text
    assert counted == counts(http_error=1)


@pytest.mark.rule("skirr-metrics-disconnects")
def test_swallowed_disconnect_is_counted_and_not_logged(serve):
    """The app catches the ClientDisconnected and returns: nothing logged, one disconnect counted
    with app_exception 'none'; a completed response before it is not a disconnect."""
    exc, records, errors, counted = _streamed_to_a_leaving_client(serve, _swallow)
    assert errors == [] and [r for r in records if r.getMessage().startswith(
        ("Client disc", "Exception", "ASGI callable"))] == [], [record_text(r) for r in records]
    assert counted == counts(http_none=1)


@pytest.mark.rule("skirr-disconnect-cause-not-logged", "skirr-metrics-disconnects")
def test_real_error_after_a_disconnect_is_logged(serve):
    """The app swallows the ClientDisconnected, then fails on its own (no chain to it): an
    application failure, logged at error with its traceback."""
    seen = Recorder()

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        deadline = time.monotonic() + 10.0
        try:
            while time.monotonic() < deadline:
                await send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})
        except OSError as exc:
            seen.put(exc)
        raise ValueError("bug after the disconnect 7e1")

    mport = _proc.free_port()
    with serve(app, log_level="debug", metrics_port=mport) as srv:
        c = srv.connect()
        c.send(http_request())
        c.read_until(b"\r\n\r\n")
        c.read_exact(1000)
        c.close()
        seen.wait(1, timeout=15)
        counted = _wait_counted(mport)
    errors = srv.errors()
    assert [r.getMessage() for r in errors] == ["Exception in ASGI application"]
    assert "ValueError: bug after the disconnect 7e1" in record_text(errors[0])
    assert not [r for r in srv._error_log.records if r.getMessage().startswith("Client disc")]
    assert counted == counts(http_error=1)


@pytest.mark.rule("skirr-disconnect-cause-not-logged", "skirr-metrics-disconnects")
def test_apps_own_client_disconnected_is_logged(serve):
    """A ClientDisconnected the application raised itself, the client still there, is not one
    skirr raised: an application failure (500, logged at error)."""
    import skirr

    async def app(scope, receive, send):
        await receive()
        raise RuntimeError("wrapped") from skirr.ClientDisconnected("app-own-3d9")

    mport = _proc.free_port()
    with serve(app, log_level="debug", metrics_port=mport) as srv:
        assert srv.get().status == 500
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not srv.errors():
            time.sleep(0.02)
        counted = disconnects(scrape(mport))
    errors = srv.errors()
    assert [r.getMessage() for r in errors] == ["Exception in ASGI application"]
    assert "app-own-3d9" in record_text(errors[0])
    assert counted == counts()  # the client did not leave: no disconnect


# ---- item 4: a failed lifespan startup prints one traceback ------------------------------------

FAILING_STARTUP = '''\
from contextlib import asynccontextmanager

from starlette.applications import Starlette


@asynccontextmanager
async def lifespan(app):
    raise RuntimeError("database unreachable")
    yield


app = Starlette(lifespan=lifespan)
'''


@pytest.mark.rule("skirr-lifespan-failed-once")
@_proc.each_loop
def test_failed_startup_one_traceback_as_uvicorn(tmp_path, loop):
    """Starlette answers lifespan.startup.failed with the traceback as its message and re-raises:
    skirr prints that traceback once and one summary line, exactly uvicorn's stderr."""
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    (app_dir / "failing.py").write_text(FAILING_STARTUP)
    runs = {}
    for name, command, extra in (("skirr", None, ["--loop", loop]),
                                 ("uvicorn", [sys.executable, "-m", "uvicorn"], [])):
        run_dir = tmp_path / name
        run_dir.mkdir()
        with _proc.Skirr(["failing:app", "--port", str(_proc.free_port()), *extra], run_dir,
                         cwd=app_dir, command=command) as proc:
            status = proc.wait()
            runs[name] = (status, proc.stderr.replace(f"[{proc.proc.pid}]", "[PID]"))
    status, err = runs["skirr"]
    assert status == 1, err
    assert err.count("Traceback (most recent call last):") == 1, err
    lines = err.splitlines()
    assert lines[:3] == ["INFO:     Started server process [PID]",
                         "INFO:     Waiting for application startup.",
                         "ERROR:    Traceback (most recent call last):"], err
    assert lines[-3:] == ["RuntimeError: database unreachable", "",  # the message's own "\n"
                          "ERROR:    Application startup failed. Exiting."], err
    assert err == runs["uvicorn"][1], (err, runs["uvicorn"][1])


# ---- item 6: a --log-config that fails names its cause ---------------------------------------

@pytest.mark.rule("skirr-log-config")
@_proc.each_loop
def test_log_config_naming_a_missing_formatter_module(tmp_path, loop):
    """uvicorn's configuration naming a formatter whose module is not installed: the cause, not
    only logging's 'Unable to configure formatter', and a usage error (exit 2)."""
    cfg = tmp_path / "log.json"
    cfg.write_text(json.dumps(uvicorn_config_swapped("notinstalled")))
    with _proc.Skirr(["basic:app", "--loop", loop, "--log-config", str(cfg)], tmp_path) as proc:
        assert proc.wait() == 2
        err = proc.stderr
    assert err == (f"skirr: error: --log-config {cfg}: Unable to configure formatter 'default': "
                   "Cannot resolve 'notinstalled.logging.DefaultFormatter': No module named "
                   "'notinstalled'\n")


@pytest.mark.rule("skirr-disconnect-cause-not-logged", "skirr-metrics-disconnects")
@pytest.mark.parametrize("finish", [_reraise, _cause, _group, _cleanup_bug, _swallow],
                         ids=["same", "cause", "group", "cleanup-bug", "swallowed"])
def test_websocket_send_after_close_wrapped(serve, finish):
    """The same for a WebSocket session: send() after the client closed raises
    ClientDisconnected, which the app re-raises or wraps (one debug line, nothing at error,
    counted as absorbed), lets a cleanup bug replace (at error, counted as error) or swallows
    (nothing logged, counted as none)."""
    from websockets.sync.client import connect

    import skirr

    seen = Recorder()

    async def app(scope, receive, send):
        await receive()
        await send({"type": "websocket.accept"})
        seen.put(await receive())
        try:
            await send({"type": "websocket.send", "text": "late"})
        except OSError as exc:
            seen.put(exc)
            finish(exc)

    mport = _proc.free_port()
    with serve(app, log_level="debug", metrics_port=mport) as srv:
        with connect(f"ws://127.0.0.1:{srv.port}/", open_timeout=10, close_timeout=10) as ws:
            ws.close(1001)
        event, exc = seen.wait(2, timeout=10)[:2]
        assert event == {"type": "websocket.disconnect", "code": 1001, "reason": ""}
        assert isinstance(exc, skirr.ClientDisconnected), repr(exc)
        counted = _wait_counted(mport)
    logged = [(r.levelno, r.getMessage()) for r in srv._error_log.records
              if r.getMessage().startswith(("Client disc", "Exception"))]
    if finish is _cleanup_bug:
        assert logged == [(logging.ERROR, "Exception in ASGI application")]
        assert record_text(srv.errors()[0]).rstrip().endswith("KeyError: 'session'")
        assert counted == counts(websocket_error=1)
        return
    if finish is _swallow:
        assert logged == [] and srv.errors() == []
        assert counted == counts(websocket_none=1)
        return
    assert srv.errors() == [], [record_text(r) for r in srv.errors()]
    what = {_reraise: "ClientDisconnected('client disconnected')",
            _cause: "RuntimeError('stream aborted')",
            _group: "ExceptionGroup('unhandled errors in a TaskGroup', "
                    "[ClientDisconnected('client disconnected')])"}[finish]
    assert logged == [(logging.DEBUG, f"Client disconnected: the application ended with {what}")]
    assert counted == counts(websocket_absorbed=1)


@pytest.mark.rule("skirr-metrics-disconnects")
@pytest.mark.parametrize("who", ["app", "client-after-app"])
def test_websocket_closed_by_the_app_is_not_a_disconnect(serve, who):
    """A session the application closes (websocket.close, the client answering its Close) is
    not a client disconnect; a session the client closes first while the app waits in
    receive() is one (app_exception 'none' when the app then returns)."""
    from websockets.sync.client import connect

    seen = Recorder()

    async def app(scope, receive, send):
        await receive()
        await send({"type": "websocket.accept"})
        if who == "app":
            await send({"type": "websocket.close", "code": 1000})
        seen.put(await receive())

    mport = _proc.free_port()
    with serve(app, log_level="debug", metrics_port=mport) as srv:
        with connect(f"ws://127.0.0.1:{srv.port}/", open_timeout=10, close_timeout=10) as ws:
            if who == "app":
                with pytest.raises(Exception):
                    ws.recv(timeout=10)
            else:
                ws.close(1000)
        event = seen.wait(1, timeout=10)[0]
        assert event["type"] == "websocket.disconnect"
        deadline = time.monotonic() + 5
        while (m := scrape(mport))[("skirr_requests_in_flight", ())] and time.monotonic() < deadline:
            time.sleep(0.02)  # the app's call ends after its receive() returned
        counted = disconnects(m)
    assert srv.errors() == []
    assert counted == (counts() if who == "app" else counts(websocket_none=1))
