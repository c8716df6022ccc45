"""The matrix: which servers run which workloads, how many rounds, in which order.

Owns: the profiles (quick: the CI smoke test; full: every peer and row; each with its workers
row: servers with 2 worker processes sharing both CPUs with wrk, its cost rows: a feature on
against off, see costs.py, its WebSocket rows: echo round trips driven by bench/ws_load.c, and its
TLS rows: each server with its own TLS, see tls.py, and its HTTP/2 rows: h2c and h2 over TLS with
h2load, see h2.py; costs, ws, tls and h2: those rows alone), the plan
a run follows
(the profile with the command line's subsets and overrides), the fresh random server order for
every row of every round (seeded, the seed recorded), the run's metadata (commit, machine,
interpreters, versions, configuration, what could not be installed or started), and the run folder
with runs.json, results.json and report.md.

Never: measures anything itself (measure.py does, one run at a time) or renders a figure
(report.py does); a peer that cannot be installed or started is listed as not measured, never
fatal; the exit status is 1 only when a skirr run failed.
"""
from __future__ import annotations

import datetime
import json
import os
import random
import re
from pathlib import Path

from .env import (CLIENT_CPU, PEERS_VENV, ROOT, SKIRR_VENV, ensure_tools, gil_enabled, git_commit,
                  interp_identity, log, machine_info, new_run_dir, run_text, venv_python)
from .costs import cost_servers, run_round
from . import h2 as h2_part
from . import tls as tls_part
from .measure import (app_cpu, idle_memory, measure_fixed, measure_row, measure_stream,
                      measure_ws_row, ws_start_check)
from .peers import SERVERS, build_limit, build_ws_load, ensure_peers, peer_groups, pip_versions
from .report import aggregate, fmt, skirr_failed, write_report
from .workloads import workload_order

# The WebSocket rows (issue 14): bench/ws_load.c's closed-loop echo, pinned as the HTTP rows
# (server on CPU 0, the generator on CPU 1). ws_echo_64: round-trip latency (p50/p99) and msgs/s
# of 64-byte messages; ws_echo_1k: msgs/s of 1 KiB messages; 64 connections each.
WS_FULL = dict(servers=["skirr", "uvicorn-websockets", "uvicorn-wsproto", "granian", "peregrine"],
               rows=[("ws_echo_64", 64), ("ws_echo_1k", 64)], rounds=5)

# The streaming row's sequential samples a round in the full and targets profiles (about 5 s with
# the app's 50 ms wait): with 20 (1 s) a few slow samples on this noisy VM moved a round's median
# as far as the effect judged (issue 15, stop 29).
STREAM_SAMPLES = 100

