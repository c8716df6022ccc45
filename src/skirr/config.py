"""Server configuration, loading the application from ``module:attr``, and logging set-up.

Owns: validating every setting (one clear message per mistake), importing the application, choosing
the event loop and configuring the ``skirr`` loggers. Never: binds sockets or runs the loop.
"""
from __future__ import annotations

import asyncio
import dataclasses
import importlib
import inspect
import logging
import os
import resource
import stat
import sys
import traceback
from collections.abc import Callable
from typing import Any

from . import _native
from ._logformat import TRACE

LOG_LEVELS = {
    "critical": logging.CRITICAL,
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
    "trace": TRACE,
}
LOOPS = ("auto", "asyncio", "uvloop")
LIFESPANS = ("auto", "on", "off")
WS_MODES = ("auto", "none")  # uvicorn's --ws, the values skirr has
HTTP_MODES = ("auto", "1", "2")  # granian's --http: HTTP/1.1 and HTTP/2, HTTP/1.1 only, HTTP/2 only
HTTP_MODE_NUMBER = {"auto": 0, "1": 1, "2": 2}  # sk_serve.h's enum sk_http_mode
# --proxy-headers-mode: the one proxy-header family believed (RFC 7239 §8.1): X-Forwarded-For /
# X-Forwarded-Proto (uvicorn's, the default) or RFC 7239 Forwarded (hypercorn's "modern" mode).
PROXY_HEADERS_MODES = ("x-forwarded", "forwarded")

# Unlimited, as in uvicorn: the server never buffers a whole request body (the application reads
# it piece by piece through ``receive``), so the limit protects applications that buffer; set it
# with --limit-request-body or at the proxy in front.
DEFAULT_LIMIT_REQUEST_BODY = 0
# Seconds in-flight requests get after SIGINT/SIGTERM before their connections are closed. Below
# the 30 s that process supervisors (Kubernetes, systemd's default 90 s) allow before SIGKILL, so
# lifespan shutdown still runs. None waits for ever.
DEFAULT_TIMEOUT_GRACEFUL_SHUTDOWN = 25.0
# Seconds past the graceful timeout (and --drain-delay) that lifespan shutdown may still take: a
# single process then cancels it and exits 1, the supervisor kills a worker still running.
SHUTDOWN_MARGIN = 5.0
# Seconds a connection may take to complete a request head (slowloris), from accept or from the
# first byte of the next request: then 408 if any byte arrived, else a quiet close.
DEFAULT_TIMEOUT_REQUEST_HEAD = 10.0
# Seconds unsent response bytes may make no progress (the peer accepts nothing) before the
# connection is closed and every waiting send() raises ClientDisconnected.
DEFAULT_TIMEOUT_WRITE = 30.0
# Seconds a complete response may wait for the other connections' responses of its loop
# iteration: a batch of FastAPI responses is then about 10 (0.1 ms each), of tiny ones the whole
# iteration; FastAPI's p50 at a fixed rate rises by up to 0.6 ms, p99 not (bench/LEVERS.md,
# "Round 3").
DEFAULT_WRITE_BATCH_DELAY = 0.001
# nginx's client_body_timeout: a request body that stops arriving for this long is given up.
DEFAULT_TIMEOUT_REQUEST_BODY = 60.0
# Every timeout is checked by one native timer that ticks once a second: a timeout of T seconds
# fires between T and T + 1 s after its start.
TIMER_GRANULARITY = 1.0
# --limit-connections unset: the soft RLIMIT_NOFILE minus a reserve for the application's own
# descriptors (files, database connections): max(64, limit // 8). An unlimited RLIMIT_NOFILE means
# no cap. Over the cap skirr stops accepting (the kernel backlog holds new connections) until one
# closes; with no cap, running out of descriptors (EMFILE) pauses accepting for one timer tick.
CONNECTION_FD_RESERVE_MIN = 64
# The largest --backlog: listen() takes a C int, and Linux caps the backlog at net.core.somaxconn
# anyway (4096 by default since 5.4); 65535 was somaxconn's ceiling for most of Linux's history.
MAX_BACKLOG = 65535
# Seconds a supervised worker may go without answering the supervisor's heartbeat (its event loop
# writes to a pipe every fifth of this) before it is killed and replaced (--timeout-worker-healthcheck).
DEFAULT_TIMEOUT_WORKER_HEALTHCHECK = 5.0
# The mode of a Unix-domain socket file (--uds-perms): connectable by any user, as uvicorn's.
DEFAULT_UDS_PERMS = 0o666
# --worker-kind: what one of --workers N is. "process": N worker processes (each its own
# interpreter); "thread": one worker process running N event loops in N threads (free-threaded
# Python only: see skirr.supervisor).
WORKER_KINDS = ("process", "thread")
# For skirr's own tests, not for users: set to 1, it lets --worker-kind thread run on an
# interpreter with the GIL (CI has no free-threaded Python), where its threads take turns.
THREADS_WITH_GIL_ENV = "SKIRR_THREAD_WORKERS_WITH_GIL"
# TLS (--ssl-*): uvicorn's defaults. --ssl-version is an ssl.PROTOCOL_* number: 17
# (PROTOCOL_TLS_SERVER, uvicorn's default) and 2 (PROTOCOL_TLS) negotiate TLS 1.2 or 1.3, 5
# (PROTOCOL_TLSv1_2) TLS 1.2 alone; the others are obsolete (RFC 8996) or a client's.
# --ssl-cert-reqs is an ssl.CERT_* number: 0 none, 1 optional, 2 required. --ssl-ciphers
# "TLSv1" (uvicorn's default, OpenSSL's list there) selects skirr's hardened TLS 1.2 list.
DEFAULT_SSL_VERSION = 17
SSL_VERSIONS = (2, 5, 17)
DEFAULT_SSL_CIPHERS = "TLSv1"
SSL_MIN_VERSIONS = ("TLSv1.2", "TLSv1.3")
SSL_CERT_REQS = (0, 1, 2)
# --reload's patterns when none are given (uvicorn's): watch Python files, not editor droppings.
DEFAULT_RELOAD_INCLUDES = ("*.py",)
DEFAULT_RELOAD_EXCLUDES = (".*", ".py[cod]", ".sw.*", "~*")


def gil_enabled() -> bool:
    """Whether this interpreter runs with the GIL: True on a default build, and on a free-threaded
    (3.13t/3.14t) one where it was turned back on (``PYTHON_GIL=1``, ``-X gil=1``, or an
    extension module without ``Py_mod_gil`` imported)."""
    is_enabled = getattr(sys, "_is_gil_enabled", None)
    return True if is_enabled is None else bool(is_enabled())


def thread_workers_refused() -> bool:
    """Whether ``worker_kind="thread"`` is refused here: the GIL is on (and the test-only
    ``$SKIRR_THREAD_WORKERS_WITH_GIL`` is not 1)."""
    return gil_enabled() and os.environ.get(THREADS_WITH_GIL_ENV) != "1"


# What --worker-kind thread on an interpreter with the GIL is refused with (after "--worker-kind
# thread" or the variable's name).
THREADS_NEED_NO_GIL = ("needs a free-threaded Python (3.13t/3.14t) with the GIL disabled; this "
                       "interpreter has the GIL: use --worker-kind process")


