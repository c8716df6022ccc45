"""The HTTP/2 rows' figures (bench/harness/h2.py), h2load's summary as measure.py reads it, and
their report section (report.py `render_h2`) judged from synthetic rounds, without measuring: the
per-round ratios against each peer over the same protocol, skirr against nginx, skirr's HTTP/2
against its HTTP/1.1 (the target at 10 streams), which failures fail the run. Run first by
`make bench-h2`, `make bench` and `make bench-quick`: `.venv/bin/python -m pytest
bench/test_h2.py -q`. Stdlib and pytest.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import h2, measure, report  # noqa: E402


def run_(server, rnd, cpu, streams=10, wl="raw_get", conns=64, ok=True):
    proto = {"skirr": "h1", "skirr-tls": "h1"}.get(server, "h2" if server.endswith("-h2") else "h2c")
    return {"server": server, "workload": wl, "conns": conns, "streams": streams, "proto": proto,
            "round": rnd, "ok": ok, "error": None if ok else "RuntimeError: boom",
            "cpu_us_per_req": cpu, "rps": 1e6 / cpu, "p99_ms": None, "p50_ms": None,
            "mean_ms": 2.5, "rss_mib": 30.0, "pss_mib": 20.0,
            "errors": {"failed": 0, "errored": 0, "timeout": 0, "non2xx": 0}, "gen_cpu": 0.5,
            "client_bound": False, "server_util": 1.0, "other_cpu0": 0.0, "steal_cpu0": 0.0,
            "pinned": True}


def test_peer_ratio_is_taken_against_skirr_over_the_same_protocol():
    runs = [run_("skirr-h2c", 0, 20), run_("skirr-h2c", 1, 20),
            run_("skirr-h2", 0, 30), run_("skirr-h2", 1, 30),
            run_("hypercorn-h2c", 0, 200), run_("hypercorn-h2c", 1, 210),
            run_("hypercorn-h2", 0, 60), run_("hypercorn-h2", 1, 60, ok=False),
            run_("granian-h2", 0, 45), run_("granian-h2", 1, 29.9),
            run_("nginx-h2c", 0, 10), run_("nginx-h2c", 1, 10)]
    got = h2.peer_ratios(runs, 2)
    assert got[("raw_get", 64, 10, "hypercorn-h2c")]["ratios"] == [10.0, 10.5]
    assert got[("raw_get", 64, 10, "hypercorn-h2c")]["verdict"] == "met"
    assert got[("raw_get", 64, 10, "hypercorn-h2c")]["base"] == "skirr-h2c"
    assert got[("raw_get", 64, 10, "granian-h2")]["ratios"] == [1.5, 29.9 / 30]
    assert got[("raw_get", 64, 10, "granian-h2")]["verdict"] == "MISSED"
    assert got[("raw_get", 64, 10, "granian-h2")]["ahead"] == 1
    assert got[("raw_get", 64, 10, "hypercorn-h2")]["verdict"] == "unproven"
    assert ("raw_get", 64, 10, "nginx-h2c") not in got  # the limit is not a peer
    # a round skirr failed is a round it was not ahead in
    runs[1] = run_("skirr-h2c", 1, 20, ok=False)
    assert h2.peer_ratios(runs, 2)[("raw_get", 64, 10, "hypercorn-h2c")]["verdict"] == "MISSED"


def test_stream_counts_are_separate_rows():
    runs = [run_("skirr-h2c", 0, 20, streams=1), run_("skirr-h2c", 0, 10, streams=10),
            run_("granian-h2c", 0, 15, streams=1), run_("granian-h2c", 0, 15, streams=10)]
    got = h2.peer_ratios(runs, 1)
    assert got[("raw_get", 64, 1, "granian-h2c")]["verdict"] == "MISSED"
    assert got[("raw_get", 64, 10, "granian-h2c")]["verdict"] == "met"


def test_skirr_against_nginx_per_protocol():
    runs = [run_("skirr-h2c", 0, 20), run_("nginx-h2c", 0, 8), run_("skirr-h2", 0, 30),
            run_("nginx-h2", 0, 10), run_("skirr-h2c", 1, 21), run_("nginx-h2c", 1, 7, ok=False)]
    got = h2.nginx_ratios(runs, 2)
    assert got[("raw_get", 64, 10, "h2c")] == {"ratios": [2.5], "rounds_ok": 1}
    assert got[("raw_get", 64, 10, "h2")] == {"ratios": [3.0], "rounds_ok": 1}


def test_multiplexing_against_keep_alive_is_judged_at_10_streams():
    runs = [run_("skirr-h2c", 0, 18, streams=10), run_("skirr-h2c", 0, 40, streams=1),
            run_("skirr", 0, 20, streams=None),
            run_("skirr-h2c", 1, 21, streams=10), run_("skirr-h2c", 1, 40, streams=1),
            run_("skirr", 1, 20, streams=None),
            run_("skirr-h2", 0, 25, streams=10), run_("skirr-tls", 0, 25, streams=None),
            run_("skirr-h2", 1, 24, streams=10), run_("skirr-tls", 1, 25, streams=None)]
    got = h2.mux_ratios(runs, 2)
    assert got[("raw_get", 64, 10, "h2c")]["ratios"] == [0.9, 1.05]
    assert got[("raw_get", 64, 10, "h2c")]["verdict"] == "MISSED"  # 1.05 > 1 in round 1
    assert got[("raw_get", 64, 1, "h2c")]["verdict"] == "–"  # shown, not judged
    assert got[("raw_get", 64, 1, "h2c")]["ratios"] == [2.0, 2.0]
    assert got[("raw_get", 64, 10, "h2")]["verdict"] == "met"  # 1.0 and 0.96: at most 1
    assert got[("raw_get", 64, 10, "h2")]["h1_us"] == [25, 25]
    # the HTTP/2 run failed a round: missed; the baseline failed one: unproven
    runs[3] = run_("skirr-h2c", 1, 1, streams=10, ok=False)
    assert h2.mux_ratios(runs, 2)[("raw_get", 64, 10, "h2c")]["verdict"] == "MISSED"
    runs[3] = run_("skirr-h2c", 1, 19, streams=10)
    runs[5] = run_("skirr", 1, 20, streams=None, ok=False)
    assert h2.mux_ratios(runs, 2)[("raw_get", 64, 10, "h2c")]["verdict"] == "unproven"
    # no HTTP/1.1 baseline over TLS in the run (the smoke row): no TLS row
    assert ("raw_get", 64, 10, "h2") not in h2.mux_ratios(runs[:6], 2)
    # skirr never ran over HTTP/2 (it could not start): the planned row is judged, missed
    planned = {"rows": [("raw_get", 64, 10)], "servers": ["skirr-h2c", "nginx-h2c"],
               "baselines": ["skirr"]}
    got = h2.mux_ratios([run_("skirr", 0, 20, streams=None)], 1, planned)
    assert got[("raw_get", 64, 10, "h2c")]["verdict"] == "MISSED"
    assert got[("raw_get", 64, 10, "h2c")]["ratios"] == []


def test_skirr_that_fails_or_cannot_start_fails_the_run():
    ok = {"runs": [run_("skirr-h2c", 0, 20), run_("granian-h2c", 0, 20, ok=False)],
          "not_measured": {"peregrine-h2": "failed the start check: x"}}
    assert not h2.skirr_failed(ok)
    assert not h2.skirr_failed(None)
    assert h2.skirr_failed(dict(ok, not_measured={"skirr-h2": "failed the start check: "
                                                  "skirr: error: unrecognized arguments: --http"}))
    assert h2.skirr_failed(dict(ok, runs=[run_("skirr-h2c", 0, 20, ok=False)]))
    assert h2.skirr_failed(dict(ok, runs=[run_("skirr", 0, 20, streams=None, ok=False)]))


def test_row_groups_keep_the_rows_order():
    assert h2.row_groups([("raw_get", 64, 1), ("raw_get", 64, 10), ("get_64k", 64, 10)]) == {
        ("raw_get", 64): [1, 10], ("get_64k", 64): [10]}


H2LOAD_OUT = """\
starting benchmark...
spawning thread #0: 64 total client(s). Timing-based test with 1s of warm-up time and 2s of main duration for measurements.
Warm-up started for thread #0.
TLS Protocol: TLSv1.3
Cipher: TLS_AES_128_GCM_SHA256
Server Temp Key: X25519 253 bits
Application protocol: h2
Warm-up phase is over for thread #0.
Main benchmark duration is started for thread #0.
Main benchmark duration is over for thread #0. Stopping all clients.
Stopped all clients for thread #0

