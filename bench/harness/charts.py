"""The report's charts: what is drawn from a run's results, the charts' venv, the PNGs' files.

Owns: the three charts of a run with throughput rows and their fixed file names (server CPU per
request by workload and connections, req/s against connections per workload, latency percentiles
at fixed rates), the data each draws (the report's medians, never figures of its own), the
servers' stable order and colours, the reason a chart is not drawn (no data for it, matplotlib
missing, drawing failed), the charts' venv (bench/.venv-charts: matplotlib as pinned in
bench/charts.txt, made from the skirr venv's base interpreter) and the markdown that embeds them.

Never: imports matplotlib (draw.py does, in the charts' venv, from the spec this module writes to
its standard input) or fails a report: a chart that cannot be drawn is one line saying which and
why.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from .env import BENCH, SKIRR_VENV, base_python, log, venv_python
from .peers import SERVERS
from .workloads import workload_order

CHARTS_VENV = Path(os.environ.get("BENCH_CHARTS_VENV", BENCH / ".venv-charts"))
CHARTS_FILE = BENCH / "charts.txt"  # the charts' venv requirements (matplotlib, pinned)
DRAW = Path(__file__).resolve().with_name("draw.py")

# The charts in the report's order: (file, what it shows).
CPU, RPS, LATENCY = "cpu-per-request.png", "rps-vs-connections.png", "fixed-rate-latency.png"
SCALE_MEMORY = "scale-memory-per-connection.png"  # bench/SCALE.md's (issue 37)
CHARTS = {CPU: "server CPU per request by workload and connections",
          RPS: "requests per second against connections",
          LATENCY: "latency percentiles at fixed rates",
          SCALE_MEMORY: "memory per idle connection by server"}

# Figures: WIDTH inches wide at DPI, HEADER inches for the title, the legend (LEGEND of it) and the
# footnote plus ROW inches per row of facets, so a chart's pixel size follows from its rows alone.
WIDTH, HEADER, LEGEND, ROW, DPI = 12.0, 1.2, 0.45, 3.4, 100
NOTE_WIDTH, NOTE_LINE = 180, 0.16  # the footnote's characters per line, inches per extra line
BAR_GROUPS_PER_ROW = 6  # CPU facets (one per connection count) share a row up to this many groups
FACETS_PER_ROW = 3  # req/s facets (one per workload) per row

# Each server's colour in every chart of every run; limits in greys. Others: SPARE by name.
COLORS = {
    "skirr": "#d62728", "uvicorn-httptools": "#1f77b4", "uvicorn-h11": "#17becf",
    "granian": "#2ca02c", "hypercorn": "#9467bd", "peregrine": "#ff7f0e", "weft": "#8c564b",
    "gunicorn-uvicorn": "#e377c2", "uvicorn-websockets": "#1f77b4", "uvicorn-wsproto": "#17becf",
    "limit-c": "#404040", "nginx": "#a0a0a0", "nginx-scale": "#a0a0a0",
}
SPARE = ("#bcbd22", "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#c49c94", "#f7b6d2")
KIND_RANK = {"skirr": 0, "peer": 1, "limit": 2}

# The fixed-rate rows' percentiles drawn, in order: (key in the row, label).
PERCENTILES = (("p50_ms", "p50"), ("p90_ms", "p90"), ("p99_ms", "p99"), ("p999_ms", "p99.9"))


def server_order(names):
    """The servers sorted stably: skirr first, then the peers, then the limits, each in the
    server table's order (unknown names last, by name)."""
    table = list(SERVERS)

    def key(s):
        if s not in SERVERS:
            return (3, len(table), s)
        return (KIND_RANK.get(SERVERS[s].kind, 1), table.index(s), s)
    return sorted(set(names), key=key)


def color(server):
    if server in COLORS:
        return COLORS[server]
    return SPARE[sum(server.encode()) % len(SPARE)]


