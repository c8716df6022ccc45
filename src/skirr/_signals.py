"""A signal handler for the moments before the code that acts on a signal exists.

Owns: `SignalRelay`, installed first by the processes that start serving only after an import
(a worker of skirr's supervisor: ``skirr._worker``; gunicorn's: ``skirr.workers``), so a shutdown
signal sent meanwhile is neither the default death nor lost. Never: decides what a signal means
(its target does).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any


class SignalRelay:
    """A ``signal.signal`` handler: until :meth:`to` names a target, each signal number it gets is
    noted; then the noted ones go to the target, and each later one at once (one arriving while
    the noted ones are handed over may go before them: the targets count, they do not order).
    Runs in the main thread (as every Python signal handler), and :meth:`to` must be called
    there too, so the list needs no lock."""

    def __init__(self) -> None:
        self._noted: list[int] = []
        self._target: Callable[[int], None] | None = None

    def __call__(self, signum: int, frame: Any) -> None:
        if self._target is None:
            self._noted.append(signum)
        else:
            self._target(signum)

    def to(self, target: Callable[[int], None]) -> None:
        """From now on ``target(signum)`` acts on each signal, the noted ones too (a signal
        arriving meanwhile goes to ``target`` directly: none is lost, none handled twice). Main
        thread only."""
        self._target = target
        while self._noted:
            target(self._noted.pop(0))
