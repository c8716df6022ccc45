"""Measuring one server: CPU, memory and the load generators, for one run of the matrix.

Owns: what /proc says about a server's process tree (utime+stime, peak RSS and PSS from
smaps_rollup, that every thread is pinned to the server CPU) and about CPU 0 (other load, steal);
the wrk run (its Lua report script, its own CPU share) and the h2load fixed-rate run (percentiles
from its per-request log); the WebSocket load generator's run (bench/ws_load.c: the server's CPU
read when it prints MEASURE_START and MEASURE_END) and its exact echo check; one measured run per
row (`measure_row`; `measure_ws_row` for the WebSocket rows), per fixed-rate server
(`measure_fixed`), per streaming sample set (`measure_stream`), idle memory, the TLS rows' own
runs (issue 32: `measure_handshakes`, full handshakes with h2load, one request a connection;
`idle_tls_memory`, the server's RSS per idle TLS connection; the throughput rows are
`measure_row` over https), the HTTP/2 rows' runs (issue 33: `measure_h2_row`, h2load with
N connections of M concurrent streams, the server's CPU read at h2load's marks of its measured
interval; `check_h2`, the exact answer over HTTP/2 with curl), and the app's own CPU per request
called directly (`app_cpu`, through a pinned `run.py app-cpu` child).

Never: chooses what to run or in which order (matrix.py does), aggregates rounds or judges a figure
(report.py does), or lets a failed run raise: each returns a result with "ok" and "error". The
traced gates (strace, callgrind) are in traced.py.
"""
from __future__ import annotations

import json
import os
import re
import ssl
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from .env import (BUILD, CLIENT_CPU, CLK_TCK, RUN_PY, SERVER_CPU, SHARED_CPUS, SKIRR_VENV,
                  describe, tls_files, venv_python)
from .peers import IDLE_KEEPALIVE, SERVERS, Server, require_listening
from .workloads import (STREAM_APP, STREAM_EXPECT, WORKLOADS, WS_WORKLOADS, Conn, check_stream,
                        check_workload, direct_caller, status_line, tls_negotiated)

WRK_ERRORS = ("connect", "read", "write", "status", "timeout")

# ----------------------------------------------------------------------------------------------
# /proc


def proc_ticks(pids):
    """{pid: utime+stime in clock ticks} (a process that is gone counts 0)."""
    out = {}
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            out[pid] = 0
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[pid] = int(fields[11]) + int(fields[12])  # utime, stime
    return out


def cpu_ticks(pids):
    return sum(proc_ticks(pids).values())


def memory(pids):
    """(RSS bytes, PSS bytes) summed over pids."""
    rss = pss = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1]) * 1024
        except OSError:
            continue
    return rss, pss


def cpu0_busy(cpus=SERVER_CPU):
    """(busy, steal) jiffies of CPU 0 (or of the comma-separated `cpus`, summed): busy =
    user+nice+system+irq+softirq; steal = taken by the hypervisor."""
    want = {f"cpu{c} " for c in cpus.split(",")}
    busy = steal = 0
    for line in Path("/proc/stat").read_text().splitlines():
        if line[:line.index(" ") + 1] in want:
            v = [int(x) for x in line.split()[1:]]
            busy, steal = busy + v[0] + v[1] + v[2] + v[5] + v[6], steal + v[7]
    return busy, steal


def softirq_ticks(cpu=CLIENT_CPU):
    """softirq jiffies of one CPU (/proc/stat). On loopback the client CPU's softirq runs the TCP
    input of both directions for what the client's ACKs push: where a window-limited response's
    transmit lands (file_1m; bench/file_1m_regimes.py)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{cpu} "):
            return int(line.split()[7])
    return 0


def affinity_ok(pids, cpus=SERVER_CPU):
    want = {int(c) for c in cpus.split(",")}
    for pid in pids:
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                if os.sched_getaffinity(int(tid)) != want:
                    return False
        except OSError:
            continue
    return True


class Sampler(threading.Thread):
    """Peak RSS/PSS of the server's process tree while it runs."""

    def __init__(self, pids, interval=0.5):
        super().__init__(daemon=True)
        self.pids, self.interval = pids, interval
        self.rss = self.pss = 0
        self.halt = threading.Event()

    def sample(self):
        rss, pss = memory(self.pids)
        self.rss, self.pss = max(self.rss, rss), max(self.pss, pss)

    def run(self):
        while not self.halt.wait(self.interval):
            self.sample()

    def stop(self):
        self.halt.set()
        self.join()
        self.sample()


# ----------------------------------------------------------------------------------------------
# Load generators

LUA_REPORT = r"""
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,"write":%d,' ..
    '"status":%d,"timeout":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean))
end
"""


def wrk_script(wl, outdir):
    path = Path(outdir) / f"wrk-{wl}.lua"
    if not path.exists():
        path.write_text(WORKLOADS[wl].get("wrk_lua", "") + LUA_REPORT)
    return path


def run_wrk(wl, port, conns, duration, outdir, cpus=CLIENT_CPU, threads=1, scheme="http"):
    """Run wrk pinned to the client CPU (or `cpus`) with `threads` threads; returns its JSON
    summary plus its CPU seconds. `scheme` "https": over TLS (wrk's OpenSSL client, OpenSSL's
    default suites; a connection is handshaken once and kept alive)."""
    script = wrk_script(wl, outdir)
    url = f"{scheme}://127.0.0.1:{port}{WORKLOADS[wl]['path']}"
    argv = ["taskset", "-c", cpus, "wrk", f"-t{threads}", f"-c{conns}", f"-d{duration}s", "--latency",
            "--timeout", "5s", "-s", str(script), url]
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        text = out.read().decode(errors="replace")
    m = re.search(r"^BENCHJSON (\{.*\})$", text, re.M)
    if p.returncode != 0 or not m:
        raise RuntimeError(f"wrk failed ({p.returncode}): {text[-600:]}")
    res = json.loads(m.group(1))
    res["wall_s"] = wall
    res["cpu_s"] = ru.ru_utime + ru.ru_stime
    return res


