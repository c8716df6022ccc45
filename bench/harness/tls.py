"""The TLS rows (issue 32): skirr's TLS beside each peer's own and nginx's, and what TLS costs.

Owns: the run's test certificate (a self-signed ECDSA P-256 certificate for 127.0.0.1, made once
per run with the openssl CLI into a private temporary folder named in env.TLS_DIR_ENV, removed at
the end; ECDSA P-256 because it is what a current deployment serves and its signature is cheap,
so the handshake row measures the servers' TLS stacks rather than one RSA private-key operation
that costs every server the same), the TLS part's settings (servers, rows, the handshake row's
offered rate, the idle connections), one run of the TLS part (every round: the throughput rows
through measure.py's pinned `measure_row` over https, the handshake row, memory per idle TLS
connection; each row's servers in a fresh random order), and its figures: per-round CPU per
request ratios of each peer to skirr, skirr's TLS cost (TLS CPU per request minus cleartext, same
workload) against nginx's, full handshakes per second of server CPU, KiB per idle connection.

Never: renders markdown (report.py's `render_tls` does, from these figures) or measures outside
measure.py's functions; a peer that cannot start is listed as not measured, never fatal.
"""
from __future__ import annotations

import os
import random
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from .env import TLS_DIR_ENV, log
from .measure import idle_tls_memory, measure_handshakes, measure_row
from .peers import SERVERS

# The TLS servers, each with its own TLS, and the cleartext baselines of the TLS cost (skirr and
# nginx on the same rows in the same rounds).
TLS_PEERS = ["uvicorn-tls", "granian-tls", "hypercorn-tls", "peregrine-tls"]
TLS_ROWS = [("raw_get", 64), ("raw_get", 256), ("get_64k", 64), ("get_64k", 256),
            ("fastapi_json", 64), ("fastapi_json", 256)]
TLS_FULL = dict(
    servers=["skirr-tls", *TLS_PEERS, "nginx-tls", "skirr", "nginx"], rows=TLS_ROWS, rounds=5,
    # The handshake row: h2load opens hs_rate connections every hs_period_ms (400 a second, a
    # rate every server here sustains on one CPU), hs_total in all, one raw_get each.
    handshake=dict(wl="raw_get", hs_rate=40, hs_period_ms=100, hs_total=2000, hs_warmup=200),
    idle_conns=500,
)
# `make bench-quick`'s smoke row: one round, skirr and uvicorn, raw_get c64, a short handshake
# row and 100 idle connections.
TLS_QUICK = dict(
    servers=["skirr-tls", "uvicorn-tls"], rows=[("raw_get", 64)], rounds=1,
    handshake=dict(wl="raw_get", hs_rate=40, hs_period_ms=100, hs_total=400, hs_warmup=40),
    idle_conns=100,
)

TARGET_TLS_COST = 1.25  # skirr's TLS CPU/request cost at most this times nginx's (issue 32)
TARGET_HANDSHAKES_NGINX = 0.8  # skirr's handshakes per CPU second at least this times nginx's
BASELINE = {"skirr-tls": "skirr", "nginx-tls": "nginx"}  # the TLS cost: each less its cleartext


def make_cert():
    """The run's certificate and key in a fresh private folder, named in os.environ[TLS_DIR_ENV]
    for the servers' command lines and the checks; returns (the folder, a description)."""
    d = tempfile.mkdtemp(prefix="bench-tls-")
    key, cert = Path(d) / "key.pem", Path(d) / "cert.pem"
    p = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj",
         "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        capture_output=True, text=True)
    if p.returncode != 0:
        shutil.rmtree(d, ignore_errors=True)
        raise SystemExit("bench: openssl could not make the TLS rows' certificate:\n" + p.stderr)
    os.environ[TLS_DIR_ENV] = d
    return d, ("self-signed ECDSA P-256 (prime256v1) certificate for IP 127.0.0.1, SHA-256 "
               "signature, made by `openssl req -x509 -newkey ec` for this run (PKCS#8 key, "
               "which granian requires)")