PROFILES = {
    # <= 5 minutes, CI smoke test of the harness; no pass/fail on speed.
    "quick": dict(
        servers=["skirr", "uvicorn-httptools", "limit-c"],
        rows=[("raw_get", 64), ("post_4k", 64), ("fastapi_json", 64)],
        rounds=3, duration=3, warmup=1,
        fixed_rate=[("raw_get", 64)], fixed_pcts=[50], fixed_duration=3, fixed_rounds=1,
        stream_samples=10, stream_rounds=1,
        # The workers row, tiny: one round of raw_get, skirr with 1 and 2 workers beside uvicorn's.
        workers=dict(servers=["skirr-w1", "skirr-w2", "uvicorn-w2"], rows=[("raw_get", 64)],
                     rounds=1),
        # The cost rows (costs.py): raw_get c64, access log and metrics on against off.
        costs=dict(rounds=1),
        # The WebSocket rows, tiny: one round of the latency row, skirr beside uvicorn.
        ws=dict(servers=["skirr", "uvicorn-websockets"], rows=[("ws_echo_64", 64)], rounds=1),
        # The TLS rows, tiny (tls.py): one round of raw_get c64, the handshake row and idle
        # connections, skirr beside uvicorn.
        tls=tls_part.TLS_QUICK,
        # The HTTP/2 smoke row (h2.py): one round of raw_get, 64 connections of 10 streams,
        # skirr over h2c and h2 (TLS) beside its HTTP/1.1 baseline.
        h2=h2_part.H2_QUICK,
    ),
    "full": dict(
        servers=["skirr", "uvicorn-httptools", "uvicorn-h11", "granian", "hypercorn", "peregrine",
                 "weft", "gunicorn-uvicorn", "limit-c", "nginx"],
        rows=[("raw_get", 1), ("raw_get", 16), ("raw_get", 64), ("raw_get", 256),
              ("post_4k", 64), ("post_4k", 256), ("get_64k", 64), ("get_64k", 256),
              ("fastapi_json", 64), ("fastapi_json", 256),
              ("pipelined_get", 64), ("pipelined_get", 256), ("file_1m", 64)],
        rounds=5, duration=5, warmup=1,
        # Three rounds of 6 s: a p99 verdict on one run followed that run's noise (issue 15).
        fixed_rate=[("raw_get", 64), ("fastapi_json", 64)], fixed_pcts=[25, 50, 75],
        fixed_duration=6, fixed_rounds=3,
        stream_samples=STREAM_SAMPLES, stream_rounds=3,
        # The workers row (issue 12): 2 workers, one per CPU, unpinned, wrk -t2 sharing the CPUs;
        # skirr-w1 (one process) in the same setup is the baseline for CPU per request.
        workers=dict(servers=["skirr-w1", "skirr-w2", "uvicorn-w2", "granian-w2",
                              "gunicorn-uvicorn-w2"],
                     rows=[("raw_get", 64), ("fastapi_json", 64)], rounds=5),
        costs=dict(rounds=5),
        ws=WS_FULL,
        tls=tls_part.TLS_FULL,
        h2=h2_part.H2_FULL,
    ),
    # `make bench-targets PY=...` (issue 15's target 4: its targets on 3.12 and 3.13): the rows
    # and peers the targets name, the full profile's rounds, in about an hour where the full
    # profile takes two. Left out: raw_get c1 and file_1m (no target names them), nginx (limit-c
    # is the lower limit in every row the efficiency target reads), uvicorn-h11 and
    # gunicorn-uvicorn (uvicorn-httptools is uvicorn's fastest), weft (fails to import), the
    # 75% fixed-rate load, and the workers, cost and WebSocket rows.
    "targets": dict(
        servers=["skirr", "uvicorn-httptools", "granian", "hypercorn", "peregrine", "limit-c"],
        rows=[("raw_get", 16), ("raw_get", 64), ("raw_get", 256),
              ("post_4k", 64), ("post_4k", 256), ("get_64k", 64), ("get_64k", 256),
              ("fastapi_json", 64), ("fastapi_json", 256),
              ("pipelined_get", 64), ("pipelined_get", 256)],
        rounds=5, duration=5, warmup=1,
        fixed_rate=[("raw_get", 64), ("fastapi_json", 64)], fixed_pcts=[25, 50],
        fixed_duration=6, fixed_rounds=3,
        stream_samples=STREAM_SAMPLES, stream_rounds=3,
        workers=None, costs=None, ws=None, tls=None, h2=None,
    ),
    # `make bench-workers`: the full profile's workers row alone (about 6 minutes).
    "workers": dict(
        servers=[], rows=[], rounds=5, duration=5, warmup=1,
        fixed_rate=[], fixed_pcts=[], fixed_duration=0, fixed_rounds=0, stream_samples=0,
        stream_rounds=0,
        workers=None, costs=None, ws=None,
    ),
    # `make bench-costs`: the cost rows alone (about 3 minutes).
    "costs": dict(
        servers=[], rows=[], rounds=5, duration=5, warmup=1,
        fixed_rate=[], fixed_pcts=[], fixed_duration=0, fixed_rounds=0, stream_samples=0,
        stream_rounds=0,
        workers=None, costs=dict(rounds=5), ws=None,
    ),
    # `make bench-ws`: the WebSocket rows alone, the full profile's servers and rounds (about
    # 6 minutes).
    "ws": dict(
        servers=[], rows=[], rounds=5, duration=5, warmup=1,
        fixed_rate=[], fixed_pcts=[], fixed_duration=0, fixed_rounds=0, stream_samples=0,
        stream_rounds=0,
        workers=None, costs=None, ws=WS_FULL,
    ),
    # `make bench-tls`: the TLS rows alone (tls.py), the full profile's (about 30 minutes).
    "tls": dict(
        servers=[], rows=[], rounds=5, duration=5, warmup=1,
        fixed_rate=[], fixed_pcts=[], fixed_duration=0, fixed_rounds=0, stream_samples=0,
        stream_rounds=0,
        workers=None, costs=None, ws=None, tls=tls_part.TLS_FULL,
    ),
    # `make bench-h2`: the HTTP/2 rows alone (h2.py), the full profile's (about 45 minutes).
    "h2": dict(
        servers=[], rows=[], rounds=5, duration=5, warmup=1,
        fixed_rate=[], fixed_pcts=[], fixed_duration=0, fixed_rounds=0, stream_samples=0,
        stream_rounds=0,
        workers=None, costs=None, ws=None, tls=None, h2=h2_part.H2_FULL,
    ),
    # `make bench-threads PY=.../python3.14t` (issue 34, a free-threaded Python only; about 4
    # minutes): the workers row's setup (unpinned, wrk -t2) with skirr's thread workers (2 loops
    # in one process) beside its process workers and one process, and granian's 2 workers (threads
    # on a free-threaded build), on FastAPI `async def` (fastapi_json) and `def` endpoints doing
    # pure-Python work in the thread pool (fastapi_cpu).
    "threads": dict(
        servers=[], rows=[], rounds=5, duration=5, warmup=1,
        fixed_rate=[], fixed_pcts=[], fixed_duration=0, fixed_rounds=0, stream_samples=0,
        stream_rounds=0,
        workers=dict(servers=["skirr-w1", "skirr-w2", "skirr-t2", "granian-t2"],
                     rows=[("fastapi_json", 64), ("fastapi_cpu", 64)], rounds=5),
        costs=None, ws=None,
    ),
}

