"""Where the harness's files are, which CPU each side runs on, and what the machine is.

Owns: the paths (bench/, the apps, the results, the two venvs), the CPU split (server on CPU 0,
load generator and harness on CPU 1; the workers row shares both), the Debian tools and their installation, the log line, the
run folders under bench/results/, and the facts recorded about the machine, the interpreters and
the commit.

Never: starts a server, sends a request or measures anything; every other module imports this one
and it imports none of them.
"""
from __future__ import annotations

import datetime
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent
ROOT = BENCH.parent
APPS = BENCH / "apps"
BUILD = BENCH / "build"
RESULTS = BENCH / "results"
RUN_PY = BENCH / "run.py"  # the CLI; the app-cpu child is started through it
LEVERS = BENCH / "LEVERS.md"  # hand-written: the hot-path levers tried, kept or rejected, and why
SKIRR_VENV = Path(os.environ.get("SKIRR_VENV", ROOT / ".venv")).absolute()
PEERS_VENV = Path(os.environ.get("BENCH_PEERS_VENV", BENCH / ".venv-peers"))
PEERS_FILE = BENCH / "peers.txt"
SERVER_CPU = "0"
CLIENT_CPU = "1"
SHARED_CPUS = f"{SERVER_CPU},{CLIENT_CPU}"  # the workers row: servers and wrk -t2 share both CPUs
# The TLS rows' certificate and key (issue 32): made once per run into a private temporary folder
# by harness/tls.py, which names it in this variable for the servers' command lines and the checks.
TLS_DIR_ENV = "BENCH_TLS_DIR"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def log(*args):
    print(f"[bench {time.strftime('%H:%M:%S')}]", *args, file=sys.stderr, flush=True)


def describe(exc, limit=1500):
    """`Type: message` of an exception, cut to `limit` characters, for a result's "error"."""
    return f"{type(exc).__name__}: {exc}"[:limit]


def tls_files():
    """(key path, certificate path) of the run's TLS test certificate (a self-signed ECDSA P-256
    certificate for 127.0.0.1, its own CA); RuntimeError before harness/tls.py made it."""
    d = os.environ.get(TLS_DIR_ENV)
    if not d:
        raise RuntimeError(f"no TLS certificate for this run ({TLS_DIR_ENV} unset)")
    return str(Path(d) / "key.pem"), str(Path(d) / "cert.pem")


def venv_python(venv):
    return str(venv / "bin" / "python")


def new_run_dir(label, when=None):
    """bench/results/<YYYYmmdd-HHMMSS>-<label>/, created; `when` defaults to the local time now."""
    when = when or datetime.datetime.now()
    outdir = RESULTS / f"{when.strftime('%Y%m%d-%H%M%S')}-{label}"
    outdir.mkdir(parents=True, exist_ok=True)
    return outdir


# ----------------------------------------------------------------------------------------------
# Tools


DEBIAN_TOOLS = {"wrk": "wrk", "h2load": "nghttp2-client", "nginx": "nginx-light",
                "valgrind": "valgrind", "callgrind_control": "valgrind",
                "strace": "strace", "gcc": "gcc", "taskset": "util-linux",
                "strip": "binutils", "readelf": "binutils", "openssl": "openssl",
                "curl": "curl"}


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


# ----------------------------------------------------------------------------------------------
# What a run records about where it ran


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


def gil_enabled(python):
    """Whether `python` runs with the GIL (every build but a free-threaded one with it off)."""
    code = "import sys; print(getattr(sys, '_is_gil_enabled', lambda: True)())"
    return run_text([python, "-c", code]) != "False"


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
