"""skirr._native: the C extension (reactor + ASGI glue). Type stub and API contract."""
import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

class ClientDisconnected(OSError):
    """Raised by ``send`` when the client has gone away.

    ASGI www 2.5 "Disconnected Client - send exception". Server-generated instances are not
    logged as application failures.
    """

class Server:
    """A native HTTP/1.1 reactor serving one ASGI 3 application on one listening socket.

    The reactor owns every client socket: one epoll descriptor (holding the listening socket,
    every client socket and a timerfd) is registered with ``loop.add_reader``.

    Args:
        app: the ASGI 3 callable ``app(scope, receive, send)``.
        loop: the running event loop (asyncio or uvloop).
        listen_fd: a listening, non-blocking socket's descriptor. The caller keeps ownership
            (the reactor never closes it).
        unix_path: for a Unix-domain socket, its path (scope ``server`` = ``(path, None)``,
            ``client`` = ``None``); else ``None``.
        root_path: ASGI ``root_path``; prefixed to ``path`` and ``raw_path``.
        state: lifespan state; each request scope gets a shallow copy as ``state`` (or ``None``
            to omit the key).
        timeout_keep_alive: seconds an idle keep-alive connection is kept.
        limit_request_body: bytes; 0 = unlimited. Over it: 413.
        limit_request_line: bytes of the request-target. Over it: 414.
        limit_request_fields: field-lines per request. Over it: 431.
        limit_request_field_size: bytes of the whole field section. Over it: 431.
        logger: the ``logging.Logger`` for application errors (``skirr.error``).
        timeout_request_head: seconds a connection may take to complete a request head (from
            its first byte, or from accept); then 408 if any byte arrived, and close.
        timeout_write: seconds unsent output may make no progress; then the connection is
            closed and waiting sends raise ClientDisconnected.
        limit_concurrency: requests in flight before new ones get 503; 0 = unlimited.
        limit_connections: open connections before accepting pauses; 0 = unlimited.
        timeout_request_body: seconds a request body may go without a byte while it is read (not
            while flow control pauses reading); then receive() gets http.disconnect and the
            connection closes, with 408 if no response began. 0 = none.
        access_log: a list the server appends one record tuple to per finished exchange and per
            refusal (shapes in src/ext/sk_access.h), or None: no records.
        access_flush: zero-argument callable scheduled with ``loop.call_soon`` when a record
            goes into an empty ``access_log``.
        proxy_headers: read the proxy headers of ``proxy_headers_mode`` from trusted peers into
            scope ``client`` and ``scheme`` (src/ext/sk_proxy.h).
        proxy_headers_mode: ``"x-forwarded"`` (X-Forwarded-For / X-Forwarded-Proto only) or
            ``"forwarded"`` (RFC 7239 Forwarded only); the other family is never read (RFC 7239
            §8.1). ValueError for anything else.
        forwarded_allow_ips: the trusted peers: comma-separated IPs, CIDR networks, ``*``,
            ``unix:``. ValueError for anything else.
        date_header: send ``date`` when the app sends none.
        server_header: the server's own field line(s), e.g. ``b"server: skirr\r\n"`` (the
            default), ``b""`` for none; sent when the app sends no ``server``.
        headers: complete ``name: value\r\n`` lines added to every response and refusal
            (validated by skirr.Config; ValueError if not whole CRLF-terminated lines).
        trace: callable ``trace(event: str, client: (host, port) | None)`` for connection events
            (--log-level trace), or None.
        metrics: keep the --metrics-port counters (read with :meth:`metrics`); off: none kept.
        ws: serve WebSocket upgrades (src/ext/sk_wsh.h); False: they reach the app as HTTP.
        ws_max_size: bytes of payload per received WebSocket message; over it: close 1009.
        ws_max_queue: received messages held for the app before reading stops (> 0).
        ws_ping_interval: seconds between keepalive pings; 0 = none.
        ws_ping_timeout: seconds a ping waits for its pong (then close 1011); 0 = forever.
        ws_per_message_deflate: accept a client's permessage-deflate offer (RFC 7692).
        write_batch_delay: seconds (>= 0) a complete keep-alive response may wait to leave with
            the other connections' responses of its loop iteration (one batch of writes); the
            batch leaves at the next response queued or app step ending once its first response
            has waited this long, and always within one loop iteration. 0 = no batch.

    Raises:
        OSError: epoll/timerfd could not be created.
    """
    def __init__(
        self,
        app: Callable[..., Any],
        loop: asyncio.AbstractEventLoop,
        listen_fd: int,
        *,
        unix_path: str | None = None,
        root_path: str = "",
        state: Mapping[str, Any] | None = None,
        timeout_keep_alive: float = 5.0,
        limit_request_body: int = 0,
        limit_request_line: int = 8190,
        limit_request_fields: int = 100,
        limit_request_field_size: int = 65536,
        logger: logging.Logger | None = None,
        timeout_request_head: float = 10.0,
        timeout_write: float = 30.0,
        limit_concurrency: int = 0,
        limit_connections: int = 0,
        timeout_request_body: float = 60.0,
        access_log: list[tuple[Any, ...]] | None = None,
        access_flush: Callable[[], None] | None = None,
        proxy_headers: bool = False,
        forwarded_allow_ips: str = "127.0.0.1",
        date_header: bool = True,
        server_header: bytes | None = None,
        headers: bytes | None = None,
        trace: Callable[[str, tuple[str, int] | None], None] | None = None,
        metrics: bool = False,
        ws: bool = True,
        ws_max_size: int = 16777216,
        ws_max_queue: int = 32,
        ws_ping_interval: float = 20.0,
        ws_ping_timeout: float = 20.0,
        ws_per_message_deflate: bool = True,
        write_batch_delay: float = 0.001,
        proxy_headers_mode: str = "x-forwarded",
    ) -> None: ...
    def metrics(self) -> dict[str, Any] | None:
        """The counters (None when made without ``metrics``): ``requests`` {(method, "2xx"): n},
        ``refusals`` {"431": n}, ``timeouts`` {"request_head"|"keep_alive"|"write"|"request_body": n},
        ``bytes_in``, ``bytes_out`` (bytes), ``buckets`` [(bound seconds, cumulative n)],
        ``count``, ``sum`` (seconds), ``connections``, ``in_flight``. See src/ext/sk_metrics.h."""
    def start(self) -> None:
        """Registers the reactor with the loop and starts accepting."""
    def stop_accepting(self) -> None:
        """Stops accepting new connections (the listening socket stays open; the caller closes it)."""
    def shutdown(self) -> None:
        """Graceful phase: idle connections are closed now; busy ones close after their response
        (which carries ``connection: close``)."""
    def close(self) -> None:
        """Hard stop: every connection is closed, waiting sends raise ClientDisconnected, receives
        return ``http.disconnect``; the reactor leaves the loop. Idempotent."""
    @property
    def connections(self) -> int:
        """Open client connections."""
    @property
    def active_requests(self) -> int:
        """Requests whose application task has not finished."""
    @property
    def total_requests(self) -> int:
        """Requests started since the server was made (for --limit-max-requests)."""
    max_requests: int
    """--limit-max-requests: once ``total_requests`` reaches it, every response says
    ``connection: close`` (RFC 9112 §9.6); 0 = no limit. TypeError/OverflowError if not an int
    >= 0."""

def _live() -> dict[str, int]:
    """Live counts {"servers", "connections", "requests", "awaitables"} for leak tests."""

def log_escape(value: str | bytes | bytearray | memoryview) -> str:
    """``value`` as a log line shows it, escaped against log injection (CWE-117; the rule of
    ``src/core/sk_logesc.h``): ``"`` -> ``\\"``, ``\\`` -> ``\\\\``, the bytes 0x00-0x1F and
    0x7F-0xFF -> ``\\xHH`` (upper-case hex), every other byte as it is. A str whose code points
    are all below U+0100 is read as the latin-1 bytes it was decoded from, any other str as its
    UTF-8 bytes. Returns ``value`` itself when it is a str that needs no escaping.

    Raises:
        TypeError: ``value`` is neither str nor bytes-like.
    """

def reason_phrases() -> dict[int, str]:
    """``{status: reason phrase}`` for every status 100..599 the C core's one table names
    (``sk_resp_reason_phrase`` in ``src/core/sk_resp.h``: RFC 9110 §15's phrases, else the IANA
    registry's): the phrases skirr's status lines and refusal bodies carry. A new dict each call.
    """
