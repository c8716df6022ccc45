"""Issue 15's targets (performance round 2), judged from one matrix run's results.

Owns: each target's figures and its verdict, rendered as the report's "Targets" section. A row
of the section is one target at one row of the matrix, judged over every round the run was
configured for (`rounds`, `fixed_rounds`, `stream_rounds`; one fixed-rate round for a run from
before it was recorded), against peregrine (target 1's CPU and req/s) or the peers the issue
names (peregrine, granian, uvicorn-httptools and hypercorn; the throughput table's verdicts cover
the others):
- `met`: skirr ran every round and was ahead in each, against each peer;
- `MISSED`: skirr failed a round, or was behind in one;
- `unproven`: skirr was never behind, but a round was not compared (the peer or the limit
  failed it, or never ran);
- `not in this run`: the run has no such row, or a named peer is not among its servers (the
  quick profile has no peregrine, no c256 and no get_64k).
Figures: skirr's ÷ the other's within each round, the median with its range to three decimals
(CPU per request and req/s of the throughput rows, p99 of the fixed-rate runs, each streaming
round's median first chunk); efficiency per round as the "Efficiency against the limit" table
computes it from medians.

Never: measures, or judges what one run cannot show. The same targets on 3.12 and 3.13 are each
a run of their own (`make bench-targets PY=...`); the gates and the syscall gate are their own
make targets.
"""
from __future__ import annotations

import statistics

from .peers import SERVERS

BASE = "skirr"
# The peers issue 15 names ("uvicorn": its fastest, with httptools); a row without one of them
# in the run is not in this run. Other ASGI peers of the run are compared as well.
NAMED = ("peregrine", "granian", "uvicorn-httptools", "hypercorn")
# Target 1: fastapi_json CPU per request at most this many times peregrine's, in every round.
T1_CPU = 0.95
T1_PEER = "peregrine"
T1_LOAD = 50  # % of each server's own req/s: p99 no higher than any peer's there
# Target 2: raw_get efficiency ((limit + app CPU) / skirr CPU) at least this, at these counts.
T2_EFFICIENCY = 0.85
T2_CONNS = (16, 64, 256)
# Target 3: CPU per request below every ASGI peer's in every round, each workload at each count.
T3_WORKLOADS = ("raw_get", "post_4k", "get_64k", "fastapi_json", "pipelined_get")
CONNS = (64, 256)


def values(items, key, **match):
    """{(round, server): item[key], or None where the item failed} of the items (runs) whose
    fields equal `match`; an item without a round (older fixed-rate runs) is round 0."""
    return {(r.get("round", 0), r["server"]): (r[key] if r["ok"] else None) for r in items
            if all(r.get(k) == v for k, v in match.items())}


def fixed_values(fixed, workload, conns, pct):
    """values() of the fixed-rate runs' p99 at one load; a server's round with no load (it did
    not start, matrix.py records one failed run for it) is a failed round at every load."""
    out = values(fixed, "p99_ms", workload=workload, conns=conns, pct=pct)
    for r in fixed:
        if (r["workload"], r["conns"], r.get("pct")) == (workload, conns, None):
            out.setdefault((r.get("round", 0), r["server"]), None)
    return out


def _span(xs):
    """"0.871× (0.853–0.902)": the median and range of `xs`, to the third decimal so that the
    round that decides a verdict shows on its side of the bound."""
    return (f"{statistics.median(xs):.3f}× ({min(xs):.3f}–{max(xs):.3f})" if xs
            else "no round compared")


def _rounds(n):
    """"all 5 rounds", or "its one round"."""
    return f"all {n} rounds" if n != 1 else "its one round"


