"""--reload on watchfiles (issue 12 §5): an edit restarts the worker with the new code; an edit
with a syntax error keeps the previous code serving and logs the error until the next save;
files outside --reload-include or inside --reload-exclude do not restart anything."""
from __future__ import annotations

import time

import pytest

try:
    from . import _proc
except ImportError:
    import _proc

APP = 'async def app(scope, receive, send):\n' \
      '    if scope["type"] != "http":\n' \
      '        return\n' \
      '    await send({"type": "http.response.start", "status": 200, "headers": []})\n' \
      '    await send({"type": "http.response.body", "body": %r})\n'


def _body(port):
    try:
        return _proc.request(port, timeout=2).body
    except OSError:
        return None


def _until(port, body, proc, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _body(port) == body:
            return
        time.sleep(0.1)
    raise AssertionError(f"never answered {body!r}:\n{proc.stderr}")


@pytest.mark.rule("skirr-reload")
def test_reload_new_code_and_syntax_error(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "live.py").write_text(APP % b"one")
    port = _proc.free_port()
    args = ["live:app", "--port", str(port), "--reload", "--reload-dir", str(src),
            "--app-dir", str(src), "--lifespan", "off", "--reload-exclude", "ignored_*"]
    with _proc.Skirr(args, tmp_path, cwd=src) as proc:
        proc.wait_accepting(port)
        assert _body(port) == b"one"
        time.sleep(0.3)  # the watcher is up
        (src / "notes.txt").write_text("not python")  # not included
        (src / "ignored_x.py").write_text("x = 1\n")  # excluded
        time.sleep(1.0)
        assert "Detected changes" not in proc.stderr
        (src / "live.py").write_text(APP % b"two")
        _until(port, b"two", proc)
        (src / "live.py").write_text("def broken(:\n")
        deadline = time.monotonic() + 15
        while "SyntaxError" not in proc.stderr:
            assert time.monotonic() < deadline, proc.stderr
            time.sleep(0.1)
        time.sleep(0.5)
        assert proc.proc.poll() is None  # the supervisor lives on
        assert _body(port) == b"two"  # and the previous code still serves
        (src / "live.py").write_text(APP % b"three")
        _until(port, b"three", proc)
        assert proc.stop() == 0
