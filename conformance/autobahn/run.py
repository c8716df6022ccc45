#!/usr/bin/env python3
"""Runs the Autobahn|Testsuite fuzzingclient against skirr serving an echo app (``make autobahn``).

    python conformance/autobahn/run.py                        # all cases, writes the summary
    python conformance/autobahn/run.py --cases '1.*,2.*'      # a subset (fnmatch-style ids)
    python conformance/autobahn/run.py --cases '9.*' --peers uvicorn   # uvicorn beside skirr

What it does:
1. Installs ``autobahntestsuite==AUTOBAHN_VERSION`` from PyPI into ``BUILD/site`` on first use,
   with Python 2.7 (the suite runs on nothing newer; found as $AUTOBAHN_PY2, else the newest
   ``$(pyenv root)/versions/2.7.*``), and writes an empty ``zope/__init__.py`` there (``pip
   install --target`` skips the zope namespace ``.pth``). Nothing of the suite is committed.
2. Serves conformance/autobahn/echo.py (echo each text/bytes message back as the same type) with
   ``python -m skirr`` on a free 127.0.0.1 port (``--ws-max-size``: the 9.* cases send messages
   up to 16 MiB), and with each ``--peers`` server on its own port (uvicorn: installed into
   ``BUILD/venv-uvicorn`` from PyPI at the version bench/peers.txt pins).
3. Writes the spec JSON (``BUILD/spec.json``) and runs ``wstest -m fuzzingclient`` over it, every
   case against every server in one run (so durations compare under the same load); its output
   goes to ``BUILD/fuzzingclient.log``, the reports to ``BUILD/reports/``.
4. Stops the servers (SIGTERM, then SIGKILL after 10 s) and reads ``BUILD/reports/index.json``:
   per server the count of each behavior (OK, NON-STRICT, INFORMATIONAL, UNIMPLEMENTED, FAILED),
   the total duration of the cases (and of the 9.* ones), the CPU seconds each server and the
   fuzzingclient used over the run (/proc and getrusage), and every case that is not OK with
   its behavior, close behavior and the suite's result text. Printed and written to --output
   (Markdown).

Exit status: 0 when every selected case ran against skirr and none is FAILED or NON-STRICT (nor
any other behavior the suite may report, e.g. WRONG CODE or UNCLEAN); 1 otherwise; 2 for bad
usage. A peer's results never change the status.
"""
from __future__ import annotations

import argparse
import fnmatch
import glob
import json
import os
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

AUTOBAHN_VERSION = "25.10.1"  # autobahntestsuite on PyPI (Python 2.7)
DEFAULT_MAX_SIZE = 32 * 1024 * 1024  # bytes: above the 16 MiB messages of the 9.* cases
START_TIMEOUT = 30.0  # seconds: a server must accept connections this soon after its start
STOP_TIMEOUT = 10.0  # seconds: SIGTERM, then SIGKILL
BEHAVIORS = ("OK", "NON-STRICT", "INFORMATIONAL", "UNIMPLEMENTED", "FAILED")
ALLOWED = {"OK", "INFORMATIONAL", "UNIMPLEMENTED"}  # anything else fails the run


class UsageError(Exception):
    """A bad argument or a missing tool: exit 2."""


