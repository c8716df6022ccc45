"""The cost rows (issue 13): what a feature costs in CPU per request, on against off.

Owns: the pairs measured (skirr's access log, skirr's --metrics-port, and uvicorn's access log for
comparison), one round of them (every server of the pairs once, in a fresh random order, each run
the matrix's pinned `measure_row`: server on CPU 0, `wrk -t1` on CPU 1, raw_get at 64
connections), and the checks that the feature really was on during the run: an access-log
server's log file has a line per request; a metrics server's endpoint counts at least the
requests wrk completed.

Never: aggregates or judges (report.py's `cost_figures` does: per-round on/off ratios of CPU per
request, their median and range, against the targets).
"""
from __future__ import annotations

import random
import urllib.request
from pathlib import Path

from .env import log
from .measure import measure_row
from .peers import METRICS_PORT_FILE

# (what, server with it off, server with it on); the access log writes to the server's log file
COSTS = [
    ("skirr access log", "skirr", "skirr-access-log"),
    ("skirr metrics", "skirr", "skirr-metrics"),
    ("uvicorn access log", "uvicorn-httptools", "uvicorn-access-log"),
]
ACCESS_LINE = {"skirr-access-log": '"GET / HTTP/1.1" 200', "uvicorn-access-log": '"GET / HTTP/1.1" 200'}
TARGET_ACCESS = 1.25  # skirr's access log on / off, CPU per request, at most (issue 13)


def cost_servers():
    """Every server of the pairs, each once, in COSTS order."""
    out = []
    for _, off, on in COSTS:
        out += [s for s in (off, on) if s not in out]
    return out


def _scrape_requests(srv, row):
    """skirr-metrics: the endpoint's skirr_requests_total (summed over labels) must cover what
    wrk completed; recorded as metrics_requests."""
    mport = int((Path(srv.tmp) / METRICS_PORT_FILE).read_text())
    with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10) as r:
        text = r.read().decode()
    total = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                if line.startswith("skirr_requests_total{"))
    if total < row["requests"]:
        raise RuntimeError(f"metrics count {total:.0f} requests, wrk completed {row['requests']}")
    row["metrics_requests"] = int(total)


def run_round(rnd, servers, cfg, outdir, wl="raw_get", conns=64):
    """One round of the cost rows over `servers` (those not excluded); returns the rows."""
    order = list(servers)
    random.shuffle(order)
    rows = []
    for s in order:
        tag = f"cost{rnd}-{wl}-c{conns}-{s}"
        row = measure_row(s, wl, conns, cfg, outdir, tag,
                          after=_scrape_requests if s == "skirr-metrics" else None)
        row["round"] = rnd
        if row["ok"] and s in ACCESS_LINE:
            logfile = Path(outdir) / "logs" / f"{tag}.log"
            with open(logfile, errors="replace") as f:
                lines = sum(1 for line in f if ACCESS_LINE[s] in line)
            row["log_lines"] = lines
            if lines < row["requests"]:
                row.update(ok=False, error=f"{lines} access-log lines for {row['requests']} "
                                           "requests: the access log was not on")
        rows.append(row)
        if row["ok"]:
            log(f"costs r{rnd} {wl} c{conns} {s}: {row['rps']:,.0f} req/s cpu "
                f"{row['cpu_us_per_req']:.2f} us/req other/steal cpu0 {row['other_cpu0']:.0%}/"
                f"{row['steal_cpu0']:.0%}")
        else:
            log(f"costs r{rnd} {wl} c{conns} {s}: FAILED {row['error'][:300]}")
    return rows
