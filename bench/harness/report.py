"""The matrix's report: rounds aggregated, peers compared with skirr, the markdown written.

Owns: the aggregation of a row's rounds (median req/s with min-max, median p99, median CPU per
request, peak RSS/PSS, summed errors), the per-round comparison of each peer with skirr and its
verdict ("ahead" only when every round agrees; CPU per request decides where either side was
client-bound), efficiency against the limit, the WebSocket rows' table (the same aggregation and
verdict per message), the TLS rows' section (tls.py's figures: CPU per request against each peer,
the TLS cost against nginx's, handshakes per CPU second, memory per idle connection), the HTTP/2
rows' section (h2.py's figures: CPU per request against each peer and nginx, HTTP/2 against
HTTP/1.1), bench/SCALE.md (the scale rows, issue 37: scale.py's figures and verdicts, the churn
profile's shares from perf.py) and RESULTS.md's Scale section (a summary of it between markers,
which the matrix's rewrite of RESULTS.md carries over), the Targets
section (targets.py judges it), and the markdown of report.md
and bench/RESULTS.md (LEVERS.md appended) with its charts embedded (charts.py draws them beside
it: in the run folder, and in summary_charts() beside the summary), rendered from a run's
results.json alone so `run.py report` can redo it.

Never: starts a server, runs a load generator or reads /proc; it reads only a run's results and
LEVERS.md, so re-rendering an old run gives the same report.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from . import charts, h2, perf, scale, targets, tls
from .costs import COSTS, TARGET_ACCESS
from .env import LEVERS
from .peers import SERVERS
from .workloads import workload_order

# skirr-workers-cpu-per-request (spec/workers.toml): 2 workers' CPU per request (manager and
# workers summed) at most this many times one process's, the median of per-round ratios.
TARGET_WORKERS = 1.5


def median(xs):
    return statistics.median(xs) if xs else None


def fmt(v, spec=",.0f", none="–"):
    return none if v is None else format(v, spec)


def aggregate(runs, rounds):
    agg = {}
    for r in runs:
        agg.setdefault((r["workload"], r["conns"], r["server"]), []).append(r)
    out = {}
    for key, rs in agg.items():
        ok = [r for r in rs if r["ok"]]
        e = {}
        for r in rs:
            for k, v in (r.get("errors") or {}).items():
                e[k] = e.get(k, 0) + v
        out[key] = {
            "rounds": len(rs), "rounds_ok": len(ok), "failed": len(ok) != len(rs),
            "errors_first": next((r["error"] for r in rs if r["error"]), None),
            "rps": median([r["rps"] for r in ok]),
            "rps_min": min((r["rps"] for r in ok), default=None),
            "rps_max": max((r["rps"] for r in ok), default=None),
            "p50_ms": median([r["p50_ms"] for r in ok if r.get("p50_ms") is not None]),
            "p99_ms": median([r["p99_ms"] for r in ok if r["p99_ms"] is not None]),
            "cpu_us_per_req": median([r["cpu_us_per_req"] for r in ok]),
            "rss_mib": max((r["rss_mib"] for r in ok), default=None),
            "pss_mib": max((r["pss_mib"] for r in ok), default=None),
            "errors": e, "gen_cpu": max((r["gen_cpu"] for r in ok), default=None),
            "client_bound": any(r["client_bound"] for r in ok),
            "server_util": median([r["server_util"] for r in ok]),
            "other_cpu0": max((r["other_cpu0"] for r in ok), default=None),
            "steal_cpu0": max((r["steal_cpu0"] for r in ok), default=None),
            "pinned": all(r.get("pinned", True) for r in ok),
            "gen_us_per_req": median([r["gen_us_per_req"] for r in ok
                                      if r.get("gen_us_per_req") is not None]),
            "client_softirq_us_per_req": median(
                [r["client_softirq_us_per_req"] for r in ok
                 if r.get("client_softirq_us_per_req") is not None]),
        }
    return out


# The fixed-rate rows' figures, each the median over a row's rounds that succeeded.
FIXED_FIGURES = ("offered_rps", "achieved_rps", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms",
                 "cpu_us_per_req")


def aggregate_fixed(fixed):
    """The fixed-rate runs, one row per (workload, conns, load, server) in the shape of one run
    (measure.measure_fixed()), each figure the median over its rounds that succeeded, with
    `rounds`, `rounds_ok`, `p99_min` and `p99_max`; `ok` when any round succeeded, `error` the
    first round's error. A round in which the server did not start (a run with no load) is a
    failed round of each load the server was measured at in other rounds; a server that never
    started keeps one row with no load. A run with no `round` key (older results) is a row of
    one round."""
    loads = {}  # (workload, conns, server) -> the loads it has runs at
    for r in fixed:
        if r.get("pct") is not None:
            loads.setdefault((r["workload"], r["conns"], r["server"]), set()).add(r["pct"])
    by = {}
    for r in fixed:
        key = (r["workload"], r["conns"], r["server"])
        for pct in ([r["pct"]] if r.get("pct") is not None else sorted(loads.get(key, [None]))):
            by.setdefault((r["workload"], r["conns"], pct, r["server"]), []).append(r)
    out = []
    for (w, c, pct, s), rs in by.items():
        ok = [r for r in rs if r["ok"]]
        row = {"server": s, "workload": w, "conns": c, "pct": pct, "ok": bool(ok),
               "error": next((r["error"] for r in rs if r.get("error")), None),
               "rounds": len(rs), "rounds_ok": len(ok)}
        if ok:
            row.update({k: median([r[k] for r in ok if r.get(k) is not None]) for k in FIXED_FIGURES})
            row["p99_min"] = min(r["p99_ms"] for r in ok)
            row["p99_max"] = max(r["p99_ms"] for r in ok)
            row["status_by_probe"] = sum(r.get("status_by_probe", 0) for r in ok)
        out.append(row)
    return out


def fixed_verdicts(fixed_agg, base="skirr"):
    """Per (workload, conns, load) that any server was measured at: (workload, conns, load,
    `base`'s row or None when it has none, [the ASGI peers' rows (the limits left out) whose
    median p99 is below `base`'s, lowest first; none when `base` failed every round])."""
    out = []
    for w, c, pct in sorted({(r["workload"], r["conns"], r["pct"]) for r in fixed_agg
                             if r["pct"] is not None}):
        rows = {r["server"]: r for r in fixed_agg
                if (r["workload"], r["conns"], r["pct"]) == (w, c, pct)}
        mine = rows.pop(base, None)
        lower = []
        if mine is not None and mine["ok"]:
            lower = sorted((r for s, r in rows.items() if r["ok"] and not charts.limit(s)
                            and r["p99_ms"] < mine["p99_ms"]), key=lambda r: r["p99_ms"])
        out.append((w, c, pct, mine, lower))
    return out


def compare(runs, base="skirr"):
    """Per row and peer: ratios to `base` within each round, and whether every round agrees."""
    by = {}
    for r in runs:
        if r["ok"]:
            by[(r["workload"], r["conns"], r["round"], r["server"])] = r
    out = {}
    keys = {(w, c, s) for (w, c, _, s) in by if s != base}
    for w, c, s in sorted(keys):
        ratios, cpu_ratios, wins, losses, n = [], [], 0, 0, 0
        for (w2, c2, rnd, s2), r in by.items():
            if (w2, c2, s2) != (w, c, s) or (w, c, rnd, base) not in by:
                continue
            k = by[(w, c, rnd, base)]
            n += 1
            ratios.append(r["rps"] / k["rps"])
            cpu_ratios.append(r["cpu_us_per_req"] / k["cpu_us_per_req"])
            if k["client_bound"] or r["client_bound"]:  # compare CPU per request there
                better = k["cpu_us_per_req"] < r["cpu_us_per_req"]
            else:
                better = k["rps"] > r["rps"]
            wins += better
            losses += not better
        if not n:
            continue
        if wins == n:
            verdict = f"{base} ahead in {n}/{n}"
        elif losses == n:
            verdict = f"{s} ahead in {n}/{n}"
        else:
            verdict = f"mixed ({base} ahead in {wins}/{n})"
        out[(w, c, s)] = {"rounds": n, "rps_ratio": median(ratios), "rps_ratio_min": min(ratios),
                          "rps_ratio_max": max(ratios), "cpu_ratio": median(cpu_ratios),
                          "verdict": verdict}
    return out


def skirr_failed(agg):
    """The rows where a skirr run failed (the matrix's exit status)."""
    return [k for k, a in agg.items() if a["failed"] and SERVERS[k[2]].kind == "skirr"]


def summary_charts(summary):
    """The folder of a summary's charts, relative to the summary's: charts/ beside RESULTS.md,
    charts/<its name without .md>/ beside any other (bench/RESULTS-3.12.md: charts/RESULTS-3.12/),
    so one interpreter's run does not redraw another's."""
    name = Path(summary).name
    return "charts" if name == "RESULTS.md" else f"charts/{Path(name).stem}"


def write_report(result, outdir, summary=None, charts_python=None):
    """Renders report.md into the run folder `outdir` (and `summary`, when given) from the run's
    results, with the charts drawn beside each (`outdir`/*.png; charts/*.png beside `summary`);
    `charts_python`: the interpreter that draws them (default: the charts' venv's). A Scale
    section the summary had (put_scale_section's, from `run.py scale`) is carried over into the
    rewritten one. Returns (the markdown, the aggregate)."""
    runs = result["runs"]
    agg = aggregate(runs, result["meta"]["config"]["rounds"])
    cmp = compare(runs)
    status = result["meta"]["not_measured"]
    fixed_agg = aggregate_fixed(result.get("fixed_rate") or [])
    drawn = charts.draw(charts.chart_specs(result, agg, fixed_agg), outdir, charts_python)
    report = render_report(result, agg, fixed_agg, cmp, status, charts.markdown(drawn))
    (Path(outdir) / "report.md").write_text(report)
    if summary:
        rel = summary_charts(summary)
        if drawn:
            charts.copy_drawn(drawn, outdir, Path(summary).parent / rel)
        text = render_report(result, agg, fixed_agg, cmp, status,
                             charts.markdown(drawn, f"{rel}/"))
        kept = scale_section(Path(summary).read_text()) if Path(summary).exists() else None
        Path(summary).write_text(put_scale_section(text, kept) if kept else text)
    return report, agg


def rerender(run_dir, summary=None):
    """Re-renders the report of a finished matrix run (and its charts) from its results.json;
    returns it."""
    result = json.loads((Path(run_dir) / "results.json").read_text())
    return write_report(result, run_dir, summary)[0]


def render_workers(L, wruns):
    """The workers row: 2 worker processes per server, unpinned, beside skirr with 1; with
    skirr-t2 in the runs (the threads profile) the thread workers are the base the others are
    compared with."""
    agg = aggregate(wruns, 0)
    base = "skirr-t2" if any(r["server"] == "skirr-t2" for r in wruns) else "skirr-w2"
    cmp = compare(wruns, base=base)
    if base == "skirr-t2":
        L.append("\n## Thread workers (free-threaded Python: 2 event loops in one process)\n")
        L.append("Not pinned, as the workers row: each server and `wrk -t2` share both CPUs. "
                 "skirr-t2: `--workers 2 --worker-kind thread` (the supervisor and one worker "
                 "process running 2 event loops, one per thread); skirr-w2: 2 worker processes; "
                 "skirr-w1: one process; granian-t2: granian's `--workers 2`, which its "
                 "free-threaded build runs as 2 threads of one process. fastapi_cpu's `def` "
                 "endpoint runs in FastAPI's thread pool, so on this Python even one process can "
                 "use both CPUs there. `per process`: each process's CPU seconds over the "
                 "measured interval in the median round, busiest first.\n")
    else:
        L.append("\n## Workers (2 worker processes, one per CPU)\n")
        L.append("Not pinned: each server (its manager and its 2 workers) and `wrk -t2` share both "
                 "CPUs, so wrk takes CPU the servers could use and req/s is lower than 2× the "
                 "pinned figure. CPU/request is summed over every process of the server (manager "
                 "and workers) and must not grow with the worker count: compare skirr-w2 with "
                 "skirr-w1 (plain skirr, one process, the same unpinned setup). `per process`: "
                 "each process's CPU seconds over the measured interval in the median round, "
                 "busiest first (both workers busy = the connections were spread).\n")
    L.append("| workload | conns | server | req/s | min–max | p99 ms | CPU µs/req | per process s "
             f"| RSS MiB | PSS MiB | errors | gen CPU | vs {base} (req/s ratio, verdict) |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    notes = []
    for w, c in workload_order({(w, c) for (w, c, _) in agg}):
        names = sorted((s for (w2, c2, s) in agg if (w2, c2) == (w, c)),
                       key=lambda s: (SERVERS[s].kind != "skirr", s))
        for s in names:
            a = agg[(w, c, s)]
            ok = sorted((r for r in wruns if r["ok"] and (r["workload"], r["conns"], r["server"])
                         == (w, c, s)), key=lambda r: r["rps"])
            procs = " / ".join(f"{x:.2f}" for x in ok[len(ok) // 2]["process_cpu_s"]) if ok else ""
            k = cmp.get((w, c, s))
            vs = (f"{k['rps_ratio']:.2f} ({k['rps_ratio_min']:.2f}–{k['rps_ratio_max']:.2f}); "
                  f"cpu {k['cpu_ratio']:.2f}; {k['verdict']}") if k else ""
            flag = f" FAILED {a['rounds'] - a['rounds_ok']}/{a['rounds']}" if a["failed"] else ""
            L.append(
                f"| {w} | {c} | {s}{flag} | {fmt(a['rps'])} | {fmt(a['rps_min'])}–"
                f"{fmt(a['rps_max'])} | {fmt(a['p99_ms'], '.2f')} | "
                f"{fmt(a['cpu_us_per_req'], '.1f')} | {procs} | {fmt(a['rss_mib'], '.1f')} | "
                f"{fmt(a['pss_mib'], '.1f')} | {sum(a['errors'].values())} | "
                f"{fmt(a['gen_cpu'] and a['gen_cpu'] * 100, '.0f')}% | {vs} |")
        ratios = workers_ratios(wruns, w, c)
        if ratios:
            met = "met" if median(ratios) <= TARGET_WORKERS else "MISSED"
            notes.append(f"- {w} c{c}, CPU/request 2 workers ÷ 1 (skirr): median "
                         f"{median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}); target ≤ "
                         f"{TARGET_WORKERS}: {met} (median), "
                         f"{sum(x <= TARGET_WORKERS for x in ratios)}/{len(ratios)} rounds within it")
    L.append("")
    L.extend(notes)
    fails = [(k, a["errors_first"]) for k, a in agg.items() if a["errors_first"]]
    for (w, c, s), e in fails:
        L.append(f"- failed: {w} c{c} {s}: `{e[:400]}`")


def workers_ratios(wruns, workload, conns):
    """Per round where both ran: skirr-w2's CPU per request ÷ skirr-w1's (the rule
    skirr-workers-cpu-per-request: CPU per request must not grow with the worker count)."""
    by = {(r["round"], r["server"]): r for r in wruns
          if r["ok"] and (r["workload"], r["conns"]) == (workload, conns)}
    return [by[(rnd, "skirr-w2")]["cpu_us_per_req"] / by[(rnd, "skirr-w1")]["cpu_us_per_req"]
            for rnd in sorted({rnd for rnd, _ in by})
            if (rnd, "skirr-w1") in by and (rnd, "skirr-w2") in by]


def cost_figures(cruns):
    """Per pair of COSTS: the rounds where both sides ran, the per-round ratio of CPU per request
    (on ÷ off) with its median and range, and each side's median CPU per request (µs) and req/s.
    Also "vs uvicorn": per round, skirr's CPU per request with its access log on ÷ uvicorn's."""
    by = {(r["round"], r["server"]): r for r in cruns if r["ok"]}
    out = {}
    pairs = [(what, off, on) for what, off, on in COSTS]
    pairs.append(("skirr access log vs uvicorn's", "uvicorn-access-log", "skirr-access-log"))
    for what, off, on in pairs:
        rounds = sorted({rnd for rnd, _ in by if (rnd, off) in by and (rnd, on) in by})
        if not rounds:
            continue
        ratios = [by[(r, on)]["cpu_us_per_req"] / by[(r, off)]["cpu_us_per_req"] for r in rounds]
        out[what] = {
            "off": off, "on": on, "rounds": len(rounds), "ratio": median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios), "ratios": ratios,
            "off_cpu": median([by[(r, off)]["cpu_us_per_req"] for r in rounds]),
            "on_cpu": median([by[(r, on)]["cpu_us_per_req"] for r in rounds]),
            "off_rps": median([by[(r, off)]["rps"] for r in rounds]),
            "on_rps": median([by[(r, on)]["rps"] for r in rounds]),
        }
    return out


def render_costs(L, cruns):
    """The cost rows: a feature on against off (issue 13)."""
    figs = cost_figures(cruns)
    L.append("\n## Cost of the access log and of metrics (raw_get, 64 connections)\n")
    L.append("Pinned as the throughput rows (server on CPU 0, `wrk -t1` on CPU 1), every server of "
             "the table once per round in a fresh random order; the access logs write to the "
             "server's log file (skirr's default line at INFO; uvicorn's `uvicorn.access` at INFO), "
             "and each run is checked to have logged a line per request (metrics: the endpoint "
             "counted every request). `ratio`: CPU per request on ÷ off within each round; the "
             "median and the range over rounds. The machine may be shared: compare ratios, not "
             "absolute figures, and mind the range.\n")
    L.append("| what | off | on | rounds | off CPU µs/req | on CPU µs/req | off req/s | on req/s "
             "| ratio (median) | min–max |")
    L.append("|---|---|---|---|---|---|---|---|---|---|")
    for what, f in figs.items():
        if what not in {c[0] for c in COSTS}:
            continue
        L.append(f"| {what} | {f['off']} | {f['on']} | {f['rounds']} | {f['off_cpu']:.2f} | "
                 f"{f['on_cpu']:.2f} | {fmt(f['off_rps'])} | {fmt(f['on_rps'])} | "
                 f"{f['ratio']:.3f} | {f['ratio_min']:.3f}–{f['ratio_max']:.3f} |")
    L.append("")
    acc, vs = figs.get("skirr access log"), figs.get("skirr access log vs uvicorn's")
    if acc:
        met = "met" if acc["ratio"] <= TARGET_ACCESS else "MISSED"
        L.append(f"- raw_get, access log on ÷ off (skirr): median {acc['ratio']:.3f} "
                 f"({acc['ratio_min']:.3f}–{acc['ratio_max']:.3f}); target ≤ {TARGET_ACCESS}: "
                 f"{met} (median), {sum(x <= TARGET_ACCESS for x in acc['ratios'])}/"
                 f"{acc['rounds']} rounds within it")
    if vs:
        met = "met" if vs["ratio"] < 1 else "MISSED"
        L.append(f"- raw_get, access log on: skirr {vs['on_cpu']:.2f} µs/req, uvicorn "
                 f"{vs['off_cpu']:.2f} µs/req; skirr below uvicorn: {met} "
                 f"({sum(x < 1 for x in vs['ratios'])}/{vs['rounds']} rounds)")
    fails = [r for r in cruns if not r["ok"]]
    for r in fails:
        L.append(f"- failed: round {r['round']} {r['server']}: `{(r['error'] or '')[:400]}`")


def render_client_side(L, agg):
    """file_1m's client side: over loopback a window-limited response is pushed by the client's
    ACKs from the client CPU's softirq, outside the server's CPU (bench/file_1m_regimes.py)."""
    keys = sorted(k for k in agg if k[0] == "file_1m" and agg[k]["cpu_us_per_req"]
                  and agg[k]["client_softirq_us_per_req"] is not None)
    if not keys:
        return
    L.append("\n## file_1m: the client side\n")
    L.append("Medians per request. A server whose client's receive windows stay small (high CPU 1 "
             "softirq) has its transmit pushed from CPU 1 and looks cheaper in its own CPU column; "
             "`bench/file_1m_regimes.py` measures with the window regime fixed.\n")
    L.append("| conns | server | server µs/req | CPU 1 softirq µs/req | wrk µs/req |")
    L.append("|---|---|---|---|---|")
    for w, c, s in keys:
        a = agg[(w, c, s)]
        L.append(f"| {c} | {s} | {a['cpu_us_per_req']:.1f} | {a['client_softirq_us_per_req']:.1f} "
                 f"| {fmt(a['gen_us_per_req'], '.1f')} |")


def table_rows(agg, cmp):
    """(workload, conns, server, aggregate, flags, vs) per table row: the rows in workload order,
    skirr first in each, then by median req/s (msgs/s) falling."""
    for w, c in workload_order({(w, c) for (w, c, _) in agg}):
        names = sorted((s for (w2, c2, s) in agg if (w2, c2) == (w, c)),
                       key=lambda s: (s != "skirr", -(agg[(w, c, s)]["rps"] or 0)))
        for s in names:
            a = agg[(w, c, s)]
            yield (w, c, s, a, *row_notes(a, cmp.get((w, c, s))))


def row_notes(a, k):
    """A table row's flags after the server's name (failed rounds, client-bound, not pinned) and
    its comparison with skirr `k` (from compare(), or None): (flags, vs), both strings."""
    flags = []
    if a["failed"]:
        flags.append(f"FAILED {a['rounds'] - a['rounds_ok']}/{a['rounds']}")
    if a["client_bound"]:
        flags.append("client-bound")
    if not a["pinned"]:
        flags.append("NOT PINNED")
    vs = (f"{k['rps_ratio']:.2f} ({k['rps_ratio_min']:.2f}–{k['rps_ratio_max']:.2f}); "
          f"cpu {k['cpu_ratio']:.2f}; {k['verdict']}") if k else ""
    return (" " + ", ".join(flags) if flags else ""), vs


def load_cells(a):
    """The errors, gen CPU and other/steal cells of a table row."""
    return (f"{sum(a['errors'].values())} | {fmt(a['gen_cpu'] and a['gen_cpu'] * 100, '.0f')}% | "
            f"{fmt(a['other_cpu0'] and a['other_cpu0'] * 100, '.0f')}%/"
            f"{fmt(a['steal_cpu0'] and a['steal_cpu0'] * 100, '.0f')}%")


def render_failures(L, agg):
    fails = [(k, a["errors_first"]) for k, a in agg.items() if a["errors_first"]]
    if fails:
        L.append("\nFailures (first per row):\n")
        for (w, c, s), e in fails:
            L.append(f"- {w} c{c} {s}: `{e[:400]}`")


def render_ws(L, wsruns, not_measured):
    """The WebSocket rows (issue 14): echo msgs/s, round-trip percentiles and server CPU per
    message, each peer against skirr within the same round."""
    agg = aggregate(wsruns, 0)
    cmp = compare(wsruns)
    L.append("\n## WebSocket echo (64 connections, closed loop)\n")
    L.append("Driven by `bench/ws_load.c` (C, epoll, one thread) pinned to CPU 1, the server on "
             "CPU 0, as the HTTP rows. Every connection completes the RFC 6455 handshake "
             "(101 and Sec-WebSocket-Accept checked; permessage-deflate not offered, so no server "
             "compresses), then sends one masked text frame, waits for its echo, compares it "
             "byte for byte and sends the next. Each run: 1 s warm-up (not counted), then the "
             "measured interval; msgs/s = echoes completed in it ÷ its length; p50/p99 = "
             "round-trip percentiles over every echo in it (median over rounds); CPU µs/msg = the "
             "server's utime+stime over the same interval (read when the generator marks its "
             "start and end) ÷ messages echoed. Echo checked exactly before and after every run; "
             "any generator error fails the run. `gen CPU`: the generator's share of CPU 1 "
             "(>= 90% = client-bound: compare CPU/msg). `other/steal`: as above.\n")
    if not_measured:
        for s, why in not_measured.items():
            L.append(f"- not measured: **{s}**: {why.splitlines()[-1] if why else '?'}")
        L.append("")
    L.append("| workload | conns | server | msgs/s | min–max | p50 ms | p99 ms | CPU µs/msg | RSS MiB "
             "| errors | gen CPU | other/steal | vs skirr (msgs/s ratio, verdict) |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for w, c, s, a, flags, vs in table_rows(agg, cmp):
        L.append(
            f"| {w} | {c} | {s}{flags} | {fmt(a['rps'])} | "
            f"{fmt(a['rps_min'])}–{fmt(a['rps_max'])} | {fmt(a['p50_ms'], '.2f')} | "
            f"{fmt(a['p99_ms'], '.2f')} | {fmt(a['cpu_us_per_req'], '.1f')} | "
            f"{fmt(a['rss_mib'], '.1f')} | {load_cells(a)} | {vs} |")
    render_failures(L, agg)


def render_parts(L, result):
    """The sections a run has beside the throughput rows: the workers row, the cost rows and the
    WebSocket rows (each alone in its own profile, or after the throughput table in full)."""
    if result.get("workers"):
        render_workers(L, result["workers"])
    if result.get("costs"):
        render_costs(L, result["costs"])
    if result.get("ws") or result.get("ws_not_measured"):
        render_ws(L, result.get("ws") or [], result.get("ws_not_measured") or {})
    if result.get("tls"):
        render_tls(L, result["tls"], result["meta"]["config"])
    if result.get("h2"):
        render_h2(L, result["h2"], result["meta"]["config"])


def _spread(xs, spec=".2f", unit=""):
    """"median (min–max)" of a list of figures, or "–"."""
    m, lo, hi = tls.spread(xs)
    if m is None:
        return "–"
    return f"{m:{spec}}{unit} ({lo:{spec}}–{hi:{spec}})"


def render_tls(L, t, cfg):
    """The TLS rows (issue 32): throughput with what each negotiated, CPU per request against
    each peer per round, skirr's TLS cost against nginx's, handshakes per CPU second, memory per
    idle TLS connection."""
    tc = t["config"]
    rounds = tc["rounds"]
    hc = tc["handshake"]
    L.append("\n## TLS (issue 32)\n")
    L.append(
        f"Every server serves TLS itself with the same certificate: {t['certificate']}. "
        "skirr-tls: `--ssl-keyfile/--ssl-certfile` (OpenSSL, its defaults); uvicorn-tls: "
        "httptools, `--ssl-keyfile/--ssl-certfile` (CPython's ssl); granian-tls: "
        "`--ssl-keyfile/--ssl-certificate` (rustls; TLS 1.3 only by default); hypercorn-tls: "
        "`--keyfile/--certfile` (CPython's ssl); peregrine-tls: `--tls-key/--tls-cert` "
        "(BoringSSL); nginx-tls: `ssl` on the listen socket, TLS 1.2 and 1.3, the TLS 1.2 list "
        "skirr uses by default, OpenSSL's TLS 1.3 suites, server order, tickets on. skirr and "
        "nginx in cleartext run the same rows in the same rounds: the TLS cost = TLS CPU per "
        "request minus cleartext CPU per request, per round. Each server's protocol and cipher "
        "are the defaults negotiated with the clients' OpenSSL default suites and are recorded "
        "per row (Python's ssl client with the suites wrk offers, for the throughput rows; "
        "h2load's own report for the handshake row). Pinned as the throughput rows (server on "
        f"CPU 0, `wrk -t1` / h2load on CPU 1), {rounds} rounds of {cfg['duration']} s after "
        f"{cfg['warmup']} s warm-up, a fresh server per run, servers in a fresh random order per "
        "row and round; status and exact body checked over TLS (the certificate verified) before "
        "and after every run. Keep-alive connections: each is handshaken once (in the warm-up), "
        "so the throughput rows measure the record layer.\n")
    if t["not_measured"]:
        for s, why in t["not_measured"].items():
            L.append(f"- not measured: **{s}**: {why.splitlines()[-1] if why else '?'}")
        L.append("")
    runs = t["runs"]
    agg = aggregate(runs, rounds)
    ratios = tls.peer_ratios(runs, rounds)
    L.append("### Throughput over TLS\n")
    L.append("| workload | conns | server | req/s | min–max | p99 ms | CPU µs/req (min–max) | "
             "RSS MiB | negotiated | errors | gen CPU | other/steal |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    neg = {}
    for r in runs:
        if r.get("tls"):
            neg[(r["workload"], r["conns"], r["server"])] = (
                f"{r['tls']['version']} {r['tls']['cipher']}")
    for w, c in workload_order({(w, c) for (w, c, _) in agg}):
        names = sorted((s for (w2, c2, s) in agg if (w2, c2) == (w, c)),
                       key=lambda s: (s != "skirr-tls", not SERVERS[s].tls, s))
        for s in names:
            a = agg[(w, c, s)]
            flags, _ = row_notes(a, None)
            cpus = [r["cpu_us_per_req"] for r in runs
                    if r["ok"] and (r["workload"], r["conns"], r["server"]) == (w, c, s)]
            L.append(f"| {w} | {c} | {s}{flags} | {fmt(a['rps'])} | {fmt(a['rps_min'])}–"
                     f"{fmt(a['rps_max'])} | {fmt(a['p99_ms'], '.2f')} | {_spread(cpus, '.1f')} | "
                     f"{fmt(a['rss_mib'], '.1f')} | {neg.get((w, c, s), 'cleartext')} | "
                     f"{load_cells(a)} |")
    render_failures(L, agg)

    L.append("\n### CPU per request: each peer's ÷ skirr's, per round (above 1: skirr ahead)\n")
    L.append("Target: skirr ahead of uvicorn, granian, hypercorn and peregrine (each with its own "
             "TLS) in every round, on every TLS row.\n")
    L.append("| workload | conns | peer | ratio median (min–max) | skirr ahead | verdict |")
    L.append("|---|---|---|---|---|---|")
    for (w, c, s), r in sorted(ratios.items(), key=lambda kv: (workload_order({kv[0][:2]}), kv[0])):
        L.append(f"| {w} | {c} | {s} | {_spread(r['ratios'], '.3f')} | {r['ahead']}/{rounds} | "
                 f"{r['verdict']} |")
    missing = [s for s in tls.TLS_PEERS if s in t["not_measured"]]
    if missing:
        L.append(f"\nNot in this run (so the target is unproven against them): "
                 f"{', '.join(missing)}.")

    costs = tls.tls_costs(runs, rounds)
    L.append(f"\n### TLS cost per request: skirr's ÷ nginx's (target ≤ {tls.TARGET_TLS_COST})\n")
    L.append("TLS cost = the TLS server's CPU µs per request minus the same server's cleartext "
             "CPU µs per request on the same row in the same round (skirr-tls − skirr, nginx-tls − "
             "nginx). `met`: the ratio within the target in every round.\n")
    L.append("| workload | conns | skirr TLS µs/req | nginx TLS µs/req | ratio median (min–max) | "
             "rounds | verdict |")
    L.append("|---|---|---|---|---|---|---|")
    for (w, c), r in sorted(costs.items(), key=lambda kv: workload_order({kv[0]})):
        L.append(f"| {w} | {c} | {_spread(r['skirr_us'], '.1f')} | {_spread(r['nginx_us'], '.1f')} "
                 f"| {_spread(r['ratios'], '.3f')} | {r['rounds_ok']}/{rounds} | {r['verdict']} |")

    hs = tls.handshake_figures(t["handshakes"], rounds)
    rate = hc["hs_rate"] * 1000 / hc["hs_period_ms"]
    L.append("\n### Full handshakes per second of server CPU\n")
    L.append(
        f"`h2load --h1 -t1 -r{hc['hs_rate']} --rate-period={hc['hs_period_ms']}ms "
        f"-c{hc['hs_total']} -n{hc['hs_total']}` on CPU 1: a fixed offered rate of {rate:,.0f} new "
        f"connections a second (the same for every server), {hc['hs_total']} connections after "
        f"{hc['hs_warmup']} of warm-up, one {hc['wl']} request each; h2load keeps no TLS session "
        "between its connections, so every one is a full handshake (checked against nginx with "
        "`$ssl_session_reused` in its access log: none reused; wrk, by contrast, resumes its "
        "session on every reconnect, so `wrk -H 'Connection: close'` would measure resumptions). "
        "Handshakes per CPU second = connections ÷ the server's utime+stime over h2load's run. "
        f"Targets: skirr ahead of every peer in every round, at least "
        f"{tls.TARGET_HANDSHAKES_NGINX}× nginx's in every round.\n")
    L.append("| server | handshakes per CPU s median (min–max) | conns/s achieved | negotiated "
             "(h2load) | skirr ÷ it, median (min–max) | verdict |")
    L.append("|---|---|---|---|---|---|")
    ach, hneg = {}, {}
    for r in t["handshakes"]:
        if r["ok"]:
            ach.setdefault(r["server"], []).append(r["rps"])
            n = r.get("h2load_negotiated") or {}
            hneg[r["server"]] = " ".join(v for v in (n.get("TLS Protocol"), n.get("Cipher"),
                                                     n.get("Server Temp Key")) if v)
    order = sorted({r["server"] for r in t["handshakes"]}, key=lambda s: (s != "skirr-tls", s))
    for s in order:
        v = hs["vs"].get(s)
        L.append(f"| {s} | {_spread(hs['per_server'].get(s, []), ',.0f')} | "
                 f"{_spread(ach.get(s, []), ',.0f')} | {hneg.get(s, '–')} | "
                 f"{_spread(v['ratios'], '.3f') if v else ''} | {v['verdict'] if v else ''} |")
    hfail = [r for r in t["handshakes"] if not r["ok"]]
    for r in hfail[:5]:
        L.append(f"- handshake r{r['round']} {r['server']} failed: `{r['error'][:300]}`")

    idle = tls.idle_figures(t["idle"])
    L.append(f"\n### Memory per idle connection ({tc['idle_conns']} connections)\n")
    L.append("The server's RSS (its processes summed) after one warm connection, then after "
             f"{tc['idle_conns']} more, each with its handshake done (TLS servers) and one raw_get "
             "answered, left open and idle (checked still open after the reading): (after − "
             "before) ÷ connections. The cleartext rows are the same servers without TLS.\n")
    L.append("| server | KiB per idle connection, median (min–max) |")
    L.append("|---|---|")
    for s in sorted(idle, key=lambda s: (not s.startswith("skirr"), not SERVERS[s].tls, s)):
        L.append(f"| {s} | {_spread(idle[s], '.1f')} |")
    for r in [r for r in t["idle"] if not r["ok"]][:5]:
        L.append(f"- idle r{r['round']} {r['server']} failed: `{r['error'][:300]}`")


PROTO_NAMES = {"h2c": "h2c", "h2": "h2 (TLS)", "h1": "HTTP/1.1"}
PROTO_ORDER = {"h2c": 0, "h2": 1, "h1": 2}
KIND_ORDER = {"skirr": 0, "peer": 1, "limit": 2}


def render_h2(L, t, cfg):
    """The HTTP/2 rows (issue 33): throughput per protocol and stream count beside skirr's
    HTTP/1.1 baselines, CPU per request against each peer per round, skirr against nginx (the
    limit), skirr's HTTP/2 against its HTTP/1.1 (multiplexing against keep-alive)."""
    hc = t["config"]
    rounds = hc["rounds"]
    L.append("\n## HTTP/2 (issue 33)\n")
    L.append(
        "Each server's own HTTP/2, pinned to CPU 0 as every row: h2c with prior knowledge (RFC "
        "9113 §3.3) on a cleartext port, and h2 over TLS chosen by ALPN (§3.2) with the run's "
        "test certificate (as the TLS rows). skirr-h2c/-h2: `--http auto` (`--ssl-keyfile/"
        "--ssl-certfile` for TLS); hypercorn-h2c/-h2: its defaults (h2c by the preface, ALPN h2 "
        "then http/1.1); granian-h2c/-h2: `--http auto`; peregrine-h2c/-h2: without `--no-http2`; "
        "nginx-h2c/-h2 (the limit): `listen ... http2` (`ssl http2` for TLS), the same answers "
        "as its HTTP/1.1 rows. Load: `h2load -t1 -cN -mM -D<s> --warm-up-time=<s>` on CPU 1 "
        "(N connections, M concurrent streams each; `--npn-list=h2` over TLS, so a server that "
        "does not choose h2 fails the run, and h2load must report the protocol the row names). "
        f"{cfg.get('warmup', '?')} s of warm-up, then {cfg.get('duration', '?')} s measured: "
        "req/s and requests are h2load's for its measured interval, CPU µs/req the server's "
        "utime+stime between h2load's marks of that interval (read as h2load prints them) ÷ the "
        "requests it counts. Any failed, errored, timed-out or non-2xx request fails the run; "
        "status, HTTP version 2 and the exact body are checked with curl before and after every "
        "run. skirr's HTTP/1.1 baselines (`skirr`: cleartext, `skirr-tls`: over TLS) are wrk "
        "runs on the same workload and connection count in the same round, in the same random "
        "order as the HTTP/2 runs. `mean ms`: h2load's mean time per request (no percentiles: "
        "h2load's per-request log would load its CPU). `gen CPU`: h2load's share of CPU 1 over "
        "its whole run (>= 90%: client-bound, compare CPU/request there).\n")
    if t["not_measured"]:
        for s, why in t["not_measured"].items():
            L.append(f"- not measured: **{s}**: {why.splitlines()[-1] if why else '?'}")
        L.append("")
    down = [s for s in t["not_measured"] if SERVERS[s].kind == "skirr"]
    if down:
        L.append(f"**skirr could not be measured here ({', '.join(down)}): this run FAILED, and "
                 "every target that needs it is MISSED.**\n")
    runs = t["runs"]
    L.append("### Throughput\n")
    L.append("| workload | conns | streams | protocol | server | req/s | min–max | CPU µs/req "
             "(min–max) | mean ms | RSS MiB | errors | gen CPU | other/steal |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    by_streams = {}
    for r in runs:
        by_streams.setdefault(r.get("streams"), []).append(r)
    lines = []
    for m, rs in by_streams.items():
        agg = aggregate(rs, rounds)
        for (w, c, s), a in agg.items():
            proto = SERVERS[s].h2 or "h1"
            cpus = [r["cpu_us_per_req"] for r in rs
                    if r["ok"] and (r["workload"], r["conns"], r["server"]) == (w, c, s)]
            means = [r["mean_ms"] for r in rs if r["ok"] and r.get("mean_ms") is not None
                     and (r["workload"], r["conns"], r["server"]) == (w, c, s)]
            flags, _ = row_notes(a, None)
            if proto == "h1":
                proto_cell = "HTTP/1.1" + (" TLS" if SERVERS[s].tls else "")
            else:
                proto_cell = PROTO_NAMES[proto]
            # per row: each stream count's h2c then h2 servers (skirr, peers, nginx), then
            # skirr's HTTP/1.1 baselines
            key = (workload_order({(w, c)}), c, m is None, m or 0, PROTO_ORDER[proto],
                   KIND_ORDER[SERVERS[s].kind], s)
            lines.append((key, f"| {w} | {c} | {m if m else '– (wrk)'} | {proto_cell} | {s}{flags} "
                               f"| {fmt(a['rps'])} | {fmt(a['rps_min'])}–{fmt(a['rps_max'])} | "
                               f"{_spread(cpus, '.1f')} | {fmt(median(means), '.2f')} | "
                               f"{fmt(a['rss_mib'], '.1f')} | {load_cells(a)} |"))
            if a["errors_first"]:
                lines.append((key + ("~",), f"| | | | | ↳ {s} failed: `{a['errors_first'][:200]}` "
                                             "| | | | | | | | |"))
    L.extend(line for _, line in sorted(lines, key=lambda kv: kv[0]))

    ratios = h2.peer_ratios(runs, rounds)
    L.append("\n### CPU per request: each peer's ÷ skirr's over the same protocol, per round "
             "(above 1: skirr ahead)\n")
    L.append("Target: skirr ahead of hypercorn, granian and peregrine (every peer that serves the "
             "row) in every round, h2c against skirr-h2c and h2 over TLS against skirr-h2.\n")
    L.append("| workload | conns | streams | peer | ratio median (min–max) | skirr ahead | verdict |")
    L.append("|---|---|---|---|---|---|---|")
    for (w, c, m, s), r in sorted(ratios.items(),
                                  key=lambda kv: (workload_order({kv[0][:2]}), kv[0])):
        L.append(f"| {w} | {c} | {m} | {s} | {_spread(r['ratios'], '.3f')} | "
                 f"{r['ahead']}/{rounds} | {r['verdict']} |")
    if not ratios:
        L.append("| (no peer in this run) | | | | | | |")
    missing = [s for s in h2.H2_PEERS if s in t["not_measured"]]
    if missing:
        L.append(f"\nNot in this run (so the target is unproven against them): "
                 f"{', '.join(missing)}.")

    ng = h2.nginx_ratios(runs, rounds)
    L.append("\n### skirr's CPU per request ÷ nginx's (the limit; no target)\n")
    L.append("| workload | conns | streams | protocol | skirr ÷ nginx, median (min–max) | rounds |")
    L.append("|---|---|---|---|---|---|")
    for (w, c, m, proto), r in sorted(ng.items(),
                                      key=lambda kv: (workload_order({kv[0][:2]}), kv[0])):
        L.append(f"| {w} | {c} | {m} | {PROTO_NAMES[proto]} | {_spread(r['ratios'], '.3f')} | "
                 f"{r['rounds_ok']}/{rounds} |")

    mux = h2.mux_ratios(runs, rounds, hc)
    L.append(f"\n### Multiplexing against keep-alive: skirr's HTTP/2 CPU per request ÷ its "
             f"HTTP/1.1's (target ≤ {h2.TARGET_MUX} at {h2.TARGET_MUX_STREAMS} streams)\n")
    L.append("Same workload and connection count, same round: skirr-h2c ÷ skirr (wrk, cleartext "
             "keep-alive), skirr-h2 ÷ skirr-tls (wrk over TLS). `met`: within the target in every "
             f"round; other stream counts are shown, not judged.\n")
    L.append("| workload | conns | streams | protocol | HTTP/2 µs/req | HTTP/1.1 µs/req | ratio "
             "median (min–max) | rounds | verdict |")
    L.append("|---|---|---|---|---|---|---|---|---|")
    for (w, c, m, proto), r in sorted(mux.items(),
                                      key=lambda kv: (workload_order({kv[0][:2]}), kv[0])):
        L.append(f"| {w} | {c} | {m} | {PROTO_NAMES[proto]} | {_spread(r['h2_us'], '.1f')} | "
                 f"{_spread(r['h1_us'], '.1f')} | {_spread(r['ratios'], '.3f')} | "
                 f"{r['rounds_ok']}/{rounds} | {r['verdict']} |")


def render_fixed(L, fixed_agg):
    """The fixed-rate table (medians over rounds, p99's range) and the p99 verdict of each load."""
    rounds = max(r["rounds"] for r in fixed_agg)
    L.append("\n## Fixed-rate latency (h2load --rps, HTTP/1.1)\n")
    L.append("Offered rate = the given share of the server's own median req/s above. Each figure "
             f"is the median over {rounds} round{'s' if rounds != 1 else ''} (a fresh server per "
             "round, servers in a fresh random order), p99's min–max beside it.\n")
    L.append("| workload | conns | server | load | rounds ok | offered | achieved | p50 ms "
             "| p99 ms | p99 min–max | p99.9 ms | max ms | CPU µs/req |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(fixed_agg, key=lambda r: (r["workload"], r["pct"] or 0, r["server"])):
        head = f"| {r['workload']} | {r['conns']} | {r['server']} | {r['pct']}% | " \
               f"{r['rounds_ok']}/{r['rounds']} | "
        if r["ok"]:
            L.append(head + f"{r['offered_rps']:,.0f} | {r['achieved_rps']:,.0f} | "
                     f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['p99_min']:.2f}–{r['p99_max']:.2f} "
                     f"| {r['p999_ms']:.2f} | {r['max_ms']:.2f} | {r['cpu_us_per_req']:.1f} |")
        else:
            L.append(head + f"FAILED: {r['error'][:200]} | | | | | | | |")
    probed = sorted({r["server"] for r in fixed_agg if r.get("status_by_probe")})
    if probed:
        L.append(f"\n{', '.join(probed)}: sends an empty reason-phrase (`HTTP/1.1 200 `, allowed "
                 "by RFC 9112 §4), whose status h2load 1.52 cannot read: it logs 0 and counts the "
                 "response failed. Responses it read whole count as the 200 probed before the "
                 "loads; statuses during a load are not observed, and a load fails if the server "
                 "logged anything during it. One more request's status and body are checked "
                 "after each load.")
    verdicts = fixed_verdicts(fixed_agg)
    if verdicts:
        L.append("\np99 against the ASGI peers (medians over the rounds that succeeded; the "
                 "limits left out):\n")

        def p99(r):
            short = f", {r['rounds_ok']}/{r['rounds']} rounds" if r["rounds_ok"] < r["rounds"] else ""
            return f"{r['p99_ms']:.2f} ms{short}"

        for w, c, pct, mine, lower in verdicts:
            head = f"- {w} c{c} at {pct}%: skirr"
            if mine is None:
                L.append(f"{head} not measured")
            elif not mine["ok"]:
                L.append(f"{head} failed in every round ({mine['rounds']}): "
                         f"{(mine['error'] or '')[:160]}")
            elif lower:
                L.append(f"{head} {p99(mine)}, above "
                         + ", ".join(f"{r['server']} ({p99(r)})" for r in lower))
            else:
                L.append(f"{head} {p99(mine)}, no peer lower")


def efficiency_rows(result, agg):
    """Per (workload, conns) with a limit row and the app's own CPU, per server that is not a
    limit: {workload, conns, limit, app, server, cpu, efficiency}, CPU figures in µs per request
    (medians over rounds). limit: the lowest of the limits' (limit-c, nginx); efficiency: (limit +
    app) ÷ the server's."""
    out = []
    for w, c in workload_order({(w, c) for (w, c, _) in agg}):
        lim = [a["cpu_us_per_req"] for (w2, c2, s), a in agg.items()
               if (w2, c2) == (w, c) and SERVERS[s].kind == "limit" and a["cpu_us_per_req"]]
        app = result["app_cpu"].get(w, {}).get("us_per_req")
        if not lim or app is None:
            continue
        for s in sorted(s for (w2, c2, s) in agg if (w2, c2) == (w, c) and SERVERS[s].kind != "limit"):
            cpu = agg[(w, c, s)]["cpu_us_per_req"]
            if cpu:
                out.append({"workload": w, "conns": c, "limit": min(lim), "app": app, "server": s,
                            "cpu": cpu, "efficiency": (min(lim) + app) / cpu})
    return out


def render_report(result, agg, fixed_agg, cmp, status, chart_lines=()):
    """The markdown report; `agg` and `fixed_agg`: the throughput and fixed-rate rows'
    aggregates (aggregate(), aggregate_fixed()); `chart_lines`: its charts section
    (charts.markdown()), after the header and before the tables."""
    meta = result["meta"]
    m = meta["machine"]
    cfg = meta["config"]
    L = []
    L.append(f"# skirr benchmark ({meta['profile']})\n")
    L.append(f"- Date: {meta['date']}; commit {meta['commit']}")
    L.append(f"- Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}, "
             f"kernel {m['kernel']}, governor {m['governor']}; load average at start "
             f"{' '.join(m['loadavg_at_start'])}")
    L.append(f"- Interpreter: skirr venv {meta['interpreter']['skirr']}; peers' venv "
             f"{meta['interpreter']['peers']}")
    v = meta["versions"]
    L.append(f"- Versions: skirr venv {json.dumps(v['skirr-venv'])}; peers {json.dumps(v['peers-venv'])}")
    L.append(f"- Tools: {v['wrk']}; {v['h2load']}; {v['nginx']}; {v['cc']}")
    L.append(f"- Server-order seed: {meta['seed']} (`--seed` repeats the order)")
    L.append(f"- Method: server and all its threads on CPU 0 (`taskset -c 0`), `wrk -t1` and h2load "
             f"on CPU 1; {cfg['rounds']} rounds of {cfg['duration']} s after {cfg['warmup']} s "
             "warm-up, a fresh server per run, servers in a fresh random order for every row of "
             "every round; status and exact body checked before and after every run. Req/s is "
             "the median over rounds (min–max), p99 the median of per-run wrk p99s, CPU the "
             "server's utime+stime (all its processes) over the measured interval per completed "
             "request; RSS/PSS the peak of its processes' sums. No p99 for pipelined_get: wrk's "
             "percentiles are broken under pipelining (they print 0). `client-bound`: wrk used >= 90% "
             "of its core (compare CPU/request there). `other/steal`: the largest share of CPU 0 "
             "used by anything but the server during a run, and taken by the hypervisor (noise "
             "from other work on the machine).")
    L.append("")
    if status:
        L.append("## Not measured\n")
        for s, why in status.items():
            L.append(f"- **{s}**: {why.splitlines()[-1] if why else '?'}")
        L.append("")
    L.extend(chart_lines)
    if not result["runs"]:  # one part alone (`--profile workers`, `costs` or `ws`)
        render_parts(L, result)
        return "\n".join(L)
    targets.render(L, result, efficiency_rows(result, agg), fixed_agg)
    L.append("## Throughput\n")
    L.append("| workload | conns | server | req/s | min–max | p99 ms | CPU µs/req | RSS MiB | PSS MiB "
             "| errors | gen CPU | other/steal | vs skirr (req/s ratio, verdict) |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for w, c, s, a, flags, vs in table_rows(agg, cmp):
        L.append(
            f"| {w} | {c} | {s}{flags} | {fmt(a['rps'])} | "
            f"{fmt(a['rps_min'])}–{fmt(a['rps_max'])} | {fmt(a['p99_ms'], '.2f')} | "
            f"{fmt(a['cpu_us_per_req'], '.1f')} | {fmt(a['rss_mib'], '.1f')} | "
            f"{fmt(a['pss_mib'], '.1f')} | {load_cells(a)} | {vs} |")
    render_failures(L, agg)
    sk = agg.get(("pipelined_get", 64, "skirr")), agg.get(("raw_get", 64, "skirr"))
    if all(sk) and sk[0]["rps"] and sk[1]["rps"]:
        L.append(f"\nskirr pipelined_get / raw_get at c64: {sk[0]['rps'] / sk[1]['rps']:.2f}×")

    L.append("\n## Efficiency against the limit\n")
    L.append("(limit CPU/request + the app's own CPU/request called directly) ÷ the server's "
             "CPU/request; the limit is the lower of limit-c and nginx in the same row.\n")
    L.append("| workload | conns | limit µs/req | app µs/req | server | server µs/req | efficiency |")
    L.append("|---|---|---|---|---|---|---|")
    for e in efficiency_rows(result, agg):
        L.append(f"| {e['workload']} | {e['conns']} | {e['limit']:.2f} | {e['app']:.2f} | "
                 f"{e['server']} | {e['cpu']:.2f} | {e['efficiency']:.2f} |")
    errs = {w: r["error"] for w, r in result["app_cpu"].items() if "error" in r}
    for w, e in errs.items():
        L.append(f"\napp CPU for {w} failed: `{e[-300:]}`")
    render_client_side(L, agg)
    render_parts(L, result)

    if fixed_agg:
        render_fixed(L, fixed_agg)

    if result["streaming"]:
        L.append("\n## Streaming (app waits 50 ms after the first chunk; "
                 f"{cfg['stream_samples']} sequential samples a round on one keep-alive "
                 "connection; medians)\n")
        L.append("| server | rounds ok | first chunk ms (median of round medians) | total ms |")
        L.append("|---|---|---|---|")
        by = {}
        for r in result["streaming"]:
            by.setdefault(r["server"], []).append(r)
        for s, rs in sorted(by.items()):
            ok = [r for r in rs if r["ok"]]
            if ok:
                L.append(f"| {s} | {len(ok)}/{len(rs)} | {median([r['first_chunk_ms'] for r in ok]):.3f} "
                         f"| {median([r['total_ms'] for r in ok]):.3f} |")
            else:
                L.append(f"| {s} | 0/{len(rs)} FAILED: {rs[0]['error'][:200]} | | |")

    L.append("\n## Idle memory (raw app, after one request)\n")
    L.append("| server | RSS MiB | PSS MiB | processes |")
    L.append("|---|---|---|---|")
    for s, r in result["idle"].items():
        if r["ok"]:
            L.append(f"| {s} | {r['rss_mib']:.1f} | {r['pss_mib']:.1f} | {r['processes']} |")
    L.append("")
    if LEVERS.exists():
        L.append("\n" + LEVERS.read_text().strip() + "\n")
    return "\n".join(L)


# ----------------------------------------------------------------------------------------------
# bench/SCALE.md (issue 37): the scale rows, from scale.py's figures and verdicts

SCALE_NAMES = {"nginx-scale": "nginx"}  # the servers' names in SCALE.md
SCALE_NOT_BUILT = {
    "churn": "Churn (a new connection per request, raw_get and fastapi_json at c64): CPU per "
             "request ahead of every peer in every round and at most 1.5x nginx's",
    "accept": "Churn: the accept path's share of skirr's CPU (a profile)",
    "fanout": "Fan-out (one publisher message to 1,000 and 5,000 WebSocket clients, 64 B and "
              "1 KiB): CPU per delivered message ahead of every peer in every round",
}


def render_scale(result, chart_lines=()):
    """bench/SCALE.md from a scale run's results.json: the method, a table per idle row and the
    churn rows' table, the verdicts (scale.verdicts, scale.churn_verdicts), what was not
    measured or not run, what is not built yet."""
    part, churn, meta = result.get("scale"), result.get("churn"), result["meta"]
    fan = result.get("fanout")
    m = meta["machine"]
    L = ["# Scale (issue 37)\n",
         f"Run {meta['started']}, skirr {meta['git']}, Python {meta['python']}; {m['cpu']}, "
         f"{m['cores']} CPUs, kernel {m['kernel']}, load average at start "
         f"{' '.join(m['loadavg_at_start'])}. Each row's servers in a fresh random order every "
         f"round (seed {meta['seed']})"
         + (f"; RLIMIT_NOFILE {(part or fan)['nofile']:,}" if part or fan else "") + ".\n"]
    names = {"scale": "the idle rows", "fanout": "the fan-out rows", "churn": "the churn rows"}
    for k, m in result.get("merged", {}).items():
        L.append(f"- **{names[k][0].upper() + names[k][1:]}** are from an earlier run: "
                 f"{m['started']}, skirr {m['git']} (bench/results/{m['run']}).")
    if result.get("merged"):
        L.append("")
    L.append("## How it is measured\n")
    body, verdicts = _scale_body(result)
    L.extend(body)
    L.append("## Targets\n")
    L.append("| target | verdict | figures |")
    L.append("|---|---|---|")
    for v in verdicts:
        L.append(f"| {v['target']} | **{v['verdict']}** | {v['detail']} |")
    L.append("")
    L.extend(chart_lines)
    return "\n".join(L) + "\n"


def _scale_body(result):
    """The scale report's parts (method and tables, idle, fan-out, churn) as lines, and every
    target row in the report's order: the parts' verdicts, then a "not built" row per part the
    run lacks."""
    part, fan, churn = result.get("scale"), result.get("fanout"), result.get("churn")
    L, verdicts = [], []
    if part:
        verdicts += _render_idle(L, part)
    if fan:
        verdicts += _render_fanout(L, fan)
    if churn:
        verdicts += _render_churn(L, churn)
    for key, why in SCALE_NOT_BUILT.items():
        if (key in ("churn", "accept") and churn) or (key == "fanout" and fan):
            continue
        verdicts.append({"target": why, "verdict": "not built", "detail": "not measured yet"})
    return L, verdicts


def _render_idle(L, part):
    """The idle rows' method and tables into L; returns their verdicts."""
    sp = part["config"]
    sp["rows"] = [tuple(r) for r in sp["rows"]]
    figs = scale.figures(part["rows"])
    L.extend([
         "- **Idle connections** (`bench/run.py scale`, `make bench-scale`): each server serves "
         "the same app files (bench/apps: `raw_apps:raw`, 13 bytes `Hello, world!`, for HTTP; "
         "`ws_apps:echo` for WebSocket), one process pinned to CPU 0 (nginx: a master and one "
         "worker). `bench/scale_client.c` (pinned to CPU 1) opens N connections, each bound to "
         "one of 64 source addresses, 127.0.1.1 to 127.0.1.64, in turn (`IP_BIND_ADDRESS_NO_PORT`: "
         "its port chosen at connect()), at most 128 "
         "opening at once; on each, one HTTP/1.1 keep-alive GET answered 200 with the exact body "
         "(Content-Length) and nothing more, or a WebSocket handshake answered 101 with the right "
         "Sec-WebSocket-Accept and `Upgrade: websocket`, or (the baseline rows) nothing at all: "
         "held once established; any other answer, a refused, reset or "
         "closed connection, or none within 30 s is an error counted by kind. Then they idle "
         "(nothing sent either way). Memory: RSS and PSS from /proc/PID/smaps_rollup summed over "
         "the server's processes, read 1 s after one checked connection (before), 1 s after the "
         "last connection is answered (held), and 1 s after the server has closed every one "
         "following the client's FINs (after: its descriptor count back to the start, waited "
         f"for at most {scale.CLOSE_WAIT_S:.0f} s). The cycle (open, hold, close) runs twice on "
         "the same server: the figures are the first's; RSS after the second against after the "
         "first tells memory kept for reuse (flat) from memory that grows with every cycle. "
         "KiB per connection = (held - before) / connections held. Before the client closes them "
         "each is checked still open (no EOF, reset or byte from the server). No leak: RSS after "
         f"at most {scale.LEAK_RATIO:.2f}x RSS before. Open time: the client's, from its first "
         "connect() to the last complete answer (seconds).",
         "- **Keep-alive and pings for these rows** (bench/harness/peers.py SCALE_FLAGS): skirr "
         "`--timeout-keep-alive 3600 --ws-ping-interval 0`; uvicorn (httptools) "
         "`--timeout-keep-alive 3600`; uvicorn `--ws websockets --ws-ping-interval 86400` (0 "
         "there means a ping at every turn, not none); uvicorn `--ws wsproto --ws-ping-interval "
         "0`; hypercorn `--keep-alive 3600`; peregrine `--keep-alive 3600000` (ms) "
         "`--ws-ping-interval 0 --max-connections 100000`; granian as in the other rows (no "
         "HTTP/1.1 idle timeout, no WebSocket pings); nginx as in the other rows with "
         "`worker_connections 65536`, `worker_rlimit_nofile 131072`, `keepalive_timeout 3600s`.",
         "- **Memory per connection in the verdicts** is the RSS growth; PSS is shown beside it "
         "(the same for one process; nginx's worker shares pages with its master).\n"
    ])
    L.append(f"- Idle rows: {sp['rounds']} round(s).")
    for key, why in part.get("skipped_rows", {}).items():
        mode, n = key.split()
        L.append(f"- **{mode} {int(n):,} connections**: {why}")
    for s, why in part["not_measured"].items():
        L.append(f"- **{SCALE_NAMES.get(s, s)}** not measured: {why[:300]}")
    L.append("")
    for mode, n in sp["rows"]:
        keys = [k for k in figs if k[:2] == (mode, n)]
        if not keys:
            continue
        what = {"http": "HTTP keep-alive connections, each after one request",
                "ws": "idle WebSocket connections",
                "tcp": "connections that have sent nothing (the baseline; no target)"}[mode]
        L.append(f"## {n:,} {what}\n")
        L.append("| server | KiB/conn RSS | KiB/conn PSS | open (s) | errors | RSS before / held / "
                 "after (MiB) | after ÷ before | leak | 2nd cycle: after ÷ 1st after |")
        L.append("|---|---:|---:|---:|---:|---|---:|---|---:|")
        for (_, _, s) in sorted(keys, key=lambda k: (charts.server_order([x[2] for x in keys])
                                                     .index(k[2]))):
            f = figs[(mode, n, s)]
            name = SCALE_NAMES.get(s, s)
            if f["kib_rss"] is None:
                L.append(f"| {name} | failed: {(f['error'] or f['first_error'] or '?')[:200]} "
                         "| | | | | | | |")
                continue
            rs = [r for r in part["rows"] if (r["mode"], r["n"], r["server"]) == (mode, n, s)
                  and r["ok"]]
            mib = " / ".join(fmt(median([r[k] for r in rs]), ".1f")
                             for k in ("rss_before_mib", "rss_held_mib", "rss_after_mib"))
            errs = str(f["errors"]) + (f" ({', '.join(f'{k} {v}' for k, v in f['error_kinds'].items())})"
                                       if f["error_kinds"] else "")
            leak = ("yes" if f["leak"] else "no" if f["leak"] is False else
                    f"unjudged: {f['not_closed']:,} still open {scale.CLOSE_WAIT_S:.0f} s after "
                    "the client closed them")
            L.append(f"| {name} | {f['kib_rss']:.2f} | {f['kib_pss']:.2f} | {f['open_s']:.2f} | "
                     f"{errs} | {mib} | {f['after_ratio']:.2f} | {leak} | "
                     f"{f['cycle_ratio']:.2f} |")
        L.append("")
    return scale.verdicts(figs, sp, part.get("skipped_rows"))


def _render_fanout(L, fan):
    """The fan-out rows' method and table into L; returns their verdicts."""
    fp = fan["config"]
    runs, rounds = fan["runs"], fp["rounds"]
    sizes = " and ".join(f"{x:,}" for x in fp["sizes"])
    L.append(
        "- **Fan-out** (`bench/run.py scale --rows fanout:N`): each server serves the same app "
        "(bench/apps: `ws_apps:fanout`, plain ASGI), one process pinned to CPU 0, with the idle "
        "rows' WebSocket flags (pings off, connection caps raised). `bench/fanout_client.c` "
        "(pinned to CPU 1) opens N subscriber WebSockets (source addresses spread as the idle "
        "rows'; each handshake checked, then the app's `welcome`, which it sends once the "
        "subscriber is in its set) and one publisher. The publisher sends a text message "
        f"({sizes} bytes, masked, distinct per broadcast); the app sends it to every subscriber "
        "(`asyncio.gather` of their sends) and then answers the publisher `sent N`. One "
        f"broadcast at a time: {fp['warmup']} unmeasured, then {fp['broadcasts']} measured. "
        "Every subscriber must get exactly that message once, and the ack must be exactly "
        "`sent N`; a missing, stale, corrupt or duplicated frame or a wrong ack is an error and "
        "fails the round. **CPU per delivered message** = the server's utime+stime (all its "
        "processes) from just before the first measured broadcast to the end of the last ÷ "
        "N × broadcasts. **Time to the last client** = from the publisher's send() to the moment "
        "the last subscriber has read the whole frame, p50 and p99 over the measured broadcasts "
        "(ms; the client reads the N sockets one after another on its one CPU: 'client CPU' near "
        "100% means the client may have bounded it). The table gives the medians over the "
        f"rounds that succeeded; {rounds} round(s), the servers of each row in a fresh random "
        "order every round.\n")
    for key, why in fan.get("skipped_rows", {}).items():
        L.append(f"- **{key} clients**: {why}")
    for s, why in fan.get("not_measured", {}).items():
        L.append(f"- **{SCALE_NAMES.get(s, s)}** not measured: {why[:300]}")
    figs = scale.fanout_figures(runs)
    order = charts.server_order([k[2] for k in figs])
    L.append(f"## Fan-out: one publisher message to every client, {rounds} round(s)\n")
    L.append("| clients | message | server | CPU µs per delivered message | to the last client "
             "p50 / p99 (ms) | ack p50 (ms) | open (s) | rounds ok | client CPU (max) | other "
             "load on CPU 0 (max) | first error |")
    L.append("|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---|")
    for n, size, s in sorted(figs, key=lambda k: (k[0], k[1], order.index(k[2]))):
        f = figs[(n, size, s)]
        L.append(f"| {n:,} | {size:,} B | {SCALE_NAMES.get(s, s)} | "
                 f"{fmt(f['cpu_us_per_msg'], '.2f')} | {fmt(f['p50_ms'], '.1f')} / "
                 f"{fmt(f['p99_ms'], '.1f')} | {fmt(f['ack_p50_ms'], '.1f')} | "
                 f"{fmt(f['open_s'], '.2f')} | {f['rounds_ok']}/{f['rounds']} | "
                 f"{fmt(f['client_cpu'], '.0%')} | {fmt(f['other_cpu0'], '.0%')} | "
                 f"{(f['error'] or '')[:160]} |")
    L.append("")
    return scale.fanout_verdicts(runs, rounds, fan.get("skipped_rows"))


def _render_churn(L, churn):
    """The churn rows' method and table into L; returns their verdicts."""
    cp = churn["config"]
    runs, rounds = churn["runs"], cp["rounds"]
    L.append(
        f"- **Churn** (`bench/run.py scale`): wrk `-t1 -c{cp['rows'][0][1]}` on CPU 1 sends every "
        "request with `Connection: close`, so each request is a new TCP connection (the server "
        "closes after its response, wrk reconnects); the server alone on CPU 0, one process, as "
        f"the matrix's rows (nginx: a master and one worker). {cp['warmup']} s of warm-up, then "
        f"{cp['duration']} s measured, {rounds} rounds. CPU per request = the server's "
        "utime+stime (all its processes) over wrk's run ÷ requests completed; status and exact "
        "body checked before and after each run, any wrk error fails it. **The rates are "
        "noisy** when another job shares the machine: the column 'other load on CPU 0' is the "
        "largest share of CPU 0 in a round that was not the server's process time (other jobs, "
        "and the kernel's softirq work for the connections, which churn makes large).\n")
    agg = aggregate(runs, rounds)
    order = charts.server_order([k[2] for k in agg])
    L.append(f"## Churn: a new connection per request, {rounds} rounds\n")
    L.append("| workload | server | req/s (median, min–max) | CPU µs/request (median) | rounds ok "
             "| other load on CPU 0 (max) | first error |")
    L.append("|---|---|---:|---:|---:|---:|---|")
    for w, c, s in sorted(agg, key=lambda k: (k[0], k[1], order.index(k[2]))):
        a = agg[(w, c, s)]
        L.append(f"| {w} c{c} | {SCALE_NAMES.get(s, s)} | {fmt(a['rps'])} "
                 f"({fmt(a['rps_min'])}–{fmt(a['rps_max'])}) | {fmt(a['cpu_us_per_req'], '.1f')} "
                 f"| {a['rounds_ok']}/{a['rounds']} | {fmt(a['other_cpu0'], '.0%')} | "
                 f"{(a['errors_first'] or '')[:160]} |")
    L.append("")
    verdicts = scale.churn_verdicts(runs, rounds)
    if "profile" in churn:
        _render_profile(L, churn["profile"], cp)
    v = scale.profile_verdicts(churn.get("profile"))
    verdicts.append(v or {"target": SCALE_NOT_BUILT["accept"], "verdict": "not measured",
                          "detail": "this run has no profile (taken before the profile was "
                                    "built, or with --no-profile)"})
    return verdicts


def _render_profile(L, profile, cp):
    """The churn profile's method, shares and top symbols into L (perf.py's figures)."""
    how = profile.get("probe") or {}
    runs = profile["runs"]
    cg = how.get("call_graph")
    L.append(
        "- **Churn profile** (skirr only; `--no-profile` skips it): after the measured rounds, "
        "one more run of skirr per churn row, started, checked and warmed up as the rounds' "
        f"runs, with `perf record -e {how.get('event') or '?'} -F {perf.FREQ}"
        + (f" --call-graph {cg}" if cg else "") + " -p <skirr's pid>` attached for wrk's "
        f"{cp['duration']} s measured window (not counted in the table above; perf.data and "
        "its `perf script` text in the run's folder, perf-<workload>.data/.txt). Each sample of "
        "skirr's process, user and kernel, counted once by its call stack, the frame nearest "
        "the leaf that names a path deciding (bench/harness/perf.py): "
        + "; ".join(f"**{k}**: {what}" for k, what in perf.CLASSES) + "."
        + (f" {how['note'][0].upper() + how['note'][1:]}." if how.get("note") else "") + "\n")
    ok = [r for r in runs if r["ok"]]
    L.append("## Churn profile (skirr, perf)\n")
    if not ok:
        why = profile.get("error") or "; ".join(f"{r['workload']}: {r['error'][:300]}"
                                                for r in runs) or "no run"
        L.append(f"Not measured: {why}\n")
        return
    L.append("| workload | samples | req/s under perf | "
             + " | ".join(k for k, _ in perf.CLASSES) + " |")
    L.append("|---|---:|---:|" + "---:|" * len(perf.CLASSES))
    for r in ok:
        L.append(f"| {r['workload']} c{r['conns']} | {r['samples']:,} | {fmt(r['rps'])} | "
                 + " | ".join(f"{r['shares'][k]:.1%}" for k, _ in perf.CLASSES) + " |")
    for r in runs:
        if not r["ok"]:
            L.append(f"- **{r['workload']} c{r['conns']}** not profiled: {r['error'][:300]}")
    L.append("")
    L.append(f"Top {perf.TOP} symbols (self: the function holding the sampled address, % of "
             "skirr's samples):\n")
    L.append("| # | " + " | ".join(f"{r['workload']} c{r['conns']}" for r in ok) + " |")
    L.append("|---:|" + "---|" * len(ok))
    for i in range(max(len(r["top"]) for r in ok)):
        L.append(f"| {i + 1} | " + " | ".join(
            f"`{r['top'][i][0]}` ({r['top'][i][1]}) {r['top'][i][2]:.1%}"
            if i < len(r["top"]) else "" for r in ok) + " |")
    L.append("")


def write_scale_report(result, outdir, summary=None, charts_python=None):
    """report.md in the scale run's folder `outdir` (and `summary`: bench/SCALE.md) with the
    memory chart drawn beside each (charts/<summary's name>/ beside the summary), and the Scale
    section of the RESULTS.md beside the summary (when there is one) replaced or inserted;
    returns the markdown."""
    figs = scale.figures((result.get("scale") or {}).get("rows", []))
    drawn = charts.draw({charts.SCALE_MEMORY: charts.scale_chart(figs)}, outdir, charts_python)
    report = render_scale(result, charts.markdown(drawn))
    (Path(outdir) / "report.md").write_text(report)
    if summary:
        rel = summary_charts(summary)
        if drawn:
            charts.copy_drawn(drawn, outdir, Path(summary).parent / rel)
        Path(summary).write_text(render_scale(result, charts.markdown(drawn, f"{rel}/")))
        results_md = Path(summary).parent / "RESULTS.md"
        if results_md.exists():
            section = render_results_scale(result, charts.markdown(drawn, f"{rel}/")[1:],
                                           Path(summary).name)
            results_md.write_text(put_scale_section(results_md.read_text(), section))
    return report


# ----------------------------------------------------------------------------------------------
# RESULTS.md's Scale section (issue 37 item 4): a summary of SCALE.md between two markers, which
# `run.py scale --summary` writes and the matrix's rewrite of RESULTS.md carries over

SCALE_BEGIN, SCALE_END = "<!-- scale:begin -->", "<!-- scale:end -->"
SCALE_BEFORE = "## Hot-path levers"  # the section goes before this heading when it is new
SCALE_GROUPS = (  # (key, the line's name): each target row of SCALE.md counted under one
    ("http", "Idle HTTP (keep-alive, after one request)"), ("ws", "Idle WebSocket"),
    ("held", f"{scale.HELD_N:,} connections held with no error and no leak"),
    ("fanout", "Fan-out"), ("churn", "Churn"))
VERDICT_WORDS = ("met", "MISSED", "unproven", "measured", "not measured", "not built")


def scale_group(target):
    """The SCALE_GROUPS key of a target row's name."""
    t = target.lower()
    if "connections held by skirr" in t:
        return "held"
    for prefix, key in (("idle http", "http"), ("idle websocket", "ws"), ("fan-out", "fanout"),
                        ("churn", "churn")):
        if t.startswith(prefix):
            return key
    return None


def render_results_scale(result, chart_lines=(), scale_md="SCALE.md"):
    """RESULTS.md's Scale section, markers included (no newline after the end marker): the run
    (and the runs its parts are merged from), a line per target group with its verdicts counted
    and its key figures (scale.key_figures), the memory chart (`chart_lines`: charts.markdown's
    image lines, relative to RESULTS.md) and a link to `scale_md` (beside RESULTS.md)."""
    meta, kf = result["meta"], scale.key_figures(result)
    names = {"scale": "idle rows", "fanout": "fan-out rows", "churn": "churn rows"}
    merged = "".join(f"; the {names[k]} from {m['started']}, skirr {m['git']} "
                     f"(bench/results/{m['run']})" for k, m in result.get("merged", {}).items())
    L = [SCALE_BEGIN, "## Scale (issue 37)\n",
         f"`bench/run.py scale` (`make bench-scale`) run {meta['started']}, skirr "
         f"{meta['git']}{merged}. The tables, how each row is measured and every target's "
         f"verdict: [{scale_md}]({scale_md}).\n"]
    counts = {}
    for v in _scale_body(result)[1]:
        g = counts.setdefault(scale_group(v["target"]), dict.fromkeys(VERDICT_WORDS, 0))
        g[v["verdict"]] += 1

    def tally(key):
        c = counts.get(key)
        if not c or sum(c.values()) == c["not built"]:  # SCALE_NOT_BUILT's row of a part not run
            return "not in this run"
        return ", ".join([f"{c['met']} met", f"{c['MISSED']} missed"]
                         + [f"{c[w]} {w}" for w in VERDICT_WORDS[2:] if c[w]])

    def ratio_span(span):
        return f"{span[0]:.2f}x to {span[1]:.2f}x"
    for key, name in SCALE_GROUPS:
        figs = []
        if key in ("http", "ws"):
            for f in kf["idle"].get(key, []):
                fig = f"{f['n']:,} connections: skirr {f['skirr']:.2f} KiB of RSS per connection"
                if f["peer"]:
                    fig += (f", lowest peer {f['peer']} {f['peer_kib']:.2f} KiB "
                            f"({f['skirr'] / f['peer_kib']:.2f}x)")
                if f["nginx"] is not None:
                    fig += f", nginx {f['nginx']:.2f} KiB"
                figs.append(fig)
        elif key == "held":
            for mode, h in kf["held"].items():
                what = "HTTP" if mode == "http" else "WebSocket"
                sk = h["skirr"]
                if h["skipped"]:
                    figs.append(f"{what} not run (RLIMIT_NOFILE here: "
                                f"{result['scale']['nofile']:,})")
                elif sk is None or sk["kib_rss"] is None:
                    figs.append(f"{what}: skirr held none")
                else:
                    figs.append(f"{what}: {sk['errors']:,} errors, RSS after all closed "
                                f"{sk['after_ratio']:.2f}x the start")
        elif key == "fanout" and kf["fanout"]:
            figs.append("each peer's CPU per delivered message " + ratio_span(kf["fanout"])
                        + " skirr's over every row and round")
        elif key == "churn":
            if kf["churn_peers"]:
                figs.append("each peer's CPU per request " + ratio_span(kf["churn_peers"])
                            + " skirr's")
            if kf["churn_nginx"]:
                figs.append("skirr's " + ratio_span(kf["churn_nginx"]) + " nginx's")
            figs += [f"{p['workload']} c{p['conns']}: accept path {p['accept']:.1%}, close path "
                     f"{p['close']:.1%} of skirr's CPU samples" for p in kf["profile"]]
        L.append(f"- **{name}**: {tally(key)}" + "".join(f"; {x}" for x in figs) + ".")
    L.append("")
    L.extend(x.rstrip("\n") for x in chart_lines)
    L.append(SCALE_END)
    return "\n".join(L)


def scale_section(text):
    """The Scale section of a RESULTS.md text, markers included, or None."""
    i = text.find(SCALE_BEGIN)
    j = text.find(SCALE_END, i)
    return text[i:j + len(SCALE_END)] if i >= 0 and j >= 0 else None


def put_scale_section(text, section):
    """`text` with `section` (render_results_scale's) in place of its Scale section, or before
    its SCALE_BEFORE heading when it has none (at its end when it has neither)."""
    old = scale_section(text)
    if old is not None:
        return text.replace(old, section, 1)
    k = text.find("\n" + SCALE_BEFORE)
    if k < 0:
        return text.rstrip("\n") + "\n\n" + section + "\n"
    return text[:k + 1] + section + "\n\n" + text[k + 1:]
