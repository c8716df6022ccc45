"""Gate: slow writers, slow uploaders and stalled readers (issue 5 item 7, issue 11 item 11),
against skirr as a subprocess started with short timeouts (--timeout-request-head 2
--timeout-request-body 2 --timeout-write 2).

1. slow writers: 200 connections each send half a request head and stop. PASS when every one
   gets ``408`` and EOF within head timeout + 1 s tick + 1.5 s slack of its last byte.
   slow uploaders: 200 connections each send a whole head announcing 100 body bytes, 10 of them,
   and stop, to an app waiting in receive(). PASS when every one gets ``408`` and EOF within
   body timeout + 1 s tick + 1.5 s slack of its last byte.
2. stalled readers: 200 connections (SO_RCVBUF 32 KiB) each GET /stream (64 KiB events without
   end) and never read. The kernel takes bytes until each socket's send buffer is full; from
   /proc/net/tcp the gate sees, per server socket, when its send queue last grew (the server's
   last write progress) and when it left ESTABLISHED. PASS when all 200 got a 200 head and each
   was closed by the server (the clients hold theirs open) within write timeout + 1 s tick +
   1.5 s slack of its last progress, and the descriptor count is back to idle.
3. after each round of both: PASS when the server's open descriptors (/proc/<pid>/fd) equal the
   idle count exactly, skirr's live connections, requests and awaitables (skirr._native._live(),
   read through the app's /_live, which counts itself) equal their idle values exactly, the
   gc-tracked Python objects are at most 200 more than idle (none per connection), and,
   after the last of three rounds, RSS <= idle + 32 MiB. RSS does not fall back to idle: during
   the stall about 200 x 128 KiB (the unsent output and one event per connection) are live, and
   glibc keeps much of that freed memory for reuse (measured: +9..23 MiB after a round, not
   growing over rounds). A leak of one 64 KiB buffer per stalled connection would add 12.5 MiB
   a round, 37.5 MiB over three. The server logs no application error and exits 0.

Idle = after one warm-up request and 0.5 s. Runs on each loop; exit status 1 on any FAIL.

    .venv/bin/python bench/gates/slow_peers.py [--loops uvloop,asyncio] [--connections 200]
"""
from __future__ import annotations

import argparse
import selectors
import socket
import sys
import time

import json

from _gate import MIB, ServerProcess, free_port, get, mib, skirr_cmd

HEAD_TIMEOUT = 2.0
BODY_TIMEOUT = 2.0
WRITE_TIMEOUT = 2.0
TICK = 1.0
SLACK = 1.5
RSS_BOUND = 32 * MIB  # above idle, after the last round (allocator retention, see above)
ROUNDS = 3
GC_SLACK = 200  # gc-tracked objects over idle after a round (400 connections a round)


def connect_all(port: int, n: int, rcvbuf: int | None = None) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(10)
        s.connect(("127.0.0.1", port))
        socks.append(s)
    return socks


def live(server: ServerProcess) -> tuple[dict, int]:
    """skirr's live-object counts in the server, and the number of gc-tracked Python objects."""
    raw = get(server.port, "/_live")
    counts = json.loads(raw.partition(b"\r\n\r\n")[2])
    return counts, counts.pop("gc_objects")


def wait_until(cond, timeout: float, step: float = 0.02) -> float | None:
    """Seconds until cond() held, or None if it did not within timeout."""
    t0 = time.monotonic()
    while time.monotonic() - t0 <= timeout:
        if cond():
            return time.monotonic() - t0
        time.sleep(step)
    return None


def slow_writers(server: ServerProcess, n: int) -> tuple[bool, str]:
    return stall_then_408(server, n, b"GET /never HTTP/1.1\r\nHost: x\r\nUser-Ag", HEAD_TIMEOUT)


def slow_uploaders(server: ServerProcess, n: int) -> tuple[bool, str]:
    head = b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
    return stall_then_408(server, n, head + b"u" * 10, BODY_TIMEOUT)


def stall_then_408(server: ServerProcess, n: int, first: bytes, timeout: float
                   ) -> tuple[bool, str]:
    """n connections send ``first`` and stop: each must get 408 and EOF within the timeout plus a
    tick plus the slack."""
    socks = connect_all(server.port, n)
    for s in socks:
        s.sendall(first)
    t0 = time.monotonic()
    accepted = wait_until(lambda: server.fds() >= idle_fds + n, 5.0) is not None
    during = server.fds()
    sel = selectors.DefaultSelector()
    got = {}
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        got[s] = [b"", None]  # bytes, seconds until EOF
    limit = timeout + TICK + SLACK
    while any(v[1] is None for v in got.values()) and time.monotonic() - t0 < limit:
        for key, _ in sel.select(0.05):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except ConnectionResetError:
                data = b""
            if data:
                got[s][0] += data
            else:
                got[s][1] = time.monotonic() - t0
                sel.unregister(s)
    sel.close()
    for s in socks:
        s.close()
    closed = [v for v in got.values() if v[1] is not None]
    answered = [v for v in closed if v[0].startswith(b"HTTP/1.1 408 ")]
    slowest = max((v[1] for v in closed), default=float("nan"))
    ok = accepted and len(answered) == n
    return ok, (f"{len(answered)}/{n} got 408 and EOF (slowest {slowest:.2f} s, limit {limit:g} s);"
                f" fds during {during}")


