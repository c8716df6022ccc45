"""Build script for skirr's C extension ``skirr._native`` (metadata lives in pyproject.toml).

The extension is every ``src/core/*.c`` (the byte-level core) and ``src/ext/*.c`` (the CPython
extension), compiled with ``-std=c11 -O2 -Wall -Wextra``, plus ``-Werror`` when the environment
sets ``SKIRR_WERROR=1`` (``make``, CI and the sanitizer builds do; a user's ``pip install`` does
not, so a newer compiler's new warning stays a warning there).
llhttp comes from ``scripts/fetch_llhttp.py``: inside an unpacked sdist the bundled, checksummed
``vendor/llhttp/`` (no network); else the system library through pkg-config, else the pinned,
sha256-checked PyPI sdist. Its sources are compiled here to objects WITHOUT -Werror (they are not
skirr's code) and linked in as extra objects.

OpenSSL 3 (libssl and libcrypto: the TLS stream layer ``src/ext/sk_tls.c`` and the TLS context)
comes from the system: ``pkg-config --cflags --libs openssl``, else the plain ``-lssl -lcrypto``
checked by compiling a call of ``SSL_new``; missing, the build stops saying what to install.
nghttp2 (the HTTP/2 framing and HPACK engine under ``src/ext/sk_h2.c``, used sans-I/O) comes from
the system the same way: ``pkg-config --cflags --libs libnghttp2``, else ``-lnghttp2`` checked by
compiling a call of ``nghttp2_session_server_new``; missing, the build names libnghttp2-dev.

``python -m build --sdist`` (the ``sdist`` command below) writes ``vendor/llhttp/`` into the sdist:
the pinned llhttp sources, their licences and SHA256SUMS (``fetch_llhttp.bundle``). The git
repository never holds them.
"""
import glob
import os
import shlex
import subprocess
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


OPENSSL_MISSING = (
    "skirr build: OpenSSL 3 not found (libssl, libcrypto and their headers, for TLS): install "
    "libssl-dev (Debian, Ubuntu) or openssl-devel (Fedora, RHEL), or point PKG_CONFIG_PATH at "
    "an openssl.pc"
)

NGHTTP2_MISSING = (
    "skirr build: nghttp2 not found (libnghttp2 and its headers, for HTTP/2): install "
    "libnghttp2-dev (Debian, Ubuntu) or libnghttp2-devel (Fedora, RHEL), or point "
    "PKG_CONFIG_PATH at a libnghttp2.pc"
)


def _openssl_flags(compiler):
    """libssl/libcrypto's compiler and linker flags: pkg-config's, else -lssl -lcrypto once a
    call of SSL_new compiles and links with them; exits with OPENSSL_MISSING otherwise."""
    try:
        out = subprocess.run(
            ["pkg-config", "--cflags", "--libs", "openssl"],
            check=True, capture_output=True, text=True,
        ).stdout
        flags = shlex.split(out)
        if any(f.startswith("-lssl") for f in flags):
            return flags
    except (OSError, subprocess.CalledProcessError):
        pass
    if compiler.has_function("SSL_new", includes=["openssl/ssl.h"], libraries=["ssl", "crypto"]):
        return ["-lssl", "-lcrypto"]
    sys.exit(OPENSSL_MISSING)


def _nghttp2_flags(compiler):
    """libnghttp2's compiler and linker flags: pkg-config's, else -lnghttp2 once a call of
    nghttp2_session_server_new compiles and links with it; exits with NGHTTP2_MISSING otherwise."""
    try:
        out = subprocess.run(
            ["pkg-config", "--cflags", "--libs", "libnghttp2"],
            check=True, capture_output=True, text=True,
        ).stdout
        flags = shlex.split(out)
        if any(f.startswith("-lnghttp2") for f in flags):
            return flags
    except (OSError, subprocess.CalledProcessError):
        pass
    if compiler.has_function("nghttp2_session_server_new", includes=["nghttp2/nghttp2.h"],
                             libraries=["nghttp2"]):
        return ["-lnghttp2"]
    sys.exit(NGHTTP2_MISSING)


def _add_flags(ext, flags):
    """-I, -l, -L into their lists; any other flag to the compile (cflags) or link step."""
    for flag in flags:
        if flag.startswith("-I"):
            ext.include_dirs.append(flag[2:])
        elif flag.startswith("-l"):
            ext.libraries.append(flag[2:])
        elif flag.startswith("-L"):
            ext.library_dirs.append(flag[2:])
        else:
            ext.extra_link_args.append(flag)


class BuildExt(build_ext):
    """build_ext that first locates llhttp and compiles its sources without -Werror, and finds
    OpenSSL and nghttp2."""

    def build_extensions(self):
        openssl = _openssl_flags(self.compiler)
        nghttp2 = _nghttp2_flags(self.compiler)
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
            _add_flags(ext, openssl)
            _add_flags(ext, nghttp2)
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
            # zlib from the system: permessage-deflate (src/ext/sk_wspmd.c); OpenSSL 3's libssl
            # and libcrypto (TLS: src/ext/sk_tls.c, sk_tlsctx.c) are added by BuildExt
            # (_openssl_flags: pkg-config, else -lssl -lcrypto; _nghttp2_flags likewise)
            libraries=["z"],
        )
    ],
    cmdclass={"build_ext": BuildExt, "sdist": Sdist},
)
