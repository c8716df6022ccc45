"""``--metrics-port``: Prometheus exposition of the native counters (issue 13).

Owns: a ``prometheus_client`` collector reading ``_native.Server.metrics()`` at each scrape, and
its own HTTP listener on ``host`` and ``metrics_port`` (a thread; the exposition is
``prometheus_client.make_wsgi_app``'s), so the application's routes are untouched. The listener
is bounded, since its clients share the process's descriptors with the application (or the
supervisor): at most ``MAX_CONNECTIONS`` connections at once (one more is accepted and closed at
once), each given ``CONNECTION_TIMEOUT`` seconds in all to send its request and take the answer
(a connection idle or trickling past it is closed); running out of descriptors (EMFILE ...) while
accepting pauses the listener for ``ACCEPT_PAUSE`` s instead of spinning. Metrics:

- ``skirr_requests_total{method, status}``: responses by method (GET ... OPTIONS, ``other``) and
  status class (``2xx`` ...), a 500 skirr sent for a failed application included; a WebSocket
  handshake counts as a GET with its answer's status (``1xx``: the 101 of an accepted session;
  ``4xx``: a 403 or a denial response's status; ``5xx``: a 500);
- ``skirr_requests_in_flight``, ``skirr_connections``: gauges;
- ``skirr_request_bytes_total`` (request bytes read), ``skirr_response_bytes_total`` (response
  content bytes sent);
- ``skirr_refusals_total{status}``: requests skirr answered itself (400, 408, 413, 414, 426, 431,
  500, 501, 503, 505, ``other``; 400 and 426 include refused WebSocket handshakes);
- ``skirr_timeouts_total{kind}``: ``request_head``, ``keep_alive``, ``write``, ``request_body``;
- ``skirr_client_disconnects_total{kind, app_exception}``: clients that left before their
  response completed (``kind="http"``) or, on a WebSocket, that closed or dropped the connection
  before the application or the server began closing it (``kind="websocket"``), counted when the
  application's call ends, by what it ended with: ``none`` (it returned, or was cancelled),
  ``absorbed`` (it raised the disconnect skirr reported, or a wrapper of it: logged at debug as
  the client's departure), ``error`` (it raised anything else: logged at error as an
  application failure);
- ``skirr_request_duration_seconds``: histogram from the request head to the response's end.

With ``--workers N`` the supervisor serves the listener and the numbers are those of all workers
together (:class:`Aggregate`): each worker sends its snapshot (:func:`encode`) over its heartbeat
pipe at every heartbeat (a fifth of ``--timeout-worker-healthcheck``) and once more when it exits;
a scrape sums the last snapshot of every live worker and the final counters of every worker that
exited or was replaced, so counters never go backwards across a restart (a worker killed by a
signal contributes the counters of its last heartbeat). Gauges (in-flight requests, connections)
sum the live workers only. A scrape is therefore up to one heartbeat behind.

Never: costs anything on the request path when off (the native server then keeps no counters).
Needs ``pip install 'skirr[metrics]'`` (prometheus-client).
"""
from __future__ import annotations

import errno
import io
import json
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

MAX_CONNECTIONS = 8  # metrics connections open at once (Prometheus scrapes one at a time)
CONNECTION_TIMEOUT = 5.0  # seconds a metrics connection gets for its request and the answer
ACCEPT_PAUSE = 0.1  # seconds the listener waits after accept() ran out of a resource
# accept() errors that mean "no resource now" (the listening socket stays readable)
_RESOURCE_ERRNOS = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM))

_GAUGES = ("connections", "in_flight")
_SCALARS = ("bytes_in", "bytes_out", "count", "sum")
_LABELLED = ("requests", "refusals", "timeouts", "disconnects")
_PAIRS = ("requests", "disconnects")  # labelled by a pair: tuple keys, lists in encode()


