"""``--request-id``: every HTTP request and WebSocket handshake carries an ``X-Request-ID``
(issues 13, 36).

Owns: keeping a valid incoming ``X-Request-ID`` or making one (32 lower-case hex digits, uuid4),
putting it in the request headers the application sees (scope ``headers``, replacing an invalid
one) and in the response (unless the application set its own): an ``http.response.start``, and
for a WebSocket handshake (an HTTP request too) the ``websocket.accept`` (the 101) or a denial's
``websocket.http.response.start``. skirr's own answers to a request the app did not answer (a 500
for an app that failed first, the 403 of a ``websocket.close`` before accept) carry none. The
access log shows it through ``%({x-request-id}i)s`` and the JSON ``request_id``. Never: touches
``traceparent`` or any other header, or the lifespan scope. Only wraps the application when the
option is on.

Valid: 1..200 bytes of letters, digits and ``-_.:+/=@`` (enough for UUIDs, ULIDs, base64 and
the ids proxies generate; nothing that could break a log line or a header).
"""
from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

HEADER = b"x-request-id"
_VALID = re.compile(rb"[A-Za-z0-9\-_.:+/=@]{1,200}").fullmatch

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
                   Awaitable[None]]


# The messages that begin what the client receives as the response head, each with "headers".
_RESPONSE_HEADS = frozenset(("http.response.start", "websocket.accept",
                             "websocket.http.response.start"))


class RequestIdMiddleware:
    """ASGI 3 middleware around ``app`` (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        rid = None
        headers = []
        for name, value in scope["headers"]:
            if name == HEADER:
                if rid is None and _VALID(value):
                    rid = value
                    headers.append((name, value))
                continue  # an invalid or repeated one is dropped
            headers.append((name, value))
        if rid is None:
            rid = uuid.uuid4().hex.encode()
            headers.append((HEADER, rid))
        scope["headers"] = headers

        async def send_with_id(message: Message) -> None:
            if message["type"] in _RESPONSE_HEADS:
                out = list(message.get("headers", ()))
                if not any(bytes(n).lower() == HEADER for n, _ in out):
                    out.append((HEADER, rid))
                    message = dict(message, headers=out)
            await send(message)

        await self.app(scope, receive, send_with_id)