def default_limit_connections() -> int:
    """The open-connection cap used when ``limit_connections`` is ``None``; 0 = no cap."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 0
    return max(1, soft - max(CONNECTION_FD_RESERVE_MIN, soft // 8))

# The largest HTTP/2 response field section skirr sends, by RFC 9113 §6.5.2's measure (name +
# value + 32 bytes a field), and the room kept beside the server's own fields for what skirr's own
# answers add: one home, src/core/sk_resp.h (SK_H2_SECTION_MAX, SK_H2_OWN_RESPONSE_SIZE).
H2_SECTION_MAX: int = _native.H2_SECTION_MAX
H2_OWN_RESPONSE_SIZE: int = _native.H2_OWN_RESPONSE_SIZE


#: The error of ``reload=True`` (``--reload``) where watchfiles cannot be imported.
RELOAD_NEEDS_WATCHFILES = "--reload needs watchfiles (pip install watchfiles, or 'skirr[reload]')"


class ConfigError(ValueError):
    """A setting or the application cannot be used; ``str()`` is one line meant for the user.
    A ``ValueError``, so a bad value given to :class:`Config` raises what Python code expects."""


class AppLoadError(ConfigError):
    """The ``module:attr`` application could not be imported or is not an ASGI callable."""


class LogConfigError(ConfigError):
    """``log_config`` cannot be read or ``logging`` rejects it (a usage error: it is applied
    before anything is bound or imported)."""


class AppImportError(AppLoadError):
    """The application's module raised while being imported (``__cause__`` is the exception;
    its traceback is worth showing, unlike the other errors here)."""

    def __init__(self, module_name: str, exc: BaseException) -> None:
        super().__init__(f'error while importing module "{module_name}": {_describe(exc)}')


def report_error(exc: ConfigError) -> None:
    """Prints ``skirr: error: <exc>`` on stderr, after the application's traceback when its own
    module raised while being imported (``AppImportError``). The one way the command line, the
    server and a worker report a ``ConfigError`` that ends them."""
    if isinstance(exc, AppImportError) and exc.__cause__ is not None:
        # The application's own code failed: its traceback is the useful part.
        traceback.print_exception(exc.__cause__)
    print(f"skirr: error: {exc}", file=sys.stderr)


# uvicorn's words, so an operator's filter or grep for them keeps working.
FACTORY_DETECTED = ("ASGI app factory detected. Using it, but please consider setting the "
                    "--factory flag explicitly.")


def _is_factory(app: Callable[..., Any]) -> bool:
    """True when ``app``'s signature accepts a call with no argument and refuses one with an ASGI
    application's three positional arguments (``scope``, ``receive``, ``send``); False when it
    accepts three (an application, however many of its parameters have defaults) or has no
    signature ``inspect`` can read.

    uvicorn calls ``app()`` and takes a ``TypeError`` for "not a factory"; skirr reads the
    signature instead, so an application is never called with no arguments (one whose parameters
    all have defaults would return a coroutine uvicorn then serves), and a factory that raises
    ``TypeError`` itself is reported as the factory's error rather than served as the
    application (a 500 for every request).
    """
    try:
        sig = inspect.signature(app)
    except (TypeError, ValueError):
        return False
    try:
        sig.bind(None, None, None)
    except TypeError:
        pass
    else:
        return False
    try:
        sig.bind()
    except TypeError:
        return False
    return True


def _check_path(option: str, path: str, kind: str) -> None:
    """Raises ``ConfigError("<option> <path>: No such file")`` when nothing is at ``path``,
    ``"... not a <kind>"`` when something of another kind is (``kind``: "file" or
    "directory", symbolic links followed)."""
    if not os.path.exists(path):
        raise ConfigError(f"{option} {path}: No such {kind}")
    if not (os.path.isdir(path) if kind == "directory" else os.path.isfile(path)):
        raise ConfigError(f"{option} {path}: not a {kind}")


def _check_readable(option: str, path: str) -> None:
    """Raises ``ConfigError("<option> <path>: Permission denied")`` (the system's reason) when
    the file at ``path`` cannot be opened for reading: like a missing file, a usage error found
    before anything binds (exit 2), as an unreadable --log-config is."""
    try:
        open(path, "rb").close()
    except OSError as exc:
        raise ConfigError(f"{option} {path}: {exc.strerror or exc}") from None


def _describe(exc: BaseException) -> str:
    """``"Type: message"``, or ``"Type"`` alone when the message is empty (``KeyboardInterrupt()``)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}; got {value!r}")


def _fits(value: Any, integer: bool) -> bool:
    """An integer setting fits the C side's 64-bit integers; a seconds setting is a finite
    float (an int beyond a float's range would raise OverflowError when the server starts)."""
    if integer:
        return bool(value < 2**63)
    try:
        return float(value) != float("inf")
    except OverflowError:
        return False


def _check_number(
    name: str, value: Any, *, integer: bool, minimum: float = 0, positive: bool = False
) -> None:
    kinds = (int,) if integer else (int, float)
    if (
        isinstance(value, bool)
        or not isinstance(value, kinds)
        or value < minimum
        or (positive and not value > 0)
        or value != value  # NaN
        or not _fits(value, integer)
    ):
        what = "an integer below 2**63" if integer else "a finite number"
        bound = "> 0" if positive else f">= {minimum:g}"
        raise ConfigError(f"{name} must be {what} {bound}; got {value!r}")


