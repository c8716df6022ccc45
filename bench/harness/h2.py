"""The HTTP/2 rows (issue 33): skirr's HTTP/2 beside each peer's and nginx's, and what
multiplexing costs against keep-alive.

Owns: the HTTP/2 part's settings (servers, rows: workload, connections, concurrent streams per
connection), one run of it (a start check per server; every round, each workload's runs, the
h2c and TLS servers at every stream count and skirr's HTTP/1.1 baselines with wrk at the same
connection count, in one fresh random order; the HTTP/2 runs through measure.py's
`measure_h2_row`, the baselines through its `measure_row`), the run's test certificate (tls.py's
`make_cert`, made when a TLS server is in the part), and its figures: each peer's CPU per request
÷ skirr's of the same protocol per round (target: skirr ahead in every round), skirr's ÷ nginx's
(the limit, no target), skirr's HTTP/2 CPU per request ÷ its HTTP/1.1 CPU per request on the same
workload and connections in the same round (target at 10 streams: at most 1, "multiplexing must
not cost more than keep-alive"; h2c against cleartext HTTP/1.1, h2 over TLS against HTTP/1.1 over
TLS).

Never: renders markdown (report.py's `render_h2` does, from these figures) or measures outside
measure.py's functions; a peer that cannot start is listed as not measured, never fatal; skirr
that cannot start is listed too and fails the run (skirr_failed), never skipped quietly.
"""
from __future__ import annotations

import os
import random
import shutil

from .env import TLS_DIR_ENV, log
from .measure import h2_start_check, measure_h2_row, measure_row
from .peers import SERVERS
from .tls import make_cert, spread

# Each protocol's skirr, nginx (the limit) and skirr's HTTP/1.1 baseline (wrk, same rows).
SKIRR = {"h2c": "skirr-h2c", "h2": "skirr-h2"}
NGINX = {"h2c": "nginx-h2c", "h2": "nginx-h2"}
HTTP1 = {"h2c": "skirr", "h2": "skirr-tls"}
BASELINE_OF = {b: proto for proto, b in HTTP1.items()}
H2_PEERS = ["hypercorn-h2c", "hypercorn-h2", "granian-h2c", "granian-h2", "peregrine-h2c",
            "peregrine-h2"]
H2_ROWS = [(wl, 64, m) for wl in ("raw_get", "get_64k", "fastapi_json") for m in (1, 10)]
H2_FULL = dict(
    servers=["skirr-h2c", "skirr-h2", *H2_PEERS, "nginx-h2c", "nginx-h2"],
    baselines=["skirr", "skirr-tls"], rows=H2_ROWS, rounds=5,
)
# `make bench-quick`'s smoke row: one round of raw_get, 64 connections of 10 streams, skirr over
# h2c and h2 (TLS) and its HTTP/1.1 baseline; no pass/fail on speed, a failed skirr run fails it.
H2_QUICK = dict(servers=["skirr-h2c", "skirr-h2"], baselines=["skirr"],
                rows=[("raw_get", 64, 10)], rounds=1)

TARGET_MUX = 1.0  # skirr's HTTP/2 CPU/request at TARGET_MUX_STREAMS ÷ its HTTP/1.1's, at most
TARGET_MUX_STREAMS = 10


def row_groups(rows):
    """{(workload, conns): [stream counts]} of the part's rows, in the rows' order."""
    out = {}
    for w, c, m in rows:
        out.setdefault((w, c), [])
        if m not in out[(w, c)]:
            out[(w, c)].append(m)
    return out