def merge(snapshots: Iterable[dict[str, Any]], gauges: bool = True) -> dict[str, Any]:
    """The sum of native snapshots (dicts as ``_native.Server.metrics`` returns), same shape.

    ``gauges=False`` sets ``connections`` and ``in_flight`` to 0 (for the final counters of
    workers that have exited). The histograms' bucket bounds are the same in every process.
    """
    out: dict[str, Any] = {"requests": {}, "refusals": {}, "timeouts": {}, "disconnects": {},
                           "buckets": [],
                           "bytes_in": 0, "bytes_out": 0, "count": 0, "sum": 0.0,
                           "connections": 0, "in_flight": 0}
    bounds: dict[float, int] = {}
    for snap in snapshots:
        for name in _LABELLED:
            totals = out[name]
            for key, n in snap[name].items():
                totals[key] = totals.get(key, 0) + n
        for name in _SCALARS:
            out[name] += snap[name]
        if gauges:
            for name in _GAUGES:
                out[name] += snap[name]
        for bound, n in snap["buckets"]:
            bounds[bound] = bounds.get(bound, 0) + n
    out["buckets"] = sorted(bounds.items())
    return out


def encode(snap: dict[str, Any]) -> bytes:
    """A snapshot as JSON bytes (its tuple keys as lists), for the pipe to the supervisor."""
    doc = dict(snap)
    for name in _PAIRS:
        doc[name] = [[a, b, n] for (a, b), n in snap[name].items()]
    return json.dumps(doc, separators=(",", ":")).encode()


def decode(data: bytes) -> dict[str, Any]:
    """The inverse of :func:`encode`.

    Raises:
        ValueError: ``data`` is not an encoded snapshot.
    """
    try:
        doc = json.loads(data)
        for name in _PAIRS:
            doc[name] = {(a, b): n for a, b, n in doc[name]}
        doc["buckets"] = [(float(b), n) for b, n in doc["buckets"]]
    except (TypeError, KeyError, AttributeError) as exc:  # JSONDecodeError is a ValueError
        raise ValueError(f"not a metrics snapshot: {exc!r}") from None
    missing = [name for name in _SCALARS + _GAUGES + _LABELLED if name not in doc]
    if missing:
        raise ValueError(f"not a metrics snapshot: no {', '.join(missing)}")
    return doc  # type: ignore[no-any-return]


class Aggregate:
    """The numbers of all workers together, as one snapshot (the supervisor's, ``--workers``).

    ``update(key, snap)`` records a live worker's latest snapshot; ``retire(key)`` folds that
    worker's last counters into the totals of exited workers (its gauges are dropped);
    ``snapshot()`` is their sum. Thread-safe (the scrape runs in the listener's thread).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[Any, dict[str, Any]] = {}
        self._retired: dict[str, Any] = merge([])

    def update(self, key: Any, snap: dict[str, Any]) -> None:
        with self._lock:
            self._live[key] = snap

    def retire(self, key: Any) -> None:
        with self._lock:
            snap = self._live.pop(key, None)
            if snap is not None:
                self._retired = merge([self._retired, snap], gauges=False)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return merge([self._retired, *self._live.values()])


class MetricsExporter:
    """Serves ``snapshot()`` (a dict from ``_native.Server.metrics``) on ``host:port``.

    Raises:
        ConfigError (from :meth:`start`): prometheus-client is not installed, or the port cannot
            be bound.
    """

    def __init__(self, snapshot: Callable[[], dict[str, Any] | None], host: str, port: int) -> None:
        self.snapshot = snapshot
        self.host = host
        self.port = port
        self._server: Any = None
        self._thread: Any = None

    def start(self) -> None:
        from .config import ConfigError

        try:
            from prometheus_client import CollectorRegistry, make_wsgi_app
        except ImportError:
            raise ConfigError(
                "--metrics-port needs prometheus-client (pip install 'skirr[metrics]')"
            ) from None
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self.snapshot))  # type: ignore[arg-type]
        try:
            self._server = _listener(self.host, self.port, make_wsgi_app(registry))
        except OSError as exc:
            raise ConfigError(
                f"could not bind the metrics listener to {self.host}:{self.port}: "
                f"{exc.strerror or exc}"
            ) from None
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="skirr-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(5)
            self._server = None


class _DeadlineReader(io.RawIOBase):
    """The reading side of one metrics connection: each ``recv`` may wait only for what is
    left of the connection's deadline (``TimeoutError`` past it), so a client trickling its
    request byte by byte is closed on time too."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the metrics connection's time is up")
        self._sock.settimeout(left)  # also bounds the answer's sendall()
        return self._sock.recv_into(buffer)


