"""ASGI lifespan 2.0 in process (spec/lifespan.toml): the lifespan scope, the order of its
messages around the requests, and how startup and shutdown failures end ``Server.run()``.
The CLI-level cases (exit status, log lines, never accepting) are in test_lifespan.py.
"""
import asyncio
import logging
import threading
import time

import pytest

from conftest import Recorder, http_request, record_text

rule = pytest.mark.rule


def lifespan_app(log: Recorder, startup=None, shutdown=None):
    """Records the lifespan scope and messages and every request; startup/shutdown name the
    reply type ("complete" by default, or "failed")."""

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            log.put(("scope", dict(scope)))
            while True:
                msg = await receive()
                log.put(msg["type"])
                if msg["type"] == "lifespan.startup":
                    scope["state"]["ready"] = True
                    reply = startup or "complete"
                    await send({"type": f"lifespan.startup.{reply}", **({"message": "no db"} if reply == "failed" else {})})
                    if reply == "failed":
                        return
                else:
                    reply = shutdown or "complete"
                    await send({"type": f"lifespan.shutdown.{reply}", **({"message": "no flush"} if reply == "failed" else {})})
                    return
        await receive()
        log.put(("request", scope["path"], dict(scope["state"])))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


class Unstarted:
    """skirr.Server in a thread without the fixture's start/stop checks (for failing startups)."""

    def __init__(self, app, loop_name, **config):
        import skirr

        self.server = skirr.Server(skirr.Config(app, host="127.0.0.1", port=0, loop=loop_name, **config))
        self.result = []
        self.handler = _Capture()
        logging.getLogger("skirr.error").addHandler(self.handler)
        self.thread = threading.Thread(target=lambda: self.result.append(self.server.run()), daemon=True)
        self.thread.start()

    def wait_started(self, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not self.server.started.is_set():
            assert time.monotonic() < deadline and self.thread.is_alive(), "did not start"
            time.sleep(0.02)

    def join(self, timeout=10.0):
        self.thread.join(timeout)
        logging.getLogger("skirr.error").removeHandler(self.handler)
        assert not self.thread.is_alive(), "Server.run() did not return"
        return self.result[0]


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)

    def texts(self, level=logging.ERROR):
        return [record_text(r) for r in self.records if r.levelno >= level]


@rule("ASGI-lifespan-2.0-scope")
def test_lifespan_scope(serve):
    """The lifespan scope: type "lifespan", asgi {"version": "3.0", "spec_version": "2.0"} and
    an empty state dict the app may fill."""
    log = Recorder()
    with serve(lifespan_app(log), lifespan="on"):
        pass
    kind, scope = log.wait(1)[0]
    assert kind == "scope"
    assert scope == {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"},
                     "state": {"ready": True}}


@rule("ASGI-lifespan-2.0-startup-before-serving", "ASGI-lifespan-2.0-shutdown-after-requests")
def test_message_order_around_requests(serve):
    """lifespan.startup is received once, before any request is served; lifespan.shutdown once,
    after the last; the requests see the state startup stored."""
    log = Recorder()
    with serve(lifespan_app(log), lifespan="on") as srv:
        assert srv.get("/a").status == 200
        assert srv.get("/b").status == 200
        assert [x for x in log.items if x != "lifespan.shutdown"] == log.items
    items = log.wait(5)
    assert [x if isinstance(x, str) else x[:2] for x in items] == [
        ("scope", log.items[0][1]), "lifespan.startup", ("request", "/a"), ("request", "/b"),
        "lifespan.shutdown"]
    assert items[2][2] == items[3][2] == {"ready": True}


@rule("ASGI-lifespan-2.0-startup-failed")
def test_startup_failed_ends_run_with_1(loop_name):
    """lifespan.startup.failed: the app's message is logged at ERROR, Server.run() returns 1,
    the server never starts (never accepts) and no request or shutdown message follows."""
    log = Recorder()
    run = Unstarted(lifespan_app(log, startup="failed"), loop_name, lifespan="on")
    assert run.join() == 1
    assert not run.server.started.is_set()
    assert [x for x in log.items if isinstance(x, str)] == ["lifespan.startup"]
    assert any("no db" in t for t in run.handler.texts()), run.handler.texts()