@dataclasses.dataclass
class Config:
    """Everything one skirr server needs. Field names match the CLI flags (``--root-path`` ->
    ``root_path``).

    Args:
        app: an ASGI 3 callable ``app(scope, receive, send)``, or a ``"module:attr"`` string
            (``attr`` may be dotted) imported by :meth:`load_app`.
        host: the address to bind (IPv6 when it contains ``:``; ``"::"`` is dual-stack).
        port: the TCP port; 0 picks a free one (read it back from ``Server.port``).
        uds: a Unix-domain socket path; when set, ``host`` and ``port`` are unused.
        loop: ``"auto"`` (uvloop when importable, else asyncio), ``"asyncio"`` or ``"uvloop"``.
        lifespan: ``"auto"`` (used when the app supports it), ``"on"`` (required) or ``"off"``.
        root_path: the ASGI ``root_path`` (the mount point behind a proxy), e.g. ``"/api"``.
        factory: ``app`` names a zero-argument callable that returns the application.
        log_level: ``critical|error|warning|info|debug|trace`` or a ``logging`` level number;
            ``None`` (default) = ``info``, or the levels ``log_config`` sets. Given with
            ``log_config``, it is applied after it to ``skirr.error`` and ``skirr.access`` (the
            explicit level wins, as uvicorn's ``--log-level`` over its ``--log-config``).
        timeout_keep_alive: seconds an idle keep-alive connection is kept open.
        timeout_request_head: seconds a connection may take to complete a request head, from
            accept or from the first byte of the next request (default 10); then 408 if any byte
            arrived, else a quiet close. Must be > 0.
        timeout_request_body: seconds a request body may go without a byte while skirr wants to
            read it (not while flow control has paused reading), default 60, 0 = none; then the
            app's ``receive()`` gets ``http.disconnect`` and the connection is closed, with 408 if
            no response was started.
        timeout_write: seconds unsent response bytes may make no progress (default 30); then the
            connection is closed and a waiting ``send()`` raises ``ClientDisconnected``. Must be
            > 0.
        backlog: the ``listen()`` backlog (connections), 1..65535 (the kernel may cap it lower:
            ``net.core.somaxconn`` on Linux).
        limit_request_body: bytes of request content; over it the request gets 413. 0 = unlimited
            (the default).
        limit_concurrency: requests in flight (application tasks running) before a new request
            is answered 503 with ``connection: close``; ``None`` or 0 = unlimited (the default).
        limit_connections: open client connections before skirr stops accepting until one
            closes (new ones wait in the kernel backlog); 0 = unlimited; ``None`` (the default) =
            derived from the soft RLIMIT_NOFILE (:func:`default_limit_connections`).
        limit_max_requests: the server shuts down gracefully (exit status 0) after this many
            requests, plus a random 0..``limit_max_requests_jitter``; ``None`` or 0 = never.
        limit_max_requests_jitter: the upper bound of that random addition (default 0).
        timeout_graceful_shutdown: seconds in-flight requests may take after a shutdown request
            before their connections are closed (default 25); ``None`` waits for ever.
        app_dir: a directory put first on ``sys.path`` before importing ``app``.
        fd: an inherited, bound stream socket's descriptor to serve on instead of ``host:port``
            (uvicorn's ``--fd``; systemd socket activation passes 3). Not with ``uds`` or a
            ``host``/``port`` other than the defaults.
        uds_perms: the mode bits of the ``uds`` socket file; ``None`` (the default) = ``0o666``.
            Only with ``uds``.
        workers: worker processes (default 1: no supervisor). Above 1, a supervisor process binds
            the socket(s) and runs that many workers (``app`` must then be a ``"module:attr"``
            string); see ``skirr.supervisor``.
        reuse_port: with ``workers`` > 1 on TCP (Linux), each worker slot gets its own
            ``SO_REUSEPORT`` listener so the kernel spreads connections (default True); False
            shares one listener.
        worker_kind: ``"process"`` (the default): ``workers`` worker processes; ``"thread"``:
            one worker process running ``workers`` event loops in as many threads (each with
            its own listener as above, and its own lifespan), replaced as a whole by the
            supervisor. ``"thread"`` needs a free-threaded Python with the GIL disabled
            (``ConfigError`` otherwise) and cannot be used with ``reload``; with ``workers``
            1 it changes nothing (one loop, no supervisor).
        timeout_worker_healthcheck: seconds a worker may leave the supervisor's heartbeat
            unanswered (a blocked event loop) before it is killed and replaced (default 5, > 0).
        reload: restart the worker when a watched file changes (development; needs watchfiles).
        reload_dirs: directories to watch (default: the current directory).
        reload_includes: glob patterns of file names to watch (default ``["*.py"]``).
        reload_excludes: glob patterns of file or directory names to ignore (default
            ``[".*", ".py[cod]", ".sw.*", "~*"]``).
        health_check_path: a path (``/healthz``) answered by skirr itself for any method (the
            query string ignored; only that exact path), never by the application: 200 ``OK`` while serving, 503 ``draining`` once shutting down.
        write_batch_delay: seconds (default 0.001) a complete keep-alive response may wait to
            leave together with the responses other connections complete in the same loop
            iteration, so a client asleep in its poll is woken once for them all (less CPU per
            request under load). The batch leaves when skirr next runs (a response queued, an
            app step ending) after its first response has waited this long, and always within
            one loop iteration; an app step that goes on working after it answered, without
            awaiting, holds the batch until it awaits or returns. 0 = no batch: a response is
            written when its ``send()`` completes it (on 3.12+, where a request's first step
            runs inside the read, when that step first awaits or returns).
        drain_delay: seconds, after SIGTERM, during which skirr keeps accepting and serving while
            ``health_check_path`` answers 503 (so a load balancer stops routing first); then the
            graceful shutdown (default 0).
        access_log: log one line per response and per refusal on ``skirr.access`` (default on).
        access_log_format: ``None`` (uvicorn's line), ``"json"`` or a gunicorn format string
            (atoms ``%(h)s %(r)s %(s)s %(b)s %(D)s %({name}i)s %({name}o)s`` ...; see
            ``skirr.access``).
        proxy_headers: take the client address and scheme from the proxy headers of
            ``proxy_headers_mode`` sent by a trusted peer (default on).
        proxy_headers_mode: which header family the trusted proxy sets, the only one read:
            ``"x-forwarded"`` (``X-Forwarded-For`` / ``X-Forwarded-Proto``, the default, as
            uvicorn) or ``"forwarded"`` (RFC 7239 ``Forwarded``). The other family comes from
            the client through a proxy that does not set it, so it is never believed (RFC 7239
            §8.1); configure the proxy to overwrite or clear it (docs/deployment.md).
        forwarded_allow_ips: the trusted peers: comma-separated IPs, CIDR networks, ``*``, and
            ``unix:`` for Unix-socket peers (a list is joined); ``None`` = the
            ``FORWARDED_ALLOW_IPS`` environment variable, else ``"127.0.0.1"``.
        server_header: send ``server: skirr`` when the app sends no ``server`` (default on).
        date_header: send ``date`` when the app sends none (default on).
        headers: fields added to every response (refusals too), as ``"name:value"`` strings or
            ``(name, value)`` pairs; a ``server`` among them replaces skirr's own. Names must be
            RFC 9110 tokens and values visible ASCII/Latin-1 without CR, LF or NUL; the fields
            skirr writes itself (content-length, transfer-encoding, connection, keep-alive,
            upgrade, te, trailer, proxy-connection, date, and a 101's sec-websocket-accept,
            -extensions and -protocol) are refused. Unless ``http`` is ``"1"``, fields that would
            leave skirr's own HTTP/2 response over :data:`H2_SECTION_MAX` bytes (RFC 9113
            §6.5.2's measure) are refused too.
        log_config: a ``logging.config.dictConfig`` dict, or a file: ``.json``/``.yaml``/
            ``.yml`` (dictConfig) or INI (fileConfig); applied when the server starts, before
            the app is imported. The ``skirr`` logger's level is ``log_level`` (``info`` when
            ``None``) unless the configuration sets it; a ``log_level`` given overrides the
            configuration's levels of ``skirr.error`` and ``skirr.access``.
        use_colors: colour the level names on skirr's own stderr handler; ``None`` = when stderr
            is a terminal.
        request_id: every request and response carries an ``X-Request-ID`` (a valid incoming
            one is kept, else one is made; see ``skirr.request_id``). Default off.
        metrics_port: serve Prometheus metrics on this TCP port of ``host`` (its own listener;
            see ``skirr.metrics``; needs prometheus-client); ``None`` = off. With ``workers`` >
            1 the supervisor serves it: the numbers of all workers together.
        ws: ``"auto"`` serves WebSocket upgrades (RFC 6455, the ASGI ``websocket`` scope);
            ``"none"`` passes them to the app as plain HTTP requests (uvicorn's ``--ws``).
        ws_max_size: bytes of payload per received WebSocket message (all its frames); a larger
            one fails the connection with close code 1009. Default 16 MiB, as uvicorn.
        ws_max_queue: received WebSocket messages held for the app before skirr stops reading
            the connection (flow control; also at 64 KiB of them). Default 32, as uvicorn.
        ws_ping_interval: seconds between the server's keepalive pings on an idle WebSocket;
            0 = none. Default 20, as uvicorn.
        ws_ping_timeout: seconds a keepalive ping waits for its pong before the connection is
            closed with 1011; 0 = forever. Default 20, as uvicorn.
        ws_per_message_deflate: accept a client's permessage-deflate offer (RFC 7692: messages
            compressed with zlib both ways; inflating is bounded by ``ws_max_size``). Default
            on, as uvicorn.
        http: which protocols a connection may speak (granian's ``--http``): ``"auto"`` (the
            default) HTTP/1.1, or HTTP/2 for a cleartext connection that opens with the HTTP/2
            preface (prior knowledge, RFC 9113 §3.3) and a TLS one that selects ALPN ``h2``
            (offered before ``http/1.1``); ``"1"`` HTTP/1.1 only; ``"2"`` HTTP/2 only.
        http2_max_concurrent_streams: streams per HTTP/2 connection (SETTINGS_MAX_CONCURRENT_STREAMS);
            a stream counts while open, and one the client reset before its response was
            complete until its app call has ended (RFC 9113 §5.1.2; Rapid Reset). Default 100.
        http2_max_headers_size: bytes of a request's header list (SETTINGS_MAX_HEADER_LIST_SIZE,
            RFC 9113 §6.5.2: names + values + 32 per field); larger: 431 on the stream.
            ``None`` (the default): 65536, HTTP/1.1's head limit.
        http2_initial_stream_window_size: bytes of request content a stream may have sent and
            its app not yet read (SETTINGS_INITIAL_WINDOW_SIZE; the window reopens as the app's
            receive() takes it). Default 1 MiB.
        http2_initial_connection_window_size: bytes of request content all of a connection's
            streams together may have sent and their apps not yet read (the connection's
            flow-control window, RFC 9113 §6.9.1; raised from 65,535 by a WINDOW_UPDATE on
            stream 0), 65535..2**31-1. ``None`` (the default): four stream windows (4 MiB), so
            up to three streams whose apps do not read hold back no other stream's upload.
        http2_max_frame_size: the largest frame payload skirr accepts (SETTINGS_MAX_FRAME_SIZE,
            16384..16777215). Default 16384.
        env_file: a dotenv file loaded (python-dotenv; existing variables win) on construction,
            before anything reads the environment or imports the app.
        ssl_certfile: serve TLS (HTTPS, WSS) with the PEM certificate chain in this file (leaf
            first); ``None`` (the default) serves cleartext. Every other ``ssl_*`` setting
            needs it.
        ssl_keyfile: the PEM private key of ``ssl_certfile``; ``None``: the key is in
            ``ssl_certfile`` (as uvicorn's).
        ssl_keyfile_password: the key's password: a str, bytes or a callable returning one.
        ssl_version: an ``ssl.PROTOCOL_*`` number as uvicorn's: 17 (``PROTOCOL_TLS_SERVER``,
            the default) or 2 (``PROTOCOL_TLS``): TLS 1.2 and 1.3; 5 (``PROTOCOL_TLSv1_2``):
            TLS 1.2 alone. Others are refused (obsolete, RFC 8996).
        ssl_min_version: the lowest TLS version, ``"TLSv1.2"`` (the default) or ``"TLSv1.3"``.
        ssl_cert_reqs: client certificates, an ``ssl.CERT_*`` number: 0 none (the default),
            1 requested (one that fails verification is let through, the reason in the
            ``tls`` extension's ``client_cert_error``), 2 required and verified. 1 and 2 need
            ``ssl_ca_certs``.
        ssl_ca_certs: the PEM CA file client certificates are verified against.
        ssl_ciphers: the TLS 1.2 cipher list (OpenSSL's syntax); the default ``"TLSv1"``
            (uvicorn's) selects skirr's: forward-secret AEAD suites only. TLS 1.3's suites are
            OpenSSL's.
        ssl_crl: a PEM certificate revocation list checked for client certificates (needs
            ``ssl_ca_certs``).
        ssl_sni: extra certificates chosen by the server name the client asks for (SNI): each
            a ``"CERTFILE:KEYFILE"`` string (``"CERTFILE"`` alone when it holds the key) or a
            ``(certfile, keyfile[, password])`` tuple; a certificate serves the DNS names of
            its subjectAltName (``*.example.com`` one label). Any other name gets
            ``ssl_certfile``'s.

    Raises:
        ConfigError: on construction, for a value of the wrong type or out of range;
            ``AppLoadError`` for an ``app`` string not of the form ``"module:attr"`` (nothing is
            imported until :meth:`load_app`).
    """

    app: str | Callable[..., Any]
    host: str = "127.0.0.1"
    port: int = 8000
    uds: str | None = None
    loop: str = "auto"
    lifespan: str = "auto"
    root_path: str = ""
    factory: bool = False
    log_level: str | int | None = None
    timeout_keep_alive: float = 5.0
    timeout_request_head: float = DEFAULT_TIMEOUT_REQUEST_HEAD
    timeout_write: float = DEFAULT_TIMEOUT_WRITE
    timeout_request_body: float = DEFAULT_TIMEOUT_REQUEST_BODY
    backlog: int = 2048
    limit_request_body: int = DEFAULT_LIMIT_REQUEST_BODY
    limit_concurrency: int | None = None
    limit_connections: int | None = None
    limit_max_requests: int | None = None
    limit_max_requests_jitter: int = 0
    timeout_graceful_shutdown: float | None = DEFAULT_TIMEOUT_GRACEFUL_SHUTDOWN
    app_dir: str = "."
    fd: int | None = None
    uds_perms: int | None = None
    workers: int = 1
    reuse_port: bool = True
    worker_kind: str = "process"
    timeout_worker_healthcheck: float = DEFAULT_TIMEOUT_WORKER_HEALTHCHECK
    reload: bool = False
    reload_dirs: list[str] = dataclasses.field(default_factory=list)
    reload_includes: list[str] = dataclasses.field(
        default_factory=lambda: list(DEFAULT_RELOAD_INCLUDES)
    )
    reload_excludes: list[str] = dataclasses.field(
        default_factory=lambda: list(DEFAULT_RELOAD_EXCLUDES)
    )
    health_check_path: str | None = None
    drain_delay: float = 0.0
    write_batch_delay: float = DEFAULT_WRITE_BATCH_DELAY
    access_log: bool = True
    access_log_format: str | None = None
    proxy_headers: bool = True
    proxy_headers_mode: str = "x-forwarded"
    forwarded_allow_ips: str | list[str] | None = None
    server_header: bool = True
    date_header: bool = True
    headers: list[Any] = dataclasses.field(default_factory=list)
    log_config: str | dict[str, Any] | None = None
    use_colors: bool | None = None
    env_file: str | None = None
    request_id: bool = False
    metrics_port: int | None = None
    ws: str = "auto"
    ws_max_size: int = 16 * 1024 * 1024
    ws_max_queue: int = 32
    ws_ping_interval: float = 20.0
    ws_ping_timeout: float = 20.0
    ws_per_message_deflate: bool = True
    http: str = "auto"
    http2_max_concurrent_streams: int = 100
    http2_max_headers_size: int | None = None
    http2_initial_stream_window_size: int = 1024 * 1024
    http2_initial_connection_window_size: int | None = None
    http2_max_frame_size: int = 16384
    ssl_keyfile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile_password: Any = None
    ssl_version: int = DEFAULT_SSL_VERSION
    ssl_cert_reqs: int = 0
    ssl_ca_certs: str | None = None
    ssl_ciphers: str = DEFAULT_SSL_CIPHERS
    ssl_min_version: str = "TLSv1.2"
    ssl_crl: str | None = None
    ssl_sni: list[Any] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.env_file is not None:
            load_env_file(self.env_file)
        if isinstance(self.log_config, str):
            _check_path("--log-config", self.log_config, "file")
        if self.log_config is not None and not isinstance(self.log_config, (str, dict)):
            raise ConfigError(f"log_config must be a file path or a dict; got {self.log_config!r}")
        if isinstance(self.app, str):
            split_import_string(self.app)  # a malformed string is refused before any import
        elif not callable(self.app):
            raise ConfigError(f"app must be a callable or a 'module:attr' string; got {self.app!r}")
        _check_choice("loop", self.loop, LOOPS)
        _check_choice("lifespan", self.lifespan, LIFESPANS)
        _check_choice("ws", self.ws, WS_MODES)
        _check_choice("proxy_headers_mode", self.proxy_headers_mode, PROXY_HEADERS_MODES)
        _check_number("ws_max_size", self.ws_max_size, integer=True, positive=True)
        _check_number("ws_max_queue", self.ws_max_queue, integer=True, positive=True)
        _check_number("ws_ping_interval", self.ws_ping_interval, integer=False)
        _check_number("ws_ping_timeout", self.ws_ping_timeout, integer=False)
        _check_choice("http", self.http, HTTP_MODES)
        for name, low, high in (("http2_max_concurrent_streams", 1, 2**31 - 1),
                                ("http2_max_headers_size", 1, 2**31 - 1),
                                ("http2_initial_stream_window_size", 1, 2**31 - 1),
                                ("http2_initial_connection_window_size", 65535, 2**31 - 1),
                                ("http2_max_frame_size", 16384, 2**24 - 1)):
            value = getattr(self, name)
            if value is None and name in ("http2_max_headers_size",
                                          "http2_initial_connection_window_size"):
                continue
            _check_number(name, value, integer=True, minimum=low)
            if value > high:
                raise ConfigError(f"{name} must be an integer in {low}..{high}; got {value!r}")
        if isinstance(self.log_level, str):
            _check_choice("log_level", self.log_level, tuple(LOG_LEVELS))
        elif self.log_level is not None and (
                isinstance(self.log_level, bool) or not isinstance(self.log_level, int)):
            raise ConfigError(f"log_level must be a level name or number; got {self.log_level!r}")
        _check_number("port", self.port, integer=True)
        if self.port > 65535:
            raise ConfigError(f"port must be in 0..65535; got {self.port}")
        if self.metrics_port is not None:
            _check_number("metrics_port", self.metrics_port, integer=True)
            if self.metrics_port > 65535:
                raise ConfigError(f"metrics_port must be in 0..65535; got {self.metrics_port}")
        _check_number("backlog", self.backlog, integer=True, minimum=1)
        if self.backlog > MAX_BACKLOG:
            raise ConfigError(f"backlog must be in 1..{MAX_BACKLOG}; got {self.backlog}")
        _check_number("timeout_keep_alive", self.timeout_keep_alive, integer=False)
        _check_number("timeout_request_head", self.timeout_request_head, integer=False,
                      positive=True)
        _check_number("timeout_write", self.timeout_write, integer=False, positive=True)
        _check_number("write_batch_delay", self.write_batch_delay, integer=False)
        _check_number("timeout_request_body", self.timeout_request_body, integer=False)
        _check_number("limit_request_body", self.limit_request_body, integer=True)
        for name in ("limit_concurrency", "limit_connections", "limit_max_requests"):
            if getattr(self, name) is not None:
                _check_number(name, getattr(self, name), integer=True)
        _check_number("limit_max_requests_jitter", self.limit_max_requests_jitter, integer=True)
        if self.timeout_graceful_shutdown is not None:
            _check_number(
                "timeout_graceful_shutdown", self.timeout_graceful_shutdown, integer=False
            )
        if not isinstance(self.root_path, str) or (
            self.root_path and not self.root_path.startswith("/")
        ):
            raise ConfigError(f"root_path must be empty or start with '/'; got {self.root_path!r}")
        if self.root_path.endswith("/"):
            self.root_path = self.root_path.rstrip("/")
        from .access import check_format

        try:
            check_format(self.access_log_format)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.encoded_headers = encode_headers(self.headers)
        if self.http != "1":
            self._check_h2_own_fields()
        self.allow_ips = _allow_ips(self.forwarded_allow_ips)

        self._check_process_settings()
        self._check_ssl()

    def _check_ssl(self) -> None:
        """The --ssl-* settings' usage errors (exit 2): an option without --ssl-certfile, a value
        out of range, a file that is not there. What OpenSSL refuses in the files (a bad PEM, a
        wrong password, a key not matching) is found by :meth:`tls_context`."""
        names = ("ssl_keyfile", "ssl_keyfile_password", "ssl_ca_certs", "ssl_crl")
        if self.ssl_certfile is None:
            for name in names + ("ssl_sni",):
                if getattr(self, name):
                    raise ConfigError(f"--{name.replace('_', '-')} needs --ssl-certfile")
            for name, default in (("ssl_version", DEFAULT_SSL_VERSION), ("ssl_cert_reqs", 0),
                                  ("ssl_ciphers", DEFAULT_SSL_CIPHERS),
                                  ("ssl_min_version", "TLSv1.2")):
                if getattr(self, name) != default:
                    raise ConfigError(f"--{name.replace('_', '-')} needs --ssl-certfile")
            return
        if isinstance(self.ssl_version, bool) or self.ssl_version not in SSL_VERSIONS:
            raise ConfigError(
                f"--ssl-version {self.ssl_version!r} is not served: use 17 "
                "(ssl.PROTOCOL_TLS_SERVER, the default) or 2 (ssl.PROTOCOL_TLS) for TLS 1.2 and "
                "1.3, or 5 (ssl.PROTOCOL_TLSv1_2) for TLS 1.2 alone; SSL 3, TLS 1.0 and TLS 1.1 "
                "are obsolete (RFC 8996)")
        if isinstance(self.ssl_cert_reqs, bool) or self.ssl_cert_reqs not in SSL_CERT_REQS:
            raise ConfigError(f"--ssl-cert-reqs must be 0 (none), 1 (optional) or 2 (required); "
                              f"got {self.ssl_cert_reqs!r}")
        _check_choice("--ssl-min-version", self.ssl_min_version, SSL_MIN_VERSIONS)
        if self.ssl_version == 5 and self.ssl_min_version == "TLSv1.3":
            raise ConfigError("--ssl-version 5 (TLS 1.2 alone) contradicts --ssl-min-version "
                              "TLSv1.3")
        if not isinstance(self.ssl_ciphers, str) or not self.ssl_ciphers:
            raise ConfigError(f"--ssl-ciphers must be a cipher list; got {self.ssl_ciphers!r}")
        if self.ssl_cert_reqs and self.ssl_ca_certs is None:
            raise ConfigError(f"--ssl-cert-reqs {self.ssl_cert_reqs} needs --ssl-ca-certs")
        if self.ssl_crl is not None and self.ssl_ca_certs is None:
            raise ConfigError("--ssl-crl needs --ssl-ca-certs")
        for name in ("ssl_certfile",) + names[:1] + names[2:]:
            value = getattr(self, name)
            if value is not None:
                _check_path(f"--{name.replace('_', '-')}", os.fspath(value), "file")
                _check_readable(f"--{name.replace('_', '-')}", os.fspath(value))
        if self.supervised and self.ssl_keyfile_password is not None and not isinstance(
                self.ssl_keyfile_password, str):
            raise ConfigError("ssl_keyfile_password must be a str with workers or reload (each "
                              "worker process is given it)")
        if not isinstance(self.ssl_sni, (list, tuple)):
            raise ConfigError(f"ssl_sni must be a list; got {self.ssl_sni!r}")
        self.ssl_sni_files = [_sni_item(item) for item in self.ssl_sni]

    def tls_context(self, ticket_key: bytes | None = None) -> Any:
        """The serving ``skirr._native.TLSContext`` of the --ssl-* settings, or ``None`` without
        ``ssl_certfile``. ``ticket_key``: 80 bytes shared by the workers of one supervisor (a
        session ticket one issued resumes on another); ``None``: a random one.

        Raises:
            ConfigError: what OpenSSL refuses, one line naming the option, the file and the
                reason (a bad PEM file, a wrong password, a key that does not match the
                certificate, a CA or CRL file that cannot be read, a cipher list matching
                nothing).
        """
        if self.ssl_certfile is None:
            return None

        password = self.ssl_keyfile_password
        try:
            return _native.TLSContext(
                os.fspath(self.ssl_certfile),
                keyfile=self.ssl_keyfile,
                password=password,
                ca_certs=self.ssl_ca_certs,
                cert_reqs=self.ssl_cert_reqs,
                ciphers=self.ssl_ciphers,
                min_version=self.ssl_min_version,
                version=self.ssl_version,
                crl=self.ssl_crl,
                sni=[(c, k, password if p is None else p) for c, k, p in self.ssl_sni_files],
                ticket_key=ticket_key,
                http=HTTP_MODE_NUMBER[self.http],
            )
        except (ValueError, TypeError) as exc:
            raise ConfigError(str(exc)) from None

    def _check_process_settings(self) -> None:
        """Validates the address source (host:port, uds, fd), workers, reload and draining."""
        if self.fd is not None:
            _check_number("fd", self.fd, integer=True)
        if self.uds is not None and self.fd is not None:
            raise ConfigError("uds and fd cannot be used together")
        if (self.uds is not None or self.fd is not None) and (
            self.host != "127.0.0.1" or self.port != 8000
        ):
            which = "uds" if self.uds is not None else "fd"
            raise ConfigError(f"{which} cannot be used together with host or port")
        if self.uds_perms is not None:
            _check_number("uds_perms", self.uds_perms, integer=True)
            if self.uds_perms > 0o7777:
                raise ConfigError(
                    f"uds_perms must be a mode in 0..0o7777; got {self.uds_perms!r}"
                )
            if self.uds is None:
                raise ConfigError("uds_perms needs uds")
        _check_number("workers", self.workers, integer=True, minimum=1)
        if not isinstance(self.reuse_port, bool):
            raise ConfigError(f"reuse_port must be True or False; got {self.reuse_port!r}")
        if self.worker_kind not in WORKER_KINDS:
            raise ConfigError(f"worker_kind must be 'process' or 'thread'; got "
                              f"{self.worker_kind!r}")
        if self.worker_kind == "thread":
            if self.reload:
                raise ConfigError("worker_kind 'thread' cannot be used with reload")
            if thread_workers_refused():
                raise ConfigError(f"worker_kind 'thread' {THREADS_NEED_NO_GIL}")
        _check_number("timeout_worker_healthcheck", self.timeout_worker_healthcheck,
                      integer=False, positive=True)
        _check_number("drain_delay", self.drain_delay, integer=False)
        if self.health_check_path is not None and (
            not isinstance(self.health_check_path, str)
            or not self.health_check_path.startswith("/")
        ):
            raise ConfigError(
                f"health_check_path must start with '/'; got {self.health_check_path!r}"
            )
        for name in ("reload_dirs", "reload_includes", "reload_excludes"):
            value = getattr(self, name)
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{name} must be a list of strings; got {value!r}")
            setattr(self, name, list(value))
        if (self.workers > 1 or self.reload) and not isinstance(self.app, str):
            raise ConfigError(
                "workers and reload need the application as a 'module:attr' string (each worker "
                "process imports it)"
            )
        self._check_paths()
        if self.reload:
            # before anything binds: the supervisor's watcher imports it (reload.py)
            try:
                import watchfiles  # noqa: F401
            except ImportError:
                raise ConfigError(RELOAD_NEEDS_WATCHFILES) from None
            except Exception as exc:  # an install that fails to import, as one line too
                raise ConfigError(f"--reload: watchfiles fails to import: {exc!r}") from None

    def _check_paths(self) -> None:
        """Every path-valued setting names what it must, so a mistake is a usage error found
        before anything binds (rule skirr-cli-path-options): ``app_dir`` (for a ``module:attr``
        app) and each of ``reload_dirs`` a directory, ``uds`` in an existing directory and not
        an existing file of another kind (``log_config`` and ``env_file`` are checked first)."""
        if isinstance(self.app, str):
            if not isinstance(self.app_dir, str):
                raise ConfigError(f"app_dir must be a string; got {self.app_dir!r}")
            _check_path("--app-dir", self.app_dir, "directory")
        for d in self.reload_dirs:
            _check_path("--reload-dir", d, "directory")
        if self.uds is not None:
            if not isinstance(self.uds, str) or not self.uds:
                raise ConfigError(f"uds must be a non-empty path; got {self.uds!r}")
            parent = os.path.dirname(os.path.abspath(self.uds))
            if not os.path.isdir(parent):
                raise ConfigError(f"--uds {self.uds}: {parent} is not a directory")
            try:
                mode = os.lstat(self.uds).st_mode
            except OSError:
                pass  # absent (bound then), or unreadable: bind reports it
            else:
                if not stat.S_ISSOCK(mode):
                    raise ConfigError(f"--uds {self.uds}: exists and is not a socket")

    @property
    def supervised(self) -> bool:
        """True when a supervisor process runs the workers (``workers`` > 1 or ``reload``)."""
        return self.workers > 1 or self.reload

    def _check_h2_own_fields(self) -> None:
        """Raises ConfigError when skirr's own HTTP/2 answers (its 500, a refusal, the health
        check) could not be sent: the server, date and --header fields with
        :data:`H2_OWN_RESPONSE_SIZE` more over :data:`H2_SECTION_MAX` bytes by RFC 9113
        §6.5.2's measure (name + value + 32 bytes a field). An app's response beside them would
        be refused too."""
        server, extra = self.response_fields
        size = _native.h2_own_fields_size(server, extra, self.date_header)
        if size > H2_SECTION_MAX:
            raise ConfigError(
                f"headers: skirr's own HTTP/2 responses would carry {size:,} bytes of fields "
                f"(RFC 9113 §6.5.2: name + value + 32 bytes each; the server, date and --header "
                f"fields with {H2_OWN_RESPONSE_SIZE} for its own), over the "
                f"{H2_SECTION_MAX:,} an HTTP/2 response head may hold: send fewer or shorter "
                f"--header fields, or serve HTTP/1.1 only (--http 1)")

    @property
    def response_fields(self) -> tuple[bytes, bytes]:
        """(the server line or b"", the other --header lines) as the native server takes them."""
        server = b"server: skirr\r\n" if self.server_header else b""
        extra = []
        for name, value in self.encoded_headers:
            if name == b"server":
                server = b"server: " + value + b"\r\n"
            else:
                extra.append(name + b": " + value + b"\r\n")
        return server, b"".join(extra)

    @property
    def connection_limit(self) -> int:
        """The open-connection cap handed to the reactor: ``limit_connections``, or the default
        derived from RLIMIT_NOFILE when it is ``None``; 0 = no cap."""
        if self.limit_connections is None:
            return default_limit_connections()
        return self.limit_connections

    @property
    def log_level_number(self) -> int:
        """The ``logging`` level number of ``log_level`` (``info``'s when ``None``)."""
        if isinstance(self.log_level, int):
            return self.log_level
        return LOG_LEVELS[self.log_level or "info"]

    def load_app(self) -> Callable[..., Any]:
        """Returns the ASGI application: ``app`` itself, or imported from ``"module:attr"`` (with
        ``app_dir`` first on ``sys.path``), called first when ``factory`` is set, or when it is
        not set but ``app`` is a factory (``_is_factory``: it can be called with no argument and
        not with an ASGI app's three), as uvicorn does: then the warning ``FACTORY_DETECTED`` is
        logged on ``skirr.error`` first (rule skirr-cli-factory-detected).

        Raises:
            AppLoadError: bad ``module:attr`` format, module not found, attribute missing, ``app``
                (or, with ``factory``, what the factory returned) not callable, the factory
                raised (any ``BaseException``, ``SystemExit`` and ``KeyboardInterrupt``
                included), or (``AppImportError``) the module raised while being imported
                (the same).
        """
        app = self.app
        if isinstance(app, str):
            app = import_from_string(app, self.app_dir)
        if not callable(app):
            raise AppLoadError(f"{self._name} is not callable")
        if not self.factory and _is_factory(app):
            logging.getLogger("skirr.error").warning(FACTORY_DETECTED)
        if self.factory or _is_factory(app):
            try:
                app = app()
            except BaseException as exc:  # SystemExit, KeyboardInterrupt too: the app's, not ours
                raise AppLoadError(
                    f"application factory {self._name} raised {_describe(exc)}"
                ) from exc
            if not callable(app):
                raise AppLoadError(
                    f"application factory {self._name} returned an object of type "
                    f"{type(app).__name__!r}, which is not callable"
                )
        return app

    @property
    def _name(self) -> str:
        return f'"{self.app}"' if isinstance(self.app, str) else repr(self.app)

    def loop_factory(self) -> Callable[[], asyncio.AbstractEventLoop]:
        """A zero-argument callable making a new event loop of the configured kind.

        Raises:
            ConfigError: ``loop="uvloop"`` but uvloop is not installed.
        """
        if self.loop in ("auto", "uvloop"):
            try:
                import uvloop
            except ImportError:
                if self.loop == "uvloop":
                    raise ConfigError(
                        "--loop uvloop: uvloop is not installed (pip install 'skirr[uvloop]')"
                    ) from None
            else:
                factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
                return factory
        return asyncio.new_event_loop