def run_h2load(wl, port, conns, rate, duration, outdir, empty_reason=False):
    """Fixed offered rate (h2load --rps is per client) with per-request log for percentiles.

    `empty_reason`: the server's status line was probed as `HTTP/1.1 200 ` (an empty
    reason-phrase, which RFC 9112 §4 allows; hypercorn's h11 sends it). h2load 1.52 then logs
    status 0 and counts the response as failed, though it read it whole (its status callback is
    a span callback, never called for an empty span; a connection error is logged as -1, a
    truncated response not at all and stays failed and errored): such responses count as
    "status_by_probe", not as failed or non-2xx. Their statuses during the load are not observed
    (h11 sends every status without a reason-phrase): fixed_rate_run checks the server's log
    instead. Without `empty_reason`, status 0 is a non-2xx response. RuntimeError when h2load
    fails, logs under 95% of the requests offered, or counts fewer failed-but-not-errored
    responses than it logged as 0."""
    spec = WORKLOADS[wl]
    logf = Path(outdir) / "h2load-last.log"
    logf.unlink(missing_ok=True)  # h2load appends to an existing log file
    url = f"http://127.0.0.1:{port}{spec['path']}"
    argv = ["taskset", "-c", CLIENT_CPU, "h2load", "--h1", "-t1", f"-c{conns}",
            f"--rps={rate / conns:.3f}", f"-D{duration}", "--warm-up-time=1", f"--log-file={logf}",
            url]
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = p.communicate(timeout=duration + 60)
    wall = time.perf_counter() - t0
    text = out.decode(errors="replace")
    lat, non2xx, by_probe = [], 0, 0
    for line in logf.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3:
            lat.append(int(parts[2]))
            if empty_reason and parts[1] == "0":
                by_probe += 1
            elif not parts[1].startswith("2"):
                non2xx += 1
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                  r"(\d+) errored, (\d+) timeout", text)
    if p.returncode != 0 or not m or not lat:
        raise RuntimeError(f"h2load failed ({p.returncode}): {text[-600:]}")
    if len(lat) < 0.95 * rate * duration:
        # In rate mode h2load stops a client whose connection broke (a response cut short is
        # neither failed nor errored, and is not logged): the load was not the one offered.
        raise RuntimeError(f"h2load: {len(lat)} responses in {duration} s, under 95% of the "
                           f"{rate * duration:,.0f} offered (a connection lost, or the server "
                           f"fell behind): {m.group(0)}")
    if by_probe > int(m.group(5)) - int(m.group(6)):  # h2load's failed includes errored
        raise RuntimeError(f"h2load logged {by_probe} responses with status 0 but counted "
                           f"{m.group(5)} failed, {m.group(6)} errored")
    lat.sort()

    def pct(q):
        return lat[min(len(lat) - 1, int(q * len(lat)))] / 1000.0
    return {"offered_rps": rate, "achieved_rps": len(lat) / duration, "requests": len(lat),
            "failed": int(m.group(5)) - by_probe, "errored": int(m.group(6)),
            "timeout": int(m.group(7)), "non2xx": non2xx, "status_by_probe": by_probe,
            "p50_ms": pct(0.50), "p90_ms": pct(0.90), "p99_ms": pct(0.99), "p999_ms": pct(0.999),
            "max_ms": lat[-1] / 1000.0, "wall_s": wall}


# ----------------------------------------------------------------------------------------------
# One measured run each


def with_log_tail(row, srv):
    """row, with the stopped server's last log lines as "server_log_tail" when it wrote any."""
    tail = srv.log_tail(600)
    if tail:
        row["server_log_tail"] = tail
    return row


