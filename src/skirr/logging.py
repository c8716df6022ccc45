"""uvicorn's logging configuration with the word ``uvicorn`` replaced by ``skirr``.

Owns: the two formatters a uvicorn ``--log-config`` names (``skirr.logging.DefaultFormatter``,
``skirr.logging.AccessFormatter``: uvicorn's record fields ``levelprefix``, ``client_addr``,
``request_line``, ``status_code`` and its ``use_colors``), ``LOGGING_CONFIG`` (uvicorn's default
configuration, word for word with ``skirr``), the default handlers skirr installs when the
``skirr`` logger has none (:func:`install_default_handlers`: access lines on stdout, the rest on
stderr, as uvicorn), and :func:`describe_config_error` (why ``logging.config`` rejected a
configuration).

Never: configures logging behind the user's back (an embedding program's or ``--log-config``'s
handlers are left alone), or imports a skirr module above it (``config`` and ``access`` import
it; it takes only ``TRACE`` from ``_logformat`` and the reason phrases from the extension).

This module is ``skirr.logging``; every import here is absolute, so ``import logging`` is the
standard library's.
"""
from __future__ import annotations

import logging
import sys
from copy import copy
from typing import Any, Literal, TextIO

from skirr._logformat import TRACE as _TRACE
from skirr._native import reason_phrases

# ANSI SGR codes, uvicorn's choices: the level names, the status classes, the bold request line.
_LEVEL_COLORS = {_TRACE: "34", logging.DEBUG: "36", logging.INFO: "32", logging.WARNING: "33",
                 logging.ERROR: "31", logging.CRITICAL: "91"}
_STATUS_COLORS = {1: "97", 2: "32", 3: "33", 4: "31", 5: "91"}
_PHRASES = reason_phrases()  # the C core's one table (RFC 9110's phrases), as access.py

DEFAULT_FMT = "%(levelprefix)s %(message)s"
ACCESS_FMT = '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s'

# uvicorn's LOGGING_CONFIG (uvicorn/config.py) with the word replaced: what skirr does by default.
LOGGING_CONFIG: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "default": {"()": "skirr.logging.DefaultFormatter", "fmt": DEFAULT_FMT, "use_colors": None},
        "access": {"()": "skirr.logging.AccessFormatter", "fmt": ACCESS_FMT},
    },
    "handlers": {
        "default": {"formatter": "default", "class": "logging.StreamHandler",
                    "stream": "ext://sys.stderr"},
        "access": {"formatter": "access", "class": "logging.StreamHandler",
                   "stream": "ext://sys.stdout"},
    },
    "loggers": {
        "skirr": {"handlers": ["default"], "level": "INFO", "propagate": False},
        "skirr.error": {"level": "INFO"},
        "skirr.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
    },
}


def _sgr(text: str, code: str) -> str:
    return f"\x1b[{code}m{text}\x1b[0m"


class DefaultFormatter(logging.Formatter):
    """uvicorn's ``DefaultFormatter``: ``%(levelprefix)s`` is the level name, a colon and padding
    to 9 columns (``"INFO:    "``), the name coloured when ``use_colors``; a record's
    ``color_message`` replaces its message when colouring. A record marked ``skirr_bare`` (an
    access line in a custom or JSON ``--access-log-format``) is its message alone.

    fmt, datefmt, style: as ``logging.Formatter``'s (no fmt: ``%(message)s``, as uvicorn's).
    use_colors: True/False, or None for "when the stream is a terminal" (stderr here, stdout for
    :class:`AccessFormatter`: the streams uvicorn's handlers write to).
    """

    _stream_name = "stderr"

    def __init__(self, fmt: str | None = None, datefmt: str | None = None,
                 style: Literal["%", "{", "$"] = "%", use_colors: bool | None = None) -> None:
        if use_colors in (True, False):
            self.use_colors = bool(use_colors)
        else:
            stream: TextIO | None = getattr(sys, self._stream_name, None)
            self.use_colors = bool(stream is not None and stream.isatty())
        super().__init__(fmt=fmt, datefmt=datefmt, style=style)

    def level_prefix(self, levelno: int, levelname: str) -> str:
        """``"INFO:    "``: uvicorn's ``levelprefix`` for this level (9 columns uncoloured)."""
        pad = " " * (8 - len(levelname))
        color = _LEVEL_COLORS.get(levelno)
        if self.use_colors and color:
            levelname = _sgr(levelname, color)
        return f"{levelname}:{pad}"

    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, "skirr_bare", False):
            return record.getMessage()  # a custom or JSON access line: the whole line
        return super().format(record)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        rec = copy(record)
        if self.use_colors and "color_message" in rec.__dict__:
            rec.msg = rec.__dict__["color_message"]
            rec.message = rec.getMessage()
        rec.levelprefix = self.level_prefix(rec.levelno, rec.levelname)
        self._fill(rec)
        return super().formatMessage(rec)

    def _fill(self, rec: logging.LogRecord) -> None:
        """Adds the fields a subclass's format uses (none here)."""