def _listener(host: str, port: int, app: Callable[..., Any]) -> Any:
    """The bound metrics listener (a ``wsgiref`` server, one thread per connection, bounded as
    the module says), not yet serving.

    Raises:
        OSError: the address cannot be resolved or bound.
    """
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

    class Handler(WSGIRequestHandler):
        timeout = CONNECTION_TIMEOUT  # the socket's timeout from the start (reads and writes)

        def setup(self) -> None:
            super().setup()
            self.rfile.close()  # the makefile() reader holds the socket open until closed
            self.rfile = io.BufferedReader(
                _DeadlineReader(self.connection, time.monotonic() + CONNECTION_TIMEOUT))

        def log_message(self, format: str, *args: Any) -> None:
            pass  # no line per scrape (prometheus-client's handler logs none either)

    class Listener(ThreadingMixIn, WSGIServer):
        daemon_threads = True

        def __init__(self, address: tuple[Any, ...], family: int) -> None:
            self.address_family = family
            self._free = threading.BoundedSemaphore(MAX_CONNECTIONS)
            super().__init__(address, Handler)
            self.set_app(app)

        def get_request(self) -> tuple[socket.socket, Any]:
            try:
                return super().get_request()  # type: ignore[no-any-return]
            except OSError as exc:
                if exc.errno in _RESOURCE_ERRNOS:
                    time.sleep(ACCEPT_PAUSE)  # the listener stays readable: no busy loop
                raise

        def verify_request(self, request: Any, client_address: Any) -> bool:
            return self._free.acquire(blocking=False)  # False: closed at once

        def process_request(self, request: Any, client_address: Any) -> None:
            try:
                super().process_request(request, client_address)
            except BaseException:  # no thread (RuntimeError): the slot is free again
                self._free.release()
                raise

        def process_request_thread(self, request: Any, client_address: Any) -> None:
            try:
                super().process_request_thread(request, client_address)
            finally:
                self._free.release()

        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # a client that timed out or went away; the connection is closed

    info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = info[0]
    return Listener((sockaddr[0], port), family)


class _Collector:
    def __init__(self, snapshot: Callable[[], dict[str, Any] | None]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        snap = self.snapshot()
        if snap is None:
            return
        req = CounterMetricFamily("skirr_requests", "Responses by method and status class.",
                                  labels=["method", "status"])
        for (method, cls), n in sorted(snap["requests"].items()):
            req.add_metric([method, cls], n)
        yield req
        yield GaugeMetricFamily("skirr_requests_in_flight",
                                "Requests whose application call is running.",
                                value=snap["in_flight"])
        yield GaugeMetricFamily("skirr_connections", "Open client connections.",
                                value=snap["connections"])
        yield CounterMetricFamily("skirr_request_bytes", "Request bytes read.",
                                  value=snap["bytes_in"])
        yield CounterMetricFamily("skirr_response_bytes", "Response content bytes sent.",
                                  value=snap["bytes_out"])
        ref = CounterMetricFamily("skirr_refusals", "Requests skirr answered itself, by status.",
                                  labels=["status"])
        for status, n in sorted(snap["refusals"].items()):
            ref.add_metric([status], n)
        yield ref
        tmo = CounterMetricFamily("skirr_timeouts", "Connections timed out, by kind.",
                                  labels=["kind"])
        for kind, n in sorted(snap["timeouts"].items()):
            tmo.add_metric([kind], n)
        yield tmo
        disc = CounterMetricFamily(
            "skirr_client_disconnects",
            "Clients that left before their response (WebSocket: session) completed, by kind "
            "and what the application's call ended with.",
            labels=["kind", "app_exception"])
        for (kind, how), n in sorted(snap["disconnects"].items()):
            disc.add_metric([kind, how], n)
        yield disc
        buckets = [(repr(bound), n) for bound, n in snap["buckets"]]
        buckets.append(("+Inf", snap["count"]))
        yield HistogramMetricFamily("skirr_request_duration_seconds",
                                    "From the request head to the response's end.",
                                    buckets=buckets, sum_value=snap["sum"])
