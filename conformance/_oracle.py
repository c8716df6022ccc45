"""h11 as the reference parser, and the pieces the hypothesis properties share
(test_oracle_h11.py, test_oracle_divergences.py).

- ``h11_stream(data)``: what h11 (server role) parses from a byte stream, request after request,
  with skirr's documented reading of the places where the two differ on purpose (empty lines
  before a request-line are skipped; HTTP/1.0 keep-alive is honoured).
- ``expected_scope(req)``: the ASGI fields skirr must produce for one h11-parsed request.
- ``OracleApp``: records what the app saw per client port (so records of one connection are never
  mixed with another's, however late they arrive) and echoes the body with x-target, x-method.
- ``read_outcome(client)``: the responses of one connection, split into app responses and the
  refusal (if any), whether the server closed, and whether it went silent.
"""
from __future__ import annotations

import dataclasses
import os
import re
import socket
import threading
import time
from typing import Callable, Optional
from urllib.parse import unquote

import h11
from hypothesis import HealthCheck, settings

CANARY = b"GET /canary HTTP/1.1\r\nHost: c\r\n\r\n"


def examples(default: int = 200) -> int:
    """Examples per property: $SKIRR_HYPOTHESIS_EXAMPLES (2000 under `make conformance`)."""
    return int(os.environ.get("SKIRR_HYPOTHESIS_EXAMPLES", default))


def oracle_settings(n: Optional[int] = None) -> settings:
    """Reproducible runs: derandomize (the examples depend only on the test's code), no example
    database, no deadline (a socket round trip varies), health checks that measure generation
    speed or size off."""
    return settings(
        max_examples=examples() if n is None else n,
        deadline=None,
        derandomize=os.environ.get("SKIRR_HYPOTHESIS_RANDOM", "") == "",
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )


# -- h11's reading of a stream --------------------------------------------------------------------


@dataclasses.dataclass
class Parsed:
    method: bytes
    target: bytes
    headers: list  # [(lower-cased name, value)] as h11 hands them on
    http_version: bytes
    body: bytes


@dataclasses.dataclass
class StreamResult:
    requests: list  # [Parsed], complete requests in order
    end: str  # "idle" (nothing pending), "partial" (a message in progress), "error", "close"
    error: str = ""


def _keep_alive(req: Parsed) -> bool:
    tokens = set()
    for n, v in req.headers:
        if n == b"connection":
            tokens |= {t.strip().lower() for t in v.split(b",")}
    if b"close" in tokens:
        return False
    if req.http_version == b"1.0":
        return b"keep-alive" in tokens  # RFC 9112 §9.3 (h11 never keeps 1.0 alive)
    return True


def h11_stream(data: bytes) -> StreamResult:
    """Parses every request of data with h11, one fresh h11 connection per request (so a
    request that h11 would pause on, like Upgrade, does not stop the rest), after skipping empty
    lines before each request-line as skirr does (RFC 9112 §2.2)."""
    rest = data
    out: list = []
    while True:
        stripped = rest.lstrip(b"\r\n")
        if not stripped:
            return StreamResult(out, "idle" if not rest or rest.endswith(b"\n") else "partial")
        conn = h11.Connection(h11.SERVER)
        conn.receive_data(stripped)
        cur: Optional[Parsed] = None
        while True:
            try:
                ev = conn.next_event()
            except h11.RemoteProtocolError as e:
                return StreamResult(out, "error", str(e))
            if ev is h11.NEED_DATA:
                return StreamResult(out, "partial")
            if isinstance(ev, h11.Request):
                cur = Parsed(bytes(ev.method), bytes(ev.target),
                             [(bytes(n), bytes(v)) for n, v in ev.headers], bytes(ev.http_version), b"")
            elif isinstance(ev, h11.Data):
                cur.body += bytes(ev.data)
            elif isinstance(ev, h11.EndOfMessage):
                out.append(cur)
                rest = bytes(conn.trailing_data[0])
                break
            else:  # pragma: no cover - PAUSED cannot come before EndOfMessage
                return StreamResult(out, "error", f"unexpected {ev!r}")
        if not _keep_alive(cur):
            return StreamResult(out, "close")


