"""Where an idle WebSocket's memory goes, and what stays once it closed (issue 37; bench/LEVERS.md,
"Idle WebSocket memory (stop 56)").

skirr serves bench/apps/ws_apps.py:echo in this process (pings off, as the scale rows run it);
bench/build/scale_client (make it with `bench/run.py scale` once, or bench/harness/peers.py
build_scale_client) opens N WebSockets, holds them, and closes them, CYCLES times. At each phase
one line: VmRSS, the interpreter's allocator (arenas of 1 MiB and bytes in allocated blocks, from
sys._debugmallocstats), sys.getallocatedblocks(), skirr._native._live() and open descriptors;
after each close also after gc.collect() and after malloc_trim(0), which tell objects still
alive (a leak) from freed memory an allocator keeps (retention). With --trace, tracemalloc: the
growth per connection while held, and the blocks made during the first cycle still alive after
its close, counted by size (a bounded cache or free list shows as a few hundred blocks of one
size, whatever N is).

    .venv/bin/python bench/ws_memory_cycles.py -n 10000 --cycles 3
    .venv/bin/python bench/ws_memory_cycles.py -n 3000 --cycles 1 --trace --loop asyncio
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import ctypes
import gc
import os
import re
import sys
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLIENT = HERE / "build" / "scale_client"
SETTLE_S = 1.5  # seconds after the last answer / the last close before reading memory
sys.path.insert(0, str(HERE / "apps"))


def vm_rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def pymalloc_stats() -> tuple[int, int]:
    """(arenas allocated now, bytes in allocated blocks) of the interpreter's small-object
    allocator; (-1, -1) when its statistics are not printed (tracemalloc or another allocator)."""
    r, w = os.pipe()
    saved = os.dup(2)
    os.dup2(w, 2)  # sys._debugmallocstats() writes to the C stderr
    try:
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(w)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    text = b"".join(chunks).decode(errors="replace")
    arenas = re.search(r"# arenas allocated current\s*=\s*([\d,]+)", text)
    blocks = re.search(r"# bytes in allocated blocks\s*=\s*([\d,]+)", text)
    if arenas is None or blocks is None:
        return -1, -1
    return int(arenas.group(1).replace(",", "")), int(blocks.group(1).replace(",", ""))


def report(tag: str) -> None:
    from skirr import _native

    arenas, blocks = pymalloc_stats()
    print(f"{tag:18s} RSS {vm_rss_mib():6.1f} MiB  arenas {arenas:3d}  in blocks "
          f"{blocks / 1e6:7.3f} MB  allocated blocks {sys.getallocatedblocks():7d}  "
          f"live {_native._live()}  fds {len(os.listdir('/proc/self/fd'))}", flush=True)


async def hold_and_close(port: int, n: int, on_held) -> None:
    """scale_client's n WebSockets on port: opened, on_held() once all answered, closed."""
    p = await asyncio.create_subprocess_exec(
        str(CLIENT), str(port), "-n", str(n), "-m", "ws", "-p", "/",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert p.stdin is not None and p.stdout is not None
    line = await p.stdout.readline()
    if not line.startswith(b"SCALE "):
        raise RuntimeError(f"scale_client: {line!r}")
    await asyncio.sleep(SETTLE_S)
    on_held()
    p.stdin.write(b"close\n")
    await p.stdin.drain()
    await p.stdout.readline()
    p.stdin.close()
    await p.wait()


async def main(args: argparse.Namespace) -> None:
    import ws_apps

    import skirr

    libc = ctypes.CDLL(None)
    server = skirr.Server(skirr.Config(
        app=ws_apps.echo, host="127.0.0.1", port=0, ws_ping_interval=0, timeout_keep_alive=3600,
        lifespan="off", log_level="warning", access_log=False))
    serving = asyncio.ensure_future(server.serve())
    while server.port is None:
        await asyncio.sleep(0.05)
    fd0 = len(os.listdir("/proc/self/fd"))
    await hold_and_close(server.port, 1, lambda: None)  # warm-up: one connection
    await asyncio.sleep(SETTLE_S)
    gc.collect()
    report("before")
    start = tracemalloc.take_snapshot() if args.trace else None
    held: list[tracemalloc.Snapshot] = []
    for cycle in range(args.cycles):
        def on_held(cycle: int = cycle) -> None:
            report(f"{cycle}: held")
            if start is not None and not held:
                held.append(tracemalloc.take_snapshot())

        await hold_and_close(server.port, args.n, on_held)
        for _ in range(600):
            if len(os.listdir("/proc/self/fd")) <= fd0:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(SETTLE_S)
        report(f"{cycle}: after")
        gc.collect()
        report(f"{cycle}: after gc")
        libc.malloc_trim(0)
        report(f"{cycle}: after trim")
        if start is not None and cycle == 0:
            after = tracemalloc.take_snapshot()
            growth = held[0].compare_to(start, "lineno")
            print(f"traced growth while held: {sum(s.size_diff for s in growth) / args.n:.0f} "
                  f"B per connection")
            before_sizes = collections.Counter(t.size for t in start.traces)
            after_sizes = collections.Counter(t.size for t in after.traces)
            kept = sorted(((after_sizes[s] - before_sizes[s], s) for s in after_sizes
                           if after_sizes[s] - before_sizes[s] > 15), reverse=True)
            print("blocks alive after the close that were not before (count, size in bytes):",
                  kept[:12])
            for stat in after.compare_to(start, "lineno")[:6]:
                print(f"  {stat.size_diff:9d} B {stat.count_diff:6d} blocks  {stat.traceback}")
    server.request_shutdown()
    await serving


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=10000, help="WebSockets per cycle")
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    ap.add_argument("--trace", action="store_true", help="tracemalloc (slower; no arena counts)")
    args = ap.parse_args()
    if not CLIENT.exists():
        sys.exit(f"{CLIENT} is missing: run bench/run.py scale once (it builds the client)")
    if args.trace:
        tracemalloc.start(1)
    if args.loop == "uvloop":
        import uvloop

        uvloop.install()
    asyncio.run(main(args))