def measure_row(name, wl, conns, cfg, outdir, tag, after=None):
    """One measured run of server `name` on workload `wl` with `conns` connections. A server with
    workers (the workers row) and wrk -t2 share both CPUs instead of the pinned split; its CPU is
    summed over the manager and every worker, and the run fails if a process of its tree exits or
    starts during the measured interval. `after(srv, row)`, when given, checks the still running
    server once the run succeeded (raising fails the run) and may add to the row."""
    spec = WORKLOADS[wl]
    workers = SERVERS[name].workers
    tls = SERVERS[name].tls
    cpus = SHARED_CPUS if workers else SERVER_CPU
    client = dict(cpus=SHARED_CPUS, threads=2) if workers else {}
    if tls:
        client["scheme"] = "https"
    row = {"server": name, "workload": wl, "conns": conns, "ok": False, "error": None}
    with Server(name, spec["app"], Path(outdir) / "logs", tag, pin=cpus) as srv:
        try:
            srv.wait_ready(lambda port: check_workload(wl, port, tls))
            if workers > 1:  # the manager and every worker
                srv.wait_processes(workers + 1)
            if tls:  # what the run's client suites negotiate with this server
                row["tls"] = tls_negotiated(wl, srv.port)
            row["pinned"] = affinity_ok(srv.pids(), cpus)
            if cfg["warmup"]:
                w = run_wrk(wl, srv.port, conns, cfg["warmup"], outdir, **client)
                if any(w[k] for k in WRK_ERRORS):
                    raise RuntimeError(f"errors during warm-up: {w}")
            pids = srv.pids()
            sampler = Sampler(pids)
            sampler.sample()
            sampler.start()
            row["loadavg"] = Path("/proc/loadavg").read_text().split()[0]
            b0, p0, t0 = cpu0_busy(cpus), proc_ticks(pids), time.perf_counter()
            q0 = softirq_ticks()
            res = run_wrk(wl, srv.port, conns, cfg["duration"], outdir, **client)
            p1, b1, t1 = proc_ticks(pids), cpu0_busy(cpus), time.perf_counter()
            q1 = softirq_ticks()
            sampler.stop()
            if sorted(srv.pids()) != sorted(pids):
                raise RuntimeError(f"the server's processes changed during the run: {sorted(pids)} "
                                   f"-> {sorted(srv.pids())}")
            wall = t1 - t0
            server_cpu = sum(p1[p] - p0[p] for p in pids) / CLK_TCK
            # CPU seconds of each process over the interval, busiest first (the workers' share).
            row["process_cpu_s"] = sorted(((p1[p] - p0[p]) / CLK_TCK for p in pids), reverse=True)
            errors = {k: res[k] for k in WRK_ERRORS}
            n = res["requests"]
            row.update(
                requests=n, rps=n / (res["duration_us"] / 1e6), errors=errors,
                # wrk's percentiles are wrong under pipelining: its coordinated-omission correction
                # adds samples below the recorded minimum, which percentile() never reaches (it
                # prints 0). Only pipelined runs are affected; their latency is not reported.
                p50_ms=None if spec.get("pipeline") else res["p50_us"] / 1000,
                p99_ms=None if spec.get("pipeline") else res["p99_us"] / 1000,
                max_ms=res["max_us"] / 1000,
                server_cpu_s=server_cpu, cpu_us_per_req=server_cpu / n * 1e6 if n else None,
                server_util=server_cpu / wall, gen_cpu=res["cpu_s"] / res["wall_s"],
                client_bound=res["cpu_s"] / res["wall_s"] >= 0.9,
                # With shared CPUs, wrk's own CPU is not "other" load.
                other_cpu0=max(0.0, (b1[0] - b0[0]) / CLK_TCK - server_cpu
                               - (res["cpu_s"] if workers else 0)) / wall,
                steal_cpu0=(b1[1] - b0[1]) / CLK_TCK / wall,
                # the client side per request: wrk's CPU and its CPU's softirq (µs)
                gen_us_per_req=res["cpu_s"] / n * 1e6 if n else None,
                client_softirq_us_per_req=(q1 - q0) / CLK_TCK / n * 1e6 if n else None,
                rss_mib=sampler.rss / 2**20, pss_mib=sampler.pss / 2**20,
            )
            check_workload(wl, srv.port, tls)  # exact status and body after the run
            if sum(errors.values()):
                raise RuntimeError(f"wrk reported errors {errors}")
            if n == 0:
                raise RuntimeError("no request completed")
            if after is not None:
                after(srv, row)
            row["ok"] = True
        except Exception as exc:  # noqa: BLE001
            row["error"] = describe(exc)
    return with_log_tail(row, srv)


# ----------------------------------------------------------------------------------------------
# The WebSocket rows: bench/ws_load.c instead of wrk


def ws_load_argv(wl, port, conns, extra):
    spec = WS_WORKLOADS[wl]
    return ([str(BUILD / "ws_load"), str(port), "-c", str(conns), "-s", str(spec["size"]), "-p",
             spec["path"]] + (["-b"] if spec["binary"] else []) + list(extra))


def ws_result(text):
    """The generator's `WSLOAD {json}` line from its output; RuntimeError with the output's tail
    when there is none."""
    m = re.search(r"^WSLOAD (\{.*\})$", text, re.M)
    if not m:
        raise RuntimeError(f"ws_load printed no result: {text[-600:]}")
    return json.loads(m.group(1))


def check_ws(wl, port):
    """Three messages of the workload echoed exactly on one connection, the handshake checked, the
    close handshake completed; ConnectionRefusedError while nothing listens, else RuntimeError
    with the generator's first error."""
    p = subprocess.run(ws_load_argv(wl, port, 1, ["-n", "3"]), capture_output=True, text=True,
                       timeout=30)
    res = ws_result(p.stdout + p.stderr)
    if "Connection refused" in res["error"]:
        raise ConnectionRefusedError(res["error"])
    if p.returncode != 0 or res["errors"] or res["messages"] != 3 or res["closed_clean"] != 1:
        raise RuntimeError(f"{wl} check: {res['errors']} errors, {res['messages']}/3 echoed, "
                           f"clean close {res['closed_clean']}/1: {res['error'] or p.stderr[-300:]}")


def run_ws_load(wl, port, conns, warmup, duration, on_start, on_end):
    """ws_load pinned to the client CPU: `warmup` seconds, then `duration` measured; on_start()
    and on_end() are called as it prints MEASURE_START and MEASURE_END. Its JSON result (messages,
    errors, percentiles in µs, its own CPU seconds over the measured interval)."""
    argv = ["taskset", "-c", CLIENT_CPU] + ws_load_argv(
        wl, port, conns, ["-w", str(warmup), "-d", str(duration)])
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(warmup + duration + 60, p.kill)  # it ends by itself well before
    timer.start()
    lines, marks = [], []
    try:
        for line in p.stdout:
            lines.append(line)
            if line.strip() == "MEASURE_START":
                on_start()
                marks.append("start")
            elif line.strip() == "MEASURE_END":
                on_end()
                marks.append("end")
        p.wait()
    finally:
        timer.cancel()
    res = ws_result("".join(lines))
    if marks != ["start", "end"]:
        raise RuntimeError(f"ws_load ({p.returncode}) marked {marks}: {res['error']}")
    return res


