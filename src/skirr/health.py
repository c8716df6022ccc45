"""``--health-check-path``: a path skirr answers itself, for load balancers and orchestrators.

Owns: the answer to a request of any method (``HEAD`` without a body) for exactly that path: ``200 OK`` while the
server serves, ``503 draining`` once its shutdown has started (during ``--drain-delay`` and the
graceful shutdown). The application is never called for that path; every other request and the
lifespan scope go to it unchanged. Installed only when the option is set, so it costs nothing
otherwise.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class _Drains(Protocol):
    draining: bool


class HealthCheck:
    """An ASGI 3 wrapper answering ``path`` itself.

    Args:
        app: the application (called for every other path and for lifespan).
        path: the exact ``scope["path"]`` answered (``"/healthz"``); the query string is ignored.
        server: anything with a ``draining`` attribute (``skirr.Server``): False -> 200 ``OK``,
            True -> 503 ``draining``.
    """

    def __init__(self, app: Callable[..., Any], path: str, server: _Drains) -> None:
        self.app = app
        self.path = path
        self.server = server

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        status, body = (503, b"draining\n") if self.server.draining else (200, b"OK\n")
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
        ]
        if status == 503:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body",
                    "body": b"" if scope["method"] == "HEAD" else body})
