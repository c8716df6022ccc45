"""What the command line finds before it serves (issue 36 items 3 and 7): an application factory
given without --factory, and every path-valued option.

A factory given without --factory is detected as uvicorn detects it, warned about in uvicorn's
words and served (rule skirr-cli-factory-detected); an application is never taken for one. A path
option naming nothing, or the wrong kind of thing, is a usage error (exit 2) found before anything
is bound or imported (rule skirr-cli-path-options). Every case runs on asyncio and on uvloop.
"""
from __future__ import annotations

import json
import socket

import pytest

try:
    from . import _proc
except ImportError:
    import _proc

pytestmark = _proc.each_loop

WARNING = ("WARNING:  ASGI app factory detected. Using it, but please consider setting the "
           "--factory flag explicitly.")

# Module text for --app-dir: factories and applications of every shape the detection must tell
# apart. Each application answers its own name, so a case knows which callable served.
APPS = '''
import os


def _log(event):
    with open(os.environ["SKIRR_TEST_LOG"], "a") as f:
        f.write(event + "\\n")


def _answering(name):
    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                _log(message["type"])
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": name.encode()})
    return app


def create_app():
    _log("factory")
    return _answering("made")


def create_app_with_settings(settings=None):
    _log("factory")
    return _answering("made")


class AppClass:
    """A class whose instances are the application: calling the class is the factory."""

    def __init__(self):
        _log("factory")

    async def __call__(self, scope, receive, send):
        await _answering("instance")(scope, receive, send)


def factory_raising_type_error():
    raise TypeError("settings missing")


async def plain(scope, receive, send):
    await _answering("plain")(scope, receive, send)


async def all_defaults(scope=None, receive=None, send=None):
    await _answering("all_defaults")(scope, receive, send)


async def star_args(*args):
    await _answering("star_args")(*args)


class Callable:
    async def __call__(self, scope, receive, send):
        await _answering("callable")(scope, receive, send)


callable_instance = Callable()
'''


@pytest.fixture
def apps(tmp_path):
    directory = tmp_path / "apps"
    directory.mkdir()
    (directory / "shapes.py").write_text(APPS)
    return directory


def _serve_once(tmp_path, loop, apps, spec):
    """Serves shapes:SPEC, answers one GET /, stops it; returns (body, status, stderr, events)."""
    port = _proc.free_port()
    args = [f"shapes:{spec}", "--app-dir", str(apps), "--loop", loop, "--port", str(port)]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        response = _proc.request(port, "GET", "/")
        assert response.status == 200
        status = proc.stop()
        return response.body, status, proc.stderr, proc.events


@pytest.mark.rule("skirr-cli-factory-detected")
@pytest.mark.parametrize("spec, body", [
    ("create_app", b"made"),
    ("create_app_with_settings", b"made"),
    ("AppClass", b"instance"),
])
def test_factory_without_flag_is_detected_warned_and_served(tmp_path, loop, apps, spec, body):
    got, status, stderr, events = _serve_once(tmp_path, loop, apps, spec)
    assert (got, status) == (body, 0)
    assert stderr.splitlines().count(WARNING) == 1, stderr
    # Called once, before lifespan startup: what it made runs the lifespan, not a 500 per request.
    assert events == ["factory", "lifespan.startup", "lifespan.shutdown"]
    assert "Traceback" not in stderr


@pytest.mark.rule("skirr-cli-factory-detected")
def test_factory_warning_comes_before_lifespan_and_listening(tmp_path, loop, apps):
    _body, _status, stderr, _events = _serve_once(tmp_path, loop, apps, "create_app")
    lines = stderr.splitlines()
    warned = lines.index(WARNING)
    startup = next(i for i, line in enumerate(lines) if "Waiting for application startup" in line)
    running = next(i for i, line in enumerate(lines) if "running on http://" in line)
    assert warned < startup < running, stderr


@pytest.mark.rule("skirr-cli-factory-detected")
@pytest.mark.parametrize("spec, body", [
    ("plain", b"plain"),
    ("all_defaults", b"all_defaults"),  # uvicorn would call it and serve the coroutine it returns
    ("star_args", b"star_args"),
    ("callable_instance", b"callable"),
])
def test_application_is_not_taken_for_a_factory(tmp_path, loop, apps, spec, body):
    got, status, stderr, events = _serve_once(tmp_path, loop, apps, spec)
    assert (got, status) == (body, 0)
    assert "factory" not in stderr and "factory" not in events
    assert "RuntimeWarning" not in stderr  # never called with no arguments


