"""The supervisor of ``--workers N`` (and ``--reload``): binds, runs, watches and replaces workers.

Owns: the listening sockets (bound here, before any worker starts, so a port in use is reported
once), one worker process per slot (``python -m skirr._worker``, a fresh interpreter that imports
the application itself), their heartbeats, restarts, recycling and the process signals. Never:
imports the application or reads a client connection (it only resets, unread, those queued on a
slot whose worker cannot start: see Slots).

Slots. On Linux over TCP each slot has its own ``SO_REUSEPORT`` listener, so the kernel spreads
new connections over the workers; the supervisor keeps every slot's socket open for the slot's
whole life and hands the same socket to the slot's next worker, so connections queued on a dead
worker's socket are served by its successor instead of being reset (closing a reuse-port
listener drops its queue). While a slot has no serving worker (its worker died and the
replacement has not reported serving, or its first worker is still starting) and another slot
serves, new connections go to the serving slots only (the routing program of SIGTTOU, below);
one line says when a slot that served is routed away and when it serves again. When a
replacement cannot start (a back-off before the next try), the connections queued on the slot's
listener are reset (accepted and closed with SO_LINGER 0) rather than left waiting for the
back-off; with no routing program, so are the new ones the kernel keeps giving the slot. When no
slot serves, every queue waits for its next worker. The first worker listens on its slot's
socket itself (so a failed startup never accepts a connection); every later slot's socket is
listened on here, in slot order, as its first worker starts, which keeps the order of the
kernel's reuse-port group known for routing. ``reuse_port=False``, a Unix-domain socket or an
inherited ``fd`` share one listener between every slot instead.

Thread workers (``worker_kind="thread"``, free-threaded Python only). One slot, whose one worker
process runs ``workers`` event loops in as many threads (``skirr._worker``): the slot holds
``workers`` ``SO_REUSEPORT`` listeners (one per thread; or the one shared listener, every loop
accepting from it), all handed to its worker. Everything below applies with that process as the
unit: it is ready once every loop accepts, its heartbeat stops when any loop is blocked (the whole
process is killed and replaced), SIGTERM drains every loop, SIGHUP and --limit-max-requests
(counted over the loops) replace the whole process. SIGTTIN and SIGTTOU log one warning line and
change nothing.

Startup. The first worker starts alone; once it accepts, the others start. If it fails (an import
error, a failed lifespan startup) its error was printed once and the supervisor exits 1, with no
restart loop. Later, a worker that dies before accepting is restarted after a back-off that
doubles from 0.1 s up to 10 s; one that dies while serving is restarted at once.

Resources. Starting a worker needs a pipe, a process and a selector entry; when the system
refuses one (EMFILE, ENFILE, ENOMEM, EAGAIN ... from ``pipe``, ``fork``, ``epoll_ctl``), the
supervisor logs one line ("Could not start a worker for slot N: [Errno 24] Too many open files:
retrying in 0.1 s") and tries again after a back-off that doubles from 0.1 s up to 10 s, whatever
the start was for (a first start, a restart, a rolling restart's or --limit-max-requests'
replacement, SIGTTIN); a new slot SIGTTIN cannot bind is one line too. No resource error ends the
supervisor: the workers it has keep serving meanwhile.

Heartbeat. Each worker's event loop writes a byte to its pipe every fifth of
``timeout_worker_healthcheck``; a worker silent for that long (a blocked loop) is killed (SIGKILL)
and replaced, with an error line naming it.

Its own death. A supervisor that dies (SIGKILL, a crash) leaves no worker behind: each worker
watches the pipe's read end (the supervisor's alone) and the supervisor's pid from its first line
on, and then stops by itself (``skirr._worker``: exits 1 while still starting, shuts down
gracefully while serving, within the bounds the supervisor would have kept).

Metrics (``--metrics-port``). The supervisor serves the listener (``skirr.metrics``, bound before
any worker starts); each worker sends its counters after every heartbeat and when it exits, and a
scrape sums them (``skirr.metrics.Aggregate``: exited workers' final counters, live workers'
latest counters and gauges).

Replacing a worker without dropping connections (SIGHUP, ``--limit-max-requests``): start the
slot's new worker on the same socket, wait until it accepts, then stop the old one gracefully
(SIGTERM). Both accept from the one socket meanwhile, so no connection is refused or reset.

TLS (``ssl_certfile``). The supervisor builds the context once before binding (a bad file is one
``skirr: error:`` line, exit 1, before any worker starts) and makes one random session-ticket key
(80 bytes) for the run, handed to every worker with its specification, so a session ticket one
worker issued is resumed by whichever worker the kernel gives the reconnect to; each worker
builds its own context from the same files and that key. The key never changes within a run.

Signals (as gunicorn's arbiter):

    SIGTERM, SIGINT  graceful: every worker gets SIGTERM (its --drain-delay, then its graceful
                     shutdown); exit 0 once all have exited cleanly (1 if one failed). A second
                     one: SIGKILL every worker, exit 1.
    SIGHUP           rolling restart with fresh application code, one slot at a time. With TLS
                     the --ssl-* files are checked here first: a reload that fails is one
                     error line, and the workers keep serving with the old files.
    SIGTTIN          one worker more (a new slot).
    SIGTTOU          one worker fewer (the newest slot; never below one). Its own listener
                     first stops getting new connections (a classic BPF program on the
                     reuse-port group picks one of the remaining serving listeners at random;
                     the supervisor listens every slot's socket itself, in slot order, so it
                     knows each one's index in the group); once its accept queue is empty
                     (at least 0.5 s later, at most 10 s) its worker stops gracefully and the
                     listener closes, so no queued connection is reset.
"""
from __future__ import annotations

