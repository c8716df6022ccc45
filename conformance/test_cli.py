"""The command line (issue 2 §7): `python -m skirr module:attr` with uvicorn's flag names.

Mistakes the user can fix get exactly one `skirr: error:` line on stderr and a non-zero status
(2 for usage errors, 1 otherwise), never a traceback. SIGINT and SIGTERM stop the server gracefully:
the listening socket closes at once, in-flight requests finish, lifespan shutdown runs, status 0.
Every case runs on asyncio and on uvloop.
"""
import json
import os
import signal
import socket
import time

import h11
import pytest

try:
    from . import _proc
except ImportError:
    import _proc

pytestmark = _proc.each_loop


def _error_case(tmp_path, loop, args, cwd=None):
    status, stderr = _proc.run_to_exit(["--loop", loop, *args], tmp_path, cwd)
    assert "Traceback" not in stderr
    return status, stderr


@pytest.mark.rule("skirr-cli-bad-app")
@pytest.mark.parametrize(
    "spec, line",
    [
        ("nope:app", 'could not import module "nope"'),
        ("basic:missing", 'attribute "missing" not found in module "basic"'),
        ("basic:NOT_CALLABLE", '"basic:NOT_CALLABLE" is not callable'),
    ],
    ids=["module-not-found", "attribute-missing", "not-callable"],
)
def test_bad_app_is_one_line_status_1(tmp_path, loop, spec, line):
    status, stderr = _error_case(tmp_path, loop, [spec, "--port", str(_proc.free_port())])
    assert (status, stderr) == (1, f"skirr: error: {line}\n")


@pytest.mark.rule("skirr-cli-bad-app")
@pytest.mark.parametrize(
    "spec, line",
    [
        ("basic:NOT_CALLABLE", '"basic:NOT_CALLABLE" is not callable'),
        ("factories:returns_42",
         'application factory "factories:returns_42" returned an object of type \'int\', which '
         "is not callable"),
        ("factories:raises", 'application factory "factories:raises" raised RuntimeError: no db'),
    ],
    ids=["factory-not-callable", "factory-result-not-callable", "factory-raises"],
)
def test_bad_factory_is_one_line_status_1(tmp_path, loop, spec, line):
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "factories.py").write_text(
        "def returns_42():\n    return 42\n\n\n"
        "def raises():\n    raise RuntimeError('no db')\n"
    )
    args = [spec, "--factory", "--app-dir", str(apps), "--port", str(_proc.free_port())]
    status, stderr = _error_case(tmp_path, loop, args)
    assert (status, stderr) == (1, f"skirr: error: {line}\n")


@pytest.mark.rule("skirr-cli-usage-error")
@pytest.mark.parametrize(
    "spec",
    ["basic", "basic:", ":app", ".basic:app", "basic..x:app", "basic:app.", "basic:app:x"],
    ids=["no-colon", "no-attribute", "no-module", "relative-module", "empty-module-part",
         "empty-attribute-part", "two-colons"],
)
def test_malformed_app_is_a_usage_error(tmp_path, loop, spec):
    # Refused before anything is imported or bound: the port may even be taken.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        status, stderr = _error_case(tmp_path, loop, [spec, "--port", str(port)])
    assert (status, stderr) == (
        2, f'skirr: error: import string "{spec}" must be in format "<module>:<attribute>"\n'
    )


@pytest.mark.rule("skirr-cli-bind-error")
def test_port_in_use_is_one_line_status_1(tmp_path, loop):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        status, stderr = _error_case(tmp_path, loop, ["basic:app", "--port", str(port)])
    assert (status, stderr) == (
        1, f"skirr: error: could not bind to 127.0.0.1:{port}: Address already in use\n"
    )


def _importing_marks(apps, marker):
    """Writes apps/marks.py, whose import (and factory call) creates ``marker``."""
    apps.mkdir()
    (apps / "marks.py").write_text(
        f"open({str(marker)!r}, 'a').write('imported\\n')\n\n\n"
        f"def create():\n    open({str(marker)!r}, 'a').write('factory\\n')\n"
    )