def load_env_file(path: str) -> None:
    """Loads a dotenv file into ``os.environ`` (variables already set win), with python-dotenv.

    Raises:
        ConfigError: the file does not exist or python-dotenv is not installed.
    """
    _check_path("--env-file", path, "file")
    try:
        import dotenv
    except ImportError:
        raise ConfigError(
            f"--env-file {path}: needs python-dotenv (pip install 'skirr[standard]')"
        ) from None
    dotenv.load_dotenv(path, override=False)


_TCHARS = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
# Fields --header may not set, with why: skirr writes them per response (framing, RFC 9112 §6;
# connection options, RFC 9110 §7.6.1), so a fixed copy would contradict the real one or send two.
_FRAMING = "a framing field skirr writes for each response itself (RFC 9112 §6)"
_HOP = "a connection-specific field skirr manages itself (RFC 9110 §7.6.1)"
OWNED_FIELDS = {
    b"content-length": _FRAMING,
    b"transfer-encoding": _FRAMING,
    b"connection": _HOP,
    b"keep-alive": _HOP,
    b"upgrade": _HOP,
    b"te": _HOP,
    b"trailer": _HOP,
    b"proxy-connection": _HOP,
    b"date": "written by skirr for each response (--no-date-header turns it off)",
    **{name: "written by skirr in each WebSocket handshake's 101 (RFC 6455 §4.2.2)"
       for name in (b"sec-websocket-accept", b"sec-websocket-extensions",
                    b"sec-websocket-protocol")},
}