def layout(rows, footnote):
    """A figure's size (width, height in inches), its bands' height ratios (the legend's, then
    each row's) and its footnote wrapped, for `rows` rows of facets: each footnote line past the
    first adds NOTE_LINE inches."""
    lines = textwrap.wrap(footnote, NOTE_WIDTH)
    return {"size": [WIDTH, round(HEADER + ROW * rows + NOTE_LINE * max(0, len(lines) - 1), 2)],
            "heights": [LEGEND] + [ROW] * rows, "dpi": DPI, "footnote": "\n".join(lines)}


def pack(facets, weight, cap):
    """The facets in rows, in order, a row holding facets up to `cap` in summed weight."""
    rows, cur, total = [], [], 0
    for f in facets:
        w = weight(f)
        if cur and total + w > cap:
            rows.append(cur)
            cur, total = [], 0
        cur.append(f)
        total += w
    if cur:
        rows.append(cur)
    return rows


def limit(server):
    """Limits are drawn dashed in line charts: a reference, not a contender."""
    return server in SERVERS and SERVERS[server].kind == "limit"


def legend(names):
    return [[s, color(s), limit(s)] for s in names]


def cpu_chart(agg, rounds):
    """Grouped bars: one facet per connection count, the workloads measured at it along x, a bar
    per server (median CPU µs per request); (spec, None) or (None, why not)."""
    rows = workload_order({(w, c) for (w, c, _) in agg})
    if not any(a["cpu_us_per_req"] for a in agg.values()):
        return None, "no throughput run succeeded"
    facets = []
    for c in sorted({c for _, c in rows}):
        groups = [w for w, c2 in rows if c2 == c]
        series = []
        for s in server_order(s for (_, c2, s) in agg if c2 == c):
            ys, marks = [], []
            for w in groups:
                a = agg.get((w, c, s))
                ys.append(a["cpu_us_per_req"] if a and a["cpu_us_per_req"] else None)
                marks.append("failed" if a and not a["cpu_us_per_req"] else "")
            series.append({"label": s, "color": color(s), "y": ys, "marks": marks})
        facets.append({"kind": "bars", "title": f"{c} connection{'s' if c != 1 else ''}",
                       "groups": groups, "series": series, "ylabel": "server CPU per request (µs)",
                       "value_fmt": "{:.1f}"})
    packed = pack(facets, lambda f: len(f["groups"]), BAR_GROUPS_PER_ROW)
    names = server_order(s for (_, _, s) in agg)
    note = ("The server's utime+stime (all its processes) over the measured interval ÷ completed "
            "requests. Server pinned to CPU 0, wrk to CPU 1.")
    return {"file": CPU, **layout(len(packed), note), "rows": packed, "columns": None,
            "legend": legend(names), "legend_kind": "patch",
            "title": f"Server CPU per request (µs, median of {rounds} rounds; lower is better)"}, None


