"""Memory and CPU of permessage-deflate per idle WebSocket (issue 37, stop 57; bench/LEVERS.md,
"permessage-deflate memory (stop 57)").

`wire`: starts `python -m skirr ws_apps:echo` (pings off) pinned to CPU 0 and opens N WebSockets
from this process (pinned to CPU 1) offering --offer (default Chrome's, `permessage-deflate;
client_max_window_bits`; Firefox's is `permessage-deflate`). Reads the server's VmRSS 2 s after
all are open, after each has sent one compressed 3,155-byte JSON message and read its compressed
echo (checked), and after --msgs more each (JSON of the same shape, other text, context
takeover), whose server CPU (utime + stime) is divided by the messages echoed. One JSON line:
the answer, KiB per connection, the compressed sizes on the wire.

`zlib`: the same messages through Python's zlib module (the system libz skirr links, as skirr
calls it: level -1, raw, Z_SYNC_FLUSH per message): RSS per stream of 2,000 deflaters or
inflaters against zlib's formula (zconf.h), the compressed sizes, and CPU per message (median of
5 runs, CPU 1) for each window bits / memLevel pair.

    .venv/bin/python bench/ws_pmd_memory.py wire -n 2000 --msgs 20
    .venv/bin/python bench/ws_pmd_memory.py wire -n 2000 --msgs 20 --offer permessage-deflate
    .venv/bin/python bench/ws_pmd_memory.py zlib
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import statistics
import subprocess
import sys
import time
import zlib

APPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "apps")
TAIL = b"\x00\x00\xff\xff"  # RFC 7692 §7.2.1
WORDS = "the a chat room user joined left message reply typing online away busy hello ok".split()


def message(seed: int = 7) -> bytes:
    """A chat history as JSON, 3.1-3.3 KB; seed 7 is 3,155 bytes."""
    rnd = random.Random(seed)
    items = [{"id": 100000 + i,
              "user": {"id": rnd.randrange(10**6), "name": f"user{rnd.randrange(999)}",
                       "status": rnd.choice(["online", "away", "busy"])},
              "ts": 1733500000 + rnd.randrange(10**5), "type": "message",
              "text": " ".join(rnd.choice(WORDS) for _ in range(rnd.randrange(4, 14))),
              "reactions": {"like": rnd.randrange(5)}} for i in range(16)]
    return json.dumps({"type": "history", "room": "general", "messages": items}).encode()


def rss_kib(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def frame(opcode: int, payload: bytes, rsv1: bool) -> bytes:
    """A masked client frame (RFC 6455 §5.2), payload under 64 KiB."""
    key = os.urandom(4)
    b0 = 0x80 | (0x40 if rsv1 else 0) | opcode
    n = len(payload)
    head = bytes([b0, 0x80 | n]) if n < 126 else bytes([b0, 0x80 | 126]) + n.to_bytes(2, "big")
    mask = (key * (n // 4 + 1))[:n]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(mask, "big")).to_bytes(n, "big")
    return head + key + masked


async def read_frame(r: asyncio.StreamReader) -> tuple[int, bytes]:
    b0, b1 = await r.readexactly(2)
    n = b1 & 0x7F
    if n == 126:
        n = int.from_bytes(await r.readexactly(2), "big")
    elif n == 127:
        n = int.from_bytes(await r.readexactly(8), "big")
    return b0, await r.readexactly(n)


class Conn:
    async def open(self, port: int, offer: str) -> None:
        self.r, self.w = await asyncio.open_connection("127.0.0.1", port)
        key = base64.b64encode(os.urandom(16))
        self.w.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                     b"Connection: Upgrade\r\nSec-WebSocket-Key: " + key
                     + b"\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Extensions: "
                     + offer.encode() + b"\r\n\r\n")
        head = await self.r.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        self.answer = [line.split(b":", 1)[1].strip() for line in head.split(b"\r\n")
                       if line.lower().startswith(b"sec-websocket-extensions:")][0].decode()
        bits = 15  # what the client may use unless told less (RFC 7692 §7.1.2.2)
        for param in self.answer.split(";"):
            name, _, value = param.strip().partition("=")
            if name == "client_max_window_bits":
                bits = max(int(value), 9)  # zlib deflates raw with 9 bits at least
        self.deflater = zlib.compressobj(wbits=-bits)
        self.inflater = zlib.decompressobj(wbits=-15)

    async def echo(self, data: bytes) -> int:
        z = self.deflater.compress(data) + self.deflater.flush(zlib.Z_SYNC_FLUSH)
        self.w.write(frame(1, z[:-4], True))
        b0, payload = await read_frame(self.r)
        assert b0 == 0xC1, hex(b0)  # FIN, RSV1, text
        assert self.inflater.decompress(payload + TAIL) == data
        return len(payload)


async def wire(a: argparse.Namespace) -> None:
    os.sched_setaffinity(0, {1})
    srv = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-m", "skirr", "ws_apps:echo",
                            "--app-dir", APPS, "--host", "127.0.0.1", "--port", str(a.port),
                            "--ws-ping-interval", "0", "--log-level", "warning"])
    try:
        for _ in range(100):
            try:
                _, w = await asyncio.open_connection("127.0.0.1", a.port)
                w.close()
                break
            except OSError:
                await asyncio.sleep(0.1)
        await asyncio.sleep(a.settle)
        r0 = rss_kib(srv.pid)
        conns = [Conn() for _ in range(a.n)]
        for i in range(0, a.n, 200):
            await asyncio.gather(*(c.open(a.port, a.offer) for c in conns[i:i + 200]))
        await asyncio.sleep(a.settle)
        r1 = rss_kib(srv.pid)
        data = message()
        first = await asyncio.gather(*(c.echo(data) for c in conns))
        await asyncio.sleep(a.settle)
        r2 = rss_kib(srv.pid)
        c0 = cpu_s(srv.pid)
        sizes = []
        for k in range(a.msgs):
            m = message(k + 1)
            sizes.append((len(m), (await asyncio.gather(*(c.echo(m) for c in conns)))[0]))
        c1 = cpu_s(srv.pid)
        await asyncio.sleep(a.settle)
        r3 = rss_kib(srv.pid)
        print(json.dumps({
            "offer": a.offer, "answer": conns[0].answer, "n": a.n,
            "first_message_in_out": [len(data), first[0]],
            "more_messages_in_out": [sum(x for x, _ in sizes), sum(y for _, y in sizes)],
            "rss_kib": {"start": r0, "open": r1, "after_one_message": r2, "after_more": r3},
            "kib_per_conn": {"open": round((r1 - r0) / a.n, 2),
                             "one_message_over_open": round((r2 - r1) / a.n, 2),
                             "more_messages_over_open": round((r3 - r1) / a.n, 2)},
            "server_cpu_us_per_message": round((c1 - c0) / (a.n * a.msgs) * 1e6, 1)
            if a.msgs else None}))
        for c in conns:
            c.w.close()
        await asyncio.sleep(1)
    finally:
        srv.terminate()
        try:
            srv.wait(30)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()


def zlib_memory(kind: str, wbits: int, mem: int, msgs: list[bytes], n: int = 2000) -> str:
    """In a child process of its own (a clean heap): RSS per stream after 1 and 21 messages."""
    code = f"""