def judge(vals, rounds, peers, what, better, ahead="ahead"):
    """(verdict, measured) of skirr against `peers` over rounds 0..rounds-1 of `vals` (values());
    `better(skirr ÷ peer)` says when skirr's round counts as `ahead`."""
    lost_rounds = [r for r in range(rounds) if vals.get((r, BASE)) is None]
    per = {}
    for p in peers:
        xs, behind, uncompared = [], 0, 0
        for r in range(rounds):
            mine, theirs = vals.get((r, BASE)), vals.get((r, p))
            if mine is None:
                continue  # skirr's failed round: lost, counted once for the row
            if theirs is None:
                uncompared += 1
                continue
            xs.append(mine / theirs)
            behind += not better(mine / theirs)
        per[p] = (xs, behind, uncompared)
    if len(lost_rounds) == rounds:
        return "MISSED", f"skirr failed {_rounds(rounds)}"
    parts = [f"skirr failed {len(lost_rounds)}/{rounds} rounds"] if lost_rounds else []
    bad = [p for p, (_, behind, _) in per.items() if behind]
    short = [p for p, (_, behind, unc) in per.items() if unc and not behind]
    for p in bad:
        xs, behind, unc = per[p]
        parts.append(f"{p}: skirr {ahead} in {len(xs) - behind}/{rounds} rounds, its {what} "
                     f"{_span(xs)} of {p}'s")
    for p in short:
        xs, _, unc = per[p]
        parts.append(f"{p}: compared in {len(xs)}/{rounds} rounds (it failed or did not run "
                     f"in {unc}), skirr {ahead} in each, {_span(xs)}" if xs else
                     f"{p}: failed or did not run in {_rounds(rounds)}")
    good = [p for p in per if p not in bad and p not in short]
    if lost_rounds or bad:
        verdict = "MISSED"
    elif short:
        verdict = "unproven"
    elif len(good) > 1:
        near = min(good, key=lambda p: abs(1 - statistics.median(per[p][0])))
        return "met", (f"{ahead} of all {len(good)} peers in {_rounds(rounds)}; nearest "
                       f"{near}: skirr's {what} {_span(per[near][0])} of its")
    else:
        (p,) = good
        return "met", (f"{ahead} in {_rounds(rounds)}; skirr's {what} {_span(per[p][0])} of "
                       f"{p}'s")
    n = len(good)
    if good and (bad or short):
        parts.append(f"the other {n} peer{'s' if n != 1 else ''}: {ahead} in every round")
    elif good:
        parts.append(f"{'all ' if n > 1 else ''}{n} peer{'s' if n != 1 else ''}: {ahead} in "
                     "every round skirr ran")
    return verdict, "; ".join(parts)


def row_verdict(vals, rounds, servers, workload, what, better, peers=None, ahead="ahead"):
    """(verdict or None, measured) of one target row against `peers` (default: the named peers
    that serve `workload`). None (not in this run) when no server has a figure in the row or a
    peer is not among the run's servers; MISSED when the row ran without skirr in it (its
    fixed-rate run needs its own req/s, for one)."""
    if peers is None:
        peers = [p for p in NAMED if workload in SERVERS[p].serves]
    if not vals or not rounds:
        return None, "no such row in this run"
    missing = [p for p in peers if p not in servers]
    if missing:
        return None, "not in this run: " + ", ".join(missing)
    if not any(s == BASE for _, s in vals):
        return "MISSED", "skirr has no run in this row"
    return judge(vals, rounds, peers, what, better, ahead)


def target1(result):
    """fastapi_json at c64 and c256: CPU ≤ 0.95× peregrine's and req/s ahead of peregrine's in
    every round; p99 at the 50% load no higher than any named peer's in every round."""
    cfg, runs = result["meta"]["config"], result["runs"]
    out = []
    for c in CONNS:
        row = f"fastapi_json c{c}"
        cpu = values(runs, "cpu_us_per_req", workload="fastapi_json", conns=c)
        out.append(("1", row, f"CPU ≤ {T1_CPU}× {T1_PEER}'s", *row_verdict(
            cpu, cfg["rounds"], cfg["servers"], "fastapi_json", "CPU", lambda x: x <= T1_CPU,
            peers=[T1_PEER], ahead="within it")))
        rps = values(runs, "rps", workload="fastapi_json", conns=c)
        out.append(("1", row, f"req/s ahead of {T1_PEER}'s", *row_verdict(
            rps, cfg["rounds"], cfg["servers"], "fastapi_json", "req/s", lambda x: x > 1,
            peers=[T1_PEER])))
    fixed = result.get("fixed_rate") or []
    # A run from before fixed_rounds was recorded had one fixed-rate round.
    frounds = cfg.get("fixed_rounds", 1)
    for c in sorted({r["conns"] for r in fixed if r["workload"] == "fastapi_json"}) or [64]:
        p99 = fixed_values(fixed, "fastapi_json", c, T1_LOAD)
        out.append(("1", f"fastapi_json c{c} at {T1_LOAD}%", "p99 no higher than any peer's",
                    *row_verdict(p99, frounds, cfg["servers"], "fastapi_json", "p99",
                                 lambda x: x <= 1, ahead="no higher")))
    return out