def target_parts(target: bytes) -> tuple:
    """(raw_path, query_string, authority or None) skirr derives from a request-target (RFC 9112
    §3.2.2: the path and query of an absolute-form URL, "/" when its path is empty)."""
    t = target
    authority = None
    if not t.startswith((b"/", b"*")):
        i = t.find(b"://")
        if i >= 0:
            t = t[i + 3:]
            j = min([k for k in (t.find(b"/"), t.find(b"?")) if k >= 0], default=len(t))
            authority, t = t[:j], t[j:]
    path, sep, query = t.partition(b"?")
    if not path:
        path = b"/"
    return path, query, authority


def expected_scope(req: Parsed) -> dict:
    """The scope fields (and body) skirr must give the app for a request h11 parsed. h11
    lower-cases the Transfer-Encoding value; skirr passes it as received (compared
    case-insensitively, rule skirr-h11-te-value-raw). With an absolute-form target the Host
    value is the target's authority (rule RFC9112-3.2.2-absolute-form), and a request without
    Host (HTTP/1.0) gets one with it last (rule RFC9112-3.2.2-authority-syntax)."""
    raw_path, query, authority = target_parts(req.target)
    headers = [(n, authority if authority is not None and n == b"host" else v)
               for n, v in req.headers]
    if authority is not None and not any(n == b"host" for n, _ in req.headers):
        headers.append((b"host", authority))
    return {
        "method": req.method.decode("ascii"),
        "path": unquote(raw_path.decode("ascii")),
        "raw_path": raw_path,
        "query_string": query,
        "headers": headers,
        "http_version": req.http_version.decode("ascii"),
        "body": req.body,
    }


def comparable(fields: dict) -> dict:
    out = dict(fields)
    out["headers"] = [(n, v.lower() if n == b"transfer-encoding" else v) for n, v in fields["headers"]]
    return out


# -- the app ---------------------------------------------------------------------------------------


