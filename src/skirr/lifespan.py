"""ASGI lifespan protocol 2.0: startup and shutdown events, and the lifespan ``state``.

Owns: running the application's lifespan task, the ``auto|on|off`` semantics (as uvicorn's) and the
``state`` dict that each HTTP request scope receives a shallow copy of. Never: touches sockets.

auto: an application that raises, or returns, before sending any lifespan message does not support
      lifespan: logged at info, the server runs without it.
on:   the same is a startup failure.
off:  the application is never called with a lifespan scope.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("skirr.error")

_STARTUP = "startup"
_SHUTDOWN = "shutdown"


class Lifespan:
    """One application's lifespan task.

    Args:
        app: the ASGI 3 application.
        mode: ``"auto"``, ``"on"`` or ``"off"``.

    Attributes:
        state: the lifespan state dict (empty until the application fills it during startup).
        failed: startup or shutdown failed (the server's exit status becomes 1).
    """

    def __init__(self, app: Callable[..., Any], mode: str) -> None:
        self.app = app
        self.mode = mode
        self.state: dict[str, Any] = {}
        self.failed = False
        self._supported = mode != "off"
        self._task: asyncio.Task[None] | None = None
        self._receive_queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._phase: str | None = None  # the phase awaiting the app's answer
        self._answered = asyncio.Event()
        self._sent_any = False
        self._cancelling = False  # cancel() ran: the forced exit, nothing more is answered
        self._done_phases: set[str] = set()
        self._failure_told = False  # a lifespan.*.failed message with text was logged

    async def startup(self) -> bool:
        """Sends ``lifespan.startup`` and waits for the answer.

        Returns:
            True to go on serving (complete, or unsupported under ``auto``, or ``off``); False when
            startup failed (``lifespan.startup.failed``, an exception, or unsupported under ``on``).
        """
        if not self._supported:
            return True
        logger.info("Waiting for application startup.")
        scope = {
            "type": "lifespan",
            "asgi": {"version": "3.0", "spec_version": "2.0"},
            "state": self.state,
        }
        self._phase = _STARTUP
        self._answered.clear()
        await self._receive_queue.put({"type": "lifespan.startup"})
        self._task = asyncio.get_running_loop().create_task(self._main(scope))
        await self._answered.wait()
        if self.failed:
            logger.error("Application startup failed. Exiting.")
            return False
        if self._supported:
            logger.info("Application startup complete.")
        return True

    async def shutdown(self) -> None:
        """Sends ``lifespan.shutdown`` and waits for the answer (no-op when lifespan is not in
        use). A failure is logged and sets ``failed``."""
        if not self._supported or self._task is None:
            return
        if self._task.done():
            if self.failed:  # it failed after startup (logged then): say why the status is 1
                logger.error("Application shutdown skipped: the 'lifespan' task failed after "
                             "startup (exit status 1)")
            return
        logger.info("Waiting for application shutdown.")
        self._phase = _SHUTDOWN
        self._answered.clear()
        await self._receive_queue.put({"type": "lifespan.shutdown"})
        await self._answered.wait()
        if _SHUTDOWN in self._done_phases and not self.failed:
            logger.info("Application shutdown complete.")
        # Let the task return after its last message (bounded: it is the app's code).
        await asyncio.wait({self._task}, timeout=1.0)

    @property
    def running(self) -> bool:
        """The application's lifespan task has not ended yet."""
        return self._task is not None and not self._task.done()

    def cancel(self) -> None:
        """Cancels the lifespan task (forced exit). Quietly: what the application does while it
        is cancelled (Starlette answers with ``lifespan.shutdown.failed`` and re-raises) is
        neither an error nor logged; the forced exit has its own one warning."""
        if self._task is not None and not self._task.done():
            self._cancelling = True
            self._task.cancel()

    async def _main(self, scope: dict[str, Any]) -> None:
        try:
            await self.app(scope, self._receive, self._send)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                task = asyncio.current_task()
                if self._cancelling or task is None or task.cancelling():
                    raise  # this task was cancelled (a forced exit, the loop's teardown)
                # else the app raised CancelledError itself: its failure, like any exception
            if self._cancelling:
                return  # a forced exit: whatever the cancelled app raised is not its failure
            if self._failure_told and isinstance(exc, Exception):
                # It answered lifespan.*.failed with its message (Starlette's is the traceback)
                # and then raised what it reported: one traceback, not two (as uvicorn).
                return
            if not self._sent_any and self._phase == _STARTUP and self.mode == "auto":
                logger.info("ASGI 'lifespan' protocol appears unsupported.")
                self._supported = False
            elif isinstance(exc, Exception):
                logger.error("Exception in 'lifespan' protocol", exc_info=exc)
                self.failed = True
            else:
                # SystemExit, KeyboardInterrupt, ...: the app's, not the server's: one line, and
                # the run ends through the normal failed path (exit 1), never the app's code.
                when = (f"after {self._phase} completed" if self._phase in self._done_phases
                        else f"during {self._phase}")
                logger.error("the application raised %r in the 'lifespan' protocol %s", exc, when)
                self.failed = True
        else:
            if self._phase not in self._done_phases:
                if not self._sent_any and self._phase == _STARTUP:
                    # Returned without a word: no lifespan support.
                    if self.mode == "auto":
                        logger.info("ASGI 'lifespan' protocol appears unsupported.")
                    else:
                        logger.error(
                            "the application returned from the 'lifespan' scope without "
                            "sending 'lifespan.startup.complete' (--lifespan on requires it)"
                        )
                        self.failed = True
                    self._supported = False
                else:
                    logger.warning(
                        "the application returned from the 'lifespan' scope without "
                        "answering lifespan.%s",
                        self._phase,
                    )
        finally:
            self._answered.set()

    async def _receive(self) -> dict[str, Any]:
        return await self._receive_queue.get()

    async def _send(self, message: dict[str, Any]) -> None:
        kind = message.get("type") if isinstance(message, dict) else None
        expected = {
            _STARTUP: ("lifespan.startup.complete", "lifespan.startup.failed"),
            _SHUTDOWN: ("lifespan.shutdown.complete", "lifespan.shutdown.failed"),
        }
        if self._cancelling:
            return  # the forced exit cancelled the task: no event waits for an answer
        if self._phase is None or self._phase in self._done_phases:
            raise RuntimeError(f"unexpected ASGI lifespan message {kind!r}: no event to answer")
        if kind not in expected[self._phase]:
            raise RuntimeError(
                f"unexpected ASGI lifespan message {kind!r} during {self._phase}; expected "
                f"{' or '.join(repr(k) for k in expected[self._phase])}"
            )
        self._sent_any = True
        self._done_phases.add(self._phase)
        if kind.endswith(".failed"):
            self.failed = True
            text = message.get("message", "")
            if text:
                logger.error("%s", text)
                self._failure_told = True
            if self._phase == _SHUTDOWN:
                logger.error("Application shutdown failed.")
        self._answered.set()