def rps_chart(agg, rounds):
    """Lines: one facet per workload measured at two or more connection counts, a line per
    server (median req/s, bars min–max over rounds); (spec, None) or (None, why not)."""
    conns = {}
    for (w, c, _) in agg:
        conns.setdefault(w, set()).add(c)
    order = [w for w, _ in workload_order({(w, min(cs)) for w, cs in conns.items()})]
    multi = [w for w in order if len(conns[w]) >= 2]
    if not multi:
        counts = ", ".join(f"c{c}" for c in sorted({c for cs in conns.values() for c in cs}))
        return None, (f"every workload was measured at one connection count ({counts}); req/s "
                      "against connections needs two or more")
    facets = []
    for w in multi:
        xs = sorted(conns[w])
        series = []
        for s in server_order(s for (w2, _, s) in agg if w2 == w):
            a = [agg.get((w, c, s)) for c in xs]
            ys = [x["rps"] if x and x["rps"] else None for x in a]
            if not any(ys):
                continue
            series.append({"label": s, "color": color(s), "dashed": limit(s), "y": ys,
                           "lo": [x["rps_min"] if x and x["rps"] else None for x in a],
                           "hi": [x["rps_max"] if x and x["rps"] else None for x in a]})
        facets.append({"kind": "lines", "title": w, "x": xs, "xticklabels": [str(c) for c in xs],
                       "log2_x": True, "series": series, "xlabel": "connections",
                       "ylabel": "requests per second (log scale)", "log_y": True,
                       "y_thousands": True})
    packed = pack(facets, lambda f: 1, FACETS_PER_ROW)
    names = server_order(s["label"] for f in facets for s in f["series"])
    single = [f"{w} c{min(conns[w])}" for w in order if len(conns[w]) < 2]
    note = "Points: median req/s over rounds; bars: min–max; dashed: the limits."
    if single:
        note += " Not shown (one connection count): " + ", ".join(single) + "."
    return {"file": RPS, **layout(len(packed), note), "rows": packed,
            "columns": min(FACETS_PER_ROW, len(facets)), "legend": legend(names),
            "legend_kind": "line",
            "title": f"Requests per second against connections (median of {rounds} rounds; "
                     "higher is better)"}, None


def latency_chart(fixed):
    """Lines on a log scale: one facet per (workload, connections, load), the percentiles the
    fixed-rate rows record along x (`fixed`: one row per server and load, the medians over
    rounds of report.aggregate_fixed()), a line per server, a row of loads per (workload,
    connections) sharing its y axis; (spec, None) or (None, why not)."""
    if not fixed:
        return None, "this run has no fixed-rate rows"
    ok = [r for r in fixed if r["ok"] and r.get("pct") is not None]
    if not ok:
        return None, "no fixed-rate run succeeded"
    pcts = [(k, label) for k, label in PERCENTILES if all(r.get(k) is not None for r in ok)]
    if not pcts:
        return None, "the fixed-rate rows record no latency percentile"
    rows = []
    for w, c in workload_order({(r["workload"], r["conns"]) for r in ok}):
        row = []
        for pct in sorted({r["pct"] for r in ok if (r["workload"], r["conns"]) == (w, c)}):
            by = {r["server"]: r for r in ok if (r["workload"], r["conns"], r["pct"]) == (w, c, pct)}
            series = [{"label": s, "color": color(s), "dashed": limit(s),
                       "y": [by[s][k] for k, _ in pcts]}
                      for s in server_order(by)]
            row.append({"kind": "lines", "title": f"{w}, {c} connections, {pct}% load",
                        "x": list(range(len(pcts))), "xticklabels": [lb for _, lb in pcts],
                        "series": series, "xlabel": "percentile", "ylabel": "latency (ms)",
                        "log_y": True, "share_y": True})
        rows.append(row)
    note = ("h2load --rps; each point the median over rounds; the offered rate is the load's share "
            "of each server's own median req/s, so servers are offered different absolute rates.")
    failed = {}  # server -> "workload cN" -> the loads that failed (None: the server did not start)
    for r in fixed:
        if not r["ok"]:
            failed.setdefault(r["server"], {}).setdefault(
                f"{r['workload']} c{r['conns']}", []).append(r.get("pct"))
    if failed:
        def loads(ps):
            if None in ps:
                return "(did not start)"
            return "at " + "/".join(f"{p}%" for p in sorted(ps))
        note += " Failed, not shown: " + "; ".join(
            f"{s} " + ", ".join(f"{row} {loads(ps)}" for row, ps in sorted(failed[s].items()))
            for s in server_order(failed)) + "."
    names = server_order(s["label"] for row in rows for f in row for s in f["series"])
    return {"file": LATENCY, **layout(len(rows), note), "rows": rows, "columns": None,
            "legend": legend(names), "legend_kind": "line",
            "title": "Latency percentiles at fixed rates (ms, log scale; lower is better)"}, None