def measure_ws_row(name, wl, conns, cfg, outdir, tag):
    """One measured run of server `name` on the WebSocket workload `wl` with `conns` connections,
    pinned as the HTTP rows (server on CPU 0, ws_load on CPU 1): the server's CPU over the
    generator's measured interval ÷ messages echoed in it. The exact echo check before and after;
    any generator error fails the run."""
    row = {"server": name, "workload": wl, "conns": conns, "ok": False, "error": None}
    with Server(name, WS_WORKLOADS[wl]["app"], Path(outdir) / "logs", tag) as srv:
        try:
            srv.wait_ready(lambda port: check_ws(wl, port))
            row["pinned"] = affinity_ok(srv.pids())
            pids = srv.pids()
            sampler = Sampler(pids)
            sampler.sample()
            sampler.start()
            row["loadavg"] = Path("/proc/loadavg").read_text().split()[0]
            at = {}

            def on_start():
                at["b0"], at["p0"], at["t0"] = cpu0_busy(), proc_ticks(pids), time.perf_counter()

            def on_end():
                at["p1"], at["b1"], at["t1"] = proc_ticks(pids), cpu0_busy(), time.perf_counter()

            try:
                res = run_ws_load(wl, srv.port, conns, cfg["warmup"], cfg["duration"], on_start,
                                  on_end)
            finally:
                sampler.stop()
            if sorted(srv.pids()) != sorted(pids):
                raise RuntimeError(f"the server's processes changed during the run: {sorted(pids)} "
                                   f"-> {sorted(srv.pids())}")
            wall = at["t1"] - at["t0"]
            server_cpu = sum(at["p1"][p] - at["p0"][p] for p in pids) / CLK_TCK
            n = res["messages"]
            gen = res["cpu_s"] / res["wall_s"] if res["wall_s"] else 0.0
            row.update(
                requests=n, rps=res["msgs_per_s"], errors={"ws": res["errors"]},
                p50_ms=res["p50_us"] / 1000, p99_ms=res["p99_us"] / 1000,
                p999_ms=res["p999_us"] / 1000, max_ms=res["max_us"] / 1000,
                server_cpu_s=server_cpu, cpu_us_per_req=server_cpu / n * 1e6 if n else None,
                server_util=server_cpu / wall, gen_cpu=gen, client_bound=gen >= 0.9,
                other_cpu0=max(0.0, (at["b1"][0] - at["b0"][0]) / CLK_TCK - server_cpu) / wall,
                steal_cpu0=(at["b1"][1] - at["b0"][1]) / CLK_TCK / wall,
                rss_mib=sampler.rss / 2**20, pss_mib=sampler.pss / 2**20,
                closed_clean=res["closed_clean"], first_error=res["error"],
            )
            if res["errors"]:
                raise RuntimeError(f"ws_load: {res['errors']} errors, the first: {res['error']}")
            if n == 0:
                raise RuntimeError("no message echoed")
            check_ws(wl, srv.port)  # exact echoes after the run
            row["ok"] = True
        except Exception as exc:  # noqa: BLE001
            row["error"] = describe(exc)
    return with_log_tail(row, srv)


def ws_start_check(name, wl, outdir, tag):
    """None when server `name` starts and echoes the workload exactly (the WebSocket rows' start
    check, which doubles as "does it serve WebSockets at all"), else the reason it does not."""
    try:
        with Server(name, WS_WORKLOADS[wl]["app"], Path(outdir) / "logs", tag) as srv:
            srv.wait_ready(require_listening)
            try:
                check_ws(wl, srv.port)
            except ConnectionRefusedError:  # listening, then refused: try once more
                time.sleep(1)
                check_ws(wl, srv.port)
    except Exception as exc:  # noqa: BLE001
        return describe(exc, 800)
    return None


def stream_samples(port, samples):
    """(first-chunk ms, total ms) of `samples` sequential streaming requests on one keep-alive
    connection, after one that warms the connection and the app."""
    c = Conn(port)
    firsts, totals = [], []
    try:
        req = c.request_bytes("GET", "/stream")
        for i in range(samples + 1):
            got = []
            t0 = time.perf_counter()
            c.sock.sendall(req)
            status, _, body = c.read_response(on_body=got.append)
            t1 = time.perf_counter()
            if status != 200 or body != STREAM_EXPECT:
                raise AssertionError(f"status {status} body {body!r}")
            if i:  # the first sample warms the connection and the app
                firsts.append((got[0] - t0) * 1000)
                totals.append((t1 - t0) * 1000)
    finally:
        c.close()
    return firsts, totals


def measure_stream(name, samples, outdir, tag):
    out = {"server": name, "ok": False, "error": None}
    with Server(name, STREAM_APP, Path(outdir) / "logs", tag) as srv:
        try:
            srv.wait_ready(check_stream)
            firsts, totals = stream_samples(srv.port, samples)
            check_stream(srv.port)
            out.update(ok=True, first_chunk_ms=statistics.median(firsts),
                       total_ms=statistics.median(totals), first_chunk_samples=firsts,
                       total_samples=totals)
        except Exception as exc:  # noqa: BLE001
            out["error"] = describe(exc)
    return out


def fixed_rate_run(srv, wl, conns, rate, duration, outdir, empty_reason=False):
    """One h2load run at `rate` requests per second against the running server; its figures with
    the server's approximate CPU per request (`empty_reason`: as run_h2load's). RuntimeError
    when responses were counted by the probed status and the server logged anything during the
    load (an error it answered with a status h2load could not read)."""
    pids = srv.pids()
    logged = srv.log_size()
    c0, t0 = cpu_ticks(pids), time.perf_counter()
    res = run_h2load(wl, srv.port, conns, rate, duration, outdir, empty_reason)
    said = srv.log_since(logged).strip()
    if res["status_by_probe"] and said:
        raise RuntimeError(f"{res['status_by_probe']} responses counted by the probed status "
                           f"line, and the server logged during the load: {said[:400]}")
    cpu = (cpu_ticks(pids) - c0) / CLK_TCK
    # The interval includes h2load's 1 s warm-up, so CPU/request is approximate.
    res["cpu_us_per_req"] = cpu / max(1, res["requests"]) * 1e6 * duration / (
        time.perf_counter() - t0)
    return res


