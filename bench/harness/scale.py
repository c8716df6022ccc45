"""The scale rows (issue 37): many idle connections held on each server, and what they cost.

Owns: the scale rows' settings (servers, rows, rounds), the file-descriptor limit they need
(RLIMIT_NOFILE raised for the harness and so for every server and client it starts), one idle
row's run (`idle_row`: a server started with its SCALE_FLAGS, bench/scale_client.c holding N
connections from source addresses spread over 127.0.0.0/8, each after one exact HTTP/1.1
keep-alive request or an accepted WebSocket; the server's RSS and PSS summed over its processes
before, with all held and after all closed), the run of the whole part, and its figures and
verdicts against the issue's targets (computed here from the rows, never written by hand); and
the fan-out rows (issue 37 item 3: `fanout_row`, bench/fanout_client.c's N WebSocket subscribers
and one publisher against bench/apps/ws_apps.py's `fanout` app; the server's CPU per delivered
message over the measured broadcasts and the time until the last subscriber has each one), their
figures and their verdict against every peer in every round; the churn rows, their profile after
the rounds (`run_profile`: perf.py records skirr and classifies its samples; `profile_verdicts`,
its "measured" row) and the figures RESULTS.md's Scale section quotes (`key_figures`).

Never: renders markdown (report.py's `render_scale` does, from these figures), or treats a
connection that failed, was answered wrongly or was closed by the server while held as held: the
client counts it as an error and the row's verdicts are then "unproven" or "MISSED".
"""
from __future__ import annotations

import json
import os
import queue
import random
import resource
import select
import statistics
import subprocess
import threading
import time
from pathlib import Path

from .env import (BUILD, CLIENT_CPU, CLK_TCK, PEERS_VENV, SKIRR_VENV, describe, ensure_tools,
                  git_commit, interp_identity, log, machine_info, new_run_dir, venv_python)
from . import perf
from .measure import affinity_ok, cpu0_busy, measure_row, memory, proc_ticks
from .tls import peer_ratios
from .peers import (SCALE_FLAGS, SERVERS, Server, build_fanout_client, build_scale_client,
                    ensure_peers, peer_groups, pip_versions)
from .workloads import WORKLOADS, WS_WORKLOADS

# RLIMIT_NOFILE for the harness and everything it starts (soft and hard): 50,000 connections on
# one side each, with room; skirr's default --limit-connections is 7/8 of its soft limit.
NOFILE = 131072
MODES = {  # mode: (the app every server serves, its path, the exact body; None: none checked)
    "http": (WORKLOADS["raw_get"]["app"], WORKLOADS["raw_get"]["path"],
             WORKLOADS["raw_get"]["expect"]),
    "ws": (WS_WORKLOADS["ws_echo_64"]["app"], WS_WORKLOADS["ws_echo_64"]["path"], None),
    # connected, nothing sent: what a server spends on a connection before any request (the
    # baseline of the "after one request" figure; no target of its own)
    "tcp": (WORKLOADS["raw_get"]["app"], WORKLOADS["raw_get"]["path"], None),
}
FLAGS_OF = {"http": "http", "ws": "ws", "tcp": "http"}  # mode -> its SCALE_FLAGS entry
HTTP_SERVERS = ["skirr", "uvicorn-httptools", "granian", "hypercorn", "peregrine", "nginx-scale"]
WS_SERVERS = ["skirr", "uvicorn-websockets", "uvicorn-wsproto", "granian", "peregrine"]
SCALE_FULL = dict(servers={"http": HTTP_SERVERS, "ws": WS_SERVERS, "tcp": HTTP_SERVERS},
                  rows=[("tcp", 10000), ("http", 10000), ("http", 50000), ("ws", 10000),
                        ("ws", 50000)], rounds=1)
SETTLE_S = 2.5  # seconds between the last answer (or the last close) and a memory reading: past
# two ticks of a one-second housekeeping timer (skirr frees idle storage on its tick)
CLOSE_WAIT_S = 60.0  # at most this long for a server to close its side after the client's FINs
FD_SPARE = 256  # descriptors a server holds besides its connections, at most (a generous bound)
LEAK_RATIO = 1.10  # RSS after all closed at most this times the RSS before: no leak

# The churn rows: a new connection per request (wrk -c64 with `Connection: close`, on CPU 1; the
# server on CPU 0, as the matrix's rows), CPU per request per round.
CHURN = dict(servers=["skirr", "uvicorn-httptools", "granian", "hypercorn", "peregrine",
                      "nginx-scale"],
             rows=[("raw_get_close", 64), ("fastapi_json_close", 64)], rounds=3, warmup=2,
             duration=10)
TARGET_CHURN_NGINX = 1.5  # skirr's churn CPU per request at most this times nginx's, every round

# The fan-out rows (issue 37 item 3): N subscribers and one publisher on ws_apps:fanout, each row
# at every message size, the servers that serve WebSockets, the server on CPU 0 and
# bench/fanout_client.c on CPU 1; `broadcasts` measured after `warmup` unmeasured ones.
FANOUT = dict(servers=WS_SERVERS, rows=[1000, 5000], sizes=[64, 1024], rounds=3, broadcasts=200,
              warmup=5)
FANOUT_APP = "ws_apps:fanout"
FANOUT_PATHS = ("/sub", "/pub")  # (a subscriber's path, the publisher's: ws_apps.PUBLISH_PATH)
FANOUT_TIMEOUT_S = 10.0  # a broadcast not had by every subscriber within this long: "missing"
FANOUT_OPEN_S = 30.0  # fanout_client's bound on opening (none answered for this long: stalled)

# The targets (issue 37), each judged by `verdicts`.
TARGET_PEER_SHARE = 0.25  # skirr's KiB per idle connection at most this times the lowest peer's
TARGET_WS_KIB = 4.0  # an idle WebSocket under this many KiB on skirr
HELD_N = 50000  # connections held with no error and no leak


