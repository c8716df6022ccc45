"""The scale rows (issue 37): bench/scale_client.c and bench/fanout_client.c against scripted
servers, and the figures, verdicts and report of bench/harness/scale.py from fixed rows.

Run before the scale rows are measured (`make bench-scale`) and by hand:
`.venv/bin/python -m pytest bench/test_scale.py -q`. Each scripted server answers every
connection the same way (right, or with a wrong status, body or accept key, or closing it while
held), so every check the client makes is shown to count an error when it should and to pass when
it should; the scripted fan-out server broadcasts right, or drops, corrupts, repeats or replaces
one subscriber's frame of one broadcast, or answers the publisher wrongly. The churn profile's
classifier (harness/perf.py) is fed `perf script` text with known stacks. Stdlib and pytest only.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
from argparse import Namespace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import scale  # noqa: E402
from harness.peers import build_fanout_client, build_scale_client  # noqa: E402
from harness.report import render_scale  # noqa: E402

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
HELLO = b"Hello, world!"
pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def client():
    return str(build_scale_client())


def http_answer(status=200, body=HELLO):
    return (f"HTTP/1.1 {status} OK\r\ncontent-length: {len(body)}\r\n\r\n").encode() + body


class Listener:
    """A scripted server's listening side on a free loopback port: each connection accepted is
    handed to `one(conn)` in a thread of its own; `close()` ends them all. `lock` also guards what
    a subclass keeps."""

    def __init__(self, backlog):
        self.ls = socket.create_server(("127.0.0.1", 0), backlog=backlog)
        self.port = self.ls.getsockname()[1]
        self.peers = []  # the source addresses seen
        self.conns = []
        self.lock = threading.Lock()
        self.closed = False

    def start(self):
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, addr = self.ls.accept()
            except OSError:
                return
            with self.lock:  # one accepted as close() runs is closed, not left to the GC
                if self.closed:
                    conn.close()
                    return
                self.peers.append(addr[0])
                self.conns.append(conn)
            threading.Thread(target=self.one, args=(conn,), daemon=True).start()

    def one(self, conn):
        raise NotImplementedError

    def close(self):
        with self.lock:
            self.closed = True
        self.ls.close()
        for c in self.conns:
            c.close()


def read_head(conn):
    """What arrived up to and past the end of a request head (b"\r\n\r\n"), or None at EOF
    before it."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(4096)
        if not data:
            return None
        buf += data
    return buf


class Scripted(Listener):
    """Every connection on a free loopback port: the request head read, then `answer(head)`'s
    bytes sent; with `close_after`, the connection closed once answered (the held check must see
    it), else kept open until the client closes it."""

    def __init__(self, answer, close_after=False):
        super().__init__(backlog=256)
        self.answer, self.close_after = answer, close_after
        self.start()

    def one(self, conn):
        try:
            head = read_head(conn)
            if head is None:
                return
            conn.sendall(self.answer(head))
            if self.close_after:
                conn.close()
        except OSError:  # close() shut it under this thread: the test is over
            return


def ws_answer(right=True):
    def answer(head):
        key = next(line.split(b":", 1)[1].strip() for line in head.split(b"\r\n")
                   if line.lower().startswith(b"sec-websocket-key:"))
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
        if not right:
            accept = base64.b64encode(hashlib.sha1(key).digest())
        return (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
    return answer


def run_client(client, port, n, *extra):
    """The client's three phases ({phase: object}) and exit status; it holds until stdin's EOF,
    which here is at once."""
    p = subprocess.run([client, str(port), "-n", str(n), *extra], input="close\n",
                       capture_output=True, text=True, timeout=50)
    return scale.client_lines(p.stdout), p.returncode, p.stderr


def against(client, answer, n, *extra):
    """run_client against a Scripted server answering with `answer`: (its phases, exit status,
    stderr, the server, closed)."""
    srv = Scripted(answer)
    try:
        return (*run_client(client, srv.port, n, *extra), srv)
    finally:
        srv.close()


def test_http_right_answers_are_held_from_spread_addresses(client):
    got, rc, err, srv = against(client, lambda head: http_answer(), 300, "-b", "Hello, world!",
                                "-a", "300")
    assert rc == 0, err
    assert got["open"]["ok"] == 300 and got["open"]["errors"] == {}
    assert got["held"] == {"phase": "held", "still_open": 300, "closed_by_server": 0,
                           "reset": 0, "data_while_idle": 0}
    assert got["closed"]["closed"] == 300
    assert len(set(srv.peers)) == 300  # -a 300: one address each, 127.0.1.1 on
    assert "127.0.1.1" in srv.peers and "127.0.1.254" in srv.peers and "127.0.2.1" in srv.peers


@pytest.mark.parametrize("answer,kind", [
    (http_answer(404), "status"),
    (http_answer(body=b"Hello, World!"), "body"),
    (http_answer(body=b"Hello"), "body"),
    (http_answer() + b"X", "extra"),
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nd\r\nHello, world!\r\n0\r\n\r\n",
     "body"),
])
def test_http_wrong_answers_are_errors(client, answer, kind):
    got, rc, _, _ = against(client, lambda head: answer, 5, "-b", "Hello, world!")
    assert rc == 1
    assert got["open"]["ok"] == 0 and got["open"]["errors"] == {kind: 5}
    assert got["open"]["first_error"].startswith("connection ")


