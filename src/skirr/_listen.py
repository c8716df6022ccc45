"""The listening sockets: binding TCP and Unix-domain addresses, and adopting inherited ones.

Owns: turning a ``Config``'s address (``fd``, ``uds`` with ``uds_perms``, ``host``:``port``) into
a bound, non-blocking socket that is not listening yet, every failure as one ``ConfigError`` line.
Used by ``skirr.server`` (one process) and ``skirr.supervisor`` (the sockets its workers inherit),
which import it and not each other for it. Never: listens or accepts.
"""
from __future__ import annotations

import contextlib
import os
import socket
import stat

from .config import DEFAULT_UDS_PERMS, Config, ConfigError


def bind_socket(config: Config) -> socket.socket:
    """The one bound, non-blocking, not yet listening socket of ``config``: its inherited ``fd``,
    a Unix-domain socket at ``uds`` (mode ``uds_perms``), or TCP ``host:port``.

    Raises:
        ConfigError: the address could not be bound (in use, bad host, no permission, ...), or
            ``fd`` is not a bound stream socket.
    """
    if config.fd is not None:
        return socket_from_fd(config.fd)
    if config.uds:
        perms = DEFAULT_UDS_PERMS if config.uds_perms is None else config.uds_perms
        return _bind_unix(config.uds, perms)
    return bind_tcp(config.host, config.port)


def bind_tcp(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A TCP socket bound to ``host:port`` (IPv6 when ``host`` contains ``:``), non-blocking,
    not listening; with ``reuse_port``, ``SO_REUSEPORT`` is set first (Linux spreads new
    connections over every listener of the group).

    Raises:
        ConfigError: the address could not be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        where = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
        raise ConfigError(f"could not bind to {where}: {exc.strerror or exc}") from None
    return sock


def listen_url(sock: socket.socket, https: bool, host: str | None = None,
               uds: str | None = None) -> str:
    """Where a startup line says ``sock`` serves: "unix socket PATH" (``uds`` when the socket
    has no name), else "http://HOST:PORT" or "https://HOST:PORT" (``https``: TLS), HOST the
    socket's own address unless ``host`` is given, in brackets for IPv6."""
    if sock.family == socket.AF_UNIX:
        return f"unix socket {sock.getsockname() or uds}"
    bound, port = sock.getsockname()[:2]
    name = bound if host is None else host
    if sock.family == socket.AF_INET6:
        name = f"[{name}]"
    return f"{'https' if https else 'http'}://{name}:{port}"


def socket_from_fd(fd: int) -> socket.socket:
    """The socket object of an inherited descriptor (``--fd``, systemd's ``LISTEN_FDS``).

    Raises:
        ConfigError: ``fd`` is not open, not a stream socket, or not bound.
    """
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise ConfigError(f"--fd {fd}: {exc.strerror or exc}") from None
    try:
        name = sock.getsockname()
        if sock.type != socket.SOCK_STREAM:
            raise ConfigError(f"--fd {fd}: not a stream socket")
        if sock.family in (socket.AF_INET, socket.AF_INET6) and name[1] == 0:
            raise ConfigError(f"--fd {fd}: the socket is not bound")
        sock.setblocking(False)
    except BaseException:
        sock.detach()
        raise
    return sock


def _bind_unix(path: str, perms: int = 0o666) -> socket.socket:
    """Binds a Unix-domain socket at ``path``, removing a stale socket file left by a dead
    server (one nobody accepts on). The file gets mode ``perms`` (``--uds-perms``; by default
    0666, connectable by any user, as uvicorn's, so that a proxy running as another user can
    connect).

    Raises:
        ConfigError: ``path`` is in use, is not a socket, or cannot be bound.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ConfigError(f"could not bind to unix socket {path}: {exc.strerror}") from None
    else:
        if not stat.S_ISSOCK(mode):
            raise ConfigError(f"could not bind to unix socket {path}: exists and is not a socket")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(1.0)
            try:
                probe.connect(path)
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)  # stale
            except OSError as exc:
                raise ConfigError(
                    f"could not bind to unix socket {path}: {exc.strerror or exc}"
                ) from None
            else:
                raise ConfigError(
                    f"could not bind to unix socket {path}: Address already in use"
                )
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, perms)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"could not bind to unix socket {path}: {exc.strerror or exc}") from None
    return sock
