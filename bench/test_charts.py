"""The report's charts (bench/harness/charts.py, draw.py) drawn from a synthetic run folder.

Run before a matrix is measured (`make bench`, `make bench-quick`) and by hand:
`.venv/bin/python -m pytest bench/test_charts.py -q`. The run folder is written in tmp_path as
matrix.py writes it (results.json with rows of measure.py's fields), re-rendered as `run.py report`
does, and the PNGs checked: the files expected and no others, a PNG's signature and exact pixel
size (its IHDR chunk, and matplotlib's reading of it in the charts' venv), the markdown's image
links exactly those files; and the line a chart that is not drawn gets instead (no data for it,
no matplotlib). Pixel values are not checked. The first run makes bench/.venv-charts (matplotlib
from PyPI, about 30 s).
"""
from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import venv
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import charts, report  # noqa: E402

pytestmark = pytest.mark.timeout(600)  # the first run installs matplotlib into the charts' venv

ALL = ["cpu-per-request.png", "rps-vs-connections.png", "fixed-rate-latency.png"]
LINK = re.compile(r"!\[[^\]]*\]\(([^)]+)\)")


def meta(rounds):
    """A run's metadata as matrix.describe_setup() records it."""
    return {
        "date": "2026-12-01T10:00:00+00:00", "profile": "quick", "label": "quick",
        "commit": "0" * 40, "machine": {"cpu": "Test CPU", "cores": 2, "kernel": "6.1",
                                        "os": "Debian", "memory_gib": 8.0, "governor": "n/a",
                                        "loadavg_at_start": ["0.10", "0.20", "0.30"]},
        "interpreter": {"skirr": "3.11.7 /usr/bin/python3.11", "peers": "3.11.7 /usr/bin/python3.11"},
        "versions": {"skirr-venv": {"skirr": "0.1.0"}, "peers-venv": {"uvicorn": "0.54.0"},
                     "wrk": "wrk 4.1.0", "h2load": "h2load nghttp2/1.52.0", "nginx": "nginx/1.22.1",
                     "cc": "cc 12.2.0"},
        "config": {"servers": ["skirr", "uvicorn-httptools", "nginx"], "rows": [],
                   "rounds": rounds, "duration": 3, "warmup": 1},
        "install": {}, "not_measured": {}, "seed": 1,
    }


def run_row(server, wl, conns, rnd, rps, cpu, ok=True):
    """One throughput run as measure.measure_row() writes it (its "round" added by the matrix)."""
    row = {"server": server, "workload": wl, "conns": conns, "ok": ok, "error": None,
           "pinned": True, "loadavg": "0.50", "round": rnd}
    if not ok:
        row["error"] = "RuntimeError: wrk reported errors {'connect': 0, 'read': 3}"
        return row
    n = int(rps * 3)
    row.update(process_cpu_s=[cpu * n / 1e6], requests=n, rps=rps,
               errors={"connect": 0, "read": 0, "write": 0, "timeout": 0, "status": 0},
               p50_ms=0.5, p99_ms=1.5, max_ms=4.0, server_cpu_s=cpu * n / 1e6,
               cpu_us_per_req=cpu, server_util=0.95, gen_cpu=0.6, client_bound=False,
               other_cpu0=0.01, steal_cpu0=0.0, gen_us_per_req=5.0,
               client_softirq_us_per_req=1.0, rss_mib=24.0, pss_mib=18.0)
    return row


def fixed_row(server, wl, conns, pct, base_ms, ok=True):
    """One fixed-rate run as measure.measure_fixed() writes it."""
    row = {"server": server, "workload": wl, "conns": conns, "pct": pct, "ok": ok, "error": None}
    if not ok:
        row["error"] = "RuntimeError: h2load: 12 failed (0 errored, 12 non-2xx), 0 timed out"
        return row
    row.update(offered_rps=5000.0, achieved_rps=4999.0, requests=40000, failed=0, errored=0,
               timeout=0, non2xx=0, p50_ms=base_ms, p90_ms=base_ms * 2, p99_ms=base_ms * 4,
               p999_ms=base_ms * 6, max_ms=base_ms * 9, wall_s=9.1, cpu_us_per_req=12.0)
    return row


SERVERS = {"skirr": (90000, 10.0), "uvicorn-httptools": (38000, 26.0), "nginx": (120000, 7.0)}