def test_closed_while_held_is_counted(client):
    srv = Scripted(lambda head: http_answer(), close_after=True)
    try:
        p = subprocess.Popen([client, str(srv.port), "-n", "20", "-b", "Hello, world!"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        opened = json.loads(p.stdout.readline()[6:])
        out, _ = p.communicate("close\n", timeout=30)
    finally:
        srv.close()
    held = scale.client_lines(out)["held"]
    assert opened["ok"] + sum(opened["errors"].values()) == 20
    assert held["closed_by_server"] + held["still_open"] == opened["ok"]
    assert held["still_open"] == 0 and p.returncode == 1


def test_websocket_accept_is_checked(client):
    got, rc, err, _ = against(client, ws_answer(), 50, "-m", "ws")
    assert rc == 0, err
    assert got["open"]["ok"] == 50 and got["held"]["still_open"] == 50
    got, rc, _, _ = against(client, ws_answer(right=False), 3, "-m", "ws")
    assert rc == 1 and got["open"]["errors"] == {"accept": 3}
    got, rc, _, _ = against(client, lambda head: http_answer(), 3, "-m", "ws")
    assert rc == 1 and got["open"]["errors"] == {"status": 3}


def test_silent_server_times_out_then_stalls(client):
    # the server reads the request and never answers
    got, rc, _, _ = against(client, lambda head: b"", 10, "-t", "1", "-w", "2")
    assert rc == 1 and got["open"]["errors"] == {"timeout": 2, "stalled": 8}


def test_tcp_mode_holds_without_sending(client):
    got, rc, err, _ = against(client, lambda head: b"", 30, "-m", "tcp")
    assert rc == 0, err
    assert got["open"]["ok"] == 30 and got["held"]["still_open"] == 30


def test_refused_is_a_connect_error(client):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once closed
    got, rc, _ = run_client(client, port, 4)
    assert rc == 1 and got["open"]["errors"] == {"connect": 4}
    assert "refused" in got["open"]["first_error"]


@pytest.mark.parametrize("argv,why", [
    ([], "no PORT"),
    (["0", "-n", "1"], "PORT"),
    (["80"], "-n N is required"),
    (["80", "-n", "0"], "positive integer"),
    (["80", "-n", "x"], "positive integer"),
    (["80", "-n", "1", "-m", "h2"], "-m is http, ws or tcp"),
    (["80", "-n", "1", "-m", "tcp", "-s", "200"], "-s is for -m http"),
    (["80", "-n", "1", "-p", "no-slash"], "-p must start with /"),
    (["80", "-n", "1", "-t", "0"], "-t takes"),
    (["80", "-n", "1", "-a", "70000"], "at most 64516"),
    (["80", "-n", "1", "-m", "ws", "-s", "200"], "-s is for -m http"),
    (["80", "-n", "1", "-q", "1"], "unknown option"),
    (["80", "-n"], "without its value"),
    (["80", "-n", "1000000"], "RLIMIT_NOFILE hard limit"),
])
def test_usage_errors(client, argv, why):
    p = subprocess.run([client, *argv], capture_output=True, text=True, timeout=10)
    if why == "RLIMIT_NOFILE hard limit" and "hard limit" not in p.stderr:
        pytest.skip("this machine's hard RLIMIT_NOFILE allows a million descriptors")
    assert p.returncode == 2 and why in p.stderr and p.stdout == ""


def test_client_argv():
    assert scale.client_argv(8000, "http", 10) == [
        str(scale.BUILD / "scale_client"), "8000", "-n", "10", "-m", "http", "-p", "/",
        "-b", "Hello, world!"]
    assert scale.client_argv(8000, "ws", 10)[-2:] == ["-p", "/"]


# ----------------------------------------------------------------------------------------------
# Figures and verdicts from fixed rows


def row(server, mode, n, kib, errors=None, after=1.0, not_closed=0, closed_by_server=0, ok=True):
    held = {"phase": "held", "still_open": n, "closed_by_server": closed_by_server, "reset": 0,
            "data_while_idle": 0}
    cyc = {"ok": n, "errors": errors or {}, "held_check": held, "open_s": 1.0,
           "rss_held_mib": 100.0, "rss_after_mib": 10.0 * after, "not_closed": not_closed}
    if not ok:
        return {"server": server, "mode": mode, "n": n, "ok": False, "error": "boom", "round": 0}
    return {"server": server, "mode": mode, "n": n, "ok": True, "error": None, "round": 0,
            "held": n, "open_s": 1.0, "errors": errors or {}, "first_error": "",
            "held_check": held, "kib_rss": kib, "kib_pss": kib, "after_ratio": after,
            "not_closed": not_closed, "cycles": [cyc, dict(cyc)], "rss_before_mib": 10.0,
            "rss_held_mib": 100.0, "rss_after_mib": 10.0 * after}


SP = {"rows": [("http", 10000), ("http", 50000), ("ws", 10000), ("ws", 50000)], "rounds": 1}


def test_verdicts_exact():
    rows = [
        row("skirr", "http", 10000, 0.5), row("granian", "http", 10000, 4.0),
        row("peregrine", "http", 10000, 2.0), row("nginx-scale", "http", 10000, 0.6),
        row("skirr", "ws", 10000, 4.5), row("uvicorn-wsproto", "ws", 10000, 20.0),
        row("peregrine", "ws", 10000, 7.0, errors={"timeout": 3}),
        row("skirr", "ws", 50000, 3.0, after=1.2), row("granian", "ws", 50000, 30.0),
    ]
    figs = scale.figures(rows)
    assert figs[("ws", 10000, "peregrine")]["errors"] == 6  # 3 in each of its 2 cycles
    got = [(v["target"], v["verdict"], v["detail"])
           for v in scale.verdicts(figs, SP, {"http 50000": "not run: too many"})]
    assert got == [
        ("idle HTTP keep-alive connection after one request, 10,000: skirr <= 0.25x the lowest "
         "peer's KiB/conn", "met", "skirr 0.50 KiB, lowest peer peregrine 2.00 KiB: 0.25x"),
        ("idle HTTP connection, 10,000: skirr <= nginx's KiB/conn", "met",
         "skirr 0.50 KiB, nginx 0.60 KiB"),
        ("idle HTTP keep-alive connection after one request, 50,000: skirr <= 0.25x the lowest "
         "peer's KiB/conn", "unproven", "not run: too many"),
        ("idle HTTP connection, 50,000: skirr <= nginx's KiB/conn", "unproven",
         "not run: too many"),
        ("50,000 HTTP connections held by skirr with no error and no leak", "unproven",
         "not run: too many"),
        # peregrine's errors leave uvicorn-wsproto the lowest peer that held them all
        ("idle WebSocket, 10,000: skirr <= 0.25x the lowest peer's KiB/conn", "met",
         "skirr 4.50 KiB, lowest peer uvicorn-wsproto 20.00 KiB: 0.23x"),
        ("idle WebSocket, 10,000: skirr under 4 KiB/conn", "MISSED", "skirr 4.50 KiB"),
        ("idle WebSocket, 50,000: skirr <= 0.25x the lowest peer's KiB/conn", "met",
         "skirr 3.00 KiB, lowest peer granian 30.00 KiB: 0.10x"),
        ("idle WebSocket, 50,000: skirr under 4 KiB/conn", "met", "skirr 3.00 KiB"),
        ("50,000 WebSocket connections held by skirr with no error and no leak", "MISSED",
         "RSS after all closed 1.20x the start (over 1.10x)"),
    ]


def test_verdicts_unproven_and_missed():
    rows = [row("skirr", "http", 10000, 1.0, closed_by_server=2),
            row("granian", "http", 10000, 8.0), row("nginx-scale", "http", 10000, 0.5),
            row("skirr", "http", 50000, 1.0, not_closed=7), row("granian", "http", 50000, 3.0),
            row("nginx-scale", "http", 50000, 0.5, ok=False)]
    figs = scale.figures(rows)
    assert figs[("http", 50000, "skirr")]["leak"] is None
    assert figs[("http", 50000, "nginx-scale")]["kib_rss"] is None
    sp = {"rows": [("http", 10000), ("http", 50000)], "rounds": 1}
    got = [(v["verdict"], v["detail"]) for v in scale.verdicts(figs, sp)]
    assert got == [
        ("unproven", "skirr did not hold every connection"),
        ("unproven", "skirr or nginx did not hold every connection"),
        ("MISSED", "skirr 1.00 KiB, lowest peer granian 3.00 KiB: 0.33x"),
        ("unproven", "skirr or nginx did not hold every connection"),
        ("MISSED", "7 connections still open on the server 60 s after the client closed them"),
    ]


def test_too_many_and_plan():
    assert scale.too_many(10000, 20000, "") is None
    assert scale.too_many(50000, 20000, "no CAP_SYS_RESOURCE") == (
        "not run: 50,000 connections need RLIMIT_NOFILE >= 57,398 in the server; the limit here "
        "is 20,000 (no CAP_SYS_RESOURCE)")
    args = Namespace(rows="http:100,ws:200", servers="granian,nginx-scale", rounds=2)
    sp = scale.plan(args)
    assert sp["rows"] == [("http", 100), ("ws", 200)] and sp["rounds"] == 2
    assert sp["servers"] == {"http": ["skirr", "granian", "nginx-scale"],
                             "ws": ["skirr", "granian"], "tcp": ["skirr", "granian", "nginx-scale"]}
    with pytest.raises(SystemExit):
        scale.plan(Namespace(rows="h2:100", servers=None, rounds=None))
    with pytest.raises(SystemExit):
        scale.plan(Namespace(rows=None, servers="nginx", rounds=None))


def churn_run(server, wl, rnd, cpu, ok=True):
    return {"server": server, "workload": wl, "conns": 64, "round": rnd, "ok": ok,
            "cpu_us_per_req": cpu if ok else None, "error": None if ok else "wrk failed"}


def test_churn_verdicts_exact():
    runs = [churn_run("skirr", "raw_get_close", r, 20.0) for r in range(3)]
    runs += [churn_run("granian", "raw_get_close", r, c) for r, c in enumerate((30.0, 25.0, 40.0))]
    runs += [churn_run("peregrine", "raw_get_close", r, c) for r, c in enumerate((30.0, 19.0, 40.0))]
    runs += [churn_run("hypercorn", "raw_get_close", r, 90.0, ok=r != 1) for r in range(3)]
    runs += [churn_run("nginx-scale", "raw_get_close", r, c) for r, c in enumerate((16.0, 10.0, 14.0))]
    got = [(v["target"], v["verdict"], v["detail"]) for v in scale.churn_verdicts(runs, 3)]
    assert got == [
        ("churn raw_get_close c64: skirr's CPU per request ahead of granian in every round", "met",
         "granian ÷ skirr per round: 1.50, 1.25, 2.00"),
        ("churn raw_get_close c64: skirr's CPU per request ahead of hypercorn in every round",
         "unproven", "hypercorn ÷ skirr per round: 4.50, 4.50"),
        ("churn raw_get_close c64: skirr's CPU per request ahead of peregrine in every round",
         "MISSED", "peregrine ÷ skirr per round: 1.50, 0.95, 2.00"),
        ("churn raw_get_close c64: skirr's CPU per request <= 1.5x nginx's in every round",
         "MISSED", "skirr ÷ nginx per round: 1.25, 2.00, 1.43"),
    ]



# ----------------------------------------------------------------------------------------------
# The churn profile (harness/perf.py): `perf script` text classified, the report's table and row

K = "[kernel.kallsyms]"
SK = "/v/lib/python3.11/site-packages/skirr/_native.cpython-311-x86_64-linux-gnu.so"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
PY = "/p/lib/libpython3.11.so.1.0"
UV = "/v/lib/python3.11/site-packages/uvloop/loop.cpython-311-x86_64-linux-gnu.so"


def perf_sample(pid, *frames):
    """One sample as `perf script -F comm,pid,tid,period,event,ip,sym,symoff,dso` prints it;
    frames leaf first, each (address, symbol, dso or "inlined")."""
    lines = [f"python {pid}/{pid}     1001001 cpu-clock: "]
    lines += [f"\t{addr:>16} {sym}{'' if sym == '[unknown]' else '+0x10'} ({dso})"
              for addr, sym, dso in frames]
    return "\n".join(lines) + "\n"


ON_READY = ("3160c", "sk_reactor_on_ready", SK)
PERF_TEXT = "\n".join([
    # accept: the kernel's accept4 (its libc call inlined in reactor_accept)
    perf_sample(100, ("ffffffff81afe8f0", "hook_file_alloc_security", K),
                ("ffffffff81e758a1", "do_accept", K), ("ffffffff81e75aa8", "__x64_sys_accept4", K),
                ("10af63", "accept4", LIBC), ("3160c", "reactor_accept", "inlined"), ON_READY),
    # accept: the handler's open under tp_new, both inlined in the reactor's callback
    perf_sample(100, ("24ba2", "sk_http1_open", SK), ("31702", "tp_new", "inlined"),
                ("31702", "reactor_accept", "inlined"), ("31702", "sk_reactor_on_ready", SK)),
    # accept: epoll_ctl ADD
    perf_sample(100, ("ffffffff8172a000", "ep_insert", K), ("ffffffff8172b000", "do_epoll_ctl", K),
                ("108c00", "epoll_ctl", LIBC), ("31800", "tp_new", "inlined"),
                ("31800", "sk_reactor_on_ready", SK)),
    # close: libc's __GI___close (inlined) from tp_closed, the TCP teardown under it
    perf_sample(100, ("ffffffff82084e34", "tcp_v4_destroy_sock", K),
                ("ffffffff816ddf06", "__fput", K), ("ffffffff816d8239", "__x64_sys_close", K),
                ("f89f0", "__GI___close", "inlined"), ("2f9bb", "tp_closed", SK), ON_READY),
    # close: close() in tp_new's error path (the frame nearest the leaf decides)
    perf_sample(100, ("ffffffff816ddf06", "__fput", K), ("ffffffff816d8239", "__x64_sys_close", K),
                ("f89f0", "__close", LIBC), ("31900", "tp_new", "inlined"),
                ("31900", "sk_reactor_on_ready", SK)),
    # close: Python's free under the handler's release under reap (tp_free inlined)
    perf_sample(100, ("183000", "PyObject_Free", PY), ("237f0", "h1_release", SK),
                ("2f400", "tp_free", "inlined"), ("2f400", "reap", SK), ON_READY),
    # request: libc's malloc (its _int_malloc inlined) from skirr's parser
    perf_sample(100, ("a0000", "_int_malloc", "inlined"), ("a0000", "__GI___libc_malloc", LIBC),
                ("24066", "h1_data_received", SK), ON_READY),
    # request: skirr's C at the leaf
    perf_sample(100, ("37a40", "llhttp__internal__run", SK), ("24066", "h1_data_received", SK)),
    # python: the interpreter called from skirr (twice)
    perf_sample(100, ("101c9b", "_PyEval_EvalFrameDefault", PY), ("1ae16", "request_am_send", SK)),
    perf_sample(100, ("101c9b", "_PyEval_EvalFrameDefault", PY), ("1ae16", "request_am_send", SK)),
    # python: uvloop
    perf_sample(100, ("13844b", "uv__io_poll", UV), ("3", "[unknown]", "[unknown]")),
    # python: libc with no known caller
    perf_sample(100, ("9f000", "memcpy", LIBC), ("7f4235c58ea0", "[unknown]", "[unknown]")),
    # kernel: the loopback softirq under the response's sendto
    perf_sample(100, ("ffffffff8208a0f0", "tcp_v4_rcv", K),
                ("ffffffff81eaf60e", "net_rx_action", K),
                ("ffffffff81e76340", "__x64_sys_sendto", K), ("10ab59", "__send", LIBC),
                ("2aa00", "plain_writev", SK)),
    # kernel: epoll_wait
    perf_sample(100, ("ffffffff81730000", "ep_poll", K),
                ("ffffffff81731000", "__x64_sys_epoll_pwait", K),
                ("108c59", "epoll_pwait", LIBC), ("3", "[unknown]", "[unknown]")),
    # another process: left out when only skirr's pids count
    perf_sample(200, ("ffffffff81e758a1", "do_accept", K)),
])


def test_perf_classes_exact():
    from harness import perf
    got = perf.shares(PERF_TEXT, {100})
    assert got["samples"] == 14
    assert got["counts"] == {"accept": 3, "close": 3, "request": 2, "python": 4, "kernel": 2}
    assert got["shares"] == {"accept": 3 / 14, "close": 3 / 14, "request": 2 / 14,
                             "python": 4 / 14, "kernel": 2 / 14}
    assert got["top"] == [
        ["_PyEval_EvalFrameDefault", "libpython3.11", 2 / 14],
        ["PyObject_Free", "libpython3.11", 1 / 14],
        ["__GI___libc_malloc", "libc", 1 / 14],  # the inlined _int_malloc's caller
        ["__fput", "kernel", 1 / 14],
        ["ep_insert", "kernel", 1 / 14],
        ["ep_poll", "kernel", 1 / 14],
        ["hook_file_alloc_security", "kernel", 1 / 14],
        ["llhttp__internal__run", "skirr/_native", 1 / 14],
        ["memcpy", "libc", 1 / 14],
        ["sk_http1_open", "skirr/_native", 1 / 14],
    ]
    every = perf.shares(PERF_TEXT)  # no pid filter: the other process's accept counts
    assert (every["samples"], every["counts"]["accept"]) == (15, 4)
    assert perf.shares("")["shares"]["accept"] is None


def test_plan_churn_profile_flag():
    cp = scale.plan_churn(Namespace(servers="nginx-scale", churn_rounds=1, no_profile=False))
    assert (cp["servers"], cp["rounds"], cp["profile"]) == (["skirr", "nginx-scale"], 1, True)
    cp = scale.plan_churn(Namespace(servers=None, churn_rounds=None, no_profile=True))
    assert (cp["servers"], cp["rounds"], cp["profile"]) == (scale.CHURN["servers"], 3, False)


def test_perf_parse_and_classify_each():
    from harness import perf
    samples = perf.parse_script(PERF_TEXT)
    assert samples[0] == (100, [
        ("hook_file_alloc_security", K, False), ("do_accept", K, False),
        ("__x64_sys_accept4", K, False), ("accept4", LIBC, False), ("reactor_accept", SK, True),
        ("sk_reactor_on_ready", SK, False)])
    assert [perf.classify(f) for _, f in samples] == [
        "accept", "accept", "accept", "close", "close", "close", "request", "request", "python",
        "python", "python", "python", "kernel", "kernel", "accept"]
    assert perf.norm("__GI___close", LIBC) == "close"
    assert perf.norm("__GI___close", SK) == "__GI___close"  # only libc's aliases


def profile_run(wl, accept, close, samples, ok=True):
    rest = (1 - accept - close) / 3
    return {"server": "skirr", "workload": wl, "conns": 64, "ok": ok,
            "error": None if ok else "perf recorded no sample of skirr's process",
            "event": "cpu-clock", "call_graph": "dwarf,16384", "freq": 999, "rps": 15000.0,
            "samples": samples,
            "shares": {"accept": accept, "close": close, "request": rest, "python": rest,
                       "kernel": rest},
            "top": [["do_syscall_64", "kernel", 0.05], ["_PyEval_EvalFrameDefault",
                                                         "libpython3.11", 0.0125]]}


def churn_result(profile):
    churn = {"runs": [churn_run("skirr", "raw_get_close", 0, None, ok=False)],
             "config": dict(scale.CHURN, rounds=1)}
    if profile is not ...:
        churn["profile"] = profile
    return {"meta": {"started": "2026-12-05 02:00:00 UTC", "git": "abc", "seed": 1,
                     "python": "3.11.7", "machine": {"cpu": "AMD EPYC", "cores": 2, "kernel": "6",
                                                     "loadavg_at_start": ["1", "2", "3"]}},
            "scale": None, "fanout": None, "churn": churn}


def test_profile_report_table_and_row():
    probe = {"ok": True, "error": None, "event": "cpu-clock", "call_graph": "dwarf,16384",
             "note": "cpu-clock samples (a timer)"}
    runs = [profile_run("raw_get_close", 0.15, 0.3, 5421),
            profile_run("fastapi_json_close", 0.05, 0.1, 5693, ok=False)]
    lines = render_scale(churn_result({"probe": probe, "runs": runs, "error": None})).splitlines()
    at = lines.index("## Churn profile (skirr, perf)")
    assert lines[at - 2].startswith("- **Churn profile** (skirr only; `--no-profile` skips it): ")
    assert ("`perf record -e cpu-clock -F 999 --call-graph dwarf,16384 -p <skirr's pid>`"
            in lines[at - 2])
    assert lines[at - 2].endswith(" Cpu-clock samples (a timer).")
    assert lines[at + 1:at + 16] == [
        "",
        "| workload | samples | req/s under perf | accept | close | request | python | kernel |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        "| raw_get_close c64 | 5,421 | 15,000 | 15.0% | 30.0% | 18.3% | 18.3% | 18.3% |",
        "- **fastapi_json_close c64** not profiled: perf recorded no sample of skirr's process",
        "",
        "Top 10 symbols (self: the function holding the sampled address, % of skirr's "
        "samples):",
        "",
        "| # | raw_get_close c64 |",
        "|---:|---|",
        "| 1 | `do_syscall_64` (kernel) 5.0% |",
        "| 2 | `_PyEval_EvalFrameDefault` (libpython3.11) 1.2% |",
        "",
        "## Targets",
        "",
    ]
    assert lines[-3] == ("| Churn: the accept path's share of skirr's CPU (a profile) | "
                         "**measured** | raw_get_close c64: accept path 15.0%, close path 30.0% "
                         "of 5,421 samples |")
    assert not any("**not built**" in x and "accept path" in x for x in lines)


def test_profile_row_without_a_profile():
    lines = render_scale(churn_result(...)).splitlines()  # a run before the profile existed
    assert lines[-3] == ("| Churn: the accept path's share of skirr's CPU (a profile) | "
                         "**not measured** | this run has no profile (taken before the profile "
                         "was built, or with --no-profile) |")
    assert "## Churn profile (skirr, perf)" not in lines
    failed = {"probe": {"ok": False, "error": "perf cannot record here: no perf", "event": None,
                        "call_graph": None, "note": ""}, "runs": [],
              "error": "perf cannot record here: no perf"}
    lines = render_scale(churn_result(failed)).splitlines()
    assert "Not measured: perf cannot record here: no perf" in lines
    assert lines[-3] == ("| Churn: the accept path's share of skirr's CPU (a profile) | "
                         "**unproven** | perf cannot record here: no perf |")


# ----------------------------------------------------------------------------------------------
# bench/fanout_client.c against a scripted fan-out server


@pytest.fixture(scope="module")
def fanout_client():
    return str(build_fanout_client())


def ws_frame(payload, opcode=1):
    """An unmasked server frame, FIN set (payload under 64 KiB)."""
    n = len(payload)
    head = bytes([0x80 | opcode]) + (bytes([n]) if n < 126 else bytes([126]) + n.to_bytes(2, "big"))
    return head + payload


class FanoutScripted(Listener):
    """ws_apps.fanout's protocol on a free loopback port, one thread per connection: a WebSocket
    on /pub is the publisher, any other a subscriber, answered 101 (the accept key right) and
    then `welcome` (or `welcome`, the bytes given) once it is in the list of subscribers. Every
    text message the publisher sends (its frames must be masked: `unmasked` counts those that are
    not) is sent to every subscriber in the order they joined, subscriber k of broadcast b (b
    counted from 0 on each publisher, warm-up included) getting `fault(b, k, frame, previous
    frame)`'s bytes, then the publisher is sent `ack(b, subscribers)`'s text. When a publisher
    leaves, its client run is over: the subscribers are forgotten."""

    def __init__(self, fault=None, ack=None, welcome=b"welcome"):
        self.fault = fault or (lambda b, k, frame, prev: frame)
        self.ack = ack or (lambda b, n: b"sent %d" % n)
        self.welcome = welcome
        super().__init__(backlog=1024)
        self.subs, self.published = [], []
        self.unmasked = 0
        self.start()

    def one(self, conn):
        try:
            buf = read_head(conn)
            if buf is None:
                return
            head, _, rest = buf.partition(b"\r\n\r\n")
            conn.sendall(ws_answer()(head + b"\r\n\r\n"))
            if head.split(b" ")[1] == b"/pub":
                self.publish(conn, rest)
                return
            with self.lock:
                self.subs.append(conn)
                conn.sendall(ws_frame(self.welcome))
        except OSError:  # close() shut it under this thread: the test is over
            return

    def publish(self, conn, buf):
        def take(n):
            nonlocal buf
            while len(buf) < n:
                data = conn.recv(65536)
                if not data:
                    raise EOFError
                buf += data
            out, buf = buf[:n], buf[n:]
            return out
        prev, b = b"", -1
        try:
            while True:
                b0, b1 = take(2)
                n = b1 & 0x7F
                if n == 126:
                    n = int.from_bytes(take(2), "big")
                if not b1 & 0x80:
                    self.unmasked += 1
                mask = take(4) if b1 & 0x80 else b"\0\0\0\0"
                payload = bytes(x ^ mask[i % 4] for i, x in enumerate(take(n)))
                if b0 & 0x0F != 1:  # only text messages are broadcast
                    continue
                b += 1
                self.published.append(payload)
                frame = ws_frame(payload)
                with self.lock:
                    for k, sub in enumerate(self.subs):
                        try:
                            sub.sendall(self.fault(b, k, frame, prev))
                        except OSError:  # an earlier run's subscriber, gone: the ack says so
                            continue
                    conn.sendall(ws_frame(self.ack(b, len(self.subs))))
                prev = frame
        except (EOFError, OSError):
            with self.lock:
                self.subs.clear()


def run_fanout(client, srv, n, *extra):
    """fanout_client against `srv` with `n` subscribers (stdin at EOF: the measured broadcasts
    start at once): its phases ({phase: object}), exit status and stderr; the server closed."""
    try:
        p = subprocess.run([client, str(srv.port), "-n", str(n), *extra],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=50)
    finally:
        srv.close()
    return scale.fanout_lines(p.stdout), p.returncode, p.stderr


@pytest.mark.parametrize("size", [64, 1024])
def test_fanout_right_broadcasts_are_counted_exactly(fanout_client, size):
    srv = FanoutScripted()
    got, rc, err = run_fanout(fanout_client, srv, 200, "-s", str(size), "-k", "20", "-W", "2",
                              "-a", "200")
    assert rc == 0, err
    assert list(got) == ["open", "start", "end", "done"]
    assert got["open"] == {"phase": "open", "n": 200, "ok": 200, "publisher": 1,
                           "open_s": got["open"]["open_s"], "errors": {}, "first_error": ""}
    d = got["done"]
    assert (d["n"], d["size"], d["broadcasts"], d["delivered"], d["expected"], d["complete"],
            d["errors"], d["first_error"], d["pongs"]) == (200, size, 20, 4000, 4000, 20, {}, "", 0)
    assert 0 < d["p50_us"] <= d["p99_us"] <= d["max_us"] and d["ack_p50_us"] > 0
    # 2 warm-up and 20 measured messages, masked, each of the size and distinct (its number first)
    assert srv.unmasked == 0 and len(srv.published) == 22 and len(set(srv.published)) == 22
    assert {len(m) for m in srv.published} == {size}
    assert [m[:15] for m in srv.published[:2]] == [b"00000000000000:", b"00000000000001:"]
    assert srv.published[21][:15] == b"00000000000021:"
    assert len(srv.peers) == 201 and len(set(srv.peers)) == 200  # -a 200: the publisher reuses 1


def drop(b, k, frame, prev):
    return b"" if (b, k) == (5, 7) else frame


def corrupt(b, k, frame, prev):
    return frame[:-1] + bytes([frame[-1] ^ 1]) if (b, k) == (5, 7) else frame


def stale(b, k, frame, prev):
    return prev if (b, k) == (5, 7) else frame


def twice(b, k, frame, prev):
    return frame + frame if (b, k) == (5, 7) else frame


def binary(b, k, frame, prev):
    return bytes([0x82]) + frame[1:] if (b, k) == (5, 7) else frame


@pytest.mark.parametrize("fault,errors,delivered", [
    (drop, {"missing": 1}, 499),
    (corrupt, {"payload": 1, "missing": 1}, 499),
    (stale, {"payload": 1, "missing": 1}, 499),
    (binary, {"payload": 1, "missing": 1}, 499),
    (twice, {"duplicate": 1}, 500),
])
def test_fanout_one_bad_frame_is_an_error(fanout_client, fault, errors, delivered):
    # broadcast 5 is the 4th measured one (2 warm-up); subscriber 7 of 50
    got, rc, _ = run_fanout(fanout_client, FanoutScripted(fault), 50, "-k", "10", "-W", "2",
                            "-t", "1")
    d = got["done"]
    assert rc == 1
    assert (d["errors"], d["delivered"], d["expected"], d["broadcasts"]) == (errors, delivered,
                                                                            500, 10)
    assert d["complete"] == (10 if fault is twice else 9)
    # the server's subscriber 7 is the 8th to be welcomed, whichever connection of the client
    if fault is drop:
        assert d["first_error"] == "missing: broadcast 5 reached 49 of 50 subscribers in 1.0 s"
    elif fault is twice:
        assert re.fullmatch(r"connection \d+: duplicate: a second frame of 64 bytes "
                            r"'00000000000005:yzabcdefg' after this broadcast's", d["first_error"])
    else:
        first = {corrupt: ("00000000000005:yzabcdefg", 1, 63),
                 stale: ("00000000000004:rstuvwxyz", 1, 13),
                 binary: ("00000000000005:yzabcdefg", 2, 64)}[fault]
        assert re.fullmatch(r"connection \d+: payload: broadcast 5: frame of 64 bytes "
                            r"\(opcode %d\) '%s', expected a text frame of 64 bytes "
                            r"'00000000000005:yzabcdefg' \(the first %d bytes equal\)"
                            % (first[1], first[0], first[2]), d["first_error"])


def test_fanout_wrong_ack_and_warmup_errors_count(fanout_client):
    srv = FanoutScripted(ack=lambda b, n: b"sent %d" % (n - (b == 4)))
    got, rc, _ = run_fanout(fanout_client, srv, 20, "-k", "5", "-W", "2", "-t", "1")
    assert rc == 1 and got["done"]["errors"] == {"ack": 1} and got["done"]["delivered"] == 100
    assert got["done"]["first_error"] == ("connection 20: ack: ack 'sent 19' (opcode 1), "
                                          "expected 'sent 20' once per broadcast")
    # a warm-up broadcast's error fails the run too, though every measured one was right
    srv = FanoutScripted(fault=lambda b, k, frame, prev: b"" if (b, k) == (0, 3) else frame)
    got, rc, _ = run_fanout(fanout_client, srv, 20, "-k", "5", "-W", "2", "-t", "1")
    assert rc == 1 and got["done"]["errors"] == {"missing": 1}
    assert (got["done"]["delivered"], got["done"]["complete"]) == (100, 5)


def test_fanout_no_welcome_no_broadcast(fanout_client):
    got, rc, _ = run_fanout(fanout_client, FanoutScripted(welcome=b"hello"), 30, "-k", "5")
    assert rc == 1 and list(got) == ["open", "done"]
    assert (got["open"]["ok"], got["open"]["publisher"], got["open"]["errors"]) == (0, 0,
                                                                                   {"welcome": 30})
    assert (got["done"]["broadcasts"], got["done"]["delivered"], got["done"]["expected"]) == (
        0, 0, 150)


@pytest.mark.parametrize("argv,why", [
    ([], "no PORT"),
    (["80"], "-n N is required"),
    (["80", "-n", "1", "-s", "8"], "-s: 16 to 65535 bytes"),
    (["80", "-n", "1", "-s", "65536"], "-s: 16 to 65535 bytes"),
    (["80", "-n", "1", "-W", "-1"], "-W one >= 0"),
    (["80", "-n", "1", "-k", "0"], "positive integer"),
    (["80", "-n", "1", "-P", "pub"], "-p and -P must start with /"),
    (["80", "-n", "1", "-t", "0"], "-t takes"),
    (["80", "-n", "1", "-x", "1"], "unknown option"),
])
def test_fanout_usage_errors(fanout_client, argv, why):
    p = subprocess.run([fanout_client, *argv], capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and why in p.stderr and p.stdout == ""


def test_fanout_argv_and_plan():
    assert scale.fanout_argv(8000, 1000, 64, 200, 5) == [
        str(scale.BUILD / "fanout_client"), "8000", "-n", "1000", "-s", "64", "-k", "200", "-W",
        "5", "-p", "/sub", "-P", "/pub", "-t", "10"]
    args = Namespace(rows="fanout:1000,ws:200", servers="granian", rounds=None, fanout_rounds=2,
                     fanout_broadcasts=50, fanout_sizes="64,4096")
    assert scale.plan(args)["rows"] == [("ws", 200)]
    fp = scale.plan_fanout(args)
    assert (fp["rows"], fp["servers"], fp["rounds"], fp["broadcasts"], fp["sizes"]) == (
        [1000], ["skirr", "granian"], 2, 50, [64, 4096])
    args = Namespace(rows="fanout:50", servers=None, rounds=None)
    assert scale.plan(args)["rows"] == [] and scale.plan_fanout(args)["rows"] == [50]
    fp = scale.plan_fanout(Namespace(rows=None, servers=None))
    assert (fp["rows"], fp["sizes"], fp["rounds"], fp["servers"]) == (
        [1000, 5000], [64, 1024], 3, scale.WS_SERVERS)
    with pytest.raises(SystemExit):
        scale.plan_fanout(Namespace(rows=None, servers=None, fanout_sizes="8"))
    with pytest.raises(SystemExit):
        scale.plan(Namespace(rows="fanout:x", servers=None, rounds=None))


def fan_run(server, n, size, rnd, cpu, ok=True):
    return {"server": server, "n": n, "size": size, "workload": f"fanout_{size}", "conns": n,
            "round": rnd, "ok": ok, "error": None if ok else "1 of 1,000 messages missing",
            "cpu_us_per_msg": cpu, "p50_ms": 2.0 * cpu, "p99_ms": 3.0 * cpu, "ack_p50_ms": cpu,
            "open_s": 0.5, "other_cpu0": 0.01 * rnd, "client_cpu": 0.5}


def test_fanout_figures_and_verdicts_exact():
    runs = [fan_run("skirr", 1000, 64, r, 2.0) for r in range(3)]
    runs += [fan_run("granian", 1000, 64, r, c) for r, c in enumerate((3.0, 2.5, 4.0))]
    runs += [fan_run("peregrine", 1000, 64, r, c) for r, c in enumerate((3.0, 1.9, 4.0))]
    runs += [fan_run("uvicorn-wsproto", 1000, 64, r, 9.0, ok=r != 1) for r in range(3)]
    runs += [fan_run("skirr", 1000, 1024, r, 3.0, ok=r != 2) for r in range(3)]
    runs += [fan_run("granian", 1000, 1024, r, 4.0) for r in range(3)]
    figs = scale.fanout_figures(runs)
    assert figs[(1000, 64, "granian")] == {
        "cpu_us_per_msg": 3.0, "p50_ms": 6.0, "p99_ms": 9.0, "ack_p50_ms": 3.0, "open_s": 0.5,
        "other_cpu0": 0.02, "client_cpu": 0.5, "rounds": 3, "rounds_ok": 3, "error": None}
    assert figs[(1000, 64, "uvicorn-wsproto")]["rounds_ok"] == 2
    assert figs[(1000, 64, "uvicorn-wsproto")]["error"] == "1 of 1,000 messages missing"
    got = [(v["target"], v["verdict"], v["detail"])
           for v in scale.fanout_verdicts(runs, 3, {"fanout 5000": "not run: too many"})]
    assert got == [
        ("fan-out to 5,000 clients: skirr's CPU per delivered message ahead of every peer in "
         "every round", "unproven", "not run: too many"),
        ("fan-out to 1,000 clients, 1,024 B messages: skirr's CPU per delivered message ahead of "
         "granian in every round", "MISSED", "granian ÷ skirr per round: 1.33, 1.33"),
        ("fan-out to 1,000 clients, 64 B messages: skirr's CPU per delivered message ahead of "
         "granian in every round", "met", "granian ÷ skirr per round: 1.50, 1.25, 2.00"),
        ("fan-out to 1,000 clients, 64 B messages: skirr's CPU per delivered message ahead of "
         "peregrine in every round", "MISSED", "peregrine ÷ skirr per round: 1.50, 0.95, 2.00"),
        ("fan-out to 1,000 clients, 64 B messages: skirr's CPU per delivered message ahead of "
         "uvicorn-wsproto in every round", "unproven",
         "uvicorn-wsproto ÷ skirr per round: 4.50, 4.50"),
    ]


def test_fanout_report_section():
    runs = [fan_run("skirr", 1000, 64, 0, 2.0), fan_run("granian", 1000, 64, 0, 3.0),
            fan_run("peregrine", 1000, 64, 0, 1.0, ok=False)]
    fp = dict(scale.FANOUT, rounds=1)
    result = {"meta": {"started": "2026-12-05 02:00:00 UTC", "git": "abc", "seed": 1,
                       "python": "3.11.7", "machine": {"cpu": "AMD EPYC", "cores": 2,
                                                       "kernel": "6", "loadavg_at_start":
                                                       ["1", "2", "3"]}},
              "scale": None, "churn": None,
              "fanout": {"runs": runs, "not_measured": {}, "skipped_rows": {}, "nofile": 20000,
                         "config": fp}}
    text = render_scale(result)
    assert "## Fan-out: one publisher message to every client, 1 round(s)\n" in text
    assert ("| 1,000 | 64 B | skirr | 2.00 | 4.0 / 6.0 | 2.0 | 0.50 | 1/1 | 50% | 0% |  |"
            in text.splitlines())
    assert ("| 1,000 | 64 B | peregrine | – | – / – | – | – | 0/1 | – | – | 1 of 1,000 messages "
            "missing |" in text.splitlines())
    assert ("| fan-out to 1,000 clients, 64 B messages: skirr's CPU per delivered message ahead "
            "of granian in every round | **met** | granian ÷ skirr per round: 1.50 |"
            in text.splitlines())
    assert ("| fan-out to 1,000 clients, 64 B messages: skirr's CPU per delivered message ahead "
            "of peregrine in every round | **unproven** | peregrine ÷ skirr per round: none |"
            in text.splitlines())
    assert "Fan-out (one publisher message" not in text  # no longer "not built"
    assert "RLIMIT_NOFILE 20,000" in text


def test_merge_parts_takes_what_the_run_lacks(tmp_path):
    earlier = {"meta": {"started": "2026-12-04 22:55:10 UTC", "git": "4829d63"},
               "scale": None, "fanout": {"runs": ["earlier"]},
               "churn": {"runs": [churn_run("skirr", "raw_get_close", 0, None, ok=False)],
                         "config": dict(scale.CHURN, rounds=1)}}
    (tmp_path / "results.json").write_text(json.dumps(earlier))
    result = {"meta": {"started": "2026-12-05 02:00:00 UTC", "git": "abc", "seed": 1,
                       "python": "3.11.7", "machine": {"cpu": "AMD EPYC", "cores": 2,
                                                       "kernel": "6", "loadavg_at_start":
                                                       ["1", "2", "3"]}},
              "scale": None, "churn": None,
              "fanout": {"runs": [fan_run("skirr", 1000, 64, 0, 2.0)], "not_measured": {},
                         "skipped_rows": {}, "nofile": 20000, "config": dict(scale.FANOUT,
                                                                              rounds=1)}}
    scale.merge_parts(result, None)
    assert "merged" not in result and result["churn"] is None
    scale.merge_parts(result, tmp_path)
    # the fan-out rows measured are kept; the churn rows come from the earlier run; it had no
    # idle rows
    assert result["merged"] == {"churn": {"run": tmp_path.name,
                                          "started": "2026-12-04 22:55:10 UTC", "git": "4829d63"}}
    assert result["fanout"]["runs"][0]["server"] == "skirr" and result["scale"] is None
    text = render_scale(result)
    assert (f"- **The churn rows** are from an earlier run: 2026-12-04 22:55:10 UTC, skirr "
            f"4829d63 (bench/results/{tmp_path.name})." in text.splitlines())
    assert "## Churn: a new connection per request, 1 rounds\n" in text
    assert ("| raw_get_close c64 | skirr | – (–––) | – | 0/1 | – | wrk failed |"
            in text.splitlines())


class ScriptedServer:
    """scale.Server's interface over a FanoutScripted server in this process (its pids: this
    process), so fanout_row runs its whole course against it."""

    def __init__(self, scripted):
        self.scripted, self.port = scripted, scripted.port

    def __call__(self, name, app, logdir, tag, extra=()):
        assert (name, app) == ("skirr", "ws_apps:fanout")
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.scripted.close()

    def wait_ready(self, check, timeout):
        check(self.port)

    def pids(self):
        return [os.getpid()]

    def log_tail(self, n):
        return "(scripted)"


@pytest.mark.parametrize("fault", [None, drop])
def test_fanout_row_against_a_scripted_server(fanout_client, monkeypatch, tmp_path, fault):
    monkeypatch.setattr(scale, "Server", ScriptedServer(FanoutScripted(fault)))
    monkeypatch.setattr(scale, "SETTLE_S", 0.3)  # the check's run forgotten by the server
    monkeypatch.setattr(scale, "FANOUT_TIMEOUT_S", 1.0)
    fp = dict(scale.FANOUT, broadcasts=10, warmup=2)
    r = scale.fanout_row("skirr", 50, 64, fp, tmp_path, "t")
    assert (r["server"], r["n"], r["size"], r["workload"], r["conns"]) == (
        "skirr", 50, 64, "fanout_64", 50)
    assert (r["opened"], r["expected"], r["broadcasts"]) == (50, 500, 10)
    assert r["cpu_us_per_msg"] == r["server_cpu_s"] / r["delivered"] * 1e6
    assert 0 < r["p50_ms"] <= r["p99_ms"] <= r["max_ms"], r
    if fault is None:
        assert (r["ok"], r["error"], r["delivered"], r["complete"], r["errors"],
                r["client_exit"]) == (True, None, 500, 10, {}, 0)
    else:  # broadcast 5 misses one
        assert (r["ok"], r["delivered"], r["complete"], r["errors"], r["client_exit"]) == (
            False, 499, 9, {"missing": 1}, 1)
        assert r["error"] == ("RuntimeError: 499 of 500 messages delivered right, errors "
                              "{'missing': 1}: missing: broadcast 5 reached 49 of 50 "
                              "subscribers in 1.0 s | server log: (scripted)")


# ----------------------------------------------------------------------------------------------
# RESULTS.md's Scale section: rendered, inserted, replaced, kept by the matrix's rewrite


def full_churn_run(server, wl, rnd, cpu):
    """A churn run as measure.measure_row() writes it."""
    return {"server": server, "workload": wl, "conns": 64, "round": rnd, "ok": True, "error": None,
            "rps": 1e6 / cpu, "p50_ms": 1.0, "p99_ms": 2.0, "max_ms": 3.0, "cpu_us_per_req": cpu,
            "errors": {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0},
            "rss_mib": 30.0, "pss_mib": 30.0, "gen_cpu": 0.5, "client_bound": False,
            "server_util": 0.9, "other_cpu0": 0.01, "steal_cpu0": 0.0}


def scale_run():
    """A scale run with every part: idle rows (the 50,000 ones not run), fan-out merged from an
    earlier run, churn with its profile."""
    idle = [row("skirr", "http", 10000, 0.5), row("peregrine", "http", 10000, 2.5),
            row("granian", "http", 10000, 4.0), row("nginx-scale", "http", 10000, 0.4),
            row("skirr", "ws", 10000, 4.5), row("uvicorn-wsproto", "ws", 10000, 20.0)]
    too_many = "not run: 50,000 connections need RLIMIT_NOFILE >= 57,398 in the server"
    fan = [fan_run("skirr", 1000, 64, 0, 2.0), fan_run("granian", 1000, 64, 0, 3.0),
           fan_run("peregrine", 1000, 64, 0, 2.5), fan_run("skirr", 5000, 64, 0, 2.0),
           fan_run("granian", 5000, 64, 0, 1.8)]
    churn = [full_churn_run("skirr", "raw_get_close", 0, 20.0),
             full_churn_run("granian", "raw_get_close", 0, 30.0),
             full_churn_run("peregrine", "raw_get_close", 0, 18.0),
             full_churn_run("nginx-scale", "raw_get_close", 0, 16.0)]
    probe = {"ok": True, "error": None, "event": "cpu-clock", "call_graph": "dwarf,16384",
             "note": ""}
    return {"meta": {"started": "2026-12-05 02:00:00 UTC", "git": "abc", "seed": 1,
                     "python": "3.11.7", "machine": {"cpu": "AMD EPYC", "cores": 2, "kernel": "6",
                                                     "loadavg_at_start": ["1", "2", "3"]}},
            "scale": {"rows": idle, "not_measured": {}, "nofile": 20000,
                      "skipped_rows": {"http 50000": too_many, "ws 50000": too_many},
                      "config": {"rows": [["http", 10000], ["http", 50000], ["ws", 10000],
                                          ["ws", 50000]], "rounds": 1,
                                 "servers": scale.SCALE_FULL["servers"]}},
            "fanout": {"runs": fan, "not_measured": {}, "skipped_rows": {}, "nofile": 20000,
                       "config": dict(scale.FANOUT, rounds=1)},
            "churn": {"runs": churn, "config": dict(scale.CHURN, rounds=1),
                      "profile": {"probe": probe, "error": None,
                                  "runs": [profile_run("raw_get_close", 0.125, 0.25, 5000)]}},
            "merged": {"fanout": {"run": "20261205-010000-scale",
                                  "started": "2026-12-05 01:00:00 UTC", "git": "def"}}}


CHART = "![Memory per idle connection by server](charts/SCALE/scale-memory-per-connection.png)"
SECTION = "\n".join([
    "<!-- scale:begin -->",
    "## Scale (issue 37)\n",
    "`bench/run.py scale` (`make bench-scale`) run 2026-12-05 02:00:00 UTC, skirr abc; the fan-out "
    "rows from 2026-12-05 01:00:00 UTC, skirr def (bench/results/20261205-010000-scale). The "
    "tables, how each row is measured and every target's verdict: [SCALE.md](SCALE.md).\n",
    "- **Idle HTTP (keep-alive, after one request)**: 1 met, 1 missed, 2 unproven; 10,000 "
    "connections: skirr 0.50 KiB of RSS per connection, lowest peer peregrine 2.50 KiB (0.20x), "
    "nginx 0.40 KiB.",
    "- **Idle WebSocket**: 1 met, 1 missed, 2 unproven; 10,000 connections: skirr 4.50 KiB of RSS "
    "per connection, lowest peer uvicorn-wsproto 20.00 KiB (0.23x).",
    "- **50,000 connections held with no error and no leak**: 0 met, 0 missed, 2 unproven; HTTP "
    "not run (RLIMIT_NOFILE here: 20,000); WebSocket not run (RLIMIT_NOFILE here: 20,000).",
    "- **Fan-out**: 2 met, 1 missed; each peer's CPU per delivered message 0.90x to 1.50x skirr's "
    "over every row and round.",
    "- **Churn**: 2 met, 1 missed, 1 measured; each peer's CPU per request 0.90x to 1.50x skirr's; "
    "skirr's 1.25x to 1.25x nginx's; raw_get_close c64: accept path 12.5%, close path 25.0% of "
    "skirr's CPU samples.",
    "",
    CHART,
    "<!-- scale:end -->"])


def test_results_scale_section_exact():
    from harness import report
    assert report.render_results_scale(scale_run(), [CHART + "\n"]) == SECTION
    lines = report.render_results_scale(
        {"meta": scale_run()["meta"], "scale": None, "fanout": None,
         "churn": churn_result(...)["churn"]}).splitlines()
    assert lines[5:11] == [
        "- **Idle HTTP (keep-alive, after one request)**: not in this run.",
        "- **Idle WebSocket**: not in this run.",
        "- **50,000 connections held with no error and no leak**: not in this run.",
        "- **Fan-out**: not in this run.",  # SCALE.md's "not built" row of a part not run
        "- **Churn**: 0 met, 0 missed, 1 unproven, 1 not measured.",
        ""]


RESULTS_TEXT = ("# skirr benchmark (full)\n\n## Idle memory\n\n| a |\n\n\n"
                "## Hot-path levers: kept, rejected, not tried\n\nlevers\n")


def test_scale_section_inserted_then_replaced():
    from harness import report
    once = report.put_scale_section(RESULTS_TEXT, SECTION)
    assert once == ("# skirr benchmark (full)\n\n## Idle memory\n\n| a |\n\n\n" + SECTION
                    + "\n\n## Hot-path levers: kept, rejected, not tried\n\nlevers\n")
    assert report.scale_section(once) == SECTION
    other = SECTION.replace("skirr abc", "skirr 123")
    twice = report.put_scale_section(once, other)
    assert twice == once.replace(SECTION, other)
    assert twice.count("<!-- scale:begin -->") == 1 and twice.count("<!-- scale:end -->") == 1
    assert report.scale_section(RESULTS_TEXT) is None
    # no levers heading: at the end
    assert report.put_scale_section("# a\n\ntext\n", SECTION) == "# a\n\ntext\n\n" + SECTION + "\n"


def not_drawn(specs, outdir, python=None):
    """charts.draw without matplotlib's venv: every chart 'not drawn'."""
    return {f: "not drawn in this test" for f in specs}


def test_scale_summary_writes_results_section(tmp_path, monkeypatch):
    from harness import charts, report
    monkeypatch.setattr(charts, "draw", not_drawn)
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "RESULTS.md").write_text(RESULTS_TEXT)
    out = tmp_path / "run"
    out.mkdir()
    res = scale_run()
    report.write_scale_report(res, out, str(bench / "SCALE.md"))
    why = ("- Chart not drawn: memory per idle connection by server "
           "(`scale-memory-per-connection.png`): not drawn in this test")
    assert (bench / "RESULTS.md").read_text() == report.put_scale_section(
        RESULTS_TEXT, SECTION.replace(CHART, why))
    assert (bench / "SCALE.md").read_text() == render_scale(res, ["## Charts\n", why + "\n"])
    # without a RESULTS.md beside the summary none is made
    alone = tmp_path / "alone"
    alone.mkdir()
    report.write_scale_report(res, out, str(alone / "SCALE.md"))
    assert sorted(p.name for p in alone.iterdir()) == ["SCALE.md", "charts"]


def test_matrix_rewrite_keeps_the_scale_section(tmp_path, monkeypatch):
    from harness import charts, report
    from test_charts import FULL_FIXED, FULL_ROWS, result
    monkeypatch.setattr(charts, "draw", not_drawn)
    res = result(FULL_ROWS, FULL_FIXED)
    plain, kept = tmp_path / "plain" / "RESULTS.md", tmp_path / "kept" / "RESULTS.md"
    for p in (plain, kept):
        p.parent.mkdir()
    kept.write_text(report.put_scale_section(RESULTS_TEXT, SECTION))
    for p in (plain, kept):
        out = p.parent / "run"
        out.mkdir()
        report.write_report(res, out, str(p))
    fresh = plain.read_text()
    assert "<!-- scale:begin -->" not in fresh
    k = fresh.index("\n## Hot-path levers")
    assert kept.read_text() == fresh[:k + 1] + SECTION + "\n\n" + fresh[k + 1:]


def test_merge_parts_takes_several_runs_in_order(tmp_path):
    """--merge given twice: the first run fills what it has, the second only what is still
    missing (a run's results.json never holds the parts it merged itself)."""
    idle = tmp_path / "idle"
    fan = tmp_path / "fan"
    for d, parts in ((idle, {"scale": {"rows": ["idle-rows"]}, "fanout": None}),
                     (fan, {"scale": {"rows": ["older-idle"]}, "fanout": {"runs": ["fan"]}})):
        d.mkdir()
        (d / "results.json").write_text(json.dumps(
            {"meta": {"started": d.name, "git": d.name}, "churn": None, **parts}))
    result = {"meta": {}, "scale": None, "fanout": None, "churn": {"runs": ["new"]}}
    scale.merge_parts(result, [str(idle), str(fan)])
    assert (result["scale"], result["fanout"], result["churn"]) == (
        {"rows": ["idle-rows"]}, {"runs": ["fan"]}, {"runs": ["new"]})
    assert result["merged"] == {
        "scale": {"run": "idle", "started": "idle", "git": "idle"},
        "fanout": {"run": "fan", "started": "fan", "git": "fan"}}
