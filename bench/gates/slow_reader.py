"""Gate: slow-reader memory (issue 5 item 6; the scenario of shared/seeds/002).

Four clients each GET /slow-reader: a 64 MiB response made of 1,024 freshly allocated 64 KiB
events (bench/gates/gate_app.py), read in 16 KiB recv() calls 1 ms apart. Every response's status,
length and SHA-256 are checked. The server's resident memory is sampled every 5 ms from
/proc/<pid>/status (VmRSS) and its VmHWM read at the end; the peak is the larger of the two.

PASS when, for skirr on each loop, every response is intact and peak RSS <= idle RSS + 48 MiB
(idle = VmRSS after one warm-up request). uvicorn (httptools + the same loop) serves the same app
beside it and its figures are reported, not gated. Exit status 1 on any FAIL.

    .venv/bin/python bench/gates/slow_reader.py [--loops uvloop,asyncio] [--no-uvicorn]
"""
from __future__ import annotations

import argparse
import hashlib
import socket
import sys
import threading
import time

from _gate import MIB, ServerProcess, Sampler, ensure_uvicorn, free_port, mib, skirr_cmd, uvicorn_cmd
from gate_app import EVENT_SIZE, EVENTS, event_bytes

CLIENTS = 4
READ_SIZE = 16 * 1024
READ_GAP = 0.001  # seconds between reads
BUDGET = 48 * MIB  # peak RSS allowed above idle


def expected_digest() -> str:
    h = hashlib.sha256()
    for i in range(EVENTS):
        h.update(event_bytes(i))
    return h.hexdigest()


def slow_client(port: int, results: list, index: int) -> None:
    """GET /slow-reader, reading 16 KiB every 1 ms; stores (status, length, sha256, error)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"GET /slow-reader HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = s.recv(READ_SIZE)
                if not chunk:
                    raise ConnectionError(f"closed inside the head: {head!r}")
                head += chunk
                time.sleep(READ_GAP)
            head, _, body_start = head.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            status = int(lines[0].split()[1])
            fields = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(b":") for ln in lines[1:])}
            length = int(fields.get(b"content-length", b"-1"))
            h = hashlib.sha256(body_start)
            got = len(body_start)
            while True:
                chunk = s.recv(READ_SIZE)
                if not chunk:
                    break
                h.update(chunk)
                got += len(chunk)
                time.sleep(READ_GAP)
            results[index] = (status, length, got, h.hexdigest(), None)
    except Exception as e:  # reported as a failed response
        results[index] = (None, None, None, None, repr(e))


def run_one(name: str, cmd_for_port, digest: str) -> dict:
    port = free_port()
    server = ServerProcess(cmd_for_port(port), port, name)
    try:
        time.sleep(0.5)
        idle, idle_hwm = server.rss(), server.hwm()
        results: list = [None] * CLIENTS
        threads = [threading.Thread(target=slow_client, args=(port, results, i)) for i in range(CLIENTS)]
        t0 = time.monotonic()
        with Sampler(server) as sampler:
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)
        elapsed = time.monotonic() - t0
        peak = max(sampler.peak, server.hwm())
        total = EVENTS * EVENT_SIZE
        intact = all(r is not None and r[:4] == (200, total, total, digest) for r in results)
        return {"name": name, "idle": idle, "idle_hwm": idle_hwm, "peak": peak,
                "sampled": sampler.peak, "elapsed": elapsed, "intact": intact, "results": results}
    finally:
        server.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loops", default="uvloop,asyncio")
    ap.add_argument("--no-uvicorn", action="store_true")
    args = ap.parse_args()
    digest = expected_digest()
    loops = [x for x in args.loops.split(",") if x]
    have_uvicorn = not args.no_uvicorn and ensure_uvicorn()
    failed = False
    print(f"slow-reader gate: {CLIENTS} clients x {mib(EVENTS * EVENT_SIZE)} "
          f"({EVENTS} x {EVENT_SIZE // 1024} KiB events), {READ_SIZE // 1024} KiB reads "
          f"{READ_GAP * 1000:g} ms apart; budget idle + {mib(BUDGET)}")
    for loop in loops:
        runs = [run_one(f"skirr/{loop}", lambda p: skirr_cmd(p, loop), digest)]
        if have_uvicorn:
            runs.append(run_one(f"uvicorn/{loop}", lambda p: uvicorn_cmd(p, loop), digest))
        for r in runs:
            over = r["peak"] - r["idle"]
            gated = r["name"].startswith("skirr/")
            ok = r["intact"] and over <= BUDGET
            verdict = ("PASS" if ok else "FAIL") if gated else "info"
            if gated and not ok:
                failed = True
            print(f"  {verdict:4}  {r['name']:15} idle {mib(r['idle'])}, peak {mib(r['peak'])} "
                  f"(+{mib(over)}; sampled VmRSS max {mib(r['sampled'])}, VmHWM at idle "
                  f"{mib(r['idle_hwm'])}), responses {'intact' if r['intact'] else 'BAD'}, "
                  f"{r['elapsed']:.1f} s")
            if not r["intact"]:
                for res in r["results"]:
                    print(f"        {res!r:.200}")
    if not have_uvicorn and not args.no_uvicorn:
        print("  info  uvicorn not available (pip install uvicorn[standard] failed): not compared")
    print("slow-reader gate:", "FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
