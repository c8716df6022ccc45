#!/usr/bin/env python3
"""skirr's benchmark harness: skirr beside its peers and the machine's limit (issue 6).

    run.py matrix --profile quick|full [--summary bench/RESULTS.md]   throughput, fixed rate, streaming
    run.py syscalls [--servers skirr,limit-c]                         the syscall gate
    run.py setup [--servers ...]                                      install peers, build the limit

Every server serves the same app file (bench/apps) on the same base interpreter and uvloop, one
worker, access log off, with the server and all its threads pinned to CPU 0 (`taskset -c 0`) and
the load generator (`wrk -t1`, `h2load -t1`) and this harness pinned to CPU 1. Status and exact
body are checked before and after every run; a socket error, timeout or non-2xx fails the run.
Servers run in a fresh random order for every row of every round, and a peer's ratio to skirr is
taken within the same round. Only the standard library is used here.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
APPS = BENCH / "apps"
BUILD = BENCH / "build"
RESULTS = BENCH / "results"
LEVERS = BENCH / "LEVERS.md"  # hand-written: the hot-path levers tried, kept or rejected, and why
SKIRR_VENV = Path(os.environ.get("SKIRR_VENV", ROOT / ".venv")).absolute()
PEERS_VENV = Path(os.environ.get("BENCH_PEERS_VENV", BENCH / ".venv-peers"))
PEERS_FILE = BENCH / "peers.txt"
SERVER_CPU = "0"
CLIENT_CPU = "1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

sys.path.insert(0, str(APPS))
import raw_apps  # noqa: E402  (the expected bodies come from the apps themselves)

HELLO = raw_apps.HELLO
BIG = raw_apps.BIG
POST_BODY = b"0123456789abcdef" * 256  # 4 KiB, the same bytes the wrk script sends
JSON_BODY = b'{"id":1,"name":"widget","price":9.99,"tags":["a","b"]}'
PIPELINE_DEPTH = 16
PIPELINE_BATCHES = 100  # the syscall gate's pipelined phase: batches of PIPELINE_DEPTH requests

# name -> app (module:attr in bench/apps), request path, method, request body, exact response body
WORKLOADS = {
    "raw_get": dict(app="raw_apps:raw", path="/", method="GET", body=b"", expect=HELLO),
    "post_4k": dict(app="raw_apps:echo", path="/echo", method="POST", body=POST_BODY, expect=POST_BODY),
    "get_64k": dict(app="raw_apps:big", path="/64k", method="GET", body=b"", expect=BIG),
    "fastapi_json": dict(app="fastapi_json:app", path="/json", method="GET", body=b"", expect=JSON_BODY),
    "pipelined_get": dict(app="raw_apps:raw", path="/", method="GET", body=b"", expect=HELLO,
                          pipeline=PIPELINE_DEPTH),
}
STREAM_APP = "raw_apps:stream"
STREAM_EXPECT = raw_apps.STREAM_FIRST + raw_apps.STREAM_LAST

PROFILES = {
    # <= 5 minutes, CI smoke test of the harness; no pass/fail on speed.
    "quick": dict(
        servers=["skirr", "uvicorn-httptools", "limit-c"],
        rows=[("raw_get", 64), ("post_4k", 64), ("fastapi_json", 64)],
        rounds=3, duration=3, warmup=1,
        fixed_rate=[("raw_get", 64)], fixed_pcts=[50], fixed_duration=3,
        stream_samples=10, stream_rounds=1,
    ),
    "full": dict(
        servers=["skirr", "uvicorn-httptools", "uvicorn-h11", "granian", "hypercorn", "peregrine",
                 "weft", "gunicorn-uvicorn", "limit-c", "nginx"],
        rows=[("raw_get", 1), ("raw_get", 16), ("raw_get", 64), ("raw_get", 256),
              ("post_4k", 64), ("post_4k", 256), ("get_64k", 64), ("get_64k", 256),
              ("fastapi_json", 64), ("fastapi_json", 256),
              ("pipelined_get", 64), ("pipelined_get", 256)],
        rounds=5, duration=5, warmup=1,
        fixed_rate=[("raw_get", 64), ("fastapi_json", 64)], fixed_pcts=[25, 50, 75],
        fixed_duration=8,
        stream_samples=20, stream_rounds=3,
    ),
}


def log(*args):
    print(f"[bench {time.strftime('%H:%M:%S')}]", *args, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# Tools and environment


DEBIAN_TOOLS = {"wrk": "wrk", "h2load": "nghttp2-client", "nginx": "nginx-light",
                "valgrind": "valgrind", "callgrind_control": "valgrind",
                "strace": "strace", "gcc": "gcc", "taskset": "util-linux"}


def tool_path(name):
    return shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None)


def ensure_tools(names):
    """Install the Debian packages of missing tools when root (the project installs what it uses)."""
    missing = [n for n in names if not tool_path(n)]
    if missing and os.geteuid() == 0 and shutil.which("apt-get"):
        pkgs = sorted({DEBIAN_TOOLS[n] for n in missing})
        log("installing", " ".join(pkgs))
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *pkgs]
        if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], env=env, stdout=subprocess.DEVNULL)
            subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL)
    return {n: tool_path(n) for n in names}


def run_text(argv, **kw):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60, **kw)
        return (p.stdout + p.stderr).strip()
    except Exception as exc:  # noqa: BLE001
        return f"unavailable ({exc})"


def base_python():
    """The interpreter the skirr venv was made from (the peers' venv is made from the same)."""
    cfg = SKIRR_VENV / "pyvenv.cfg"
    for line in cfg.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "executable":
            return value.strip()
    return str(Path(os.path.realpath(SKIRR_VENV / "bin" / "python")))


def interp_identity(python):
    code = "import sys,os; print(sys.version.split()[0], os.path.realpath(sys._base_executable))"
    return run_text([python, "-c", code])


def git_commit():
    rev = run_text(["git", "-C", str(ROOT), "rev-parse", "HEAD"])
    dirty = run_text(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"])
    return rev + (" (work tree modified)" if dirty else "")


def machine_info():
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gov = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    return {
        "cpu": model, "cores": os.cpu_count(), "kernel": platform.release(),
        "os": run_text(["sh", "-c", ". /etc/os-release; echo $PRETTY_NAME"]),
        "memory_gib": round(os.sysconf("SC_PHYS_PAGES") * PAGE / 2**30, 1),
        "governor": gov.read_text().strip() if gov.exists() else "n/a (no cpufreq)",
        "loadavg_at_start": Path("/proc/loadavg").read_text().split()[:3],
    }


# ----------------------------------------------------------------------------------------------
# Peers: a separate venv from the same base interpreter, app dependencies pinned to the skirr venv's


def read_peers_file():
    peers = {}
    for line in PEERS_FILE.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, reqs = line.partition(":")
            peers[name.strip()] = reqs.split()
    return peers


def ensure_peers(groups, reinstall=False):
    """Install each requirement group separately; a failure is recorded, never fatal."""
    state_file = PEERS_VENV / "bench-state.json"
    freeze = subprocess.run([str(SKIRR_VENV / "bin" / "python"), "-m", "pip", "freeze"],
                            capture_output=True, text=True).stdout
    constraints = "\n".join(l for l in freeze.splitlines()
                            if l and not l.lower().startswith(("skirr", "-e", "#")))
    base = base_python()
    base_key = hashlib.sha256((base + "\n" + constraints).encode()).hexdigest()
    state = {}
    if state_file.exists():
        state = json.loads(state_file.read_text())
    if state.get("base_key") != base_key or not (PEERS_VENV / "bin" / "python").exists():
        log(f"creating {PEERS_VENV} from {base}")
        shutil.rmtree(PEERS_VENV, ignore_errors=True)
        subprocess.run([base, "-m", "venv", str(PEERS_VENV)], check=True)
        state = {"base_key": base_key, "groups": {}}
    cfile = PEERS_VENV / "constraints.txt"
    cfile.write_text(constraints + "\n")
    pip = [str(PEERS_VENV / "bin" / "python"), "-m", "pip", "install", "-q", "-c", str(cfile)]
    if "app-deps" not in state["groups"]:
        p = subprocess.run(pip + ["fastapi", "pydantic", "uvloop"], capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit("bench: could not install the app's dependencies into the peers' venv:\n"
                             + p.stderr[-2000:])
        state["groups"]["app-deps"] = {"reqs": [], "ok": True, "error": ""}
    specs = read_peers_file()
    for group in groups:
        reqs = specs[group]
        have = state["groups"].get(group)
        if have and have["reqs"] == reqs and (have["ok"] or not reinstall):
            continue
        log(f"installing peer group {group}: {' '.join(reqs)}")
        p = subprocess.run(pip + reqs, capture_output=True, text=True)
        err = "\n".join(l for l in p.stderr.splitlines() if not l.startswith("WARNING: Location"))
        state["groups"][group] = {"reqs": reqs, "ok": p.returncode == 0,
                                  "error": "" if p.returncode == 0 else err[-1500:]}
        state_file.write_text(json.dumps(state, indent=1))
    state_file.write_text(json.dumps(state, indent=1))
    return state["groups"]


def pip_versions(python):
    out = subprocess.run([python, "-m", "pip", "list", "--format", "json"],
                         capture_output=True, text=True).stdout
    try:
        return {d["name"].lower(): d["version"] for d in json.loads(out)}
    except ValueError:
        return {}


def build_limit():
    BUILD.mkdir(parents=True, exist_ok=True)
    exe = BUILD / "limit_http"
    src = BENCH / "limit_http.c"
    if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        cc = os.environ.get("CC", "cc")
        subprocess.run([cc, "-O2", "-Wall", "-Wextra", "-o", str(exe), str(src)], check=True)
    return exe


NGINX_CONF = """\
worker_processes 1;
daemon off;
user root;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    sendfile on;
    keepalive_requests 100000000;
    keepalive_timeout 75s;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location = /json {{ default_type application/json; return 200 '{json}'; }}
        location = /64k {{ default_type application/octet-stream; alias {tmp}/64k.bin; }}
        location / {{ default_type text/plain; return 200 'Hello, world!'; }}
    }}
}}
"""


# ----------------------------------------------------------------------------------------------
# Servers


def _py(venv):
    return str(venv / "bin" / "python")


def skirr_argv(app, port):
    return [_py(SKIRR_VENV), "-m", "skirr", app, "--app-dir", str(APPS), "--loop", "uvloop",
            "--lifespan", "off", "--no-access-log", "--log-level", "warning", "--host", "127.0.0.1",
            "--port", str(port)]


def uvicorn_argv(http):
    def argv(app, port):
        return [_py(PEERS_VENV), "-m", "uvicorn", app, "--app-dir", str(APPS), "--loop", "uvloop",
                "--http", http, "--lifespan", "off", "--no-access-log", "--log-level", "warning",
                "--host", "127.0.0.1", "--port", str(port)]
    return argv


def granian_argv(app, port):
    # asginl = the ASGI interface without lifespan; one worker, one runtime thread.
    return [_py(PEERS_VENV), "-m", "granian", "--interface", "asginl", "--loop", "uvloop",
            "--workers", "1", "--runtime-threads", "1", "--blocking-threads", "1", "--http", "1",
            "--no-ws", "--no-access-log", "--log-level", "warning", "--working-dir", str(APPS),
            "--host", "127.0.0.1", "--port", str(port), app]


def hypercorn_argv(app, port):
    return [_py(PEERS_VENV), "-m", "hypercorn", "--worker-class", "uvloop", "--workers", "1",
            "--log-level", "warning", "--bind", f"127.0.0.1:{port}", app]


def peregrine_argv(app, port):
    return [_py(PEERS_VENV), "-m", "peregrine", "--workers", "1", "--no-lifespan", "--no-http2",
            "--log-level", "warning", "--python-path", str(APPS), "--host", "127.0.0.1",
            "--port", str(port), app]


def weft_argv(app, port):
    return [_py(PEERS_VENV), "-m", "weft", app, "--workers", "1", "--no-lifespan", "--app-dir",
            str(APPS), "--log-level", "warning", "--host", "127.0.0.1", "--port", str(port)]


def gunicorn_argv(app, port):
    return [_py(PEERS_VENV), "-m", "gunicorn", "--workers", "1", "--worker-class",
            "uvicorn_worker.UvicornWorker", "--log-level", "warning", "--chdir", str(APPS),
            "--bind", f"127.0.0.1:{port}", app]


def limit_argv(app, port):
    return [str(BUILD / "limit_http"), str(port)]


def nginx_argv(app, port, tmp):
    tmp = Path(tmp)
    (tmp / "64k.bin").write_bytes(BIG)
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp, port=port, json=JSON_BODY.decode()))
    return [tool_path("nginx"), "-c", str(conf), "-e", str(tmp / "error.log")]


ALL_WORKLOADS = set(WORKLOADS) | {"streaming"}
# name -> (argv builder, peers.txt group or None, kind, workloads it serves)
SERVERS = {
    "skirr": (skirr_argv, None, "skirr", ALL_WORKLOADS),
    "uvicorn-httptools": (uvicorn_argv("httptools"), "uvicorn", "peer", ALL_WORKLOADS),
    "uvicorn-h11": (uvicorn_argv("h11"), "uvicorn", "peer", ALL_WORKLOADS),
    "granian": (granian_argv, "granian", "peer", ALL_WORKLOADS),
    "hypercorn": (hypercorn_argv, "hypercorn", "peer", ALL_WORKLOADS),
    "peregrine": (peregrine_argv, "peregrine", "peer", ALL_WORKLOADS),
    "weft": (weft_argv, "weft", "peer", ALL_WORKLOADS),
    "gunicorn-uvicorn": (gunicorn_argv, "gunicorn-uvicorn", "peer", ALL_WORKLOADS),
    "limit-c": (limit_argv, None, "limit", set(WORKLOADS)),
    "nginx": (nginx_argv, None, "limit", {"raw_get", "get_64k", "fastapi_json", "pipelined_get"}),
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_tree(root):
    """root and all its descendants (pids)."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def cpu_ticks(pids):
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total


def memory(pids):
    """(RSS bytes, PSS bytes) summed over pids."""
    rss = pss = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1]) * 1024
        except OSError:
            continue
    return rss, pss


def cpu0_busy():
    """(busy, steal) jiffies of CPU 0: busy = user+nice+system+irq+softirq; steal = taken by the
    hypervisor."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{SERVER_CPU} "):
            v = [int(x) for x in line.split()[1:]]
            return v[0] + v[1] + v[2] + v[5] + v[6], v[7]
    return 0, 0


def affinity_ok(pids):
    want = {int(SERVER_CPU)}
    for pid in pids:
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                if os.sched_getaffinity(int(tid)) != want:
                    return False
        except OSError:
            continue
    return True


class Server:
    def __init__(self, name, app, logdir, tag):
        self.name, self.app = name, app
        self.port = free_port()
        self.tmp = tempfile.mkdtemp(prefix=f"bench-{name}-")
        builder = SERVERS[name][0]
        argv = builder(app, self.port, self.tmp) if name == "nginx" else builder(app, self.port)
        self.argv = ["taskset", "-c", SERVER_CPU] + argv
        self.logpath = Path(logdir) / f"{tag}.log"
        self.logpath.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=str(APPS))
        env.pop("VIRTUAL_ENV", None)
        self._log = open(self.logpath, "wb")
        self.proc = subprocess.Popen(self.argv, cwd=APPS, env=env, stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def wait_ready(self, check, timeout=30.0):
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                check(self.port)
                return
            except ConnectionRefusedError:
                last = "connection refused"
            except Exception as exc:  # noqa: BLE001
                last = f"{type(exc).__name__}: {exc}"
                if "refused" not in str(exc).lower():
                    time.sleep(0.2)
            time.sleep(0.05)
        raise RuntimeError(f"not ready after {timeout:.0f}s ({last}): {self.log_tail()}")

    def pids(self):
        return proc_tree(self.proc.pid)

    def log_tail(self, n=1200):
        try:
            if not self._log.closed:
                self._log.flush()
            data = self.logpath.read_bytes()
        except OSError:
            return ""
        return data[-n:].decode(errors="replace").strip()

    def stop(self):
        if self.proc.poll() is None:
            # The main process first (a master stops its workers itself), then the whole group.
            for sig, wait, kill in ((signal.SIGINT, 8, os.kill), (signal.SIGTERM, 4, os.killpg),
                                    (signal.SIGKILL, 4, os.killpg)):
                try:
                    kill(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        # Whatever of its group outlived it (a worker), by the group we created.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# A minimal HTTP/1.1 client for the exact checks, streaming samples and the syscall gate


class Conn:
    def __init__(self, port, timeout=10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.t_first = None

    def close(self):
        self.sock.close()

    def _fill(self):
        data = self.sock.recv(262144)
        if not data:
            raise ConnectionError("connection closed by the server")
        if self.t_first is None:
            self.t_first = time.perf_counter()
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def read_response(self, on_body=None):
        """(status, headers, body); on_body(t) is called when the first body bytes arrive."""
        self.t_first = None if not self.buf else time.perf_counter()
        status_line = self._line()
        status = int(status_line.split()[1])
        headers = {}
        while True:
            line = self._line()
            if not line:
                break
            k, _, v = line.partition(b":")
            headers[k.strip().lower()] = v.strip()
        body = []
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    while self._line():
                        pass
                    break
                chunk = self._take(size)
                if on_body and not body:
                    on_body(time.perf_counter())
                body.append(chunk)
                self._take(2)
        else:
            n = int(headers.get(b"content-length", b"0"))
            if n:
                while not self.buf:
                    self._fill()
                if on_body:
                    on_body(time.perf_counter())
                body.append(self._take(n))
        return status, headers, b"".join(body)

    def request_bytes(self, method, path, body=b""):
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        if body:
            head += f"Content-Type: application/octet-stream\r\nContent-Length: {len(body)}\r\n"
        return head.encode() + b"\r\n" + body


def check_workload(wl, port):
    """Exact status and body over one keep-alive connection (and one pipelined batch)."""
    spec = WORKLOADS[wl]
    c = Conn(port)
    try:
        req = c.request_bytes(spec["method"], spec["path"], spec["body"])
        for _ in range(2):
            c.sock.sendall(req)
            status, _, body = c.read_response()
            if status != 200 or body != spec["expect"]:
                raise AssertionError(f"{wl}: status {status}, body {len(body)} bytes "
                                     f"{body[:60]!r} (expected {len(spec['expect'])} bytes)")
        n = spec.get("pipeline", 0)
        if n:
            c.sock.sendall(req * n)
            for i in range(n):
                status, _, body = c.read_response()
                if status != 200 or body != spec["expect"]:
                    raise AssertionError(f"{wl}: pipelined response {i}: status {status}, "
                                         f"body {body[:60]!r}")
    finally:
        c.close()


def check_stream(port):
    c = Conn(port)
    try:
        c.sock.sendall(c.request_bytes("GET", "/stream"))
        status, _, body = c.read_response()
        if status != 200 or body != STREAM_EXPECT:
            raise AssertionError(f"streaming: status {status}, body {body!r}")
    finally:
        c.close()


# ----------------------------------------------------------------------------------------------
# Load generators

LUA_REPORT = r"""
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,"write":%d,' ..
    '"status":%d,"timeout":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean))
end
"""
LUA_POST = """
wrk.method = "POST"
wrk.body = string.rep("0123456789abcdef", 256)
wrk.headers["Content-Type"] = "application/octet-stream"
"""
LUA_PIPELINE = """
local batch
init = function(args)
  local r = {}
  for i = 1, %d do r[i] = wrk.format(nil, nil) end
  batch = table.concat(r)
end
request = function() return batch end
""" % PIPELINE_DEPTH


def wrk_script(wl, outdir):
    path = Path(outdir) / f"wrk-{wl}.lua"
    if not path.exists():
        extra = {"post_4k": LUA_POST, "pipelined_get": LUA_PIPELINE}.get(wl, "")
        path.write_text(extra + LUA_REPORT)
    return path


def run_wrk(wl, port, conns, duration, outdir):
    """Run wrk pinned to the client CPU; returns its JSON summary plus its CPU seconds."""
    script = wrk_script(wl, outdir)
    url = f"http://127.0.0.1:{port}{WORKLOADS[wl]['path']}"
    argv = ["taskset", "-c", CLIENT_CPU, "wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency",
            "--timeout", "5s", "-s", str(script), url]
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        text = out.read().decode(errors="replace")
    m = re.search(r"^BENCHJSON (\{.*\})$", text, re.M)
    if p.returncode != 0 or not m:
        raise RuntimeError(f"wrk failed ({p.returncode}): {text[-600:]}")
    res = json.loads(m.group(1))
    res["wall_s"] = wall
    res["cpu_s"] = ru.ru_utime + ru.ru_stime
    return res


def run_h2load(wl, port, conns, rate, duration, outdir):
    """Fixed offered rate (h2load --rps is per client) with per-request log for percentiles."""
    spec = WORKLOADS[wl]
    logf = Path(outdir) / "h2load-last.log"
    logf.unlink(missing_ok=True)  # h2load appends to an existing log file
    url = f"http://127.0.0.1:{port}{spec['path']}"
    argv = ["taskset", "-c", CLIENT_CPU, "h2load", "--h1", "-t1", f"-c{conns}",
            f"--rps={rate / conns:.3f}", f"-D{duration}", "--warm-up-time=1", f"--log-file={logf}",
            url]
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = p.communicate(timeout=duration + 60)
    wall = time.perf_counter() - t0
    text = out.decode(errors="replace")
    lat, non2xx = [], 0
    for line in logf.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3:
            lat.append(int(parts[2]))
            if not parts[1].startswith("2"):
                non2xx += 1
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                  r"(\d+) errored, (\d+) timeout", text)
    if p.returncode != 0 or not m or not lat:
        raise RuntimeError(f"h2load failed ({p.returncode}): {text[-600:]}")
    lat.sort()

    def pct(q):
        return lat[min(len(lat) - 1, int(q * len(lat)))] / 1000.0
    return {"offered_rps": rate, "achieved_rps": len(lat) / duration, "requests": len(lat),
            "failed": int(m.group(5)), "errored": int(m.group(6)), "timeout": int(m.group(7)),
            "non2xx": non2xx, "p50_ms": pct(0.50), "p90_ms": pct(0.90), "p99_ms": pct(0.99),
            "p999_ms": pct(0.999), "max_ms": lat[-1] / 1000.0, "wall_s": wall}


class Sampler(threading.Thread):
    """Peak RSS/PSS of the server's process tree while it runs."""

    def __init__(self, pids, interval=0.5):
        super().__init__(daemon=True)
        self.pids, self.interval = pids, interval
        self.rss = self.pss = 0
        self.halt = threading.Event()

    def sample(self):
        rss, pss = memory(self.pids)
        self.rss, self.pss = max(self.rss, rss), max(self.pss, pss)

    def run(self):
        while not self.halt.wait(self.interval):
            self.sample()

    def stop(self):
        self.halt.set()
        self.join()
        self.sample()


# ----------------------------------------------------------------------------------------------
# Matrix


def measure_row(name, wl, conns, cfg, outdir, tag):
    spec = WORKLOADS[wl]
    row = {"server": name, "workload": wl, "conns": conns, "ok": False, "error": None}
    srv = Server(name, spec["app"], Path(outdir) / "logs", tag)
    try:
        srv.wait_ready(lambda port: check_workload(wl, port))
        row["pinned"] = affinity_ok(srv.pids())
        if cfg["warmup"]:
            w = run_wrk(wl, srv.port, conns, cfg["warmup"], outdir)
            if any(w[k] for k in ("connect", "read", "write", "status", "timeout")):
                raise RuntimeError(f"errors during warm-up: {w}")
        pids = srv.pids()
        sampler = Sampler(pids)
        sampler.sample()
        sampler.start()
        row["loadavg"] = Path("/proc/loadavg").read_text().split()[0]
        b0, c0, t0 = cpu0_busy(), cpu_ticks(pids), time.perf_counter()
        res = run_wrk(wl, srv.port, conns, cfg["duration"], outdir)
        c1, b1, t1 = cpu_ticks(pids), cpu0_busy(), time.perf_counter()
        sampler.stop()
        wall = t1 - t0
        server_cpu = (c1 - c0) / CLK_TCK
        errors = {k: res[k] for k in ("connect", "read", "write", "status", "timeout")}
        n = res["requests"]
        row.update(
            requests=n, rps=n / (res["duration_us"] / 1e6), errors=errors,
            # wrk's percentiles are wrong under pipelining: its coordinated-omission correction
            # adds samples below the recorded minimum, which percentile() never reaches (it
            # prints 0). Only pipelined runs are affected; their latency is not reported.
            p50_ms=None if spec.get("pipeline") else res["p50_us"] / 1000,
            p99_ms=None if spec.get("pipeline") else res["p99_us"] / 1000,
            max_ms=res["max_us"] / 1000,
            server_cpu_s=server_cpu, cpu_us_per_req=server_cpu / n * 1e6 if n else None,
            server_util=server_cpu / wall, gen_cpu=res["cpu_s"] / res["wall_s"],
            client_bound=res["cpu_s"] / res["wall_s"] >= 0.9,
            other_cpu0=max(0.0, (b1[0] - b0[0]) / CLK_TCK - server_cpu) / wall,
            steal_cpu0=(b1[1] - b0[1]) / CLK_TCK / wall,
            rss_mib=sampler.rss / 2**20, pss_mib=sampler.pss / 2**20,
        )
        check_workload(wl, srv.port)  # exact status and body after the run
        if sum(errors.values()):
            raise RuntimeError(f"wrk reported errors {errors}")
        if n == 0:
            raise RuntimeError("no request completed")
        row["ok"] = True
    except Exception as exc:  # noqa: BLE001
        row["error"] = f"{type(exc).__name__}: {exc}"[:1500]
    finally:
        srv.stop()
        tail = srv.log_tail(600)
        if tail:
            row["server_log_tail"] = tail
    return row


def measure_stream(name, samples, outdir, tag):
    out = {"server": name, "ok": False, "error": None}
    srv = Server(name, STREAM_APP, Path(outdir) / "logs", tag)
    try:
        srv.wait_ready(check_stream)
        c = Conn(srv.port)
        firsts, totals = [], []
        try:
            req = c.request_bytes("GET", "/stream")
            for i in range(samples + 1):
                got = []
                t0 = time.perf_counter()
                c.sock.sendall(req)
                status, _, body = c.read_response(on_body=got.append)
                t1 = time.perf_counter()
                if status != 200 or body != STREAM_EXPECT:
                    raise AssertionError(f"status {status} body {body!r}")
                if i:  # the first sample warms the connection and the app
                    firsts.append((got[0] - t0) * 1000)
                    totals.append((t1 - t0) * 1000)
        finally:
            c.close()
        check_stream(srv.port)
        out.update(ok=True, first_chunk_ms=statistics.median(firsts),
                   total_ms=statistics.median(totals), first_chunk_samples=firsts,
                   total_samples=totals)
    except Exception as exc:  # noqa: BLE001
        out["error"] = f"{type(exc).__name__}: {exc}"[:1500]
    finally:
        srv.stop()
    return out


def measure_fixed(name, wl, conns, rates, duration, outdir, tag):
    out = []
    srv = Server(name, WORKLOADS[wl]["app"], Path(outdir) / "logs", tag)
    try:
        srv.wait_ready(lambda port: check_workload(wl, port))
        for pct, rate in rates:
            r = {"server": name, "workload": wl, "conns": conns, "pct": pct, "ok": False,
                 "error": None}
            try:
                pids = srv.pids()
                c0, t0 = cpu_ticks(pids), time.perf_counter()
                res = run_h2load(wl, srv.port, conns, rate, duration, outdir)
                cpu = (cpu_ticks(pids) - c0) / CLK_TCK
                r.update(res)
                # The interval includes h2load's 1 s warm-up, so CPU/request is approximate.
                r["cpu_us_per_req"] = cpu / max(1, res["requests"]) * 1e6 * duration / (
                    time.perf_counter() - t0)
                check_workload(wl, srv.port)
                errs = res["failed"] + res["errored"] + res["timeout"] + res["non2xx"]
                if errs:
                    raise RuntimeError(f"h2load: {errs} failed/errored/timeout/non-2xx requests")
                r["ok"] = True
            except Exception as exc:  # noqa: BLE001
                r["error"] = f"{type(exc).__name__}: {exc}"[:800]
            out.append(r)
    except Exception as exc:  # noqa: BLE001
        out.append({"server": name, "workload": wl, "conns": conns, "pct": None, "ok": False,
                    "error": f"{type(exc).__name__}: {exc}"[:800]})
    finally:
        srv.stop()
    return out


def app_cpu(workloads, n):
    """The apps' own CPU per request, called directly (no network), pinned to the server CPU."""
    out = {}
    for wl in workloads:
        argv = ["taskset", "-c", SERVER_CPU, _py(SKIRR_VENV), str(Path(__file__)), "app-cpu",
                "--workload", wl, "--n", str(n)]
        p = subprocess.run(argv, capture_output=True, text=True)
        try:
            out[wl] = json.loads(p.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            out[wl] = {"error": (p.stdout + p.stderr)[-800:]}
    return out


def cmd_app_cpu(args):
    import asyncio
    import uvloop
    spec = WORKLOADS[args.workload]
    mod, _, attr = spec["app"].partition(":")
    app = getattr(__import__(mod), attr)
    body = spec["body"]
    scope0 = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.5"}, "http_version": "1.1",
        "method": spec["method"], "scheme": "http", "path": spec["path"],
        "raw_path": spec["path"].encode(), "query_string": b"", "root_path": "",
        "headers": [(b"host", b"127.0.0.1")] + (
            [(b"content-type", b"application/octet-stream"),
             (b"content-length", str(len(body)).encode())] if body else []),
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000), "state": {},
    }
    message = {"type": "http.request", "body": body, "more_body": False}
    sent = []

    async def receive():
        return message

    async def send(m):
        sent.append(m)

    async def run(k):
        for _ in range(k):
            scope = dict(scope0)
            scope["headers"] = list(scope0["headers"])
            scope["state"] = {}
            await app(scope, receive, send)
            sent.clear()

    async def main():
        await run(max(100, args.n // 10))  # warm-up
        got = []
        for _ in range(5):
            t0 = time.process_time()
            await run(args.n)
            got.append((time.process_time() - t0) / args.n * 1e6)
        return got

    samples = uvloop.run(main()) if hasattr(uvloop, "run") else asyncio.run(main())
    print(json.dumps({"us_per_req": statistics.median(samples), "samples": samples}))


def median(xs):
    return statistics.median(xs) if xs else None


def aggregate(runs, rounds):
    agg = {}
    for r in runs:
        agg.setdefault((r["workload"], r["conns"], r["server"]), []).append(r)
    out = {}
    for key, rs in agg.items():
        ok = [r for r in rs if r["ok"]]
        e = {}
        for r in rs:
            for k, v in (r.get("errors") or {}).items():
                e[k] = e.get(k, 0) + v
        out[key] = {
            "rounds": len(rs), "rounds_ok": len(ok), "failed": len(ok) != len(rs),
            "errors_first": next((r["error"] for r in rs if r["error"]), None),
            "rps": median([r["rps"] for r in ok]),
            "rps_min": min((r["rps"] for r in ok), default=None),
            "rps_max": max((r["rps"] for r in ok), default=None),
            "p99_ms": median([r["p99_ms"] for r in ok if r["p99_ms"] is not None]),
            "cpu_us_per_req": median([r["cpu_us_per_req"] for r in ok]),
            "rss_mib": max((r["rss_mib"] for r in ok), default=None),
            "pss_mib": max((r["pss_mib"] for r in ok), default=None),
            "errors": e, "gen_cpu": max((r["gen_cpu"] for r in ok), default=None),
            "client_bound": any(r["client_bound"] for r in ok),
            "server_util": median([r["server_util"] for r in ok]),
            "other_cpu0": max((r["other_cpu0"] for r in ok), default=None),
            "steal_cpu0": max((r["steal_cpu0"] for r in ok), default=None),
            "pinned": all(r.get("pinned", True) for r in ok),
        }
    return out


def compare(runs):
    """Per row and peer: ratios to skirr within each round, and whether every round agrees."""
    by = {}
    for r in runs:
        if r["ok"]:
            by[(r["workload"], r["conns"], r["round"], r["server"])] = r
    out = {}
    keys = {(w, c, s) for (w, c, _, s) in by if s != "skirr"}
    for w, c, s in sorted(keys):
        ratios, cpu_ratios, wins, losses, n = [], [], 0, 0, 0
        for (w2, c2, rnd, s2), r in by.items():
            if (w2, c2, s2) != (w, c, s) or (w, c, rnd, "skirr") not in by:
                continue
            k = by[(w, c, rnd, "skirr")]
            n += 1
            ratios.append(r["rps"] / k["rps"])
            cpu_ratios.append(r["cpu_us_per_req"] / k["cpu_us_per_req"])
            if k["client_bound"] or r["client_bound"]:  # compare CPU per request there
                better = k["cpu_us_per_req"] < r["cpu_us_per_req"]
            else:
                better = k["rps"] > r["rps"]
            wins += better
            losses += not better
        if not n:
            continue
        if wins == n:
            verdict = f"skirr ahead in {n}/{n}"
        elif losses == n:
            verdict = f"{s} ahead in {n}/{n}"
        else:
            verdict = f"mixed (skirr ahead in {wins}/{n})"
        out[(w, c, s)] = {"rounds": n, "rps_ratio": median(ratios), "rps_ratio_min": min(ratios),
                          "rps_ratio_max": max(ratios), "cpu_ratio": median(cpu_ratios),
                          "verdict": verdict}
    return out


def idle_memory(servers, outdir):
    out = {}
    for name in servers:
        try:
            srv = Server(name, WORKLOADS["raw_get"]["app"], Path(outdir) / "logs", f"idle-{name}")
        except Exception as exc:  # noqa: BLE001
            out[name] = {"ok": False, "error": str(exc)}
            continue
        try:
            srv.wait_ready(lambda port: check_workload("raw_get", port))
            time.sleep(0.5)
            rss, pss = memory(srv.pids())
            out[name] = {"ok": True, "rss_mib": rss / 2**20, "pss_mib": pss / 2**20,
                         "processes": len(srv.pids()), "pinned": affinity_ok(srv.pids())}
        except Exception as exc:  # noqa: BLE001
            out[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:1500]}
        finally:
            srv.stop()
    return out


def cmd_matrix(args):
    prof = dict(PROFILES[args.profile])
    for k in ("rounds", "duration", "warmup"):
        if getattr(args, k) is not None:
            prof[k] = getattr(args, k)
    servers = args.servers.split(",") if args.servers else prof["servers"]
    rows = prof["rows"]
    if args.workloads:
        keep = set(args.workloads.split(","))
        rows = [r for r in rows if r[0] in keep]
    if args.conns:
        cs = [int(x) for x in args.conns.split(",")]
        rows = sorted({(w, c) for w, _ in rows for c in cs}, key=lambda r: (list(WORKLOADS).index(r[0]), r[1]))
    if "skirr" not in servers:
        servers.insert(0, "skirr")
    for s in servers:
        if s not in SERVERS:
            raise SystemExit(f"unknown server {s}; known: {', '.join(SERVERS)}")
    os.sched_setaffinity(0, {int(CLIENT_CPU)})
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    random.seed(seed)

    started = datetime.datetime.now(datetime.timezone.utc)
    label = args.label or args.profile
    outdir = RESULTS / f"{started.strftime('%Y%m%d-%H%M%S')}-{label}"
    outdir.mkdir(parents=True, exist_ok=True)
    log(f"results in {outdir.relative_to(ROOT)}")

    tools = ensure_tools(["wrk", "h2load", "taskset", "gcc"] + (["nginx"] if "nginx" in servers else []))
    for t in ("wrk", "taskset"):
        if not tools[t]:
            raise SystemExit(f"bench: {t} is required and could not be installed")
    groups = sorted({SERVERS[s][1] for s in servers if SERVERS[s][1]})
    install = ensure_peers(groups, reinstall=args.reinstall) if groups else {}
    if "limit-c" in servers:
        build_limit()

    status = {}  # server -> why it is not measured
    for s in servers:
        g = SERVERS[s][1]
        if g and not install.get(g, {}).get("ok"):
            status[s] = "failed to install: " + install.get(g, {}).get("error", "?").strip()[-600:]
        if s == "nginx" and not tools.get("nginx"):
            status[s] = "nginx is not installed and could not be installed"

    meta = {
        "date": started.isoformat(timespec="seconds"), "profile": args.profile, "label": label,
        "commit": git_commit(), "machine": machine_info(),
        "interpreter": {"skirr": interp_identity(_py(SKIRR_VENV)),
                        "peers": interp_identity(_py(PEERS_VENV)) if groups else None},
        "versions": {"skirr-venv": {k: v for k, v in pip_versions(_py(SKIRR_VENV)).items()
                                    if k in ("skirr", "fastapi", "pydantic", "starlette", "uvloop")},
                     "peers-venv": {k: v for k, v in pip_versions(_py(PEERS_VENV)).items()
                                    if k in ("uvicorn", "httptools", "h11", "granian", "hypercorn",
                                             "peregrine-server", "weft-server", "gunicorn",
                                             "uvicorn-worker", "fastapi", "pydantic", "starlette",
                                             "uvloop")} if groups else {},
                     "wrk": run_text(["wrk", "-v"]).splitlines()[0],
                     "h2load": (run_text(["h2load", "--version"]).splitlines() or ["?"])[0],
                     "nginx": run_text([tools.get("nginx") or "nginx", "-v"]),
                     "cc": run_text([os.environ.get("CC", "cc"), "--version"]).splitlines()[0]},
        "config": {"servers": servers, "rows": rows, **{k: v for k, v in prof.items()
                                                          if k not in ("servers", "rows")}},
        "install": install, "not_measured": status, "seed": seed,
    }
    log("machine:", meta["machine"]["cpu"], "load", " ".join(meta["machine"]["loadavg_at_start"]))

    live = [s for s in servers if s not in status]
    # Idle memory, which doubles as a start-up check: a server that cannot start is not measured.
    log("idle memory / start check")
    idle = idle_memory(live, outdir)
    for s, r in idle.items():
        if not r["ok"]:
            status[s] = "failed to start: " + r["error"]
            log(f"  {s}: {status[s][:300]}")
    live = [s for s in live if s not in status]

    runs = []
    total = sum(1 for _ in range(prof["rounds"]) for w, _ in rows for s in live if w in SERVERS[s][3])
    done = 0
    for rnd in range(prof["rounds"]):
        for wl, conns in rows:
            order = [s for s in live if wl in SERVERS[s][3]]
            random.shuffle(order)
            for s in order:
                done += 1
                row = measure_row(s, wl, conns, prof, outdir, f"r{rnd}-{wl}-c{conns}-{s}")
                row["round"] = rnd
                runs.append(row)
                if row["ok"]:
                    log(f"[{done}/{total}] r{rnd} {wl} c{conns} {s}: {row['rps']:,.0f} req/s "
                        f"p99 {fmt(row['p99_ms'], '.2f')} ms cpu {row['cpu_us_per_req']:.1f} us/req "
                        f"gen {row['gen_cpu']:.0%} other/steal cpu0 {row['other_cpu0']:.0%}/"
                        f"{row['steal_cpu0']:.0%}")
                else:
                    log(f"[{done}/{total}] r{rnd} {wl} c{conns} {s}: FAILED {row['error'][:300]}")
                (outdir / "runs.json").write_text(json.dumps(runs, indent=1))

    agg = aggregate(runs, prof["rounds"])

    log("app CPU per request, called directly")
    appcpu = app_cpu(sorted({w for w, _ in rows}), args.app_n)

    fixed = []
    if prof["fixed_rate"] and tools.get("h2load") and not args.no_fixed:
        log("fixed-rate latency (h2load)")
        for wl, conns in prof["fixed_rate"]:
            order = [s for s in live if wl in SERVERS[s][3]]
            random.shuffle(order)
            for s in order:
                a = agg.get((wl, conns, s))
                if not a or not a["rps"]:
                    continue
                rates = [(p, a["rps"] * p / 100) for p in prof["fixed_pcts"]]
                rs = measure_fixed(s, wl, conns, rates, prof["fixed_duration"], outdir,
                                   f"fixed-{wl}-c{conns}-{s}")
                for r in rs:
                    log(f"  {wl} {s} {r.get('pct')}%: " + (
                        f"p99 {r['p99_ms']:.2f} ms at {r['achieved_rps']:,.0f}/{r['offered_rps']:,.0f} req/s"
                        if r["ok"] else f"FAILED {r['error'][:200]}"))
                fixed.extend(rs)

    streams = []
    if prof["stream_samples"] and not args.no_stream:
        log("streaming first chunk / total")
        for rnd in range(prof["stream_rounds"]):
            order = [s for s in live if "streaming" in SERVERS[s][3]]
            random.shuffle(order)
            for s in order:
                r = measure_stream(s, prof["stream_samples"], outdir, f"stream-r{rnd}-{s}")
                r["round"] = rnd
                streams.append(r)

    result = {"meta": meta, "idle": idle, "runs": runs, "app_cpu": appcpu, "fixed_rate": fixed,
              "streaming": streams}
    (outdir / "results.json").write_text(json.dumps(result, indent=1))
    report = render_report(result, agg, compare(runs), status)
    (outdir / "report.md").write_text(report)
    if args.summary:
        Path(args.summary).write_text(report)
        log(f"summary written to {args.summary}")
    print(report)
    log(f"results in {outdir.relative_to(ROOT)}")
    failed = [k for k, a in agg.items() if a["failed"] and k[2] == "skirr"]
    return 1 if failed else 0


def fmt(v, spec=",.0f", none="–"):
    return none if v is None else format(v, spec)


def render_report(result, agg, cmp, status):
    meta = result["meta"]
    m = meta["machine"]
    cfg = meta["config"]
    L = []
    L.append(f"# skirr benchmark ({meta['profile']})\n")
    L.append(f"- Date: {meta['date']}; commit {meta['commit']}")
    L.append(f"- Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}, "
             f"kernel {m['kernel']}, governor {m['governor']}; load average at start "
             f"{' '.join(m['loadavg_at_start'])}")
    L.append(f"- Interpreter: skirr venv {meta['interpreter']['skirr']}; peers' venv "
             f"{meta['interpreter']['peers']}")
    v = meta["versions"]
    L.append(f"- Versions: skirr venv {json.dumps(v['skirr-venv'])}; peers {json.dumps(v['peers-venv'])}")
    L.append(f"- Tools: {v['wrk']}; {v['h2load']}; {v['nginx']}; {v['cc']}")
    L.append(f"- Server-order seed: {meta['seed']} (`--seed` repeats the order)")
    L.append(f"- Method: server and all its threads on CPU 0 (`taskset -c 0`), `wrk -t1` and h2load "
             f"on CPU 1; {cfg['rounds']} rounds of {cfg['duration']} s after {cfg['warmup']} s "
             "warm-up, a fresh server per run, servers in a fresh random order for every row of "
             "every round; status and exact body checked before and after every run. Req/s is "
             "the median over rounds (min–max), p99 the median of per-run wrk p99s, CPU the "
             "server's utime+stime (all its processes) over the measured interval per completed "
             "request; RSS/PSS the peak of its processes' sums. No p99 for pipelined_get: wrk's "
             "percentiles are broken under pipelining (they print 0). `client-bound`: wrk used >= 90% "
             "of its core (compare CPU/request there). `other/steal`: the largest share of CPU 0 "
             "used by anything but the server during a run, and taken by the hypervisor (noise "
             "from other work on the machine).")
    L.append("")
    if status:
        L.append("## Not measured\n")
        for s, why in status.items():
            L.append(f"- **{s}**: {why.splitlines()[-1] if why else '?'}")
        L.append("")
    L.append("## Throughput\n")
    L.append("| workload | conns | server | req/s | min–max | p99 ms | CPU µs/req | RSS MiB | PSS MiB "
             "| errors | gen CPU | other/steal | vs skirr (req/s ratio, verdict) |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = sorted({(w, c) for (w, c, _) in agg}, key=lambda r: (list(WORKLOADS).index(r[0]), r[1]))
    for w, c in rows:
        names = sorted((s for (w2, c2, s) in agg if (w2, c2) == (w, c)),
                       key=lambda s: (s != "skirr", -(agg[(w, c, s)]["rps"] or 0)))
        for s in names:
            a = agg[(w, c, s)]
            flags = []
            if a["failed"]:
                flags.append(f"FAILED {a['rounds'] - a['rounds_ok']}/{a['rounds']}")
            if a["client_bound"]:
                flags.append("client-bound")
            if not a["pinned"]:
                flags.append("NOT PINNED")
            k = cmp.get((w, c, s))
            vs = (f"{k['rps_ratio']:.2f} ({k['rps_ratio_min']:.2f}–{k['rps_ratio_max']:.2f}); "
                  f"cpu {k['cpu_ratio']:.2f}; {k['verdict']}") if k else ""
            errs = sum(a["errors"].values())
            L.append(
                f"| {w} | {c} | {s}{' ' + ', '.join(flags) if flags else ''} | {fmt(a['rps'])} | "
                f"{fmt(a['rps_min'])}–{fmt(a['rps_max'])} | {fmt(a['p99_ms'], '.2f')} | "
                f"{fmt(a['cpu_us_per_req'], '.1f')} | {fmt(a['rss_mib'], '.1f')} | "
                f"{fmt(a['pss_mib'], '.1f')} | {errs} | {fmt(a['gen_cpu'] and a['gen_cpu'] * 100, '.0f')}% | "
                f"{fmt(a['other_cpu0'] and a['other_cpu0'] * 100, '.0f')}%/"
                f"{fmt(a['steal_cpu0'] and a['steal_cpu0'] * 100, '.0f')}% | {vs} |")
    fails = [(k, a["errors_first"]) for k, a in agg.items() if a["errors_first"]]
    if fails:
        L.append("\nFailures (first per row):\n")
        for (w, c, s), e in fails:
            L.append(f"- {w} c{c} {s}: `{e[:400]}`")
    sk = agg.get(("pipelined_get", 64, "skirr")), agg.get(("raw_get", 64, "skirr"))
    if all(sk) and sk[0]["rps"] and sk[1]["rps"]:
        L.append(f"\nskirr pipelined_get / raw_get at c64: {sk[0]['rps'] / sk[1]['rps']:.2f}×")

    L.append("\n## Efficiency against the limit\n")
    L.append("(limit CPU/request + the app's own CPU/request called directly) ÷ the server's "
             "CPU/request; the limit is the lower of limit-c and nginx in the same row.\n")
    L.append("| workload | conns | limit µs/req | app µs/req | server | server µs/req | efficiency |")
    L.append("|---|---|---|---|---|---|---|")
    for w, c in rows:
        lim = [agg[(w, c, s)]["cpu_us_per_req"] for s in ("limit-c", "nginx")
               if (w, c, s) in agg and agg[(w, c, s)]["cpu_us_per_req"]]
        app = result["app_cpu"].get(w, {}).get("us_per_req")
        if not lim or app is None:
            continue
        for s in sorted(s for (w2, c2, s) in agg if (w2, c2) == (w, c) and SERVERS[s][2] != "limit"):
            a = agg[(w, c, s)]
            if a["cpu_us_per_req"]:
                L.append(f"| {w} | {c} | {min(lim):.2f} | {app:.2f} | {s} | {a['cpu_us_per_req']:.2f} "
                         f"| {(min(lim) + app) / a['cpu_us_per_req']:.2f} |")
    errs = {w: r["error"] for w, r in result["app_cpu"].items() if "error" in r}
    for w, e in errs.items():
        L.append(f"\napp CPU for {w} failed: `{e[-300:]}`")

    if result["fixed_rate"]:
        L.append("\n## Fixed-rate latency (h2load --rps, HTTP/1.1)\n")
        L.append("Offered rate = the given share of the server's own median req/s above.\n")
        L.append("| workload | conns | server | load | offered | achieved | p50 ms | p99 ms | p99.9 ms "
                 "| max ms | CPU µs/req |")
        L.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in sorted(result["fixed_rate"], key=lambda r: (r["workload"], r["pct"] or 0, r["server"])):
            if r["ok"]:
                L.append(f"| {r['workload']} | {r['conns']} | {r['server']} | {r['pct']}% | "
                         f"{r['offered_rps']:,.0f} | {r['achieved_rps']:,.0f} | {r['p50_ms']:.2f} | "
                         f"{r['p99_ms']:.2f} | {r['p999_ms']:.2f} | {r['max_ms']:.2f} | "
                         f"{r['cpu_us_per_req']:.1f} |")
            else:
                L.append(f"| {r['workload']} | {r['conns']} | {r['server']} | {r['pct']}% | FAILED: "
                         f"{r['error'][:200]} | | | | | | |")

    if result["streaming"]:
        L.append("\n## Streaming (app waits 50 ms after the first chunk; sequential samples on one "
                 "keep-alive connection; medians)\n")
        L.append("| server | rounds ok | first chunk ms (median of round medians) | total ms |")
        L.append("|---|---|---|---|")
        by = {}
        for r in result["streaming"]:
            by.setdefault(r["server"], []).append(r)
        for s, rs in sorted(by.items()):
            ok = [r for r in rs if r["ok"]]
            if ok:
                L.append(f"| {s} | {len(ok)}/{len(rs)} | {median([r['first_chunk_ms'] for r in ok]):.3f} "
                         f"| {median([r['total_ms'] for r in ok]):.3f} |")
            else:
                L.append(f"| {s} | 0/{len(rs)} FAILED: {rs[0]['error'][:200]} | | |")

    L.append("\n## Idle memory (raw app, after one request)\n")
    L.append("| server | RSS MiB | PSS MiB | processes |")
    L.append("|---|---|---|---|")
    for s, r in result["idle"].items():
        if r["ok"]:
            L.append(f"| {s} | {r['rss_mib']:.1f} | {r['pss_mib']:.1f} | {r['processes']} |")
    L.append("")
    if LEVERS.exists():
        L.append("\n" + LEVERS.read_text().strip() + "\n")
    return "\n".join(L)


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


def listening(port):
    hexport = f":{port:04X}"
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            for line in Path(f).read_text().splitlines()[1:]:
                parts = line.split()
                if parts[1].endswith(hexport) and parts[3] == "0A":
                    return True
        except OSError:
            pass
    return False


def start_under(argv, port, timeout, stderr=subprocess.PIPE):
    """Starts a server whose argv wraps it in a tracer (strace, valgrind); returns the process once
    the port listens. RuntimeError with its stderr tail if it exits or times out first. stderr:
    PIPE, or an open file (the server's log goes there; the error then names the file)."""
    env = dict(os.environ, PYTHONPATH=str(APPS))
    proc = subprocess.Popen(argv, cwd=APPS, env=env, stdout=subprocess.DEVNULL,
                            stderr=stderr, start_new_session=True)
    deadline = time.monotonic() + timeout
    while not listening(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_group(proc)
            tail = proc.stderr.read().decode()[-800:] if proc.stderr else f"see {stderr.name}"
            raise RuntimeError("server did not start: " + tail)
        time.sleep(0.05)
    return proc


def stop_group(proc):
    """SIGINT, then SIGTERM, then SIGKILL to the process group until it exits."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(60 if sig == signal.SIGINT else 8)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def exact_sequential(c, req, n):
    """n requests one after another on connection c; how many answered 200 with HELLO."""
    good = 0
    for _ in range(n):
        c.sock.sendall(req)
        status, _, body = c.read_response()
        good += status == 200 and body == HELLO
    return good


def exact_pipelined(c, req, batches):
    """batches of PIPELINE_DEPTH requests, each batch in one write, every response read before the
    next batch; how many answered 200 with HELLO."""
    good = 0
    for _ in range(batches):
        c.sock.sendall(req * PIPELINE_DEPTH)
        for _ in range(PIPELINE_DEPTH):
            status, _, body = c.read_response()
            good += status == 200 and body == HELLO
    return good


def syscall_gate(name, requests, outdir, batches=PIPELINE_BATCHES):
    """Traces the server with strace while one keep-alive connection makes `requests` sequential
    requests, then a second one sends `batches` batches of PIPELINE_DEPTH pipelined requests (each
    batch in one write, every response read before the next batch)."""
    port = free_port()
    trace = Path(outdir) / f"strace-{name}.txt"
    builder = SERVERS[name][0]
    tmp = tempfile.mkdtemp(prefix="bench-sys-")
    argv = builder("raw_apps:raw", port, tmp) if name == "nginx" else builder("raw_apps:raw", port)
    full = ["strace", "-f", "-qq", "-o", str(trace), "--", "taskset", "-c", SERVER_CPU] + argv
    out = {"server": name, "requests": requests}
    proc = None
    try:
        proc = start_under(full, port, 60)
        c = Conn(port)
        req = c.request_bytes("GET", "/")
        out["good_responses"] = exact_sequential(c, req, requests)
        c.close()
        c = Conn(port)
        out["pipelined_good"] = exact_pipelined(c, req, batches)
        c.close()
        time.sleep(0.5)
    finally:
        if proc is not None:
            stop_group(proc)
        shutil.rmtree(tmp, ignore_errors=True)
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


def cmd_syscalls(args):
    ensure_tools(["strace", "taskset", "gcc"])
    names = args.servers.split(",")
    groups = sorted({SERVERS[s][1] for s in names if SERVERS[s][1]})
    if groups:
        ensure_peers(groups)
    if "limit-c" in names:
        build_limit()
    os.sched_setaffinity(0, {int(CLIENT_CPU)})
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    outdir = RESULTS / f"{stamp}-syscalls"
    outdir.mkdir(parents=True, exist_ok=True)
    results, rc = [], 0
    for name in names:
        r = syscall_gate(name, args.requests, outdir)
        results.append(r)
        limit_recv = args.requests + 9
        gate = "gate" if name == "skirr" else "control"
        print(f"{name} ({gate}): {args.requests} sequential requests on one keep-alive connection: "
              f"{r.get('good_responses', 0)} exact responses; receive calls {r.get('recv')} "
              f"(<= {limit_recv}; {r.get('recv_eof')} returned EOF), EAGAIN receives "
              f"{r.get('recv_eagain')} (0), send calls {r.get('send')} (exactly {args.requests}), "
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


def cmd_setup(args):
    names = args.servers.split(",") if args.servers else PROFILES["full"]["servers"]
    ensure_tools(["wrk", "h2load", "nginx", "strace", "taskset", "gcc"])
    groups = sorted({SERVERS[s][1] for s in names if SERVERS[s][1]})
    res = ensure_peers(groups, reinstall=args.reinstall)
    build_limit()
    for g, r in res.items():
        print(f"{g}: {'ok' if r['ok'] else 'FAILED: ' + r['error'][-400:]}")
    return 0


def callgrind_ir(path):
    """Instructions executed (Ir) in one callgrind dump file."""
    m = re.search(r"^(?:summary|totals): (\d+)", Path(path).read_text(errors="replace"), re.M)
    return int(m.group(1)) if m else None


def cmd_callgrind(args):
    """Instructions per request in the whole skirr process (Python, C, libc; not the kernel) under
    callgrind: deterministic, unlike timings on a noisy machine, so a hot-path change shows its
    cost as a difference of counts. Phases, each dumped separately after a warm-up: `n` sequential
    raw_get requests on one keep-alive connection, then `n` more as batches of PIPELINE_DEPTH
    pipelined requests."""
    ensure_tools(["valgrind", "callgrind_control"])
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    outdir = RESULTS / f"{stamp}-callgrind"
    outdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    out_file = outdir / "callgrind.out"
    server = skirr_argv("raw_apps:raw", port)
    log = subprocess.PIPE
    if args.access_log:
        # the access log on, to a file (issue 13): the default line, skirr.access at INFO
        server = [a for a in server if a != "--no-access-log"]
        server[server.index("--log-level") + 1] = "info"
        log = open(outdir / "server.log", "w")
    argv = ["valgrind", "--tool=callgrind", "--compress-strings=no", "--compress-pos=no",
            f"--callgrind-out-file={out_file}"] + server
    n, phases = args.n, []
    try:
        proc = start_under(argv, port, 180, stderr=log)
    except RuntimeError as exc:
        raise SystemExit(f"callgrind: {exc}") from None

    def control(flag):
        subprocess.run(["callgrind_control", flag, str(proc.pid)], check=True, timeout=120,
                       stdout=subprocess.DEVNULL)

    try:
        c = Conn(port, timeout=60)
        req = c.request_bytes("GET", "/")
        exact_sequential(c, req, 200)  # warm-up: imports, caches, the first allocations
        control("-z")
        phases.append(("raw_get, sequential on one connection", exact_sequential(c, req, n)))
        control("-d")
        phases.append((f"raw_get, pipelined {PIPELINE_DEPTH} per write",
                       exact_pipelined(c, req, n // PIPELINE_DEPTH)))
        control("-d")
        c.close()
    finally:
        stop_group(proc)
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


def cmd_report(args):
    """Re-renders the report of a finished matrix run from its results.json."""
    d = Path(args.results)
    result = json.loads((d / "results.json").read_text())
    runs = result["runs"]
    agg = aggregate(runs, result["meta"]["config"]["rounds"])
    report = render_report(result, agg, compare(runs), result["meta"]["not_measured"])
    (d / "report.md").write_text(report)
    if args.summary:
        Path(args.summary).write_text(report)
    print(report)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("matrix", help="throughput, fixed-rate latency, streaming, efficiency")
    m.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    m.add_argument("--servers", help="comma-separated (skirr is always included); known: "
                   + ", ".join(SERVERS))
    m.add_argument("--workloads", help="comma-separated subset of the profile's workloads")
    m.add_argument("--conns", help="comma-separated connection counts (replaces the profile's)")
    m.add_argument("--rounds", type=int)
    m.add_argument("--duration", type=int, help="seconds per measured run")
    m.add_argument("--warmup", type=int, help="seconds of warm-up before each run")
    m.add_argument("--no-fixed", action="store_true", help="skip the fixed-rate phase")
    m.add_argument("--no-stream", action="store_true", help="skip the streaming phase")
    m.add_argument("--app-n", type=int, default=20000, help="calls per app-CPU sample")
    m.add_argument("--seed", type=int, default=None, help="random seed for the server order")
    m.add_argument("--label", help="results folder suffix (default: the profile)")
    m.add_argument("--summary", help="also write the markdown report here (bench/RESULTS.md)")
    m.add_argument("--reinstall", action="store_true", help="retry peers that failed to install")
    s = sub.add_parser("syscalls", help="the syscall gate (1,001 requests, one connection)")
    s.add_argument("--servers", default="skirr,limit-c")
    s.add_argument("--requests", type=int, default=1001)
    st = sub.add_parser("setup", help="install the peers and tools, build the limit")
    st.add_argument("--servers")
    st.add_argument("--reinstall", action="store_true")
    cg = sub.add_parser("callgrind", help="instructions per request under callgrind")
    cg.add_argument("--n", type=int, default=2000, help="requests per phase")
    cg.add_argument("--access-log", action="store_true",
                    help="with skirr's access log on, written to a file (issue 13)")
    rp = sub.add_parser("report", help="re-render a finished matrix run's report (results.json)")
    rp.add_argument("results", help="the run's folder under bench/results/")
    rp.add_argument("--summary", help="also write the markdown report here (bench/RESULTS.md)")
    a = sub.add_parser("app-cpu", help=argparse.SUPPRESS)
    a.add_argument("--workload", required=True)
    a.add_argument("--n", type=int, default=20000)
    args = ap.parse_args()
    if args.cmd == "matrix":
        return cmd_matrix(args)
    if args.cmd == "syscalls":
        return cmd_syscalls(args)
    if args.cmd == "setup":
        return cmd_setup(args)
    if args.cmd == "report":
        return cmd_report(args)
    if args.cmd == "callgrind":
        return cmd_callgrind(args)
    return cmd_app_cpu(args)


if __name__ == "__main__":
    sys.exit(main())
