"""Issue 15's targets (performance round 2), judged from one matrix run's results.

Owns: each target's figures and its verdict, rendered as the report's "Targets" section:
- `met` only when every round of every row the target names agrees (a round counts where skirr
  and the server it is compared with both ran in it; a round skirr failed is a round it lost);
- `MISSED` otherwise;
- `not in this run` when the run has no row the target needs (the quick profile has no
  peregrine, no c256 and no get_64k, for instance).
The figures are the tables' below it: CPU per request (µs) and req/s of runs in the same round,
the median efficiency of "Efficiency against the limit", the fixed-rate p99 medians, and the
median first chunk (ms) of each streaming round.

Never: measures, or judges what one run cannot show. The same targets on 3.12 and 3.13 are each
a run of its own (`make bench PY=...`); the conformance suite, the gates and the syscall gate are
their own make targets (`make bench` refuses to measure a build that fails `make conformance`).
"""
from __future__ import annotations

import statistics

from .peers import SERVERS

BASE = "skirr"
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


def _peers(runs):
    """The ASGI peers (not skirr, not a limit) with a successful run, sorted."""
    return sorted({r["server"] for r in runs if r["ok"] and SERVERS[r["server"]].kind == "peer"})


def _by_round(runs, workload, conns, server):
    """{round: run} of `server`'s runs of a row (failed ones included)."""
    return {r["round"]: r for r in runs
            if (r["workload"], r["conns"], r["server"]) == (workload, conns, server)}


def paired(runs, workload, conns, peer, key):
    """Per round in which `peer` ran successfully: (skirr's figure ÷ the peer's, or None where
    skirr failed that round). `key`: "cpu_us_per_req" or "rps"."""
    mine = _by_round(runs, workload, conns, BASE)
    out = []
    for rnd, theirs in sorted(_by_round(runs, workload, conns, peer).items()):
        if not theirs["ok"]:
            continue
        k = mine.get(rnd)
        out.append(k[key] / theirs[key] if k and k["ok"] else None)
    return out


def _span(ratios):
    """"0.87× (0.85–0.90)": the median and range of the ratios of rounds skirr ran."""
    xs = [x for x in ratios if x is not None]
    if not xs:
        return "skirr failed every round"
    return f"{statistics.median(xs):.2f}× ({min(xs):.2f}–{max(xs):.2f})"


def _count(ratios, ok):
    """Rounds where skirr ran and `ok(ratio)` holds, and the rounds compared."""
    return sum(x is not None and ok(x) for x in ratios), len(ratios)


def against_peers(runs, workload, conns, key, better):
    """(verdict, measured) of skirr against every ASGI peer of a row, round by round, or None when
    no peer ran it; `key`: "cpu_us_per_req" or "rps"; `better` (ratio -> bool) says when skirr's
    round counts as ahead."""
    rows = {p: paired(runs, workload, conns, p, key) for p in _peers(runs)}
    return judge({p: xs for p, xs in rows.items() if xs},
                 "CPU" if key == "cpu_us_per_req" else "req/s", better)


def judge(rows, what, better):
    """(verdict, measured) from {peer: [skirr ÷ peer per round, None where skirr failed]}, or None
    when `rows` is empty. `met` names the peer nearest to skirr (median ratio nearest 1); MISSED
    names each peer ahead in any round."""
    if not rows:
        return None
    won = {p: _count(xs, better) for p, xs in rows.items()}
    lost = sorted(p for p, (w, n) in won.items() if w < n)
    if not lost:
        near = min(rows, key=lambda p: abs(1 - statistics.median(
            [x for x in rows[p] if x is not None])))
        peers = f"all {len(rows)} peers" if len(rows) > 1 else "the one peer"
        return "met", (f"ahead of {peers} in every round; nearest {near}: skirr's {what} "
                       f"{_span(rows[near])} of its")
    parts = [f"{p}: skirr ahead in {won[p][0]}/{won[p][1]} rounds, its {what} {_span(rows[p])} "
             f"of {p}'s" for p in lost]
    rest = len(rows) - len(lost)
    if rest:
        parts.append(f"the other {rest} peer{'s' if rest != 1 else ''}: ahead in every round")
    return "MISSED", "; ".join(parts)


def target1(runs, verdicts):
    """fastapi_json at c64 and c256: CPU ≤ 0.95× peregrine's and req/s ahead of every peer in
    every round; p99 at the 50% load no higher than any peer's."""
    out = []
    for c in CONNS:
        ratios = paired(runs, "fastapi_json", c, T1_PEER, "cpu_us_per_req")
        row = f"fastapi_json c{c}"
        if not ratios:
            out.append(("1", row, f"CPU ≤ {T1_CPU}× {T1_PEER}'s", None, "no peregrine row"))
        else:
            won, n = _count(ratios, lambda x: x <= T1_CPU)
            out.append(("1", row, f"CPU ≤ {T1_CPU}× {T1_PEER}'s", "met" if won == n else "MISSED",
                        f"{_span(ratios)}; within it in {won}/{n} rounds"))
        rps = against_peers(runs, "fastapi_json", c, "rps", lambda x: x > 1)
        out.append(("1", row, "req/s ahead of every peer",
                    *(rps or (None, "no peer row"))))
    for w, c, pct, mine, lower in verdicts:
        if (w, pct) != ("fastapi_json", T1_LOAD):
            continue
        row = f"fastapi_json c{c} at {pct}%"
        if mine is None or not mine["ok"]:
            out.append(("1", row, "p99 no higher than any peer's", "MISSED",
                        "skirr not measured" if mine is None else "skirr failed every round"))
        elif lower:
            out.append(("1", row, "p99 no higher than any peer's", "MISSED",
                        f"skirr {mine['p99_ms']:.2f} ms; lower: " + ", ".join(
                            f"{r['server']} {r['p99_ms']:.2f} ms" for r in lower)))
        else:
            out.append(("1", row, "p99 no higher than any peer's", "met",
                        f"skirr {mine['p99_ms']:.2f} ms; no peer lower"))
    if not any(r[1].endswith(f"at {T1_LOAD}%") for r in out):
        out.append(("1", f"fastapi_json at {T1_LOAD}%", "p99 no higher than any peer's", None,
                    "no fixed-rate row"))
    return out


