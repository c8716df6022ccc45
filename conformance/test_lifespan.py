"""ASGI lifespan 2.0 (ASGI lifespan spec; issue 2 §5), through the real server process.

startup runs before the first connection is accepted and shutdown after the last request; the
state the app fills during startup reaches each request scope as a shallow copy; a failed startup
logs the app's message, exits 1 and never accepts; `--lifespan auto|on|off` as uvicorn's. Every
case runs on asyncio and on uvloop.
"""
import json
import time

import pytest

try:
    from . import _proc
except ImportError:
    import _proc

pytestmark = _proc.each_loop


def _serve(tmp_path, loop, spec, *extra):
    port = _proc.free_port()
    return port, _proc.Skirr([spec, "--loop", loop, "--port", str(port), *extra], tmp_path)


@pytest.mark.rule(
    "ASGI-lifespan-2.0-startup-before-serving",
    "ASGI-lifespan-2.0-shutdown-after-requests",
    "ASGI-www-scope-state-shallow-copy",
    "skirr-lifespan-log-lines",
)
def test_startup_state_requests_shutdown_in_order(tmp_path, loop):
    port, server = _serve(tmp_path, loop, "basic:app")
    with server as proc:
        proc.wait_accepting(port)
        first = json.loads(_proc.request(port, "GET", "/scope").body)
        assert first["state"] == {"greeting": "hi"}
        # A request that mutates its state copy changes neither the lifespan state nor the
        # next request's copy.
        assert _proc.request(port, "POST", "/mutate-state").body == b"mutated"
        second = json.loads(_proc.request(port, "GET", "/scope").body)
        assert second["state"] == {"greeting": "hi"}
        assert proc.stop() == 0
        request = 'request {"greeting": "hi"}'
        assert proc.events == ["startup", request, request, "shutdown"]
        stderr = proc.stderr
        for line in ("Waiting for application startup.", "Application startup complete.",
                     "Waiting for application shutdown.", "Application shutdown complete."):
            assert f"INFO:     {line}\n" in stderr
        assert stderr.index("Application startup complete.") < stderr.index("skirr running on")


def _assert_never_accepts(proc, port, timeout=_proc.STOP_TIMEOUT):
    """Polls the port until the process exits; it must never accept. Returns the status."""
    deadline = time.monotonic() + timeout
    while proc.proc.poll() is None:
        assert not _proc.accepts(port), "accepted a connection although startup failed"
        assert time.monotonic() < deadline, "did not exit after a failed startup"
        time.sleep(0.02)
    return proc.wait()


@pytest.mark.rule("ASGI-lifespan-2.0-startup-failed")
def test_startup_failed_logs_message_exits_1_never_accepts(tmp_path, loop):
    port, server = _serve(tmp_path, loop, "basic:startup_failed")
    with server as proc:
        assert _assert_never_accepts(proc, port) == 1
        stderr = proc.stderr
        assert "ERROR:    database unreachable\n" in stderr
        assert "ERROR:    Application startup failed. Exiting.\n" in stderr
        assert "skirr running on" not in stderr
        assert "Traceback" not in stderr
        assert proc.events == ["startup"]


@pytest.mark.rule("ASGI-lifespan-2.0-shutdown-failed")
def test_shutdown_failed_is_logged(tmp_path, loop):
    port, server = _serve(tmp_path, loop, "basic:shutdown_failed")
    with server as proc:
        proc.wait_accepting(port)
        assert _proc.request(port).body == b"ok"
        # A failed shutdown is reported in the exit status too.
        assert proc.stop() == 1
        assert "ERROR:    flush failed\n" in proc.stderr
        assert "ERROR:    Application shutdown failed.\n" in proc.stderr
        assert proc.events == ["shutdown"]


@pytest.mark.rule("skirr-lifespan-auto-unsupported")
def test_app_without_lifespan_runs_under_auto(tmp_path, loop):
    port, server = _serve(tmp_path, loop, "basic:no_lifespan")
    with server as proc:
        proc.wait_accepting(port)
        response = _proc.request(port, "GET", "/scope")
        assert response.status == 200
        assert json.loads(response.body)["state"] == {}
        assert proc.stop() == 0
        assert "INFO:     ASGI 'lifespan' protocol appears unsupported.\n" in proc.stderr
        assert "Traceback" not in proc.stderr


@pytest.mark.rule("skirr-lifespan-on-required")
def test_app_without_lifespan_fails_under_on(tmp_path, loop):
    port, server = _serve(tmp_path, loop, "basic:no_lifespan", "--lifespan", "on")
    with server as proc:
        assert _assert_never_accepts(proc, port) == 1
        stderr = proc.stderr
        assert "ERROR:    Exception in 'lifespan' protocol\n" in stderr
        assert "RuntimeError: unsupported scope type 'lifespan'" in stderr
        assert "ERROR:    Application startup failed. Exiting.\n" in stderr


@pytest.mark.rule("skirr-lifespan-off")
def test_lifespan_off_never_calls_the_app_for_lifespan(tmp_path, loop):
    port, server = _serve(tmp_path, loop, "basic:app", "--lifespan", "off")
    with server as proc:
        proc.wait_accepting(port)
        response = _proc.request(port, "GET", "/scope")
        assert json.loads(response.body)["state"] == {}
        assert proc.stop() == 0
        assert proc.events == ["request {}"]
        assert "Waiting for application startup." not in proc.stderr
