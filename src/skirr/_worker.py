"""One worker process of skirr's supervisor (``skirr.supervisor``): ``python -m skirr._worker``.

Owns: rebuilding the ``Config`` and the inherited listening socket(s) from ``$SKIRR_WORKER``
(JSON: ``config`` fields, ``fds``, ``pipe``, and with TLS ``tls_ticket_key``: the supervisor's
session-ticket key, hex), serving them with ``skirr.Server``, and the write end
of the pipe to the supervisor: messages (``skirr._pipe``: R accepting, H heartbeat, M retire me,
S counters) written from the event loop, so a blocked loop writes nothing.

Thread workers (``"threads"`` in the specification: ``--worker-kind thread``): one ``Server`` per
listener in ``fds`` (or ``threads`` of them sharing the one listener), each ``run()`` in a thread
of its own with its own event loop (``_Threads``). The main thread imports the application once
(the threads' Servers then find its module; a GIL that import turned back on is a failed startup,
the module named), starts the first loop alone and the others once it accepts (a failed startup
is then reported once), and owns the pipe: R once every loop accepts, H (with the sum of the
loops' counters) only while every loop has beaten within two beat intervals, M once the requests
of all the loops reach --limit-max-requests. SIGTERM (handled in the main thread) drains every
loop; a loop that ends unasked (a failed startup) stops the others gracefully. The exit status is
0 only when every loop's is.

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
cannot hide the death. A thread may be scheduled late (a whole startup can run first), so the
main thread looks too, at two gates: before anything of the application's, and in each loop just
before its listeners start; a worker whose supervisor died before it served never serves. Once
the supervisor is gone the thread (or the gate that saw it first) does the supervisor's part:

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
import dataclasses
import functools
import json
import logging
import os
import random
import re
import select
import signal
import socket
import sys
import threading
import time
import warnings
from typing import Any

from ._pipe import ENV, HEARTBEAT, READY, RETIRE, STARTUP_SIGNALS, frame
from ._signals import SignalRelay
from .config import (
    SHUTDOWN_MARGIN,
    Config,
    ConfigError,
    configure_logging,
    gil_enabled,
    import_from_string,
    report_error,
)

logger = logging.getLogger("skirr.error")

_QUEUE_MAX = 65536  # bytes waiting for the pipe past which nothing more is queued
_EXIT_WAIT = 2.0  # seconds the last bytes get when the worker exits
_ORPHAN_CHECK = 0.5  # seconds between two checks of the parent (the pipe wakes the watch at once)
_ORPHAN_STOP = 3.0  # seconds an orphan still starting (or done serving) gets to exit by itself


class _Pipe:
    """The write end of the pipe to the supervisor, fed from the worker's event loop (with
    thread workers, from the main thread: ``_Threads``). ``send`` is thread-safe."""

    def __init__(self, fd: int, interval: float) -> None:
        self.fd = fd
        self.interval = interval
        self.server: Any = None  # what metrics() is read from (a Server, or _Threads)
        self.last_beat = time.monotonic()  # the loop's latest beat (the orphan watch reads it)
        self._queue = bytearray()  # bytes the pipe has not taken yet
        self._lock = threading.Lock()
        os.set_blocking(fd, False)

    def send(self, message: bytes) -> None:
        with self._lock:
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
            with self._lock:
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
        self.servers: list[Any] = []  # the worker's Server (one per thread with thread workers)
        # The death is acted on once, by this thread or at a gate of the main thread's (the
        # thread alone could be late: a startup may run before it is scheduled at all); the
        # Servers past their last gate (serving) are known under the same lock.
        self._lock = threading.Lock()
        self._seen = False
        self._serving: list[Any] = []
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

    def gate(self, server: Any = None) -> bool:
        """In the worker's main thread, where it must not go on past a dead supervisor: before
        anything of the application's (``server`` None), and in ``server``'s loop just before
        its listeners start (``Server._before_serving``). True: go on (``server`` counts as
        serving from now on). False: the supervisor is gone: the line "exiting before serving"
        is logged once (here or by the thread) and ``server``'s forced stop is asked for, so
        nothing is served and the worker exits 1."""
        with self._lock:
            if not self._seen and not self.gone(0):
                if server is not None:
                    self._serving.append(server)
                return True
            acted, self._seen = self._seen, True
        if not acted:
            self._log_starting()
        if server is not None:
            server._on_shutdown_request()
            server._on_shutdown_request()  # forced: exit status 1
        return False

    def _log_starting(self) -> None:
        logger.warning("Worker [%d]: supervisor [%d] is gone: exiting before serving",
                       os.getpid(), self.supervisor)

    def start(self) -> None:
        """Starts the thread with the shutdown signals blocked in it, for good: one sent to the
        worker is then taken by the main thread, which holds it while its event loop is not
        running (``Server.run``); taken here, uvloop would not see it until a second came."""
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STARTUP_SIGNALS)
        try:
            super().start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def run(self) -> None:
        while not self.gone(_ORPHAN_CHECK):
            pass
        since = time.monotonic()
        with self._lock:
            acted, self._seen = self._seen, True
            servers = list(self.servers)
            serving = bool(servers) and all(server in self._serving for server in servers)
        if acted:  # a gate saw it first: the main thread stops the worker before serving
            serving = False
        elif serving:
            logger.warning("Worker [%d]: supervisor [%d] is gone: shutting down gracefully",
                           os.getpid(), self.supervisor)
            for server in servers:
                try:
                    server._loop.call_soon_threadsafe(self._stop_once, server)
                except RuntimeError:  # its loop closed: serving is over
                    pass
        else:
            self._log_starting()
            if all(server._loop is None for server in servers):
                os._exit(1)  # no application code has run yet: nothing to cancel
            for server in servers:
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


_TICK = 0.05  # seconds between two looks of a thread worker's main thread at its loops
_STALE = 2  # beats (fifths of the health-check timeout) a loop may miss before the worker's
# heartbeat stops (thread workers)
_GIL_WARNING = re.compile(r"has been enabled to load module '([^']+)'")


class _Threads:
    """--worker-kind thread: ``spec["threads"]`` Servers in as many threads of this process, one
    event loop each, as one worker to the supervisor (see the module's docstring)."""

    def __init__(self, config: Config, spec: dict[str, Any], orphan: _Orphan | None) -> None:
        from .server import Server

        self.config = config
        self.count: int = spec["threads"]
        self.orphan = orphan
        fds: list[int] = spec["fds"]
        if len(fds) == self.count:  # one SO_REUSEPORT listener each
            sockets = [socket.socket(fileno=fd) for fd in fds]
        else:  # the one shared listener: a descriptor each (each Server closes its own)
            sockets = [socket.socket(fileno=fds[0])]
            sockets += [socket.socket(fileno=os.dup(fds[0])) for _ in range(self.count - 1)]
        # --limit-max-requests counts the whole process's requests (here), not each loop's.
        self.limit = 0
        each = config
        if config.limit_max_requests:
            self.limit = config.limit_max_requests + random.randint(
                0, config.limit_max_requests_jitter)
            each = dataclasses.replace(config, limit_max_requests=None,
                                       limit_max_requests_jitter=0)
        self.pipe = _Pipe(spec["pipe"], config.timeout_worker_healthcheck / 5)
        self.pipe.server = self  # metrics(): the sum of the threads'
        self.servers: list[Any] = []
        for index, sock in enumerate(sockets):
            server = Server(each, sockets=[sock])
            if "tls_ticket_key" in spec:
                server._ticket_key = bytes.fromhex(spec["tls_ticket_key"])
            server._signals = ()  # the main thread takes SIGTERM for every loop
            server._serve_metrics = False  # the supervisor serves the sum of its workers
            server._on_loop = functools.partial(self._on_loop, index)
            self.servers.append(server)
        self.beats = [0.0] * self.count  # each loop's latest beat (monotonic; 0 = none yet)
        self.results: list[int | None] = [None] * self.count
        self.threads = [threading.Thread(target=self._serve, args=(i,), name=f"skirr-loop-{i}")
                        for i in range(self.count)]
        self.started: list[threading.Thread] = []
        self.stopping = False

    def metrics(self) -> dict[str, Any] | None:
        """The threads' ``Server.metrics()`` summed (``skirr.metrics.merge``); None when off."""
        snaps = [snap for server in self.servers if (snap := server.metrics()) is not None]
        if not snaps:
            return None
        from .metrics import merge

        return merge(snaps)  # of one snapshot too (a loop not serving yet): the same shape

    def _requests(self) -> int:
        """Requests started so far over every loop (the native counters, read from here as
        metrics() reads them: a snapshot)."""
        return sum(n.total_requests for server in self.servers for n in list(server._natives))

    def _on_loop(self, index: int, loop: asyncio.AbstractEventLoop) -> None:
        loop.call_soon(self._beat, index, loop)

    def _beat(self, index: int, loop: asyncio.AbstractEventLoop) -> None:
        """In loop ``index``: its beat (a blocked loop makes none: the main thread then stops
        the worker's heartbeat)."""
        self.beats[index] = time.monotonic()
        loop.call_later(self.pipe.interval, self._beat, index, loop)

    def _serve(self, index: int) -> None:
        try:
            self.results[index] = self.servers[index].run()
        except ConfigError as exc:
            report_error(exc)
            self.results[index] = 1
        except BaseException:
            logger.exception("Worker [%d]: the event loop of thread %d failed", os.getpid(), index)
            self.results[index] = 1

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        """In the main thread: every loop started stops gracefully (a second SIGTERM forces
        them); those not started yet never start."""
        self.stopping = True
        for thread in self.started:
            self.servers[self.threads.index(thread)].request_shutdown()

    @staticmethod
    def _in_loop(server: Any, fn: Any, *args: Any) -> bool:
        """Schedules ``fn(*args)`` in ``server``'s event loop (from any thread); False when the
        server has no loop yet (not serving), True once scheduled or when its loop has closed
        (it is done: nothing left to do there)."""
        loop = server._loop
        if loop is None:
            return False
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # its loop closed
            pass
        return True

    @classmethod
    def _stop_gracefully(cls, server: Any) -> None:
        """The graceful shutdown of ``server`` unless one is under way (from any thread)."""
        if not cls._in_loop(server, _Orphan._stop_once, server):
            server.request_shutdown()  # not serving yet: it stops before it does

    @classmethod
    def _announce_close(cls, server: Any) -> None:
        """From now on ``server``'s HTTP/1.1 responses say ``connection: close`` and end their
        connection (RFC 9112 §9.6), as a process worker's last responses before its request
        limit do: the process is about to be replaced. Applied in the server's loop (the native
        servers belong to it) within one tick of the limit, so the responses of that tick may
        still keep their connection; the graceful stop after the replacement closes those. A
        server not serving has nothing to announce."""

        def apply() -> None:
            for native in server._natives:
                native.max_requests = 1  # every total from 1 on: each response from now

        cls._in_loop(server, apply)

    def _load(self) -> bool:
        """Imports the application (once: every thread's Server then finds its module) and the
        loop; False when that failed (reported once) or turned the GIL back on."""
        config = self.config
        gil_before = gil_enabled()
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("default")
                if isinstance(config.app, str):
                    import_from_string(config.app, config.app_dir)
                config.loop_factory()
        except ConfigError as exc:
            report_error(exc)
            return False
        culprit = None
        for warning in caught:
            found = _GIL_WARNING.search(str(warning.message))
            if found:
                culprit = culprit or found.group(1)
                continue
            warnings.showwarning(warning.message, warning.category, warning.filename,
                                 warning.lineno)
        if not gil_before and gil_enabled():
            logger.error("Worker [%d]: importing the application turned the GIL back on (module "
                         "%s does not declare that it runs without the GIL): --worker-kind "
                         "thread cannot run; use --worker-kind process", os.getpid(),
                         repr(culprit) if culprit else "(unknown)")
            return False
        return True

    def run(self) -> int:
        """Serves until SIGTERM; returns the exit status: 0 only when every thread's is 0."""
        config, pipe = self.config, self.pipe
        _early_sigterms.to(lambda signum: self._on_sigterm(signum, None))
        if self.orphan is not None:
            self.orphan.config, self.orphan.pipe = config, pipe
            self.orphan.servers = self.servers
            for server in self.servers:
                server._before_serving = functools.partial(self.orphan.gate, server)
        try:
            configure_logging(config.log_level_number, config.log_config, config.use_colors,
                              config.log_level is not None)
            if not self._load():
                return 1
            self._start(self.threads[0])  # alone first: a failed startup is reported once
            self._watch()
            for thread in self.started:
                thread.join()
            return 0 if all(self.results[self.threads.index(t)] == 0 for t in self.started) \
                else 1
        finally:
            if self.orphan is not None:
                self.orphan.finished_at = time.monotonic()
            pipe.close()

    def _start(self, thread: threading.Thread) -> None:
        self.started.append(thread)
        if self.stopping:  # SIGTERM came while the application imported: as a process worker,
            # its lifespan starts and shuts down, and nothing is served
            self.servers[self.threads.index(thread)].request_shutdown()
        thread.start()

    def _watch(self) -> None:
        """The main thread until every loop started has ended: starts the other loops once the
        first accepts, sends READY once all accept, the heartbeat while every loop beats, RETIRE
        at the request limit; stops every loop once one ends unasked (a failed startup)."""
        pipe = self.pipe
        ready = retired = False
        beat_at = 0.0
        while any(thread.is_alive() for thread in self.started):
            time.sleep(_TICK)  # the SIGTERM handler runs here
            if self.stopping:
                ready = True  # no READY, no more loops
            elif any(not t.is_alive() for t in self.started):
                # A loop ended without a SIGTERM: its startup failed (the supervisor then sees
                # no READY: a failed startup, reported once), its server failed, or the orphan
                # watch stopped it: every loop stops, gracefully (never forcing a drain under
                # way).
                self.stopping = True
                for thread in self.started:
                    self._stop_gracefully(self.servers[self.threads.index(thread)])
            elif len(self.started) < self.count and self.servers[0].started.is_set():
                for thread in self.threads[1:]:
                    self._start(thread)
            elif not ready and all(server.started.is_set() for server in self.servers):
                ready = True
                pipe.send(READY)
            now = time.monotonic()
            if now >= beat_at:
                beat_at = now + pipe.interval
                live = [self.beats[i] for i, t in enumerate(self.threads)
                        if t in self.started and t.is_alive() and self.beats[i]]
                if live and now - min(live) <= _STALE * pipe.interval:
                    pipe.last_beat = now
                    pipe.send(HEARTBEAT)
                    pipe.send_metrics()
            # Only once READY is sent: the supervisor drops a RETIRE from a worker that is not
            # its slot's current one yet, and a successor's first loop serves (and counts) while
            # the others still start. READY then RETIRE, in the pipe's order, always counts.
            if (self.limit and ready and not retired and not self.stopping
                    and self._requests() >= self.limit):
                retired = True
                for server in self.servers:
                    self._announce_close(server)
                logger.info("Maximum request limit of %d exceeded. Asking for a replacement.",
                            self.limit)
                pipe.send(RETIRE)


# The SIGTERM handler from main()'s first line on: notes each until a Server (or the thread
# workers' _on_sigterm) can act on it, then hands them over.
_early_sigterms = SignalRelay()


def main() -> int:
    """Runs the worker described by ``$SKIRR_WORKER``; returns its exit status."""
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU):
        signal.signal(signum, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _early_sigterms)
    # A signal sent while the interpreter started (a roll or stop of a worker just spawned, a
    # Ctrl-C) waited, blocked; now it is ignored or noted, never the default death.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STARTUP_SIGNALS)
    spec = json.loads(os.environ.pop(ENV))
    orphan = None
    if "supervisor" in spec:
        orphan = _Orphan(spec["supervisor"], spec["pipe"])
        orphan.start()
        if not orphan.gate():  # dead already (e.g. before this interpreter ran): not a line of
            return 1  # the application's runs
    from .server import Server

    config = Config(**spec["config"])
    if "threads" in spec:
        return _Threads(config, spec, orphan).run()
    sockets = [socket.socket(fileno=fd) for fd in spec["fds"]]
    pipe = _Pipe(spec["pipe"], config.timeout_worker_healthcheck / 5)
    server = Server(config, sockets=sockets)
    if "tls_ticket_key" in spec:  # the supervisor's, shared by every worker
        server._ticket_key = bytes.fromhex(spec["tls_ticket_key"])
    pipe.server = server
    if orphan is not None:
        orphan.config, orphan.pipe, orphan.servers = config, pipe, [server]
        server._before_serving = functools.partial(orphan.gate, server)
    server._signals = (signal.SIGTERM,)
    server._on_loop = pipe.start
    server._on_started = lambda: pipe.send(READY)
    server._on_max_requests = lambda: pipe.send(RETIRE)
    server._serve_metrics = False  # the supervisor serves the sum of its workers
    server._late_exit = True  # the process exits once run() returns
    # Until run() installs the loop's own handler (before its loop runs), SIGTERM is a graceful
    # stop through the relay; those it noted before the Server existed count too.
    _early_sigterms.to(lambda signum: server.request_shutdown())
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
    status = main()
    from .server import exit_on_late_signals

    exit_on_late_signals()  # the exit that follows is not the default death's
    sys.exit(status)