import sys, zlib
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from ws_pmd_memory import message, rss_kib
msgs = [message(k) for k in range(21)]
c = zlib.compressobj(-1, zlib.DEFLATED, -{wbits}, {mem})
zs = [c.compress(m) + c.flush(zlib.Z_SYNC_FLUSH) for m in msgs]
r0 = rss_kib()
if {kind!r} == "inflate":
    objs = [zlib.decompressobj(-{wbits}) for _ in range({n})]
    step = lambda o, k: o.decompress(zs[k])
else:
    objs = [zlib.compressobj(-1, zlib.DEFLATED, -{wbits}, {mem}) for _ in range({n})]
    step = lambda o, k: (o.compress(msgs[k]), o.flush(zlib.Z_SYNC_FLUSH))
for o in objs:
    step(o, 0)
r1 = rss_kib()
for k in range(1, 21):
    for o in objs:
        step(o, k)
print((r1 - r0) / {n}, (rss_kib() - r0) / {n})
"""
    one, more = map(float, subprocess.run([sys.executable, "-c", code], capture_output=True,
                                          text=True, check=True).stdout.split())
    formula = ((1 << wbits) + 7160 if kind == "inflate"
               else (1 << (wbits + 2)) + (1 << (mem + 9)))
    return (f"{kind} {wbits} bits" + (f" memLevel {mem}" if kind == "deflate" else "")
            + f": formula {formula / 1024:.1f} KiB; RSS per stream after 1 message {one:.1f} KiB,"
            f" after 21 {more:.1f} KiB")


def zlib_table() -> None:
    os.sched_setaffinity(0, {1})
    msgs = [message(k) for k in range(21)]
    print(f"zlib {zlib.ZLIB_RUNTIME_VERSION}; 21 messages, {sum(map(len, msgs))} bytes")
    for kind, wbits, mem in (("deflate", 15, 8), ("deflate", 12, 5), ("inflate", 15, 8),
                             ("inflate", 12, 5)):
        print(zlib_memory(kind, wbits, mem, msgs))
    for wbits, mem in ((15, 8), (12, 5), (12, 8), (15, 5), (13, 6)):
        c = zlib.compressobj(-1, zlib.DEFLATED, -wbits, mem)
        sizes = [len(c.compress(m) + c.flush(zlib.Z_SYNC_FLUSH)) - 4 for m in msgs]
        runs = []
        c = zlib.compressobj(-1, zlib.DEFLATED, -wbits, mem)
        for _ in range(5):
            t = time.process_time()
            for _ in range(500):
                for m in msgs:
                    c.compress(m)
                    c.flush(zlib.Z_SYNC_FLUSH)
            runs.append((time.process_time() - t) / (500 * len(msgs)) * 1e6)
        print(f"deflate {wbits} bits memLevel {mem}: first message {sizes[0]} B, the 20 after it "
              f"{sum(sizes[1:])} B; CPU per message {statistics.median(runs):.1f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    w = sub.add_parser("wire")
    w.add_argument("-n", type=int, default=2000)
    w.add_argument("--port", type=int, default=18300)
    w.add_argument("--msgs", type=int, default=20)
    w.add_argument("--settle", type=float, default=2.0, help="seconds before reading RSS")
    w.add_argument("--offer", default="permessage-deflate; client_max_window_bits")
    sub.add_parser("zlib")
    a = ap.parse_args()
    if a.mode == "wire":
        asyncio.run(wire(a))
    else:
        zlib_table()


if __name__ == "__main__":
    main()