def scale_chart(figs):
    """The scale rows' chart (issue 37): one facet per mode (connected with nothing sent, HTTP
    keep-alive after one request, WebSocket), the connection counts along x, a bar per server (KiB of RSS growth per idle
    connection, the median of its rounds); (spec, None) or (None, why not). `figs`:
    scale.figures()."""
    if not any(f["kib_rss"] is not None for f in figs.values()):
        return None, "no scale row held its connections"
    facets = []
    for mode, title in (("tcp", "connected, nothing sent"),
                        ("http", "HTTP keep-alive, after one request"), ("ws", "WebSocket")):
        keys = [k for k in figs if k[0] == mode]
        if not keys:
            continue
        groups = sorted({n for _, n, _ in keys})
        series = []
        for s in server_order(s for _, _, s in keys):
            ys = [figs[(mode, n, s)]["kib_rss"] if (mode, n, s) in figs else None for n in groups]
            marks = ["failed" if (mode, n, s) in figs and figs[(mode, n, s)]["kib_rss"] is None
                     else "" for n in groups]
            series.append({"label": s, "color": color(s), "y": ys, "marks": marks})
        facets.append({"kind": "bars", "title": title, "groups": [f"{n:,}" for n in groups],
                       "series": series, "ylabel": "RSS growth per connection (KiB)",
                       "value_fmt": "{:.2f}"})
    names = server_order(s for _, _, s in figs)
    note = ("(RSS with all held - RSS before) / connections held, summed over the server's "
            "processes; server pinned to CPU 0, bench/scale_client.c on CPU 1.")
    return {"file": SCALE_MEMORY, **layout(1, note), "rows": [facets], "columns": None,
            "legend": legend(names), "legend_kind": "patch",
            "title": "Memory per idle connection (KiB; lower is better)"}, None


def chart_specs(result, agg, fixed_agg=()):
    """{file: (spec, None) or (None, why it is not drawn)} for a run with throughput rows, in the
    report's order; {} for a run without (a part alone: workers, costs, ws). `agg`: the
    throughput rows' aggregate (report.aggregate()); `fixed_agg`: the fixed-rate rows' medians
    over rounds (report.aggregate_fixed())."""
    if not result["runs"]:
        return {}
    rounds = result["meta"]["config"]["rounds"]
    builders = {CPU: lambda: cpu_chart(agg, rounds), RPS: lambda: rps_chart(agg, rounds),
                LATENCY: lambda: latency_chart(list(fixed_agg))}
    out = {}
    for f, build in builders.items():
        try:
            out[f] = build()
        except Exception as exc:  # noqa: BLE001 - a results file this code misreads: say so
            out[f] = (None, f"its data could not be read from the results: "
                            f"{type(exc).__name__}: {exc}")
    return out


# ----------------------------------------------------------------------------------------------
# The charts' venv


def requirements():
    return [l.split("#", 1)[0].strip() for l in CHARTS_FILE.read_text().splitlines()
            if l.split("#", 1)[0].strip()]