def target2(efficiency):
    """raw_get at c16, c64 and c256: efficiency ≥ 0.85 (the median-based figure of the table)."""
    out = []
    for c in T2_CONNS:
        e = next((row["efficiency"] for row in efficiency
                  if (row["workload"], row["conns"], row["server"]) == ("raw_get", c, BASE)), None)
        what = f"efficiency ≥ {T2_EFFICIENCY}"
        if e is None:
            out.append(("2", f"raw_get c{c}", what, None, "no limit or skirr row"))
        else:
            out.append(("2", f"raw_get c{c}", what, "met" if e >= T2_EFFICIENCY else "MISSED",
                        f"{e:.2f}"))
    return out


def streaming(streams):
    """(verdict, measured) of skirr's first chunk against every ASGI peer's, round by round, or
    None when the run has no streaming rounds with a peer."""
    med = {(r["round"], r["server"]): r["first_chunk_ms"] for r in streams if r["ok"]}
    rows = {}
    for (rnd, s), ms in sorted(med.items()):
        if SERVERS[s].kind == "peer":
            mine = med.get((rnd, BASE))  # None: skirr failed this round
            rows.setdefault(s, []).append(mine / ms if mine is not None else None)
    return judge(rows, "first chunk", lambda x: x < 1)


def target3(runs, streams):
    """Every workload at c64 and c256, and the streaming first chunk: skirr's CPU per request
    (first chunk) below every ASGI peer's in every round."""
    out = []
    for w in T3_WORKLOADS:
        for c in CONNS:
            got = against_peers(runs, w, c, "cpu_us_per_req", lambda x: x < 1)
            out.append(("3", f"{w} c{c}", "CPU below every peer's", *(got or (None, "no peer row"))))
    got = streaming(streams)
    out.append(("3", "streaming", "first chunk before every peer's",
                *(got or (None, "no streaming rounds"))))
    return out


def render(L, result, fixed_agg, verdicts, efficiency):
    """Appends the section to the markdown lines `L`. `fixed_agg`: report.aggregate_fixed() of the
    run; `verdicts`: report.fixed_verdicts() of it; `efficiency`: report.efficiency_rows()."""
    runs = result["runs"]
    rows = (target1(runs, verdicts) + target2(efficiency)
            + target3(runs, result.get("streaming") or []))
    L.append("## Targets (issue 15, performance round 2)\n")
    L.append("Judged from this run alone: `met` only when every round of the row agrees (rounds "
             "where skirr and the compared server both ran; a round skirr failed is lost), "
             "`MISSED` otherwise. Ratios are skirr's figure ÷ the peer's in the same round, the "
             "median with its range. Peers: the ASGI servers of the run (the limits left out).\n")
    L.append("| target | row | wants | verdict | measured |")
    L.append("|---|---|---|---|---|")
    for t, row, wants, verdict, measured in rows:
        L.append(f"| {t} | {row} | {wants} | {verdict or 'not in this run'} | {measured} |")
    met = sum(r[3] == "met" for r in rows)
    missed = sum(r[3] == "MISSED" for r in rows)
    absent = sum(r[3] is None for r in rows)
    interp = result["meta"]["interpreter"]
    L.append("")
    L.append(f"- {met} met, {missed} missed, {absent} not in this run.")
    L.append(f"- Target 4: this run's interpreter is {interp['skirr'].split()[0]} (skirr) and "
             f"{interp['peers'].split()[0]} (peers); 3.12 and 3.13 are each a run of their own "
             "(`make bench PY=...`).")
    L.append("- Target 5: `make bench` measured this build only after `make conformance` passed; "
             "`make gates` and `make bench-syscalls` are their own targets.")
    for w, c, pct, mine, lowest in low_load(fixed_agg):
        L.append(f"- Target 5, the latency batching can add, at the lowest load ({w} c{c} at "
                 f"{pct}%): skirr p50 {mine['p50_ms']:.2f} ms, p99 {mine['p99_ms']:.2f} ms; the "
                 "lowest of the ASGI peers: " + (
                     f"p50 {lowest[0]['p50_ms']:.2f} ms ({lowest[0]['server']}), p99 "
                     f"{lowest[1]['p99_ms']:.2f} ms ({lowest[1]['server']})" if lowest else
                     "none measured"))
    L.append("")


def low_load(fixed_agg):
    """Per fixed-rate (workload, conns) where skirr succeeded at its lowest load: (workload,
    conns, load, skirr's row, (the peer row with the lowest p50, the one with the lowest p99) or
    None when no ASGI peer succeeded at that load)."""
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