class OracleApp:
    """Records, per client port, what each request's app call saw; answers 200 with the body and
    x-target / x-method headers."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self.by_port: dict = {}
        self.total = 0

    async def __call__(self, scope, receive, send):
        body = b""
        complete = False
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                break
            body += msg.get("body", b"")
            if not msg.get("more_body", False):
                complete = True
                break
        rec = {
            "method": scope["method"], "path": scope["path"], "raw_path": scope["raw_path"],
            "query_string": scope["query_string"], "headers": [tuple(h) for h in scope["headers"]],
            "http_version": scope["http_version"], "body": body, "complete": complete,
        }
        port = scope["client"][1] if scope.get("client") else None
        with self._lock:
            self.by_port.setdefault(port, []).append(rec)
            self.total += 1
            self._lock.notify_all()
        if not complete:
            return
        target = scope["raw_path"] + (b"?" + scope["query_string"] if scope["query_string"] else b"")
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"x-target", target), (b"x-method", scope["method"].encode())]})
        await send({"type": "http.response.body", "body": body})

    def records(self, port: int) -> list:
        with self._lock:
            return list(self.by_port.get(port, []))

    def forget(self, port: int) -> None:
        with self._lock:
            self.by_port.pop(port, None)


def scope_fields(rec: dict) -> dict:
    return {k: rec[k] for k in ("method", "path", "raw_path", "query_string", "headers",
                                "http_version", "body")}


# -- reading what one connection got ---------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    served: list  # [(status, x-target, x-method, body)] app responses in order
    refusal: Optional[int]  # status of the server's own refusal, if any
    refusal_close: bool  # the refusal said connection: close
    closed: bool  # the server closed the connection
    silent: bool  # neither closed nor sent more within the idle time
    extra: bytes  # bytes after the refusal (must be empty)

    def key(self) -> tuple:
        return ([(s, t, m) for s, t, m, _ in self.served], self.refusal, self.closed)


_HEAD_END = b"\r\n\r\n"
_STATUS = re.compile(rb"HTTP/1\.1 (\d{3}) ")


def _head_fields(head: bytes) -> list:
    out = []
    for line in head.split(b"\r\n")[1:]:
        if line:
            n, _, v = line.partition(b":")
            out.append((n.strip().lower(), v.strip()))
    return out


def read_outcome(c, stop_after: Optional[bytes] = b"/canary", idle: float = 0.25,
                 owed: Optional[Callable[[list], bool]] = None, patience: float = 10.0) -> Outcome:
    """Reads responses until the server closes, the response for `stop_after` arrives, or
    nothing comes for `idle` seconds. Each response is checked with an h11 client.

    `owed(served)` says whether the server still owes a response after those read so far (the
    app finished a call not yet answered, or h11 read more complete requests): silence then
    is load, not the end, and the read waits up to `patience` seconds more before calling it
    silent. Without it a loaded machine (debug allocator, xdist workers on two cores) turns a
    late response into a false disagreement."""
    served: list = []
    buf = b""
    closed = False
    silent = False

    def more(timeout: float) -> bool:
        """One recv (at most `timeout` seconds): True if bytes came."""
        nonlocal buf, closed, silent
        if closed:
            return False
        c.sock.settimeout(timeout)
        try:
            data = c.sock.recv(65536)
        except socket.timeout:
            silent = True
            return False
        except ConnectionResetError:
            data = b""
        finally:
            c.sock.settimeout(c.timeout)
        if not data:
            closed = True
            return False
        buf += data
        return True

    def waited_out() -> bool:
        """True when nothing more is coming: closed, or silent for `idle` (and, while a
        response is owed, for `patience`)."""
        if more(idle):
            return False
        if closed or owed is None:
            return True
        deadline = time.monotonic() + patience
        while owed(served) and time.monotonic() < deadline:
            if more(min(idle, max(deadline - time.monotonic(), 0.01))):
                return False
            if closed:
                return True
        return True

    while True:
        while _HEAD_END not in buf:
            if closed or waited_out():
                return Outcome(served, None, False, closed, silent and not closed, buf)
        head, _, rest = buf.partition(_HEAD_END)
        m = _STATUS.match(head)
        assert m, f"not an HTTP/1.1 status-line: {head[:200]!r}"
        status = int(m.group(1))
        fields = dict(_head_fields(head))
        if b"x-target" not in fields:
            # the server's own refusal: the last thing on the connection
            while not closed:
                if not more(3.0) and not closed:
                    raise AssertionError(f"refusal {status} not followed by close: {buf[:300]!r}")
            head, _, rest = buf.partition(_HEAD_END)
            body_len = int(fields.get(b"content-length", b"0"))
            extra = b"" if len(rest) in (0, body_len) else rest  # a refused HEAD has no body
            return Outcome(served, status, fields.get(b"connection") == b"close", True, False, extra)
        method = fields[b"x-method"]
        n = 0 if method == b"HEAD" else int(fields[b"content-length"])
        while len(rest) < n:
            if not more(3.0):
                raise AssertionError(f"response body cut short: {buf[:300]!r}")
            head, _, rest = buf.partition(_HEAD_END)
        raw = head + _HEAD_END + rest[:n]
        _check_with_h11(raw, method)
        served.append((status, fields[b"x-target"], method, rest[:n]))
        buf = rest[n:]
        if stop_after is not None and fields[b"x-target"] == stop_after:
            return Outcome(served, None, False, closed, False, buf)


def _check_with_h11(raw: bytes, method: bytes) -> None:
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method=method, target="/", headers=[("host", "x")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(raw)
    while True:
        ev = conn.next_event()
        if isinstance(ev, h11.EndOfMessage):
            return
        assert ev is not h11.NEED_DATA, f"incomplete response: {raw[:300]!r}"


def deliver(srv, stream: bytes, cuts, how: str):
    """Sends `stream` on a fresh connection, in one write (how="whole") or cut at `cuts` (each
    taken modulo its length, "cut"). Returns the client and its local port (the key of its
    records in OracleApp)."""
    c = srv.connect()
    if how == "whole":
        c.send(stream)
    else:
        send_pieces(c, stream, [x % len(stream) for x in cuts])
    return c, c.sock.getsockname()[1]


def send_pieces(c, data: bytes, cuts, pause: float = 0.0005) -> None:
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    start = 0
    for cut in sorted({x for x in cuts if 0 < x < len(data)}) + [len(data)]:
        c.send(data[start:cut])
        start = cut
        if cut != len(data):
            time.sleep(pause)