def _sni_item(item: Any) -> tuple[str, str | None, Any]:
    """(certfile, keyfile or None, password or None) of one ``ssl_sni`` entry, its files
    checked (a usage error)."""
    if isinstance(item, str):
        cert, _, key = item.partition(":")
        entry: tuple[Any, ...] = (cert, key or None, None)
    elif isinstance(item, (tuple, list)) and len(item) in (2, 3):
        entry = (item[0], item[1], item[2] if len(item) == 3 else None)
    else:
        raise ConfigError(f"--ssl-sni must be CERTFILE:KEYFILE; got {item!r}")
    cert, key, password = entry
    if not cert:
        raise ConfigError(f"--ssl-sni must be CERTFILE:KEYFILE; got {item!r}")
    _check_path("--ssl-sni", os.fspath(cert), "file")
    _check_readable("--ssl-sni", os.fspath(cert))
    if key is not None:
        _check_path("--ssl-sni", os.fspath(key), "file")
        _check_readable("--ssl-sni", os.fspath(key))
    return os.fspath(cert), os.fspath(key) if key is not None else None, password


def encode_headers(headers: Any) -> list[tuple[bytes, bytes]]:
    """``--header`` values as (lower-cased name, value) bytes pairs.

    Raises:
        ConfigError: not ``"name:value"`` / a pair, a name that is not an RFC 9110 token, a
            value with CR, LF, NUL or another control character (RFC 9110 §5.5), not Latin-1,
            or a field skirr writes itself (:data:`OWNED_FIELDS`: content-length,
            transfer-encoding, the connection-specific fields of RFC 9110 §7.6.1, date, the
            WebSocket handshake's sec-websocket-accept, -extensions, -protocol).
    """
    if isinstance(headers, (str, bytes)) or not isinstance(headers, (list, tuple)):
        raise ConfigError(f"headers must be a list of 'name:value' strings; got {headers!r}")
    out = []
    for item in headers:
        if isinstance(item, str):
            name, sep, value = item.partition(":")
            if not sep:
                raise ConfigError(f"header {item!r} must be 'name:value'")
        elif isinstance(item, (tuple, list)) and len(item) == 2 and all(
            isinstance(x, str) for x in item
        ):
            name, value = item
        else:
            raise ConfigError(f"header {item!r} must be 'name:value' or a (name, value) pair")
        value = value.strip(" \t")
        try:
            n, v = name.encode("latin-1"), value.encode("latin-1")
        except UnicodeEncodeError:
            raise ConfigError(f"header {item!r}: not Latin-1") from None
        if not n or any(ch not in _TCHARS for ch in n):
            raise ConfigError(f"header {item!r}: invalid field name {name!r}")
        if any((ch < 0x20 and ch != 0x09) or ch == 0x7F for ch in v):
            raise ConfigError(f"header {item!r}: invalid field value (control character)")
        why = OWNED_FIELDS.get(n.lower())
        if why is not None:
            raise ConfigError(f"header {item!r}: {name.lower()} is {why}")
        out.append((n.lower(), v))
    return out