@rule("ASGI-lifespan-2.0-shutdown-failed")
def test_shutdown_failed_ends_run_with_1(loop_name):
    """lifespan.shutdown.failed: the message is logged at ERROR and Server.run() returns 1 after
    serving normally."""
    log = Recorder()
    run = Unstarted(lifespan_app(log, shutdown="failed"), loop_name, lifespan="on")
    run.wait_started()
    run.server.request_shutdown()
    assert run.join() == 1
    assert [x for x in log.items if isinstance(x, str)] == ["lifespan.startup", "lifespan.shutdown"]
    assert any("no flush" in t for t in run.handler.texts()), run.handler.texts()


@rule("skirr-lifespan-shutdown-bounded")
def test_shutdown_that_never_answers_is_cancelled_after_the_bound(loop_name):
    """A lifespan shutdown that never answers is given what is left of timeout_graceful_shutdown
    plus 4 s (the supervisor's 5 s kill margin less the 1 s a cancelled task gets to end): then
    it is logged, cancelled, and run() returns 1."""
    entered = Recorder()

    async def app(scope, receive, send):
        assert scope["type"] == "lifespan"
        await receive()
        await send({"type": "lifespan.startup.complete"})
        await receive()
        entered.put("shutdown")
        try:
            await asyncio.sleep(1000)
        except asyncio.CancelledError:
            entered.put("cancelled")
            raise

    run = Unstarted(app, loop_name, lifespan="on", timeout_graceful_shutdown=0.5)
    run.wait_started()
    t0 = time.monotonic()
    run.server.request_shutdown()
    assert run.join() == 1
    elapsed = time.monotonic() - t0
    assert 4.0 <= elapsed <= 7.0, f"run() returned {elapsed:.2f} s after the shutdown request"
    assert entered.items == ["shutdown", "cancelled"]
    assert any("Application shutdown did not complete within 0.5 s (--timeout-graceful-shutdown "
               "plus 4 s): cancelling it" in t for t in run.handler.texts()), run.handler.texts()


async def _raising(scope, receive, send):
    if scope["type"] == "lifespan":
        raise RuntimeError("lifespan-not-supported-7e1")
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": repr(scope["state"]).encode()})


@rule("skirr-lifespan-auto-unsupported")
def test_app_raising_on_lifespan_is_served_under_auto(serve):
    """lifespan="auto" and an app that raises on the lifespan scope: skirr takes lifespan as
    unsupported (logged at INFO, not ERROR) and serves requests with an empty state."""
    with serve(_raising, lifespan="auto") as srv:
        r = srv.get("/")
        assert (r.status, r.body) == (200, b"{}")
    assert srv.errors() == [], [record_text(r) for r in srv.errors()]


@rule("skirr-lifespan-on-required")
def test_app_raising_on_lifespan_fails_under_on(loop_name):
    """lifespan="on" requires it: the exception is logged at ERROR and Server.run() returns 1
    without serving."""
    run = Unstarted(_raising, loop_name, lifespan="on")
    assert run.join() == 1
    assert not run.server.started.is_set()
    assert any("lifespan-not-supported-7e1" in t for t in run.handler.texts()), run.handler.texts()


def _base_raising(exc: BaseException, phase: str):
    async def app(scope, receive, send):
        assert scope["type"] == "lifespan"
        msg = await receive()
        if msg["type"] == f"lifespan.{phase}":
            raise exc
        await send({"type": msg["type"] + ".complete"})
        msg = await receive()
        if msg["type"] == f"lifespan.{phase}":
            raise exc
        await send({"type": msg["type"] + ".complete"})
    return app


@rule("skirr-lifespan-on-required", "ASGI-lifespan-2.0-startup-failed",
      "ASGI-lifespan-2.0-shutdown-failed")
@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt(), asyncio.CancelledError()],
                         ids=repr)