def measure_fixed(name, wl, conns, rates, duration, outdir, tag):
    out = []
    with Server(name, WORKLOADS[wl]["app"], Path(outdir) / "logs", tag) as srv:
        try:
            srv.wait_ready(lambda port: check_workload(wl, port))
            empty_reason = status_line(wl, srv.port) == b"HTTP/1.1 200 "
        except Exception as exc:  # noqa: BLE001
            return [{"server": name, "workload": wl, "conns": conns, "pct": None, "ok": False,
                     "error": describe(exc, 800)}]
        for pct, rate in rates:
            r = {"server": name, "workload": wl, "conns": conns, "pct": pct, "ok": False,
                 "error": None}
            try:
                r.update(fixed_rate_run(srv, wl, conns, rate, duration, outdir, empty_reason))
                check_workload(wl, srv.port)
                if r["failed"] or r["timeout"]:  # failed includes errored and non-2xx
                    raise RuntimeError(f"h2load: {r['failed']} failed ({r['errored']} errored, "
                                       f"{r['non2xx']} non-2xx), {r['timeout']} timed out")
                r["ok"] = True
            except Exception as exc:  # noqa: BLE001
                r["error"] = describe(exc, 800)
            out.append(r)
    return out


def idle_memory(servers, outdir):
    out = {}
    for name in servers:
        try:
            srv = Server(name, WORKLOADS["raw_get"]["app"], Path(outdir) / "logs", f"idle-{name}")
        except Exception as exc:  # noqa: BLE001
            out[name] = {"ok": False, "error": str(exc)}
            continue
        with srv:
            try:
                srv.wait_ready(lambda port: check_workload("raw_get", port))
                time.sleep(0.5)
                rss, pss = memory(srv.pids())
                out[name] = {"ok": True, "rss_mib": rss / 2**20, "pss_mib": pss / 2**20,
                             "processes": len(srv.pids()), "pinned": affinity_ok(srv.pids())}
            except Exception as exc:  # noqa: BLE001
                out[name] = {"ok": False, "error": describe(exc)}
    return out


# ----------------------------------------------------------------------------------------------
# The TLS rows' own runs (issue 32)

H2LOAD_TLS = re.compile(r"^(TLS Protocol|Cipher|Server Temp Key|Application protocol): (.*)$", re.M)


def run_h2load_handshakes(port, path, rate, period_ms, total, empty_reason=False):
    """h2load --h1 in rate mode: `rate` new TLS connections every `period_ms`, `total` in all,
    one request on each (-n = -c = total): every connection a full handshake (h2load keeps no
    session between its connections, so nothing resumes). Returns its counts, its CPU seconds and
    what it says it negotiated; RuntimeError when h2load fails, takes over a minute longer than
    the rate needs, or a request did not succeed. `empty_reason`: the server's status line is
    `HTTP/1.1 200 ` (hypercorn's), which h2load counts as failed though it read the response
    whole (see run_h2load): then every request must be done, none errored or timed out, and the
    failed ones are those (the exact check before and after the run reads the status)."""
    argv = ["taskset", "-c", CLIENT_CPU, "h2load", "--h1", "-t1", f"-r{rate}",
            f"--rate-period={period_ms}ms", f"-c{total}", f"-n{total}",
            f"https://127.0.0.1:{port}{path}"]
    # Its output goes to a file: it writes a line per connection without ALPN, more than a pipe
    # holds while nobody reads it.
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        timer = threading.Timer(total / rate * period_ms / 1000 + 60, p.kill)
        timer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        text = out.read().decode(errors="replace")
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                  r"(\d+) failed, (\d+) errored, (\d+) timeout", text)
    if p.returncode != 0 or not m:
        raise RuntimeError(f"h2load failed ({p.returncode}): {text[-600:]}")
    done, ok, errored, timeout = (int(m.group(i)) for i in (3, 4, 6, 7))
    if not (ok == total or (empty_reason and done == total and not errored and not timeout)):
        raise RuntimeError(f"h2load: {m.group(0)}: {text[-400:]}")
    return {"handshakes": total, "wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime,
            "negotiated": dict(H2LOAD_TLS.findall(text)), "status_by_probe": total - ok}