PROFILES["workers"]["workers"] = PROFILES["full"]["workers"]


def plan(args):
    """(profile settings, servers, rows) from the profile and the command line's overrides;
    SystemExit for an unknown server."""
    prof = dict(PROFILES[args.profile])
    for k in ("rounds", "duration", "warmup"):
        if getattr(args, k) is not None:
            prof[k] = getattr(args, k)
    if args.rounds and prof["fixed_rounds"]:
        prof["fixed_rounds"] = args.rounds
    servers = args.servers.split(",") if args.servers else prof["servers"]
    rows = prof["rows"]
    keep = set(args.workloads.split(",")) if args.workloads else None
    if keep:
        # A name no row of this run has is refused, not dropped: a silently smaller run is
        # taken for the one asked for (`--profile quick --workloads get_64k` measured nothing).
        offered = {w for w, _ in rows}
        for part, off in (("workers", args.no_workers), ("ws", getattr(args, "no_ws", False)),
                          ("tls", getattr(args, "no_tls", False)),
                          ("h2", getattr(args, "no_h2", False))):
            if prof.get(part) and not off:
                offered |= {r[0] for r in prof[part]["rows"]}
        unknown = sorted(keep - offered)
        if unknown:
            raise SystemExit(f"--workloads {','.join(unknown)}: not a row of the {args.profile} "
                             f"profile as asked (its rows: {', '.join(sorted(offered))}); "
                             "--profile full has every workload")
        rows = [r for r in rows if r[0] in keep]
    if args.conns:
        cs = [int(x) for x in args.conns.split(",")]
        rows = workload_order({(w, c) for w, _ in rows for c in cs})
    if "skirr" not in servers and rows:
        servers.insert(0, "skirr")
    wk = prof.get("workers")
    if wk and not args.no_workers:
        # --workloads and --rounds apply to the workers row too; --servers and --conns do not
        # (its servers are its own, at its own connection counts).
        wrows = [r for r in wk["rows"] if not keep or r[0] in keep]
        prof["workers"] = dict(wk, rows=wrows, rounds=args.rounds or wk["rounds"])
    else:
        prof["workers"] = None
    ck = prof.get("costs")
    if ck and not getattr(args, "no_costs", False):
        prof["costs"] = dict(ck, servers=cost_servers(), rounds=args.rounds or ck["rounds"])
    else:
        prof["costs"] = None
    ws = prof.get("ws")
    if ws and not getattr(args, "no_ws", False):
        # --workloads and --rounds apply to the WebSocket rows too; --ws-servers picks their
        # servers (skirr always among them), --conns replaces their connection counts.
        wsrows = [r for r in ws["rows"] if not keep or r[0] in keep]
        if args.conns:
            wsrows = workload_order({(w, int(c)) for w, _ in wsrows for c in args.conns.split(",")})
        wss = args.ws_servers.split(",") if getattr(args, "ws_servers", None) else list(ws["servers"])
        if "skirr" not in wss:
            wss.insert(0, "skirr")
        prof["ws"] = dict(ws, servers=wss, rows=wsrows, rounds=args.rounds or ws["rounds"])
    else:
        prof["ws"] = None
    tp = prof.get("tls")
    if tp and not getattr(args, "no_tls", False):
        # --workloads, --conns and --rounds apply to the TLS rows too (the handshake row and the
        # idle connections are kept while any row is); --tls-servers picks their servers.
        trows = [r for r in tp["rows"] if not keep or r[0] in keep]
        if args.conns:
            trows = workload_order({(w, int(c)) for w, _ in trows for c in args.conns.split(",")})
        tss = (args.tls_servers.split(",") if getattr(args, "tls_servers", None)
               else list(tp["servers"]))
        if "skirr-tls" not in tss:
            tss.insert(0, "skirr-tls")
        prof["tls"] = dict(tp, servers=tss, rows=trows, rounds=args.rounds or tp["rounds"])
    else:
        prof["tls"] = None
    hp = prof.get("h2")
    if hp and not getattr(args, "no_h2", False):
        # --workloads, --conns and --rounds apply to the HTTP/2 rows too; --streams replaces their
        # concurrent streams per connection; --h2-servers picks their HTTP/2 servers (skirr-h2c
        # always among them; the HTTP/1.1 baselines stay).
        hrows = [r for r in hp["rows"] if not keep or r[0] in keep]
        if args.conns:
            hrows = [(w, int(c), m) for w, m in dict.fromkeys((w, m) for w, _, m in hrows)
                     for c in args.conns.split(",")]
        if getattr(args, "streams", None):
            ms = [int(x) for x in args.streams.split(",")]
            hrows = [(w, c, m) for w, c in dict.fromkeys((w, c) for w, c, _ in hrows) for m in ms]
        hss = (args.h2_servers.split(",") if getattr(args, "h2_servers", None)
               else list(hp["servers"]))
        if "skirr-h2c" not in hss:
            hss.insert(0, "skirr-h2c")
        # skirr's HTTP/1.1 baseline of a protocol only where skirr serves that protocol here.
        base = [b for b in hp["baselines"] if h2_part.SKIRR[h2_part.BASELINE_OF[b]] in hss]
        prof["h2"] = dict(hp, servers=hss, baselines=base, rows=hrows,
                          rounds=args.rounds or hp["rounds"])
    else:
        prof["h2"] = None
    for s in (servers + (prof["workers"] or {}).get("servers", [])
              + (prof["ws"] or {}).get("servers", []) + (prof["tls"] or {}).get("servers", [])
              + (prof["h2"] or {}).get("servers", []) + (prof["h2"] or {}).get("baselines", [])):
        if s not in SERVERS:
            raise SystemExit(f"unknown server {s}; known: {', '.join(SERVERS)}")
    return prof, servers, rows