@pytest.mark.parametrize("phase", ["startup", "shutdown"])
def test_base_exception_in_lifespan_fails_run_with_1(loop_name, exc, phase):
    """SystemExit, KeyboardInterrupt or a CancelledError the app raises itself (no one cancelled
    the lifespan task) inside the lifespan scope is the app's failure like any exception: one ERROR line naming it (no traceback), Server.run() returns 1
    (not the app's exit status), and a startup failure never serves."""
    run = Unstarted(_base_raising(exc, phase), loop_name, lifespan="on")
    if phase == "shutdown":
        run.wait_started()
        run.server.request_shutdown()
    assert run.join() == 1
    assert run.server.started.is_set() == (phase == "shutdown")
    texts = run.handler.texts()
    line = f"the application raised {exc!r} in the 'lifespan' protocol during {phase}"
    assert line in texts, texts
    assert all("Traceback" not in t for t in texts), texts


@rule("skirr-lifespan-auto-unsupported")
def test_system_exit_before_any_lifespan_message_is_unsupported_under_auto(serve):
    """lifespan="auto" and an app raising SystemExit on the lifespan scope before its first
    message: lifespan is taken as unsupported and requests are served (as for any exception)."""
    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            raise SystemExit(3)
        await _raising(scope, receive, send)

    with serve(app, lifespan="auto") as srv:
        r = srv.get("/")
        assert (r.status, r.body) == (200, b"{}")
    assert srv.errors() == [], [record_text(r) for r in srv.errors()]


@rule("skirr-lifespan-off")
def test_lifespan_off_never_calls_app_for_lifespan(serve):
    log = Recorder()
    with serve(lifespan_app(log), lifespan="off") as srv:
        assert srv.get("/x").status == 200
    assert log.items == [("request", "/x", {})]


@rule("ASGI-lifespan-2.0-shutdown-after-requests")
def test_shutdown_waits_for_in_flight_request(serve):
    """A request in flight when shutdown is requested completes before lifespan.shutdown is
    sent to the app."""
    import asyncio

    log = Recorder()
    inner = lifespan_app(log)

    async def app(scope, receive, send):
        if scope["type"] == "http" and scope["path"] == "/slow":
            log.put("slow-start")
            await asyncio.sleep(0.5)
            log.put("slow-end")
        await inner(scope, receive, send)

    with serve(app, lifespan="on") as srv:
        c = srv.connect()
        c.send(http_request("GET", "/slow"))
        log.wait(3)
        srv.server.request_shutdown()
        r = c.response()
        assert r.status == 200
        srv.thread.join(10)  # let this shutdown finish: a second request forces exit
        assert srv.server.exit_code == 0
    kinds = [x if isinstance(x, str) else x[0] for x in log.items]
    assert kinds.index("slow-end") < kinds.index("lifespan.shutdown"), kinds


@rule("skirr-server-shutdown-before-serving")
@pytest.mark.parametrize("calls", [1, 2])
def test_request_shutdown_before_run_counts_as_when_serving(loop_name, calls):
    """Server.request_shutdown() called before run(): once, and run() does the lifespan startup,
    logs that it is not serving, runs the lifespan shutdown and returns 0; twice, and the second
    forces the exit as it does while serving: the startup is cancelled and run() returns 1. The
    server never accepts either way."""
    import skirr

    log = Recorder()
    server = skirr.Server(skirr.Config(lifespan_app(log), host="127.0.0.1", port=0,
                                       loop=loop_name, lifespan="on"))
    handler = _Capture()
    logging.getLogger("skirr.error").addHandler(handler)
    try:
        for _ in range(calls):
            server.request_shutdown()
        result = []
        thread = threading.Thread(target=lambda: result.append(server.run()), daemon=True)
        thread.start()
        thread.join(10)
        assert not thread.is_alive(), "run() did not return within 10 s"
    finally:
        logging.getLogger("skirr.error").removeHandler(handler)
    texts = handler.texts(logging.INFO)
    assert not server.started.is_set()
    if calls == 1:
        assert result == [0]
        assert [x for x in log.items if isinstance(x, str)] == ["lifespan.startup",
                                                                "lifespan.shutdown"]
        assert "Shutdown requested during startup: not serving" in texts, texts
    else:
        assert result == [1]
        assert "lifespan.shutdown" not in log.items
        assert "Forced exit: cancelling application startup" in texts, texts