@pytest.mark.rule("skirr-cli-factory-detected")
def test_detected_factory_raising_type_error_is_its_error(tmp_path, loop, apps):
    """uvicorn would take the TypeError for "not a factory" and serve the factory itself (a 500
    for every request); skirr reports it as the factory's error, as with --factory."""
    args = ["shapes:factory_raising_type_error", "--app-dir", str(apps), "--loop", loop,
            "--port", str(_proc.free_port())]
    status, stderr = _proc.run_to_exit(args, tmp_path)
    assert status == 1
    assert stderr.splitlines()[-2:] == [
        WARNING,
        'skirr: error: application factory "shapes:factory_raising_type_error" raised '
        "TypeError: settings missing",
    ]


@pytest.mark.rule("skirr-cli-factory-detected")
def test_factory_flag_gets_no_warning(tmp_path, loop, apps):
    port = _proc.free_port()
    args = ["shapes:create_app", "--factory", "--app-dir", str(apps), "--loop", loop,
            "--port", str(port)]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        assert _proc.request(port, "GET", "/").body == b"made"
        assert proc.stop() == 0
        assert "factory" not in proc.stderr


@pytest.mark.rule("skirr-cli-factory-detected")
def test_detected_factory_under_workers(tmp_path, loop, apps):
    """Each worker process loads the application itself: each detects the factory and warns."""
    port = _proc.free_port()
    args = ["shapes:create_app", "--workers", "2", "--app-dir", str(apps), "--loop", loop,
            "--port", str(port)]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        assert _proc.request(port, "GET", "/").body == b"made"
        proc._wait_until(lambda: proc.events.count("lifespan.startup") == 2,
                         "both workers started", _proc.START_TIMEOUT, lambda: repr(proc.events))
        assert proc.stop() == 0
        assert proc.stderr.splitlines().count(WARNING) == 2, proc.stderr
        assert proc.events.count("factory") == 2


# --- path-valued options -------------------------------------------------------------------


def _paths(tmp_path):
    """A directory, a regular file and a missing path under tmp_path."""
    directory = tmp_path / "dir"
    directory.mkdir()
    regular = tmp_path / "file.txt"
    regular.write_text("x\n")
    return directory, regular, tmp_path / "missing"


def _path_cases(tmp_path):
    d, f, m = _paths(tmp_path)
    return [
        (["--app-dir", str(m)], f"--app-dir {m}: No such directory"),
        (["--app-dir", str(f)], f"--app-dir {f}: not a directory"),
        (["--reload", "--reload-dir", str(m)], f"--reload-dir {m}: No such directory"),
        (["--reload", "--reload-dir", str(d), "--reload-dir", str(f)],
         f"--reload-dir {f}: not a directory"),
        (["--log-config", str(m / "log.json")], f"--log-config {m / 'log.json'}: No such file"),
        (["--log-config", str(d)], f"--log-config {d}: not a file"),
        (["--env-file", str(m)], f"--env-file {m}: No such file"),
        (["--env-file", str(d)], f"--env-file {d}: not a file"),
        (["--uds", str(m / "skirr.sock")], f"--uds {m / 'skirr.sock'}: {m} is not a directory"),
        (["--uds", str(f / "skirr.sock")], f"--uds {f / 'skirr.sock'}: {f} is not a directory"),
        (["--uds", str(f)], f"--uds {f}: exists and is not a socket"),
        (["--uds", str(d)], f"--uds {d}: exists and is not a socket"),
    ]


PATH_CASE_IDS = ["app-dir-missing", "app-dir-file", "reload-dir-missing", "reload-dir-file",
                 "log-config-missing", "log-config-dir", "env-file-missing", "env-file-dir",
                 "uds-dir-missing", "uds-dir-file", "uds-file", "uds-dir"]


@pytest.mark.rule("skirr-cli-path-options")
@pytest.mark.parametrize("case", range(len(PATH_CASE_IDS)), ids=PATH_CASE_IDS)
def test_wrong_path_is_a_usage_error_before_anything_binds(tmp_path, loop, case):
    """Exit 2 with one line, before anything is bound (no startup line) or imported (the app's
    module would write the marker)."""
    args, message = _path_cases(tmp_path)[case]
    marker = tmp_path / "imported"
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "marks.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                   "async def app(scope, receive, send): pass\n")
    if "--app-dir" not in args:
        args = [*args, "--app-dir", str(apps)]
    if "--uds" not in args:
        args = [*args, "--port", str(_proc.free_port())]
    status, stderr = _proc.run_to_exit(["marks:app", "--loop", loop, *args], tmp_path)
    # The one line and nothing else: no "Started supervisor", no "running on".
    assert (status, stderr) == (2, f"skirr: error: {message}\n")
    assert not marker.exists()


