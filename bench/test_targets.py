"""The report's "Targets" section (bench/harness/targets.py) judged from synthetic runs.

Run before a matrix is measured (`make bench`, `make bench-quick`) and by hand:
`.venv/bin/python -m pytest bench/test_targets.py -q`. Each case builds the rounds of a run as
matrix.py records them and checks the exact row a target gets: its verdict (`met` only when every
round agrees, a round skirr failed lost, `not in this run` without the row) and its figures
(per-round ratios of skirr ÷ the peer, the median with its range).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import report, targets  # noqa: E402
from test_charts import fixed_row, meta, run_row  # noqa: E402


def rounds(server, wl, conns, cpus, rpss=None):
    """`server`'s runs of a row, round i with CPU per request cpus[i] (µs) and req/s rpss[i]."""
    return [run_row(server, wl, conns, i, (rpss or [10000.0] * len(cpus))[i], cpu)
            for i, cpu in enumerate(cpus)]


def stream(server, rnd, ms, ok=True):
    return {"server": server, "round": rnd, "ok": ok, "first_chunk_ms": ms if ok else None}


def rows_of(runs, streams=(), fixed=(), app_cpu=None, target=None):
    """The section's table rows (target, row, wants, verdict, measured) and the whole section."""
    res = {"meta": meta(3), "runs": runs, "streaming": list(streams), "app_cpu": app_cpu or {},
           "fixed_rate": list(fixed)}
    agg = report.aggregate(runs, 3)
    fixed_agg = report.aggregate_fixed(res["fixed_rate"])
    L = []
    targets.render(L, res, fixed_agg, report.fixed_verdicts(fixed_agg),
                   report.efficiency_rows(res, agg))
    table = [tuple(c.strip() for c in line.strip("|").split("|")) for line in L
             if line.startswith("| ") and not line.startswith("| target")]
    return [r for r in table if target is None or r[0] == target], L


def test_cpu_within_095_of_peregrine_in_every_round_is_met():
    runs = (rounds("skirr", "fastapi_json", 64, [90.0, 93.0, 95.0])
            + rounds("peregrine", "fastapi_json", 64, [100.0, 100.0, 100.0]))
    rows, _ = rows_of(runs, target="1")
    assert rows[0] == ("1", "fastapi_json c64", "CPU ≤ 0.95× peregrine's", "met",
                       "0.93× (0.90–0.95); within it in 3/3 rounds")


def test_one_round_above_095_misses():
    runs = (rounds("skirr", "fastapi_json", 64, [90.0, 96.0, 90.0])
            + rounds("peregrine", "fastapi_json", 64, [100.0, 100.0, 100.0]))
    rows, _ = rows_of(runs, target="1")
    assert rows[0] == ("1", "fastapi_json c64", "CPU ≤ 0.95× peregrine's", "MISSED",
                       "0.90× (0.90–0.96); within it in 2/3 rounds")


def test_req_s_ahead_of_every_peer_names_each_peer_ahead_in_any_round():
    runs = (rounds("skirr", "fastapi_json", 256, [90.0] * 3, [100.0, 100.0, 100.0])
            + rounds("peregrine", "fastapi_json", 256, [95.0] * 3, [90.0, 110.0, 99.0])
            + rounds("granian", "fastapi_json", 256, [120.0] * 3, [80.0, 80.0, 50.0]))
    rows, _ = rows_of(runs, target="1")
    assert rows[3] == ("1", "fastapi_json c256", "req/s ahead of every peer", "MISSED",
                       "peregrine: skirr ahead in 2/3 rounds, its req/s 1.01× (0.91–1.11) of "
                       "peregrine's; the other 1 peer: ahead in every round")


def test_round_skirr_failed_is_a_round_lost():
    runs = (rounds("skirr", "raw_get", 64, [9.0, 9.0, 9.0])
            + rounds("uvicorn-httptools", "raw_get", 64, [30.0, 30.0, 30.0]))
    runs[1] = run_row("skirr", "raw_get", 64, 1, 0, 0, ok=False)
    rows, _ = rows_of(runs, target="3")
    assert rows[0] == ("3", "raw_get c64", "CPU below every peer's", "MISSED",
                       "uvicorn-httptools: skirr ahead in 2/3 rounds, its CPU 0.30× (0.30–0.30) of "
                       "uvicorn-httptools's")


def test_cpu_below_every_peer_names_the_nearest():
    runs = (rounds("skirr", "post_4k", 64, [10.0, 10.0, 10.0])
            + rounds("peregrine", "post_4k", 64, [11.0, 12.5, 10.5])
            + rounds("hypercorn", "post_4k", 64, [200.0] * 3)
            + rounds("limit-c", "post_4k", 64, [4.0] * 3))  # a limit is not a peer
    rows, _ = rows_of(runs, target="3")
    assert rows[2] == ("3", "post_4k c64", "CPU below every peer's", "met",
                       "ahead of all 2 peers in every round; nearest peregrine: skirr's CPU 0.91× "
                       "(0.80–0.95) of its")