def _allow_ips(value: Any) -> str:
    """The trusted-peer list as one comma-separated string, checked item by item.

    Raises:
        ConfigError: an item is not an IP address, a CIDR network, ``*`` or ``unix:``.
    """
    import ipaddress

    if value is None:
        value = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
    if isinstance(value, (list, tuple)):
        value = ",".join(value)
    if not isinstance(value, str):
        raise ConfigError(f"forwarded_allow_ips must be a string or a list; got {value!r}")
    for item in value.split(","):
        item = item.strip()
        if item in ("", "*", "unix:"):
            continue
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ConfigError(
                f"forwarded_allow_ips: {item!r} is not an IP address, a network, '*' or 'unix:'"
            ) from None
    return value


def split_import_string(spec: str) -> tuple[str, str]:
    """Splits ``"module:attr"`` into its two parts without importing anything.

    Raises:
        AppLoadError: not exactly one ``:``, or an empty module or attribute name or dotted part
            (``"app"``, ``":app"``, ``"mod:"``, ``".mod:app"``, ``"mod:a..b"``).
    """
    module_name, sep, attr = spec.partition(":")
    if (
        not sep
        or ":" in attr
        or "" in module_name.split(".")
        or "" in attr.split(".")
    ):
        raise AppLoadError(f'import string "{spec}" must be in format "<module>:<attribute>"')
    return module_name, attr


