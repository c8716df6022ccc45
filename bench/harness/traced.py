"""The two gates that run a server under a tracer: the syscall gate (strace) and instructions per
request (callgrind).

Owns: the syscall gate (1,001 sequential requests on one keep-alive connection: <= 1,010 receive
calls, no EAGAIN receive, exactly one send per response; then 100 batches of 16 pipelined requests
on a second connection: exactly one send per batch), reading strace's output per accepted
connection, and the callgrind count (warm-up, then a sequential and a pipelined raw_get phase, each
dumped separately); each one's PASS/FAIL lines and its JSON in a bench/results/ run folder.

Never: judges speed (the counts are deterministic where timings are not), and never sends a request
before the measured ones (readiness is the port listening, so the trace's first accepted
connection is the measured one).
"""
from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

from .env import ROOT, git_commit, new_run_dir
from .peers import Server, require_listening
from .workloads import PIPELINE_DEPTH, Conn, exact_pipelined, exact_sequential

PIPELINE_BATCHES = 100  # the syscall gate's pipelined phase: batches of PIPELINE_DEPTH requests
TRACED_APP = "raw_apps:raw"

# ----------------------------------------------------------------------------------------------
# Syscall gate

TRACE_LINE = re.compile(r"^(\d+)\s+(.*)$")
CALL = re.compile(r"^(\w+)\((\d+)?(.*)\)\s+=\s+(-?\d+|\?)(?:\s+(\w+))?")
RECV = {"read", "readv", "recvfrom", "recvmsg", "recvmmsg", "recv"}
SEND = {"write", "writev", "sendto", "sendmsg", "sendmmsg", "send", "sendfile", "sendfile64"}


def parse_strace(path):
    """Per accepted connection: recv/send calls, EAGAIN returns and every syscall on it."""
    pending = {}
    conns, open_fds = [], {}
    totals = {}
    for raw in Path(path).read_text(errors="replace").splitlines():
        m = TRACE_LINE.match(raw)
        if not m:
            continue
        pid, line = m.groups()
        if line.endswith("<unfinished ...>"):
            pending[pid] = line[: -len("<unfinished ...>")].rstrip()
            continue
        r = re.match(r"^<\.\.\. (\w+) resumed>(.*)$", line)
        if r:
            line = pending.pop(pid, r.group(1) + "(") + r.group(2)
        c = CALL.match(line)
        if not c:
            continue
        name, fd, _, ret, err = c.groups()
        totals[name] = totals.get(name, 0) + 1
        for conn in open_fds.values():  # every syscall of the server while the connection is open
            conn["window"][name] = conn["window"].get(name, 0) + 1
        if name in ("accept", "accept4") and ret not in ("?",) and int(ret) >= 0:
            conn = {"fd": int(ret), "recv": 0, "recv_eagain": 0, "recv_eof": 0, "send": 0,
                    "send_eagain": 0, "calls": {}, "window": {}}
            conns.append(conn)
            open_fds[int(ret)] = conn
            continue
        if fd is None or int(fd) not in open_fds:
            continue
        conn = open_fds[int(fd)]
        conn["calls"][name] = conn["calls"].get(name, 0) + 1
        if name in RECV:
            conn["recv"] += 1
            conn["recv_eagain"] += err == "EAGAIN"
            conn["recv_eof"] += ret == "0"
        elif name in SEND:
            conn["send"] += 1
            conn["send_eagain"] += err == "EAGAIN"
        elif name == "close":
            del open_fds[int(fd)]
    return conns, totals


def start_traced(name, outdir, wrap, timeout, pin):
    """The server `name` serving raw_get under the tracer `wrap`, once its port listens; its log
    in outdir/<name>.log; RuntimeError with the log's tail if it exits or `timeout` seconds pass
    first. `pin`: taskset inside the tracer."""
    srv = Server(name, TRACED_APP, outdir, name, wrap=wrap, pin=pin)
    try:
        srv.wait_ready(require_listening, timeout)
    except BaseException:
        srv.stop()
        raise
    return srv


def syscall_gate(name, requests, outdir, batches=PIPELINE_BATCHES):
    """Traces the server with strace while one keep-alive connection makes `requests` sequential
    requests, then a second one sends `batches` batches of PIPELINE_DEPTH pipelined requests (each
    batch in one write, every response read before the next batch)."""
    trace = Path(outdir) / f"strace-{name}.txt"
    out = {"server": name, "requests": requests}
    with start_traced(name, outdir, ["strace", "-f", "-qq", "-o", str(trace), "--"], 60,
                      pin=True) as srv:
        c = Conn(srv.port)
        req = c.request_bytes("GET", "/")
        out["good_responses"] = exact_sequential(c, req, requests)
        c.close()
        c = Conn(srv.port)
        out["pipelined_good"] = exact_pipelined(c, req, batches)
        c.close()
        time.sleep(0.5)
    conns, totals = parse_strace(trace)
    if not conns:
        out.update(ok=False, error="no accepted connection in the trace")
        return out
    conn = conns[0]  # accepted first: the sequential connection
    out.update(conn)
    out["connections_seen"] = len(conns)
    out["all_syscalls"] = dict(sorted(totals.items(), key=lambda kv: -kv[1]))
    out["ok"] = (out["good_responses"] == requests and conn["recv"] <= requests + 9
                 and conn["recv_eagain"] == 0 and conn["send"] == requests)
    pipe = conns[1] if len(conns) > 1 else {}
    out["pipelined"] = {"batches": batches, "depth": PIPELINE_DEPTH, "recv": pipe.get("recv"),
                        "send": pipe.get("send"), "send_eagain": pipe.get("send_eagain")}
    out["pipelined_ok"] = (out.get("pipelined_good") == batches * PIPELINE_DEPTH
                           and pipe.get("send") == batches)
    return out


