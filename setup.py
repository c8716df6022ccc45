"""Build script for skirr's C extension ``skirr._native`` (metadata lives in pyproject.toml).

The extension is every ``src/core/*.c`` (the byte-level core) and ``src/ext/*.c`` (the CPython
extension), compiled with ``-std=c11 -O2 -Wall -Wextra``, plus ``-Werror`` when the environment
sets ``SKIRR_WERROR=1`` (``make``, CI and the sanitizer builds do; a user's ``pip install`` does
not, so a newer compiler's new warning stays a warning there).
llhttp comes from ``scripts/fetch_llhttp.py``: inside an unpacked sdist the bundled, checksummed
``vendor/llhttp/`` (no network); else the system library through pkg-config, else the pinned,
sha256-checked PyPI sdist. Its sources are compiled here to objects WITHOUT -Werror (they are not
skirr's code) and linked in as extra objects.

``python -m build --sdist`` (the ``sdist`` command below) writes ``vendor/llhttp/`` into the sdist:
the pinned llhttp sources, their licences and SHA256SUMS (``fetch_llhttp.bundle``). The git
repository never holds them.
"""
import glob
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "scripts"))
import fetch_llhttp  # noqa: E402

SK_CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra"]
# make/CI/sanitizers: warnings are errors. Any other value than "1" (or unset) leaves them warnings.
if os.environ.get("SKIRR_WERROR") == "1":
    SK_CFLAGS.append("-Werror")
LLHTTP_CFLAGS = ["-std=c11", "-O2"]


def _rel(path):
    """Relative to the current directory when inside it (keeps object paths short)."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


class BuildExt(build_ext):
    """build_ext that first locates llhttp and compiles its sources without -Werror."""

    def build_extensions(self):
        try:
            dep = fetch_llhttp.locate(os.path.join(HERE, "build", "deps"))
        except (fetch_llhttp.FetchError, OSError) as exc:
            sys.exit(f"skirr build: llhttp: {exc}")
        objects = []
        if dep.sources:
            objects = self.compiler.compile(
                [_rel(s) for s in dep.sources],
                output_dir=os.path.join(self.build_temp, "llhttp"),
                include_dirs=[dep.include_dir],
                extra_postargs=LLHTTP_CFLAGS,
            )
        for ext in self.extensions:
            for flag in dep.cflags:
                if flag.startswith("-I"):
                    ext.include_dirs.append(flag[2:])
                else:
                    ext.extra_compile_args.append(flag)
            ext.include_dirs.append(dep.include_dir)
            for flag in dep.libs:
                if flag.startswith("-l"):
                    ext.libraries.append(flag[2:])
                elif flag.startswith("-L"):
                    ext.library_dirs.append(flag[2:])
                else:
                    ext.extra_link_args.append(flag)
            ext.extra_objects.extend(objects)
        super().build_extensions()


class Sdist(sdist):
    """sdist that bundles the pinned, verified llhttp sources and licences (vendor/llhttp/)."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        try:
            written = fetch_llhttp.bundle(base_dir)
        except (fetch_llhttp.FetchError, OSError) as exc:
            sys.exit(f"skirr sdist: llhttp: {exc}")
        for rel in written:
            print(f"skirr sdist: bundled {rel}")


def _sources():
    os.chdir(HERE)
    sources = sorted(glob.glob(os.path.join("src", "core", "*.c")))
    sources += sorted(glob.glob(os.path.join("src", "ext", "*.c")))
    if not sources:
        sys.exit("skirr build: no src/core/*.c or src/ext/*.c found")
    return sources


setup(
    ext_modules=[
        Extension(
            "skirr._native",
            sources=_sources(),
            depends=sorted(glob.glob(os.path.join("src", "*", "*.h"))),
            include_dirs=[os.path.join("src", "core"), os.path.join("src", "ext")],
            extra_compile_args=SK_CFLAGS,
            libraries=["z"],  # zlib from the system: permessage-deflate (src/ext/sk_wspmd.c)
        )
    ],
    cmdclass={"build_ext": BuildExt, "sdist": Sdist},
)