@pytest.mark.rule("skirr-cli-bind-error")
@pytest.mark.parametrize("kind", ["tcp", "uds"])
def test_bind_error_comes_before_any_app_code(tmp_path, loop, kind):
    apps, marker = tmp_path / "apps", tmp_path / "marker"
    _importing_marks(apps, marker)
    family = socket.AF_INET if kind == "tcp" else socket.AF_UNIX
    with socket.socket(family) as taken:
        if kind == "tcp":
            taken.bind(("127.0.0.1", 0))
            where = f"127.0.0.1:{taken.getsockname()[1]}"
            bind_args = ["--port", str(taken.getsockname()[1])]
        else:
            path = str(tmp_path / "busy.sock")
            taken.bind(path)
            where = f"unix socket {path}"
            bind_args = ["--uds", path]
        taken.listen(1)
        args = ["marks:create", "--factory", "--app-dir", str(apps), *bind_args]
        status, stderr = _error_case(tmp_path, loop, args)
    assert (status, stderr) == (
        1, f"skirr: error: could not bind to {where}: Address already in use\n"
    )
    assert not marker.exists()  # the module was never imported, the factory never called


@pytest.mark.rule("skirr-cli-uds")
def test_uds_file_removed_when_app_fails_to_load(tmp_path, loop):
    path = tmp_path / "skirr.sock"
    status, stderr = _error_case(tmp_path, loop, ["basic:missing", "--uds", str(path)])
    assert (status, stderr) == (
        1, 'skirr: error: attribute "missing" not found in module "basic"\n'
    )
    assert not path.exists()


@pytest.mark.rule("skirr-cli-usage-error")
@pytest.mark.parametrize(
    "args, line",
    [
        (["basic:app", "--nope"], "unrecognized arguments: --nope"),
        (["basic:app", "--port", "http"], "argument --port: invalid port: 'http'"),
        (["basic:app", "--port", "65536"],
         "argument --port: invalid port: '65536' (not in 0..65535)"),
        (["basic:app", "--timeout-keep-alive", "-1"],
         "argument --timeout-keep-alive: invalid number of seconds: '-1'"),
        (["basic:app", "--limit-request-body", "1k"],
         "argument --limit-request-body: invalid integer: '1k'"),
        (["--port", "8000"], "the following arguments are required: APP"),
        (["basic:app", "--backlog", "3000000000"],
         "argument --backlog: invalid integer: '3000000000' (not in 1..65535)"),
        (["basic:app", "--backlog", "0"],
         "argument --backlog: invalid integer: '0' (not in 1..65535)"),
        (["basic:app", "--write-batch-delay", "-0.001"],
         "argument --write-batch-delay: invalid number of seconds: '-0.001'"),
    ],
    ids=["unknown-option", "port-not-a-number", "port-out-of-range", "negative-timeout",
         "body-limit-not-a-number", "no-app", "backlog-too-large", "backlog-zero",
         "negative-batch-delay"],
)
def test_usage_error_is_one_line_status_2(tmp_path, loop, args, line):
    status, stderr = _error_case(tmp_path, loop, args)
    assert (status, stderr) == (2, f"skirr: error: {line}\n")


@pytest.mark.rule("skirr-cli-version")
def test_version(tmp_path, loop):
    with _proc.Skirr(["--version"], tmp_path) as proc:
        assert proc.wait() == 0
        assert proc.stdout.startswith("skirr 0.1.0 (CPython 3.")


@pytest.mark.rule("skirr-cli-running-line")
def test_running_line_names_the_address(tmp_path, loop):
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port)], tmp_path) as proc:
        proc.wait_accepting(port)
        proc.wait_stderr(
            f"INFO:     skirr running on http://127.0.0.1:{port} (Press CTRL+C to quit)\n"
        )
        assert proc.stop() == 0