def target2(result, efficiency):
    """raw_get at c16, c64 and c256: efficiency ≥ 0.85 in every round, each round's as the
    efficiency table computes the median's: (the lower limit's CPU + the app's) ÷ skirr's."""
    cfg, runs = result["meta"]["config"], result["runs"]
    app = (result.get("app_cpu") or {}).get("raw_get", {}).get("us_per_req")
    med = {(e["conns"], e["server"]): e["efficiency"] for e in efficiency
           if e["workload"] == "raw_get"}
    out = []
    for c in T2_CONNS:
        want = f"efficiency ≥ {T2_EFFICIENCY}"
        cpu = values(runs, "cpu_us_per_req", workload="raw_get", conns=c)
        if app is None or not any(s == BASE for _, s in cpu) or not any(
                SERVERS[s].kind == "limit" for _, s in cpu):
            out.append(("2", f"raw_get c{c}", want, None, "no skirr, limit or app figure in "
                                                           "this run"))
            continue
        effs, lost, uncompared = [], 0, 0
        for r in range(cfg["rounds"]):
            lim = [v for (rr, s), v in cpu.items()
                   if rr == r and v is not None and SERVERS[s].kind == "limit"]
            if cpu.get((r, BASE)) is None:
                lost += 1
            elif not lim:
                uncompared += 1
            else:
                effs.append((min(lim) + app) / cpu[(r, BASE)])
        within = sum(e >= T2_EFFICIENCY for e in effs)
        verdict = ("MISSED" if lost or within < len(effs) else
                   "unproven" if uncompared else "met")
        span = (f"{statistics.median(effs):.3f} ({min(effs):.3f}–{max(effs):.3f})" if effs
                else "no round compared")
        text = f"{span}; at least {T2_EFFICIENCY} in {within}/{cfg['rounds']} rounds"
        if lost:
            text += f"; skirr failed {lost}"
        if uncompared:
            text += f"; no limit in {uncompared}"
        if (c, BASE) in med:
            text += f"; from the medians {med[(c, BASE)]:.3f}"
        out.append(("2", f"raw_get c{c}", want, verdict, text))
    return out


def target3(result):
    """Every workload at c64 and c256: skirr's CPU per request below every ASGI peer's in every
    round; and the streaming first chunk sooner than every peer's in every round (the run
    measures streaming's latency, not its CPU)."""
    cfg, runs = result["meta"]["config"], result["runs"]
    out = []
    for w in T3_WORKLOADS:
        for c in CONNS:
            cpu = values(runs, "cpu_us_per_req", workload=w, conns=c)
            out.append(("3", f"{w} c{c}", "CPU below every peer's", *row_verdict(
                cpu, cfg["rounds"], cfg["servers"], w, "CPU", lambda x: x < 1)))
    first = values(result.get("streaming") or [], "first_chunk_ms")
    out.append(("3", "streaming", "first chunk sooner than every peer's", *row_verdict(
        first, cfg.get("stream_rounds", 1), cfg["servers"], "streaming", "first chunk",
        lambda x: x < 1)))
    return out


