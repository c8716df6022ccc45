"""The churn rows' profile (issue 37 item 2): where skirr's CPU goes when every request is a new
connection, from `perf record` on skirr's process during one extra churn run per workload.

Owns: whether perf can record here and how (`probe`: the sampling event, cpu-clock when the
machine exposes no hardware PMU; DWARF call graphs, frame pointers when DWARF cannot record), the
profiled run (`profile_churn`: skirr started and warmed up as a churn row, perf attached to its
process for wrk's measured window, the perf.data and its `perf script` text kept in the run
folder), and the classification of the samples (`classify`, `shares`): each sample of skirr's
process, user and kernel, counted once in one of CLASSES by its call stack, and the top symbols.

Never: counts the profiled run in the churn rows' CPU figures (the rounds are measured without
perf, in scale.py), judges a share (the profile is a report, not a target), or renders markdown
(report.py does, from `shares`' figures).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

from .env import describe
from .measure import WRK_ERRORS, run_wrk
from .peers import Server
from .workloads import WORKLOADS, check_workload

FREQ = 999  # samples per second of the process's CPU time (perf record -F)
DWARF_STACK = 16384  # bytes of user stack copied per sample (--call-graph dwarf,N)
ATTACH_S = 0.5  # seconds between starting perf and starting wrk (perf attached by then)

# The classes, in the report's order: (key, what it holds).
CLASSES = (
    ("accept", "the accept path: accept4 and the kernel work under it, reactor_accept, tp_new, "
               "the handler's open (sk_http1_open), epoll_ctl ADD (ep_insert)"),
    ("close", "the close path: close and shutdown and the kernel's TCP teardown under them "
              "(__fput, tcp_close, task_work_run), epoll_ctl DEL (ep_remove), the transport's "
              "linger, close, reap and free and the handler's closed and release"),
    ("request", "request handling: the rest of skirr's C (read, parse, the ASGI exchange, "
                "respond), with the libc it calls"),
    ("python", "Python and the app: libpython, the interpreter, uvloop and the other extension "
               "modules (a user-space sample with no known frame counts here too)"),
    ("kernel", "other kernel work: the reads, writes and epoll_wait of requests and responses, "
               "softirq and network processing, not under the accept and close paths"),
)
# A sample is in the accept or close path when one of its frames (kernel or user) is one of
# these; the frame nearest the leaf decides (close() in an accept's error path counts as close).
ACCEPT_SYMS = frozenset({
    # kernel
    "__x64_sys_accept4", "__x64_sys_accept", "__sys_accept4", "__sys_accept4_file", "do_accept",
    "ep_insert",
    # libc and skirr (src/ext/sk_transport.c, sk_http1.c)
    "accept4", "accept", "reactor_accept", "tp_new", "sk_http1_open",
})
CLOSE_SYMS = frozenset({
    # kernel
    "__x64_sys_close", "__x64_sys_shutdown", "__sys_shutdown", "__fput", "____fput",
    "task_work_run", "sock_close", "inet_release", "tcp_close", "__tcp_close",
    "inet_csk_destroy_sock", "tcp_v4_destroy_sock", "tcp_done", "tcp_fin", "tcp_time_wait",
    "tcp_send_fin", "ep_remove", "__ep_remove", "eventpoll_release_file", "eventpoll_release",
    # libc and skirr
    "close", "shutdown", "tp_closed", "tp_linger", "tp_peer_eof", "tp_free", "reap",
    "sk_transport_close", "plain_shutdown", "h1_closed", "h1_release",
})
TOP = 10  # symbols listed in the report
IRQ_NOTE = ("the timer cannot fire while the kernel has interrupts off, so that time is "
            "sampled where they are turned back on (`_raw_spin_unlock_irqrestore`), within the "
            "same path")

_HEAD = re.compile(r"^(?P<comm>\S.*?)\s+(?P<pid>\d+)/(?P<tid>\d+)\s")
_FRAME = re.compile(r"^\s+(?P<addr>[0-9a-f]+) (?P<sym>.+?)(?:\+0x[0-9a-f]+)? \((?P<dso>.*)\)$")


def parse_script(text):
    """The samples of `perf script -F comm,pid,tid,period,event,ip,sym,symoff,dso` text: a list
    of (pid, frames), frames leaf first, each (symbol, dso, inlined), the dso of an inlined frame
    being its caller's at the same address ("[kernel.kallsyms]" for the kernel's)."""
    samples, cur = [], None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            m = _HEAD.match(line)
            cur = (int(m.group("pid")), []) if m else None
            if cur is not None:
                samples.append(cur)
            continue
        m = _FRAME.match(line)
        if cur is None or not m:
            continue
        cur[1].append([m.group("sym"), m.group("dso"), m.group("addr")])
    out = []
    for pid, raw in samples:
        frames = []
        for i, (sym, dso, addr) in enumerate(raw):
            inlined = dso == "inlined"
            if inlined:  # the real frame at this address follows
                dso = next((d for s, d, a in raw[i + 1:] if a == addr and d != "inlined"), "")
            frames.append((sym, dso, inlined))
        out.append((pid, frames))
    return out


def is_kernel(dso):
    return dso.startswith("[kernel")


def is_skirr(dso):
    return "skirr/_native" in dso


def is_python(dso):
    """libpython, the python binary, or an extension module (uvloop, _asyncio, pydantic_core)."""
    name = os.path.basename(dso)
    return name.startswith("libpython") or name.startswith("python") or ".cpython-" in name \
        or "/lib-dynload/" in dso


def norm(sym, dso):
    """A frame's symbol as ACCEPT_SYMS and CLOSE_SYMS name it: libc's aliases (__GI___close,
    __close) as the call (close)."""
    if is_kernel(dso) or "libc" not in os.path.basename(dso):
        return sym
    if sym.startswith("__GI_"):
        sym = sym[len("__GI_"):]
    return sym.lstrip("_")


def classify(frames):
    """One sample's class (a CLASSES key) from its frames, leaf first: the nearest frame to the
    leaf in ACCEPT_SYMS or CLOSE_SYMS decides; else a kernel leaf is "kernel"; else the nearest
    user frame in skirr's module is "request", in Python's (is_python) "python"; none: "python"."""
    for sym, dso, _ in frames:
        name = norm(sym, dso)
        if name in ACCEPT_SYMS:
            return "accept"
        if name in CLOSE_SYMS:
            return "close"
    if frames and is_kernel(frames[0][1]):
        return "kernel"
    for sym, dso, _ in frames:
        if is_skirr(dso):
            return "request"
        if is_python(dso):
            return "python"
    return "python"


def dso_name(dso):
    """A dso's short name: "kernel", "libc", "libpython3.11", "skirr/_native", "uvloop/loop"."""
    if is_kernel(dso):
        return "kernel"
    name = os.path.basename(dso)
    if ".cpython-" in name:
        return f"{os.path.basename(os.path.dirname(dso))}/{name.split('.')[0]}"
    return name.split(".so")[0] or "?"