@pytest.mark.rule("skirr-cli-signal-graceful", "ASGI-lifespan-2.0-shutdown-after-requests")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_finishes_in_flight_request_then_exits_0(tmp_path, loop, signum):
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port)], tmp_path) as proc:
        proc.wait_accepting(port)
        with _proc.connect(port) as sock:
            conn = h11.Connection(h11.CLIENT)
            _proc.send_request(sock, conn, "GET", "/slow?s=1.5")
            proc.wait_event("slow-start")
            proc.proc.send_signal(signum)
            # The listening socket closes at once: new connections are refused...
            deadline = time.monotonic() + 1.0
            while _proc.accepts(port):
                assert time.monotonic() < deadline, "still accepting after the signal"
                time.sleep(0.05)
            # ...while the request in flight gets its whole response, then the connection closes.
            response = _proc.read_response(sock, conn)
            assert (response.status, response.body) == (200, b"done")
            assert response.header(b"connection") == b"close"
        assert proc.wait() == 0
        assert proc.events == ["startup", "slow-start", "slow-end", "shutdown"]
        assert "Traceback" not in proc.stderr


@pytest.mark.rule("skirr-cli-factory")
def test_factory(tmp_path, loop):
    port = _proc.free_port()
    args = ["basic:create_app", "--factory", "--loop", loop, "--port", str(port)]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        response = _proc.request(port, "GET", "/")
        assert (response.status, response.body) == (200, b"ok")
        assert proc.stop() == 0
        assert proc.events == ["factory", "startup", "shutdown"]


@pytest.mark.rule("skirr-cli-app-dir")
def test_app_dir(tmp_path, loop):
    port = _proc.free_port()
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    args = ["basic:app", "--loop", loop, "--port", str(port)]
    # Not importable from another directory...
    status, stderr = _error_case(tmp_path, loop, args, cwd=elsewhere)
    assert (status, stderr) == (1, 'skirr: error: could not import module "basic"\n')
    # ...unless --app-dir names the apps' directory.
    args += ["--app-dir", str(_proc.APPS_DIR)]
    with _proc.Skirr(args, tmp_path, cwd=elsewhere) as proc:
        proc.wait_accepting(port)
        assert _proc.request(port).body == b"ok"
        assert proc.stop() == 0


@pytest.mark.rule("skirr-cli-uds", "ASGI-www-scope-client-server-uds")
def test_uds(tmp_path, loop):
    path = str(tmp_path / "skirr.sock")
    # A stale socket file (its server died without removing it) is replaced.
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(path)
    assert os.path.exists(path)
    with _proc.Skirr(["basic:app", "--loop", loop, "--uds", path], tmp_path) as proc:
        proc.wait_accepting(path)
        response = _proc.request(path, "GET", "/scope")
        assert response.status == 200
        scope = json.loads(response.body)
        assert scope["server"] == [path, None]
        assert scope["client"] is None
        proc.wait_stderr(f"INFO:     skirr running on unix socket {path} (Press CTRL+C to quit)\n")
        assert proc.stop() == 0
    assert not os.path.exists(path)


@pytest.mark.rule("skirr-cli-bind-error")
def test_uds_in_use_is_one_line_status_1(tmp_path, loop):
    path = str(tmp_path / "busy.sock")
    with socket.socket(socket.AF_UNIX) as busy:
        busy.bind(path)
        busy.listen(1)
        status, stderr = _error_case(tmp_path, loop, ["basic:app", "--uds", path])
    assert (status, stderr) == (
        1, f"skirr: error: could not bind to unix socket {path}: Address already in use\n"
    )


