"""The two gates that run a server under a tracer: the syscall gate (strace) and instructions per
request (callgrind).

Owns: the syscall gate (1,001 sequential requests on one keep-alive connection: <= 1,010 receive
calls, no EAGAIN receive, exactly one send per response; then 100 batches of 16 pipelined requests
on a second connection: exactly one send per batch), reading strace's output per accepted
connection, and the callgrind count (skirr or a peer serving a workload, raw_get by default: a
warm-up, then a sequential and a pipelined phase on one connection, or one phase of closed-loop
connections, each dumped separately over the server's whole process tree; peers' extension modules
through a copy stripped of DWARF debug information, which valgrind 3.19 cannot always read); each
one's PASS/FAIL lines and its JSON in a bench/results/ run folder.

Never: judges speed (the counts are deterministic where timings are not), and never sends a request
before the measured ones (readiness is the port listening, so the trace's first accepted
connection is the measured one).
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

from .env import BUILD, PEERS_VENV, ROOT, git_commit, new_run_dir
from .measure import check_h2, h2_url, parse_h2load
from .peers import SERVERS, Server, proc_tree, require_listening
from .workloads import (PIPELINE_DEPTH, WORKLOADS, Conn, close_conns, exact_concurrent,
                        exact_pipelined, exact_sequential, open_conns)

PIPELINE_BATCHES = 100  # the syscall gate's pipelined phase: batches of PIPELINE_DEPTH requests
TRACED_APP = "raw_apps:raw"
CALLGRIND_WARMUP = 200  # requests before the counted phases: imports, caches, first allocations

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


def start_traced(name, outdir, wrap, timeout, pin, app=TRACED_APP, pythonpath=()):
    """The server `name` serving `app` (raw_get's by default) under the tracer `wrap`, once its
    port listens; its log in outdir/<name>.log; RuntimeError with the log's tail if it exits or
    `timeout` seconds pass first. `pin`: taskset inside the tracer; `pythonpath`: as Server's."""
    srv = Server(name, app, outdir, name, wrap=wrap, pin=pin, pythonpath=pythonpath)
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


def has_debug_info(path):
    out = subprocess.run(["readelf", "-S", "-W", str(path)], capture_output=True, text=True).stdout
    return ".debug_info" in out


def nodebug_overlay(venv):
    """A folder to put first on a traced server's PYTHONPATH: copies of the venv's packages whose
    extension modules carry DWARF debug information, stripped of it (`strip --strip-debug`).
    valgrind 3.19 (Debian 12) cannot read some DWARF 5 (peregrine-server 1.2's `_native`) and stops
    the traced process; code and symbols are unchanged, so the counts are too. Made once for a
    given set of files, under bench/build/callgrind-overlay/<key>/; the path."""
    site = next(Path(venv).glob("lib/python*/site-packages"))
    sos = sorted(f for f in site.rglob("*.so") if "__pycache__" not in f.parts)
    key = hashlib.sha256("\n".join(f"{f.relative_to(site)} {f.stat().st_size} {f.stat().st_mtime_ns}"
                                    for f in sos).encode()).hexdigest()[:16]
    overlay = BUILD / "callgrind-overlay" / key
    if (overlay / ".done").exists():
        return overlay
    shutil.rmtree(overlay, ignore_errors=True)
    overlay.mkdir(parents=True)
    tops = sorted({f.relative_to(site).parts[0] for f in sos if has_debug_info(f)})
    for top in tops:
        src = site / top
        if src.is_dir():
            shutil.copytree(src, overlay / top, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, overlay / top)
    for f in sorted(overlay.rglob("*.so")):
        if has_debug_info(f):
            subprocess.run(["strip", "--strip-debug", str(f)], check=True)
    (overlay / ".done").write_text("\n".join(tops) + "\n")
    return overlay


def traced_pids(root):
    """The pids of root's process tree that callgrind traces (callgrind_control lists them)."""
    listing = subprocess.run(["callgrind_control"], capture_output=True, text=True,
                             timeout=120).stdout
    traced = {int(p) for p in re.findall(r"^PID (\d+)", listing, re.M)}
    return sorted(traced & set(proc_tree(root)))


def h2load_exact(port, workload, n, conns, streams, tls, proto):
    """`n` requests of `workload` by h2load (-n, over `conns` new connections of `streams`
    concurrent streams each; h2c with prior knowledge, or ALPN h2 over TLS), unpinned beside a
    server under valgrind; then the exact status and body once with curl (check_h2). Returns the
    requests h2load counted as succeeded; RuntimeError when any failed, errored, timed out, was
    not 2xx or spoke another protocol (parse_h2load), AssertionError for a wrong body."""
    argv = ["h2load", "-t1", f"-n{n}", f"-c{conns}", f"-m{streams}"]
    if tls:
        argv.append("--npn-list=h2")
    p = subprocess.run(argv + [h2_url(workload, port, tls)], capture_output=True, text=True,
                       timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"h2load failed ({p.returncode}): {(p.stdout + p.stderr)[-600:]}")
    res = parse_h2load(p.stdout, proto)
    check_h2(workload, port, tls)
    return res["requests"]


def callgrind_server(name, workload, n, conns, outdir, tls=False, streams=0):
    """One server under callgrind (its whole process tree, children included) serving `workload`:
    after a warm-up, each phase between a zeroing and a dump of every traced process; per phase
    the exact answers and the instructions summed over the processes' dumps. `tls`: the clients
    speak TLS (each connection handshaken in the warm-up: the phases count the record layer).
    An HTTP/2 server (SERVERS[name].h2) is driven by h2load with `streams` concurrent streams a
    connection (h2load_exact): the warm-up and the phase each open their `conns` connections, so
    over TLS the phase counts their handshakes too (spread over `n` requests)."""
    spec = WORKLOADS[workload]
    out_file = outdir / f"callgrind-{name}.out"
    wrap = ["valgrind", "--tool=callgrind", "--trace-children=yes", "--compress-strings=no",
            "--compress-pos=no", f"--callgrind-out-file={out_file}.%p"]
    overlay = [nodebug_overlay(PEERS_VENV)] if SERVERS[name].kind == "peer" else []
    try:
        # Not pinned: valgrind does not follow taskset's exec into the server.
        srv = start_traced(name, outdir, wrap, 180, pin=False, app=spec["app"],
                           pythonpath=overlay)
    except RuntimeError as exc:
        return {"server": name, "ok": False, "error": f"did not start: {exc}", "phases": []}
    expect = spec["expect"]
    phases, pids = [], []
    proto = SERVERS[name].h2
    with srv:
        c = None if proto else Conn(srv.port, timeout=60, tls=tls)
        req = c.request_bytes(spec["method"], spec["path"], spec["body"]) if c else b""
        if proto:
            h2load_exact(srv.port, workload, CALLGRIND_WARMUP, conns, streams, tls, proto)
            run = [(f"{conns} connection{'s' if conns != 1 else ''} of {streams} stream"
                    f"{'s' if streams != 1 else ''} (h2load)", n,
                    lambda: h2load_exact(srv.port, workload, n, conns, streams, tls, proto))]
        elif conns == 1:
            # warm-up: imports, caches, the first allocations
            exact_sequential(c, req, CALLGRIND_WARMUP, expect)
            run = [("sequential on one connection", n,
                    lambda: exact_sequential(c, req, n, expect)),
                   (f"pipelined {PIPELINE_DEPTH} per write", n // PIPELINE_DEPTH * PIPELINE_DEPTH,
                    lambda: exact_pipelined(c, req, n // PIPELINE_DEPTH, expect))]
        else:
            c.close()
            socks = open_conns(srv.port, conns, 60, tls)
            exact_concurrent(srv.port, req, CALLGRIND_WARMUP, conns, expect, socks=socks)
            run = [(f"{conns} connections, each a closed loop", n,
                    lambda: exact_concurrent(srv.port, req, n, conns, expect, socks=socks))]
        pids = traced_pids(srv.proc.pid)
        for pid in pids:
            subprocess.run(["callgrind_control", "-z", str(pid)], check=True, timeout=120,
                           capture_output=True)
        for label, expected, phase in run:
            good = phase()
            for pid in pids:
                subprocess.run(["callgrind_control", "-d", str(pid)], check=True, timeout=120,
                               capture_output=True)
            phases.append({"phase": label, "expected": expected, "requests": good})
        if c is not None and conns == 1:
            c.close()
        elif not proto:
            close_conns(socks)
    for i, ph in enumerate(phases, 1):
        irs = [callgrind_ir(f"{out_file}.{pid}.{i}") for pid in pids]
        ir = sum(irs) if irs and None not in irs else None
        ph.update(ir=ir, processes=len(pids),
                  ir_per_request=ir / ph["requests"] if ir and ph["requests"] else None,
                  ok=ir is not None and ph["requests"] == ph["expected"])
    return {"server": name, "ok": bool(phases) and all(ph["ok"] for ph in phases),
            "phases": phases}


def callgrind(n, servers=("skirr",), workload="raw_get", conns=1, tls=False, streams=0):
    """Instructions per request in each server's whole process tree (Python, C, libc; not the
    kernel) under callgrind: deterministic, unlike timings on a noisy machine, so a hot-path
    change shows its cost as a difference of counts, and two servers running the same app compare
    by what they execute. Phases, each dumped separately after a warm-up of CALLGRIND_WARMUP
    requests: with one connection, `n` sequential requests of `workload` on one keep-alive
    connection, then `n` more as batches of PIPELINE_DEPTH pipelined requests; with `conns` > 1,
    `n` requests over `conns` closed-loop connections. Prints one line per server and phase, and
    each peer's count over skirr's; 1 if a phase lacks exact answers or a count. HTTP/2 servers
    (`servers` named -h2c or -h2): one phase of `n` requests by h2load over `conns` connections of
    `streams` streams each (callgrind_server)."""
    outdir = new_run_dir("callgrind")
    results, rc = [], 0
    for name in servers:
        r = callgrind_server(name, workload, n, conns, outdir, tls, streams)
        results.append(r)
        rc |= not r["ok"]
        if r.get("error"):
            print(f"{name}: {r['error']}")
        for ph in r["phases"]:
            per = ph["ir_per_request"]
            print(f"{name} {workload}, {ph['phase']}: {ph['requests']}/{ph['expected']} exact "
                  f"responses, {per if per else float('nan'):,.0f} instructions per request "
                  f"({ph['processes']} traced process{'es' if ph['processes'] != 1 else ''})"
                  + ("" if ph["ok"] else " FAIL"))
    base = {ph["phase"]: ph["ir_per_request"] for ph in results[0]["phases"]}
    for r in results[1:]:
        for ph in r["phases"]:
            b = base.get(ph["phase"])
            if b and ph["ir_per_request"]:
                print(f"{r['server']} over {results[0]['server']}, {ph['phase']}: "
                      f"{ph['ir_per_request'] / b:.3f}")
    (outdir / "callgrind.json").write_text(json.dumps(
        {"commit": git_commit(), "workload": workload, "n": n, "conns": conns, "tls": tls,
         "streams": streams, "servers": results}, indent=1))
    print(f"dumps in {outdir.relative_to(ROOT)} (callgrind_annotate <dump> for the profile)")
    return rc