def shares(text, pids=None):
    """The profile's figures from `perf script` text (samples of `pids` only, when given):
    {"samples", "counts": {class: samples}, "shares": {class: fraction of the samples}, "top":
    [[symbol, dso short name, fraction], ...] the TOP leaf symbols (the function holding the
    sampled address, as perf report's Symbol: an inlined frame's caller), most first, ties by
    name}."""
    counts, leaves, n = Counter(), Counter(), 0
    for pid, frames in parse_script(text):
        if pids is not None and pid not in pids:
            continue
        n += 1
        counts[classify(frames)] += 1
        leaf = next(((s, d) for s, d, inl in frames if not inl), ("[unknown]", ""))
        leaves[(leaf[0], dso_name(leaf[1]) if leaf[1] else "?")] += 1
    top = sorted(leaves.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]
    return {"samples": n, "counts": {k: counts[k] for k, _ in CLASSES},
            "shares": {k: counts[k] / n if n else None for k, _ in CLASSES},
            "top": [[s, d, c / n] for (s, d), c in top]}


def _try_record(argv_extra):
    """perf record with `argv_extra` on `sleep 0.2`: "" when it recorded samples, else why not."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "probe.data"
        try:
            p = subprocess.run(["perf", "record", "-q", "-o", str(data), *argv_extra, "--",
                                "sleep", "0.2"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return describe(exc)
        if p.returncode != 0 or not data.exists():
            return (p.stderr or p.stdout).strip()[-300:] or f"exit status {p.returncode}"
    return ""


def probe():
    """How perf records here: {"ok", "event", "call_graph" ("dwarf,N" or "fp"), "note" (what fell
    back and why), "error" (when it cannot record at all)}. The event is cpu-clock (a software
    timer) when the machine has no hardware PMU (/sys/bus/event_source/devices/cpu absent, as
    in most VMs), else cycles; DWARF call graphs first (skirr and libpython are built without
    frame pointers: only DWARF unwinds through them and names inlined frames), frame pointers
    when DWARF cannot record."""
    hw = Path("/sys/bus/event_source/devices/cpu").exists()
    event = "cycles" if hw else "cpu-clock"
    notes = [] if hw else ["cpu-clock samples (a timer), as this machine exposes no hardware "
                           "PMU (/sys/bus/event_source/devices/cpu is absent)"]
    why = _try_record(["-e", event])
    if why and hw:
        notes.append(f"cpu-clock samples (a timer), as cycles could not record ({why})")
        event, why = "cpu-clock", _try_record(["-e", "cpu-clock"])
    if why:
        return {"ok": False, "error": f"perf cannot record here: {why}", "event": None,
                "call_graph": None, "note": "; ".join(notes)}
    if event == "cpu-clock":
        notes.append(IRQ_NOTE)
    cg = f"dwarf,{DWARF_STACK}"
    why = _try_record(["-e", event, "--call-graph", cg])
    if why:
        notes.append(f"frame-pointer call graphs: DWARF could not record ({why}); stacks stop "
                     "at the first function built without frame pointers")
        cg = "fp"
        why = _try_record(["-e", event, "--call-graph", cg])
        if why:
            notes.append(f"no call graphs: frame pointers could not record either ({why}): "
                         "samples classified by their leaf only")
            cg = None
    return {"ok": True, "error": None, "event": event, "call_graph": cg,
            "note": "; ".join(notes)}


def profile_churn(wl, conns, cfg, how, outdir, tag):
    """One profiled churn run of skirr: started pinned and checked as a churn row, warmed up
    (cfg["warmup"] s of wrk), then perf record (`how`: probe()'s) attached to its processes for
    wrk's cfg["duration"] s measured window, the exact answer checked after. perf.data and its
    `perf script` text are kept in `outdir` (perf-<wl>.data, perf-<wl>.txt). Returns {"workload",
    "conns", "ok", "error", "event", "call_graph", "freq", "rps" (wrk's, under perf: not a
    figure of the rows), "data", "script", and shares()' figures}."""
    row = {"server": "skirr", "workload": wl, "conns": conns, "ok": False, "error": None,
           "event": how["event"], "call_graph": how["call_graph"], "freq": FREQ}
    data, script = Path(outdir) / f"perf-{wl}.data", Path(outdir) / f"perf-{wl}.txt"
    with Server("skirr", WORKLOADS[wl]["app"], Path(outdir) / "logs", tag) as srv:
        perf = None
        try:
            srv.wait_ready(lambda port: check_workload(wl, port, False))
            if cfg["warmup"]:
                run_wrk(wl, srv.port, conns, cfg["warmup"], outdir)
            pids = srv.pids()
            cg = ["--call-graph", how["call_graph"]] if how["call_graph"] else []
            perf = subprocess.Popen(
                ["perf", "record", "-q", "-e", how["event"], "-F", str(FREQ), *cg, "-p",
                 ",".join(map(str, pids)), "-o", str(data)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            time.sleep(ATTACH_S)
            if perf.poll() is not None:
                raise RuntimeError(f"perf record exited ({perf.returncode}): "
                                   f"{perf.stdout.read()[-300:]}")
            res = run_wrk(wl, srv.port, conns, cfg["duration"], outdir)
            perf.send_signal(signal.SIGINT)
            out, _ = perf.communicate(timeout=120)
            if perf.returncode not in (0, -signal.SIGINT):
                raise RuntimeError(f"perf record failed ({perf.returncode}): {out[-300:]}")
            check_workload(wl, srv.port, False)
            errors = {k: res[k] for k in WRK_ERRORS}
            if sum(errors.values()):
                raise RuntimeError(f"wrk reported errors {errors}")
            row["rps"] = res["requests"] / (res["duration_us"] / 1e6)
            p = subprocess.run(["perf", "script", "-i", str(data), "--inline", "-F",
                                "comm,pid,tid,period,event,ip,sym,symoff,dso"],
                               capture_output=True, text=True, timeout=900)
            if p.returncode != 0:
                raise RuntimeError(f"perf script failed ({p.returncode}): {p.stderr[-300:]}")
            script.write_text(p.stdout)
            row.update(shares(p.stdout, set(pids)), data=data.name, script=script.name)
            if not row["samples"]:
                raise RuntimeError("perf recorded no sample of skirr's process")
            row["ok"] = True
        except Exception as exc:  # noqa: BLE001
            row["error"] = describe(exc)
        finally:
            if perf is not None and perf.poll() is None:
                perf.kill()
                perf.wait()
    return row