def run(hp, status, prof, outdir):
    """The HTTP/2 part: a start check per server (HTTP/2 servers answer over HTTP/2 exactly, the
    HTTP/1.1 baselines over HTTP/1.1), then every round, per (workload, conns), every live HTTP/2
    server at each stream count and each baseline once, all in one fresh random order. Returns
    {"runs", "not_measured", "config"}; the runs carry "round", "streams" (None for a baseline)
    and "proto" ("h2c", "h2", or "h1" for a baseline)."""
    servers = list(hp["servers"]) + list(hp.get("baselines") or [])
    made = None
    if any(SERVERS[s].tls for s in servers) and not os.environ.get(TLS_DIR_ENV):
        made, _ = make_cert()
    try:
        hstatus = {s: status[s] for s in servers if s in status}
        groups = row_groups(hp["rows"])
        first = hp["rows"][0][0] if hp["rows"] else "raw_get"
        for s in servers:
            if s in hstatus:
                continue
            why = h2_start_check(s, first, outdir, f"h2-start-{s}")
            if why:
                hstatus[s] = "failed the start check: " + why
                log(f"  {s}: {hstatus[s][:300]}")
        live = [s for s in servers if s not in hstatus]
        runs = []
        for rnd in range(hp["rounds"]):
            for (wl, conns), streams in groups.items():
                jobs = [(s, m) for s in live if SERVERS[s].h2 and wl in SERVERS[s].serves
                        for m in streams]
                jobs += [(s, None) for s in live if not SERVERS[s].h2 and wl in SERVERS[s].serves]
                random.shuffle(jobs)
                for s, m in jobs:
                    if m is None:
                        row = measure_row(s, wl, conns, prof, outdir, f"h2r{rnd}-{wl}-c{conns}-{s}")
                        row.update(streams=None, proto="h1")
                    else:
                        row = measure_h2_row(s, wl, conns, m, prof, outdir,
                                             f"h2r{rnd}-{wl}-c{conns}-m{m}-{s}")
                    row["round"] = rnd
                    runs.append(row)
                    head = f"h2 r{rnd} {wl} c{conns} " + (f"m{m} " if m else "http/1.1 ") + s
                    if row["ok"]:
                        log(f"{head}: {row['rps']:,.0f} req/s cpu {row['cpu_us_per_req']:.1f} us/req "
                            f"gen {row['gen_cpu']:.0%} other/steal cpu0 {row['other_cpu0']:.0%}/"
                            f"{row['steal_cpu0']:.0%}")
                    else:
                        log(f"{head}: FAILED {row['error'][:300]}")
        # "servers"/"baselines": as planned (a skirr that could not start is still a row the
        # targets judge); "live": those that started.
        return {"runs": runs, "not_measured": hstatus,
                "config": dict(hp, baselines=list(hp.get("baselines") or []), live=live)}
    finally:
        if made:
            shutil.rmtree(made, ignore_errors=True)
            os.environ.pop(TLS_DIR_ENV, None)


# ----------------------------------------------------------------------------------------------
# Figures (report.py renders them)


def _by_round(runs):
    """{(workload, conns, streams, round, server): run} of the runs that succeeded."""
    return {(r["workload"], r["conns"], r.get("streams"), r["round"], r["server"]): r
            for r in runs if r["ok"]}


def peer_ratios(runs, rounds):
    """Per (workload, conns, streams, peer): the peer's CPU per request ÷ skirr's over the same
    protocol (skirr-h2c for an h2c peer, skirr-h2 for a TLS one) within each round (above 1:
    skirr ahead), as {"ratios", "rounds", "ahead", "verdict", "base"}. "met": skirr ran and was
    ahead in every round; "MISSED": it was behind in one or failed one; "unproven": the peer
    failed a round and skirr was never behind."""
    by = _by_round(runs)
    seen = {(r["workload"], r["conns"], r.get("streams"), r["server"]) for r in runs}
    out = {}
    for w, c, m, s in sorted(seen, key=lambda k: (k[0], k[1], k[2] or 0, k[3])):
        peer = SERVERS[s]
        if m is None or peer.kind != "peer" or not peer.h2:
            continue
        base = SKIRR[peer.h2]
        ratios, ahead, behind, missing = [], 0, 0, 0
        for rnd in range(rounds):
            k, r = by.get((w, c, m, rnd, base)), by.get((w, c, m, rnd, s))
            if k is None:
                behind += 1  # skirr failed (or did not run) a round
            elif r is None or not k["cpu_us_per_req"]:
                missing += 1
            else:
                ratio = r["cpu_us_per_req"] / k["cpu_us_per_req"]
                ratios.append(ratio)
                ahead += ratio > 1
                behind += ratio <= 1
        verdict = "MISSED" if behind else "unproven" if missing else "met"
        out[(w, c, m, s)] = {"ratios": ratios, "rounds": rounds, "ahead": ahead,
                             "verdict": verdict, "base": base}
    return out


