"""One worker process of skirr's supervisor (``skirr.supervisor``): ``python -m skirr._worker``.

Owns: rebuilding the ``Config`` and the inherited listening socket(s) from ``$SKIRR_WORKER``
(JSON: ``config`` fields, ``fds``, ``pipe``, and with TLS ``tls_ticket_key``: the supervisor's
session-ticket key, hex), serving them with ``skirr.Server``, and the write end
of the pipe to the supervisor: messages (``skirr._pipe``: R accepting, H heartbeat, M retire me,
S counters) written from the event loop, so a blocked loop writes nothing.

Bytes the pipe cannot take at once wait in the worker (in order) for the next heartbeat, so a
message is never cut; past 64 KiB of them nothing more is queued (a pipe that full says "alive"
already). On exit the last bytes get up to 2 s.

Signals: SIGTERM is the graceful shutdown (a second one forces it); SIGINT, SIGHUP, SIGTTIN and
SIGTTOU are ignored (a terminal's Ctrl-C reaches the whole process group; the supervisor decides).
A worker whose supervisor died (its parent changed) shuts down gracefully by itself.
"""
from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import socket
import sys
import time
from typing import Any

from ._pipe import ENV, HEARTBEAT, READY, RETIRE, frame
from .config import Config, ConfigError, report_error

_QUEUE_MAX = 65536  # bytes waiting for the pipe past which nothing more is queued
_EXIT_WAIT = 2.0  # seconds the last bytes get when the worker exits


class _Pipe:
    """The write end of the pipe to the supervisor, fed from the worker's event loop."""

    def __init__(self, fd: int, interval: float) -> None:
        self.fd = fd
        self.interval = interval
        self.parent = os.getppid()
        self.server: Any = None
        self._queue = bytearray()  # bytes the pipe has not taken yet
        os.set_blocking(fd, False)

    def send(self, message: bytes) -> None:
        if len(self._queue) + len(message) > _QUEUE_MAX:
            return  # the supervisor reads nothing: a full pipe already says "alive"
        self._queue += message
        self._flush()

    def _flush(self) -> None:
        try:
            while self._queue:
                del self._queue[:os.write(self.fd, self._queue)]
        except BlockingIOError:
            pass  # the rest at the next beat
        except BrokenPipeError:
            self._queue.clear()  # the supervisor is gone: the parent check below

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.call_soon(self._beat, loop)

    def _beat(self, loop: asyncio.AbstractEventLoop) -> None:
        self.send(HEARTBEAT)
        self.send_metrics()
        if os.getppid() != self.parent and self.server is not None:
            self.parent = os.getppid()
            self.server.request_shutdown()
        loop.call_later(self.interval, self._beat, loop)

    def send_metrics(self) -> None:
        snap = self.server.metrics() if self.server is not None else None
        if snap is not None:
            from .metrics import encode

            self.send(frame(encode(snap)))

    def close(self) -> None:
        """Sends the final counters and what is still queued (up to 2 s), closes the pipe."""
        self.send_metrics()
        deadline = time.monotonic() + _EXIT_WAIT
        while self._queue and (left := deadline - time.monotonic()) > 0:
            select.select([], [self.fd], [], left)
            self._flush()
        os.close(self.fd)


def main() -> int:
    """Runs the worker described by ``$SKIRR_WORKER``; returns its exit status."""
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU):
        signal.signal(signum, signal.SIG_IGN)
    spec = json.loads(os.environ.pop(ENV))
    from .server import Server

    config = Config(**spec["config"])
    sockets = [socket.socket(fileno=fd) for fd in spec["fds"]]
    pipe = _Pipe(spec["pipe"], config.timeout_worker_healthcheck / 5)
    server = Server(config, sockets=sockets)
    if "tls_ticket_key" in spec:  # the supervisor's, shared by every worker
        server._ticket_key = bytes.fromhex(spec["tls_ticket_key"])
    pipe.server = server
    server._signals = (signal.SIGTERM,)
    server._on_loop = pipe.start
    server._on_started = lambda: pipe.send(READY)
    server._on_max_requests = lambda: pipe.send(RETIRE)
    server._serve_metrics = False  # the supervisor serves the sum of its workers
    # Until the loop's own handler is installed (when serving begins, before the application is
    # imported), SIGTERM still means a graceful stop, never the default death.
    signal.signal(signal.SIGTERM, lambda signum, frame: server.request_shutdown())
    try:
        return server.run()
    except ConfigError as exc:
        report_error(exc)
        return 1
    finally:
        pipe.close()


if __name__ == "__main__":
    sys.exit(main())