@pytest.mark.rule("skirr-cli-path-options")
@pytest.mark.parametrize("raises, message", [
    ("ImportError", "--reload needs watchfiles (pip install watchfiles, or 'skirr[reload]')"),
    ("RuntimeError", "--reload: watchfiles fails to import: RuntimeError('broken for this case')"),
], ids=["missing", "broken"])
def test_reload_without_watchfiles_is_refused_before_anything_binds(tmp_path, loop, raises,
                                                                    message):
    """--reload where watchfiles cannot be imported (missing, or an install that raises): exit
    2 with one line saying so, before the startup line (it used to say "Started supervisor ...
    on http://..." first, with the port bound; a broken install gave a traceback) and before the
    app is imported."""
    blocked = tmp_path / "blocked" / "watchfiles"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text(f"raise {raises}('broken for this case')\n")
    marker = tmp_path / "imported"
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "marks.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                   "async def app(scope, receive, send): pass\n")
    args = ["marks:app", "--loop", loop, "--reload", "--reload-dir", str(apps), "--app-dir",
            str(apps), "--port", str(_proc.free_port())]
    with _proc.Skirr(args, tmp_path, env={"PYTHONPATH": str(blocked.parent)}) as proc:
        assert proc.proc.wait(_proc.STOP_TIMEOUT) == 2
        assert proc.stderr == f"skirr: error: {message}\n"
    assert not marker.exists()


@pytest.mark.rule("skirr-cli-path-options")
@pytest.mark.parametrize("var, dest, message", [
    ("SKIRR_APP_DIR", "missing", "SKIRR_APP_DIR: --app-dir {m}: No such directory"),
    ("SKIRR_RELOAD_DIR", "missing", "SKIRR_RELOAD_DIR: --reload-dir {m}: No such directory"),
    ("SKIRR_UDS", "missing/s.sock", "SKIRR_UDS: --uds {m}/s.sock: {m} is not a directory"),
])
def test_wrong_path_from_the_environment_names_the_variable(tmp_path, loop, var, dest, message):
    m = tmp_path / "missing"
    env = {var: str(tmp_path / dest)}
    args = ["basic:app", "--loop", loop] + (["--reload"] if var == "SKIRR_RELOAD_DIR" else [])
    with _proc.Skirr(args, tmp_path, env=env) as proc:
        assert proc.proc.wait(_proc.STOP_TIMEOUT) == 2
        assert proc.stderr == "skirr: error: " + message.format(m=m) + "\n"


@pytest.mark.rule("skirr-cli-path-options")
def test_python_api_refuses_wrong_paths_on_construction(tmp_path, loop):
    from skirr import Config
    from skirr.config import ConfigError

    d, f, m = _paths(tmp_path)
    for kwargs, message in [
        ({"app_dir": str(m)}, f"--app-dir {m}: No such directory"),
        ({"reload": True, "reload_dirs": [str(f)]}, f"--reload-dir {f}: not a directory"),
        ({"uds": str(m / "s.sock")}, f"--uds {m / 's.sock'}: {m} is not a directory"),
        ({"log_config": str(d)}, f"--log-config {d}: not a file"),
    ]:
        with pytest.raises(ConfigError) as info:
            Config("basic:app", **kwargs)
        assert str(info.value) == message
    # Paths that are right pass, and a callable app needs no app_dir.
    Config("basic:app", app_dir=str(d), reload=True, reload_dirs=[str(d)],
           uds=str(d / "s.sock"), log_config=None)
    Config(lambda scope, receive, send: None, app_dir=str(m))


@pytest.mark.rule("skirr-cli-path-options")
def test_right_paths_serve(tmp_path, loop):
    """The checks refuse nothing that works: an existing --app-dir, a --uds in an existing
    directory (a stale socket file there is replaced, as before), a --log-config file."""
    d, _f, _m = _paths(tmp_path)
    config = tmp_path / "log.json"
    config.write_text(json.dumps({"version": 1, "disable_existing_loggers": False}))
    path = d / "skirr.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # a socket file nobody accepts on
    args = ["basic:app", "--app-dir", str(_proc.APPS_DIR), "--uds", str(path), "--log-config",
            str(config), "--loop", loop]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(str(path))
        assert _proc.request(str(path), "GET", "/").status == 200
        assert proc.stop() == 0