def import_from_string(spec: str, app_dir: str = ".") -> Any:
    """Imports ``"module:attr"`` (``attr`` may be dotted: ``"pkg.mod:obj.app"``).

    Raises:
        AppLoadError: bad format, module (or a package on its path) not found, attribute missing;
            ``AppImportError`` (its ``__cause__`` is the original) when the module itself raised.
    """
    module_name, attr = split_import_string(spec)
    path = os.path.abspath(app_dir)
    if path not in sys.path:
        sys.path.insert(0, path)
    try:
        obj = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Only "this module does not exist" is the user's spelling mistake; a missing import
        # inside the application's own module is the application's error (with its traceback).
        if exc.name is not None and (
            module_name == exc.name or module_name.startswith(exc.name + ".")
        ):
            raise AppLoadError(f'could not import module "{module_name}"') from None
        raise AppImportError(module_name, exc) from exc
    except BaseException as exc:
        # SystemExit or KeyboardInterrupt raised by the module (sys.exit() at import) is its
        # failure to load, not a request to end skirr in an unexplained way (Server.serve()
        # installs the loop's SIGINT handler before the import: a KeyboardInterrupt here is the
        # module's own).
        raise AppImportError(module_name, exc) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AppLoadError(
                f'attribute "{attr}" not found in module "{module_name}"'
            ) from None
    return obj