def find_python2() -> str:
    """Returns the path of a Python 2.7 interpreter ($AUTOBAHN_PY2, else pyenv's newest 2.7)."""
    env = os.environ.get("AUTOBAHN_PY2")
    if env:
        return env
    roots = []
    try:
        roots.append(subprocess.run(["pyenv", "root"], capture_output=True, text=True,
                                    timeout=30).stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        pass
    roots.append(os.path.expanduser("~/.pyenv"))
    for root in roots:
        found = sorted(glob.glob(os.path.join(root, "versions", "2.7.*", "bin", "python2.7")),
                       key=lambda p: [int(x) if x.isdigit() else 0
                                      for x in p.split("/versions/")[1].split("/")[0].split(".")])
        if found:
            return found[-1]
    raise UsageError("no Python 2.7 found (set AUTOBAHN_PY2 or install 2.7 with pyenv): the "
                     "Autobahn|Testsuite runs on Python 2.7 only")


def install_suite(build: Path, py2: str) -> Path:
    """Installs the suite into build/site once per version; returns that directory."""
    site = build / "site"
    marker = site / ".skirr-installed"
    want = f"autobahntestsuite=={AUTOBAHN_VERSION} {py2}"
    if marker.exists() and marker.read_text() == want:
        return site
    shutil.rmtree(site, ignore_errors=True)
    print(f"autobahn: installing autobahntestsuite=={AUTOBAHN_VERSION} into {site} with {py2}",
          flush=True)
    subprocess.run([py2, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--target", str(site), f"autobahntestsuite=={AUTOBAHN_VERSION}"],
                   check=True, timeout=900)
    (site / "zope").mkdir(exist_ok=True)
    (site / "zope" / "__init__.py").write_text("")
    marker.write_text(want)
    return site


def peer_pin(name: str) -> list[str]:
    """The requirements bench/peers.txt pins for the peer group `name`."""
    for line in (ROOT / "bench" / "peers.txt").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].split()
    raise UsageError(f"bench/peers.txt has no group {name!r}")


def install_uvicorn(build: Path) -> str:
    """A venv with uvicorn (the pins of bench/peers.txt) in build/venv-uvicorn; returns its python."""
    venv = build / "venv-uvicorn"
    py = venv / "bin" / "python"
    marker = venv / ".skirr-installed"
    reqs = peer_pin("uvicorn")
    if marker.exists() and marker.read_text() == " ".join(reqs):
        return str(py)
    shutil.rmtree(venv, ignore_errors=True)
    print(f"autobahn: installing {' '.join(reqs)} into {venv}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *reqs],
                   check=True, timeout=900)
    marker.write_text(" ".join(reqs))
    return str(py)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(name: str, port: int, args: argparse.Namespace, build: Path) -> list[str]:
    """The command line serving echo:app as server `name` on 127.0.0.1:port."""
    common = ["echo:app", "--app-dir", str(HERE), "--host", "127.0.0.1", "--port", str(port),
              "--ws-max-size", str(args.ws_max_size), "--log-level", "warning"]
    if name == "skirr":
        cmd = [args.python, "-m", "skirr", *common]
        if args.loop:
            cmd += ["--loop", args.loop]
        return cmd
    if name == "uvicorn":
        return [install_uvicorn(build), "-m", "uvicorn", *common, "--ws", "websockets"]
    raise UsageError(f"unknown server {name!r} (known: skirr, uvicorn)")


def start(name: str, cmd: list[str], log: Path, port: int) -> subprocess.Popen:
    """Starts `cmd` (output to `log`) and waits until 127.0.0.1:port accepts connections."""
    out = open(log, "wb")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                            start_new_session=True)
    out.close()
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode} at start; see {log}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return proc
        except OSError:
            time.sleep(0.1)
    stop(proc)
    raise RuntimeError(f"{name} did not accept on 127.0.0.1:{port} within {START_TIMEOUT:g}s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(STOP_TIMEOUT)


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system, seconds) process `pid` used so far, its reaped children included;
    None where /proc cannot tell (not Linux, or the process is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state is fields[0]
    ticks = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime (proc(5) 14-17)
    return ticks / os.sysconf("SC_CLK_TCK")


def shown_command(cmd: list[str], port: int) -> str:
    """`cmd` as the summary shows it: no interpreter path, checkout path or (per-run) port."""
    shown = ["python" if i == 0 else "PORT" if p == str(port) else p for i, p in enumerate(cmd)]
    return shlex.join(shown).replace(str(HERE), "conformance/autobahn")


def case_key(case_id: str) -> list[int]:
    return [int(p) for p in case_id.split(".")]


def read_results(reports: Path, agents: list[str]) -> dict[str, dict[str, dict]]:
    """{agent: {case id: index entry + the case report's result texts}} from the suite's index."""
    index = json.loads((reports / "index.json").read_text())
    out: dict[str, dict[str, dict]] = {}
    for agent in agents:
        cases = {}
        for case_id, entry in index.get(agent, {}).items():
            entry = dict(entry)
            if entry.get("behavior") != "OK" or entry.get("behaviorClose") != "OK":
                report = json.loads((reports / entry["reportfile"]).read_text())
                entry["result"] = report.get("result", "")
                entry["resultClose"] = report.get("resultClose", "")
                entry["description"] = report.get("description", "")
            cases[case_id] = entry
        out[agent] = cases
    return out


def summarize(results: dict[str, dict[str, dict]], meta: dict) -> str:
    """The Markdown summary: counts per behavior and server, durations, then each non-OK case."""
    agents = list(results)
    lines = ["# Autobahn|Testsuite results", "",
             "Generated by `conformance/autobahn/run.py` (`make autobahn`); not edited by hand.", "",
             f"- Command: `{meta['command']}`",
             f"- Suite: autobahntestsuite {AUTOBAHN_VERSION} (`wstest -m fuzzingclient`), "
             f"cases `{meta['cases']}`" + (f", excluded `{meta['exclude']}`" if meta["exclude"]
                                           else ""),
             f"- Run: {meta['date']}, fuzzingclient wall time {meta['wall']:.1f} s, CPU "
             f"{meta['client_cpu']:.1f} s (all servers, every case against each in turn)"]
    for agent in agents:
        lines.append(f"- {agent}: `{meta['servers'][agent]}`")
    lines += ["", "| behavior | " + " | ".join(agents) + " |",
              "|---|" + "---:|" * len(agents)]
    others = sorted({e.get("behavior") for r in results.values() for e in r.values()}
                    - set(BEHAVIORS))
    for behavior in (*BEHAVIORS, *others):
        counts = [sum(1 for e in results[a].values() if e.get("behavior") == behavior)
                  for a in agents]
        lines.append(f"| {behavior} | " + " | ".join(str(c) for c in counts) + " |")
    lines.append("| cases | " + " | ".join(str(len(results[a])) for a in agents) + " |")
    for label, prefix in (("duration, all cases (ms)", ""), ("duration, 9.* cases (ms)", "9.")):
        sums = [sum(e.get("duration", 0) for c, e in results[a].items() if c.startswith(prefix))
                for a in agents]
        lines.append(f"| {label} | " + " | ".join(str(s) for s in sums) + " |")
    cpu = [meta["cpu"].get(a) for a in agents]
    lines.append("| server CPU during the run (s) | "
                 + " | ".join("?" if c is None else f"{c:.1f}" for c in cpu) + " |")
    if len(agents) > 1:  # a case failed fast (e.g. 1009 at once) would skew the sums above
        common = [c for c in results[agents[0]] if c.startswith("9.") and all(
            results[a].get(c, {}).get("behavior") == "OK" for a in agents)]
        sums = [sum(results[a][c].get("duration", 0) for c in common) for a in agents]
        lines.append(f"| duration, the {len(common)} 9.* cases OK on every server (ms) | "
                     + " | ".join(str(s) for s in sums) + " |")
    for agent in agents:
        bad = [(c, e) for c, e in sorted(results[agent].items(), key=lambda kv: case_key(kv[0]))
               if e.get("behavior") != "OK" or e.get("behaviorClose") != "OK"]
        lines += ["", f"## {agent}: cases not OK ({len(bad)})", ""]
        if not bad:
            lines.append("None.")
        for case_id, e in bad:
            lines.append(f"- {case_id}: {e.get('behavior')} (close: {e.get('behaviorClose')}, "
                         f"remote close code {e.get('remoteCloseCode')}). "
                         f"{e.get('result', '')} {e.get('resultClose', '')}".rstrip())
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="*",
                    help="case ids or patterns, comma or space separated (default: *)")
    ap.add_argument("--exclude", default="", help="case ids or patterns to leave out")
    ap.add_argument("--peers", default="", help="other servers run beside skirr: uvicorn")
    ap.add_argument("--loop", default="", choices=("", "auto", "asyncio", "uvloop"),
                    help="skirr's --loop (default: skirr's own default)")
    ap.add_argument("--ws-max-size", type=int, default=DEFAULT_MAX_SIZE, metavar="BYTES",
                    help="--ws-max-size of every server (default: %(default)s)")
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter skirr is installed in (default: this one)")
    ap.add_argument("--build", default=str(ROOT / "build" / "autobahn"),
                    help="the suite's install, spec, logs and reports (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                    help="bound on the fuzzingclient run (default: %(default)g)")
    ap.add_argument("--output", default=str(ROOT / "conformance" / "AUTOBAHN.md"),
                    help="the Markdown summary (default: %(default)s)")
    args = ap.parse_args(argv)
    split = lambda s: [p for p in s.replace(",", " ").split() if p]  # noqa: E731
    cases, exclude, peers = split(args.cases), split(args.exclude), split(args.peers)
    try:
        if not cases:
            raise UsageError("--cases is empty")
        if "skirr" in peers:
            raise UsageError("--peers: skirr always runs")
        build = Path(args.build).resolve()
        build.mkdir(parents=True, exist_ok=True)
        py2 = find_python2()
        site = install_suite(build, py2)
        agents = ["skirr", *peers]
        servers = {a: (free_port(), None) for a in agents}
        cmds = {a: server_command(a, servers[a][0], args, build) for a in agents}
    except UsageError as e:
        print(f"autobahn: {e}", file=sys.stderr)
        return 2

    reports = build / "reports"
    shutil.rmtree(reports, ignore_errors=True)
    spec = {"outdir": str(reports),
            "servers": [{"agent": a, "url": f"ws://127.0.0.1:{servers[a][0]}"} for a in agents],
            "cases": cases, "exclude-cases": exclude, "exclude-agent-cases": {}}
    (build / "spec.json").write_text(json.dumps(spec, indent=2) + "\n")

    procs: dict[str, subprocess.Popen] = {}
    status = 1
    try:
        for a in agents:
            print(f"autobahn: starting {a}: {shlex.join(cmds[a])}", flush=True)
            procs[a] = start(a, cmds[a], build / f"{a}.log", servers[a][0])
        env = dict(os.environ, PYTHONPATH=str(site))
        cmd = [py2, "-m", "autobahntestsuite.wstest", "-m", "fuzzingclient", "-s",
               str(build / "spec.json")]
        print(f"autobahn: {shlex.join(cmd)} (cases {' '.join(cases)}; log "
              f"{build / 'fuzzingclient.log'})", flush=True)
        t0 = time.monotonic()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the servers are not reaped yet
        cpu0 = {a: cpu_seconds(proc.pid) for a, proc in procs.items()}  # their start left out
        with open(build / "fuzzingclient.log", "wb") as log:
            run = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=build,
                                 timeout=args.timeout)
        wall = time.monotonic() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        client_cpu = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime
        cpu = {a: None if c is None or cpu0[a] is None else c - cpu0[a]
               for a, c in ((a, cpu_seconds(proc.pid)) for a, proc in procs.items())}
        for a, proc in procs.items():
            if proc.poll() is not None:
                print(f"autobahn: {a} exited ({proc.returncode}) during the run; see "
                      f"{build / (a + '.log')}", file=sys.stderr)
        if run.returncode != 0:
            print(f"autobahn: the fuzzingclient exited with {run.returncode}; see "
                  f"{build / 'fuzzingclient.log'}", file=sys.stderr)
            return 1
        results = read_results(reports, agents)
        extra = ([f"--loop {args.loop}"] if args.loop else []) + (
            [f"--output {os.path.relpath(args.output, ROOT)}"]
            if Path(args.output).resolve() != ROOT / "conformance" / "AUTOBAHN.md" else [])
        meta = {"command": "make autobahn" + (f" AUTOBAHN_CASES='{args.cases}'"
                                              if args.cases != "*" else "")
                + (f" AUTOBAHN_PEERS='{args.peers}'" if peers else "")
                + (f" AUTOBAHN_ARGS='{' '.join(extra)}'" if extra else ""),
                "cases": " ".join(cases), "exclude": " ".join(exclude),
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "wall": wall,
                "client_cpu": client_cpu, "cpu": cpu,
                "servers": {a: shown_command(cmds[a], servers[a][0]) for a in agents}}
        text = summarize(results, meta)
        Path(args.output).write_text(text)
        print(text, end="")
        mine = results["skirr"]
        bad = sorted(c for c, e in mine.items() if e.get("behavior") not in ALLOWED)
        if not mine:
            print("autobahn: no case ran against skirr", file=sys.stderr)
        elif bad:
            print(f"autobahn: {len(bad)} case(s) not passing: {' '.join(bad)}", file=sys.stderr)
        else:
            status = 0
        print(f"autobahn: summary written to {args.output}", flush=True)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"autobahn: {e}", file=sys.stderr)
    finally:
        for proc in procs.values():
            stop(proc)
    return status


if __name__ == "__main__":
    sys.exit(main())
