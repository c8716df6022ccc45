"""skirr._native: the C extension (reactor + ASGI glue). Type stub and API contract."""
import asyncio
import logging
import os
from collections.abc import Callable, Iterable, Mapping
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
        ssl_context: a :class:`TLSContext`: every connection is served over TLS (the TLS stream
            layer, src/ext/sk_tls.h) with the context's current SSL_CTX; scopes say https/wss
            and carry ``extensions["tls"]``. The server holds it for its whole life. None:
            cleartext.
        http: 0 (auto: HTTP/1.1, and HTTP/2 by prior knowledge or ALPN h2), 1 (HTTP/1.1 only)
            or 2 (HTTP/2 only): sk_h2.h.
        http2_max_concurrent_streams, http2_max_headers_size (-1: limit_request_field_size),
            http2_initial_stream_window_size, http2_max_frame_size: HTTP/2 SETTINGS and limits
            (bytes; RFC 9113 §6.5.2 ranges, else ValueError).

    Threads: a Server belongs to the thread that made it, which must be the thread running
    ``loop``. ``start``, ``stop_accepting``, ``shutdown``, ``close`` and setting ``max_requests``
    from another thread raise RuntimeError (use ``loop.call_soon_threadsafe``); so do the ASGI
    ``send``/``receive`` callables it hands the app (use ``asyncio.run_coroutine_threadsafe``).
    ``metrics()``, ``connections``, ``active_requests`` and ``total_requests`` may be read from
    any thread. The module runs without the GIL on a free-threaded CPython.

    Raises:
        OSError: epoll/timerfd could not be created.
        TypeError: ssl_context is not a TLSContext.
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
        ssl_context: TLSContext | None = None,
        http: int = 0,
        http2_max_concurrent_streams: int = 100,
        http2_max_headers_size: int = -1,
        http2_initial_stream_window_size: int = 1048576,
        http2_max_frame_size: int = 16384,
    ) -> None: ...
    def metrics(self) -> dict[str, Any] | None:
        """The counters (None when made without ``metrics``): ``requests`` {(method, "2xx"): n},
        ``refusals`` {"431": n}, ``timeouts`` {"request_head"|"keep_alive"|"write"|"request_body": n},
        ``disconnects`` {("http"|"websocket", "none"|"absorbed"|"error"): n} (every pair),
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

class TLSContext:
    """The serving TLS context (OpenSSL 3) of :class:`Server`'s ``ssl_context``, made from files
    (src/ext/sk_tlsctx.h). What skirr.Config.tls_context() builds from the --ssl-* settings.

    Every SSL_CTX it builds: TLS 1.2 and 1.3 (``min_version`` "TLSv1.3": 1.3 only; ``version``
    5: 1.2 only); TLS 1.2 suites forward-secret AEAD only unless ``ciphers`` says otherwise
    ("TLSv1", uvicorn's default, means the same); no compression, no renegotiation, the
    server's suite order; session tickets encrypted with ``ticket_key`` (80 bytes; None: random,
    kept for reloads); ALPN http/1.1 (no overlap: the no_application_protocol alert); client
    certificates per ``cert_reqs`` (0 none, 1 requested, a failed one let through and reported
    in the ``tls`` extension, 2 required) against ``ca_certs``, with ``crl``; ``sni``: extra
    ``(certfile, keyfile[, password])`` chosen by the client's server name among each
    certificate's subjectAltName DNS names.

    Args:
        certfile: PEM certificate chain, leaf first. keyfile: its PEM key (None: in certfile).
        password: the key's password, str, bytes or a callable returning one.

    Raises:
        ValueError: one line naming the option (as the command line spells it), the file, what
            is wrong and OpenSSL's reason.
        TypeError: an argument of the wrong type.
    """
    def __init__(
        self,
        certfile: str | os.PathLike[str],
        keyfile: str | os.PathLike[str] | None = None,
        password: str | bytes | Callable[[], str | bytes] | None = None,
        ca_certs: str | os.PathLike[str] | None = None,
        cert_reqs: int = 0,
        ciphers: str | None = None,
        min_version: str = "TLSv1.2",
        version: int = 17,
        crl: str | os.PathLike[str] | None = None,
        sni: Iterable[tuple[Any, ...]] = (),
        ticket_key: bytes | None = None,
        http: int = 0,
    ) -> None: ...
    def reload(self) -> None:
        """Builds a new SSL_CTX from the same files and swaps it in: new connections get it,
        open ones keep theirs. On failure raises ValueError and keeps the current one."""
    def sni_names(self) -> dict[str, str]:
        """Each DNS name of the ``sni`` certificates -> its certfile."""
    @property
    def min_version(self) -> str:
        """"TLSv1.2" or "TLSv1.3"."""
    @property
    def max_version(self) -> str | None:
        """"TLSv1.2" (``version`` 5), or ``None``: the highest libssl has (TLS 1.3)."""

def tls_ktls_available() -> bool:
    """True when the running kernel offers kernel TLS (the ``tls`` ULP). Files on TLS
    connections are read in bounded chunks and encrypted either way: the TLS layer's memory BIOs
    cannot hand records to kernel TLS (sk_tls.h)."""

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
