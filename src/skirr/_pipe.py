"""The protocol between the supervisor (``skirr.supervisor``) and its workers (``skirr._worker``).

Owns: the name of the environment variable a worker is described by (``ENV``: JSON with the
``config`` fields, the inherited listening ``fds``, the ``pipe``'s write end and the
``supervisor``'s pid, the parent the worker must not outlive), and the framing
of the messages a worker writes to that pipe. Each message is one byte, except S:

    R   accepting (the worker's startup is done)
    H   heartbeat, every fifth of ``timeout_worker_healthcheck``
    M   ``--limit-max-requests`` reached: start my replacement, then stop me with SIGTERM
    S   ``--metrics-port``: S, a 4-byte big-endian length, then the worker's counters
        (``skirr.metrics.encode``); after every heartbeat, and once more when the worker exits

``STARTUP_SIGNALS``: those a worker is spawned with blocked until it has its own disposition for
each (SIGTERM, and those it ignores: the supervisor's to act on; a terminal's Ctrl-C reaches the
whole process group), so one sent while its interpreter starts waits instead of killing it.

Both sides import this module and nothing of each other. Never: does I/O (the worker's write
side with its queue is ``skirr._worker``, the read side ``skirr.supervisor``).
"""
from __future__ import annotations

import signal
import struct

ENV = "SKIRR_WORKER"
STARTUP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGTTIN,
                             signal.SIGTTOU})
READY, HEARTBEAT, RETIRE, SNAPSHOT = b"R", b"H", b"M", b"S"
_LENGTH = struct.Struct(">I")


def frame(payload: bytes) -> bytes:
    """An S message carrying ``payload``."""
    return SNAPSHOT + _LENGTH.pack(len(payload)) + payload


def parse(buffer: bytearray) -> list[tuple[bytes, bytes]]:
    """Takes the whole messages off the front of ``buffer`` (the supervisor's read side):
    ``(kind, payload)`` pairs, payload empty but for S. An incomplete S stays in ``buffer``;
    an unknown byte is dropped."""
    out = []
    while buffer:
        kind = bytes(buffer[:1])
        if kind != SNAPSHOT:
            del buffer[:1]
            out.append((kind, b""))
            continue
        if len(buffer) < 1 + _LENGTH.size:
            break
        (n,) = _LENGTH.unpack_from(buffer, 1)
        end = 1 + _LENGTH.size + n
        if len(buffer) < end:
            break
        out.append((kind, bytes(buffer[1 + _LENGTH.size:end])))
        del buffer[:end]
    return out