finished in 3.01s, 14905.00 req/s, 1.14MB/s
requests: 29810 total, 29810 started, 29810 done, 29810 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 29811 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 2.27MB (2384858) total, 2.29MB (2404234) headers (space savings 50.51%), 622.90KB (637850) data
                     min         max         mean         sd        +/- sd
time for request:      546us    268.02ms     40.70ms     32.97ms    92.55%
time for connect:        0us         0us         0us         0us     0.00%
"""


def test_h2load_summary_read_exactly():
    got = measure.parse_h2load(H2LOAD_OUT, "h2")
    assert (got["requests"], got["rps"], got["protocol"]) == (29810, 14905.0, "h2")
    assert (got["max_ms"], got["mean_ms"]) == (268.02, 40.70)
    assert got["negotiated"]["Cipher"] == "TLS_AES_128_GCM_SHA256"
    assert measure.H2LOAD_DATA.search(H2LOAD_OUT).group(1) == "637850"  # the DATA bytes
    # a fixed-count run (-n, the check after each run) finishes in ms
    short = H2LOAD_OUT.replace("finished in 3.01s, 14905.00", "finished in 45.21ms, 28311.40")
    assert measure.parse_h2load(short, "h2")["rps"] == 28311.40


@pytest.mark.parametrize("edit, message", [
    (("Application protocol: h2\n", "Application protocol: http/1.1\n"), "spoke 'http/1.1'"),
    (("0 failed, 0 errored", "2 failed, 2 errored"), "h2load: requests"),
    (("0 timeout", "1 timeout"), "h2load: requests"),
    (("0 4xx, 0 5xx", "0 4xx, 3 5xx"), "status codes"),
    (("finished in", "stopped in"), "no summary"),
])
def test_h2load_summary_refuses_what_is_not_a_clean_h2_run(edit, message):
    with pytest.raises(RuntimeError, match=message):
        measure.parse_h2load(H2LOAD_OUT.replace(*edit), "h2")
    with pytest.raises(RuntimeError, match="not h2c"):
        measure.parse_h2load(H2LOAD_OUT, "h2c")


def test_render_h2_shows_every_part():
    runs = [run_("skirr-h2c", 0, 20), run_("skirr", 0, 25, streams=None),
            run_("hypercorn-h2c", 0, 200), run_("nginx-h2c", 0, 10),
            run_("granian-h2c", 0, 30, ok=False)]
    t = {"runs": runs, "not_measured": {"peregrine-h2c": "failed the start check: x"},
         "config": {"rounds": 1, "rows": [["raw_get", 64, 10]], "servers": ["skirr-h2c"],
                    "baselines": ["skirr"]}}
    L = []
    report.render_h2(L, t, {"duration": 5, "warmup": 1})
    text = "\n".join(L)
    assert "- not measured: **peregrine-h2c**: failed the start check: x" in text
    assert "| raw_get | 64 | 10 | h2c | skirr-h2c | 50,000 | 50,000–50,000 | 20.0 (20.0–20.0) |" in text
    assert "| raw_get | 64 | – (wrk) | HTTP/1.1 | skirr | 40,000 |" in text
    assert "| raw_get | 64 | 10 | h2c | granian-h2c FAILED 1/1 |" in text
    assert "↳ granian-h2c failed: `RuntimeError: boom`" in text
    assert "| raw_get | 64 | 10 | hypercorn-h2c | 10.000 (10.000–10.000) | 1/1 | met |" in text
    assert "| raw_get | 64 | 10 | granian-h2c | – | 0/1 | unproven |" in text
    assert "| raw_get | 64 | 10 | h2c | 2.000 (2.000–2.000) | 1/1 |" in text
    assert ("| raw_get | 64 | 10 | h2c | 20.0 (20.0–20.0) | 25.0 (25.0–25.0) | "
            "0.800 (0.800–0.800) | 1/1 | met |") in text
    assert "Not in this run (so the target is unproven against them): peregrine-h2c." in text
    assert "FAILED" not in text.split("### Throughput")[0]
    t["not_measured"]["skirr-h2"] = "failed the start check: exited with 2"
    L = []
    report.render_h2(L, t, {"duration": 5, "warmup": 1})
    assert ("**skirr could not be measured here (skirr-h2): this run FAILED, and every target "
            "that needs it is MISSED.**") in "\n".join(L)
    # in a row: skirr, the peers, nginx, then skirr's HTTP/1.1 baseline
    order = [text.index(f"| {s}") for s in ("skirr-h2c |", "granian-h2c FAILED", "hypercorn-h2c |",
                                             "nginx-h2c |", "skirr |")]
    assert order == sorted(order)
