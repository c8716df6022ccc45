"""file_1m under both TCP window regimes (issue 17's diagnosis; not part of the matrix).

Over loopback, where the kernel pushes a 1 MiB response depends on the client's receive window.
While the window is open, the server's sendfile() transmits every segment itself and runs the
receiver's TCP input in its own softirq. While the window is small, sendfile() only queues the
bytes, and the client's ACKs push them later from the softirq of the client's CPU, counted as
neither the server's CPU nor CPU 0's. wrk's windows stay small against nginx and grow against
skirr, so the matrix's server CPU per request compares two regimes.

This script fixes the regime. It runs in a private network namespace (its own loopback and
net.ipv4.tcp_rmem, the machine's untouched; needs root for `unshare -n`) and serves file_1m from
nginx (the matrix's config), nginx-nopush (the same plus `tcp_nopush on`: its head leaves with the
file's first segment, as skirr's does with MSG_MORE) and three skirr apps:
    skirr            file_apps:app            Starlette's FileResponse (the workload)
    skirr-stat       file_apps:stat_inline    FileResponse given its stat result: no thread hop
    skirr-raw        file_apps:pathsend_only  the same head and one pathsend: skirr + kernel only
Each round runs every server once, in random order: wrk -t1 -c64 for --duration seconds. A
server is pinned to CPU 0 and wrk to CPU 1, as in the matrix. Per request it prints the server's
utime+stime, the softirq time of CPU 0 and of CPU 1 (/proc/stat), and wrk's CPU (all in µs).
Then medians, and each server's ratio to nginx within a round.

    sudo .venv/bin/python bench/file_1m_regimes.py --rmem "4096 131072 33554432"   # the default
    sudo .venv/bin/python bench/file_1m_regimes.py --rmem "4096 8388608 33554432"  # open windows
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from harness.peers import nginx_argv  # noqa: E402
from harness.workloads import FILE_1M, Conn  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")
SKIRR_APPS = {"skirr": "file_apps:app", "skirr-stat": "file_apps:stat_inline",
              "skirr-raw": "file_apps:pathsend_only"}


def tree_cpu(pid):
    """utime+stime (ticks) of a process and its children, every thread."""
    pids = [pid] + [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    total = 0
    for p in pids:
        for task in Path(f"/proc/{p}/task").iterdir():
            f = task.joinpath("stat").read_text().rsplit(")", 1)[1].split()
            total += int(f[11]) + int(f[12])
    return total


def softirq():
    """softirq ticks of CPU 0 and CPU 1."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        f = line.split()
        if f[0] in ("cpu0", "cpu1"):
            out[f[0]] = int(f[7])
    return out["cpu0"], out["cpu1"]


def wait_ready(port):
    for _ in range(100):
        try:
            c = Conn(port)
            c.sock.sendall(b"GET /file_1m HTTP/1.1\r\nHost: x\r\n\r\n")
            status, _, body = c.read_response()
            c.close()
            if status != 200 or body != FILE_1M:
                sys.exit(f"port {port}: {status}, wrong body")
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"port {port}: no answer")


def one_run(pid, port, duration):
    c0, (s0, t0), k0 = tree_cpu(pid), softirq(), os.times()
    w = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c64", f"-d{duration}s",
                        f"http://127.0.0.1:{port}/file_1m"], capture_output=True, text=True)
    c1, (s1, t1), k1 = tree_cpu(pid), softirq(), os.times()
    n = int(next(line.split()[0] for line in w.stdout.splitlines() if "requests in" in line))
    if "Socket errors" in w.stdout or "Non-2xx" in w.stdout:
        sys.exit(f"port {port}: wrk reported errors:\n{w.stdout}")
    us = 1e6 / CLK / n
    return dict(rps=n / duration, server=(c1 - c0) * us, sirq0=(s1 - s0) * us,
                sirq1=(t1 - t0) * us,
                wrk=(k1.children_user - k0.children_user + k1.children_system - k0.children_system)
                * 1e6 / n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rmem", default="4096 131072 33554432",
                    help="net.ipv4.tcp_rmem inside the namespace (min default max, bytes)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=int, default=4, help="seconds per run")
    ap.add_argument("--in-netns", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if not a.in_netns:
        if shutil.which("unshare") is None or os.geteuid() != 0:
            sys.exit("file_1m_regimes: needs root and unshare(1) for a private network namespace")
        os.execvp("unshare", ["unshare", "-n", sys.executable, __file__, "--in-netns",
                              "--rmem", a.rmem, "--rounds", str(a.rounds),
                              "--duration", str(a.duration)])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    Path("/proc/sys/net/ipv4/tcp_rmem").write_text(a.rmem)
    print("tcp_rmem in the namespace:", Path("/proc/sys/net/ipv4/tcp_rmem").read_text().strip())
    tmp = tempfile.mkdtemp(prefix="file1m-regimes-")
    procs, ports = {}, {}
    try:
        ports["nginx"] = 18950
        procs["nginx"] = subprocess.Popen(["taskset", "-c", "0"] + nginx_argv("", 18950, tmp))
        # the same with `tcp_nopush on` (TCP_CORK): the head leaves with the file's first segment,
        # as skirr's MSG_MORE head does
        cork = Path(tmp, "nopush")
        cork.mkdir()
        argv = nginx_argv("", 18949, cork)
        conf = cork / "nginx.conf"
        conf.write_text(conf.read_text().replace("sendfile on;", "sendfile on; tcp_nopush on;"))
        ports["nginx-nopush"] = 18949
        procs["nginx-nopush"] = subprocess.Popen(["taskset", "-c", "0"] + argv)
        for i, (name, app) in enumerate(SKIRR_APPS.items()):
            ports[name] = 18951 + i
            procs[name] = subprocess.Popen(
                ["taskset", "-c", "0", sys.executable, "-m", "skirr", app, "--app-dir",
                 str(ROOT / "bench" / "apps"), "--loop", "uvloop", "--lifespan", "off",
                 "--no-access-log", "--log-level", "warning", "--host", "127.0.0.1", "--port",
                 str(ports[name])])
        for name in procs:
            wait_ready(ports[name])
        rows = {name: [] for name in procs}
        for r in range(a.rounds):
            for name in random.sample(list(procs), len(procs)):
                got = one_run(procs[name].pid, ports[name], a.duration)
                rows[name].append(got)
                print(f"round {r + 1} {name:10} " + " ".join(
                    f"{k}={v:.0f}" for k, v in got.items()), flush=True)
        print("\nmedians (µs per request; rps in requests/s); ratio = server CPU ÷ nginx's, "
              "per round")
        print(f"{'server':10} {'rps':>6} {'server':>7} {'sirq0':>6} {'sirq1':>6} {'wrk':>6} "
              f"{'ratio median (min-max)':>24}")
        for name, runs in rows.items():
            med = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
            ratios = [x["server"] / n["server"] for x, n in zip(runs, rows["nginx"])]
            print(f"{name:10} {med['rps']:6.0f} {med['server']:7.0f} {med['sirq0']:6.0f} "
                  f"{med['sirq1']:6.0f} {med['wrk']:6.0f} {statistics.median(ratios):10.2f} "
                  f"({min(ratios):.2f}-{max(ratios):.2f})")
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