def measure_handshakes(name, wl, cfg, outdir, tag):
    """The handshake row: server `name` (a TLS server) pinned to the server CPU, h2load on the
    client CPU opening cfg["hs_rate"] connections per cfg["hs_period_ms"] (a fixed offered rate,
    the same for every server), cfg["hs_total"] in all, each a full TLS handshake and one request
    of workload `wl`, after a warm-up of cfg["hs_warmup"] connections. Server CPU per handshake =
    its utime+stime over h2load's run ÷ connections; handshakes per CPU second its inverse. The
    exact check before and after."""
    row = {"server": name, "workload": "handshake", "conns": cfg["hs_rate"], "ok": False,
           "error": None}
    path = WORKLOADS[wl]["path"]
    with Server(name, WORKLOADS[wl]["app"], Path(outdir) / "logs", tag) as srv:
        try:
            srv.wait_ready(lambda port: check_workload(wl, port, True))
            row["pinned"] = affinity_ok(srv.pids())
            row["tls"] = tls_negotiated(wl, srv.port)
            empty_reason = status_line(wl, srv.port, True) == b"HTTP/1.1 200 "
            run_h2load_handshakes(srv.port, path, cfg["hs_rate"], cfg["hs_period_ms"],
                                  cfg["hs_warmup"], empty_reason)
            pids = srv.pids()
            sampler = Sampler(pids)
            sampler.sample()
            sampler.start()
            row["loadavg"] = Path("/proc/loadavg").read_text().split()[0]
            b0, p0 = cpu0_busy(), proc_ticks(pids)
            try:
                res = run_h2load_handshakes(srv.port, path, cfg["hs_rate"], cfg["hs_period_ms"],
                                            cfg["hs_total"], empty_reason)
            finally:
                p1, b1 = proc_ticks(pids), cpu0_busy()
                sampler.stop()
            wall = res["wall_s"]
            server_cpu = sum(p1[p] - p0[p] for p in pids) / CLK_TCK
            n = res["handshakes"]
            row.update(
                requests=n, rps=n / wall, errors={}, p50_ms=None, p99_ms=None,
                server_cpu_s=server_cpu, cpu_us_per_req=server_cpu / n * 1e6,
                handshakes_per_cpu_s=n / server_cpu if server_cpu else None,
                server_util=server_cpu / wall, gen_cpu=res["cpu_s"] / wall,
                client_bound=res["cpu_s"] / wall >= 0.9,
                other_cpu0=max(0.0, (b1[0] - b0[0]) / CLK_TCK - server_cpu) / wall,
                steal_cpu0=(b1[1] - b0[1]) / CLK_TCK / wall,
                rss_mib=sampler.rss / 2**20, pss_mib=sampler.pss / 2**20,
                h2load_negotiated=res["negotiated"], status_by_probe=res["status_by_probe"])
            check_workload(wl, srv.port, True)
            row["ok"] = True
        except Exception as exc:  # noqa: BLE001
            row["error"] = describe(exc)
    return with_log_tail(row, srv)


def idle_tls_memory(name, n, outdir, tag, wl="raw_get"):
    """Memory per idle connection: the server's RSS (summed over its processes) after one warm
    connection, then after `n` more connections each with its handshake done (over TLS when the
    server is a TLS server) and one exact request answered, left open and idle; (RSS after -
    before) / n. Every connection is checked to be still open after the reading (a server whose
    keep-alive timeout closed some fails the run, named); the servers whose default keep-alive
    timeout is 5 s run with it raised (peers.IDLE_KEEPALIVE)."""
    tls = SERVERS[name].tls
    out = {"server": name, "n": n, "ok": False, "error": None}
    spec = WORKLOADS[wl]
    with Server(name, spec["app"], Path(outdir) / "logs", tag,
                extra=IDLE_KEEPALIVE.get(name, ())) as srv:
        conns = []
        try:
            srv.wait_ready(lambda port: check_workload(wl, port, tls))
            warm = Conn(srv.port, tls=tls)
            conns.append(warm)
            req = warm.request_bytes(spec["method"], spec["path"], spec["body"])
            warm.sock.sendall(req)
            warm.read_response()
            time.sleep(0.3)
            pids = srv.pids()
            rss0, _ = memory(pids)
            t0 = time.perf_counter()
            for _ in range(n):
                c = Conn(srv.port, tls=tls)
                conns.append(c)
                c.sock.sendall(req)
                status, _, body = c.read_response()
                if status != 200 or body != spec["expect"]:
                    raise AssertionError(f"status {status} body {body[:60]!r}")
            opened = time.perf_counter() - t0
            time.sleep(0.5)
            rss1, _ = memory(pids)
            closed = 0
            for c in conns:  # still open: nothing to read and no EOF
                c.sock.setblocking(False)
                try:
                    if c.sock.recv(1) == b"":
                        closed += 1
                except (BlockingIOError, ssl.SSLWantReadError):
                    pass
                except OSError:
                    closed += 1
            if closed:
                raise RuntimeError(f"{closed} of {n + 1} idle connections were closed by the "
                                   f"server within {opened + 0.5:.1f} s")
            out.update(ok=True, rss_before_mib=rss0 / 2**20, rss_after_mib=rss1 / 2**20,
                       kib_per_conn=(rss1 - rss0) / n / 1024, open_s=opened, tls=tls)
        except Exception as exc:  # noqa: BLE001
            out["error"] = describe(exc)
        finally:
            for c in conns:
                try:
                    c.close()
                except OSError:
                    pass
    return out


# ----------------------------------------------------------------------------------------------
# The app's own CPU per request