def load_log_config(log_config: str | dict[str, Any]) -> None:
    """Applies a logging configuration: a dict or a ``.json`` / ``.yaml`` / ``.yml`` file for
    ``logging.config.dictConfig``, any other file for ``logging.config.fileConfig`` (INI), with
    ``disable_existing_loggers`` False unless the configuration says otherwise (as uvicorn).

    Raises:
        LogConfigError: the file cannot be read or parsed, PyYAML is missing for a YAML file, or
            ``logging`` rejects the configuration.
    """
    import logging.config

    try:
        if isinstance(log_config, dict):
            logging.config.dictConfig(log_config)
            return
        if log_config.endswith(".json"):
            import json

            with open(log_config) as f:
                logging.config.dictConfig(json.load(f))
        elif log_config.endswith((".yaml", ".yml")):
            try:
                import yaml
            except ImportError:
                raise LogConfigError(
                    f"--log-config {log_config}: YAML needs PyYAML (pip install 'skirr[standard]')"
                ) from None
            with open(log_config) as f:
                logging.config.dictConfig(yaml.safe_load(f))
        else:
            if not os.path.exists(log_config):
                raise FileNotFoundError(2, "No such file or directory")
            logging.config.fileConfig(log_config, disable_existing_loggers=False)
    except LogConfigError:
        raise
    except Exception as exc:  # OSError, JSON/YAML/INI syntax, ValueError from logging.config
        # with its causes: "Unable to configure formatter 'default': No module named 'uvicorn'"
        from skirr.logging import describe_config_error

        raise LogConfigError(f"--log-config {log_config}: {describe_config_error(exc)}") from None


def configure_logging(
    level: int, log_config: str | dict[str, Any] | None = None, use_colors: bool | None = None,
    level_given: bool = False,
) -> None:
    """Applies ``log_config`` (see :func:`load_log_config`), then sets the ``skirr`` logger's
    level (unless the configuration set it), and when ``level_given`` (``--log-level`` was given)
    the level of ``skirr.error`` and ``skirr.access`` over the configuration's (uvicorn's order:
    its ``configure_logging`` sets ``uvicorn.error`` and ``uvicorn.access`` after the config), and, unless ``skirr`` has a handler already (the
    embedding program's or the configuration's are left alone) or ``log_config`` routes its
    records to an ancestor's handlers (a root-only configuration, as uvicorn's lines reach it),
    uvicorn's default handlers: ``skirr.access`` on stdout, the rest on stderr
    (``skirr.logging.install_default_handlers``).

    Loggers: ``skirr.error`` (server and application errors; connection events at TRACE),
    ``skirr.access`` (the access log). use_colors: colour the level names (and the access
    lines' status and request line); ``None`` = when the stream is a terminal.
    """
    if log_config is not None:
        load_log_config(log_config)
    root = logging.getLogger("skirr")
    if log_config is None or root.level == logging.NOTSET:
        root.setLevel(level)
    if log_config is not None and level_given:
        for name in ("skirr.error", "skirr.access"):
            logging.getLogger(name).setLevel(level)
    if log_config is not None and root.hasHandlers():
        # The configuration routes skirr's records, to handlers of its own or of an ancestor:
        # a configuration of the root logger alone gets every line, as uvicorn's does.
        return
    from skirr.logging import install_default_handlers

    install_default_handlers(use_colors)