def test_rows_the_run_lacks_are_not_in_this_run():
    rows, L = rows_of(rounds("skirr", "raw_get", 64, [9.0] * 3))
    assert rows[0] == ("1", "fastapi_json c64", "CPU ≤ 0.95× peregrine's", "not in this run",
                       "no peregrine row")
    assert ("1", "fastapi_json at 50%", "p99 no higher than any peer's", "not in this run",
            "no fixed-rate row") in rows
    assert ("3", "streaming", "first chunk before every peer's", "not in this run",
            "no streaming rounds") in rows
    assert "- 0 met, 0 missed, 19 not in this run." in L


def test_efficiency_at_the_bound_is_met_and_below_it_missed():
    runs = (rounds("skirr", "raw_get", 16, [5.0] * 3) + rounds("limit-c", "raw_get", 16, [3.25] * 3)
            + rounds("skirr", "raw_get", 64, [5.0] * 3) + rounds("nginx", "raw_get", 64, [3.2] * 3)
            + rounds("limit-c", "raw_get", 64, [3.4] * 3))
    rows, _ = rows_of(runs, app_cpu={"raw_get": {"us_per_req": 1.0}}, target="2")
    # (3.25 + 1.0) / 5.0 = 0.85; (min(3.2, 3.4) + 1.0) / 5.0 = 0.84.
    assert rows == [("2", "raw_get c16", "efficiency ≥ 0.85", "met", "0.85"),
                    ("2", "raw_get c64", "efficiency ≥ 0.85", "MISSED", "0.84"),
                    ("2", "raw_get c256", "efficiency ≥ 0.85", "not in this run",
                     "no limit or skirr row")]


def test_p99_at_half_load_against_the_peers():
    fixed = [fixed_row("skirr", "fastapi_json", 64, 50, 1.5),  # p99 = 4 × the base
             fixed_row("peregrine", "fastapi_json", 64, 50, 1.4),
             fixed_row("nginx", "fastapi_json", 64, 50, 0.1),  # a limit: left out
             fixed_row("skirr", "fastapi_json", 64, 25, 1.0),
             fixed_row("peregrine", "fastapi_json", 64, 25, 1.2),
             fixed_row("granian", "fastapi_json", 64, 25, 0.9),
             fixed_row("limit-c", "fastapi_json", 64, 25, 0.05)]  # a limit: left out
    rows, L = rows_of([], fixed=fixed, target="1")
    assert ("1", "fastapi_json c64 at 50%", "p99 no higher than any peer's", "MISSED",
            "skirr 6.00 ms; lower: peregrine 5.60 ms") in rows
    assert ("- Target 5, the latency batching can add, at the lowest load (fastapi_json c64 at "
            "25%): skirr p50 1.00 ms, p99 4.00 ms; the lowest of the ASGI peers: p50 0.90 ms "
            "(granian), p99 3.60 ms (granian)") in L


def test_streaming_first_chunk_round_by_round():
    streams = [stream("skirr", 0, 0.20), stream("peregrine", 0, 0.25),
               stream("skirr", 1, 0.30), stream("peregrine", 1, 0.25),
               stream("skirr", 2, 0.20, ok=False), stream("peregrine", 2, 0.25),
               stream("uvicorn-h11", 0, 0.5), stream("uvicorn-h11", 1, 0.6)]
    rows, _ = rows_of([], streams=streams, target="3")
    assert rows[-1] == ("3", "streaming", "first chunk before every peer's", "MISSED",
                        "peregrine: skirr ahead in 1/3 rounds, its first chunk 1.00× (0.80–1.20) "
                        "of peregrine's; the other 1 peer: ahead in every round")


def test_section_sits_before_the_throughput_table():
    res = {"meta": meta(3), "idle": {}, "app_cpu": {}, "fixed_rate": [], "streaming": [],
           "runs": rounds("skirr", "raw_get", 64, [9.0] * 3)
           + rounds("peregrine", "raw_get", 64, [10.0] * 3)}
    agg = report.aggregate(res["runs"], 3)
    md = report.render_report(res, agg, [], report.compare(res["runs"]), {})
    assert md.index("## Targets (issue 15, performance round 2)") < md.index("## Throughput")
    assert ("| 3 | raw_get c64 | CPU below every peer's | met | ahead of the one peer in every "
            "round; nearest peregrine: skirr's CPU 0.90× (0.90–0.90) of its |") in md.splitlines()
