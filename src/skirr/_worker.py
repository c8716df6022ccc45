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

A worker never outlives its supervisor (``_Orphan``), whatever it is doing: from its first line, a
thread watches the pipe (its read end is the supervisor's alone: the write end reports POLLERR
once it is closed, i.e. at the supervisor's death, even one before the worker ran) and its parent
(against the supervisor pid in ``$SKIRR_WORKER``, not a ppid read later, which may already be
the reaper's). A thread, not the event loop, so an import or a lifespan startup that never ends
cannot hide the death. Once the supervisor is gone the thread does the supervisor's part:

- still starting (importing, lifespan startup, before accepting): one line "Worker [PID]:
  supervisor [N] is gone: exiting before serving", then the worker exits 1: at once before the
  application's code ran; else the startup is cancelled (a forced stop), and past
  ``_ORPHAN_STOP`` seconds (an import that does not return) ``os._exit``;
- serving: one line "... is gone: shutting down gracefully" and the graceful shutdown SIGTERM
  starts (never a second request, which would force it: a drain under way goes on), with the
  bounds the supervisor would have kept: past drain delay + graceful timeout + SHUTDOWN_MARGIN,
  or a loop silent for ``timeout_worker_healthcheck``, it exits 1 (``os._exit``);
- done serving but not exited (e.g. a thread of the app's keeps the interpreter): exits 1
  ``_ORPHAN_STOP`` seconds later.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import select
import signal
import socket
import sys
import threading
import time
from typing import Any

from ._pipe import ENV, HEARTBEAT, READY, RETIRE, frame
from .config import SHUTDOWN_MARGIN, Config, ConfigError, report_error

logger = logging.getLogger("skirr.error")

_QUEUE_MAX = 65536  # bytes waiting for the pipe past which nothing more is queued
_EXIT_WAIT = 2.0  # seconds the last bytes get when the worker exits
_ORPHAN_CHECK = 0.5  # seconds between two checks of the parent (the pipe wakes the watch at once)
_ORPHAN_STOP = 3.0  # seconds an orphan still starting (or done serving) gets to exit by itself


class _Pipe:
    """The write end of the pipe to the supervisor, fed from the worker's event loop."""

    def __init__(self, fd: int, interval: float) -> None:
        self.fd = fd
        self.interval = interval
        self.server: Any = None
        self.last_beat = time.monotonic()  # the loop's latest beat (the orphan watch reads it)
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
        self.last_beat = time.monotonic()
        self.send(HEARTBEAT)
        self.send_metrics()
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


class _Orphan(threading.Thread):
    """Watches for the supervisor's death from the worker's first line on; then stops the worker
    (see the module's docstring): a daemon thread, so the event loop's state does not matter."""

    def __init__(self, supervisor: int, fd: int) -> None:
        super().__init__(name="skirr-orphan-watch", daemon=True)
        self.supervisor = supervisor
        self._fd = os.dup(fd)  # its own: the worker closes the pipe's fd on its way out
        # A parent other than the supervisor from the start: it died already (the pipe says so
        # too) or runs the worker through a wrapper process; the pipe alone decides then.
        self._parent_check = os.getppid() == supervisor
        self.server: Any = None
        self.pipe: _Pipe | None = None
        self.config: Config | None = None
        self.finished_at: float | None = None  # main() is done serving, the process exits

    def gone(self, timeout: float) -> bool:
        """Whether the supervisor is gone, waiting up to ``timeout`` seconds for the pipe."""
        poller = select.poll()
        poller.register(self._fd, 0)  # POLLERR (the read end closed) and POLLHUP come anyway
        if poller.poll(timeout * 1000):
            return True
        return self._parent_check and os.getppid() != self.supervisor

    def run(self) -> None:
        while not self.gone(_ORPHAN_CHECK):
            pass
        since = time.monotonic()
        server = self.server
        serving = server is not None and server.started.is_set()
        if serving:
            logger.warning("Worker [%d]: supervisor [%d] is gone: shutting down gracefully",
                           os.getpid(), self.supervisor)
            loop = server._loop
            try:
                loop.call_soon_threadsafe(self._stop_once, server)
            except RuntimeError:  # its loop closed: serving is over
                pass
        else:
            logger.warning("Worker [%d]: supervisor [%d] is gone: exiting before serving",
                           os.getpid(), self.supervisor)
            if server is None or server._loop is None:
                os._exit(1)  # no application code has run yet: nothing to cancel
            server.request_shutdown()
            server.request_shutdown()  # forced: the startup is cancelled, exit status 1
        while True:
            time.sleep(0.05)
            self._check_bounds(since, serving)

    @staticmethod
    def _stop_once(server: Any) -> None:
        """In the loop: the graceful shutdown, unless one is under way (a second request would
        force the exit of a drain the supervisor started)."""
        if not server._stop.is_set():
            server._on_shutdown_request()

    def _check_bounds(self, since: float, serving: bool) -> None:
        now = time.monotonic()
        config, pipe = self.config, self.pipe
        if self.finished_at is not None or not serving or config is None or pipe is None:
            start = since if self.finished_at is None else max(since, self.finished_at)
            if now - start > _ORPHAN_STOP:
                self._exit("the worker did not exit within %g s", _ORPHAN_STOP)
            return
        graceful = config.timeout_graceful_shutdown
        if graceful is not None:
            bound = config.drain_delay + graceful + SHUTDOWN_MARGIN
            if now - since > bound:
                self._exit("the graceful shutdown did not end within %g s", bound)
        silent = config.timeout_worker_healthcheck
        if now - pipe.last_beat > silent:
            self._exit("the event loop did not answer the heartbeat for %g s", silent)

    def _exit(self, why: str, seconds: float) -> None:
        logger.warning("Worker [%d]: supervisor [%d] is gone and " + why + ": exiting",
                       os.getpid(), self.supervisor, seconds)
        os._exit(1)


def main() -> int:
    """Runs the worker described by ``$SKIRR_WORKER``; returns its exit status."""
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU):
        signal.signal(signum, signal.SIG_IGN)
    spec = json.loads(os.environ.pop(ENV))
    orphan = None
    if "supervisor" in spec:
        orphan = _Orphan(spec["supervisor"], spec["pipe"])
        orphan.start()
    from .server import Server

    config = Config(**spec["config"])
    sockets = [socket.socket(fileno=fd) for fd in spec["fds"]]
    pipe = _Pipe(spec["pipe"], config.timeout_worker_healthcheck / 5)
    server = Server(config, sockets=sockets)
    if "tls_ticket_key" in spec:  # the supervisor's, shared by every worker
        server._ticket_key = bytes.fromhex(spec["tls_ticket_key"])
    pipe.server = server
    if orphan is not None:
        orphan.config, orphan.pipe, orphan.server = config, pipe, server
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
        if orphan is not None:
            orphan.finished_at = time.monotonic()
        pipe.close()


if __name__ == "__main__":
    sys.exit(main())
