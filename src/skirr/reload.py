"""``--reload``: watch the source tree with watchfiles and tell the supervisor what changed.

Owns: the watcher thread and the file filter (``--reload-dir``, ``--reload-include``,
``--reload-exclude``, with uvicorn's defaults: include ``*.py``; exclude ``.*``, ``.py[cod]``,
``.sw.*``, ``~*``, plus watchfiles' own ignored directories such as ``__pycache__``, ``.git``,
``.venv``). Never: restarts anything itself (the supervisor rolls its workers on a change, so an
edit with a syntax error leaves the previous code serving and the error logged until the next
save).
"""
from __future__ import annotations

import fnmatch
import os
import threading
from collections.abc import Callable
from pathlib import Path

from .config import RELOAD_NEEDS_WATCHFILES, Config, ConfigError


def _watchfiles():  # type: ignore[no-untyped-def]
    try:
        import watchfiles
    except ImportError:
        raise ConfigError(RELOAD_NEEDS_WATCHFILES) from None
    return watchfiles


class Reloader:
    """A daemon thread running ``watchfiles.watch`` over ``config.reload_dirs`` (default: the
    current directory); calls ``on_change(paths)`` from that thread for every batch of changes
    that passes the filter.

    Raises:
        ConfigError: watchfiles is not installed, or a reload directory does not exist.
    """

    def __init__(self, config: Config, on_change: Callable[[list[str]], None]) -> None:
        watchfiles = _watchfiles()
        dirs = config.reload_dirs or [os.getcwd()]
        for d in dirs:
            if not os.path.isdir(d):
                raise ConfigError(f"--reload-dir {d}: not a directory")
        self.dirs = [os.path.abspath(d) for d in dirs]
        includes, excludes = config.reload_includes, config.reload_excludes
        roots = self.dirs

        class _Filter(watchfiles.DefaultFilter):  # type: ignore[misc, name-defined]
            def __call__(self, change: object, path: str) -> bool:
                if not super().__call__(change, path):
                    return False
                parts = Path(path).parts
                for root in roots:  # only the parts below the watched directory are matched
                    if path.startswith(root + os.sep):
                        parts = Path(os.path.relpath(path, root)).parts
                        break
                if any(fnmatch.fnmatch(part, pat) for part in parts for pat in excludes):
                    return False
                name = parts[-1]
                return any(fnmatch.fnmatch(name, pat) or Path(path).match(pat)
                           for pat in includes)

        self._filter = _Filter()
        self._watch = watchfiles.watch
        self._on_change = on_change
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="skirr-reload", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2.0)

    def _run(self) -> None:
        for changes in self._watch(*self.dirs, watch_filter=self._filter,
                                   stop_event=self._stop, raise_interrupt=False):
            paths = sorted({path for _change, path in changes})
            if paths:
                self._on_change(paths)