def shuffled(live, workload):
    """The live servers that serve `workload`, in a fresh random order."""
    order = [s for s in live if workload in SERVERS[s].serves]
    random.shuffle(order)
    return order


def measure_rounds(rounds, rows, live, prefix, unit, out_json, measure):
    """Every round, each (workload, conns) row's live servers in a fresh random order, one
    `measure(server, workload, conns, tag)` run each (tag: "<prefix><round>-<wl>-c<conns>-<server>",
    its log file's name); each result logged (`unit`: req or msg) and the runs so far written to
    `out_json` after every run. Returns the runs, each with its "round"."""
    runs = []
    total = sum(1 for _ in range(rounds) for w, _ in rows for s in live if w in SERVERS[s].serves)
    done = 0
    for rnd in range(rounds):
        for wl, conns in rows:
            for s in shuffled(live, wl):
                done += 1
                row = measure(s, wl, conns, f"{prefix}{rnd}-{wl}-c{conns}-{s}")
                row["round"] = rnd
                runs.append(row)
                head = f"[{done}/{total}] {prefix}{rnd} {wl} c{conns} {s}:"
                if row["ok"]:
                    log(f"{head} {row['rps']:,.0f} {unit}/s p50 {fmt(row.get('p50_ms'), '.2f')} "
                        f"p99 {fmt(row['p99_ms'], '.2f')} ms cpu {row['cpu_us_per_req']:.1f} "
                        f"us/{unit} gen {row['gen_cpu']:.0%} other/steal cpu0 "
                        f"{row['other_cpu0']:.0%}/{row['steal_cpu0']:.0%}")
                else:
                    log(f"{head} FAILED {row['error'][:300]}")
                out_json.write_text(json.dumps(runs, indent=1))
    return runs


