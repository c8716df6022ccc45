"""The ``TRACE`` log level (below DEBUG, as uvicorn names it), registered with ``logging``.

Imports nothing of skirr, so every module that logs at it (``config``, ``server``,
``skirr.logging``) imports it from here. The formatters are ``skirr.logging``'s.
"""
from __future__ import annotations

import logging

TRACE = 5  # the "trace" log level, below DEBUG (as uvicorn names it)
logging.addLevelName(TRACE, "TRACE")