def run(tp, status, prof, outdir):
    """The TLS part: a start check per server (one that cannot serve raw_get over TLS, or in
    cleartext for the baselines, is not measured, with the reason), then every round the
    throughput rows, the handshake row and the idle connections, each in a fresh random order.
    Returns {"runs", "handshakes", "idle", "not_measured", "certificate", "config"}."""
    d, cert = make_cert()
    try:
        tstatus = {s: status[s] for s in tp["servers"] if s in status}
        for s in tp["servers"]:
            if s in tstatus:
                continue
            r = measure_row(s, "raw_get", 1, dict(prof, warmup=0, duration=1), outdir,
                            f"tls-start-{s}")
            if not r["ok"]:
                tstatus[s] = "failed the start check: " + r["error"]
                log(f"  {s}: {tstatus[s][:300]}")
        live = [s for s in tp["servers"] if s not in tstatus]
        runs, hs, idle = [], [], []
        hcfg = tp["handshake"]
        for rnd in range(tp["rounds"]):
            for wl, conns in tp["rows"]:
                order = [s for s in live if wl in SERVERS[s].serves]
                random.shuffle(order)
                for s in order:
                    row = measure_row(s, wl, conns, prof, outdir, f"tls{rnd}-{wl}-c{conns}-{s}")
                    row["round"] = rnd
                    runs.append(row)
                    _log_row(f"tls r{rnd} {wl} c{conns} {s}", row, "req")
            order = [s for s in live if SERVERS[s].tls]
            random.shuffle(order)
            for s in order:
                row = measure_handshakes(s, hcfg["wl"], hcfg, outdir, f"tls{rnd}-handshake-{s}")
                row["round"] = rnd
                hs.append(row)
                _log_row(f"tls r{rnd} handshake {s}", row, "handshake")
            order = list(live)
            random.shuffle(order)
            for s in order:
                r = idle_tls_memory(s, tp["idle_conns"], outdir, f"tls{rnd}-idle-{s}")
                r["round"] = rnd
                idle.append(r)
                log(f"tls r{rnd} idle {s}: " + (f"{r['kib_per_conn']:.1f} KiB/conn"
                                                 if r["ok"] else f"FAILED {r['error'][:300]}"))
        return {"runs": runs, "handshakes": hs, "idle": idle, "not_measured": tstatus,
                "certificate": cert,
                "config": {k: v for k, v in tp.items() if k != "servers"} | {"servers": live}}
    finally:
        shutil.rmtree(d, ignore_errors=True)
        os.environ.pop(TLS_DIR_ENV, None)


def _log_row(head, row, unit):
    if row["ok"]:
        log(f"{head}: {row['rps']:,.0f} {unit}/s cpu {row['cpu_us_per_req']:.1f} us/{unit} "
            f"gen {row['gen_cpu']:.0%} other/steal cpu0 {row['other_cpu0']:.0%}/"
            f"{row['steal_cpu0']:.0%} {(row.get('tls') or {}).get('cipher', '')}")
    else:
        log(f"{head}: FAILED {row['error'][:300]}")


# ----------------------------------------------------------------------------------------------
# Figures (report.py renders them)


def _by_round(runs):
    """{(workload, conns, round, server): run} of the runs that succeeded."""
    return {(r["workload"], r["conns"], r["round"], r["server"]): r for r in runs if r["ok"]}


def spread(xs):
    """(median, min, max) of a non-empty list, else (None, None, None)."""
    return (statistics.median(xs), min(xs), max(xs)) if xs else (None, None, None)


def peer_ratios(runs, rounds, base="skirr-tls", key="cpu_us_per_req", higher_better=False,
                peers=None):
    """Per (workload, conns, peer): the peer's figure ÷ `base`'s within each round (CPU per
    request: above 1 = `base` ahead), as {"ratios", "rounds", "ahead", "verdict"}; `ahead`: the
    rounds where `base` was ahead. The verdict: "met" when `base` ran and was ahead in all
    `rounds` rounds, "MISSED" when it was behind in one or failed one, "unproven" otherwise (the
    peer failed a round). The peers compared: `peers` (a predicate on a server's name), by
    default the TLS peers."""
    if peers is None:
        peers = lambda s: SERVERS[s].tls and SERVERS[s].kind == "peer"  # noqa: E731
    by = _by_round(runs)
    all_rows = {(r["workload"], r["conns"], r["round"], r["server"]) for r in runs}
    out = {}
    for w, c, s in sorted({(w, c, s) for (w, c, _, s) in all_rows if s != base}):
        if not peers(s):
            continue
        ratios, ahead, behind, missing = [], 0, 0, 0
        for rnd in range(rounds):
            k, r = by.get((w, c, rnd, base)), by.get((w, c, rnd, s))
            if k is None:
                behind += 1  # skirr failed (or did not run) a round
                continue
            if r is None:
                missing += 1
                continue
            ratio = r[key] / k[key] if k[key] else None
            if ratio is None:
                missing += 1
                continue
            ratios.append(ratio)
            better = ratio < 1 if higher_better else ratio > 1
            ahead += better
            behind += not better
        verdict = "MISSED" if behind else "unproven" if missing else "met"
        out[(w, c, s)] = {"ratios": ratios, "rounds": rounds, "ahead": ahead, "verdict": verdict}
    return out