def describe_setup(args, started, label, servers, rows, prof, groups, tools, install, status, seed):
    """The run's metadata, as results.json records it."""
    return {
        "date": started.isoformat(timespec="seconds"), "profile": args.profile, "label": label,
        "commit": git_commit(), "machine": machine_info(),
        "interpreter": {"skirr": interp_identity(venv_python(SKIRR_VENV)),
                        "peers": interp_identity(venv_python(PEERS_VENV)) if groups else None},
        "versions": {"skirr-venv": {k: v for k, v in pip_versions(venv_python(SKIRR_VENV)).items()
                                    if k in ("skirr", "fastapi", "pydantic", "starlette", "uvloop")},
                     "peers-venv": {k: v for k, v in pip_versions(venv_python(PEERS_VENV)).items()
                                    if k in ("uvicorn", "httptools", "h11", "granian", "hypercorn",
                                             "peregrine-server", "weft-server", "gunicorn",
                                             "uvicorn-worker", "websockets", "wsproto", "fastapi",
                                             "pydantic", "starlette", "uvloop", "h2", "hpack",
                                             "hyperframe")} if groups else {},
                     "wrk": run_text(["wrk", "-v"]).splitlines()[0],
                     "h2load": (run_text(["h2load", "--version"]).splitlines() or ["?"])[0],
                     "curl": (run_text(["curl", "--version"]).splitlines() or ["?"])[0],
                     "nginx": run_text([tools.get("nginx") or "nginx", "-v"]),
                     "cc": run_text([os.environ.get("CC", "cc"), "--version"]).splitlines()[0]},
        "config": {"servers": servers, "rows": rows, **{k: v for k, v in prof.items()
                                                          if k not in ("servers", "rows")}},
        "install": install, "not_measured": status, "seed": seed,
        # "passed" when `make bench` or `make bench-targets` ran `make conformance` first and it
        # passed (they set it); the report's Targets section says so.
        "conformance": os.environ.get("BENCH_CONFORMANCE"),
    }


def summary_mismatch(summary, skirr_identity):
    """Why a summary named for an interpreter (bench/RESULTS-3.12.md, `make bench-targets`) must
    not hold this run: the skirr venv's interpreter (interp_identity(): "3.11.7 /path") is
    another version; None when it may (or the name names none)."""
    m = re.search(r"RESULTS-(\d+\.\d+)\.md$", str(summary or ""))
    version = skirr_identity.split()[0] if skirr_identity else "?"
    if m and not (version + ".").startswith(m.group(1) + "."):
        return (f"--summary {summary} names Python {m.group(1)}, but the skirr venv "
                f"({SKIRR_VENV}) runs {version}: set SKIRR_VENV (make bench-targets sets it from "
                "VENV)")
    return None


