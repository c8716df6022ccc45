"""The sanitizer legs' preload reaches Python only (issue 35 item 11; spec/packaging.toml).

``sanitizers/sitecustomize.py`` is what ``make sanitize`` and ``make sanitize-smoke`` put first on
``PYTHONPATH``. These cases run it in plain child interpreters with a harmless library
(``libm.so.6``) standing in for the ASan runtime, and read what each process was started with
(``/proc/self/environ``), what it hands on (``os.environ``) and what a program that is not Python
(``env``) inherits from it.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

SANITIZERS = pathlib.Path(__file__).resolve().parent.parent / "sanitizers"
RUNTIME = "libm.so.6"  # stands in for libasan: preloading it changes nothing else
OTHER = "libdl.so.2"

CHILD = r"""
import os, subprocess
environ = open("/proc/self/environ", "rb").read().split(b"\0")
started = [e for e in environ if e.startswith(b"LD_PRELOAD=")]
print("pid", os.getpid())
print("started", started)
print("environ", os.environ.get("LD_PRELOAD"))
out = subprocess.run(["env"], capture_output=True, check=True).stdout.splitlines()
print("env-child", [line for line in out if line.startswith(b"LD_PRELOAD=")])
"""


def run_child(**env_vars: str) -> tuple[int, dict[str, str]]:
    """Starts CHILD with sitecustomize.py on PYTHONPATH and exactly env_vars besides PATH/HOME;
    returns (the pid Popen saw, {line key: rest})."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/"),
           "PYTHONPATH": str(SANITIZERS), **env_vars}
    proc = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode(errors="replace")
    lines = dict(line.split(" ", 1) for line in out.decode().splitlines())
    return proc.pid, lines


@pytest.mark.rule("skirr-sanitizer-preload-python-only")
def test_started_without_runtime_starts_again_with_it():
    pid, seen = run_child(SKIRR_SAN_PRELOAD=RUNTIME)
    assert seen == {
        "pid": str(pid),  # the same process: execve, not a new child
        "started": f"[b'LD_PRELOAD={RUNTIME}']",
        "environ": "None",
        "env-child": "[]",
    }


@pytest.mark.rule("skirr-sanitizer-preload-python-only")
def test_started_with_runtime_hands_on_only_the_others():
    pid, seen = run_child(SKIRR_SAN_PRELOAD=RUNTIME, LD_PRELOAD=f"{RUNTIME}:{OTHER}")
    assert seen == {
        "pid": str(pid),
        "started": f"[b'LD_PRELOAD={RUNTIME}:{OTHER}']",
        "environ": OTHER,
        "env-child": f"[b'LD_PRELOAD={OTHER}']",
    }


@pytest.mark.rule("skirr-sanitizer-preload-python-only")
def test_outside_the_legs_nothing_changes():
    pid, seen = run_child(LD_PRELOAD=OTHER)
    assert seen == {
        "pid": str(pid),
        "started": f"[b'LD_PRELOAD={OTHER}']",
        "environ": OTHER,
        "env-child": f"[b'LD_PRELOAD={OTHER}']",
    }
