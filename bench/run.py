#!/usr/bin/env python3
"""skirr's benchmark harness: skirr beside its peers and the machine's limit (issue 6).

    run.py matrix --profile quick|full [--summary bench/RESULTS.md]   throughput, fixed rate, streaming,
                                                                      the workers row, the cost rows
    run.py matrix --profile costs [--summary bench/COSTS.md]          the cost rows alone: access
                                                                      log and metrics on vs off
    run.py matrix --profile workers [--summary bench/WORKERS.md]      the workers row alone
    run.py matrix --profile threads [--summary bench/THREADS.md]      on a free-threaded Python:
                                                                      thread workers against process
                                                                      workers and granian's threads
    run.py matrix --profile ws                                        the WebSocket rows alone:
                                                                      echo msgs/s, p50/p99, CPU/msg
    run.py matrix --profile tls [--summary bench/TLS.md]              the TLS rows alone: CPU/req
                                                                      against peers, TLS cost against
                                                                      nginx, handshakes, idle memory
    run.py matrix --profile h2 [--summary bench/HTTP2.md]             the HTTP/2 rows alone: h2c
                                                                      and h2 over TLS, CPU/req
                                                                      against peers and nginx,
                                                                      HTTP/2 against HTTP/1.1
    run.py scale [--rows http:10000,ws:10000] [--servers ...]    the scale rows (issue 37): memory
                 [--summary bench/SCALE.md]                        per idle connection held by
                                                                      bench/scale_client.c, fan-out
                                                                      (bench/fanout_client.c), churn
    run.py syscalls [--servers skirr,limit-c]                         the syscall gate
    run.py callgrind [--n 2000] [--workload raw_get] [--conns 1]      instructions per request
                     [--servers skirr,peregrine]                      (skirr's, and peers' beside it)
                     [--tls | --h2 h2c|h2 [--streams 10]]             over TLS, over HTTP/2 (h2load)
    run.py report bench/results/<run> [--summary bench/RESULTS.md]    re-render a run's report
                                                                      and its charts
    run.py setup [--servers ...]                                      install peers, build the limit
                                                                      and the WebSocket load
                                                                      generator, make the charts' venv

Every server serves the same app file (bench/apps) on the same base interpreter and uvloop, one
worker, access log off, with the server and all its threads pinned to CPU 0 (`taskset -c 0`) and
the load generator (`wrk -t1`, `h2load -t1`) and this harness pinned to CPU 1. Status and exact
body are checked before and after every run (the workers row is the exception: 2 worker
processes per server, the server and `wrk -t2` sharing both CPUs); a socket error, timeout or non-2xx fails the run.
Servers run in a fresh random order for every row of every round, and a peer's ratio to skirr is
taken within the same round. Only the standard library is used here; the report's charts are
drawn with matplotlib in a venv of their own (bench/.venv-charts, made by the harness).

This file is the command line only; the harness is the package bench/harness/ (see its modules).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

from harness import charts, matrix, measure, peers, report, scale, tls, traced
from harness.env import CLIENT_CPU, TLS_DIR_ENV, ensure_tools
from harness.matrix import PROFILES
from harness.peers import SERVERS
from harness.workloads import WORKLOADS


def cmd_matrix(args):
    return matrix.run(args)


def cmd_syscalls(args):
    ensure_tools(["strace", "taskset", "gcc"])
    names = args.servers.split(",")
    groups = peers.peer_groups(names)
    if groups:
        peers.ensure_peers(groups)
    if "limit-c" in names:
        peers.build_limit()
    os.sched_setaffinity(0, {int(CLIENT_CPU)})
    return traced.syscalls(names, args.requests)


def cmd_setup(args):
    full = PROFILES["full"]
    names = args.servers.split(",") if args.servers else full["servers"] + full["ws"]["servers"]
    ensure_tools(["wrk", "h2load", "nginx", "strace", "taskset", "gcc"])
    res = peers.ensure_peers(peers.peer_groups(names), reinstall=args.reinstall)
    peers.build_limit()
    peers.build_ws_load()
    for g, r in res.items():
        print(f"{g}: {'ok' if r['ok'] else 'FAILED: ' + r['error'][-400:]}")
    py, why = charts.charts_python()
    print(f"charts: {'ok' if py else 'FAILED: ' + why}")
    return 0


def cmd_callgrind(args):
    ensure_tools(["valgrind", "callgrind_control", "strip", "readelf"])
    skirr = ("skirr-access-log" if args.access_log else "skirr-metrics" if args.metrics
             else "skirr")
    names = [skirr] + [s for s in (args.servers or "").split(",") if s and s != "skirr"]
    if args.h2:
        if skirr != "skirr" or args.tls:
            raise SystemExit("callgrind: --h2 counts skirr-h2c or skirr-h2 alone or beside peers' "
                             "HTTP/2 servers (h2 is over TLS already; no access-log or metrics "
                             "variant)")
        suffix = "-" + args.h2
        names = [n if n.endswith(suffix) else n + suffix for n in names]
        if not args.streams:
            args.streams = 1
        if args.streams < 1:
            raise SystemExit("callgrind: --streams must be at least 1")
    elif args.streams:
        raise SystemExit("callgrind: --streams is for --h2 (concurrent streams a connection)")
    if args.tls:
        if skirr != "skirr":
            raise SystemExit("callgrind: --tls counts skirr-tls alone or beside peers' -tls "
                             "servers (no access-log or metrics variant)")
        names = [n if n.endswith("-tls") else n + "-tls" for n in names]
    unknown = [s for s in names if s not in SERVERS]
    if unknown:
        raise SystemExit(f"callgrind: unknown server {', '.join(unknown)}; known: "
                         + ", ".join(SERVERS))
    if args.conns < 1 or args.n < args.conns:
        raise SystemExit("callgrind: --conns must be at least 1 and at most --n")
    cannot = [s for s in names if args.workload not in SERVERS[s].serves]
    if cannot:
        raise SystemExit(f"callgrind: {', '.join(cannot)} does not serve {args.workload}")
    groups = peers.peer_groups(names)
    if groups:
        state = peers.ensure_peers(groups)
        failed = [g for g in groups if not state[g]["ok"]]
        if failed:
            raise SystemExit(f"callgrind: peer group {', '.join(failed)} did not install: "
                             + state[failed[0]]["error"][-400:])
    if "limit-c" in names:
        peers.build_limit()
    over_tls = args.tls or args.h2 == "h2"
    if not over_tls:
        return traced.callgrind(args.n, names, args.workload, args.conns, streams=args.streams)
    d, _ = tls.make_cert()
    try:
        return traced.callgrind(args.n, names, args.workload, args.conns, tls=True,
                                streams=args.streams)
    finally:
        shutil.rmtree(d, ignore_errors=True)
        os.environ.pop(TLS_DIR_ENV, None)


def cmd_scale(args):
    return scale.main(args)


def cmd_report(args):
    """Re-renders the report of a finished matrix run, and its charts, from its results.json."""
    print(report.rerender(args.results, args.summary))
    return 0


def cmd_app_cpu(args):
    measure.app_cpu_child(args.workload, args.n)


SUMMARY_HELP = ("also write the markdown report here (bench/RESULTS.md), its charts into charts/ "
                "beside it (charts/<name>/ for a summary not named RESULTS.md)")


def build_parser():
    """The command line (bench/test_plan.py parses with it)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("matrix", help="throughput, fixed-rate latency, streaming, efficiency")
    m.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    m.add_argument("--servers", help="comma-separated (skirr is always included); known: "
                   + ", ".join(SERVERS))
    m.add_argument("--workloads", help="comma-separated subset of the profile's workloads")
    m.add_argument("--conns", help="comma-separated connection counts (replaces the profile's)")
    m.add_argument("--rounds", type=int, help="rounds of every row, the fixed-rate, workers, cost "
                   "and WebSocket rows included (default: the profile's)")
    m.add_argument("--duration", type=int, help="seconds per measured run")
    m.add_argument("--warmup", type=int, help="seconds of warm-up before each run")
    m.add_argument("--no-fixed", action="store_true", help="skip the fixed-rate phase")
    m.add_argument("--no-stream", action="store_true", help="skip the streaming phase")
    m.add_argument("--no-workers", action="store_true",
                   help="skip the workers row (2 worker processes sharing both CPUs)")
    m.add_argument("--no-costs", action="store_true",
                   help="skip the cost rows (access log and metrics on against off)")
    m.add_argument("--no-ws", action="store_true",
                   help="skip the WebSocket rows (echo over bench/ws_load.c)")
    m.add_argument("--ws-servers", help="comma-separated servers of the WebSocket rows (skirr is "
                   "always included; default: the profile's)")
    m.add_argument("--no-tls", action="store_true",
                   help="skip the TLS rows (each server with its own TLS, the handshake row, idle "
                   "TLS connections)")
    m.add_argument("--tls-servers", help="comma-separated servers of the TLS rows (skirr-tls is "
                   "always included; default: the profile's)")
    m.add_argument("--no-h2", action="store_true",
                   help="skip the HTTP/2 rows (h2c and h2 over TLS with h2load)")
    m.add_argument("--h2-servers", help="comma-separated HTTP/2 servers of the HTTP/2 rows "
                   "(skirr-h2c is always included; default: the profile's)")
    m.add_argument("--streams", help="comma-separated concurrent streams per connection of the "
                   "HTTP/2 rows (h2load -m; replaces the profile's)")
    m.add_argument("--app-n", type=int, default=20000, help="calls per app-CPU sample")
    m.add_argument("--seed", type=int, default=None, help="random seed for the server order")
    m.add_argument("--label", help="results folder suffix (default: the profile)")
    m.add_argument("--summary", help=SUMMARY_HELP)
    m.add_argument("--reinstall", action="store_true", help="retry peers that failed to install")
    s = sub.add_parser("syscalls", help="the syscall gate (1,001 requests, one connection)")
    s.add_argument("--servers", default="skirr,limit-c")
    s.add_argument("--requests", type=int, default=1001)
    st = sub.add_parser("setup", help="install the peers and tools, build the limit and ws_load, "
                        "make the charts' venv")
    st.add_argument("--servers")
    st.add_argument("--reinstall", action="store_true")
    cg = sub.add_parser("callgrind", help="instructions per request under callgrind")
    cg.add_argument("--n", type=int, default=2000, help="requests per phase")
    cg.add_argument("--workload", default="raw_get",
                    choices=[w for w in WORKLOADS if w not in ("pipelined_get", "file_1m")],
                    help="what every server serves (default raw_get)")
    cg.add_argument("--conns", type=int, default=1,
                    help="1: a sequential and a pipelined phase on one connection; more: one "
                    "phase over this many closed-loop connections")
    cg.add_argument("--servers", help="comma-separated peers counted after skirr, one at a time "
                    "(e.g. peregrine); their extension modules are run from copies stripped of "
                    "debug information")
    cg.add_argument("--access-log", action="store_true",
                    help="with skirr's access log on, written to its log file (issue 13)")
    cg.add_argument("--metrics", action="store_true",
                    help="with --metrics-port on (issue 13)")
    cg.add_argument("--tls", action="store_true",
                    help="over TLS (issue 32): skirr-tls and each peer's -tls server with the "
                    "run's test certificate, every connection handshaken in the warm-up")
    cg.add_argument("--h2", choices=["h2c", "h2"],
                    help="over HTTP/2 (issue 33): skirr-h2c (prior knowledge) or skirr-h2 (TLS, "
                    "ALPN) and each peer's, driven by h2load; one phase of --n requests over "
                    "--conns connections of --streams streams")
    cg.add_argument("--streams", type=int, default=0,
                    help="with --h2: concurrent streams a connection (h2load -m; default 1)")
    sc = sub.add_parser("scale", help="the scale rows (issue 37): idle HTTP and WebSocket "
                        "connections held, memory per connection, open time, errors, leak")
    sc.add_argument("--rows", help="comma-separated mode:count (mode http: after one request, "
                    "ws: an idle WebSocket, tcp: nothing sent, fanout: a fan-out row to count "
                    "WebSocket clients; default tcp:10000,http:10000,http:50000,ws:10000,"
                    "ws:50000,fanout:1000,fanout:5000; given, only the rows named run, so "
                    "--rows fanout:1000,fanout:5000 --no-churn runs the fan-out rows alone)")
    sc.add_argument("--servers", help="comma-separated subset (skirr is always included)")
    sc.add_argument("--rounds", type=int, help="rounds of every idle row (default 1)")
    sc.add_argument("--churn-rounds", type=int, help="rounds of the churn rows (default 3)")
    sc.add_argument("--no-idle", action="store_true", help="skip the idle-connection rows")
    sc.add_argument("--no-churn", action="store_true",
                    help="skip the churn rows (wrk -c64, a new connection per request)")
    sc.add_argument("--no-profile", action="store_true",
                    help="skip the churn rows' profile (one more skirr run per churn row under "
                    "perf record, its samples by path: accept, close, request, Python, kernel)")
    sc.add_argument("--no-fanout", action="store_true",
                    help="skip the fan-out rows (one publisher message to N WebSocket clients)")
    sc.add_argument("--fanout-rounds", type=int, help="rounds of the fan-out rows (default 3)")
    sc.add_argument("--fanout-broadcasts", type=int,
                    help="measured broadcasts per fan-out row (default 200, after 5 unmeasured)")
    sc.add_argument("--fanout-sizes", help="comma-separated message sizes of the fan-out rows, "
                    "bytes (default 64,1024)")
    sc.add_argument("--seed", type=int, default=None, help="random seed for the server order")
    sc.add_argument("--summary", help="also write the report here (bench/SCALE.md), its chart "
                    "into charts/SCALE/ beside it")
    sc.add_argument("--reinstall", action="store_true", help="retry peers that failed to install")
    sc.add_argument("--rerender", metavar="RUN", help="re-render a finished scale run's report "
                    "from its results.json (bench/results/<run>) instead of measuring")
    sc.add_argument("--merge", metavar="RUN", action="append",
                    help="the parts (idle, fan-out, churn) this run does not measure or "
                    "re-render taken from an earlier run's results.json (bench/results/<run>), "
                    "named in the report as from that run; given again, the next run fills the "
                    "parts still missing")
    rp = sub.add_parser("report", help="re-render a finished matrix run's report and charts "
                        "(results.json)")
    rp.add_argument("results", help="the run's folder under bench/results/")
    rp.add_argument("--summary", help=SUMMARY_HELP)
    a = sub.add_parser("app-cpu", help=argparse.SUPPRESS)
    a.add_argument("--workload", required=True)
    a.add_argument("--n", type=int, default=20000)
    return ap


def main():
    args = build_parser().parse_args()
    commands = {"matrix": cmd_matrix, "syscalls": cmd_syscalls, "setup": cmd_setup,
                "report": cmd_report, "callgrind": cmd_callgrind, "scale": cmd_scale,
                "app-cpu": cmd_app_cpu}
    return commands[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
