#!/usr/bin/env python3
"""Locate llhttp for building skirr: the system library, else a pinned, checksum-verified sdist.

Order:
0. Inside an unpacked skirr sdist: ``vendor/llhttp/`` (written by ``bundle()`` when the sdist was
   made: the pinned sdist's ``lib/`` files, its LICENSE, llhttp's own licence and a SHA256SUMS of
   each file, checked here). No network, no pkg-config. A git checkout never holds this directory.
1. ``pkg-config --exists libllhttp`` (Debian's ``libllhttp-dev`` where the release has it): the
   system headers and shared library are used (``--cflags``/``--libs`` from pkg-config, no sources).
2. Otherwise the PyPI sdist ``llhttp==9.3.0.0`` (its ``lib/`` holds llhttp.h, llhttp.c, api.c and
   http.c). The tarball comes from ``$SKIRR_LLHTTP_SDIST`` when set, else from ``build/deps/`` in
   the checkout, where ``python -m pip download`` puts it (pip's configured index; pip also checks
   the hash before it runs anything from the sdist). Its sha256 is checked here as well; a mismatch
   is a hard error. It is extracted next to the tarball.

llhttp's sources are compiled by the caller WITHOUT -Werror (they are not skirr's code).

Command line (one answer on stdout, progress and errors on stderr):
    fetch_llhttp.py              the include dir (the sdist's lib/ dir, or the system include dir)
    fetch_llhttp.py --cflags     compiler flags for llhttp.h (-I...)
    fetch_llhttp.py --libs       linker flags (system library only; empty for the sdist)
    fetch_llhttp.py --sources    the .c files to compile and link (sdist only; empty for system)
    fetch_llhttp.py --bundle DIR write the vendor/llhttp/ tree into DIR (what the sdist carries)
  --no-system skips pkg-config; --cache DIR overrides build/deps/.
Exit status 1 with one "fetch_llhttp: error: ..." line when llhttp cannot be had.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile

NAME = "llhttp"
VERSION = "9.3.0.0"
SHA256 = "0d989363e7fb6f270b9d49956e7a3945c26778f8c70a166815264309ac6a8295"
SDIST = f"{NAME}-{VERSION}.tar.gz"
LIB_FILES = ("llhttp.h", "llhttp.c", "api.c", "http.c")
SOURCES = ("llhttp.c", "api.c", "http.c")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CACHE = os.path.join(REPO, "build", "deps")
# Inside an unpacked sdist (relative to its top): the bundled sources and licences.
VENDOR = os.path.join("vendor", "llhttp")
SUMS = "SHA256SUMS"
# llhttp's own licence (nodejs/llhttp LICENSE); the pinned sdist carries only its wrapper's.
UPSTREAM_LICENSE = os.path.join(REPO, "licenses", "llhttp.txt")


class FetchError(Exception):
    """llhttp could not be located, downloaded, verified or extracted; str() is one line."""


@dataclasses.dataclass(frozen=True)
class Llhttp:
    """Where llhttp is. ``sources`` is empty for a system library, ``libs`` empty for the sdist."""

    origin: str  # "vendored", "system" or "sdist"
    include_dir: str
    cflags: tuple[str, ...]
    libs: tuple[str, ...]
    sources: tuple[str, ...]


def _log(msg: str) -> None:
    print(f"fetch_llhttp: {msg}", file=sys.stderr)


def _pkg_config(*args: str) -> str | None:
    if shutil.which("pkg-config") is None:
        return None
    proc = subprocess.run(
        ["pkg-config", *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def _system() -> Llhttp | None:
    if _pkg_config("--exists", "libllhttp") is None:
        return None
    cflags = tuple(shlex.split(_pkg_config("--cflags", "libllhttp") or ""))
    libs = tuple(shlex.split(_pkg_config("--libs", "libllhttp") or "-lllhttp"))
    include_dir = _pkg_config("--variable=includedir", "libllhttp") or "/usr/include"
    return Llhttp("system", include_dir, cflags, libs, ())


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def _verify(path: str) -> None:
    got = _sha256(path)
    if got != SHA256:
        raise FetchError(
            f"sha256 mismatch for {path}: expected {SHA256}, got {got} "
            "(delete the file if it is a stale or corrupt download)"
        )


def _download(cache: str) -> str:
    os.makedirs(cache, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="skirr-llhttp-") as tmp:
        req = os.path.join(tmp, "requirements.txt")
        with open(req, "w") as f:
            f.write(f"{NAME}=={VERSION} --hash=sha256:{SHA256}\n")
        cmd = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
            "--disable-pip-version-check", "--require-hashes", "-r", req, "-d", tmp,
        ]
        _log(f"downloading {SDIST} with pip")
        # Inside skirr's own PEP 517 build, pyproject_hooks passes skirr's backend-path in
        # _PYPROJECT_HOOKS_* variables; a nested pip would build llhttp's metadata with them and
        # look for llhttp's backend in skirr's scripts/ ("Cannot import build backend").
        env = {k: v for k, v in os.environ.items() if not k.startswith("_PYPROJECT_HOOKS_")}
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout)
            raise FetchError(f"pip download of {NAME}=={VERSION} failed (exit {proc.returncode})")
        got = os.path.join(tmp, SDIST)
        if not os.path.isfile(got):
            raise FetchError(f"pip download did not produce {SDIST}")
        _verify(got)
        dest = os.path.join(cache, SDIST)
        shutil.move(got, dest + ".part")
        os.replace(dest + ".part", dest)
    return dest


def _extract(tarball: str, cache: str) -> str:
    """Extracts lib/ from the verified tarball into cache; returns the lib dir."""
    root = os.path.join(cache, f"{NAME}-{VERSION}")
    lib = os.path.join(root, "lib")
    stamp = os.path.join(root, ".sha256")
    if os.path.isfile(stamp) and all(os.path.isfile(os.path.join(lib, n)) for n in LIB_FILES):
        with open(stamp) as f:
            if f.read().strip() == SHA256:
                return lib
    tmp = tempfile.mkdtemp(prefix=".extract-", dir=cache)
    os.chmod(tmp, 0o755)
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            wanted = {f"{NAME}-{VERSION}/lib/{n}" for n in LIB_FILES}
            members = [m for m in tar.getmembers() if m.name in wanted and m.isfile()]
            if {m.name for m in members} != wanted:
                raise FetchError(f"{tarball} lacks some of lib/{{{','.join(LIB_FILES)}}}")
            for m in members:
                src = tar.extractfile(m)
                assert src is not None
                out = os.path.join(tmp, "lib", os.path.basename(m.name))
                os.makedirs(os.path.dirname(out), exist_ok=True)
                with src, open(out, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        with open(os.path.join(tmp, ".sha256"), "w") as f:
            f.write(SHA256 + "\n")
        shutil.rmtree(root, ignore_errors=True)
        os.replace(tmp, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return lib


def bundle(dest: str, cache: str = DEFAULT_CACHE) -> list[str]:
    """Writes ``dest/vendor/llhttp/``: the pinned sdist's lib/ files (downloaded and checked as for
    a build, never the system library), the sdist's LICENSE as ``LICENSE.pyllhttp``, llhttp's own
    licence as ``LICENSE.llhttp`` and ``SHA256SUMS`` over those files. Returns the paths written,
    relative to ``dest``.

    Raises:
        FetchError: the sdist cannot be had or verified, or it lacks its LICENSE.
    """
    out = os.path.join(dest, VENDOR)
    if vendored(REPO) is not None:  # an sdist made from an unpacked sdist: copy what it holds
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(os.path.join(REPO, VENDOR), out)
        return [os.path.join(VENDOR, rel) for rel in sorted(
            os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs)]
    found = locate(cache, use_system=False)
    tarball = os.environ.get("SKIRR_LLHTTP_SDIST") or os.path.join(cache, SDIST)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "lib"))
    written = []
    for name in LIB_FILES:
        shutil.copyfile(os.path.join(found.include_dir, name), os.path.join(out, "lib", name))
        written.append(os.path.join("lib", name))
    with tarfile.open(tarball, "r:gz") as tar:
        try:
            member = tar.getmember(f"{NAME}-{VERSION}/LICENSE")
        except KeyError:
            raise FetchError(f"{tarball} has no LICENSE") from None
        src = tar.extractfile(member)
        assert src is not None
        with src, open(os.path.join(out, "LICENSE.pyllhttp"), "wb") as dst:
            shutil.copyfileobj(src, dst)
    written.append("LICENSE.pyllhttp")
    shutil.copyfile(UPSTREAM_LICENSE, os.path.join(out, "LICENSE.llhttp"))
    written.append("LICENSE.llhttp")
    with open(os.path.join(out, SUMS), "w") as f:
        f.write(f"# {SDIST} sha256 {SHA256}\n")
        for rel in written:
            f.write(f"{_sha256(os.path.join(out, rel))}  {rel}\n")
    written.append(SUMS)
    return [os.path.join(VENDOR, rel) for rel in written]


def vendored(top: str) -> Llhttp | None:
    """The bundled copy under ``top/vendor/llhttp/`` (an unpacked sdist), each file checked against
    its SHA256SUMS; None when there is no such directory (a git checkout).

    Raises:
        FetchError: the directory exists but a file is missing or differs from SHA256SUMS.
    """
    root = os.path.join(top, VENDOR)
    sums = os.path.join(root, SUMS)
    if not os.path.isdir(root):
        return None
    if not os.path.isfile(sums):
        raise FetchError(f"{root} has no {SUMS}")
    listed = {}
    with open(sums) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                digest, rel = line.split(None, 1)
                listed[rel.strip()] = digest
    for name in LIB_FILES:
        if os.path.join("lib", name) not in listed:
            raise FetchError(f"{sums} does not list lib/{name}")
    for rel, digest in listed.items():
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            raise FetchError(f"{path} is missing")
        if _sha256(path) != digest:
            raise FetchError(f"{path} differs from {SUMS}")
    lib = os.path.join(root, "lib")
    return Llhttp("vendored", lib, (f"-I{lib}",), (), tuple(os.path.join(lib, n) for n in SOURCES))


def locate(cache: str = DEFAULT_CACHE, use_system: bool = True) -> Llhttp:
    """Finds llhttp, downloading and extracting the pinned sdist if needed.

    Args:
        cache: directory for the sdist and its extracted lib/ (created if missing).
        use_system: try ``pkg-config libllhttp`` first.

    Raises:
        FetchError: no system llhttp and the sdist could not be downloaded, verified or extracted
            (or the bundled copy of an unpacked sdist fails its checksums).

    Inside an unpacked sdist (``vendor/llhttp/`` next to ``scripts/``) the bundled copy wins.
    """
    if os.path.abspath(cache) == os.path.abspath(DEFAULT_CACHE):
        found = vendored(REPO)
        if found is not None:
            return found
    if use_system:
        found = _system()
        if found is not None:
            return found
    env = os.environ.get("SKIRR_LLHTTP_SDIST")
    if env:
        if not os.path.isfile(env):
            raise FetchError(f"SKIRR_LLHTTP_SDIST={env} is not a file")
        tarball = os.path.abspath(env)
    else:
        tarball = os.path.join(cache, SDIST)
        if not os.path.isfile(tarball):
            tarball = _download(cache)
    _verify(tarball)
    os.makedirs(cache, exist_ok=True)
    lib = _extract(tarball, cache)
    return Llhttp(
        "sdist", lib, (f"-I{lib}",), (), tuple(os.path.join(lib, n) for n in SOURCES)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fetch_llhttp", description=__doc__.split("\n")[0])
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--cflags", action="store_true", help="print compiler flags")
    what.add_argument("--libs", action="store_true", help="print linker flags")
    what.add_argument("--sources", action="store_true", help="print the .c files to compile")
    what.add_argument("--bundle", metavar="DIR", help="write DIR/vendor/llhttp/ (for the sdist)")
    parser.add_argument("--cache", default=DEFAULT_CACHE, help="download and extract here")
    parser.add_argument("--no-system", action="store_true", help="skip pkg-config")
    args = parser.parse_args(argv)
    try:
        if args.bundle:
            for rel in bundle(args.bundle, args.cache):
                print(rel)
            return 0
        found = locate(args.cache, use_system=not args.no_system)
    except (FetchError, OSError, tarfile.TarError) as exc:
        print(f"fetch_llhttp: error: {exc}", file=sys.stderr)
        return 1
    if args.cflags:
        out = " ".join(shlex.quote(x) for x in found.cflags)
    elif args.libs:
        out = " ".join(shlex.quote(x) for x in found.libs)
    elif args.sources:
        out = " ".join(shlex.quote(x) for x in found.sources)
    else:
        out = found.include_dir
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
