"""CPU per request of one server with the access log off and on (issue 13).

    python bench/access/measure.py [--rounds 3] [--duration 5] [--uvicorn PYTHON]

Each variant: the server pinned to CPU 0 (taskset -c 0), stderr to a file in a temp directory,
`wrk -t1 -c64 -d<duration>s` pinned to CPU 1 against bench/apps/raw_apps.py:raw (raw_get).
CPU per request = (the server's utime + stime during the run, from /proc/PID/stat) / requests
wrk completed. Variants alternate within each round; the median over rounds is reported.
Variants: skirr --no-access-log; skirr with its access log on (default line, to the file);
with --uvicorn PYTHON, uvicorn --no-access-log and uvicorn with its access log (same app).
"""
from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ROOT / "bench" / "apps"
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def wait_ready(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if s.recv(100).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("server did not start")


def run(argv: list[str], duration: int, logdir: str, name: str) -> tuple[float, int, int]:
    port = free_port()
    log = open(os.path.join(logdir, f"{name}.log"), "w")
    proc = subprocess.Popen(["taskset", "-c", "0", *argv, "--port", str(port)],
                            stdout=log, stderr=log, cwd=APPS)
    try:
        wait_ready(port)
        before = cpu_seconds(proc.pid)
        out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c64", f"-d{duration}s",
                              f"http://127.0.0.1:{port}/"], capture_output=True, text=True,
                             timeout=duration + 30).stdout
        cpu = cpu_seconds(proc.pid) - before
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
    m = re.search(r"(\d+) requests in", out)
    if not m or "Non-2xx" in out or "Socket errors" in out:
        raise SystemExit(f"{name}: bad wrk run:\n{out}")
    reqs = int(m[1])
    lines = sum(1 for x in open(os.path.join(logdir, f"{name}.log")) if '"GET / HTTP/1.1" 200' in x)
    return cpu / reqs * 1e6, reqs, lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--uvicorn", help="a python with uvicorn installed")
    ap.add_argument("--logger-off", action="store_true",
                    help="also skirr with the access log on but skirr.access below INFO")
    args = ap.parse_args()
    py = sys.executable
    common = ["raw_apps:raw", "--loop", "uvloop", "--lifespan", "off", "--host", "127.0.0.1"]
    variants = {
        "skirr off": [py, "-m", "skirr", *common, "--no-access-log"],
        "skirr on": [py, "-m", "skirr", *common],
    }
    if args.logger_off:
        variants["skirr on, logger off"] = [py, "-m", "skirr", *common, "--log-level", "warning"]
    if args.uvicorn:
        variants["uvicorn off"] = [args.uvicorn, "-m", "uvicorn", *common, "--no-access-log"]
        variants["uvicorn on"] = [args.uvicorn, "-m", "uvicorn", *common]
    results: dict[str, list[float]] = {k: [] for k in variants}
    with tempfile.TemporaryDirectory() as logdir:
        for rnd in range(args.rounds):
            for name, argv in variants.items():
                us, reqs, lines = run(argv, args.duration, logdir, name.replace(" ", "_"))
                results[name].append(us)
                print(f"round {rnd + 1} {name:22} {us:7.2f} us CPU/request  {reqs} requests  "
                      f"{lines} access lines", flush=True)
    med = {k: statistics.median(v) for k, v in results.items()}
    print("\nmedian CPU per request:")
    for k, v in med.items():
        print(f"  {k:22} {v:7.2f} us")
    print(f"  skirr on / off: {med['skirr on'] / med['skirr off']:.2f}x")
    if args.uvicorn:
        print(f"  uvicorn on / off: {med['uvicorn on'] / med['uvicorn off']:.2f}x")


if __name__ == "__main__":
    main()