import ctypes
import dataclasses
import json
import logging
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
from typing import Any

from . import _pipe
from ._listen import bind_socket, bind_tcp, listen_url
from .config import SHUTDOWN_MARGIN, Config, ConfigError, configure_logging

logger = logging.getLogger("skirr.error")

BACKOFF_FIRST = 0.1  # seconds before restarting a worker that failed its startup once
BACKOFF_MAX = 10.0  # the back-off doubles per consecutive failure up to this
TICK = 0.05  # seconds: the longest the supervisor sleeps between checks
KILL_MARGIN = SHUTDOWN_MARGIN  # seconds past the workers' own graceful timeout before they are killed
RETIRE_SETTLE = 0.5  # seconds after SIGTTOU stops routing to a slot before its queue may count as
# drained (handshakes the kernel routed to it just before complete within a round trip)
RETIRE_MAX = 10.0  # seconds a removed slot's worker gets to drain its accept queue
# Linux: SO_ATTACH_REUSEPORT_CBPF (<asm-generic/socket.h>), classic BPF opcodes and the random
# number ancillary load (<linux/filter.h>).
_SO_ATTACH_REUSEPORT_CBPF = 51
_TCP_INFO_UNACKED = 24  # offset of tcpi_unacked: a listener's accept queue length
_BPF_LD_W_ABS, _BPF_ALU_MOD_K, _BPF_JEQ_K, _BPF_RET_K = 0x20, 0x94, 0x15, 0x06
_SKF_AD_RANDOM = 0xFFFFF000 + 56
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU,
            signal.SIGCHLD)


@dataclasses.dataclass(eq=False)
class _Slot:
    index: int
    sock: socket.socket
    own: bool  # the slot's own SO_REUSEPORT listener (closed with the slot)
    # --worker-kind thread: every listener of the one slot (one per thread; the one shared
    # listener once when they share it), ``sock`` first; else ``[sock]``.
    socks: list[socket.socket] = dataclasses.field(default_factory=list)
    listening: bool = False  # its own listener has joined the kernel's reuse-port group
    retired_at: float = 0.0  # SIGTTOU removed it: when (its queue drains before it closes)
    current: _Worker | None = None
    successor: _Worker | None = None  # started to replace current; current stops once it serves
    failures: int = 0  # consecutive failed startups
    restart_at: float | None = None
    restart_successor: bool = False  # the start due at restart_at replaces a serving worker
    spawn_errors: int = 0  # consecutive starts the system refused a resource for
    served: bool = False  # a worker of the slot has served (its first start is over)
    away: bool = False  # said to get no new connections (no serving worker), not said back yet

    def __post_init__(self) -> None:
        if not self.socks:
            self.socks = [self.sock]


@dataclasses.dataclass(eq=False)
class _Worker:
    slot: _Slot
    proc: subprocess.Popen[bytes]
    pipe: int
    ready: bool = False
    last_beat: float = 0.0
    stopping: bool = False  # we sent SIGTERM
    killed: bool = False  # we sent SIGKILL (heartbeat)
    inbox: bytearray = dataclasses.field(default_factory=bytearray)  # a message's first part

    @property
    def pid(self) -> int:
        return self.proc.pid