def send_queues(port: int) -> dict[str, int]:
    """{client address: bytes queued in the kernel} for the server's established IPv4 sockets
    on ``port`` (/proc/net/tcp: local address, remote address, state 01, tx_queue)."""
    queues = {}
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                queues[fields[2]] = int(fields[4].split(":")[0], 16)
    return queues


def stalled_readers(server: ServerProcess, n: int) -> tuple[bool, str]:
    """Per server socket: when its kernel send queue last grew (the server's last write
    progress) and when it left ESTABLISHED (the server closed it)."""
    socks = connect_all(server.port, n, rcvbuf=32 * 1024)
    client_ports = {s.getsockname()[1] for s in socks}
    for s in socks:
        s.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    t0 = time.monotonic()
    limit = WRITE_TIMEOUT + TICK + SLACK
    queued: dict[str, int] = {}
    grew: dict[str, float] = {}
    closed: dict[str, float] = {}
    peak_fds = peak_rss = 0
    while time.monotonic() - t0 < 30 and len(closed) < n:
        now = time.monotonic()
        queues = {k: v for k, v in send_queues(server.port).items()
                  if int(k.rsplit(":", 1)[1], 16) in client_ports}
        for k, v in queues.items():
            if v > queued.get(k, -1):
                queued[k], grew[k] = v, now
        for k in queued:
            if k not in queues and k not in closed:
                closed[k] = now
        peak_fds = max(peak_fds, server.fds())
        peak_rss = max(peak_rss, server.rss())
        time.sleep(0.02)
    back = wait_until(lambda: server.fds() <= idle_fds, 3.0) is not None
    # The clients held their sockets open all along: the server closed them. Each got a 200
    # head before its stream stalled.
    heads = 0
    for s in socks:
        try:
            heads += s.recv(12) == b"HTTP/1.1 200"
        except OSError:
            pass
        s.close()
    waits = [closed[k] - grew[k] for k in closed]
    slowest = max(waits, default=float("nan"))
    fastest = min(waits, default=float("nan"))
    ok = (len(queued) == n and len(closed) == n and slowest <= limit and heads == n and back
          and peak_fds >= idle_fds + n)
    return ok, (f"{heads}/{n} got a 200 head; {len(closed)}/{n} closed by the server "
                f"{fastest:.2f}..{slowest:.2f} s after their last write progress (limit "
                f"{limit:g} s); kernel send queues {mib(sum(queued.values()))}; fds "
                f"{peak_fds} -> {server.fds()}; peak RSS {mib(peak_rss)}")


idle_fds = 0


def run(loop: str, n: int) -> bool:
    global idle_fds
    port = free_port()
    cmd = skirr_cmd(port, loop, "--timeout-request-head", str(HEAD_TIMEOUT),
                    "--timeout-request-body", str(BODY_TIMEOUT),
                    "--timeout-write", str(WRITE_TIMEOUT), "--timeout-keep-alive", "2")
    server = ServerProcess(cmd, port, f"skirr-{loop}")
    all_ok = True
    try:
        time.sleep(0.5)
        idle_fds, idle_rss = server.fds(), server.rss()
        print(f"  skirr/{loop}: idle {idle_fds} fds, RSS {mib(idle_rss)}")
        idle_live, idle_objects = live(server)
        print(f"  skirr/{loop}: idle live objects {idle_live} (the /_live request counts itself),"
              f" {idle_objects} gc objects")
        for round_no in range(1, ROUNDS + 1):
            for name, phase in (("slow writers", slow_writers), ("slow uploaders", slow_uploaders),
                                ("stalled readers", stalled_readers)):
                ok, text = phase(server, n)
                all_ok &= ok
                print(f"  {'PASS' if ok else 'FAIL'}  {name:15} {text}")
            # Lingering closes and the last reaps finish within a tick.
            wait_until(lambda: server.fds() <= idle_fds, 3.0)
            time.sleep(0.3)
            fds, rss, (now_live, objects) = server.fds(), server.rss(), live(server)
            ok = fds == idle_fds and now_live == idle_live and objects <= idle_objects + GC_SLACK
            rss_text = f"RSS {mib(idle_rss)} -> {mib(rss)} (+{mib(rss - idle_rss)}"
            if round_no == ROUNDS:
                ok &= rss <= idle_rss + RSS_BOUND
                rss_text += f", bound +{mib(RSS_BOUND)}"
            all_ok &= ok
            print(f"  {'PASS' if ok else 'FAIL'}  after round {round_no}   fds {idle_fds} -> {fds} "
                  f"(must be equal), live objects {'as idle' if now_live == idle_live else now_live}"
                  f", gc objects {idle_objects} -> {objects}, {rss_text})")
        log = server.log_text()
        if "Exception in ASGI application" in log or "Traceback" in log:
            all_ok = False
            print(f"  FAIL  server log has errors:\n{log}")
    finally:
        code = server.stop()
    if code != 0:
        print(f"  FAIL  skirr/{loop} exited with {code} after SIGINT")
        all_ok = False
    return all_ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loops", default="uvloop,asyncio")
    ap.add_argument("--connections", type=int, default=200)
    args = ap.parse_args()
    print(f"slow-peer gates: {args.connections} connections per phase; head timeout "
          f"{HEAD_TIMEOUT:g} s, body timeout {BODY_TIMEOUT:g} s, write timeout {WRITE_TIMEOUT:g} s,"
          f" timer tick {TICK:g} s")
    ok = True
    for loop in [x for x in args.loops.split(",") if x]:
        ok &= run(loop, args.connections)
    print("slow-peer gates:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
