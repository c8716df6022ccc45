"""A gunicorn worker class: ``gunicorn -k skirr.workers.SkirrWorker module:app``.

For teams that keep gunicorn as their process manager: gunicorn's arbiter binds, forks, watches
and signals the workers; each worker serves the ASGI application (gunicorn loads it) with skirr on
the sockets gunicorn bound. Needs gunicorn (not a dependency of skirr).

gunicorn's settings, mapped to skirr's:

    --keep-alive SECONDS          timeout_keep_alive
    --graceful-timeout SECONDS    timeout_graceful_shutdown
    --max-requests N (+ jitter)   limit_max_requests (the worker exits; the arbiter starts another)
    --backlog N                   backlog
    --log-level                   the skirr loggers' level (through gunicorn's error log handlers)
    --timeout SECONDS             heartbeat: the worker's event loop notifies the arbiter every
                                  quarter of it (at most every second), so a blocked loop is
                                  killed by the arbiter after --timeout

Signals (as gunicorn's own workers), from the fork on (also while gunicorn imports the app):
SIGTERM graceful (in-flight requests finish; the arbiter sends it again to a worker it is
removing, as after SIGTTOU, and a repeat changes nothing: gunicorn enforces --graceful-timeout
itself); SIGQUIT and SIGINT immediate (exit status 0, as gunicorn's own workers); SIGUSR1
reopens log files. A worker whose arbiter died shuts down gracefully. Subclass and set
``CONFIG_KWARGS`` for other ``skirr.Config`` settings (``loop``, ``lifespan``). A failed lifespan startup exits with gunicorn's boot-error status (3),
which stops the arbiter; a stop asked for during startup is not a failure ("Shutdown requested
during startup: not serving", exit 0; the arbiter goes on, as after a SIGHUP).
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from typing import Any

from gunicorn.arbiter import Arbiter
from gunicorn.workers.base import Worker

from ._signals import SignalRelay
from .config import Config
from .server import Server


_SHUTDOWN = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)


class SkirrWorker(Worker):  # type: ignore[misc]
    """gunicorn ``Worker`` running ``skirr.Server`` on the arbiter's sockets."""

    CONFIG_KWARGS: dict[str, Any] = {"loop": "auto", "lifespan": "auto"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        error_log = self.log.error_log
        skirr_log = logging.getLogger("skirr")
        skirr_log.handlers = list(error_log.handlers)
        skirr_log.setLevel(error_log.level)
        skirr_log.propagate = False
        self._server: Server | None = None
        self._early = SignalRelay()  # shutdown signals: noted until the Server exists

    def init_signals(self) -> None:
        # gunicorn's handlers would exit at once. Until the Server's event loop handles them
        # (gunicorn imports the app in between), SIGTERM/SIGINT/SIGQUIT are noted and handed to
        # the Server: never the default death.
        for signum in self.SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        for signum in _SHUTDOWN:
            signal.signal(signum, self._early)
        signal.signal(signal.SIGUSR1, self.handle_usr1)
        signal.siginterrupt(signal.SIGUSR1, False)

    def _config(self) -> Config:
        cfg = self.cfg
        return Config(
            app=self.wsgi,
            timeout_keep_alive=float(cfg.keepalive),
            timeout_graceful_shutdown=float(cfg.graceful_timeout),
            limit_max_requests=self.max_requests if cfg.max_requests > 0 else None,
            backlog=cfg.backlog,
            log_level=logging.getLogger("skirr").level or "info",
            **self.CONFIG_KWARGS,
        )

    def run(self) -> None:
        server = Server(self._config(), sockets=[s.sock for s in self.sockets])
        server._signals = _SHUTDOWN
        server._once_signals = (signal.SIGTERM,)
        server._force_signals = (signal.SIGINT, signal.SIGQUIT)
        server._on_loop = self._on_loop
        self._server = server
        self._early.to(server._on_signal)  # not serving yet: counted for serve() to replay
        status = server.run()
        if not server.started.is_set() and not server._requests:
            sys.exit(Arbiter.WORKER_BOOT_ERROR)  # it failed to start, nobody asked it to stop
        if server._signals_seen & set(server._force_signals):
            status = 0  # the quick shutdown gunicorn asked for, as its own workers end it
        sys.exit(status)

    def _on_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.call_soon(self._beat, loop, max(0.05, min(1.0, self.timeout / 4)))

    def _beat(self, loop: asyncio.AbstractEventLoop, interval: float) -> None:
        self.notify()
        if self.ppid != os.getppid() and self._server is not None:
            self.log.info("Parent changed, shutting down: %s", self)
            self.ppid = os.getppid()
            self._server.request_shutdown()
        loop.call_later(interval, self._beat, loop, interval)