@pytest.mark.rule("skirr-cli-root-path", "ASGI-www-scope-root-path")
def test_root_path_is_in_scope(tmp_path, loop):
    port = _proc.free_port()
    args = ["basic:app", "--loop", loop, "--port", str(port), "--root-path", "/api"]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        response = _proc.request(port, "GET", "/scope")
        scope = json.loads(response.body)
        # The native contract: root_path is also prefixed to path and raw_path.
        assert (scope["root_path"], scope["path"], scope["raw_path"]) == (
            "/api", "/api/scope", "/api/scope"
        )
        assert proc.stop() == 0


@pytest.mark.rule("skirr-cli-signal-forced")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_second_signal_forced_exit_is_quiet_with_fastapi(tmp_path, signum, loop):
    """Issue 11 item 12: a second Ctrl-C with a FastAPI app in flight exits 1 with the one
    warning; Starlette's lifespan.shutdown.failed answer to the cancellation is not an error."""
    port = _proc.free_port()
    args = ["fastapi_slow:app", "--loop", loop, "--port", str(port)]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
        proc.wait_event("slow")  # the request is in flight: the first signal waits for it
        proc.proc.send_signal(signum)
        time.sleep(0.5)
        assert proc.proc.poll() is None, proc.stderr
        assert proc.stop(signum) == 1
        sock.close()
        err = proc.stderr
        warnings = [line for line in err.splitlines() if line.startswith("WARNING:")]
        assert len(warnings) == 1 and "Forced exit" in warnings[0], err
        assert "ERROR" not in err and "Traceback" not in err, err
        assert "Application shutdown complete" not in err, err


@pytest.mark.rule("skirr-cli-signal-forced")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_after_serving_ended_is_a_forced_exit(tmp_path, signum, loop):
    """A second signal that comes after serving ended, while the process exits (the app's
    atexit hook holds it for 5 s), ends it at once with exit status 1, as a second signal does
    while serving; never by the signal's default action (it used to: -2 or -15)."""
    port = _proc.free_port()
    with _proc.Skirr(["slow_exit:app", "--loop", loop, "--port", str(port)], tmp_path) as proc:
        proc.wait_accepting(port)
        proc.proc.send_signal(signum)
        proc.wait_event("atexit")
        started = time.monotonic()
        assert proc.stop(signum) == 1
        assert time.monotonic() - started < 0.9
    assert "Finished server process" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.rule("skirr-config-numbers")
@pytest.mark.parametrize("name, value, message", [
    ("write_batch_delay", 10**400, "write_batch_delay must be a finite number >= 0; got 1000"),
    ("write_batch_delay", float("inf"), "write_batch_delay must be a finite number >= 0; got inf"),
    ("write_batch_delay", -0.001, "write_batch_delay must be a finite number >= 0; got -0.001"),
    ("write_batch_delay", True, "write_batch_delay must be a finite number >= 0; got True"),
    ("write_batch_delay", "0.1", "write_batch_delay must be a finite number >= 0; got '0.1'"),
    ("timeout_write", 10**400, "timeout_write must be a finite number > 0; got 1000"),
    ("timeout_keep_alive", float("nan"), "timeout_keep_alive must be a finite number >= 0; got nan"),
    ("limit_request_body", 2**63, "limit_request_body must be an integer below 2**63 >= 0; got 92"),
    ("limit_request_body", 1.5, "limit_request_body must be an integer below 2**63 >= 0; got 1.5"),
], ids=["delay-overflow", "delay-inf", "delay-negative", "delay-bool", "delay-str",
        "timeout-overflow", "keep-alive-nan", "body-2**63", "body-float"])
def test_config_refuses_numbers_it_cannot_carry(loop, name, value, message):
    import skirr
    from skirr.config import ConfigError

    with pytest.raises(ConfigError) as info:
        skirr.Config("basic:app", **{name: value})
    assert str(info.value).startswith(message)
    # The largest values that fit are taken.
    assert skirr.Config("basic:app", limit_request_body=2**63 - 1).limit_request_body == 2**63 - 1
    assert skirr.Config("basic:app", write_batch_delay=1e300).write_batch_delay == 1e300
