"""``--metrics-port``: Prometheus exposition of the native counters (issue 13).

Owns: a ``prometheus_client`` collector reading ``_native.Server.metrics()`` at each scrape, and
its own HTTP listener (``prometheus_client.start_http_server``, a thread) on ``host`` and
``metrics_port``, so the application's routes are untouched. Metrics:

- ``skirr_requests_total{method, status}``: responses by method (GET ... OPTIONS, ``other``) and
  status class (``2xx`` ...), a 500 skirr sent for a failed application included;
- ``skirr_requests_in_flight``, ``skirr_connections``: gauges;
- ``skirr_request_bytes_total`` (request bytes read), ``skirr_response_bytes_total`` (response
  content bytes sent);
- ``skirr_refusals_total{status}``: requests skirr answered itself (400, 408, 413, 414, 431, 500,
  501, 503, 505, ``other``);
- ``skirr_timeouts_total{kind}``: ``request_head``, ``keep_alive``, ``write``, ``request_body``;
- ``skirr_request_duration_seconds``: histogram from the request head to the response's end.

Never: costs anything on the request path when off (the native server then keeps no counters).
Needs ``pip install 'skirr[metrics]'`` (prometheus-client).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any


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
            from prometheus_client import CollectorRegistry, start_http_server
        except ImportError:
            raise ConfigError(
                "--metrics-port needs prometheus-client (pip install 'skirr[metrics]')"
            ) from None
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self.snapshot))  # type: ignore[arg-type]
        try:
            self._server, self._thread = start_http_server(self.port, addr=self.host,
                                                           registry=registry)
        except OSError as exc:
            raise ConfigError(
                f"could not bind the metrics listener to {self.host}:{self.port}: "
                f"{exc.strerror or exc}"
            ) from None

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(5)
            self._server = None


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
        buckets = [(repr(bound), n) for bound, n in snap["buckets"]]
        buckets.append(("+Inf", snap["count"]))
        yield HistogramMetricFamily("skirr_request_duration_seconds",
                                    "From the request head to the response's end.",
                                    buckets=buckets, sum_value=snap["sum"])