def _accept_queue(sock: socket.socket) -> int:
    """Connections waiting in a TCP listener's accept queue (Linux TCP_INFO); 0 when it cannot
    be read."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    except OSError:
        return 0
    return struct.unpack_from("I", info, _TCP_INFO_UNACKED)[0]


def _status(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exit status {returncode}"


class Supervisor:
    """Runs ``config.workers`` worker processes of ``config`` (``app`` a ``"module:attr"``).

    Args:
        config: the settings; ``workers``, ``reuse_port``, ``timeout_worker_healthcheck`` and the
            ``reload*`` fields are the supervisor's, the rest is handed to every worker.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.slots: list[_Slot] = []
        self.workers: list[_Worker] = []
        self.exit_code: int | None = None
        self._pending: list[int] = []  # signals received, handled by the loop
        self._changes: list[str] = []  # --reload: changed paths, from the watcher thread
        self._shared: socket.socket | None = None
        self._port: int | None = None
        self._starting = True  # the first worker has not accepted yet
        self._stopping = False
        self._stop_deadline = 0.0
        self._stop_status = 0
        self._roll: list[_Slot] = []
        self._rolling: _Slot | None = None
        # The own listeners in the order of the kernel's reuse-port group (the index a routing
        # program returns); None when that order is not known (then SIGTTOU cannot reroute).
        self._group: list[_Slot] | None = []
        self._routed = False  # new connections follow the program attached (self._targets)
        self._targets: list[int] = []  # the group indices the attached program picks from
        # (empty while none is attached)
        self._retiring: list[_Slot] = []  # removed by SIGTTOU, draining their accept queues
        self._wake_w = -1
        self._sel: selectors.BaseSelector | None = None
        self._where = ""
        self._metrics: Any = None  # skirr.metrics.Aggregate with --metrics-port
        # TLS: the session-ticket key of this run, shared by every worker (see TLS above)
        self._ticket_key: bytes | None = os.urandom(80) if config.ssl_certfile else None
        # --worker-kind thread: one slot, whose worker process runs config.workers threads
        self._threads = config.workers if config.worker_kind == "thread" else 0

    # -- the main loop

    def run(self) -> int:
        """Binds, runs the workers until a shutdown signal; returns the exit status.

        Raises:
            ConfigError: the address could not be bound (before any worker starts).
        """
        config = self.config
        # The user's logging configuration and colours, as each worker applies them: the
        # supervisor's own lines go to the same handlers in the same format.
        configure_logging(config.log_level_number, config.log_config, config.use_colors,
                          config.log_level is not None)
        config.tls_context(self._ticket_key)  # a bad --ssl-* file: nothing bound, no worker
        self._bind()
        exporter = None
        if config.metrics_port is not None:
            from .metrics import Aggregate, MetricsExporter

            self._metrics = Aggregate()
            exporter = MetricsExporter(self._metrics.snapshot, config.host, config.metrics_port)
            try:
                exporter.start()
            except BaseException:
                self._close_sockets()
                raise
        self._sel = selectors.DefaultSelector()
        wake_r, self._wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._sel.register(wake_r, selectors.EVENT_READ, None)
        old_wakeup = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        previous = {signum: signal.signal(signum, self._on_signal) for signum in _SIGNALS}
        reloader = None
        try:
            if self._threads:
                logger.info("Started supervisor [%d] for 1 worker process of %d threads on %s",
                            os.getpid(), self._threads, self._where)
            else:
                logger.info("Started supervisor [%d] for %d worker(s) on %s", os.getpid(),
                            config.workers, self._where)
            if config.reload:
                from .reload import Reloader

                reloader = Reloader(config, self._on_change)
                reloader.start()
            self._spawn(self.slots[0])  # alone first: a failed startup is reported once
            while self.exit_code is None:
                self._step(wake_r)
            return self.exit_code
        finally:
            if reloader is not None:
                reloader.stop()
            if exporter is not None:
                exporter.stop()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            signal.set_wakeup_fd(old_wakeup)
            for worker in self.workers:
                worker.proc.kill()
                worker.proc.wait()
                os.close(worker.pipe)
            self.workers.clear()
            self._close_sockets()
            self._sel.close()
            os.close(wake_r)
            os.close(self._wake_w)

    def _step(self, wake_r: int) -> None:
        assert self._sel is not None
        for key, _events in self._sel.select(TICK):
            if key.data is None:
                try:
                    while os.read(wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
            else:
                self._read(key.data)
        while self._pending:
            self._handle_signal(self._pending.pop(0))
        if self._changes:
            changed, self._changes[:] = list(self._changes), []
            self._reload(changed)
        for worker in list(self.workers):
            returncode = worker.proc.poll()
            if returncode is not None:
                self._exited(worker, returncode)
        now = time.monotonic()
        if self._stopping:
            if not self.workers:
                self.exit_code = self._stop_status
            elif now >= self._stop_deadline:
                logger.warning("%d worker(s) still running past the graceful timeout: killing",
                               len(self.workers))
                self._stop_status = 1
                for worker in self.workers:
                    worker.proc.kill()
            return
        self._check_heartbeats(now)
        self._check_retiring(now)
        serving = any(self._serves(s) for s in self.slots)
        for slot in self.slots:
            if serving and slot.restart_at is not None and slot.current is None \
                    and slot.successor is None:
                self._reset_queue(slot)  # nobody will accept them before the back-off ends
            if slot.restart_at is not None and now >= slot.restart_at:
                slot.restart_at = None
                if slot.current is None and slot.successor is None:
                    self._spawn(slot)
                elif slot.restart_successor and slot.current is not None \
                        and slot.successor is None:
                    self._spawn(slot, successor=True)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._pending.append(signum)  # the wake-up fd makes select() return

    def _on_change(self, paths: list[str]) -> None:
        """Called from the --reload watcher's thread."""
        self._changes.extend(paths)
        try:
            os.write(self._wake_w, b"\0")
        except (BlockingIOError, OSError):
            pass

    # -- workers

    def _spawn(self, slot: _Slot, successor: bool = False) -> _Worker | None:
        """Starts a worker for ``slot`` (``successor``: to replace its serving one). None when
        the system refused a resource: one line is logged and the start is retried after a
        back-off (see Resources); None as well once stopping: nothing new starts then (the
        listening sockets are closed; a roll's next step or a first worker's ready could still
        come)."""
        if self._stopping:
            return None
        config = self.config
        try:
            if slot.own and not slot.listening:
                if not self._starting:
                    # Listening here, in slot order, keeps the group's order known (see _route).
                    slot.sock.listen(config.backlog)
                    self._joined(slot)
                elif any(s.own and not s.listening and s.current is not None
                         for s in self.slots):
                    self._group = None  # two first workers listen themselves, in either order
            worker = self._start_process(slot)
        except OSError as exc:
            slot.spawn_errors += 1
            delay = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (slot.spawn_errors - 1))
            logger.error("Could not start a worker for slot %d: %s: retrying in %g s",
                         slot.index, exc, delay)
            slot.restart_at = time.monotonic() + delay
            slot.restart_successor = successor
            return None
        slot.spawn_errors = 0
        slot.restart_at = None  # a start still pending would duplicate this one
        if successor:
            slot.successor = worker
        else:
            slot.current = worker
        logger.info("Started worker [%d] (slot %d)", worker.pid, slot.index)
        return worker

    def _start_process(self, slot: _Slot) -> _Worker:
        """The worker process of ``slot`` with its heartbeat pipe, registered for reading.

        Raises:
            OSError: a pipe, the process or the selector entry was refused (nothing is left
                open or running then).
        """
        fields = {f.name: getattr(self.config, f.name) for f in dataclasses.fields(self.config)}
        fields.update(workers=1, reload=False)
        read_end, write_end = os.pipe()
        try:
            os.set_blocking(read_end, False)
            # "supervisor": the worker's parent, which it watches from its first line on (a
            # ppid it read itself could already be the reaper's: skirr._worker, _Orphan)
            fds = [sock.fileno() for sock in slot.socks]
            spec: dict[str, Any] = {"config": fields, "fds": fds, "pipe": write_end,
                                    "supervisor": os.getpid()}
            if self._threads:
                spec["threads"] = self._threads
            if self._ticket_key is not None:
                spec["tls_ticket_key"] = self._ticket_key.hex()
            env = dict(os.environ)
            env[_pipe.ENV] = json.dumps(spec)
            # Spawned with STARTUP_SIGNALS blocked (the child inherits the mask; _worker.main
            # unblocks them): one sent while its interpreter starts waits until it can take it
            # (Ctrl-C ignored, SIGTERM a graceful stop), never the default death. Blocked here
            # only for the spawn: what comes meanwhile is delivered once unblocked.
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _pipe.STARTUP_SIGNALS)
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "skirr._worker"],
                    pass_fds=(write_end, *fds),
                    env=env,
                    stdin=subprocess.DEVNULL,
                )
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                os.close(write_end)
            worker = _Worker(slot, proc, read_end, last_beat=time.monotonic())
            assert self._sel is not None
            try:
                self._sel.register(read_end, selectors.EVENT_READ, worker)
            except BaseException:
                proc.kill()
                proc.wait()
                raise
        except BaseException:
            os.close(read_end)
            raise
        self.workers.append(worker)
        return worker

    def _read(self, worker: _Worker, final: bool = False) -> bool:
        """Handles what the worker wrote (``final``: only its metrics, it has exited); False once
        its end is closed (it is exiting: the exit is seen by poll()) or nothing is left to
        read."""
        try:
            data = os.read(worker.pipe, 65536)
        except BlockingIOError:
            return False
        if not data:
            assert self._sel is not None
            if worker.pipe in self._sel.get_map():
                self._sel.unregister(worker.pipe)
            return False
        worker.last_beat = time.monotonic()
        worker.inbox += data
        for kind, payload in _pipe.parse(worker.inbox):
            if final and kind != _pipe.SNAPSHOT:
                continue
            if kind == _pipe.READY and not worker.ready:
                self._ready(worker)
            elif kind == _pipe.RETIRE:
                self._retire(worker)
            elif kind == _pipe.SNAPSHOT and self._metrics is not None:
                from .metrics import decode

                try:
                    self._metrics.update(worker, decode(payload))
                except ValueError as exc:
                    logger.warning("Worker [%d] sent unreadable metrics: %s", worker.pid, exc)
        return True

    def _ready(self, worker: _Worker) -> None:
        worker.ready = True
        slot = worker.slot
        slot.failures = 0
        slot.served = True
        if slot.own and not slot.listening:  # the first worker listened itself
            self._joined(slot)
        if worker is slot.successor:
            old, slot.current, slot.successor = slot.current, worker, None
            if old is not None:
                logger.info("Worker [%d] serves slot %d: stopping worker [%d]", worker.pid,
                            slot.index, old.pid)
                self._stop_worker(old)
        self._route()  # the slot serves: it gets its share of new connections (again)
        if self._starting:
            self._starting = False
            for other in self.slots:
                if other.current is None and other.successor is None:
                    self._spawn(other)
        if slot is self._rolling:
            self._rolling = None
            self._advance_roll()

    def _retire(self, worker: _Worker) -> None:
        """--limit-max-requests: the replacement first, then the old worker stops."""
        slot = worker.slot
        if (worker is slot.current and slot.successor is None and not self._stopping
                and slot in self.slots):  # not for a slot SIGTTOU removed
            logger.info("Worker [%d] reached its request limit: starting its replacement",
                        worker.pid)
            self._spawn(slot, successor=True)

    def _stop_worker(self, worker: _Worker) -> None:
        if not worker.stopping:
            worker.stopping = True
            worker.proc.send_signal(signal.SIGTERM)

    def _exited(self, worker: _Worker, returncode: int) -> None:
        assert self._sel is not None
        self.workers.remove(worker)
        if self._metrics is not None:
            while self._read(worker, final=True):  # its final counters
                pass
            self._metrics.retire(worker)
        if worker.pipe in self._sel.get_map():
            self._sel.unregister(worker.pipe)
        os.close(worker.pipe)
        slot = worker.slot
        was_successor = worker is slot.successor
        if slot.current is worker:
            slot.current = None
        if was_successor:
            slot.successor = None
        if self._stopping:
            # A worker stopped before it served had nothing in flight: SIGTERM's default death
            # (before its handler was installed) is a clean stop too.
            clean = returncode == 0 or (not worker.ready and returncode == -signal.SIGTERM)
            if not clean:
                self._stop_status = 1
            logger.info("Worker [%d] stopped (%s)", worker.pid, _status(returncode))
            return
        if worker.stopping:
            logger.info("Worker [%d] stopped (%s)", worker.pid, _status(returncode))
            return
        if slot not in self.slots:
            return
        if not worker.ready:
            self._failed_startup(worker, returncode, was_successor)
            return
        if not worker.killed:
            logger.warning("Worker [%d] (slot %d) died (%s): restarting it", worker.pid,
                           slot.index, _status(returncode))
        # Until its replacement serves (an interpreter start and the application's import at
        # least; a back-off too if it fails), the other slots take the slot's new connections.
        self._route()
        if slot.current is None and slot.successor is None:
            self._spawn(slot)

    def _failed_startup(self, worker: _Worker, returncode: int, was_successor: bool) -> None:
        slot = worker.slot
        if self._starting:
            if self.config.reload:
                logger.error("The application failed to start: waiting for a change")
                return
            self.exit_code = 1  # its error was printed by the worker, once
            return
        if was_successor and slot.current is not None:
            logger.error("New worker [%d] (slot %d) failed to start (%s): worker [%d] keeps "
                         "serving", worker.pid, slot.index, _status(returncode),
                         slot.current.pid)
            if slot is self._rolling:
                left = [s.index for s in self._roll if s in self.slots]
                if left:  # said, not silent: the fleet stays on the old code (SIGHUP again)
                    logger.error("Roll stopped: slot(s) %s keep their workers (SIGHUP rolls "
                                 "again)", ", ".join(map(str, left)))
                self._rolling = None
                self._roll.clear()
            return
        if self.config.reload:
            logger.error("The application failed to start: waiting for a change")
            return
        slot.failures += 1
        delay = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (slot.failures - 1))
        logger.warning("Worker [%d] (slot %d) failed to start (%s): restarting in %g s",
                       worker.pid, slot.index, _status(returncode), delay)
        slot.restart_at = time.monotonic() + delay
        slot.restart_successor = False

    def _check_heartbeats(self, now: float) -> None:
        timeout = self.config.timeout_worker_healthcheck
        for worker in self.workers:
            if worker.ready and not worker.killed and now - worker.last_beat > timeout:
                logger.error("Worker [%d] (slot %d) did not answer the heartbeat for %g s: "
                             "killing it", worker.pid, worker.slot.index, timeout)
                worker.killed = True
                worker.proc.kill()

    # -- signals

    def _handle_signal(self, signum: int) -> None:
        if signum == signal.SIGCHLD:
            return
        if signum in (signal.SIGINT, signal.SIGTERM):
            if self._stopping:
                logger.warning("Forced exit: killing %d worker(s)", len(self.workers))
                for worker in self.workers:
                    worker.proc.kill()
                    worker.proc.wait()
                self.exit_code = 1
                return
            self._stopping = True
            graceful = self.config.timeout_graceful_shutdown
            self._stop_deadline = time.monotonic() + self.config.drain_delay + KILL_MARGIN + (
                graceful if graceful is not None else float("inf"))
            logger.info("%s: stopping %d worker(s)", signal.Signals(signum).name,
                        len(self.workers))
            for worker in self.workers:
                self._stop_worker(worker)
            self._close_sockets()  # the workers' copies keep listening while they drain
            return
        if self._stopping:
            return
        if signum in (signal.SIGTTIN, signal.SIGTTOU) and self._threads:
            logger.warning("%s: not supported with --worker-kind thread: keeping %d threads",
                           signal.Signals(signum).name, self._threads)
            return
        if signum == signal.SIGHUP:
            try:
                self.config.tls_context(self._ticket_key)  # the files the new workers read
            except ConfigError as exc:
                logger.error("SIGHUP: TLS reload failed, keeping the current workers: %s", exc)
                return
            if self._threads:
                logger.info("SIGHUP: restarting the worker process of %d threads",
                            self._threads)
            else:
                logger.info("SIGHUP: restarting %d worker(s) one at a time", len(self.slots))
            self._roll = [s for s in self.slots if s is not self._rolling]
            self._advance_roll()
        elif signum == signal.SIGTTIN:
            try:
                self._add_slot()
            except (OSError, ConfigError) as exc:  # the new slot's socket (EMFILE ...)
                logger.error("SIGTTIN: could not add a worker: %s", exc)
                return
            logger.info("SIGTTIN: %d worker(s)", len(self.slots))
            self._spawn(self.slots[-1])
        elif signum == signal.SIGTTOU:
            if len(self.slots) <= 1:
                logger.info("SIGTTOU: one worker left, keeping it")
                return
            slot = self.slots.pop()
            logger.info("SIGTTOU: %d worker(s)", len(self.slots))
            if slot in self._roll:
                self._roll.remove(slot)
            if slot is self._rolling:
                self._rolling = None
                self._advance_roll()
            if slot.own and slot.listening:
                # Closing a reuse-port listener resets the connections queued on it: route new
                # ones to the other slots first, stop the worker once it has accepted the rest.
                slot.retired_at = time.monotonic()
                self._retiring.append(slot)
                self._route()
                return
            for worker in (slot.current, slot.successor):
                if worker is not None:
                    self._stop_worker(worker)
            if slot.own:
                slot.sock.close()  # the worker's copy stays open until it stops accepting

    def _advance_roll(self) -> None:
        while self._roll and self._rolling is None:
            slot = self._roll.pop(0)
            if slot not in self.slots:
                continue
            if slot.current is None or slot.successor is not None:
                continue  # (re)starting anyway: it gets the fresh code
            self._rolling = slot
            self._spawn(slot, successor=True)

    def _reload(self, changed: list[str]) -> None:
        if self._stopping:
            return
        shown = ", ".join(sorted(set(changed))[:3])
        logger.warning("Detected changes in %s: reloading", shown)
        for slot in self.slots:
            if slot.current is None and slot.successor is None:
                slot.restart_at = None
                self._spawn(slot)
        self._roll = [s for s in self.slots if s.current is not None]
        self._rolling = None
        self._advance_roll()

    def _check_retiring(self, now: float) -> None:
        """Stops the workers of the slots SIGTTOU removed once their accept queues are empty (at
        once when new connections could not be routed away from them), then closes the
        slot's listener."""
        for slot in list(self._retiring):
            workers = [w for w in (slot.current, slot.successor) if w is not None]
            waited = now - slot.retired_at
            if workers and self._routed and waited < RETIRE_MAX and (
                    waited < RETIRE_SETTLE or _accept_queue(slot.sock)):
                continue
            if workers and waited >= RETIRE_MAX:
                logger.warning("Slot %d's accept queue did not drain in %g s", slot.index,
                               RETIRE_MAX)
            for worker in workers:
                self._stop_worker(worker)
            self._retiring.remove(slot)
            self._close_slot(slot)  # the worker's copy stays open until it stops accepting

    # -- sockets

    def _joined(self, slot: _Slot) -> None:
        """``slot``'s own listener has joined the reuse-port group (at its end)."""
        slot.listening = True
        if self._group is not None:
            self._group.append(slot)
        self._route()

    @staticmethod
    def _serves(slot: _Slot) -> bool:
        """A worker of ``slot`` accepts its connections (a successor that serves becomes its
        current worker at once)."""
        return slot.current is not None and slot.current.ready

    def _reset_queue(self, slot: _Slot) -> None:
        """Resets the connections waiting on ``slot``'s own listener while no worker of the slot
        is running and its next start waits for a back-off (a failed startup, a refused
        resource) that other slots serve through: those clients get an error now instead of
        waiting for a worker that may be seconds away. New connections are routed to the other
        slots meanwhile (see _route); this also empties the queue of what came before, or of
        every connection the kernel gives the slot when nothing can route them away."""
        if not (slot.own and slot.listening):
            return  # a shared listener's queue belongs to the serving workers too
        reset = 0
        while reset < 4096:
            try:
                conn, _ = slot.sock.accept()
            except ConnectionAbortedError:
                continue
            except OSError:  # empty (EAGAIN), or no descriptor for one now (EMFILE ...)
                break
            with conn:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            reset += 1
        if reset:
            logger.warning("Slot %d has no worker to start before its back-off ends: reset %d "
                           "connection(s) waiting on it", slot.index, reset)

    def _close_slot(self, slot: _Slot) -> None:
        """Closes a removed slot's own listener; the kernel moves the group's last socket into
        its place."""
        for sock in slot.socks:
            sock.close()
        if self._group is not None and slot in self._group:
            i = self._group.index(slot)
            self._group[i] = self._group[-1]
            self._group.pop()
        self._route()

    def _route(self) -> None:
        """Routes new connections only to the listeners of ``self.slots`` (not to the slots
        being removed) whose worker serves (not to a slot whose worker died or has not started
        yet, while another slot serves; when none serves, to all of them, each queueing for its
        next worker): a classic BPF program on the reuse-port group that picks one of them at
        random, attached once the kernel's own spread would send connections elsewhere. Without
        one (not Linux, an unknown group order, a refused program) SIGTTOU stops the removed
        worker at once, as before, and a slot without a worker keeps getting its share of new
        connections, which wait for its next worker (reset while a back-off delays it: see
        _reset_queue)."""
        group = self._group
        if group is None or self._threads or self._stopping or not self.slots or \
                not all(s in group for s in self.slots):
            self._routed = False  # a removed slot then closes at once
            return
        targets = [s for s in self.slots if self._serves(s)] or self.slots
        indices = [group.index(s) for s in targets]
        if indices == self._targets or (not self._targets and len(indices) == len(group)):
            # the program attached already picks these, or none is and the kernel's own spread
            # reaches every listener
            self._routed = bool(self._targets)
            return
        insns = [(_BPF_LD_W_ABS, 0, 0, _SKF_AD_RANDOM), (_BPF_ALU_MOD_K, 0, 0, len(indices))]
        for i, index in enumerate(indices):
            insns += [(_BPF_JEQ_K, 0, 1, i), (_BPF_RET_K, 0, 0, index)]
        insns.append((_BPF_RET_K, 0, 0, indices[0]))
        code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in insns))
        fprog = struct.pack("HP", len(insns), ctypes.addressof(code))  # struct sock_fprog
        try:
            self.slots[0].sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_REUSEPORT_CBPF, fprog)
        except OSError as exc:
            logger.warning("Could not route connections away from a removed worker or one that "
                           "does not serve: %s", exc)
            self._group = None
            self._routed = False
            self._targets = []
            return
        self._routed = True
        self._targets = indices
        for slot in self.slots:  # said for a worker lost, not for a first start
            if slot.served and not slot.away and slot not in targets:
                slot.away = True
                logger.warning("Slot %d has no serving worker: its new connections go to the "
                               "other slot(s)", slot.index)
            elif slot.away and self._serves(slot):
                slot.away = False
                logger.info("Slot %d serves again: it gets its share of new connections",
                            slot.index)

    def _bind(self) -> None:
        config = self.config
        reuse = (
            config.reuse_port
            and config.fd is None
            and not config.uds
            and sys.platform == "linux"
            and hasattr(socket, "SO_REUSEPORT")
        )
        if not reuse:
            self._shared = bind_socket(config)
            if self._threads:  # every thread's loop accepts from the one listener
                self.slots.append(_Slot(0, self._shared, own=False))
            for index in range(0 if self._threads else config.workers):
                self.slots.append(_Slot(index, self._shared, own=False))
            self._where = self._describe(self._shared)
            return
        # A plain bind first: it fails for a port anyone holds (a reuse-port bind would join
        # another skirr's group silently), and picks the port when config.port is 0.
        probe = bind_tcp(config.host, config.port)
        self._port = probe.getsockname()[1]
        probe.close()
        try:
            if self._threads:  # one listener per thread, all in the one slot
                socks = [bind_tcp(config.host, self._port, reuse_port=True)]
                self.slots.append(_Slot(0, socks[0], own=True, socks=socks))
                for _ in range(self._threads - 1):
                    socks.append(bind_tcp(config.host, self._port, reuse_port=True))
            for _ in range(0 if self._threads else config.workers):
                self._add_slot()
        except BaseException:
            self._close_sockets()
            raise
        self._where = self._describe(self.slots[0].sock)

    def _add_slot(self) -> None:
        index = max((s.index for s in self.slots), default=-1) + 1
        if self._shared is not None:
            self.slots.append(_Slot(index, self._shared, own=False))
            return
        sock = bind_tcp(self.config.host, self._port or 0, reuse_port=True)
        self.slots.append(_Slot(index, sock, own=True))

    def _describe(self, sock: socket.socket) -> str:
        """Where the supervisor's startup line says the workers serve: the URL a worker's own
        "skirr running on" line gives (https with --ssl-certfile), or the Unix socket."""
        return listen_url(sock, self.config.ssl_certfile is not None, uds=self.config.uds)

    def _close_sockets(self) -> None:
        for slot in self.slots + self._retiring:
            for sock in slot.socks:
                sock.close()
        if self._shared is not None:
            self._shared.close()
            if self.config.uds and self.config.fd is None and not self._stopping_keeps_file():
                try:
                    os.unlink(self.config.uds)
                except OSError:
                    pass

    def _stopping_keeps_file(self) -> bool:
        """While workers drain on a Unix socket, its file stays until they have all exited."""
        return bool(self.workers)