def app_cpu(workloads, n):
    """The apps' own CPU per request, called directly (no network), pinned to the server CPU."""
    out = {}
    for wl in workloads:
        argv = ["taskset", "-c", SERVER_CPU, venv_python(SKIRR_VENV), str(RUN_PY), "app-cpu",
                "--workload", wl, "--n", str(n)]
        p = subprocess.run(argv, capture_output=True, text=True)
        try:
            out[wl] = json.loads(p.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            out[wl] = {"error": (p.stdout + p.stderr)[-800:]}
    return out


def app_cpu_child(wl, n):
    """The `run.py app-cpu` side: prints {"us_per_req": median, "samples": [5 samples]} of the
    process CPU per call of the workload's app, after a warm-up, on uvloop."""
    import asyncio
    import uvloop
    run = direct_caller(wl)

    async def main():
        await run(max(100, n // 10))  # warm-up
        got = []
        for _ in range(5):
            t0 = time.process_time()
            await run(n)
            got.append((time.process_time() - t0) / n * 1e6)
        return got

    samples = uvloop.run(main()) if hasattr(uvloop, "run") else asyncio.run(main())
    print(json.dumps({"us_per_req": statistics.median(samples), "samples": samples}))


# ----------------------------------------------------------------------------------------------
# The HTTP/2 rows' own runs (issue 33): h2load, one thread on the client CPU, over h2c (prior
# knowledge) or h2 over TLS (ALPN h2 only)

H2LOAD_MAIN_START = "Main benchmark duration is started"
H2LOAD_MAIN_END = "Main benchmark duration is over"
H2LOAD_REQUESTS = re.compile(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                             r"(\d+) failed, (\d+) errored, (\d+) timeout")
H2LOAD_STATUS = re.compile(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx")
H2LOAD_FINISHED = re.compile(r"finished in [\d.]+[mun]?s, ([\d.]+) req/s")
H2LOAD_REQ_TIME = re.compile(r"time for request:\s+(\S+)\s+(\S+)\s+(\S+)")
H2LOAD_DATA = re.compile(r"^traffic: .*\((\d+)\) data", re.M)


def h2_url(wl, port, tls):
    return f"{'https' if tls else 'http'}://127.0.0.1:{port}{WORKLOADS[wl]['path']}"


def check_h2(wl, port, tls):
    """Exact status and body of workload `wl` over HTTP/2 with curl (its nghttp2): h2c with
    prior knowledge, or TLS with ALPN h2 and the run's certificate verified; curl must report
    HTTP version 2 (a server that answers HTTP/1.1 fails the check). AssertionError otherwise;
    ConnectionRefusedError while nothing listens (readiness)."""
    spec = WORKLOADS[wl]
    with tempfile.TemporaryDirectory(prefix="bench-h2check-") as d:
        out = Path(d) / "body"
        argv = ["curl", "-sS", "--max-time", "10", "-o", str(out), "-w",
                "%{http_version} %{response_code}", "-X", spec["method"]]
        if spec["body"]:
            argv += ["--data-binary", "@-"]
        argv += (["--http2", "--cacert", tls_files()[1]] if tls else ["--http2-prior-knowledge"])
        p = subprocess.run(argv + [h2_url(wl, port, tls)], input=spec["body"] or b"",
                           capture_output=True, timeout=20)
        said = p.stdout.decode(errors="replace").strip()
        if p.returncode == 7:  # couldn't connect
            raise ConnectionRefusedError(p.stderr.decode(errors="replace").strip())
        body = out.read_bytes() if out.exists() else b""
    if p.returncode != 0 or said != "2 200" or body != spec["expect"]:
        raise AssertionError(f"{wl} over {'h2 (TLS)' if tls else 'h2c'}: curl exit "
                             f"{p.returncode}, HTTP version and status {said!r}, body "
                             f"{len(body)} bytes {body[:60]!r} (expected 2 200 and "
                             f"{len(spec['expect'])} bytes) {p.stderr.decode(errors='replace')[:300]}")


def parse_h2load(text, want_proto):
    """h2load's summary: {"requests", "rps", "failed", "errored", "timeout", "non2xx",
    "protocol", "mean_ms", "max_ms", "negotiated"}; RuntimeError when it lacks the summary, spoke
    another protocol than `want_proto` ("h2c" or "h2"), or any request failed, errored, timed out
    or had a status other than 2xx."""
    m, st, fin = H2LOAD_REQUESTS.search(text), H2LOAD_STATUS.search(text), H2LOAD_FINISHED.search(text)
    if not (m and st and fin):
        raise RuntimeError(f"h2load printed no summary: {text[-600:]}")
    proto = dict(H2LOAD_TLS.findall(text)).get("Application protocol")
    if proto != want_proto:
        raise RuntimeError(f"h2load spoke {proto!r}, not {want_proto}: {text[-400:]}")
    done, ok, failed, errored, timeout = (int(m.group(i)) for i in (3, 4, 5, 6, 7))
    non2xx = sum(int(st.group(i)) for i in (2, 3, 4))
    if failed or errored or timeout or non2xx or not ok:
        raise RuntimeError(f"h2load: {m.group(0)}; {st.group(0)}")

    def ms(v):
        for unit, div in (("us", 1000.0), ("ms", 1.0), ("s", 0.001)):
            if v.endswith(unit):
                return float(v[:-len(unit)]) / div
        return None
    t = H2LOAD_REQ_TIME.search(text)
    return {"requests": ok, "done": done, "rps": float(fin.group(1)), "failed": failed,
            "errored": errored, "timeout": timeout, "non2xx": non2xx, "protocol": proto,
            "max_ms": ms(t.group(2)) if t else None, "mean_ms": ms(t.group(3)) if t else None,
            "negotiated": dict(H2LOAD_TLS.findall(text))}


def run_h2load_streams(url, conns, streams, warmup, duration, tls, on_start, on_end):
    """h2load -t1 on the client CPU: `conns` connections, `streams` concurrent streams on each
    (-m), `warmup` seconds of warm-up then `duration` measured (-D); h2c with prior knowledge for
    http://, ALPN h2 only for https:// (a server that does not choose h2 fails the run).
    on_start() and on_end() are called when h2load prints that its measured interval starts and
    ends (its output is read as it comes), so the caller reads the server's CPU over exactly that
    interval. Returns parse_h2load()'s figures with h2load's own CPU seconds and wall time."""
    argv = ["taskset", "-c", CLIENT_CPU, "h2load", "-t1", f"-c{conns}", f"-m{streams}",
            f"-D{duration}", f"--warm-up-time={warmup}"]
    if tls:
        argv.append("--npn-list=h2")
    p = subprocess.Popen(argv + [url], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    timer = threading.Timer(warmup + duration + 60, p.kill)
    timer.start()
    lines, marks = [], []
    t0 = time.perf_counter()
    try:
        for raw in p.stdout:
            line = raw.decode(errors="replace")
            if line.startswith(H2LOAD_MAIN_START) and not marks:
                marks.append(on_start())
            elif line.startswith(H2LOAD_MAIN_END) and len(marks) == 1:
                marks.append(on_end())
            lines.append(line)
        _, status, ru = os.wait4(p.pid, 0)
    finally:
        timer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    text = "".join(lines)
    if p.returncode != 0:
        raise RuntimeError(f"h2load failed ({p.returncode}): {text[-600:]}")
    if len(marks) != 2:
        raise RuntimeError(f"h2load never marked its measured interval: {text[-600:]}")
    res = parse_h2load(text, "h2" if tls else "h2c")
    res.update(cpu_s=ru.ru_utime + ru.ru_stime, wall_s=wall, marks=marks)
    return res


def check_h2_concurrent(wl, port, tls, conns, streams, per_stream=2):
    """Exact answers under the run's concurrency: h2load -n over `conns` connections of
    `streams` concurrent streams (`per_stream` requests per stream slot), every request
    succeeded with a 2xx and the DATA h2load received exactly n × the workload's body length (a
    response cut short or padded fails; curl's check sees one request alone). RuntimeError
    otherwise."""
    n = conns * streams * per_stream
    argv = ["taskset", "-c", CLIENT_CPU, "h2load", "-t1", f"-c{conns}", f"-m{streams}", f"-n{n}"]
    if tls:
        argv.append("--npn-list=h2")
    p = subprocess.run(argv + [h2_url(wl, port, tls)], capture_output=True, timeout=120)
    text = p.stdout.decode(errors="replace")
    if p.returncode != 0:
        raise RuntimeError(f"h2load -n{n} failed ({p.returncode}): {text[-400:]}")
    res = parse_h2load(text, "h2" if tls else "h2c")
    data = H2LOAD_DATA.search(text)
    want = n * len(WORKLOADS[wl]["expect"])
    if res["requests"] != n or not data or int(data.group(1)) != want:
        raise RuntimeError(f"h2load -n{n}: {res['requests']} succeeded, "
                           f"{data.group(1) if data else '?'} bytes of DATA, expected {n} and "
                           f"{want}")


def h2_start_check(name, wl, outdir, tag):
    """None when server `name` starts and answers workload `wl` exactly (over HTTP/2 for an
    HTTP/2 server, checked with curl; over HTTP/1.1, and TLS for a TLS server, for the HTTP/1.1
    baselines), else the reason it does not."""
    peer = SERVERS[name]
    try:
        with Server(name, WORKLOADS[wl]["app"], Path(outdir) / "logs", tag) as srv:
            if peer.h2:
                srv.wait_ready(lambda port: check_h2(wl, port, peer.tls))
            else:
                srv.wait_ready(lambda port: check_workload(wl, port, peer.tls))
    except Exception as exc:  # noqa: BLE001
        return describe(exc, 800)
    return None


def measure_h2_row(name, wl, conns, streams, cfg, outdir, tag):
    """One measured run of HTTP/2 server `name` on workload `wl`: h2load with `conns`
    connections and `streams` concurrent streams each, cfg["warmup"] s of warm-up then
    cfg["duration"] s measured, the server on the server CPU and h2load on the client CPU. CPU per
    request = the server's utime+stime between h2load's marks of its measured interval ÷ the
    requests h2load counts in it (succeeded; any failed, errored, timed-out or non-2xx request
    fails the run). Status and exact body checked over HTTP/2 with curl before and after, and
    after the run every answer's length under the same concurrency (check_h2_concurrent)."""
    tls = SERVERS[name].tls
    row = {"server": name, "workload": wl, "conns": conns, "streams": streams,
           "proto": SERVERS[name].h2, "ok": False, "error": None}
    with Server(name, WORKLOADS[wl]["app"], Path(outdir) / "logs", tag) as srv:
        try:
            srv.wait_ready(lambda port: check_h2(wl, port, tls))
            row["pinned"] = affinity_ok(srv.pids())
            pids = srv.pids()
            sampler = Sampler(pids)
            sampler.sample()
            sampler.start()
            row["loadavg"] = Path("/proc/loadavg").read_text().split()[0]

            def mark():
                return cpu0_busy(), proc_ticks(pids), time.perf_counter()
            try:
                res = run_h2load_streams(h2_url(wl, srv.port, tls), conns, streams,
                                         cfg["warmup"], cfg["duration"], tls, mark, mark)
            finally:
                sampler.stop()
            (b0, p0, t0), (b1, p1, t1) = res.pop("marks")
            if sorted(srv.pids()) != sorted(pids):
                raise RuntimeError(f"the server's processes changed during the run: {sorted(pids)} "
                                   f"-> {sorted(srv.pids())}")
            wall = t1 - t0
            server_cpu = sum(p1[p] - p0[p] for p in pids) / CLK_TCK
            n = res["requests"]
            row.update(
                requests=n, rps=res["rps"], p50_ms=None, p99_ms=None, mean_ms=res["mean_ms"],
                max_ms=res["max_ms"],
                errors={k: res[k] for k in ("failed", "errored", "timeout", "non2xx")},
                server_cpu_s=server_cpu, cpu_us_per_req=server_cpu / n * 1e6,
                server_util=server_cpu / wall,
                # h2load's CPU over its whole run (warm-up included) ÷ its wall time
                gen_cpu=res["cpu_s"] / res["wall_s"],
                client_bound=res["cpu_s"] / res["wall_s"] >= 0.9,
                other_cpu0=max(0.0, (b1[0] - b0[0]) / CLK_TCK - server_cpu) / wall,
                steal_cpu0=(b1[1] - b0[1]) / CLK_TCK / wall,
                rss_mib=sampler.rss / 2**20, pss_mib=sampler.pss / 2**20,
                negotiated=res["negotiated"])
            check_h2(wl, srv.port, tls)
            check_h2_concurrent(wl, srv.port, tls, conns, streams)
            row["ok"] = True
        except Exception as exc:  # noqa: BLE001
            row["error"] = describe(exc)
    return with_log_tail(row, srv)