def syscalls(names, requests):
    """Runs the syscall gate on each server and prints its lines; 1 if skirr fails, else 0."""
    outdir = new_run_dir("syscalls")
    results, rc = [], 0
    for name in names:
        r = syscall_gate(name, requests, outdir)
        results.append(r)
        limit_recv = requests + 9
        gate = "gate" if name == "skirr" else "control"
        print(f"{name} ({gate}): {requests} sequential requests on one keep-alive connection: "
              f"{r.get('good_responses', 0)} exact responses; receive calls {r.get('recv')} "
              f"(<= {limit_recv}; {r.get('recv_eof')} returned EOF), EAGAIN receives "
              f"{r.get('recv_eagain')} (0), send calls {r.get('send')} (exactly {requests}), "
              f"EAGAIN sends {r.get('send_eagain')} -> {'PASS' if r.get('ok') else 'FAIL'}")
        print(f"  calls on the connection: {json.dumps(r.get('calls', {}))}")
        top = sorted(r.get("window", {}).items(), key=lambda kv: -kv[1])[:12]
        print(f"  every syscall of the server while that connection was open (top): "
              f"{', '.join(f'{k} {v}' for k, v in top)}")
        p = r.get("pipelined", {})
        print(f"  pipelined: {p.get('batches')} batches of {p.get('depth')} requests, each in one "
              f"write: {r.get('pipelined_good', 0)} exact responses; send calls {p.get('send')} "
              f"(exactly {p.get('batches')}: one write per batch), receive calls {p.get('recv')} "
              f"-> {'PASS' if r.get('pipelined_ok') else 'FAIL'}")
        if r.get("error"):
            print(f"  error: {r['error']}")
        if name == "skirr" and not (r.get("ok") and r.get("pipelined_ok")):
            rc = 1
    (outdir / "syscalls.json").write_text(json.dumps(results, indent=1))
    print(f"trace and counts in {outdir.relative_to(ROOT)}")
    return rc


# ----------------------------------------------------------------------------------------------
# Instructions per request


def callgrind_ir(path):
    """Instructions executed (Ir) in one callgrind dump file."""
    m = re.search(r"^(?:summary|totals): (\d+)", Path(path).read_text(errors="replace"), re.M)
    return int(m.group(1)) if m else None


def callgrind(n, server="skirr"):
    """Instructions per request in the whole skirr process (Python, C, libc; not the kernel) under
    callgrind: deterministic, unlike timings on a noisy machine, so a hot-path change shows its
    cost as a difference of counts. Phases, each dumped separately after a warm-up: `n` sequential
    raw_get requests on one keep-alive connection, then `n` more as batches of PIPELINE_DEPTH
    pipelined requests. Prints one line per phase; 1 if a phase lacks exact answers or a count."""
    outdir = new_run_dir("callgrind")
    out_file = outdir / "callgrind.out"
    wrap = ["valgrind", "--tool=callgrind", "--compress-strings=no", "--compress-pos=no",
            f"--callgrind-out-file={out_file}"]
    phases = []
    try:
        # Not pinned: valgrind does not follow taskset's exec into the server.
        srv = start_traced(server, outdir, wrap, 180, pin=False)
    except RuntimeError as exc:
        raise SystemExit(f"callgrind: {exc}") from None

    def control(flag):
        subprocess.run(["callgrind_control", flag, str(srv.proc.pid)], check=True, timeout=120,
                       stdout=subprocess.DEVNULL)

    with srv:
        c = Conn(srv.port, timeout=60)
        req = c.request_bytes("GET", "/")
        exact_sequential(c, req, 200)  # warm-up: imports, caches, the first allocations
        control("-z")
        phases.append(("raw_get, sequential on one connection", exact_sequential(c, req, n)))
        control("-d")
        phases.append((f"raw_get, pipelined {PIPELINE_DEPTH} per write",
                       exact_pipelined(c, req, n // PIPELINE_DEPTH)))
        control("-d")
        c.close()
    rc = 0
    results = []
    for i, (label, good) in enumerate(phases, 1):
        ir = callgrind_ir(f"{out_file}.{i}")
        expected = n if i == 1 else n // PIPELINE_DEPTH * PIPELINE_DEPTH
        ok = ir is not None and good == expected
        rc |= not ok
        results.append({"phase": label, "requests": good, "ir": ir,
                        "ir_per_request": ir / good if ir and good else None, "ok": ok})
        print(f"{label}: {good}/{expected} exact responses, "
              f"{ir / good if ir and good else float('nan'):,.0f} instructions per request")
    (outdir / "callgrind.json").write_text(json.dumps({"commit": git_commit(), "phases": results},
                                                      indent=1))
    print(f"dumps in {outdir.relative_to(ROOT)} (callgrind_annotate <dump> for the profile)")
    return rc