def run(args):
    """The whole matrix as `run.py matrix` describes it; returns the exit status."""
    prof, servers, rows = plan(args)
    why = summary_mismatch(args.summary, interp_identity(venv_python(SKIRR_VENV)))
    if args.profile == "threads" and gil_enabled(venv_python(SKIRR_VENV)):
        why = (f"--profile threads measures thread workers, which need a free-threaded Python with "
               f"the GIL off; the skirr venv ({SKIRR_VENV}) has the GIL: make bench-threads "
               "PY=.../python3.14t")
    if why:
        raise SystemExit(why)
    os.sched_setaffinity(0, {int(CLIENT_CPU)})
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    random.seed(seed)

    started = datetime.datetime.now(datetime.timezone.utc)
    label = args.label or args.profile
    outdir = new_run_dir(label, started)
    log(f"results in {outdir.relative_to(ROOT)}")

    tp = prof["tls"]
    tservers = tp["servers"] if tp and tp["rows"] else []
    hp = prof["h2"]
    hservers = hp["servers"] + hp["baselines"] if hp and hp["rows"] else []
    need_nginx = "nginx" in servers or any(s.startswith("nginx") for s in tservers + hservers)
    tools = ensure_tools(["wrk", "h2load", "taskset", "gcc"] + (["nginx"] if need_nginx else [])
                         + (["openssl"] if tservers or hservers else [])
                         + (["curl"] if hservers else []))
    for t in ("wrk", "taskset") + (("h2load", "curl") if hservers else ()):
        if not tools[t]:
            raise SystemExit(f"bench: {t} is required and could not be installed")
    wk = prof["workers"]
    wservers = wk["servers"] if wk and wk["rows"] else []
    ck = prof["costs"]
    cservers = ck["servers"] if ck else []
    wsp = prof["ws"]
    wsservers = wsp["servers"] if wsp and wsp["rows"] else []
    groups = peer_groups(servers + wservers + cservers + wsservers + tservers + hservers)
    install = ensure_peers(groups, reinstall=args.reinstall) if groups else {}
    if "limit-c" in servers:
        build_limit()
    if wsservers:
        build_ws_load()

    status = {}  # server -> why it is not measured
    for s in dict.fromkeys(servers + wservers + cservers + wsservers + tservers + hservers):
        g = SERVERS[s].group
        if g and not install.get(g, {}).get("ok"):
            status[s] = "failed to install: " + install.get(g, {}).get("error", "?").strip()[-600:]
        if s.startswith("nginx") and not tools.get("nginx"):
            status[s] = "nginx is not installed and could not be installed"

    meta = describe_setup(args, started, label, servers, rows, prof, groups, tools, install, status,
                          seed)
    log("machine:", meta["machine"]["cpu"], "load", " ".join(meta["machine"]["loadavg_at_start"]))

    live = [s for s in servers if s not in status]
    # Idle memory, which doubles as a start-up check: a server that cannot start is not measured.
    if live:
        log("idle memory / start check")
    idle = idle_memory(live, outdir)
    for s, r in idle.items():
        if not r["ok"]:
            status[s] = "failed to start: " + r["error"]
            log(f"  {s}: {status[s][:300]}")
    live = [s for s in live if s not in status]

    runs = measure_rounds(prof["rounds"], rows, live, "r", "req", outdir / "runs.json",
                          lambda s, wl, conns, tag: measure_row(s, wl, conns, prof, outdir, tag))

    agg = aggregate(runs, prof["rounds"])  # the fixed rates are shares of each median req/s

    wruns = []
    if wservers:
        log("workers row: servers and wrk -t2 share both CPUs")
        wlive = [s for s in wservers if s not in status]
        for rnd in range(wk["rounds"]):
            for wl, conns in wk["rows"]:
                for s in shuffled(wlive, wl):
                    row = measure_row(s, wl, conns, prof, outdir, f"w{rnd}-{wl}-c{conns}-{s}")
                    row["round"] = rnd
                    wruns.append(row)
                    if row["ok"]:
                        log(f"workers r{rnd} {wl} c{conns} {s}: {row['rps']:,.0f} req/s cpu "
                            f"{row['cpu_us_per_req']:.1f} us/req, per process "
                            + " ".join(f"{c:.2f}" for c in row["process_cpu_s"]) + " s")
                    else:
                        log(f"workers r{rnd} {wl} c{conns} {s}: FAILED {row['error'][:300]}")
                    (outdir / "workers.json").write_text(json.dumps(wruns, indent=1))

    cruns = []
    if ck:
        log("cost rows: raw_get c64, each feature on against off (server CPU 0, wrk CPU 1)")
        clive = [s for s in cservers if s not in status]
        for rnd in range(ck["rounds"]):
            cruns += run_round(rnd, clive, prof, outdir)
            (outdir / "costs.json").write_text(json.dumps(cruns, indent=1))

    wsruns, ws_status = run_ws(wsp, wsservers, status, prof, outdir)

    tls_result = None
    if tservers:
        log("TLS rows: each server with its own TLS, server on CPU 0, wrk/h2load on CPU 1")
        tls_result = tls_part.run(tp, status, prof, outdir)
        (outdir / "tls.json").write_text(json.dumps(tls_result, indent=1))

    h2_result = None
    if hservers:
        log("HTTP/2 rows: h2c and h2 over TLS, h2load -t1 on CPU 1, server on CPU 0")
        h2_result = h2_part.run(hp, status, prof, outdir)
        (outdir / "h2.json").write_text(json.dumps(h2_result, indent=1))

    appcpu = {}
    if rows:
        log("app CPU per request, called directly")
        appcpu = app_cpu(sorted({w for w, _ in rows}), args.app_n)

    fixed = []
    if prof["fixed_rate"] and tools.get("h2load") and not args.no_fixed:
        log("fixed-rate latency (h2load)")
        for rnd in range(prof["fixed_rounds"]):
            for wl, conns in prof["fixed_rate"]:
                for s in shuffled(live, wl):
                    a = agg.get((wl, conns, s))
                    if not a or not a["rps"]:
                        continue
                    rates = [(p, a["rps"] * p / 100) for p in prof["fixed_pcts"]]
                    rs = measure_fixed(s, wl, conns, rates, prof["fixed_duration"], outdir,
                                       f"fixed-r{rnd}-{wl}-c{conns}-{s}")
                    for r in rs:
                        r["round"] = rnd
                        log(f"  r{rnd} {wl} {s} {r.get('pct')}%: " + (
                            f"p99 {r['p99_ms']:.2f} ms at {r['achieved_rps']:,.0f}/"
                            f"{r['offered_rps']:,.0f} req/s"
                            if r["ok"] else f"FAILED {r['error'][:200]}"))
                    fixed.extend(rs)

    streams = []
    if prof["stream_samples"] and not args.no_stream:
        log("streaming first chunk / total")
        for rnd in range(prof["stream_rounds"]):
            for s in shuffled(live, "streaming"):
                r = measure_stream(s, prof["stream_samples"], outdir, f"stream-r{rnd}-{s}")
                r["round"] = rnd
                streams.append(r)

    result = {"meta": meta, "idle": idle, "runs": runs, "app_cpu": appcpu, "fixed_rate": fixed,
              "streaming": streams, "workers": wruns, "costs": cruns, "ws": wsruns,
              "ws_not_measured": ws_status, "tls": tls_result, "h2": h2_result}
    (outdir / "results.json").write_text(json.dumps(result, indent=1))
    report, agg = write_report(result, outdir, args.summary)
    if args.summary:
        log(f"summary written to {args.summary}")
    print(report)
    log(f"results in {outdir.relative_to(ROOT)}")
    return 1 if (skirr_failed(agg) or skirr_failed(aggregate(wruns, 0))
                 or skirr_failed(aggregate(cruns, 0)) or skirr_failed(aggregate(wsruns, 0))
                 or "skirr" in ws_status or tls_part.skirr_failed(tls_result)
                 or h2_part.skirr_failed(h2_result)) else 0


def run_ws(wsp, wsservers, status, prof, outdir):
    """The WebSocket rows: a start check per server (it must echo the first row's messages
    exactly; one that cannot is not measured, with the reason), then every round, each row's
    servers in a fresh random order. Returns (the runs, {server: why it is not measured})."""
    if not wsservers:
        return [], {}
    log("WebSocket rows: ws_load on CPU 1, server on CPU 0")
    ws_status = {s: status[s] for s in wsservers if s in status}
    for s in wsservers:
        if s not in ws_status and not set(SERVERS[s].serves) & {w for w, _ in wsp["rows"]}:
            ws_status[s] = "does not serve the WebSocket rows in this harness (peers.py)"
        if s not in ws_status:
            why = ws_start_check(s, wsp["rows"][0][0], outdir, f"ws-start-{s}")
            if why:
                ws_status[s] = "failed the WebSocket start check: " + why
                log(f"  {s}: {ws_status[s][:300]}")
    live = [s for s in wsservers if s not in ws_status]
    runs = measure_rounds(wsp["rounds"], wsp["rows"], live, "ws", "msg", Path(outdir) / "ws.json",
                          lambda s, wl, conns, tag: measure_ws_row(s, wl, conns, prof, outdir, tag))
    return runs, ws_status