# A lifespan app on a Server of the loop named by argv[1], logging to stderr; `module` is the
# loop's module (uvloop or asyncio), for a script to change how its loops are made.
_LIFESPAN_SERVER_SCRIPT = """
import asyncio, logging, os, signal, sys
import skirr

async def app(scope, receive, send):
    while True:
        message = await receive()
        print(message["type"], flush=True)
        await send({"type": message["type"] + ".complete"})
        if message["type"] == "lifespan.shutdown":
            return

logging.basicConfig(level=logging.INFO, format="%(message)s")
server = skirr.Server(skirr.Config(app, host="127.0.0.1", port=0, loop=sys.argv[1],
                                   lifespan="on"))
module = __import__("uvloop") if sys.argv[1] == "uvloop" else asyncio
"""

_ONE_SIGTERM_AS_THE_LOOP_STARTS = _LIFESPAN_SERVER_SCRIPT + """
# skirr's worker: SIGTERM is a graceful stop before the loop's own handler exists
signal.signal(signal.SIGTERM, lambda signum, frame: server.request_shutdown())
new_event_loop = module.new_event_loop

def new_loop():
    loop = new_event_loop()
    loop.call_soon(os.kill, os.getpid(), signal.SIGTERM)  # the first thing the running loop does
    return loop

module.new_event_loop = new_loop
sys.exit(server.run())
"""


@rule("skirr-server-one-signal-counted-once")
def test_one_sigterm_as_the_loop_starts_counts_once(loop_name, tmp_path):
    """One SIGTERM just as run()'s loop starts, in a process whose Python-level handler calls
    request_shutdown() (skirr's worker): one request, so lifespan startup, not serving, lifespan
    shutdown and exit 0. Under uvloop it used to be counted twice (the Python handler and the
    loop's wakeup fd): the startup was cancelled and the exit status was 1."""
    import subprocess
    import sys

    script = tmp_path / "one_sigterm.py"
    script.write_text(_ONE_SIGTERM_AS_THE_LOOP_STARTS)
    done = subprocess.run([sys.executable, str(script), loop_name], capture_output=True,
                          text=True, timeout=30)
    assert done.stdout.split() == ["lifespan.startup", "lifespan.shutdown"], (done.stdout,
                                                                              done.stderr)
    assert "Shutdown requested during startup: not serving" in done.stderr, done.stderr
    assert "Forced exit" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr


_SIGTERM_BEFORE_THE_LOOP_RUNS = _LIFESPAN_SERVER_SCRIPT + """
base = module.Loop if sys.argv[1] == "uvloop" else asyncio.SelectorEventLoop

class SignalledBeforeRunning(base):
    signalled = False

    def run_until_complete(self, future):
        if not SignalledBeforeRunning.signalled:  # run()'s handlers are in, the loop not running
            SignalledBeforeRunning.signalled = True
            os.kill(os.getpid(), signal.SIGTERM)
        return super().run_until_complete(future)

module.new_event_loop = SignalledBeforeRunning
sys.exit(server.run())
"""


@rule("skirr-server-signal-before-the-loop-runs")
def test_sigterm_after_the_handlers_before_the_loop_runs_stops(loop_name, tmp_path):
    """SIGTERM after run() installed the loop's handlers and before the loop runs: one shutdown
    request, so lifespan startup, not serving, lifespan shutdown, exit 0. Under uvloop, which
    reads signals only while running, it used to wait unseen for a second signal: the process
    served on (a worker stopped during its startup held its supervisor's shutdown forever)."""
    import subprocess
    import sys

    script = tmp_path / "sigterm_before_running.py"
    script.write_text(_SIGTERM_BEFORE_THE_LOOP_RUNS)
    proc = subprocess.Popen([sys.executable, str(script), loop_name], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the SIGTERM was not acted on within 15 s: {out!r} {err!r}")
    assert out.split() == ["lifespan.startup", "lifespan.shutdown"], (out, err)
    assert "Shutdown requested during startup: not serving" in err, err
    assert "Forced exit" not in err, err
    assert proc.returncode == 0, err
