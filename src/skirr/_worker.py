"""One worker process of skirr's supervisor (``skirr.supervisor``): ``python -m skirr._worker``.

Owns: rebuilding the ``Config`` and the inherited listening socket(s) from ``$SKIRR_WORKER``
(JSON: ``config`` fields, ``fds``, ``pipe``), serving them with ``skirr.Server``, and the pipe to
the supervisor: one byte per message, written from the event loop, so a blocked loop writes
nothing.

    R   accepting (the worker's startup is done)
    H   heartbeat, every fifth of ``timeout_worker_healthcheck``
    M   ``--limit-max-requests`` reached: start my replacement, then stop me with SIGTERM

Signals: SIGTERM is the graceful shutdown (a second one forces it); SIGINT, SIGHUP, SIGTTIN and
SIGTTOU are ignored (a terminal's Ctrl-C reaches the whole process group; the supervisor decides).
A worker whose supervisor died (its parent changed) shuts down gracefully by itself.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys

from .config import Config, ConfigError

ENV = "SKIRR_WORKER"
READY, HEARTBEAT, RETIRE = b"R", b"H", b"M"


class _Pipe:
    """The write end of the pipe to the supervisor, fed from the worker's event loop."""

    def __init__(self, fd: int, interval: float) -> None:
        self.fd = fd
        self.interval = interval
        self.parent = os.getppid()
        self.server: object | None = None
        os.set_blocking(fd, False)

    def send(self, message: bytes) -> None:
        try:
            os.write(self.fd, message)
        except (BlockingIOError, BrokenPipeError):
            pass  # a full pipe already says "alive"; a broken one: the parent check below

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.call_soon(self._beat, loop)

    def _beat(self, loop: asyncio.AbstractEventLoop) -> None:
        self.send(HEARTBEAT)
        if os.getppid() != self.parent and self.server is not None:
            self.parent = os.getppid()
            self.server.request_shutdown()  # type: ignore[attr-defined]
        loop.call_later(self.interval, self._beat, loop)


def main() -> int:
    """Runs the worker described by ``$SKIRR_WORKER``; returns its exit status."""
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU):
        signal.signal(signum, signal.SIG_IGN)
    spec = json.loads(os.environ.pop(ENV))
    from .main import report_error
    from .server import Server

    config = Config(**spec["config"])
    sockets = [socket.socket(fileno=fd) for fd in spec["fds"]]
    pipe = _Pipe(spec["pipe"], config.timeout_worker_healthcheck / 5)
    server = Server(config, sockets=sockets)
    pipe.server = server
    server._signals = (signal.SIGTERM,)
    server._on_loop = pipe.start
    server._on_started = lambda: pipe.send(READY)
    server._on_max_requests = lambda: pipe.send(RETIRE)
    # Until the loop's own handler is installed (after the application is imported), SIGTERM
    # still means a graceful stop, never the default death.
    signal.signal(signal.SIGTERM, lambda signum, frame: server.request_shutdown())
    try:
        return server.run()
    except ConfigError as exc:
        report_error(exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