def result(rows, fixed, rounds=2):
    """A run's results.json: every server at every (workload, conns) row in every round (nginx
    not at post_4k: peers.py has it serve no POST), one failed round of uvicorn at the last row."""
    runs = []
    for rnd in range(rounds):
        for wl, conns in rows:
            for s, (rps, cpu) in SERVERS.items():
                if s == "nginx" and wl == "post_4k":
                    continue
                failed = s == "uvicorn-httptools" and (wl, conns) == rows[-1] and rnd == 1
                runs.append(run_row(s, wl, conns, rnd, rps * (1 + rnd / 50) / (1 + conns / 512),
                                    cpu * (1 + rnd / 20), ok=not failed))
    return {"meta": meta(rounds), "idle": {}, "runs": runs, "app_cpu": {}, "fixed_rate": fixed,
            "streaming": [], "workers": [], "costs": [], "ws": [], "ws_not_measured": {}}


def write_run(tmp_path, res, name="20261201-100000-quick"):
    """The run folder as matrix.run() leaves it: runs.json and results.json."""
    d = tmp_path / "results" / name
    d.mkdir(parents=True)
    (d / "runs.json").write_text(json.dumps(res["runs"], indent=1))
    (d / "results.json").write_text(json.dumps(res, indent=1))
    return d


