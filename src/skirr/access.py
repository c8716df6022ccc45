"""The access log: one line per response and per refusal, on the ``skirr.access`` logger.

Owns: turning the records the native server collects (see ``src/ext/sk_access.h``) into log lines,
in batches (a line is written within FLUSH_DELAY = 50 ms of its response, with the others of that
interval; the rest when the server stops), and only when ``skirr.access`` is enabled for INFO (a
disabled logger costs one list append per request and one check per batch). When skirr's own
stderr handler is the only one the records would reach, a batch is one write of the formatted
lines (no LogRecord per line); otherwise each line is a LogRecord (attributes ``client_addr``,
``request_line``, ``status_code``) handled by the user's logging configuration. Formats:

- default (uvicorn's): ``127.0.0.1:50312 - "GET /items?id=3 HTTP/1.1" 200 OK``; a request skirr
  refused itself: ``127.0.0.1:50312 - "-" 431 Request Header Fields Too Large (refused: too many
  header fields)`` (the request line when the head was complete, else ``-``); a WebSocket
  handshake's answer, in uvicorn's words: ``127.0.0.1:50312 - "WebSocket /chat?room=1"
  [accepted]`` (101), or the status alone when the app denied it (``... 403``, a denial
  response's ``... 401``, a 500 for an app that failed first). A malformed handshake is a
  refusal (400, or 426 for another ``Sec-WebSocket-Version``) with the request line.
- a gunicorn ``access_log_format`` (its atoms: ``h l u t r m U q H s B b f a T D M L p``,
  ``%({name}i)s`` request and ``%({name}o)s`` response header, ``%({name}e)s`` environment);
  a refusal gets `` (refused: reason)`` appended.
- ``json``: one JSON object per line (keys below, ``reason`` only for refusals, ``websocket``:
  true only for a WebSocket handshake's answer, whose ``method`` is ``GET`` and ``status`` 101
  when accepted). Gunicorn atoms see a handshake as the GET request it is (``r``, ``m``, ``U``,
  ``q``, ``H``; ``s`` 101 when accepted).

A WebSocket session gets one line, for its handshake's answer (written when it is sent); its end
is not logged, as uvicorn logs none on its access path (skirr: rule skirr-ws-access-log).

Every value a line shows, in every format, is escaped against log injection (CWE-117; rule
skirr-log-escape): ``"`` -> ``\\"``, ``\\`` -> ``\\\\``, the bytes 0x00-0x1F and 0x7F-0xFF ->
``\\xHH``, read from the bytes as received (``_native.log_escape``, ``src/core/sk_logesc.h``). So
what a client sent shows as printable ASCII, one response is one line, and a quoted field ends at
the first unescaped ``"``. The JSON values are the same escaped text (a JSON parser gives back
what the default line shows). gunicorn writes its atoms as they are; skirr escapes every atom.
Only skirr's own text is not escaped: the refusal reasons (static) and the gunicorn format's
literal text (the operator's).

Never: raises into the server (a failing format is reported once through ``logging``'s own
error handling and the line is dropped).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from ._native import log_escape as escape
from ._native import reason_phrases
from skirr.logging import ACCESS_FMT, AccessFormatter

ACCESS_LOGGER = "skirr.access"
JSON_KEYS = ("time", "client", "method", "path", "query", "http_version", "status", "bytes",
             "duration_ms", "referer", "user_agent", "request_id", "reason", "websocket")

FLUSH_DELAY = 0.05  # seconds: an access line waits at most this long to be written with others
BATCH = 64  # records: a full batch is written at once (SK_ACCESS_BATCH in src/ext/sk_access.h)
# The phrases of the status lines skirr writes (one table, in the C core: RFC 9110's, never
# http.HTTPStatus's, whose phrases differ by Python version: 413 "Request Entity Too Large"
# before 3.13). Rule skirr-status-one-phrase.
_PHRASES = reason_phrases()
_STATUS_TEXT = {status: f"{status} {phrase}" for status, phrase in _PHRASES.items()}


def status_text(status: int) -> str:
    """``"200 OK"``: the status and the reason phrase its status line had (the number alone for
    a status the table has no phrase for)."""
    phrase = _PHRASES.get(status)
    return f"{status} {phrase}" if phrase else str(status)


def _addr(client: Any) -> str:
    """``host:port`` (``[v6]:port``), escaped, or ``-`` for none (a Unix socket)."""
    if not client:
        return "-"
    host, port = escape(str(client[0])), escape(str(client[1]))
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}"


def _plain_handler(logger: logging.Logger) -> logging.StreamHandler | None:  # type: ignore[type-arg]
    """skirr's default stdout handler (``skirr.logging.install_default_handlers``) when it is the
    only thing ``logger``'s records reach (no handler or filter of the user's on the way) and its
    lines need no colours, else None."""
    if logger.filters or logger.propagate or len(logger.handlers) != 1:
        return None
    h = logger.handlers[0]
    f = h.formatter
    if (not getattr(h, "skirr_default", False) or h.filters or h.level > logging.INFO
            or type(f) is not AccessFormatter or f._fmt != ACCESS_FMT or f.use_colors
            or not isinstance(h, logging.StreamHandler)):
        return None
    return h


def _default_line(rec: tuple, prefix: str) -> str | None:
    """The stderr line of a response record in the default format; None when it needs the
    general path (a refusal, a WebSocket handshake: its scope has no method, a scope the app
    changed beyond the types skirr puts there, an IPv6 or Unix-socket client). Every value is
    escaped (one C scan each, the str itself when nothing needs it: an app or its middleware may
    have put client text in the scope's method or client)."""
    scope = rec[0]
    if scope is None:
        return None
    try:
        client = scope["client"]
        path = escape(scope["raw_path"])  # bytes: escaped and decoded in one pass
        qs = scope["query_string"]
        method = escape(scope["method"])
        version = scope["http_version"]
        version = "2.0" if version == "2" else escape(version)  # HTTP/2 logs as HTTP/2.0
        status = _STATUS_TEXT[rec[1]]
        host, port = client
        if ":" in host or type(port) is not int:
            return None
        host = escape(host)
    except (KeyError, TypeError, ValueError):
        return None
    if qs:
        path = f"{path}?{escape(qs)}"
    return f'{prefix}{host}:{port} - "{method} {path} HTTP/{version}" {status}\n'


class Entry:
    """One exchange, as the record gives it; everything derived lazily."""

    __slots__ = ("scope", "status", "bytes", "seconds", "resp_headers", "time", "client",
                 "method", "target", "http_version", "reason", "websocket")

    def __init__(self, rec: tuple) -> None:
        if rec[0] is not None:
            self.scope, self.status, self.bytes, self.seconds, self.resp_headers, self.time = rec
            scope = self.scope
            self.client = scope.get("client")
            # a WebSocket handshake's answer: its scope has no method; the request was a GET
            self.websocket = scope.get("type") == "websocket"
            self.method = "GET" if self.websocket else scope.get("method")
            raw = scope.get("raw_path")  # as received (root_path first), like the target
            path = raw.decode("latin-1") if isinstance(raw, bytes) else quote(scope.get("path", ""))
            qs = scope.get("query_string", b"")
            self.target = f"{path}?{qs.decode('latin-1')}" if qs else path
            self.http_version = scope.get("http_version")
            if self.http_version == "2":
                self.http_version = "2.0"  # the protocol as nginx and hypercorn log it
            self.reason = None
        else:
            (_, self.status, self.client, self.method, self.target, self.http_version,
             self.reason, self.bytes, self.time) = rec
            self.scope = None
            self.seconds = None
            self.resp_headers = None
            self.websocket = False

    @property
    def request_line(self) -> str:
        """``METHOD TARGET HTTP/VERSION`` (escaped), or ``-`` when not parsed that far."""
        if self.method is None:
            return "-"
        return escape(f"{self.method} {self.target} HTTP/{self.http_version}")

    @property
    def uvicorn_request_line(self) -> str:
        """What uvicorn's line shows between the quotes: ``WebSocket /path?query`` for a
        WebSocket handshake, else the request line (escaped)."""
        return f"WebSocket {escape(self.target)}" if self.websocket else self.request_line

    def request_header(self, name: str) -> str | None:
        """The first request field ``name`` (escaped), or None."""
        if self.scope is None:
            return None
        key = name.lower().encode("latin-1")
        for k, v in self.scope.get("headers", ()):
            if k == key:
                return escape(v)
        return None

    def response_header(self, name: str) -> str | None:
        """The first response field ``name`` the app sent (escaped), or None."""
        key = name.lower().encode("latin-1")
        for k, v in self.resp_headers or ():
            if bytes(k).lower() == key:
                return escape(v)
        return None


class _Atoms(Mapping[str, str]):
    """gunicorn's access-log atoms for one entry, computed on lookup (``fmt % atoms``); every
    value escaped (gunicorn escapes none)."""

    def __init__(self, e: Entry, now: float) -> None:
        self.e = e
        self.now = now

    def __getitem__(self, key: str) -> str:
        e = self.e
        if key.startswith("{") and len(key) > 3 and key[-2] == "}":
            name, kind = key[1:-2], key[-1]
            if kind == "i":
                value = e.request_header(name)
            elif kind == "o":
                value = e.response_header(name)
            elif kind == "e":
                env = os.environb.get(os.fsencode(name))  # the bytes, not a surrogate escape
                value = None if env is None else escape(env)
            else:
                raise KeyError(key)
            return "-" if value is None else value
        if key == "h":
            return escape(str(e.client[0])) if e.client else "-"
        if key in ("l", "u"):
            return "-"
        if key == "t":
            return time.strftime("[%d/%b/%Y:%H:%M:%S %z]", time.localtime(self.now))
        if key == "r":
            return e.request_line
        if key == "m":
            return escape(e.method) if e.method else "-"
        if key == "U":  # escaping adds no "?": split after it
            return escape(e.target or "-").split("?", 1)[0]
        if key == "q":
            t = escape(e.target or "")
            return t.split("?", 1)[1] if "?" in t else ""
        if key == "H":
            return escape(f"HTTP/{e.http_version}") if e.http_version else "-"
        if key == "s":
            return str(e.status)
        if key == "B":
            return str(e.bytes or 0)
        if key == "b":
            return str(e.bytes) if e.bytes else "-"
        if key == "f":
            return e.request_header("referer") or "-"
        if key == "a":
            return e.request_header("user-agent") or "-"
        if key in ("T", "D", "M", "L"):
            if e.seconds is None:
                return "-"
            s = e.seconds
            return {"T": str(int(s)), "D": str(int(s * 1e6)), "M": str(int(s * 1e3)),
                    "L": f"{s:.6f}"}[key]
        if key == "p":
            return f"<{os.getpid()}>"
        raise KeyError(key)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(())

    def __len__(self) -> int:
        return 0


def check_format(fmt: str | None) -> None:
    """Raises ValueError when ``fmt`` (a gunicorn format; ``None``/``"json"`` are fine) does not
    format a sample entry (a bad ``%`` directive or an unknown atom)."""
    if fmt is None or fmt == "json":
        return
    sample = Entry(({"client": ("127.0.0.1", 1), "method": "GET", "path": "/", "root_path": "",
                     "query_string": b"", "http_version": "1.1", "headers": []},
                    200, 0, 0.0, None, time.time()))
    try:
        fmt % _Atoms(sample, time.time())
    except (KeyError, ValueError, TypeError) as exc:
        raise ValueError(f"invalid access log format {fmt!r}: {exc}") from None


class AccessLog:
    """Receives the native server's records (``pending``, a list it appends to) and logs them
    when ``flush`` runs (scheduled by the server with ``loop.call_soon``).

    Args:
        fmt: ``None`` (uvicorn's line), ``"json"``, or a gunicorn format string.
        logger: where lines go (``skirr.access``).
    """

    def __init__(self, fmt: str | None = None, logger: logging.Logger | None = None) -> None:
        check_format(fmt)
        self.fmt = fmt
        self.logger = logger or logging.getLogger(ACCESS_LOGGER)
        self.pending: list[tuple] = []
        self._timer: asyncio.TimerHandle | None = None

    def flush(self) -> None:
        """Called (through ``loop.call_soon``) when a record arrives in an empty ``pending`` or
        ``pending`` holds a full batch (64, SK_ACCESS_BATCH in sk_access.h): a full batch is
        written now, a partial one FLUSH_DELAY seconds later with what arrives meanwhile, so a
        busy server writes few large batches and holds at most about a batch of records."""
        if len(self.pending) >= BATCH:
            if self._timer is not None:
                self._timer.cancel()
            self.write()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(FLUSH_DELAY, self.write)

    def close(self) -> None:
        """Writes what is pending now (the server stopped); idempotent."""
        if self._timer is not None:
            self._timer.cancel()
        self.write()

    def write(self) -> None:
        """Logs every pending record (the list is emptied in place: the server holds it)."""
        self._timer = None
        pending = self.pending
        if not pending:
            return
        batch = pending[:]
        del pending[:]
        logger = self.logger
        if not logger.isEnabledFor(logging.INFO):
            return
        handler = _plain_handler(logger)
        if handler is not None:
            # skirr's own stderr handler and nothing else would see the records: write the batch
            # as the handler would format it, in one write (no LogRecord per line).
            if self.fmt is None:
                prefix = handler.formatter.level_prefix(logging.INFO, "INFO") + " "  # type: ignore
                fast = _default_line
                text = "".join([fast(rec, prefix) or f"{prefix}{self.line(Entry(rec))}\n"
                                for rec in batch])
            else:
                text = "".join([f"{self.line(Entry(rec))}\n" for rec in batch])
            handler.acquire()
            try:
                stream = handler.stream
                stream.write(text)
                if not getattr(stream, "line_buffering", False):  # else the write flushed
                    stream.flush()
            except Exception:
                handler.handleError(logging.makeLogRecord({"msg": text}))
            finally:
                handler.release()
            return
        name = logger.name
        bare = self.fmt is not None
        for rec in batch:
            e = Entry(rec)
            line = self.line(e)
            record = logger.makeRecord(name, logging.INFO, "skirr.access", 0, line, None, None,
                                       extra={"client_addr": _addr(e.client),
                                              "request_line": e.uvicorn_request_line,
                                              "status_code": e.status,
                                              "skirr_status": self.outcome(e),
                                              "skirr_bare": bare})
            logger.handle(record)

    @staticmethod
    def outcome(e: Entry) -> str:
        """What the default line shows after the request line (an ``AccessFormatter``'s
        ``status_code``): ``200 OK``; ``[accepted]`` or the status alone for a WebSocket
        handshake (uvicorn's words); a refusal's reason appended."""
        if e.websocket:
            return "[accepted]" if e.status == 101 else str(e.status)
        text = status_text(e.status)
        return text if e.reason is None else f"{text} (refused: {e.reason})"

    def line(self, e: Entry) -> str:
        """The log line (without level prefix) for one entry; its time is the entry's own (when
        the response ended or the refusal was sent), never when the batch is written."""
        fmt = self.fmt
        if fmt is None:
            return f'{_addr(e.client)} - "{e.uvicorn_request_line}" {self.outcome(e)}'
        elif fmt == "json":
            return json.dumps(self.json_fields(e), separators=(",", ":"))
        else:
            line = fmt % _Atoms(e, e.time)
        if e.reason is not None:
            line += f" (refused: {e.reason})"
        return line

    @staticmethod
    def json_fields(e: Entry) -> dict[str, Any]:
        """The JSON object's fields; every text value escaped as in the other formats (printable
        ASCII, so ``json.dumps`` adds only its own escapes of ``"`` and ``\\``)."""
        target = escape(e.target or "")
        path, _, query = target.partition("?")
        now = e.time
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z",
            "client": _addr(e.client) if e.client else None,
            "method": None if e.method is None else escape(e.method),
            "path": path if e.method is not None else None,
            "query": query if e.method is not None else None,
            "http_version": None if e.http_version is None else escape(e.http_version),
            "status": e.status,
            "bytes": e.bytes,
            "duration_ms": None if e.seconds is None else round(e.seconds * 1e3, 3),
            "referer": e.request_header("referer"),
            "user_agent": e.request_header("user-agent"),
            "request_id": e.request_header("x-request-id"),
        }
        if e.reason is not None:
            out["reason"] = e.reason
        if e.websocket:
            out["websocket"] = True
        return out
