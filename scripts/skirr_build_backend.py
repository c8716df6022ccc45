"""skirr's PEP 517 build backend: setuptools' (``setuptools.build_meta``), with one difference.

It asks for pip as a build requirement only where the build may have to download llhttp: in a
checkout, ``scripts/fetch_llhttp.py`` runs ``python -m pip download`` inside the isolated build
environment. An unpacked sdist bundles the pinned, checksummed llhttp sources (``vendor/llhttp/``,
written by setup.py's sdist command), so building it needs setuptools alone and works with no
network from a wheel directory holding only setuptools (issue 16: ``pip install --no-index
--find-links DIR skirr-X.Y.Z.tar.gz``).

Named by ``[build-system] build-backend`` with ``backend-path = ["scripts"]`` in pyproject.toml;
included in the sdist (MANIFEST.in).
"""
from __future__ import annotations

import os

from setuptools import build_meta as _meta
from setuptools.build_meta import *  # noqa: F401,F403  (every other hook as setuptools has it)

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pip() -> list[str]:
    """``["pip"]`` in a checkout, ``[]`` in an unpacked sdist (it holds ``vendor/llhttp/``)."""
    return [] if os.path.isdir(os.path.join(_ROOT, "vendor", "llhttp")) else ["pip"]


def get_requires_for_build_wheel(config_settings=None) -> list[str]:
    """setuptools' requirements for a wheel, plus pip where llhttp may be downloaded."""
    return _meta.get_requires_for_build_wheel(config_settings) + _pip()


def get_requires_for_build_sdist(config_settings=None) -> list[str]:
    """setuptools' requirements for an sdist, plus pip where llhttp may be downloaded."""
    return _meta.get_requires_for_build_sdist(config_settings) + _pip()


def get_requires_for_build_editable(config_settings=None) -> list[str]:
    """setuptools' requirements for an editable install, plus pip where llhttp may be downloaded."""
    return _meta.get_requires_for_build_editable(config_settings) + _pip()