class AccessFormatter(DefaultFormatter):
    """uvicorn's ``AccessFormatter`` for skirr's ``skirr.access`` records: ``client_addr``
    (``host:port``), ``request_line`` (``GET /path?q HTTP/1.1``, ``WebSocket /path`` for a
    handshake) and ``status_code`` as the line shows it (``200 OK``; ``[accepted]`` or the status
    alone for a WebSocket handshake; a refusal's reason after it), the status coloured by class
    and the request line bold when ``use_colors``. The record's own ``status_code`` stays the
    number. A record without these fields (not an access record) gets ``-`` for each."""

    _stream_name = "stdout"

    def _fill(self, rec: logging.LogRecord) -> None:
        d = rec.__dict__
        status = d.get("status_code")
        shown = d.get("skirr_status")
        if shown is None:
            if isinstance(status, int):
                phrase = _PHRASES.get(status)
                shown = f"{status} {phrase}" if phrase else str(status)
            else:
                shown = "-" if status is None else str(status)
        request_line = d.get("request_line", "-")
        if self.use_colors:
            if isinstance(status, int) and status // 100 in _STATUS_COLORS:
                shown = _sgr(shown, _STATUS_COLORS[status // 100])
            request_line = _sgr(request_line, "1")
        d["client_addr"] = d.get("client_addr", "-")
        d["request_line"] = request_line
        d["status_code"] = shown


def install_default_handlers(use_colors: bool | None = None) -> None:
    """What ``LOGGING_CONFIG`` sets up, added only where nothing is configured: a stderr handler
    (``DefaultFormatter``) on ``skirr`` when it has no handler, and a stdout handler
    (``AccessFormatter``) on ``skirr.access`` when it has none and propagates, each logger then
    not propagating. A handler skirr adds is marked ``skirr_default`` (``skirr.access``'s
    one-write path recognises it). use_colors: as the formatters' (None: per stream, a
    terminal)."""
    root = logging.getLogger("skirr")
    if root.handlers:
        return  # the embedding program's or the configuration's: theirs to route
    err = logging.StreamHandler(sys.stderr)
    err.setFormatter(DefaultFormatter(DEFAULT_FMT, use_colors=use_colors))
    err.skirr_default = True  # type: ignore[attr-defined]
    root.addHandler(err)
    root.propagate = False
    access = logging.getLogger("skirr.access")
    if not access.handlers and access.propagate:
        out = logging.StreamHandler(sys.stdout)
        out.setFormatter(AccessFormatter(ACCESS_FMT, use_colors=use_colors))
        out.skirr_default = True  # type: ignore[attr-defined]
        access.addHandler(out)
        access.propagate = False


def describe_config_error(exc: BaseException) -> str:
    """``logging.config``'s message with its causes: ``Unable to configure formatter 'default':
    No module named 'uvicorn'`` (``dictConfig`` raises ``ValueError`` from the real failure)."""
    parts: list[str] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen and len(parts) < 8:
        seen.add(id(cur))
        text = cur.strerror if isinstance(cur, OSError) and cur.strerror else str(cur)
        if not parts or not text or text not in parts[-1]:  # else the message repeats its cause
            parts.append(text or type(cur).__name__)
        cur = cur.__cause__ or (None if cur.__suppress_context__ else cur.__context__)
    return ": ".join(parts)