def tls_costs(runs, rounds):
    """Per (workload, conns): the TLS cost per request of skirr and nginx per round (TLS CPU per
    request minus the same round's cleartext CPU per request, µs) and their ratio skirr ÷ nginx,
    with the verdict against TARGET_TLS_COST ("met": within it in every round; "MISSED": over it
    in one; "unproven": a run of the four failed)."""
    by = _by_round(runs)
    out = {}
    for w, c in sorted({(r["workload"], r["conns"]) for r in runs}):
        sk, ng, ratios, missing, over = [], [], [], 0, 0
        for rnd in range(rounds):
            got = {s: by.get((w, c, rnd, s)) for s in ("skirr-tls", "skirr", "nginx-tls", "nginx")}
            if not all(got.values()):
                missing += 1
                continue
            a = got["skirr-tls"]["cpu_us_per_req"] - got["skirr"]["cpu_us_per_req"]
            b = got["nginx-tls"]["cpu_us_per_req"] - got["nginx"]["cpu_us_per_req"]
            sk.append(a)
            ng.append(b)
            ratio = a / b if b > 0 else float("inf")
            ratios.append(ratio)
            over += ratio > TARGET_TLS_COST
        verdict = "MISSED" if over else "unproven" if missing or not ratios else "met"
        out[(w, c)] = {"skirr_us": sk, "nginx_us": ng, "ratios": ratios, "verdict": verdict,
                       "rounds_ok": len(ratios)}
    return out


def handshake_figures(hs, rounds):
    """Handshakes per second of server CPU per server (its rounds' values), and skirr's against
    each peer (ahead in every round) and nginx (at least TARGET_HANDSHAKES_NGINX in every
    round): {"per_server": {server: [values]}, "vs": {server: {"ratios", "verdict"}}}, the ratios
    skirr ÷ the other."""
    per = {}
    for r in hs:
        if r["ok"]:
            per.setdefault(r["server"], []).append(r["handshakes_per_cpu_s"])
    by = {(r["round"], r["server"]): r for r in hs if r["ok"]}
    vs = {}
    for s in sorted({r["server"] for r in hs} - {"skirr-tls"}):
        bound = TARGET_HANDSHAKES_NGINX if s == "nginx-tls" else 1.0
        ratios, bad, missing = [], 0, 0
        for rnd in range(rounds):
            k, r = by.get((rnd, "skirr-tls")), by.get((rnd, s))
            if k is None:
                bad += 1
            elif r is None:
                missing += 1
            else:
                ratio = k["handshakes_per_cpu_s"] / r["handshakes_per_cpu_s"]
                ratios.append(ratio)
                bad += not (ratio >= bound if s == "nginx-tls" else ratio > bound)
        vs[s] = {"ratios": ratios, "bound": bound,
                 "verdict": "MISSED" if bad else "unproven" if missing else "met"}
    return {"per_server": per, "vs": vs}


def idle_figures(idle):
    """KiB per idle connection per server: {server: [per-round values]} of the runs that
    succeeded."""
    out = {}
    for r in idle:
        if r["ok"]:
            out.setdefault(r["server"], []).append(r["kib_per_conn"])
    return out


def skirr_failed(result):
    """True when the TLS part ran and skirr could not start or failed a run of it (the matrix's
    exit status)."""
    if not result:
        return False
    return ("skirr-tls" in result["not_measured"]
            or any(not r["ok"] and SERVERS[r["server"]].kind == "skirr"
                   for part in ("runs", "handshakes", "idle") for r in result[part]))