def charts_python():
    """The charts' venv's interpreter, made when missing, broken or when bench/charts.txt changed:
    (python, None), or (None, why it could not be made). It only draws PNGs, so whichever
    interpreter it was made from serves every run: a bench run on another interpreter (make bench
    PY=...) reuses it instead of making it again. A new one is made from the skirr venv's base
    interpreter."""
    reqs = requirements()
    base = base_python() if (SKIRR_VENV / "pyvenv.cfg").exists() else sys.executable
    key = hashlib.sha256("\n".join(reqs).encode()).hexdigest()
    state = CHARTS_VENV / "bench-state.json"
    py = venv_python(CHARTS_VENV)
    if state.exists() and Path(py).exists():  # exists() follows the link: a removed base fails it
        try:
            if json.loads(state.read_text()).get("key") == key:
                return py, None
        except ValueError:
            pass
    log(f"installing {' '.join(reqs)} into {CHARTS_VENV} (the report's charts)")
    shutil.rmtree(CHARTS_VENV, ignore_errors=True)
    try:
        subprocess.run([base, "-m", "venv", str(CHARTS_VENV)], check=True, capture_output=True,
                       text=True, timeout=300)
        p = subprocess.run([py, "-m", "pip", "install", "-q", *reqs], capture_output=True,
                           text=True, timeout=900)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"could not make {CHARTS_VENV}: {type(exc).__name__}: {exc}"
    if p.returncode != 0:
        err = [l for l in p.stderr.splitlines() if l.strip() and not l.startswith("WARNING")]
        return None, (f"pip could not install {' '.join(reqs)} into {CHARTS_VENV}: "
                      + (err[-1] if err else f"exit status {p.returncode}"))
    state.write_text(json.dumps({"key": key, "requirements": reqs, "base": base}))
    return py, None


# ----------------------------------------------------------------------------------------------
# Drawing and embedding


def one_line(text):
    return " ".join(str(text).split())[:400]


def draw(specs, outdir, python=None):
    """Draws the charts of `specs` (chart_specs()) into `outdir` with draw.py under `python` (the
    charts' venv's by default); returns {file: None if drawn, else why not}, in the same order.
    A chart of the fixed names that is not drawn is removed from `outdir` (no stale picture)."""
    outdir = Path(outdir)
    why = {f: reason for f, (spec, reason) in specs.items()}
    todo = [spec for spec, _ in specs.values() if spec]
    if todo:
        if python is None:
            python, err = charts_python()
        else:
            err = None
        if python is None:
            for spec in todo:
                why[spec["file"]] = err
        else:
            for f, reason in run_draw(python, todo, outdir).items():
                why[f] = reason
    for f, reason in why.items():
        if reason:
            (outdir / f).unlink(missing_ok=True)
            log(f"chart not drawn: {f}: {reason}")
    return why


def run_draw(python, specs, outdir):
    """draw.py under `python` with `specs` on its standard input: {file: None or why not}."""
    outdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, MPLBACKEND="Agg")
    env.pop("PYTHONPATH", None)
    try:
        p = subprocess.run([python, "-I", str(DRAW), str(outdir)], input=json.dumps({"charts": specs}),
                           capture_output=True, text=True, timeout=300, env=env)
        answer = json.loads(p.stdout.strip().splitlines()[-1]) if p.stdout.strip() else {}
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return {s["file"]: f"draw.py failed: {one_line(exc)}" for s in specs}
    if "error" in answer:
        return {s["file"]: one_line(answer["error"]) for s in specs}
    out = {}
    for s in specs:
        f = s["file"]
        if f in answer.get("drawn", []) and (outdir / f).is_file():
            out[f] = None
        else:
            err = (answer.get("failed", {}).get(f)
                   or (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1])
            out[f] = f"drawing failed: {one_line(err)}"
    return out


def markdown(drawn, prefix=""):
    """The report's charts section from draw()'s answer: an image link per drawn chart (relative:
    `prefix` + file), one line per chart not drawn with the reason, each its own paragraph (a
    link right after a list item would join it); [] when there are none."""
    if not drawn:
        return []
    L = ["## Charts\n"]
    for f, reason in drawn.items():
        if reason is None:
            L.append(f"![{CHARTS[f][0].upper() + CHARTS[f][1:]}]({prefix}{f})\n")
        else:
            L.append(f"- Chart not drawn: {CHARTS[f]} (`{f}`): {one_line(reason)}\n")
    return L


def copy_drawn(drawn, src, dest):
    """The drawn charts copied from `src` into `dest` (created); the fixed names not drawn
    removed from `dest`."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for f, reason in drawn.items():
        if reason is None:
            shutil.copyfile(Path(src) / f, dest / f)
        else:
            (dest / f).unlink(missing_ok=True)