def raise_nofile(n=NOFILE):
    """Soft and hard RLIMIT_NOFILE of this process (inherited by what it starts) raised towards
    `n`: the hard limit when allowed (root with CAP_SYS_RESOURCE), else the soft one to the hard.
    Returns (the soft limit now, why it is below `n` or "")."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    why = ""
    if hard < n:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
            return n, ""
        except (ValueError, OSError) as exc:
            why = (f"the hard RLIMIT_NOFILE is {hard} and could not be raised to {n} "
                   f"({exc}: this process lacks CAP_SYS_RESOURCE)")
    target = min(n, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target, why


def too_many(n, limit, why):
    """Why a row of `n` connections cannot run under a descriptor limit of `limit` per process
    (the server holds n, plus its own, under skirr's default --limit-connections of 7/8 of it),
    or None."""
    need = n + max(64, n // 7) + FD_SPARE
    if limit >= need:
        return None
    return (f"not run: {n:,} connections need RLIMIT_NOFILE >= {need:,} in the server; "
            f"the limit here is {limit:,}" + (f" ({why})" if why else ""))


def client_argv(port, mode, n, extra=()):
    """bench/build/scale_client's command line for `n` connections of `mode` (MODES)."""
    _, path, body = MODES[mode]
    argv = [str(BUILD / "scale_client"), str(port), "-n", str(n), "-m", mode, "-p", path]
    if body is not None:
        argv += ["-b", body.decode()]
    return argv + list(extra)


def tagged_lines(text, tag):
    """{phase: its JSON object} of a client's `TAG {json}` lines (scale_client's SCALE,
    fanout_client's FANOUT)."""
    out = {}
    for line in text.splitlines():
        if line.startswith(tag + " "):
            d = json.loads(line[len(tag) + 1:])
            out[d["phase"]] = d
    return out


def client_lines(text):
    """{phase: its JSON object} of scale_client's `SCALE {json}` lines."""
    return tagged_lines(text, "SCALE")


def check_one(mode):
    """A readiness check through the client itself: one connection, its exact answer, closed at
    once (stdin at EOF). ConnectionRefusedError while nothing listens, else RuntimeError with the
    client's first error."""
    def check(port):
        p = subprocess.run(client_argv(port, mode, 1), stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=60)
        opened = client_lines(p.stdout).get("open")
        if opened is None:
            raise RuntimeError(f"scale_client printed no result: {p.stderr[-400:]}")
        if opened["errors"].get("connect") and "refused" in opened["first_error"]:
            raise ConnectionRefusedError(opened["first_error"])
        if p.returncode != 0:
            raise RuntimeError(f"{mode} check: {opened['first_error']}")
    return check


def fd_count(pids):
    """Open file descriptors summed over pids (a process that is gone counts 0)."""
    n = 0
    for pid in pids:
        try:
            n += len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            pass
    return n


def _read_line(proc, timeout):
    """The client's next stdout line within `timeout` seconds; RuntimeError when none comes."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    if not line:
        raise RuntimeError(f"scale_client said nothing within {timeout:.0f} s "
                           f"(exit status {proc.poll()})")
    return line


def hold_once(srv, mode, n, fd0):
    """One cycle of an idle row on a running server: the client opens and holds `n` connections,
    memory is read with all held, the client checks and closes them, the server's descriptors are
    awaited back to `fd0` (at most CLOSE_WAIT_S) and memory read again. Returns the cycle's
    figures (bytes; the client's phases as it printed them)."""
    client = subprocess.Popen(["taskset", "-c", CLIENT_CPU, *client_argv(srv.port, mode, n)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        opened = client_lines(_read_line(client, 600))["open"]
        time.sleep(SETTLE_S)
        pids = srv.pids()
        rss1, pss1 = memory(pids)
        fd1 = fd_count(pids)
        client.stdin.write("close\n")
        client.stdin.flush()
        held = client_lines(_read_line(client, 120))["held"]
        closed = client_lines(_read_line(client, 120))["closed"]
        client.wait(30)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    deadline = time.monotonic() + CLOSE_WAIT_S
    while fd_count(srv.pids()) > fd0 and time.monotonic() < deadline:
        time.sleep(0.2)
    fd2 = fd_count(srv.pids())
    time.sleep(SETTLE_S)
    rss2, pss2 = memory(srv.pids())
    return {"open": opened, "held": held, "closed": closed, "rss_held": rss1, "pss_held": pss1,
            "rss_after": rss2, "pss_after": pss2, "fds_held": fd1, "fds_after": fd2,
            "client_exit": client.returncode}


def idle_row(name, mode, n, outdir, tag, cycles=2):
    """One idle row: `name` started with its SCALE_FLAGS for `mode`, checked with one connection,
    then `cycles` times `n` connections opened, held and closed by the client (CPU 1; the server
    on CPU 0; no further cycle once the server has not closed a cycle's connections). Memory
    (bytes, summed over the server's processes, /proc/PID/smaps_rollup) is read before the first
    cycle, SETTLE_S after every connection is answered and SETTLE_S after the server has closed
    them all. Returns the row: "ok" (the run completed, whatever the client
    counted); from the first cycle: KiB per held connection of RSS and PSS growth, open_s
    (seconds, the client's), the client's errors by kind and its held check, the after-close RSS
    as a share of the before; "not_closed", connections the server still held CLOSE_WAIT_S after
    the client's FINs; "cycles", every cycle's figures (the second tells memory kept for reuse,
    flat after the first, from memory that grows with every cycle); "error" when it did not
    complete."""
    app, _, _ = MODES[mode]
    out = {"server": name, "mode": mode, "n": n, "ok": False, "error": None}
    extra = SCALE_FLAGS.get(name, {}).get(FLAGS_OF[mode], [])
    with Server(name, app, Path(outdir) / "logs", tag, extra=extra) as srv:
        try:  # (a tcp row's server is checked with one exact request first)
            srv.wait_ready(check_one("http" if mode == "tcp" else mode), timeout=60)
            time.sleep(SETTLE_S)
            pids = srv.pids()
            rss0, pss0 = memory(pids)
            fd0 = fd_count(pids)
            cs = [hold_once(srv, mode, n, fd0)]
            while len(cs) < cycles and not cs[-1]["fds_after"] > fd0:  # closed them all
                cs.append(hold_once(srv, mode, n, fd0))
            c = cs[0]
            got = c["open"]["ok"]
            out.update(
                ok=True, held=got, open_s=c["open"]["open_s"], errors=c["open"]["errors"],
                first_error=c["open"]["first_error"], held_check=c["held"],
                close_s=c["closed"]["close_s"], processes=len(pids),
                rss_before_mib=rss0 / 2**20, pss_before_mib=pss0 / 2**20,
                rss_held_mib=c["rss_held"] / 2**20, pss_held_mib=c["pss_held"] / 2**20,
                rss_after_mib=c["rss_after"] / 2**20, pss_after_mib=c["pss_after"] / 2**20,
                kib_rss=(c["rss_held"] - rss0) / got / 1024 if got else None,
                kib_pss=(c["pss_held"] - pss0) / got / 1024 if got else None,
                after_ratio=c["rss_after"] / rss0, fds=[fd0, c["fds_held"], c["fds_after"]],
                not_closed=max(0, c["fds_after"] - fd0), client_exit=c["client_exit"],
                cycles=[{"ok": x["open"]["ok"], "errors": x["open"]["errors"],
                         "held_check": x["held"], "open_s": x["open"]["open_s"], "rss_held_mib": x["rss_held"] / 2**20,
                         "rss_after_mib": x["rss_after"] / 2**20,
                         "not_closed": max(0, x["fds_after"] - fd0)} for x in cs])
        except Exception as exc:  # noqa: BLE001
            out["error"] = describe(exc) + " | server log: " + srv.log_tail(400)
    return out


def row_errors(r):
    """Connections of a completed row that were not held to the end, over all its cycles: the
    client's errors by kind plus those found closed, reset or written to while held."""
    return sum(sum(c["errors"].values()) + c["held_check"]["closed_by_server"]
               + c["held_check"]["reset"] + c["held_check"]["data_while_idle"]
               for c in r["cycles"])


def run(sp, status, outdir):
    """The idle rows every round, each row's servers in a fresh random order; a server in
    `status` (why it is not measured) is skipped, and so is a row too big for the descriptor
    limit (in "skipped_rows" with the reason). Returns {"rows": [...], "not_measured",
    "skipped_rows", "nofile", "config"}."""
    limit, why = raise_nofile()
    skipped = {f"{mode} {n}": too_many(n, limit, why) for mode, n in sp["rows"]
               if too_many(n, limit, why)}
    for k, v in skipped.items():
        log(f"scale {k}: {v}")
    rows = []
    for rnd in range(sp["rounds"]):
        for mode, n in sp["rows"]:
            if f"{mode} {n}" in skipped:
                continue
            order = [s for s in sp["servers"][mode] if s not in status]
            random.shuffle(order)
            for s in order:
                r = idle_row(s, mode, n, outdir, f"scale{rnd}-{mode}-{n}-{s}")
                r["round"] = rnd
                rows.append(r)
                (Path(outdir) / "scale.json").write_text(json.dumps(rows, indent=1))
                if r["ok"]:
                    log(f"scale r{rnd} {mode} {n} {s}: {r['kib_rss']:.2f} KiB RSS "
                        f"{r['kib_pss']:.2f} KiB PSS per conn, open {r['open_s']:.1f} s, "
                        f"errors {row_errors(r)}, after/before RSS {r['after_ratio']:.2f}"
                        if r["kib_rss"] is not None else
                        f"scale r{rnd} {mode} {n} {s}: no connection held: {r['first_error']}")
                else:
                    log(f"scale r{rnd} {mode} {n} {s}: FAILED {r['error'][:300]}")
    return {"rows": rows, "not_measured": status, "skipped_rows": skipped, "nofile": limit,
            "config": sp}


def run_churn(cp, status, outdir):
    """The churn rows every round, each row's servers in a fresh random order, through
    measure.py's `measure_row` (the server's CPU over wrk's measured interval ÷ its requests;
    exact status and body checked before and after; any wrk error fails the run). Returns
    {"runs": [...], "config"}."""
    runs = []
    for rnd in range(cp["rounds"]):
        for wl, conns in cp["rows"]:
            order = [s for s in cp["servers"] if s not in status]
            random.shuffle(order)
            for s in order:
                r = measure_row(s, wl, conns, cp, outdir, f"churn{rnd}-{wl}-c{conns}-{s}")
                r["round"] = rnd
                runs.append(r)
                (Path(outdir) / "churn.json").write_text(json.dumps(runs, indent=1))
                log(f"churn r{rnd} {wl} c{conns} {s}: " + (
                    f"{r['rps']:,.0f} req/s cpu {r['cpu_us_per_req']:.1f} us/req "
                    f"other cpu0 {r['other_cpu0']:.0%}" if r["ok"]
                    else f"FAILED {r['error'][:300]}"))
    out = {"runs": runs, "config": cp}
    if cp.get("profile", True):
        out["profile"] = run_profile(cp, status, outdir)
    return out


def run_profile(cp, status, outdir):
    """The churn rows' profile (perf.py): after the measured rounds, one more run of skirr per
    churn row under perf record (not counted in the rows' figures). {"probe": perf.probe()'s,
    "runs": [perf.profile_churn()'s]}; "runs" empty when perf cannot record or skirr is not
    measured (its "error" says why)."""
    if "skirr" in status:
        return {"probe": None, "runs": [], "error": f"skirr not measured: {status['skirr']}"}
    how = perf.probe()
    log(f"churn profile: perf {how}")
    if not how["ok"]:
        return {"probe": how, "runs": [], "error": how["error"]}
    runs = []
    for wl, conns in cp["rows"]:
        r = perf.profile_churn(wl, conns, cp, how, outdir, f"churn-profile-{wl}-c{conns}-skirr")
        runs.append(r)
        log(f"churn profile {wl} c{conns} skirr: " + (
            f"{r['samples']:,} samples, " + ", ".join(f"{k} {v:.1%}"
                                                      for k, v in r["shares"].items())
            if r["ok"] else f"FAILED {r['error'][:300]}"))
    return {"probe": how, "runs": runs, "error": None}


def profile_verdicts(profile):
    """The churn profile's row of the targets: a report, not a target, so its verdict is
    "measured" with each workload's accept-path and close-path shares of skirr's samples, or
    "unproven" with why when no profiled run succeeded. None when the run had no profile (taken
    before the profile existed, or --no-profile)."""
    if profile is None:
        return None
    name = "Churn: the accept path's share of skirr's CPU (a profile)"
    ok = [r for r in profile["runs"] if r["ok"]]
    if not ok:
        why = profile.get("error") or "; ".join(
            f"{r['workload']}: {r['error'][:200]}" for r in profile["runs"]) or "no run"
        return {"target": name, "verdict": "unproven", "detail": why}
    return {"target": name, "verdict": "measured",
            "detail": "; ".join(f"{r['workload']} c{r['conns']}: accept path "
                                f"{r['shares']['accept']:.1%}, close path "
                                f"{r['shares']['close']:.1%} of {r['samples']:,} samples"
                                for r in ok)}


def churn_verdicts(runs, rounds):
    """The churn targets from the rows: per (workload, peer) skirr's CPU per request ahead in
    every round (tls.peer_ratios' verdict), and per workload skirr ÷ nginx at most
    TARGET_CHURN_NGINX in every round ("unproven" when a round of either failed). A list of
    {"target", "verdict", "detail"} as `verdicts`."""
    out = []
    for (w, c, s), v in peer_ratios(runs, rounds, base="skirr",
                                    peers=lambda s: SERVERS[s].kind == "peer").items():
        out.append({"target": f"churn {w} c{c}: skirr's CPU per request ahead of {s} in every "
                              "round",
                    "verdict": v["verdict"],
                    "detail": f"{s} ÷ skirr per round: "
                              + (", ".join(f"{x:.2f}" for x in v["ratios"]) or "none")})
    by = {(r["workload"], r["conns"], r["round"], r["server"]): r for r in runs if r["ok"]}
    for w, c in dict.fromkeys((r["workload"], r["conns"]) for r in runs):
        ratios, missing = [], 0
        for rnd in range(rounds):
            k, n = by.get((w, c, rnd, "skirr")), by.get((w, c, rnd, "nginx-scale"))
            if k is None or n is None:
                missing += 1
            else:
                ratios.append(k["cpu_us_per_req"] / n["cpu_us_per_req"])
        over = sum(x > TARGET_CHURN_NGINX for x in ratios)
        out.append({"target": f"churn {w} c{c}: skirr's CPU per request <= "
                              f"{TARGET_CHURN_NGINX:g}x nginx's in every round",
                    "verdict": "MISSED" if over else "unproven" if missing else "met",
                    "detail": "skirr ÷ nginx per round: "
                              + (", ".join(f"{x:.2f}" for x in ratios) or "none")})
    return out


# ----------------------------------------------------------------------------------------------
# The fan-out rows (issue 37 item 3)


def fanout_argv(port, n, size, broadcasts, warmup):
    """bench/build/fanout_client's command line: `n` subscribers, `broadcasts` measured
    broadcasts of `size`-byte messages after `warmup` unmeasured ones."""
    sub, pub = FANOUT_PATHS
    return [str(BUILD / "fanout_client"), str(port), "-n", str(n), "-s", str(size), "-k",
            str(broadcasts), "-W", str(warmup), "-p", sub, "-P", pub, "-t",
            f"{FANOUT_TIMEOUT_S:g}"]


def fanout_lines(text):
    """{phase: its JSON object} of fanout_client's `FANOUT {json}` lines."""
    return tagged_lines(text, "FANOUT")


def check_fanout(size):
    """A readiness check through the client itself: one subscriber welcomed, one broadcast of
    `size` bytes had exactly, its ack right. ConnectionRefusedError while nothing listens, else
    RuntimeError with the client's first error."""
    def check(port):
        p = subprocess.run(fanout_argv(port, 1, size, 1, 0), stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=60)
        got = fanout_lines(p.stdout)
        done = got.get("done")
        if done is None:
            raise RuntimeError(f"fanout_client printed no result: {p.stderr[-400:]}")
        if done["errors"].get("connect") and "refused" in done["first_error"]:
            raise ConnectionRefusedError(done["first_error"])
        if p.returncode != 0:
            raise RuntimeError(f"fan-out check: {done['errors']}: {done['first_error']}")
    return check


def _line_queue(proc):
    """A queue of proc's stdout lines (text; None at EOF) filled by a thread of its own (returned
    beside it): unlike select() on the pipe, it never leaves a line that arrived with the one
    before unread while the client waits for our answer to it."""
    q = queue.Queue()

    def pump():
        for line in proc.stdout:
            q.put(line)
        q.put(None)
    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    return q, reader


def fanout_row(name, n, size, fp, outdir, tag):
    """One fan-out row: `name` serving ws_apps:fanout with its SCALE_FLAGS for WebSockets (pings
    off, connection caps raised), checked with one subscriber, then bench/fanout_client.c (CPU 1;
    the server on CPU 0) opens `n` subscribers and a publisher and runs fp["warmup"] broadcasts,
    then fp["broadcasts"] measured ones of `size` bytes. The server's CPU (utime+stime of its
    processes, seconds) is read when the client says the measured broadcasts start and when they
    have ended (every subscriber has the last one and the publisher its ack). Returns the row:
    "ok" only when it completed with every message delivered right and no error of any kind
    (else "error" says what; the figures, when measured, are kept); "cpu_us_per_msg" (server CPU
    µs ÷ delivered messages), "p50_ms", "p99_ms", "max_ms" (publisher's send to the last
    subscriber's whole frame, over the broadcasts every subscriber had), "ack_p50_ms", "open_s",
    "delivered", "expected" (n × broadcasts), "errors" ({kind: count}), "client_cpu" (the
    client's CPU share over the broadcasts: near 1, the client may have bounded the times),
    "other_cpu0" (share of CPU 0 not the server's)."""
    out = {"server": name, "n": n, "size": size, "workload": f"fanout_{size}", "conns": n,
           "ok": False, "error": None}
    extra = SCALE_FLAGS.get(name, {}).get("ws", [])
    per_line = FANOUT_OPEN_S * 2 + (fp["broadcasts"] + fp["warmup"]) * FANOUT_TIMEOUT_S + 60
    with Server(name, FANOUT_APP, Path(outdir) / "logs", tag, extra=extra) as srv:
        try:
            srv.wait_ready(check_fanout(size), timeout=60)
            time.sleep(SETTLE_S)  # the check's subscriber gone from the app's set
            pids = srv.pids()
            out["pinned"] = affinity_ok(pids)
            out["loadavg"] = Path("/proc/loadavg").read_text().split()[0]
            client = subprocess.Popen(
                ["taskset", "-c", CLIENT_CPU,
                 *fanout_argv(srv.port, n, size, fp["broadcasts"], fp["warmup"])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            got, at = {}, {}
            lines, reader = _line_queue(client)
            try:
                while "done" not in got:
                    try:
                        line = lines.get(timeout=per_line)
                    except queue.Empty:
                        raise RuntimeError(f"fanout_client said nothing within {per_line:.0f} "
                                           "s") from None
                    if line is None:
                        raise RuntimeError(f"fanout_client exited ({client.wait()}) before its "
                                           f"result: {client.stderr.read()[-400:]}") from None
                    d = fanout_lines(line)
                    got.update(d)
                    if "start" in d:  # the client waits for our line before broadcasting
                        at.update(b0=cpu0_busy(), p0=proc_ticks(pids), t0=time.perf_counter())
                        client.stdin.write("go\n")
                        client.stdin.flush()
                    elif "end" in d:
                        at.update(p1=proc_ticks(pids), b1=cpu0_busy(), t1=time.perf_counter())
                client.wait(60)
            finally:
                if client.poll() is None:
                    client.kill()
                    client.wait()
                reader.join(10)  # at the client's EOF
                for f in (client.stdin, client.stdout, client.stderr):
                    f.close()
            opened, done = got["open"], got["done"]
            out.update(open_s=opened["open_s"], opened=opened["ok"], errors=done["errors"],
                       first_error=done["first_error"], client_exit=client.returncode,
                       delivered=done["delivered"], expected=done["expected"],
                       complete=done["complete"], broadcasts=done["broadcasts"])
            if "p1" not in at:
                raise RuntimeError(f"no measured broadcast: {opened['ok']} of {n} subscribers "
                                   f"welcomed, publisher {opened['publisher']}: "
                                   f"{done['first_error']}")
            if sorted(srv.pids()) != sorted(pids):
                raise RuntimeError(f"the server's processes changed during the run: {sorted(pids)} "
                                   f"-> {sorted(srv.pids())}")
            wall = at["t1"] - at["t0"]
            cpu = sum(at["p1"][p] - at["p0"][p] for p in pids) / CLK_TCK
            out.update(
                server_cpu_s=cpu, wall_s=wall, server_util=cpu / wall if wall else None,
                cpu_us_per_msg=cpu / done["delivered"] * 1e6 if done["delivered"] else None,
                p50_ms=done["p50_us"] / 1000, p99_ms=done["p99_us"] / 1000,
                max_ms=done["max_us"] / 1000, ack_p50_ms=done["ack_p50_us"] / 1000,
                client_cpu=done["cpu_s"] / done["wall_s"] if done["wall_s"] else None,
                other_cpu0=max(0.0, (at["b1"][0] - at["b0"][0]) / CLK_TCK - cpu) / wall
                if wall else None)
            bad = sum(done["errors"].values())
            if bad or done["delivered"] != done["expected"] or client.returncode != 0:
                raise RuntimeError(f"{done['delivered']:,} of {done['expected']:,} messages "
                                   f"delivered right, errors {done['errors']}: "
                                   f"{done['first_error']}")
            out["ok"] = True
        except Exception as exc:  # noqa: BLE001
            out["error"] = describe(exc) + " | server log: " + srv.log_tail(400)
    return out


def run_fanout(fp, status, outdir):
    """The fan-out rows every round: each (subscribers, size) row's servers in a fresh random
    order; a server in `status` (why it is not measured) is skipped, and so is a row too big for
    the descriptor limit (in "skipped_rows" with the reason). Returns {"runs": [...],
    "not_measured", "skipped_rows", "nofile", "config"}."""
    limit, why = raise_nofile()
    skipped = {f"fanout {n}": too_many(n + 1, limit, why) for n in fp["rows"]
               if too_many(n + 1, limit, why)}
    for k, v in skipped.items():
        log(f"scale {k}: {v}")
    runs = []
    for rnd in range(fp["rounds"]):
        for n in fp["rows"]:
            if f"fanout {n}" in skipped:
                continue
            for size in fp["sizes"]:
                order = [s for s in fp["servers"] if s not in status]
                random.shuffle(order)
                for s in order:
                    r = fanout_row(s, n, size, fp, outdir, f"fanout{rnd}-{n}-{size}-{s}")
                    r["round"] = rnd
                    runs.append(r)
                    (Path(outdir) / "fanout.json").write_text(json.dumps(runs, indent=1))
                    log(f"fanout r{rnd} {n} x {size} B {s}: " + (
                        f"{r['cpu_us_per_msg']:.2f} us CPU/msg, last client p50 "
                        f"{r['p50_ms']:.1f} ms p99 {r['p99_ms']:.1f} ms" if r["ok"]
                        else f"FAILED {r['error'][:300]}"))
    return {"runs": runs, "not_measured": status, "skipped_rows": skipped, "nofile": limit,
            "config": fp}


def fanout_figures(runs):
    """Per (subscribers, size, server): the medians over its rounds that succeeded of
    "cpu_us_per_msg" (server CPU µs per delivered message), "p50_ms" and "p99_ms" (time to the
    last subscriber), "ack_p50_ms" and "open_s"; the most "other_cpu0" and "client_cpu" in a
    round; "rounds", "rounds_ok", and the first failed round's "error" (all None when no round
    succeeded)."""
    out = {}
    for key in dict.fromkeys((r["n"], r["size"], r["server"]) for r in runs):
        rs = [r for r in runs if (r["n"], r["size"], r["server"]) == key]
        ok = [r for r in rs if r["ok"]]

        def med(k):
            return statistics.median(r[k] for r in ok) if ok else None
        out[key] = {k: med(k) for k in ("cpu_us_per_msg", "p50_ms", "p99_ms", "ack_p50_ms",
                                        "open_s")}
        out[key].update(
            other_cpu0=max((r["other_cpu0"] for r in ok), default=None),
            client_cpu=max((r["client_cpu"] for r in ok), default=None),
            rounds=len(rs), rounds_ok=len(ok),
            error=next((r["error"] for r in rs if not r["ok"]), None))
    return out


def fanout_verdicts(runs, rounds, skipped=None):
    """The fan-out target from the rows: per (subscribers, size, peer), skirr's CPU per delivered
    message below the peer's in every one of `rounds` rounds (tls.peer_ratios' verdict: "MISSED"
    when skirr was behind or failed a round, "unproven" when the peer failed one); a row not run
    (`skipped`: {"fanout n": why}) is "unproven". A list of {"target", "verdict", "detail"} as
    `verdicts`."""
    out = []
    for key, why in (skipped or {}).items():
        n = int(key.split()[1])
        out.append({"target": f"fan-out to {n:,} clients: skirr's CPU per delivered message "
                              "ahead of every peer in every round",
                    "verdict": "unproven", "detail": why})
    for (w, n, s), v in peer_ratios(runs, rounds, base="skirr", key="cpu_us_per_msg",
                                    peers=lambda s: SERVERS[s].kind == "peer").items():
        size = int(w.split("_")[1])
        out.append({"target": f"fan-out to {n:,} clients, {size:,} B messages: skirr's CPU per "
                              f"delivered message ahead of {s} in every round",
                    "verdict": v["verdict"],
                    "detail": f"{s} ÷ skirr per round: "
                              + (", ".join(f"{x:.2f}" for x in v["ratios"]) or "none")})
    return out


# ----------------------------------------------------------------------------------------------
# Figures and verdicts (report.py renders them)


def figures(rows):
    """Per (mode, n, server): the medians over its rounds that completed with every connection
    held: {"kib_rss", "kib_pss", "open_s", "after_ratio", "cycle_ratio" (RSS after the last
    cycle ÷ after the first), "errors" (the most in a round), "not_closed" (the most connections
    the server still held after the client closed them), "rounds", "leak" (True when a round's
    after-close RSS was over LEAK_RATIO times its start; None, unjudged, when the server had not
    closed them all)}; a server whose every round failed or held nothing has "kib_rss" None and
    its "error"."""
    out = {}
    for key in dict.fromkeys((r["mode"], r["n"], r["server"]) for r in rows):
        rs = [r for r in rows if (r["mode"], r["n"], r["server"]) == key]
        done = [r for r in rs if r["ok"] and r["kib_rss"] is not None]
        clean = [r for r in done if row_errors(r) == 0]
        use = clean or done
        med = (lambda k: statistics.median(r[k] for r in use)) if use else (lambda k: None)
        fail = next((r for r in rs if not r["ok"]), None)
        out[key] = {
            "kib_rss": med("kib_rss"), "kib_pss": med("kib_pss"), "open_s": med("open_s"),
            "after_ratio": med("after_ratio"),
            "cycle_ratio": statistics.median(r["cycles"][-1]["rss_after_mib"]
                                             / r["cycles"][0]["rss_after_mib"] for r in use)
            if use else None,
            "errors": max((row_errors(r) for r in done), default=None),
            "not_closed": max((c["not_closed"] for r in done for c in r["cycles"]), default=None),
            "error_kinds": {k: v for r in done for k, v in r["errors"].items()},
            "first_error": next((r["first_error"] for r in done if r["first_error"]), ""),
            "leak": (None if not done or any(c["not_closed"] for r in done for c in r["cycles"])
                     else any(r["after_ratio"] > LEAK_RATIO for r in done)),
            "rounds": len(rs), "rounds_clean": len(clean),
            "error": (fail or {}).get("error") if not done else None,
        }
    return out


def _lowest_peer(figs, mode, n):
    """(server, KiB RSS) of the lowest peer's figure for the row among those that held every
    connection, or (None, None)."""
    peers = [(f["kib_rss"], s) for (m, k, s), f in figs.items()
             if (m, k) == (mode, n) and SERVERS[s].kind == "peer" and f["kib_rss"] is not None
             and f["errors"] == 0]
    if not peers:
        return None, None
    kib, s = min(peers)
    return s, kib


def verdicts(figs, sp, skipped=None):
    """The issue's idle-connection targets judged from `figures`: a list of {"target", "verdict"
    ("met", "MISSED" or "unproven"), "detail"}. Memory per connection is the RSS growth (KiB);
    "unproven" when skirr or every peer of the comparison did not hold every connection, or the
    row was not run (`skipped`: {"mode n": why}, run()'s "skipped_rows")."""
    skipped = skipped or {}
    out = []
    for mode, n in sp["rows"]:
        if mode == "tcp":  # the baseline: no target of its own
            continue
        sk = figs.get((mode, n, "skirr"))
        skirr_ok = sk is not None and sk["kib_rss"] is not None and sk["errors"] == 0
        peer, low = _lowest_peer(figs, mode, n)
        what = "HTTP keep-alive connection after one request" if mode == "http" else "WebSocket"
        name = f"idle {what}, {n:,}: skirr <= {TARGET_PEER_SHARE}x the lowest peer's KiB/conn"
        why_not = skipped.get(f"{mode} {n}")
        if why_not:
            out.append({"target": name, "verdict": "unproven", "detail": why_not})
        elif not skirr_ok or peer is None:
            out.append({"target": name, "verdict": "unproven",
                        "detail": "skirr did not hold every connection" if not skirr_ok
                        else "no peer held every connection"})
        else:
            ratio = sk["kib_rss"] / low if low > 0 else float("inf")
            out.append({"target": name,
                        "verdict": "met" if sk["kib_rss"] <= TARGET_PEER_SHARE * low else "MISSED",
                        "detail": f"skirr {sk['kib_rss']:.2f} KiB, lowest peer {peer} "
                                  f"{low:.2f} KiB: {ratio:.2f}x"})
        if mode == "http":
            ng = figs.get((mode, n, "nginx-scale"))
            name = f"idle HTTP connection, {n:,}: skirr <= nginx's KiB/conn"
            if why_not or not skirr_ok or ng is None or ng["kib_rss"] is None or ng["errors"]:
                out.append({"target": name, "verdict": "unproven",
                            "detail": why_not or "skirr or nginx did not hold every connection"})
            else:
                out.append({"target": name,
                            "verdict": "met" if sk["kib_rss"] <= ng["kib_rss"] else "MISSED",
                            "detail": f"skirr {sk['kib_rss']:.2f} KiB, nginx "
                                      f"{ng['kib_rss']:.2f} KiB"})
        else:
            name = f"idle WebSocket, {n:,}: skirr under {TARGET_WS_KIB:g} KiB/conn"
            if why_not or not skirr_ok:
                out.append({"target": name, "verdict": "unproven",
                            "detail": why_not or "skirr did not hold every connection"})
            else:
                out.append({"target": name,
                            "verdict": "met" if sk["kib_rss"] < TARGET_WS_KIB else "MISSED",
                            "detail": f"skirr {sk['kib_rss']:.2f} KiB"})
        if n == HELD_N:
            name = f"{n:,} {'HTTP' if mode == 'http' else 'WebSocket'} connections held by " \
                   "skirr with no error and no leak"
            if sk is None or sk["kib_rss"] is None:
                out.append({"target": name, "verdict": "MISSED" if sk else "unproven",
                            "detail": (sk or {}).get("error") or why_not or "not run"})
            else:
                bad = []
                if sk["errors"]:
                    bad.append(f"{sk['errors']} connections failed or closed "
                               f"({sk['error_kinds']}; {sk['first_error']})")
                if sk["leak"]:
                    bad.append(f"RSS after all closed {sk['after_ratio']:.2f}x the start "
                               f"(over {LEAK_RATIO:.2f}x)")
                if sk["leak"] is None:
                    bad.append(f"{sk['not_closed']} connections still open on the server "
                               f"{CLOSE_WAIT_S:.0f} s after the client closed them")
                out.append({"target": name, "verdict": "MISSED" if bad else "met",
                            "detail": "; ".join(bad) or
                            f"RSS after all closed {sk['after_ratio']:.2f}x the start"})
    return out


# ----------------------------------------------------------------------------------------------
# The command (run.py scale)


def parse_rows(text):
    """--rows' mode:count,... as [(mode, count)], mode one of MODES or "fanout"; SystemExit on
    anything else."""
    rows = []
    for item in text.split(","):
        mode, _, n = item.partition(":")
        if (mode not in MODES and mode != "fanout") or not n.isdigit() or int(n) < 1:
            raise SystemExit(f"scale: --rows takes mode:count,... with mode http, ws, tcp or "
                             f"fanout; got {item!r}")
        rows.append((mode, int(n)))
    return rows


def plan(args):
    """The idle part's settings from the command line: SCALE_FULL with --rows (its mode:count
    items other than fanout's; none: no idle row), --servers (a subset; skirr always) and
    --rounds applied; SystemExit on a name it lacks."""
    sp = json.loads(json.dumps(SCALE_FULL))
    if args.rows:
        sp["rows"] = [r for r in parse_rows(args.rows) if r[0] != "fanout"]
    sp["rows"] = [tuple(r) for r in sp["rows"]]
    if args.servers:
        want = ["skirr", *(s for s in args.servers.split(",") if s != "skirr")]
        known = set(HTTP_SERVERS) | set(WS_SERVERS)
        unknown = [s for s in want if s not in known]
        if unknown:
            raise SystemExit(f"scale: unknown server {', '.join(unknown)}; known: "
                             + ", ".join(sorted(known)))
        sp["servers"] = {m: [s for s in sp["servers"][m] if s in want] for m in MODES}
    if args.rounds:
        sp["rounds"] = args.rounds
    return sp


def plan_churn(args):
    """The churn rows' settings: CHURN with --servers (a subset; skirr always),
    --churn-rounds and --no-profile (cp["profile"]: False) applied."""
    cp = dict(CHURN)
    if args.servers:
        want = ["skirr", *(s for s in args.servers.split(",") if s != "skirr")]
        cp["servers"] = [s for s in cp["servers"] if s in want]
    if args.churn_rounds:
        cp["rounds"] = args.churn_rounds
    cp["profile"] = not getattr(args, "no_profile", False)
    return cp


def plan_fanout(args):
    """The fan-out rows' settings: FANOUT with --rows' fanout:N items (when --rows is given:
    those alone, none when it has none), --servers (a subset; skirr always), --fanout-rounds,
    --fanout-broadcasts and --fanout-sizes (bytes, comma-separated) applied; SystemExit on a
    size fanout_client does not take."""
    fp = json.loads(json.dumps(FANOUT))
    if getattr(args, "rows", None):
        fp["rows"] = [n for mode, n in parse_rows(args.rows) if mode == "fanout"]
    if getattr(args, "servers", None):
        want = ["skirr", *(s for s in args.servers.split(",") if s != "skirr")]
        fp["servers"] = [s for s in fp["servers"] if s in want]
    if getattr(args, "fanout_rounds", None):
        fp["rounds"] = args.fanout_rounds
    if getattr(args, "fanout_broadcasts", None):
        fp["broadcasts"] = args.fanout_broadcasts
    if getattr(args, "fanout_sizes", None):
        sizes = args.fanout_sizes.split(",")
        if not all(x.isdigit() and 16 <= int(x) <= 65535 for x in sizes):
            raise SystemExit("scale: --fanout-sizes takes message sizes of 16 to 65535 bytes, "
                             f"comma-separated; got {args.fanout_sizes!r}")
        fp["sizes"] = [int(x) for x in sizes]
    return fp


PARTS = ("scale", "fanout", "churn")  # a scale run's parts: the idle rows, fan-out, churn


def merge_parts(result, other_run):
    """The parts `result` lacks (None: not run) taken from the run folder `other_run`'s
    results.json, each named in result["merged"] ({part: {"run", "started", "git"}}), so that a
    part measured alone joins an earlier run's report; nothing when `other_run` is None. A list
    of run folders (--merge given more than once) is taken in order, each filling the parts
    still missing: a run's results.json holds only what it measured, never what it merged."""
    if not other_run:
        return
    if isinstance(other_run, (list, tuple)):
        for one in other_run:
            merge_parts(result, one)
        return
    other = json.loads((Path(other_run) / "results.json").read_text())
    for k in PARTS:
        if result.get(k) is None and other.get(k):
            result[k] = other[k]
            result.setdefault("merged", {})[k] = {"run": Path(other_run).name,
                                                  "started": other["meta"]["started"],
                                                  "git": other["meta"]["git"]}


def main(args):
    """`run.py scale`: the idle rows, the fan-out rows and the churn rows (each part can be left
    out), their results in bench/results/<time>-scale/ and the report (report.md there, and
    --summary); the exit status is 1 when skirr failed a row."""
    from .report import write_scale_report  # report imports this module
    if args.rerender:
        result = json.loads((Path(args.rerender) / "results.json").read_text())
        merge_parts(result, getattr(args, "merge", None))
        print(write_scale_report(result, args.rerender, args.summary))
        return 0
    sp = plan(args)
    os.sched_setaffinity(0, {int(CLIENT_CPU)})
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    random.seed(seed)
    outdir = new_run_dir("scale")
    log(f"results in {outdir}")
    fp = plan_fanout(args)
    run_idle = not args.no_idle and bool(sp["rows"])
    run_fan = not getattr(args, "no_fanout", False) and bool(fp["rows"])
    servers = list(dict.fromkeys([
        *(s for mode, _ in sp["rows"] for s in sp["servers"][mode] if run_idle),
        *(fp["servers"] if run_fan else []),
        *(plan_churn(args)["servers"] if not args.no_churn else [])]))
    tools = ensure_tools(["taskset", "gcc", "wrk"] + (["nginx"] if "nginx-scale" in servers else []))
    groups = peer_groups(servers)
    install = ensure_peers(groups, reinstall=args.reinstall) if groups else {}
    build_scale_client()
    build_fanout_client()
    status = {}
    for s in servers:
        g = SERVERS[s].group
        if g and not install.get(g, {}).get("ok"):
            status[s] = "failed to install: " + install.get(g, {}).get("error", "?").strip()[-600:]
        if s.startswith("nginx") and not tools.get("nginx"):
            status[s] = "nginx is not installed and could not be installed"
    meta = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "git": git_commit(), "machine": machine_info(), "seed": seed,
            "python": interp_identity(venv_python(SKIRR_VENV)),
            "versions": pip_versions(venv_python(PEERS_VENV)) if groups else {},
            "install": install}
    part = run(sp, status, outdir) if run_idle else None
    fan = run_fanout(fp, status, outdir) if run_fan else None
    churn = run_churn(plan_churn(args), status, outdir) if not args.no_churn else None
    result = {"meta": meta, "scale": part, "fanout": fan, "churn": churn}
    (outdir / "results.json").write_text(json.dumps(result, indent=1))
    merge_parts(result, getattr(args, "merge", None))
    print(write_scale_report(result, outdir, args.summary))
    failed = any(r["server"] == "skirr" and (not r["ok"] or row_errors(r))
                 for r in (part or {}).get("rows", []))
    failed |= any(r["server"] == "skirr" and not r["ok"] for r in (churn or {}).get("runs", []))
    failed |= any(r["server"] == "skirr" and not r["ok"] for r in (fan or {}).get("runs", []))
    return 1 if failed else 0


def key_figures(result):
    """The figures RESULTS.md's Scale section quotes, from a scale run's results (its parts may
    be merged from another run): {"idle": {mode ("http", "ws"): [{"n", "skirr", "peer",
    "peer_kib", "nginx"}] (KiB of RSS per connection; "peer": the lowest peer that held every
    connection, None without; "nginx": None for WebSocket or without nginx's figure), the rows
    skirr held, by n}, "held": {mode: {"n", "skirr" (its figures), "skipped" (why not run, or
    None)}} for HELD_N, "fanout": [lowest, highest] peer ÷ skirr CPU per delivered message over
    every row, peer and round (None without one), "churn_peers": the same for CPU per request,
    "churn_nginx": [lowest, highest] skirr ÷ nginx, "profile": [{"workload", "conns", "accept",
    "close"}] (shares of skirr's samples, the profiled runs that succeeded)}."""
    out = {"idle": {}, "held": {}, "fanout": None, "churn_peers": None, "churn_nginx": None,
           "profile": []}
    part = result.get("scale")
    if part:
        figs = figures(part["rows"])
        skipped = part.get("skipped_rows") or {}
        for mode, n in (tuple(r) for r in part["config"]["rows"]):
            if mode == "tcp":
                continue
            sk = figs.get((mode, n, "skirr"))
            if sk is not None and sk["kib_rss"] is not None:
                peer, low = _lowest_peer(figs, mode, n)
                ng = figs.get((mode, n, "nginx-scale")) if mode == "http" else None
                out["idle"].setdefault(mode, []).append(
                    {"n": n, "skirr": sk["kib_rss"], "peer": peer, "peer_kib": low,
                     "nginx": ng["kib_rss"] if ng and not ng["errors"] else None})
            if n == HELD_N:
                out["held"][mode] = {"n": n, "skirr": sk, "skipped": skipped.get(f"{mode} {n}")}

    def span(ratios):
        return [min(ratios), max(ratios)] if ratios else None
    fan = result.get("fanout")
    if fan:
        rs = peer_ratios(fan["runs"], fan["config"]["rounds"], base="skirr", key="cpu_us_per_msg",
                         peers=lambda s: SERVERS[s].kind == "peer")
        out["fanout"] = span([x for v in rs.values() for x in v["ratios"]])
    churn = result.get("churn")
    if churn:
        rounds = churn["config"]["rounds"]
        rs = peer_ratios(churn["runs"], rounds, base="skirr",
                         peers=lambda s: SERVERS[s].kind == "peer")
        out["churn_peers"] = span([x for v in rs.values() for x in v["ratios"]])
        by = {(r["workload"], r["conns"], r["round"], r["server"]): r
              for r in churn["runs"] if r["ok"]}
        out["churn_nginx"] = span([k["cpu_us_per_req"] / g["cpu_us_per_req"]
                                   for (w, c, rnd, s), k in by.items() if s == "skirr"
                                   for g in [by.get((w, c, rnd, "nginx-scale"))] if g])
        out["profile"] = [{"workload": r["workload"], "conns": r["conns"],
                           "accept": r["shares"]["accept"], "close": r["shares"]["close"]}
                          for r in (churn.get("profile") or {}).get("runs", []) if r["ok"]]
    return out
