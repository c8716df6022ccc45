"""--metrics-port (issue 13): Prometheus exposition on its own listener, fetched with curl and
parsed with prometheus-client's own parser; exact counts after known traffic, on both loops."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import http_request
from _proc import free_port


def scrape(port: int) -> dict:
    """{(name, labels tuple): value} of every sample, via curl and the client's parser."""
    from prometheus_client.parser import text_string_to_metric_families

    curl = shutil.which("curl")
    assert curl, "curl is not installed (.ci/run installs it)"
    # curl is the scraper here, not the code under test: without the sanitizer leg's LD_PRELOAD
    # of libasan (an uninstrumented curl under it hangs in its resolver thread).
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    text = subprocess.run([curl, "-sf", f"http://127.0.0.1:{port}/metrics"], check=True,
                          capture_output=True, text=True, timeout=10, env=env).stdout
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def app(scope, receive, send):
    while (await receive()).get("more_body"):
        pass
    if scope["path"] == "/raise":
        raise RuntimeError("boom")
    status = 404 if scope["path"] == "/missing" else 200
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": b"hello"})


@pytest.mark.rule("skirr-metrics")
def test_counts(serve):
    mport = free_port()
    with serve(app, metrics_port=mport) as srv:
        c = srv.connect()
        assert c.request(http_request("GET", "/")).status == 200
        assert c.request(http_request("GET", "/missing")).status == 404
        assert c.request(http_request("POST", "/", body=b"abc")).status == 200
        assert c.request(http_request("GET", "/raise")).status == 500
        before = scrape(mport)
        bad = srv.connect()
        bad.send(b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(101))
                 + b"\r\n")
        assert bad.response(allow_incomplete=True).status == 431
        m = scrape(mport)
        sent = sum(len(x) for x in (http_request("GET", "/"), http_request("GET", "/missing"),
                                    http_request("POST", "/", body=b"abc"),
                                    http_request("GET", "/raise")))
    assert m[("skirr_requests_total", (("method", "GET"), ("status", "2xx")))] == 1
    assert m[("skirr_requests_total", (("method", "GET"), ("status", "4xx")))] == 1
    assert m[("skirr_requests_total", (("method", "POST"), ("status", "2xx")))] == 1
    assert m[("skirr_requests_total", (("method", "GET"), ("status", "5xx")))] == 1
    assert m[("skirr_refusals_total", (("status", "431"),))] == 1
    assert m[("skirr_response_bytes_total", ())] == 15  # three "hello"; the 500's body is skirr's
    assert before[("skirr_request_bytes_total", ())] == sent
    assert m[("skirr_request_bytes_total", ())] >= sent  # and what the parser read of the 431
    assert ("skirr_refusals_total", (("status", "431"),)) not in before
    assert m[("skirr_connections", ())] >= 1
    assert m[("skirr_requests_in_flight", ())] == 0
    assert m[("skirr_request_duration_seconds_count", ())] == 4
    assert m[("skirr_request_duration_seconds_bucket", (("le", "+Inf"),))] == 4
    assert 0 < m[("skirr_request_duration_seconds_sum", ())] < 5
    assert m[("skirr_timeouts_total", (("kind", "keep_alive"),))] == 0


@pytest.mark.rule("skirr-metrics")
def test_timeouts_counted(serve):
    mport = free_port()
    with serve(app, metrics_port=mport, timeout_request_head=1, timeout_keep_alive=1) as srv:
        slow = srv.connect()
        slow.send(b"GET / HTTP/1.1\r\nHost")
        assert slow.response(allow_incomplete=True).status == 408
        idle = srv.connect()
        assert idle.request(http_request("GET", "/")).status == 200
        idle.expect_eof()
        m = scrape(mport)
    assert m[("skirr_timeouts_total", (("kind", "request_head"),))] == 1
    assert m[("skirr_timeouts_total", (("kind", "keep_alive"),))] == 1
    assert m[("skirr_refusals_total", (("status", "408"),))] == 1