def render(L, result, efficiency, fixed_agg):
    """Appends the section to the markdown lines `L`. `efficiency`: report.efficiency_rows() of
    the run; `fixed_agg`: report.aggregate_fixed() of it (target 5's latency line)."""
    rows = target1(result) + target2(result, efficiency) + target3(result)
    L.append("## Targets (issue 15, performance round 2)\n")
    L.append("Judged from this run alone, over every round the run was configured for: `met` "
             "when skirr ran every round and was ahead in each against each peer, `MISSED` when "
             "it failed a round or was behind in one, `unproven` when it was never behind but a "
             "round was not compared (the peer failed it). Ratios are skirr's figure ÷ the "
             "peer's within a round, the median with its range. Peers: the ones the issue names "
             "(peregrine, granian, uvicorn-httptools, hypercorn); the throughput table's "
             "verdicts cover the others. Streaming is judged on its first chunk, the figure the "
             "run measures for it.\n")
    L.append("| target | row | wants | verdict | measured |")
    L.append("|---|---|---|---|---|")
    for t, row, wants, verdict, measured in rows:
        L.append(f"| {t} | {row} | {wants} | {verdict or 'not in this run'} | {measured} |")
    count = {v: sum(r[3] == v for r in rows) for v in ("met", "MISSED", "unproven", None)}
    meta = result["meta"]
    interp = meta["interpreter"]
    L.append("")
    L.append(f"- {count['met']} met, {count['MISSED']} missed, {count['unproven']} unproven, "
             f"{count[None]} not in this run.")
    L.append(f"- Target 4: this run's interpreter is {interp['skirr'].split()[0]} (skirr) and "
             f"{(interp.get('peers') or '–').split()[0]} (peers); each interpreter is a run of "
             "its own (`make bench-targets PY=...`).")
    if meta.get("conformance") == "passed":
        L.append("- Target 5: this build passed `make conformance` before it was measured; "
                 "`make gates` and `make bench-syscalls` are their own targets.")
    elif "conformance" not in meta:
        L.append("- Target 5: this run's results predate the record of a `make conformance` "
                 "pass; `make gates` and `make bench-syscalls` are their own targets.")
    else:
        L.append("- Target 5: this run records no `make conformance` pass (only `make bench` and "
                 "`make bench-targets` run it first); `make gates` and `make bench-syscalls` are "
                 "their own targets.")
    for w, c, pct, mine, lowest in low_load(fixed_agg):
        head = (f"- Target 5, what batching can add, at the lowest fixed load ({w} c{c}, {pct}% "
                f"of each server's req/s; skirr offered {mine['offered_rps']:,.0f} req/s): "
                f"skirr's p50 {mine['p50_ms']:.2f} ms, p99 {mine['p99_ms']:.2f} ms")
        if lowest is None:
            L.append(head + "; no ASGI peer measured at this load")
            continue
        p50, p99 = lowest
        L.append(head + f"; the lowest ASGI peer's p50 {p50['p50_ms']:.2f} ms ({p50['server']}), "
                 f"p99 {p99['p99_ms']:.2f} ms ({p99['server']}); skirr − that: p50 "
                 f"{mine['p50_ms'] - p50['p50_ms']:+.2f} ms, p99 "
                 f"{mine['p99_ms'] - p99['p99_ms']:+.2f} ms")
    L.append("")


def low_load(fixed_agg):
    """Per fixed-rate (workload, conns) where skirr succeeded at its lowest load: (workload,
    conns, load, skirr's row, (the peer row with the lowest p50, the one with the lowest p99) or
    None when no ASGI peer succeeded at that load); rows as report.aggregate_fixed() gives them
    (medians over rounds)."""
    out = []
    for w, c in sorted({(r["workload"], r["conns"]) for r in fixed_agg if r["pct"] is not None}):
        rows = [r for r in fixed_agg if (r["workload"], r["conns"]) == (w, c) and r["ok"]
                and r["pct"] is not None]
        mine = [r for r in rows if r["server"] == BASE]
        if not mine:
            continue
        pct = min(r["pct"] for r in mine)
        peers = [r for r in rows if r["pct"] == pct and SERVERS[r["server"]].kind == "peer"]
        lowest = (min(peers, key=lambda r: r["p50_ms"]),
                  min(peers, key=lambda r: r["p99_ms"])) if peers else None
        out.append((w, c, pct, next(r for r in mine if r["pct"] == pct), lowest))
    return out
