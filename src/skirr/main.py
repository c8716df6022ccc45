"""The command line: ``python -m skirr [OPTIONS] APP`` with uvicorn's flag names.

Owns: parsing and validating arguments and turning every user mistake into one ``skirr: error:``
line on stderr: status 2 for a usage error (found before anything is bound or imported: a bad
option or value, an APP not of the form ``module:attribute``), 1 otherwise. Never: prints a
traceback for a mistake the user can fix from the message.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
from collections.abc import Sequence
from typing import NoReturn

from . import __version__
from .config import (
    DEFAULT_LIMIT_REQUEST_BODY,
    DEFAULT_RELOAD_EXCLUDES,
    DEFAULT_RELOAD_INCLUDES,
    DEFAULT_TIMEOUT_WORKER_HEALTHCHECK,
    DEFAULT_UDS_PERMS,
    DEFAULT_TIMEOUT_GRACEFUL_SHUTDOWN,
    DEFAULT_TIMEOUT_REQUEST_HEAD,
    DEFAULT_TIMEOUT_REQUEST_BODY,
    DEFAULT_TIMEOUT_WRITE,
    DEFAULT_WRITE_BATCH_DELAY,
    DEFAULT_SSL_CIPHERS,
    DEFAULT_SSL_VERSION,
    SSL_MIN_VERSIONS,
    LIFESPANS,
    LOG_LEVELS,
    LOOPS,
    MAX_BACKLOG,
    PROXY_HEADERS_MODES,
    WS_MODES,
    HTTP_MODES,
    THREADS_NEED_NO_GIL,
    WORKER_KINDS,
    AppImportError,
    Config,
    ConfigError,
    LogConfigError,
    load_env_file,
    report_error,
    thread_workers_refused,
)

ENV_PREFIX = "SKIRR_"  # SKIRR_<OPTION>: --limit-concurrency -> SKIRR_LIMIT_CONCURRENCY
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, no usage dump: ``skirr: error: <message>``, status 2."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port: {text!r} (not in 0..65535)")
    return value


def _int_at_least(minimum: int, maximum: int | None = None):  # type: ignore[no-untyped-def]
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None
        if maximum is not None and not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"invalid integer: {text!r} (not in {minimum}..{maximum})"
            )
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}: {text!r}")
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"invalid number of seconds: {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    value = _seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds: {text!r}")
    return value


def _mode(text: str) -> int:
    try:
        value = int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid octal mode: {text!r}") from None
    if not 0 <= value <= 0o7777:
        raise argparse.ArgumentTypeError(f"invalid octal mode: {text!r} (not in 0..7777)")
    return value


def _web_concurrency() -> int:
    """The default of --workers: $WEB_CONCURRENCY (as uvicorn and gunicorn read it), else 1."""
    text = os.environ.get("WEB_CONCURRENCY")
    if text is None or text == "":
        return 1
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        _Parser(prog="skirr").error(f"WEB_CONCURRENCY must be an integer >= 1: {text!r}")
    return value


def _systemd_fd() -> int | None:
    """The socket systemd passed (socket activation: ``LISTEN_PID`` is this process and
    ``LISTEN_FDS`` is 1 -> descriptor 3); ``None`` without one. The variables are removed, so
    that child processes do not take them for their own (as sd_listen_fds(1) does).

    Exits with status 2 when ``LISTEN_FDS`` names more than one socket (skirr serves one)."""
    pid, count = os.environ.get("LISTEN_PID"), os.environ.get("LISTEN_FDS")
    if pid is None or count is None or pid != str(os.getpid()):
        return None
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(name, None)
    if count != "1":
        _Parser(prog="skirr").error(
            f"LISTEN_FDS={count}: skirr serves exactly one socket-activated socket"
        )
    return 3  # SD_LISTEN_FDS_START


def build_parser() -> argparse.ArgumentParser:
    """The ``skirr`` argument parser."""
    parser = _Parser(
        prog="skirr",
        description="Serve an ASGI 3 application over HTTP/1.1 and HTTP/2 with skirr.",
        epilog="Every option may also be set in the environment as SKIRR_<OPTION> (e.g. "
        "SKIRR_PORT=9000, SKIRR_ACCESS_LOG=off, SKIRR_APP=main:app); the command line wins.",
        allow_abbrev=False,
    )
    add = parser.add_argument
    add("app", metavar="APP", help="the application as module:attribute, e.g. main:app")
    add("--host", default=None, help="bind to this address (default: 127.0.0.1)")
    add("--port", type=_port, default=None, help="bind to this TCP port (default: 8000)")
    add("--uds", metavar="PATH", help="bind to this Unix-domain socket instead of host:port")
    add("--uds-perms", type=_mode, default=None, metavar="MODE",
        help=f"octal mode of the --uds socket file (default: {DEFAULT_UDS_PERMS:o})")
    add("--fd", type=_int_at_least(0), default=None, metavar="N",
        help="serve on this inherited, bound socket descriptor instead of host:port (systemd "
        "socket activation, LISTEN_FDS=1, is used by itself when no address is given)")
    add("--workers", type=_int_at_least(1), default=None, metavar="N",
        help="worker processes under a supervisor (default: $WEB_CONCURRENCY or 1)")
    add("--reuse-port", action=argparse.BooleanOptionalAction, default=True,
        help="with --workers on Linux TCP, one SO_REUSEPORT listener per worker, so the kernel "
        "spreads connections; --no-reuse-port shares one listener (default: on)")
    add("--worker-kind", choices=WORKER_KINDS, default="process",
        help="what --workers N runs: N worker processes, or one worker process with N event "
        "loops in N threads (needs a free-threaded Python: 3.13t/3.14t) (default: process)")
    add("--timeout-worker-healthcheck", type=_positive_seconds,
        default=DEFAULT_TIMEOUT_WORKER_HEALTHCHECK, metavar="SECONDS",
        help="kill and replace a worker whose event loop has not answered the supervisor's "
        "heartbeat for this long (default: %(default)g)")
    add("--reload", action="store_true",
        help="restart the worker when a watched file changes (development; needs watchfiles)")
    add("--reload-dir", action="append", default=[], metavar="DIR", dest="reload_dirs",
        help="with --reload, watch this directory (repeatable; default: the current directory)")
    add("--reload-include", action="append", default=[], metavar="GLOB", dest="reload_includes",
        help="with --reload, also watch file names matching GLOB (repeatable; default: *.py)")
    add("--reload-exclude", action="append", default=[], metavar="GLOB",
        dest="reload_excludes", help="with --reload, ignore file or directory names matching "
        "GLOB (repeatable; default: .* .py[cod] .sw.* ~*)")
    add("--health-check-path", default=None, metavar="PATH",
        help="answer requests for exactly PATH (any method; the query is ignored) itself, never "
        "calling the app: 200 while serving, 503 while shutting down (default: none)")
    add("--drain-delay", type=_seconds, default=0.0, metavar="SECONDS",
        help="after SIGTERM, keep accepting and serving this long while --health-check-path "
        "answers 503, then shut down gracefully (default: %(default)g)")
    add("--loop", choices=LOOPS, default="auto",
        help="event loop; auto = uvloop when installed, else asyncio (default: %(default)s)")
    add("--ws", choices=WS_MODES, default="auto",
        help="WebSocket upgrades: auto = served (RFC 6455, ASGI websocket scope), none = passed "
        "to the app as plain HTTP requests (default: %(default)s)")
    add("--http", choices=HTTP_MODES, default="auto",
        help="protocols: auto = HTTP/1.1, and HTTP/2 by prior knowledge (cleartext) or ALPN h2 "
        "(TLS); 1 = HTTP/1.1 only; 2 = HTTP/2 only (default: %(default)s)")
    add("--http2-max-concurrent-streams", type=_int_at_least(1, 2**31 - 1), default=100,
        metavar="N", help="HTTP/2 streams per connection whose app call has not ended "
        "(default: %(default)s)")
    add("--http2-max-headers-size", type=_int_at_least(1, 2**31 - 1), default=None,
        metavar="BYTES", help="bytes of an HTTP/2 request's header list (RFC 9113 §6.5.2); "
        "larger: 431 (default: 65536)")
    add("--http2-initial-stream-window-size", type=_int_at_least(1, 2**31 - 1),
        default=1024 * 1024, metavar="BYTES", help="bytes of HTTP/2 request content a stream "
        "may send ahead of its app's reads (default: %(default)s)")
    add("--http2-initial-connection-window-size", type=_int_at_least(65535, 2**31 - 1),
        default=None, metavar="BYTES", help="bytes of HTTP/2 request content a connection's "
        "streams together may send ahead of their apps' reads (default: four stream windows, "
        "4194304)")
    add("--http2-max-frame-size", type=_int_at_least(16384, 2**24 - 1), default=16384,
        metavar="BYTES", help="the largest HTTP/2 frame payload accepted (default: %(default)s)")
    add("--ws-max-size", type=_int_at_least(1), default=16 * 1024 * 1024, metavar="BYTES",
        help="close a WebSocket with 1009 when a received message is larger than this "
        "(default: %(default)s)")
    add("--ws-max-queue", type=_int_at_least(1), default=32, metavar="N",
        help="received WebSocket messages held for the app before reading stops "
        "(default: %(default)s)")
    add("--ws-ping-interval", type=_seconds, default=20.0, metavar="SECONDS",
        help="send a keepalive ping on a WebSocket this often; 0 = none (default: %(default)g)")
    add("--ws-ping-timeout", type=_seconds, default=20.0, metavar="SECONDS",
        help="close a WebSocket (1011) whose keepalive ping gets no pong for this long; "
        "0 = forever (default: %(default)g)")
    add("--ws-per-message-deflate", action=argparse.BooleanOptionalAction, default=True,
        help="accept a WebSocket client's permessage-deflate offer (RFC 7692) (default: on)")
    add("--lifespan", choices=LIFESPANS, default="auto",
        help="ASGI lifespan: auto = when the app supports it (default: %(default)s)")
    add("--root-path", default="", metavar="PATH",
        help="ASGI root_path, for an app mounted below a path by a proxy")
    add("--factory", action="store_true",
        help="APP is a zero-argument callable returning the application")
    add("--log-level", choices=tuple(LOG_LEVELS), default=None,
        help="log level (default: info, or what --log-config sets; given, it wins over "
        "--log-config's levels of skirr.error and skirr.access, as uvicorn's)")
    add("--timeout-keep-alive", type=_seconds, default=5.0, metavar="SECONDS",
        help="close idle keep-alive connections after this long (default: %(default)g)")
    add("--timeout-request-head", type=_positive_seconds, default=DEFAULT_TIMEOUT_REQUEST_HEAD,
        metavar="SECONDS", help="a connection must complete its request head this long after "
        "accept or after the first byte of the next request; then 408 (or a quiet close if no "
        "byte came) (default: %(default)g)")
    add("--timeout-request-body", type=_seconds, default=DEFAULT_TIMEOUT_REQUEST_BODY,
        metavar="SECONDS", help="a request body that gets no byte for this long while skirr "
        "reads it ends: the app receives http.disconnect, the client 408 if no response began; "
        "0 = none (default: %(default)g)")
    add("--timeout-write", type=_positive_seconds, default=DEFAULT_TIMEOUT_WRITE,
        metavar="SECONDS", help="close a connection whose peer accepts no response bytes for "
        "this long; a waiting send() raises ClientDisconnected (default: %(default)g)")
    add("--write-batch-delay", type=_seconds, default=DEFAULT_WRITE_BATCH_DELAY,
        metavar="SECONDS", help="a complete keep-alive response may wait about this long to "
        "leave with the other connections' responses of the same loop iteration (one wake-up "
        "of a client for them all); checked when a response is queued or an app step ends, and "
        "never past one loop iteration; 0 = no batching (default: %(default)g)")
    add("--backlog", type=_int_at_least(1, MAX_BACKLOG), default=2048, metavar="N",
        help=f"listen() backlog, 1..{MAX_BACKLOG}; the kernel may cap it lower "
        "(net.core.somaxconn) (default: %(default)s)")
    add("--limit-request-body", type=_int_at_least(0), default=DEFAULT_LIMIT_REQUEST_BODY,
        metavar="BYTES", help="answer 413 to a request body larger than this; 0 = unlimited "
        "(default: %(default)s)")
    add("--limit-concurrency", type=_int_at_least(0), default=None, metavar="N",
        help="answer 503 (connection: close) to a request while N are in flight; 0 = unlimited "
        "(default: unlimited)")
    add("--limit-connections", type=_int_at_least(0), default=None, metavar="N",
        help="stop accepting while N connections are open (new ones wait in the backlog); "
        "0 = unlimited (default: the soft RLIMIT_NOFILE minus max(64, 1/8 of it))")
    add("--limit-max-requests", type=_int_at_least(0), default=None, metavar="N",
        help="shut down gracefully after N requests; 0 = never (default: never)")
    add("--limit-max-requests-jitter", type=_int_at_least(0), default=0, metavar="N",
        help="add a random 0..N to --limit-max-requests, so workers do not restart together "
        "(default: %(default)s)")
    add("--timeout-graceful-shutdown", type=_seconds,
        default=DEFAULT_TIMEOUT_GRACEFUL_SHUTDOWN, metavar="SECONDS",
        help="on SIGINT/SIGTERM, let in-flight requests run this long before closing their "
        "connections (default: %(default)g)")
    add("--app-dir", default=".", metavar="DIR",
        help="put DIR first on sys.path to import APP (default: current directory)")
    bool_flag = argparse.BooleanOptionalAction
    add("--access-log", action=bool_flag, default=True,
        help="log one line per response and per refusal on skirr.access (default: on)")
    add("--access-log-format", default=None, metavar="FORMAT",
        help="'json', or a gunicorn format such as '%%(h)s \"%%(r)s\" %%(s)s %%(b)s %%(D)s' "
        "(atoms h l u t r m U q H s B b f a T D M L p, %%({header}i)s, %%({header}o)s, "
        "%%({var}e)s) (default: uvicorn's line)")
    add("--proxy-headers", action=bool_flag, default=True,
        help="take the client address and scheme from the proxy headers of "
        "--proxy-headers-mode sent by a trusted peer (see --forwarded-allow-ips) (default: on)")
    add("--proxy-headers-mode", choices=PROXY_HEADERS_MODES, default="x-forwarded",
        help="the header family your proxy sets, the only one read: X-Forwarded-For / "
        "X-Forwarded-Proto ('x-forwarded') or RFC 7239 Forwarded ('forwarded'); make the proxy "
        "overwrite or clear the other (default: x-forwarded)")
    add("--forwarded-allow-ips", default=None, metavar="LIST",
        help="trusted peers for --proxy-headers: comma-separated IPs, CIDR networks, '*', "
        "'unix:' for Unix-socket peers (default: $FORWARDED_ALLOW_IPS or 127.0.0.1)")
    add("--server-header", action=bool_flag, default=True,
        help="send 'server: skirr' when the app sends no server field (default: on)")
    add("--date-header", action=bool_flag, default=True,
        help="send 'date' when the app sends none (default: on)")
    add("--header", action="append", default=[], metavar="NAME:VALUE", dest="headers",
        help="add this field to every response (repeatable); 'server:...' replaces skirr's; "
        "the fields skirr writes itself (content-length, transfer-encoding, connection, "
        "keep-alive, upgrade, te, trailer, proxy-connection, date) are refused")
    add("--log-config", default=None, metavar="PATH",
        help="logging configuration: dictConfig .json/.yaml/.yml or fileConfig INI file, applied "
        "before the app is imported")
    add("--use-colors", action=bool_flag, default=None,
        help="colour the level names (default: when stderr is a terminal)")
    add("--request-id", action=bool_flag, default=False,
        help="keep a valid incoming X-Request-ID or make one; the app sees it in the request "
        "headers, the response carries it (default: off)")
    add("--metrics-port", type=_port, default=None, metavar="N",
        help="serve Prometheus metrics on this TCP port of --host (its own listener; needs "
        "prometheus-client; with --workers, all workers together) (default: off)")
    add("--ssl-keyfile", default=None, metavar="PATH",
        help="TLS: the PEM private key of --ssl-certfile (default: in --ssl-certfile)")
    add("--ssl-certfile", default=None, metavar="PATH",
        help="serve HTTPS and WSS with this PEM certificate chain, leaf first (default: none, "
        "cleartext); SIGHUP reloads the --ssl-* files")
    add("--ssl-keyfile-password", default=None, metavar="PASSWORD",
        help="the password of an encrypted --ssl-keyfile")
    add("--ssl-version", type=int, default=DEFAULT_SSL_VERSION, metavar="N",
        help="an ssl.PROTOCOL_* number: 17 (PROTOCOL_TLS_SERVER) or 2 (PROTOCOL_TLS) negotiate "
        "TLS 1.2 or 1.3, 5 (PROTOCOL_TLSv1_2) TLS 1.2 alone (default: %(default)s)")
    add("--ssl-min-version", choices=SSL_MIN_VERSIONS, default="TLSv1.2",
        help="the lowest TLS version accepted (default: %(default)s)")
    add("--ssl-cert-reqs", type=int, default=0, metavar="N",
        help="client certificates, an ssl.CERT_* number: 0 none, 1 optional (a failed "
        "verification is let through and reported to the app), 2 required (default: "
        "%(default)s)")
    add("--ssl-ca-certs", default=None, metavar="PATH",
        help="the PEM CA file client certificates are verified against")
    add("--ssl-ciphers", default=DEFAULT_SSL_CIPHERS, metavar="LIST",
        help="TLS 1.2 cipher list, OpenSSL syntax; 'TLSv1' = skirr's forward-secret AEAD suites "
        "(default: %(default)s)")
    add("--ssl-crl", default=None, metavar="PATH",
        help="a PEM certificate revocation list checked for client certificates (needs "
        "--ssl-ca-certs)")
    add("--ssl-sni", action="append", default=[], metavar="CERTFILE:KEYFILE", dest="ssl_sni",
        help="an extra certificate served to clients asking (SNI) for one of its "
        "subjectAltName DNS names (repeatable; other names get --ssl-certfile's)")
    add("--env-file", default=None, metavar="PATH",
        help="load environment variables from this dotenv file first (python-dotenv; variables "
        "already set win), so it may also hold SKIRR_<OPTION> settings")
    add("--version", action="version",
        version=f"skirr {__version__} ({platform.python_implementation()} "
        f"{platform.python_version()}, {platform.system()})")
    return parser


def env_name(action: argparse.Action) -> str:
    """The environment variable of an option: SKIRR_ + its long name in upper case."""
    longs = [o for o in action.option_strings if o.startswith("--") and not o.startswith("--no-")]
    name = longs[0][2:] if longs else action.dest
    return ENV_PREFIX + name.replace("-", "_").upper()


def apply_env(
    parser: argparse.ArgumentParser, environ: os._Environ[str] | dict[str, str]
) -> dict[str, str]:
    """Makes each SKIRR_<OPTION> in environ the default of its option (the command line still
    wins). Booleans take 1/true/yes/on or 0/false/no/off; SKIRR_HEADER holds one NAME:VALUE per
    line; SKIRR_APP is the APP argument. Returns {option dest: variable} of the options set.

    Raises:
        ValueError: a value the option would refuse (the message names the variable).
    """
    used = {}
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            continue
        var = env_name(action)
        text = environ.get(var)
        if text is None:
            continue
        used[action.dest] = var
        if isinstance(action, (argparse.BooleanOptionalAction, argparse._StoreTrueAction)):
            low = text.strip().lower()
            if low not in _TRUE + _FALSE:
                raise ValueError(f"{var}: expected one of {'/'.join(_TRUE + _FALSE)}, got {text!r}")
            action.default = low in _TRUE
        elif isinstance(action, argparse._AppendAction):
            action.default = [line for line in text.splitlines() if line.strip()]
        else:
            value: object = text
            if action.type is not None:
                try:
                    value = action.type(text)  # type: ignore[operator]
                except (argparse.ArgumentTypeError, ValueError) as exc:
                    raise ValueError(f"{var}: {exc}") from None
            if action.choices is not None and value not in action.choices:
                raise ValueError(f"{var}: invalid choice {text!r} (choose from "
                                 f"{', '.join(map(str, action.choices))})")
            action.default = value
            if not action.option_strings:  # the APP positional
                action.nargs = "?"
                action.required = False
    return used


def from_env(
    parser: argparse.ArgumentParser, args: argparse.Namespace, used: dict[str, str]
) -> dict[str, str]:
    """{dest: variable} of the options whose value in ``args`` is the one a SKIRR_<OPTION>
    variable gave (the command line did not replace it: argparse keeps the default object).

    A repeatable option given on the command line replaces its variable's lines too (argparse
    appends to the default; those lines are taken off ``args`` here): the command line wins."""
    actions = {a.dest: a for a in parser._actions}
    env = {}
    for dest, var in used.items():
        action = actions.get(dest)
        if action is None:
            continue
        value = getattr(args, dest, None)
        if value is action.default:
            env[dest] = var
        elif isinstance(action, argparse._AppendAction) and isinstance(action.default, list):
            setattr(args, dest, value[len(action.default):])
    return env


# Config fields checked one by one when their value came from the environment (see main).
_CONFIG_FIELDS = frozenset(f.name for f in dataclasses.fields(Config)) - {"env_file"}
_PROBE_APP = "module:app"  # a well-formed APP for those checks (nothing is imported)
# the fields a field is only valid with, or whose check depends on them (headers: the HTTP/2
# size check counts the date and server fields, and none is made with --http 1)
_PROBE_WITH = {"uds_perms": ("uds",), "headers": ("http", "date_header", "server_header")}


def check_env_values(args: argparse.Namespace, env: dict[str, str]) -> None:
    """Applies Config's own checks to each value that came from a SKIRR_<OPTION> variable, alone,
    so that a refused one is reported with its variable's name.

    Raises:
        ValueError: ``"SKIRR_<OPTION>: <what Config says>"``.
    """
    for dest, var in env.items():
        if dest not in _CONFIG_FIELDS:
            continue
        values = {"app": _PROBE_APP, dest: getattr(args, dest)}
        for other in _PROBE_WITH.get(dest, ()):
            values[other] = getattr(args, other)
        try:
            Config(**values)
        except ConfigError as exc:
            raise ValueError(f"{var}: {exc}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI; returns the process exit status (0 after a clean shutdown)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # --env-file (or SKIRR_ENV_FILE) first: the file may set SKIRR_<OPTION> variables too.
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--env-file")
    known, _ = pre.parse_known_args(argv)
    env_file_var = ENV_PREFIX + "ENV_FILE"
    env_file = known.env_file or os.environ.get(env_file_var)
    parser = build_parser()
    try:
        if env_file:
            try:
                load_env_file(env_file)
            except ConfigError as exc:
                if known.env_file:
                    raise
                raise ValueError(f"{env_file_var}: {exc}") from None
        used = apply_env(parser, os.environ)
    except (ConfigError, ValueError) as exc:
        print(f"skirr: error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if args.app is None:
        parser.error("the following arguments are required: APP")
    env = from_env(parser, args, used)

    def flag(dest: str, name: str = "") -> str:
        """How the user set option ``dest``: its SKIRR_ variable, else ``--name``."""
        return env.get(dest) or "--" + (name or dest).replace("_", "-")

    address = (args.host is not None) or (args.port is not None)
    where = f"{flag('host')} or {flag('port')}"
    if args.uds is not None and args.fd is not None:
        parser.error(f"{flag('uds')} and {flag('fd')} cannot be used together")
    for dest in ("uds", "fd"):
        if getattr(args, dest) is not None and address:
            parser.error(f"{flag(dest)} cannot be used together with {where}")
    if args.uds_perms is not None and args.uds is None:
        parser.error(f"{flag('uds_perms')} needs {flag('uds')}")
    if args.worker_kind == "thread":
        # Before the per-variable checks: the flag's own words, whichever way it was set.
        if thread_workers_refused():
            parser.error(f"{flag('worker_kind')} thread {THREADS_NEED_NO_GIL}")
        if args.reload:
            parser.error(f"{flag('worker_kind')} thread cannot be used with {flag('reload')}")
    try:
        check_env_values(args, env)
    except ValueError as exc:
        parser.error(str(exc))
    if args.fd is None and args.uds is None and not address:
        args.fd = _systemd_fd()
    if args.fd is not None:
        try:
            os.fstat(args.fd)
        except OSError as exc:  # not open: a usage error, found before anything binds
            parser.error(f"{flag('fd')} {args.fd}: {exc.strerror or exc}")
    if not args.reload:
        for dest in ("reload_dirs", "reload_includes", "reload_excludes"):
            if getattr(args, dest):
                parser.error(f"{flag(dest, dest[:-1])} needs --reload")
    includes, excludes = _reload_patterns(args.reload_includes, args.reload_excludes)
    try:
        config = Config(
            app=args.app,
            host="127.0.0.1" if args.host is None else args.host,
            port=8000 if args.port is None else args.port,
            uds=args.uds,
            fd=args.fd,
            uds_perms=args.uds_perms,
            workers=_web_concurrency() if args.workers is None else args.workers,
            reuse_port=args.reuse_port,
            worker_kind=args.worker_kind,
            timeout_worker_healthcheck=args.timeout_worker_healthcheck,
            reload=args.reload,
            reload_dirs=args.reload_dirs,
            reload_includes=includes,
            reload_excludes=excludes,
            health_check_path=args.health_check_path,
            drain_delay=args.drain_delay,
            write_batch_delay=args.write_batch_delay,
            loop=args.loop,
            lifespan=args.lifespan,
            root_path=args.root_path,
            factory=args.factory,
            log_level=args.log_level,
            timeout_keep_alive=args.timeout_keep_alive,
            timeout_request_head=args.timeout_request_head,
            timeout_write=args.timeout_write,
            timeout_request_body=args.timeout_request_body,
            backlog=args.backlog,
            limit_request_body=args.limit_request_body,
            limit_concurrency=args.limit_concurrency,
            limit_connections=args.limit_connections,
            limit_max_requests=args.limit_max_requests,
            limit_max_requests_jitter=args.limit_max_requests_jitter,
            timeout_graceful_shutdown=args.timeout_graceful_shutdown,
            app_dir=args.app_dir,
            access_log=args.access_log,
            access_log_format=args.access_log_format,
            proxy_headers=args.proxy_headers,
            proxy_headers_mode=args.proxy_headers_mode,
            forwarded_allow_ips=args.forwarded_allow_ips,
            server_header=args.server_header,
            date_header=args.date_header,
            headers=args.headers,
            log_config=args.log_config,
            use_colors=args.use_colors,
            request_id=args.request_id,
            metrics_port=args.metrics_port,
            ws=args.ws,
            ws_max_size=args.ws_max_size,
            ws_max_queue=args.ws_max_queue,
            ws_ping_interval=args.ws_ping_interval,
            ws_ping_timeout=args.ws_ping_timeout,
            ws_per_message_deflate=args.ws_per_message_deflate,
            http=args.http,
            http2_max_concurrent_streams=args.http2_max_concurrent_streams,
            http2_max_headers_size=args.http2_max_headers_size,
            http2_initial_stream_window_size=args.http2_initial_stream_window_size,
            http2_initial_connection_window_size=args.http2_initial_connection_window_size,
            http2_max_frame_size=args.http2_max_frame_size,
            ssl_keyfile=args.ssl_keyfile,
            ssl_certfile=args.ssl_certfile,
            ssl_keyfile_password=args.ssl_keyfile_password,
            ssl_version=args.ssl_version,
            ssl_min_version=args.ssl_min_version,
            ssl_cert_reqs=args.ssl_cert_reqs,
            ssl_ca_certs=args.ssl_ca_certs,
            ssl_ciphers=args.ssl_ciphers,
            ssl_crl=args.ssl_crl,
            ssl_sni=args.ssl_sni,
        )
    except ConfigError as exc:
        print(f"skirr: error: {exc}", file=sys.stderr)
        return 2
    from .server import Server  # imports the extension

    try:
        if config.supervised:
            from .supervisor import Supervisor

            return Supervisor(config).run()
        server = Server(config)
        server._late_exit = True  # the process exits once run() returns
        return server.run()
    except LogConfigError as exc:  # a usage error, found before anything is bound
        print(f"skirr: error: {exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        report_error(exc)
        return 1
    except KeyboardInterrupt:
        return 1


def _reload_patterns(includes: list[str], excludes: list[str]) -> tuple[list[str], list[str]]:
    """uvicorn's rule: the defaults plus the given patterns; a pattern given to one list is
    taken out of the other's defaults."""
    inc = [p for p in DEFAULT_RELOAD_INCLUDES if p not in excludes] + includes
    exc = [p for p in DEFAULT_RELOAD_EXCLUDES if p not in includes] + excludes
    return inc, exc


if __name__ == "__main__":
    sys.exit(main())
