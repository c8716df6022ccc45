"""skirr: an HTTP/1.1 ASGI server for CPython whose hot path is a C extension.

    python -m skirr module:app            # the CLI (see ``python -m skirr --help``)
    skirr.run(app, host="127.0.0.1", port=8000)

Public names: ``Config``, ``Server``, ``run``, ``ClientDisconnected`` (raised by ``send`` when the
client has gone away; a subclass of ``OSError``) and ``__version__``.
"""
__version__ = "0.1.0"

from ._native import ClientDisconnected  # noqa: E402
from .config import Config  # noqa: E402
from .server import Server, run  # noqa: E402

__all__ = ["ClientDisconnected", "Config", "Server", "run", "__version__"]