def nginx_ratios(runs, rounds):
    """Per (workload, conns, streams, protocol): skirr's CPU per request ÷ nginx's over the same
    protocol within each round (the limit: how far skirr is from it; no target), as
    {"ratios", "rounds_ok"}; rows without both are left out."""
    by = _by_round(runs)
    keys = {(r["workload"], r["conns"], r.get("streams"), SERVERS[r["server"]].h2) for r in runs
            if SERVERS[r["server"]].h2}
    out = {}
    for w, c, m, proto in sorted(keys):
        ratios = []
        for rnd in range(rounds):
            k, n = by.get((w, c, m, rnd, SKIRR[proto])), by.get((w, c, m, rnd, NGINX[proto]))
            if k and n and n["cpu_us_per_req"]:
                ratios.append(k["cpu_us_per_req"] / n["cpu_us_per_req"])
        if ratios or any(r["server"] == NGINX[proto] for r in runs):
            out[(w, c, m, proto)] = {"ratios": ratios, "rounds_ok": len(ratios)}
    return out


def mux_ratios(runs, rounds, planned=None):
    """Per (workload, conns, streams, protocol): skirr's HTTP/2 CPU per request ÷ its HTTP/1.1
    CPU per request (wrk, keep-alive) on the same workload and connections within each round
    (skirr-h2c ÷ skirr, skirr-h2 ÷ skirr-tls), as {"ratios", "rounds_ok", "verdict",
    "h2_us", "h1_us"}. The verdict applies at TARGET_MUX_STREAMS streams ("met": at most
    TARGET_MUX in every round; "MISSED": over it in one, or skirr's HTTP/2 run failed one;
    "unproven": the baseline missing in a round); other stream counts are "–" (shown, not
    judged). A protocol whose baseline is not in the run at all is left out. `planned`: the
    part's config (rows, servers, baselines) whose rows are judged even when skirr never ran
    (it could not start: every round missed)."""
    by = _by_round(runs)
    present = {r["server"] for r in runs} | set((planned or {}).get("baselines") or [])
    keys = {(r["workload"], r["conns"], r.get("streams"), SERVERS[r["server"]].h2) for r in runs
            if r["server"] in SKIRR.values()}
    if planned:
        keys |= {(w, c, m, SERVERS[s].h2) for w, c, m in planned["rows"]
                 for s in planned["servers"] if s in SKIRR.values()}
    out = {}
    for w, c, m, proto in sorted(keys):
        if HTTP1[proto] not in present:
            continue
        ratios, h2us, h1us, over, missing = [], [], [], 0, 0
        for rnd in range(rounds):
            k, b = by.get((w, c, m, rnd, SKIRR[proto])), by.get((w, c, None, rnd, HTTP1[proto]))
            if k is None:
                over += 1
            elif b is None or not b["cpu_us_per_req"]:
                missing += 1
            else:
                ratio = k["cpu_us_per_req"] / b["cpu_us_per_req"]
                ratios.append(ratio)
                h2us.append(k["cpu_us_per_req"])
                h1us.append(b["cpu_us_per_req"])
                over += ratio > TARGET_MUX
        if m != TARGET_MUX_STREAMS:
            verdict = "–"
        else:
            verdict = "MISSED" if over else "unproven" if missing or not ratios else "met"
        out[(w, c, m, proto)] = {"ratios": ratios, "rounds_ok": len(ratios), "verdict": verdict,
                                 "h2_us": h2us, "h1_us": h1us}
    return out


def skirr_failed(result):
    """True when the HTTP/2 part ran and skirr (over HTTP/2 or a baseline) could not start or
    failed a run of it (the matrix's exit status)."""
    if not result:
        return False
    return (any(SERVERS[s].kind == "skirr" for s in result["not_measured"])
            or any(not r["ok"] and SERVERS[r["server"]].kind == "skirr" for r in result["runs"]))


__all__ = ["H2_FULL", "H2_QUICK", "H2_PEERS", "run", "peer_ratios", "nginx_ratios", "mux_ratios",
           "skirr_failed", "spread", "row_groups"]
