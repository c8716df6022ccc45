"""The ``skirr`` loggers' level names and line prefix: the ``TRACE`` level and the formatter of
skirr's default stderr handler.

Owns: ``TRACE`` (registered with ``logging`` as "TRACE") and ``_Formatter``, the one class the
handler ``skirr.config.configure_logging`` installs uses and ``skirr.access`` recognises (its
one-write fast path). Imports nothing of skirr, so ``config`` and ``access`` both import it.
"""
from __future__ import annotations

import logging

TRACE = 5  # the "trace" log level, below DEBUG (as uvicorn names it)
logging.addLevelName(TRACE, "TRACE")

# ANSI colours of the level names with --use-colors (uvicorn's choice of colours).
_LEVEL_COLORS = {TRACE: "34", logging.DEBUG: "36", logging.INFO: "32", logging.WARNING: "33",
                 logging.ERROR: "31", logging.CRITICAL: "91"}


class _Formatter(logging.Formatter):
    """``INFO:     message``: the level name and a colon, padded to 10 columns (as uvicorn), the
    name coloured when ``use_colors``."""

    def __init__(self, fmt: str = "%(message)s", use_colors: bool = False) -> None:
        super().__init__(fmt)
        self.use_colors = use_colors

    def level_prefix(self, levelno: int, levelname: str) -> str:
        """``"INFO:     "``: the prefix of a line at this level (10 columns before colouring)."""
        pad = " " * max(1, 10 - len(levelname) - 1)
        name = levelname
        color = _LEVEL_COLORS.get(levelno)
        if self.use_colors and color:
            name = f"\x1b[{color}m{levelname}\x1b[0m"
        return f"{name}:{pad}"

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        if getattr(record, "skirr_bare", False):
            return message  # an access line in a custom or JSON format: the whole line
        return self.level_prefix(record.levelno, record.levelname) + message
