"""The server's life: bind, lifespan startup, serve through the native reactor, graceful shutdown.

Owns: the listening socket (Python's ``socket`` module: TCP over IPv4/IPv6 or a Unix-domain socket),
signal handling, the order of startup and shutdown, and the exit status. Never: touches client
sockets or HTTP bytes (``skirr._native`` owns those).

Order: bind (a port in use fails here, before any application code runs: the app's module is not
imported yet) -> load the app -> lifespan startup -> listen -> ``_native.Server.start()``. The
socket is bound but not listening during startup, so a failed startup never accepts a connection.
Shutdown (SIGINT, SIGTERM or ``request_shutdown()``):
stop accepting, close the listening socket, ``native.shutdown()``, wait (polling every 50 ms, up to
``timeout_graceful_shutdown``) until no connection and no request is left, ``native.close()``,
lifespan shutdown, then (``run()``, which owns the loop) the tasks left are cancelled and get
CANCEL_GRACE seconds to end: one that ignores its cancellation is logged and abandoned, status 1.
A second signal forces exit: no more waiting, no lifespan shutdown, status 1; ``run()`` installs
the signal handlers before its loop runs (one signal is one request, whatever handled it before)
and they stay installed until the loop's last task has ended or been abandoned (never the default
death).
TLS (``ssl_certfile``): the context is built before the bind (a bad file is one error, nothing
bound); SIGHUP (a single process in the main thread; a supervisor rolls its workers instead)
reloads its files: new connections get the new context, open ones keep theirs, and a reload
that fails logs one error line and keeps the old one.
``limit_max_requests`` starts the same graceful shutdown once the reactor's ``total_requests``
reaches the limit (plus its jitter), checked every 50 ms by a watcher task that exists only when
the limit is set.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from . import _native
from ._listen import bind_socket, listen_url
from .access import AccessLog
from .config import HTTP_MODE_NUMBER, SHUTDOWN_MARGIN, TRACE, Config, configure_logging
from .lifespan import Lifespan

logger = logging.getLogger("skirr.error")

_T = TypeVar("_T")
_POLL_INTERVAL = 0.05  # seconds between checks while draining
# Seconds between the last accept and closing idle connections: a connection accepted just before
# the listener closed, whose request is already in its socket buffer, gets that request read (and
# answered) instead of being closed as idle.
_ACCEPT_GRACE = 0.05
_HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Seconds the tasks left when serving ends (cancelled requests, WebSocket sessions, the lifespan
# task, tasks the application spawned) get to end after their cancellation; one still running
# then ignored it and is abandoned (rule skirr-stop-bounded-cancel-ignored).
CANCEL_GRACE = 1.0


class Server:
    """Runs one ASGI application on one listening socket until asked to stop.

    Args:
        config: the settings (see :class:`skirr.Config`).
        sockets: bound stream sockets to serve on instead of binding ``config``'s address (a
            supervisor or gunicorn bound them); skirr closes these objects when it stops but never
            removes a Unix socket's file. Default: bind ``config``'s address.

    Attributes:
        config: the settings.
        started: a ``threading.Event`` set once the server accepts connections.
        draining: True once shutdown started (``health_check_path`` answers 503).
        exit_code: ``None`` while running; then 0 after a clean shutdown, 1 after a failed lifespan
            startup or shutdown, a forced exit, an application task that ignored its cancellation,
            or an error raised by :meth:`run`.
    """

    def __init__(self, config: Config, *, sockets: list[socket.socket] | None = None) -> None:
        self.config = config
        self.started = threading.Event()
        self.exit_code: int | None = None
        self.draining = False
        self._port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._force: asyncio.Event | None = None
        # request_shutdown() calls made before serve() had a loop to hand them to: serve() replays
        # them (the second forces, as when serving); the lock orders the two threads' views.
        self._early_requests = 0
        self._early_lock = threading.Lock()
        # Shutdown requests (signals, request_shutdown) seen, and how many there were when serve()
        # ended: one after that forces the end of the wait for cancelled tasks (_reap).
        self._requests = 0
        self._requests_served = 0
        self._owns_loop = False  # run() made the loop: serve() leaves the signal handlers to it
        self._abandoned: set[asyncio.Task[Any]] = set()  # tasks _reap() gave up on
        self._given = list(sockets) if sockets is not None else None
        # Hooks for skirr's own worker processes and gunicorn's worker class (skirr._worker,
        # skirr.workers): the signals handled, a call with the running loop before anything else,
        # a call once accepting, and one at --limit-max-requests instead of shutting down.
        self._signals: tuple[int, ...] = _HANDLED_SIGNALS
        # Of _signals: those a repeat does not count again (gunicorn's arbiter sends SIGTERM again
        # and again to a worker it is removing until it has exited, and enforces
        # --graceful-timeout itself), and those that force at once (gunicorn's SIGINT and
        # SIGQUIT: a quick shutdown); the signals seen so far.
        self._once_signals: tuple[int, ...] = ()
        self._force_signals: tuple[int, ...] = ()
        self._signals_seen: set[int] = set()
        # skirr's own processes (the command line, a worker), which exit once run() returns:
        # the loop's handlers are replaced by exit_on_late_signals()'s as they are removed.
        self._late_exit = False
        self._on_loop: Callable[[asyncio.AbstractEventLoop], None] | None = None
        self._on_started: Callable[[], None] | None = None
        # Called in the loop once lifespan startup is done, just before the listeners start: it
        # may ask for the forced stop (a worker whose supervisor died: skirr._worker, _Orphan),
        # so nothing is served.
        self._before_serving: Callable[[], None] | None = None
        self._on_max_requests: Callable[[], None] | None = None
        # False under skirr's supervisor: it serves --metrics-port with the sum of its workers
        # (each sends metrics() over its heartbeat pipe).
        self._serve_metrics = True
        self._natives: list[Any] = []  # while serving (metrics() reads them)
        # TLS: the supervisor's session-ticket key (80 bytes, shared by its workers), or None:
        # a random one; the context while serving.
        self._ticket_key: bytes | None = None
        self._tls: Any = None
        self._final_metrics: dict[str, Any] | None = None  # metrics() once they are gone

    @property
    def port(self) -> int | None:
        """The bound TCP port (the real one when ``config.port`` is 0); ``None`` before binding
        and for a Unix-domain socket."""
        return self._port

    def run(self) -> int:
        """Serves until shutdown, on a new event loop of the configured kind; blocks.

        Usable from any thread; signal handlers (SIGINT, SIGTERM) are installed only in the main
        thread, so elsewhere stop it with :meth:`request_shutdown`. Once :meth:`serve` ended,
        the loop's tasks left are cancelled and get CANCEL_GRACE (1 s) to end before the loop
        closes; one that ignores its cancellation is abandoned, logged, and the status is 1
        (rule skirr-stop-bounded-cancel-ignored).

        Returns:
            ``exit_code``.

        Raises:
            ConfigError: the address could not be bound, the app could not be loaded
                (``AppLoadError``; ``AppImportError`` when its module raised while being imported,
                with that exception as ``__cause__``), or ``loop="uvloop"`` without uvloop.
        """
        try:
            loop = self.config.loop_factory()()
            self._owns_loop = True
            # Before the loop runs: a signal handled by a Python-level handler (skirr's worker
            # installs one before the loop exists) is then never also delivered through the
            # loop's wakeup fd once the loop's handler is in place; uvloop sets that fd when it
            # starts running, so one SIGTERM in between counted twice and forced the exit
            # (rule skirr-server-one-signal-counted-once).
            # Held (blocked in this thread) while the loop is not running: uvloop reads a signal
            # only while it runs (its wakeup fd exists then), so one that came between the
            # install and the run, or between the runs that close the loop, waited unseen for
            # another (a worker stopped during its startup served on). Held, it is delivered when
            # the next run begins (_running). Threads started before run() would take it
            # instead: skirr's worker starts its own with these signals blocked (skirr._worker).
            held = self._hold_signals()
            try:
                self._install_signal_handlers(loop)
                loop.run_until_complete(self._running(self.serve(), held))
            finally:
                try:
                    self._close_loop(loop, held)
                finally:
                    loop.close()
                    if held is not None:
                        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        except BaseException:
            if self.exit_code is None:
                self.exit_code = 1
            raise
        assert self.exit_code is not None
        return self.exit_code

    def _hold_signals(self) -> set[signal.Signals] | None:
        """Blocks the shutdown signals (``_signals``) in the main thread; returns the mask to
        restore, or None elsewhere (no handlers there)."""
        if threading.current_thread() is not threading.main_thread():
            return None
        return signal.pthread_sigmask(signal.SIG_BLOCK, self._signals)

    async def _running(self, aw: Awaitable[_T], held: set[signal.Signals] | None) -> _T:
        """Awaits ``aw`` with the signals ``held`` by :meth:`_hold_signals` let through while
        the loop runs (a pending one is delivered at once, through the loop's handler), and
        held again before the loop stops."""
        if held is None:
            return await aw
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        try:
            return await aw
        finally:
            signal.pthread_sigmask(signal.SIG_BLOCK, self._signals)

    def _close_loop(self, loop: asyncio.AbstractEventLoop,
                    held: set[signal.Signals] | None = None) -> None:
        """What ``asyncio.Runner`` does on its way out (cancel what is left, finish async
        generators, shut the default executor down), except that the tasks left get CANCEL_GRACE
        seconds to end (rule skirr-stop-bounded-cancel-ignored): an application task that ignores
        its cancellation is logged and abandoned (exit status 1) instead of waited for forever.
        Signals ``held`` (see :meth:`run`) come through only while each step runs."""
        try:
            tasks = asyncio.all_tasks(loop)
            if tasks:
                loop.run_until_complete(self._running(self._reap(tasks), held))
            # An async generator whose clean-up never ends is bounded the same way (asyncio's
            # shutdown_asyncgens gathers their aclose() without a bound).
            loop.run_until_complete(self._running(self._reap(set(), loop.shutdown_asyncgens()),
                                                  held))
            loop.run_until_complete(self._running(loop.shutdown_default_executor(), held))
        finally:
            if threading.current_thread() is threading.main_thread():
                for signum in self._signals:  # serve() left them installed (no default death)
                    loop.remove_signal_handler(signum)
                    if self._late_exit:  # at once: no moment of the default action
                        signal.signal(signum, _late_signal)
                if self._reloads_tls():
                    loop.remove_signal_handler(signal.SIGHUP)  # the TLS reload's

    async def _reap(self, tasks: set[asyncio.Task[Any]],
                    closing: Awaitable[None] | None = None) -> None:
        """Cancels ``tasks`` (those not already cancelled: a second cancel would interrupt their
        clean-up) and waits up to CANCEL_GRACE seconds, or until a signal (or
        :meth:`request_shutdown`), for them to end. Those still running are logged and
        abandoned: the exit status becomes 1, and the loop neither waits for them nor reports
        them as destroyed while pending. With ``closing`` (``loop.shutdown_asyncgens()``), it
        is that awaitable that gets the CANCEL_GRACE seconds, and the tasks it started that are
        abandoned then (the async generators' ``aclose()``)."""
        loop = asyncio.get_running_loop()
        before = asyncio.all_tasks(loop)
        for task in tasks:
            if not task.done() and not task.cancelling():
                task.cancel()
        if closing is not None:
            tasks = {asyncio.ensure_future(closing)}
        # A request from the end of serve() on forces the exit (a fresh event: a force that came
        # before is spent, the cancelled tasks still get their grace).
        self._stop = asyncio.Event()
        self._stop.set()
        self._force = asyncio.Event()
        if self._requests > self._requests_served:
            self._force.set()
        await self._unless_forced(asyncio.wait(tasks, timeout=CANCEL_GRACE))
        pending = [task for task in tasks if not task.done()]
        if not pending:
            return
        if closing is not None:
            pending = list(asyncio.all_tasks(loop) - before)  # it, and the aclose() it awaits
            if self._force.is_set():
                logger.warning("Forced exit: async generator(s) still closing")
            else:
                logger.error("Async generator(s) did not close within %g s: exiting",
                             CANCEL_GRACE)
        elif self._force.is_set():
            logger.warning("Forced exit: %d application task(s) still running after their "
                           "cancellation (%s)", len(pending), _task_kinds(pending))
        else:
            logger.error("%d application task(s) ignored cancellation for %g s (%s): exiting",
                         len(pending), CANCEL_GRACE, _task_kinds(pending))
        self.exit_code = 1
        abandoned = self._abandoned
        if not abandoned:

            def quiet(lp: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
                if context.get("task") in abandoned:
                    return  # "Task was destroyed but it is pending!": said above, once
                lp.default_exception_handler(context)

            loop.set_exception_handler(quiet)
        abandoned.update(pending)

    def metrics(self) -> dict[str, Any] | None:
        """The native counters of ``--metrics-port`` summed over this server's listeners (the
        dict of ``skirr.metrics.merge``); ``None`` when metrics are off or before serving. Still
        readable after :meth:`run` returned (the final counts). Call it from the loop's thread or
        the metrics listener's (a snapshot, not atomic across listeners)."""
        natives = self._natives
        if self.config.metrics_port is None or not natives:
            return self._final_metrics
        from .metrics import merge

        snaps = [native.metrics() for native in natives]
        return snaps[0] if len(snaps) == 1 else merge(snaps)

    def request_shutdown(self) -> None:
        """Starts the graceful shutdown (as SIGTERM does); a second call forces exit. Thread-safe;
        returns at once (wait for :meth:`run` to return). Calls made before serving began count
        the same: one, and the server stops before serving (lifespan startup, then shutdown:
        exit 0); two, and it exits forced (exit 1, the startup cancelled)."""
        with self._early_lock:
            loop = self._loop
            if loop is None:
                self._early_requests += 1
                return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._on_shutdown_request)

    async def serve(self) -> None:
        """Serves on the running loop until shutdown; sets ``exit_code``.

        Raises:
            ConfigError: as :meth:`run`.
        """
        config = self.config
        configure_logging(config.log_level_number, config.log_config, config.use_colors,
                          config.log_level is not None)
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._force = asyncio.Event()
        with self._early_lock:
            self._loop = loop
            early, self._early_requests = self._early_requests, 0
        for _ in range(early):
            self._on_shutdown_request()

        owned = self._given is None
        # Before the bind: a bad certificate or key file is reported with nothing bound.
        self._tls = config.tls_context(self._ticket_key)
        # Before any application code: a port in use is reported first.
        socks = [bind_socket(config)] if owned else list(self._given or ())
        tcp = [s for s in socks if s.family in (socket.AF_INET, socket.AF_INET6)]
        if tcp:
            self._port = tcp[0].getsockname()[1]
        natives: list[Any] = []
        access: AccessLog | None = None
        exporter: Any | None = None
        watcher: asyncio.Future[None] | None = None
        handlers: list[int] = []
        try:
            # Before the import: SIGINT/SIGTERM while the app imports (the handler runs once the
            # import returns) or while lifespan startup runs is a graceful stop, never the
            # default death. run() installed them before its loop ran.
            handlers = [] if self._owns_loop else self._install_signal_handlers(loop)
            handlers += self._install_reload_handler(loop)
            if config.metrics_port is not None and self._serve_metrics:
                # Bound with the main listener, before any application code: a port in use is
                # reported before the import (an empty exposition until serving starts).
                from .metrics import MetricsExporter

                exporter = MetricsExporter(self.metrics, config.host, config.metrics_port)
                exporter.start()
            if self._on_loop is not None:
                self._on_loop(loop)
            app = config.load_app()
            if config.health_check_path:
                from .health import HealthCheck

                app = HealthCheck(app, config.health_check_path, self)
            if config.request_id:
                from .request_id import RequestIdMiddleware

                app = RequestIdMiddleware(app)
            lifespan = Lifespan(app, config.lifespan)
            logger.info("Started server process [%d]", os.getpid())  # uvicorn's words
            stop_at: float | None = None  # loop time the stop began (the shutdown's budget)
            started = await self._unless_forced(self._lifespan_startup(lifespan))
            if not started:
                if started is None:
                    if self._force.is_set():
                        logger.warning("Forced exit: cancelling application startup")
                    lifespan.cancel()
                self.exit_code = 1
                return
            if self._before_serving is not None and not self._stop.is_set():
                self._before_serving()
            if self._stop.is_set() and not self._force.is_set():
                logger.info("Shutdown requested during startup: not serving")
            if not self._stop.is_set():
                access = AccessLog(config.access_log_format) if config.access_log else None
                for sock in socks:
                    sock.setblocking(False)
                    sock.listen(config.backlog)
                    natives.append(self._native_server(app, loop, sock, lifespan.state, access))
                self._natives = natives
                limit = 0
                if config.limit_max_requests:
                    limit = config.limit_max_requests + random.randint(
                        0, config.limit_max_requests_jitter
                    )
                    for native in natives:
                        # the last responses announce the close; with several listeners each
                        # counts its own (the watcher below stops on the sum)
                        native.max_requests = limit
                for native in natives:
                    native.start()
                if self._tls is not None:
                    # The TLS layer runs libssl over BIOs of its own (never the socket), which
                    # kernel TLS cannot carry: files are always read and encrypted; the line says
                    # whether the kernel could.
                    low, high = self._tls.min_version[4:], self._tls.max_version
                    logger.info("TLS on: TLS %s; files: pread + encrypt (%s)",
                                f"{low} only" if low == "1.3" or high is not None
                                else f"{low} and up",
                                "kernel TLS available, not used" if _native.tls_ktls_available()
                                else "no kernel TLS")
                for sock in socks:
                    logger.info("skirr running on %s (Press CTRL+C to quit)", self._url(sock))
                self.started.set()
                if self._on_started is not None:
                    self._on_started()
                if limit:
                    watcher = asyncio.ensure_future(self._watch_max_requests(natives, limit))
                await self._stop.wait()
                stop_at = loop.time()
                self.draining = True
                if config.drain_delay and not self._force.is_set():
                    logger.info(
                        "Draining for %g s: still serving, %s answers 503",
                        config.drain_delay, config.health_check_path or "no health check path",
                    )
                    await self._unless_forced(asyncio.sleep(config.drain_delay))
                logger.info("Shutting down")
                for native in natives:
                    native.stop_accepting()
                for sock in socks:
                    sock.close()
                await self._unless_forced(asyncio.sleep(_ACCEPT_GRACE))
                await self._drain(natives)
                for native in natives:
                    native.close()
                await asyncio.sleep(0)  # let the app tasks see their disconnects
            if self._force.is_set():
                lifespan.cancel()
                self.exit_code = 1
                logger.info("Finished server process [%d]", os.getpid())
                return
            shutdown_done = await self._unless_forced(
                self._lifespan_shutdown(lifespan, loop.time() if stop_at is None else stop_at))
            if self._force.is_set() or not shutdown_done:
                if shutdown_done is None and lifespan.running:
                    logger.warning("Forced exit: cancelling application shutdown")
                lifespan.cancel()
            self.exit_code = 1 if (lifespan.failed or not shutdown_done) else 0
            logger.info("Finished server process [%d]", os.getpid())
        finally:
            self._requests_served = self._requests
            if watcher is not None:
                watcher.cancel()  # run() (or the loop's owner) finishes it on the way out
            for native in natives:
                native.close()
            if self._natives:  # the final counts, without keeping the native servers alive
                self._final_metrics = self.metrics()
                self._natives = []
            if access is not None:
                access.close()  # the lines of the last responses
            if exporter is not None:
                exporter.stop()
            for sock in socks:
                sock.close()
            if owned and config.uds:
                with contextlib.suppress(OSError):
                    os.unlink(config.uds)
            if not self._owns_loop:  # else run() keeps them until the loop's last task ended
                for signum in handlers:
                    loop.remove_signal_handler(signum)
            if self.exit_code is None:
                self.exit_code = 1

    def _native_server(
        self, app: Any, loop: asyncio.AbstractEventLoop, sock: socket.socket, state: Any,
        access: AccessLog | None = None,
    ) -> Any:
        config = self.config
        server_line, extra_lines = config.response_fields
        unix_path = None
        if sock.family == socket.AF_UNIX:
            name = sock.getsockname()
            unix_path = name if isinstance(name, str) and name else (config.uds or "")
        return _native.Server(
            app,
            loop,
            sock.fileno(),
            unix_path=unix_path,
            root_path=config.root_path,
            state=state,
            timeout_keep_alive=float(config.timeout_keep_alive),
            timeout_request_head=float(config.timeout_request_head),
            timeout_write=float(config.timeout_write),
            timeout_request_body=float(config.timeout_request_body),
            limit_request_body=config.limit_request_body,
            limit_concurrency=config.limit_concurrency or 0,
            limit_connections=config.connection_limit,
            logger=logging.getLogger("skirr.error"),
            access_log=access.pending if access else None,
            access_flush=access.flush if access else None,
            proxy_headers=config.proxy_headers,
            proxy_headers_mode=config.proxy_headers_mode,
            forwarded_allow_ips=config.allow_ips,
            date_header=config.date_header,
            server_header=server_line,
            headers=extra_lines,
            trace=_trace if logger.isEnabledFor(TRACE) else None,
            metrics=config.metrics_port is not None,
            ws=config.ws == "auto",
            ws_max_size=config.ws_max_size,
            ws_max_queue=config.ws_max_queue,
            ws_ping_interval=float(config.ws_ping_interval),
            ws_ping_timeout=float(config.ws_ping_timeout),
            ws_per_message_deflate=bool(config.ws_per_message_deflate),
            write_batch_delay=float(config.write_batch_delay),
            ssl_context=self._tls,
            http=HTTP_MODE_NUMBER[config.http],
            http2_max_concurrent_streams=config.http2_max_concurrent_streams,
            http2_max_headers_size=(-1 if config.http2_max_headers_size is None
                                    else config.http2_max_headers_size),
            http2_initial_stream_window_size=config.http2_initial_stream_window_size,
            http2_initial_connection_window_size=(
                -1 if config.http2_initial_connection_window_size is None
                else config.http2_initial_connection_window_size),
            http2_max_frame_size=config.http2_max_frame_size,
        )

    async def _watch_max_requests(self, natives: list[Any], limit: int) -> None:
        """Starts the graceful shutdown once ``limit`` requests have started
        (--limit-max-requests); under a supervisor, asks it for a replacement instead (it stops
        this server once the replacement serves)."""
        assert self._stop is not None
        while not self._stop.is_set():
            if sum(native.total_requests for native in natives) >= limit:
                if self._on_max_requests is not None:
                    logger.info("Maximum request limit of %d exceeded. Asking for a replacement.",
                                limit)
                    self._on_max_requests()
                    return
                logger.info("Maximum request limit of %d exceeded. Terminating process.", limit)
                self._stop.set()
                return
            await asyncio.sleep(_POLL_INTERVAL)

    async def _drain(self, natives: list[Any]) -> None:
        """Waits until no connection and no request is left, the graceful timeout, or a force."""
        assert self._force is not None
        for native in natives:
            native.shutdown()
        timeout = self.config.timeout_graceful_shutdown
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            connections = sum(n.connections for n in natives)
            if not connections and not sum(n.active_requests for n in natives):
                return
            if self._force.is_set():
                logger.warning(
                    "Forced exit: closing %d connection(s), %d request(s) in flight",
                    connections,
                    sum(n.active_requests for n in natives),
                )
                return
            if deadline is not None and loop.time() >= deadline:
                logger.warning(
                    "Graceful shutdown timed out after %g s: closing %d connection(s), "
                    "%d request(s) in flight",
                    timeout,
                    connections,
                    sum(n.active_requests for n in natives),
                )
                return
            await asyncio.sleep(_POLL_INTERVAL)

    async def _lifespan_startup(self, lifespan: Lifespan) -> bool | None:
        """Runs lifespan startup; once a stop is requested (a signal, :meth:`request_shutdown`)
        it gets ``timeout_graceful_shutdown`` more seconds (no bound when that is None). True or
        False as :meth:`Lifespan.startup`; None when it was still running then (logged; the
        caller cancels it and the exit status is 1, as for a forced exit)."""
        assert self._stop is not None
        graceful = self.config.timeout_graceful_shutdown
        startup = asyncio.ensure_future(lifespan.startup())
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({startup, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not startup.done() and graceful is not None:
                await asyncio.wait({startup}, timeout=graceful)
            elif not startup.done():
                await asyncio.wait({startup})
            if startup.done():
                return startup.result()
            logger.error(
                "Application startup did not complete within %g s (--timeout-graceful-shutdown) "
                "of the shutdown request: cancelling it, not serving", graceful)
            return None
        finally:
            for t in (startup, stop):
                if not t.done():
                    t.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await t

    async def _lifespan_shutdown(self, lifespan: Lifespan, stop_at: float) -> bool:
        """Runs lifespan shutdown within what is left of ``drain_delay`` plus
        ``timeout_graceful_shutdown`` since ``stop_at`` (loop time, seconds), plus SHUTDOWN_MARGIN
        less CANCEL_GRACE seconds: with the CANCEL_GRACE its cancelled task may then take, within
        the bound the supervisor gives a worker before it kills it. True when it ended
        in time (completed or failed: ``lifespan.failed`` tells), False when it was still running
        (logged; the caller cancels it and the exit status is 1). No bound when
        ``timeout_graceful_shutdown`` is None."""
        graceful = self.config.timeout_graceful_shutdown
        if graceful is None:
            await lifespan.shutdown()
            return True
        loop = asyncio.get_running_loop()
        left = max(0.0, stop_at + self.config.drain_delay + graceful - loop.time())
        margin = SHUTDOWN_MARGIN - CANCEL_GRACE
        try:
            await asyncio.wait_for(lifespan.shutdown(), left + margin)
        except asyncio.TimeoutError:
            logger.error(
                "Application shutdown did not complete within %g s (--timeout-graceful-shutdown "
                "plus %g s): cancelling it", graceful, margin)
            return False
        return True

    async def _unless_forced(self, aw: Awaitable[_T]) -> _T | None:
        """Awaits ``aw`` unless a forced exit comes first (then cancels it, returns None)."""
        assert self._force is not None
        task = asyncio.ensure_future(aw)
        forced = asyncio.ensure_future(self._force.wait())
        try:
            await asyncio.wait({task, forced}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                return task.result()
            return None
        finally:
            for t in (task, forced):
                if not t.done():
                    t.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await t

    def _install_signal_handlers(self, loop: asyncio.AbstractEventLoop) -> list[int]:
        """The shutdown signals (``_signals``) handled on ``loop``, in the main thread only;
        returns those installed."""
        if threading.current_thread() is not threading.main_thread():
            return []
        for signum in self._signals:
            loop.add_signal_handler(signum, self._on_signal, signum)
        return list(self._signals)

    def _install_reload_handler(self, loop: asyncio.AbstractEventLoop) -> list[int]:
        """SIGHUP reloads the TLS files: a process of its own in the main thread (not a
        supervised or gunicorn worker: only SIGTERM there; skirr's supervisor rolls its workers
        instead); returns ``[SIGHUP]`` when installed."""
        if not self._reloads_tls() or threading.current_thread() is not threading.main_thread():
            return []
        loop.add_signal_handler(signal.SIGHUP, self._reload_tls)
        return [signal.SIGHUP]

    def _reloads_tls(self) -> bool:
        """True for a TLS server that is a process of its own (SIGINT handled, as not by a
        worker of skirr's supervisor; no quick-shutdown signals, as not by gunicorn's)."""
        return self._tls is not None and signal.SIGINT in self._signals and not self._force_signals

    def _reload_tls(self) -> None:
        """SIGHUP: the TLS files read again; on failure one error line, the old context kept."""
        try:
            self._tls.reload()
        except (ValueError, TypeError) as exc:
            logger.error("SIGHUP: TLS reload failed, keeping the current certificates: %s", exc)
            return
        logger.info("SIGHUP: TLS certificates reloaded")

    def _on_signal(self, signum: int) -> None:
        """One shutdown signal: one request (two for ``_force_signals``; none for a repeat of
        one of ``_once_signals``). From the loop's handler, or before the loop runs."""
        logger.debug("Received %s", signal.Signals(signum).name)
        repeat = signum in self._signals_seen
        self._signals_seen.add(signum)
        if repeat and signum in self._once_signals:
            return
        for _ in range(2 if signum in self._force_signals else 1):
            if self._stop is None:  # serve() has not begun: it replays them
                with self._early_lock:
                    self._early_requests += 1
            else:
                self._on_shutdown_request()

    def _on_shutdown_request(self) -> None:
        assert self._stop is not None and self._force is not None
        self._requests += 1
        if self._stop.is_set():
            self._force.set()
        else:
            self._stop.set()

    def _url(self, sock: socket.socket) -> str:
        host = self.config.host if self._given is None and self.config.fd is None else None
        return listen_url(sock, self._tls is not None, host, self.config.uds)


def _task_kinds(tasks: list[asyncio.Task[Any]]) -> str:
    """What ``tasks`` run, counted: "1 http, 1 lifespan" (``http`` a request's application,
    ``websocket`` a WebSocket session's, ``lifespan`` the lifespan task, ``other`` a task the
    application created itself)."""
    counts: dict[str, int] = {}
    for task in tasks:
        coro = task.get_coro()
        name = f"{type(coro).__module__}.{type(coro).__name__}"
        if name == "skirr._native.Request":
            kind = "http"
        elif name == "skirr._native.WebSocket":
            kind = "websocket"
        elif getattr(coro, "__qualname__", None) == "Lifespan._main":
            kind = "lifespan"
        else:
            kind = "other"
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))


def _trace(event: str, client: tuple[str, int] | None) -> None:
    """--log-level trace: one connection event (accepted, closed and why, idle timeouts); the
    client escaped as in the access log (rule skirr-log-escape)."""
    if client:
        host, port = _native.log_escape(str(client[0])), client[1]
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    else:
        where = "unix"
    logger.log(TRACE, "%s - %s", where, event)


def exit_on_late_signals() -> None:
    """For a process that has stopped serving and is exiting (skirr's command line and worker
    processes, after ``run()`` returned; a Server with ``_late_exit`` installs the same handler
    as it removes the loop's): SIGINT or SIGTERM from now on ends the process at once with exit
    status 1, as a second signal forces, never by the signal's default action while an app's
    atexit hook or non-daemon thread holds the exit. (CPython resets every handler to the
    default in the last milliseconds of its own teardown, after the atexit hooks: a signal then
    is still the default death.) Main thread only; not for a process that goes on after
    ``run()``."""
    if threading.current_thread() is threading.main_thread():
        for signum in _HANDLED_SIGNALS:
            signal.signal(signum, _late_signal)


def _late_signal(signum: int, frame: Any) -> None:
    os._exit(1)  # no teardown: the signal asked for the exit to end now


def run(app: Callable[..., Any] | str, **config_kwargs: Any) -> int:
    """Serves ``app`` until SIGINT/SIGTERM: ``Server(Config(app, **config_kwargs)).run()``.

    Args:
        app: an ASGI 3 callable or a ``"module:attr"`` string.
        **config_kwargs: any :class:`skirr.Config` field (``host``, ``port``, ``loop``, ...).

    Returns:
        The exit status (0 after a clean shutdown).

    Raises:
        ConfigError: a bad setting, an app that cannot be loaded, an address that cannot be bound.
    """
    config = Config(app, **config_kwargs)
    if config.supervised:
        from .supervisor import Supervisor

        return Supervisor(config).run()
    return Server(config).run()
