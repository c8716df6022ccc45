"""The sanitizer legs' interpreter hook: the ASan runtime reaches Python interpreters only.

``make sanitize-build`` copies this file into ``build/asan/site/`` (first on ``PYTHONPATH`` in
``sanitize-suite``), so every Python interpreter the suite starts, at any depth, imports it at
start-up. ``sanitize-suite`` names the runtime in ``SKIRR_SAN_PRELOAD`` and preloads it into
pytest itself. Here, in each interpreter:

- started with the runtime in ``LD_PRELOAD``: the runtime is loaded, so ``LD_PRELOAD`` leaves
  ``os.environ``: no program this interpreter starts inherits it. A program that is not Python
  (``make``, ``git``, ``nginx``, ``curl``, the compiler under ``pip``) then runs as on any
  machine, and what the leg reports is skirr's code, never a bug of one of those (GNU make 4.3
  has a heap overflow that ASan's ``strndup`` interceptor reports);
- started without it (a child of one of the above): it starts again (``execve``: the same pid,
  descriptors and arguments) with the runtime preloaded, as ASan requires of a process that
  loads the instrumented ``skirr._native``, and then takes the first branch.

An interpreter started with ``-S``, ``-E`` or ``-I`` skips this file (and, for ``-E``/``-I``,
``PYTHONPATH``, so it does not import the instrumented build either). Outside the sanitizer legs
``SKIRR_SAN_PRELOAD`` is unset and this does nothing.
"""
from __future__ import annotations

import os
import sys


def _preload_python_only() -> None:
    runtime = os.environ.get("SKIRR_SAN_PRELOAD")
    if not runtime:
        return
    preload = os.environ.get("LD_PRELOAD", "").replace(":", " ").split()
    if runtime in preload:
        rest = [lib for lib in preload if lib != runtime]
        if rest:
            os.environ["LD_PRELOAD"] = " ".join(rest)
        else:
            del os.environ["LD_PRELOAD"]
        return
    env = dict(os.environ, LD_PRELOAD=" ".join([runtime, *preload]))
    # sys.executable (absolute), not argv[0]: a bare "python" would be looked up on PATH again.
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


_preload_python_only()