def png_size(path):
    """(width, height) from a PNG's signature and IHDR chunk; AssertionError if it is not one."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert (length, kind) == (13, b"IHDR")
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def charts_py():
    py, why = charts.charts_python()
    assert py, f"the charts' venv could not be made: {why}"
    return py


FULL_ROWS = [("raw_get", 16), ("raw_get", 64), ("post_4k", 64)]
FULL_FIXED = ([fixed_row(s, "raw_get", 64, 50, ms) for s, ms in
               (("skirr", 0.4), ("uvicorn-httptools", 1.1), ("nginx", 0.2))]
              + [fixed_row(s, "post_4k", 64, 50, ms) for s, ms in
                 (("skirr", 0.5), ("uvicorn-httptools", 1.3))]
              + [fixed_row("uvicorn-httptools", "post_4k", 64, 75, 0, ok=False)])


def test_every_chart_drawn_beside_report_and_summary(tmp_path, charts_py):
    run = write_run(tmp_path, result(FULL_ROWS, FULL_FIXED))
    summary = tmp_path / "bench" / "RESULTS.md"
    summary.parent.mkdir()
    report.rerender(run, summary)

    # The run's report embeds its charts from its own folder, the summary from charts/ beside it.
    md = (run / "report.md").read_text()
    assert LINK.findall(md) == ALL
    assert LINK.findall(summary.read_text()) == [f"charts/{f}" for f in ALL]
    assert "Chart not drawn" not in md
    assert md.index("## Charts") < md.index("## Throughput")
    assert sorted(p.name for p in run.glob("*.png")) == sorted(ALL)
    assert sorted(p.name for p in (summary.parent / "charts").glob("*.png")) == sorted(ALL)

    # 12 in at 100 dpi wide; 1.2 in of header + 3.4 in per row of facets + 0.16 in per footnote
    # line past the first high: CPU per request in one row (c16: raw_get; c64: raw_get, post_4k),
    # req/s in one (raw_get; post_4k has one connection count), fixed rates in two (raw_get c64,
    # post_4k c64) with a footnote of two lines (it names the failed run).
    want = {"cpu-per-request.png": (1200, 460), "rps-vs-connections.png": (1200, 460),
            "fixed-rate-latency.png": (1200, 816)}
    for f, wh in want.items():
        assert png_size(run / f) == wh, f
        assert (summary.parent / "charts" / f).read_bytes() == (run / f).read_bytes()
    # Drawn again from the same results: the same bytes (no date or version in the files).
    first = {f: (run / f).read_bytes() for f in ALL}
    report.rerender(run)
    assert {f: (run / f).read_bytes() for f in ALL} == first
    code = ("import sys, matplotlib.image as im\n"
            "for p in sys.argv[1:]: print(im.imread(p).shape[:2])")
    out = subprocess.run([charts_py, "-c", code, *(str(run / f) for f in want)],
                         capture_output=True, text=True, check=True).stdout.split("\n")[:3]
    assert out == [f"({h}, {w})" for w, h in want.values()]


def test_another_interpreters_summary_keeps_its_own_charts(tmp_path, charts_py):
    # make bench-targets writes bench/RESULTS-<X.Y>.md: its charts must not replace RESULTS.md's.
    bench = tmp_path / "bench"
    bench.mkdir()
    main = write_run(tmp_path, result(FULL_ROWS, FULL_FIXED))
    report.rerender(main, bench / "RESULTS.md")
    first = {f: (bench / "charts" / f).read_bytes() for f in ALL}
    other = write_run(tmp_path, result(FULL_ROWS[:2], []), name="20261201-110000-targets")
    report.rerender(other, bench / "RESULTS-3.12.md")
    assert LINK.findall((bench / "RESULTS-3.12.md").read_text()) == [
        "charts/RESULTS-3.12/cpu-per-request.png", "charts/RESULTS-3.12/rps-vs-connections.png"]
    assert sorted(p.name for p in (bench / "charts" / "RESULTS-3.12").iterdir()) == [
        "cpu-per-request.png", "rps-vs-connections.png"]
    assert {f: (bench / "charts" / f).read_bytes() for f in ALL} == first
    assert LINK.findall((bench / "RESULTS.md").read_text()) == [f"charts/{f}" for f in ALL]


def test_missing_data_one_line_each(tmp_path, charts_py, capsys):
    # One connection count, no fixed-rate rows: only the CPU chart has data.
    run = write_run(tmp_path, result([("raw_get", 64), ("post_4k", 64)], []))
    (run / "fixed-rate-latency.png").write_bytes(b"stale")  # an older rendering's
    md = report.rerender(run)
    assert LINK.findall(md) == ["cpu-per-request.png"]
    assert [p.name for p in run.glob("*.png")] == ["cpu-per-request.png"]
    assert png_size(run / "cpu-per-request.png") == (1200, 460)
    section = md[md.index("## Charts"):md.index("## Targets")]  # the Targets section follows
    assert section == (
        "## Charts\n\n"
        "![Server CPU per request by workload and connections](cpu-per-request.png)\n\n"
        "- Chart not drawn: requests per second against connections (`rps-vs-connections.png`): "
        "every workload was measured at one connection count (c64); req/s against connections "
        "needs two or more\n\n"
        "- Chart not drawn: latency percentiles at fixed rates (`fixed-rate-latency.png`): this "
        "run has no fixed-rate rows\n\n")
    err = capsys.readouterr().err
    assert "chart not drawn: fixed-rate-latency.png: this run has no fixed-rate rows" in err


def test_failed_fixed_rows_only(tmp_path, charts_py):
    run = write_run(tmp_path, result(FULL_ROWS, [fixed_row("skirr", "raw_get", 64, 50, 0, ok=False)]))
    md = report.rerender(run)
    assert LINK.findall(md) == ALL[:2]
    assert ("- Chart not drawn: latency percentiles at fixed rates (`fixed-rate-latency.png`): no "
            "fixed-rate run succeeded") in md.splitlines()


def test_without_matplotlib_the_report_still_renders(tmp_path):
    bare = tmp_path / "bare-venv"
    venv.EnvBuilder(with_pip=False).create(bare)
    py = str(bare / "bin" / "python")
    res = result(FULL_ROWS, FULL_FIXED)
    out = tmp_path / "run"
    out.mkdir()
    md, _ = report.write_report(res, out, charts_python=py)
    assert LINK.findall(md) == []
    assert list(out.glob("*.png")) == []
    why = f"matplotlib is not installed in {py} (No module named 'matplotlib')"
    assert [l for l in md.splitlines() if l.startswith("- Chart not drawn")] == [
        f"- Chart not drawn: server CPU per request by workload and connections "
        f"(`cpu-per-request.png`): {why}",
        f"- Chart not drawn: requests per second against connections (`rps-vs-connections.png`): "
        f"{why}",
        f"- Chart not drawn: latency percentiles at fixed rates (`fixed-rate-latency.png`): {why}",
    ]
    assert "## Throughput" in md  # the rest of the report is there


def test_part_alone_has_no_charts_section():
    res = result([], [])
    res["meta"]["profile"] = "ws"
    assert charts.chart_specs(res, {}) == {}
    assert charts.markdown({}) == []


def test_servers_keep_their_order_and_colour():
    assert charts.server_order(["nginx", "limit-c", "granian", "uvicorn-httptools", "skirr"]) == [
        "skirr", "uvicorn-httptools", "granian", "limit-c", "nginx"]
    assert charts.color("skirr") == "#d62728"
    assert charts.color("not-a-server") == charts.color("not-a-server")


def test_footnotes_name_what_is_left_out():
    res = result(FULL_ROWS, FULL_FIXED + [
        {"server": "uvicorn-h11", "workload": "raw_get", "conns": 64, "pct": None, "ok": False,
         "error": "RuntimeError: not ready after 30s"}])
    agg = report.aggregate(res["runs"], 2)
    rps, why = charts.rps_chart(agg, 2)
    assert why is None
    assert rps["footnote"] == ("Points: median req/s over rounds; bars: min–max; dashed: the "
                               "limits. Not shown (one connection count): post_4k c64.")
    lat, why = charts.latency_chart(report.aggregate_fixed(res["fixed_rate"]))
    assert why is None
    assert lat["footnote"] == (
        "h2load --rps; each point the median over rounds; the offered rate is the load's share "
        "of each server's own median req/s, so servers are offered different absolute rates. "
        "Failed,\nnot shown: uvicorn-httptools post_4k c64 at 75%; uvicorn-h11 raw_get c64 (did "
        "not start).")
    assert [[f["title"] for f in row] for row in lat["rows"]] == [
        ["raw_get, 64 connections, 50% load"], ["post_4k, 64 connections, 50% load"]]
    assert [s["label"] for s in lat["rows"][0][0]["series"]] == ["skirr", "uvicorn-httptools",
                                                                 "nginx"]


def test_fixed_rate_rounds_are_medians_with_the_p99_verdict():
    # Three rounds each of skirr and uvicorn at 50% (uvicorn's second failed) and of nginx (a
    # limit: in the table, not in the verdict); skirr's p99 per round 1.6, 4.0, 2.0 ms.
    fixed = []
    for rnd, (mine, theirs) in enumerate(((0.4, 0.3), (1.0, None), (0.5, 0.45))):
        fixed.append(dict(fixed_row("skirr", "raw_get", 64, 50, mine), round=rnd))
        fixed.append(dict(fixed_row("uvicorn-httptools", "raw_get", 64, 50, theirs or 0,
                                    ok=theirs is not None), round=rnd))
        fixed.append(dict(fixed_row("nginx", "raw_get", 64, 50, 0.1), round=rnd))
    agg = {r["server"]: r for r in report.aggregate_fixed(fixed)}
    assert agg["skirr"]["rounds"] == 3 and agg["skirr"]["rounds_ok"] == 3
    assert (agg["skirr"]["p50_ms"], agg["skirr"]["p99_ms"]) == (0.5, 2.0)
    assert (agg["skirr"]["p99_min"], agg["skirr"]["p99_max"]) == (1.6, 4.0)
    assert (agg["uvicorn-httptools"]["rounds_ok"], agg["uvicorn-httptools"]["p99_ms"]) == (2, 1.5)
    assert agg["uvicorn-httptools"]["error"].startswith("RuntimeError: h2load: 12 failed")
    [(w, c, pct, mine, lower)] = report.fixed_verdicts(list(agg.values()))
    assert (w, c, pct, mine["server"], [r["server"] for r in lower]) == (
        "raw_get", 64, 50, "skirr", ["uvicorn-httptools"])

    lat, why = charts.latency_chart(list(agg.values()))
    assert why is None
    assert {s["label"]: s["y"] for s in lat["rows"][0][0]["series"]} == {  # p50 p90 p99 p99.9
        "skirr": [0.5, 1.0, 2.0, 3.0], "uvicorn-httptools": [0.375, 0.75, 1.5, 2.25],
        "nginx": pytest.approx([0.1, 0.2, 0.4, 0.6])}

    L = []
    report.render_fixed(L, list(agg.values()))
    assert L[4:] == [
        "| raw_get | 64 | nginx | 50% | 3/3 | 5,000 | 4,999 | 0.10 | 0.40 | 0.40–0.40 | 0.60 | 0.90 "
        "| 12.0 |",
        "| raw_get | 64 | skirr | 50% | 3/3 | 5,000 | 4,999 | 0.50 | 2.00 | 1.60–4.00 | 3.00 | 4.50 "
        "| 12.0 |",
        "| raw_get | 64 | uvicorn-httptools | 50% | 2/3 | 5,000 | 4,999 | 0.38 | 1.50 | 1.20–1.80 "
        "| 2.25 | 3.38 | 12.0 |",
        "\np99 against the ASGI peers (medians over the rounds that succeeded; the limits left "
        "out):\n",
        "- raw_get c64 at 50%: skirr 2.00 ms, above uvicorn-httptools (1.50 ms, 2/3 rounds)"]
    assert "the median over 3 rounds" in L[1]
    # Faster than every peer: said so.
    L = []
    report.render_fixed(L, [agg["skirr"], dict(agg["uvicorn-httptools"], p99_ms=2.5)])
    assert L[-1] == "- raw_get c64 at 50%: skirr 2.00 ms, no peer lower"


def _did_not_start(server, wl, conns, rnd):
    """A round in which the server did not start, as measure.measure_fixed() writes it."""
    return {"server": server, "workload": wl, "conns": conns, "pct": None, "ok": False,
            "error": "RuntimeError: did not answer within 10 s", "round": rnd}


def _skirr_missing_round_2():
    """skirr started in rounds 0 and 1, not in round 2; uvicorn in all three; at 50% load."""
    fixed = []
    for rnd in range(3):
        fixed.append(_did_not_start("skirr", "raw_get", 64, rnd) if rnd == 2
                     else dict(fixed_row("skirr", "raw_get", 64, 50, 0.4), round=rnd))
        fixed.append(dict(fixed_row("uvicorn-httptools", "raw_get", 64, 50, 0.3), round=rnd))
    return fixed


def test_fixed_rate_round_where_the_server_did_not_start_counts_as_a_failed_round():
    # Found by a review: the did-not-start round was a row of its own ("None%", 0/1) and the
    # load's row said 2/2.
    L = []
    report.render_fixed(L, report.aggregate_fixed(_skirr_missing_round_2()))
    rows = [line for line in L if line.startswith("| raw_get ")]
    assert [line.split(" | ")[2:5] for line in rows] == [["skirr", "50%", "2/3"],
                                                         ["uvicorn-httptools", "50%", "3/3"]]
    assert L[-1] == ("- raw_get c64 at 50%: skirr 1.60 ms, 2/3 rounds, above uvicorn-httptools "
                     "(1.20 ms)")
    # The chart draws skirr (the median of its two rounds) and does not call it not shown.
    lat, why = charts.latency_chart(report.aggregate_fixed(_skirr_missing_round_2()))
    assert why is None
    assert [s["label"] for s in lat["rows"][0][0]["series"]] == ["skirr", "uvicorn-httptools"]
    assert "Failed" not in lat["footnote"]
    # A server that never started keeps its one "did not start" row and footnote.
    never = [_did_not_start("uvicorn-h11", "raw_get", 64, rnd) for rnd in range(3)]
    agg = report.aggregate_fixed(_skirr_missing_round_2() + never)
    assert [(r["pct"], r["rounds"]) for r in agg if r["server"] == "uvicorn-h11"] == [(None, 3)]
    lat, why = charts.latency_chart(agg)
    assert lat["footnote"].replace("\n", " ").endswith(
        "Failed, not shown: uvicorn-h11 raw_get c64 (did not start).")


def test_fixed_rate_verdict_says_skirr_failed_rather_than_not_measured():
    # Found by a review: skirr ran every round and h2load saw failed requests in each; the
    # verdict said "skirr not measured".
    fixed = []
    for rnd in range(3):
        fixed.append(dict(fixed_row("skirr", "raw_get", 64, 50, 0.4, ok=False), round=rnd))
        fixed.append(dict(fixed_row("uvicorn-httptools", "raw_get", 64, 50, 0.3), round=rnd))
    L = []
    report.render_fixed(L, report.aggregate_fixed(fixed))
    assert L[-1] == ("- raw_get c64 at 50%: skirr failed in every round (3): RuntimeError: h2load: "
                     "12 failed (0 errored, 12 non-2xx), 0 timed out")
    # Not measured at all: said so.
    L = []
    report.render_fixed(L, report.aggregate_fixed(fixed[1::2]))
    assert L[-1] == "- raw_get c64 at 50%: skirr not measured"


def test_fixed_rate_responses_counted_by_the_probe_are_said_under_the_table():
    # hypercorn sends `HTTP/1.1 200 ` (no reason-phrase): measure.run_h2load counts its responses
    # by the probed status line (status_by_probe) instead of failing every round.
    fixed = []
    for rnd in range(2):
        fixed.append(dict(fixed_row("skirr", "raw_get", 64, 50, 0.4), round=rnd))
        fixed.append(dict(fixed_row("hypercorn", "raw_get", 64, 50, 0.3), status_by_probe=40000,
                          round=rnd))
    agg = {r["server"]: r for r in report.aggregate_fixed(fixed)}
    assert (agg["hypercorn"]["status_by_probe"], agg["skirr"]["status_by_probe"]) == (80000, 0)
    L = []
    report.render_fixed(L, list(agg.values()))
    assert L[6] == ("\nhypercorn: sends an empty reason-phrase (`HTTP/1.1 200 `, allowed by RFC "
                    "9112 §4), whose status h2load 1.52 cannot read: it logs 0 and counts the "
                    "response failed. Responses it read whole count as the 200 probed before the "
                    "loads; statuses during a load are not observed, and a load fails if the "
                    "server logged anything during it. One more request's status and body are "
                    "checked after each load.")
    assert L[-1] == "- raw_get c64 at 50%: skirr 1.60 ms, above hypercorn (1.20 ms)"
    # Without such responses, no note.
    L = []
    report.render_fixed(L, [agg["skirr"]])
    assert not any("reason-phrase" in line for line in L)
