"""Shared machinery for the over-the-socket conformance cases.

Every case runs against the real server in a thread of this process, once per event loop
(``loop_name`` is parametrized over asyncio and uvloop), and talks to it over a real TCP socket.

    def test_x(serve, echo_app):
        with serve(echo_app) as srv:          # skirr.Server in a thread, bound to 127.0.0.1:0
            c = srv.connect()                 # a Client: raw socket + h11 response reader
            c.send(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
            r = c.response()                  # h11-parsed, complete, in order (pipelining-safe)
            assert r.status == 200

Pieces:
- ``serve(app, **config)``: context manager; starts ``skirr.Server(skirr.Config(app, ...))`` in a
  thread, waits (bounded) for ``started``, yields a ``Running`` handle (``.port``, ``.connect()``,
  ``.errors()``); on exit closes its clients, calls ``request_shutdown()`` and joins (bounded),
  failing the test if the thread does not stop, if ``run()`` raised, or if the loop logged an error
  on the ``asyncio`` logger (an exception escaping the reactor's callbacks).
- ``Client``: every socket has a timeout (IO_TIMEOUT); ``response(method)`` reads exactly one
  response with a fresh ``h11.Connection(h11.CLIENT)`` that is told about a matching request
  (bytes not sent), keeps any following bytes for the next call (pipelining), and reports an
  incomplete message (peer closed mid-message) instead of raising when asked to.
- ``Recorder``: a thread-safe list the app (server thread) appends to and the test waits on.
- ``echo_app``: records each call (scope snapshot + received events) and answers 200 with the
  request body; header ``x-target`` carries the raw path and query.
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import copy
import dataclasses
import logging
import os
import socket
import struct
import threading
import time
from typing import Any, Callable, Iterator, Optional

import h11
import pytest

import _rules

IO_TIMEOUT = 5.0  # seconds: every socket operation of a client
START_TIMEOUT = 10.0  # seconds: server thread start (started event)
STOP_TIMEOUT = 10.0  # seconds: server thread join after request_shutdown()
LOOPS = ["asyncio", "uvloop"]


# ----------------------------------------------------------------------------------------------
# Recording what the application saw


class Recorder:
    """A list shared between the app (server thread) and the test thread."""

    def __init__(self) -> None:
        self._items: list[Any] = []
        self._cond = threading.Condition()

    def put(self, item: Any) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify_all()

    def wait(self, n: int = 1, timeout: float = IO_TIMEOUT) -> list[Any]:
        """Waits until at least n items were put; returns a copy of all of them."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._items) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"expected {n} recorded item(s) within {timeout}s, got {len(self._items)}:"
                        f" {self._items!r}"
                    )
                self._cond.wait(left)
            return list(self._items)

    @property
    def items(self) -> list[Any]:
        with self._cond:
            return list(self._items)

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)


def streaming_app(started: threading.Event):
    """An app answering without content-length: 1,000 bytes at once, 1,000 more every 10 ms (2 s
    at most), then b"END"; `started` is set after the first piece, and it stops when send()
    says the client is gone (a streamed body a client can cut)."""

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x" * 1000, "more_body": True})
        started.set()
        try:
            for _ in range(200):
                await asyncio.sleep(0.01)
                await send({"type": "http.response.body", "body": b"y" * 1000, "more_body": True})
            await send({"type": "http.response.body", "body": b"END"})
        except OSError:
            return

    return app


def final_piece_app(size: int):
    """An app answering without content-length: 1,000 bytes, then a final piece of `size` bytes
    handed over whole (a close-delimited body whose end waits on that piece leaving skirr); it
    stops when send() says the client is gone."""

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            await send({"type": "http.response.body", "body": b"x" * 1000, "more_body": True})
            await send({"type": "http.response.body", "body": b"y" * size})
        except OSError:
            pass

    return app


def snapshot(scope: dict) -> dict:
    """A deep copy of a scope, taken by the app before anything can mutate it."""
    return copy.deepcopy(scope)


class EchoApp:
    """ASGI app: records {"scope", "events"} per HTTP call, reads the whole body, answers 200 with
    the body (content-type text/plain, x-target = raw_path[?query_string])."""

    def __init__(self) -> None:
        self.calls = Recorder()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise RuntimeError(f"EchoApp only serves http, got {scope['type']!r}")
        snap = snapshot(scope)
        events = []
        body = b""
        while True:
            msg = await receive()
            events.append(msg)
            if msg["type"] != "http.request":
                break
            body += msg.get("body", b"")
            if not msg.get("more_body", False):
                break
        target = scope["raw_path"]
        if scope["query_string"]:
            target += b"?" + scope["query_string"]
        self.calls.put({"scope": snap, "events": events, "body": body})
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"x-target", target)],
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})


# ----------------------------------------------------------------------------------------------
# The client side


@dataclasses.dataclass
class Response:
    """One response as h11 parsed it. ``complete`` is False when the peer closed mid-message (or
    before any response); then ``status`` may be None."""

    status: Optional[int]
    reason: bytes
    http_version: bytes
    headers: list  # [(name lower-cased bytes, value bytes)], order and duplicates kept
    body: bytes
    informational: list  # h11.InformationalResponse events (1xx) seen before the response
    complete: bool
    raw: bytes  # every byte read while parsing this response (may include following bytes)

    def get_all(self, name: bytes) -> list:
        return [v for n, v in self.headers if n == name]

    def get(self, name: bytes) -> Optional[bytes]:
        """The single value of a field, None if absent; asserts the field is not repeated."""
        values = self.get_all(name)
        assert len(values) <= 1, f"field {name!r} repeated: {values!r}"
        return values[0] if values else None


class Client:
    """A blocking client (TCP, or a given connected socket) with a timeout on every operation."""

    def __init__(self, port: int, timeout: float = IO_TIMEOUT,
                 sock: Optional[socket.socket] = None) -> None:
        """A new connection to 127.0.0.1:port, or `sock` (connected: a Unix socket, say)."""
        if sock is None:
            sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        sock.settimeout(timeout)
        self.sock = sock
        self.timeout = timeout
        self.buf = b""  # bytes read but not yet consumed by a reader
        self.eof = False  # the peer closed (FIN or RST)
        self.reset = False  # the peer's close was a reset

    # -- sending

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        self.sock.close()

    def abort(self) -> None:
        """Closes with a reset (SO_LINGER 0)."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    # -- receiving raw bytes

    def _recv(self, timeout: Optional[float] = None, what: str = "data") -> bytes:
        """One recv; b"" at EOF (or reset). Raises AssertionError on timeout."""
        if self.eof:
            return b""
        self.sock.settimeout(self.timeout if timeout is None else timeout)
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            self.reset = True
            data = b""
        except socket.timeout:
            raise AssertionError(
                f"no {what} from the server within {self.sock.gettimeout()}s"
                f" (unconsumed bytes: {self.buf[:500]!r})"
            ) from None
        finally:
            self.sock.settimeout(self.timeout)
        if not data:
            self.eof = True
        return data

    def read_exact(self, n: int) -> bytes:
        parts, have = [self.buf], len(self.buf)  # joined once: += on bytes is quadratic
        while have < n:
            data = self._recv(what=f"{n} bytes")
            if not data:
                self.buf = b"".join(parts)
                raise AssertionError(f"peer closed after {have} of {n} bytes: {self.buf[:500]!r}")
            parts.append(data)
            have += len(data)
        self.buf = b"".join(parts)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_until(self, sep: bytes) -> bytes:
        """Bytes up to and including the first sep."""
        while sep not in self.buf:
            data = self._recv(what=repr(sep))
            if not data:
                raise AssertionError(f"peer closed before {sep!r}; got {self.buf!r}")
            self.buf += data
        i = self.buf.index(sep) + len(sep)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def read_until_close(self, timeout: Optional[float] = None) -> bytes:
        """Every byte until the peer closes; AssertionError if it does not within the timeout."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        parts = [self.buf]  # joined once: += on bytes is quadratic (32 MiB took over 10 s)
        while not self.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                got = b"".join(parts)[:500]
                raise AssertionError(f"server did not close the connection; got {got!r}")
            parts.append(self._recv(timeout=left, what="close"))
        out, self.buf = b"".join(parts), b""
        return out

    def read_for(self, seconds: float) -> bytes:
        """Whatever arrives within `seconds` (possibly nothing); never fails on silence."""
        deadline = time.monotonic() + seconds
        parts = [self.buf]
        while not self.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                self.reset = True
                data = b""
            finally:
                self.sock.settimeout(self.timeout)
            if not data:
                self.eof = True
            parts.append(data)
        out, self.buf = b"".join(parts), b""
        return out

    def expect_eof(self, timeout: Optional[float] = None) -> None:
        """Asserts no further bytes arrive and the server closes the connection."""
        rest = self.read_until_close(timeout)
        assert rest == b"", f"bytes after the last response before close: {rest[:500]!r}"

    # -- receiving parsed responses

    def response(self, method: str = "GET", allow_incomplete: bool = False) -> Response:
        """Reads one response (after any 1xx) with h11. Bytes past its end stay buffered for the
        next call. If the server closes mid-message, returns complete=False when allowed, else
        fails."""
        conn = h11.Connection(h11.CLIENT)
        # Tell h11 what was asked (so it knows HEAD has no body); these bytes are not sent.
        conn.send(h11.Request(method=method, target="/", headers=[("host", "x")]))
        conn.send(h11.EndOfMessage())
        raw = bytearray(self.buf)
        fed_eof = False
        if self.buf:
            conn.receive_data(self.buf)
            self.buf = b""
        res = Response(None, b"", b"", [], b"", [], False, b"")
        body = bytearray()
        while True:
            try:
                ev = conn.next_event()
            except h11.RemoteProtocolError as e:
                if fed_eof:  # peer closed mid-message
                    break
                raise AssertionError(f"invalid HTTP from the server: {e}; bytes: {bytes(raw)[:2000]!r}")
            if ev is h11.NEED_DATA:
                data = self._recv(what="response bytes")
                raw += data
                conn.receive_data(data)  # b"" tells h11 about EOF
                if not data:
                    fed_eof = True
                continue
            if isinstance(ev, h11.InformationalResponse):
                res.informational.append(ev)
            elif isinstance(ev, h11.Response):
                res.status = ev.status_code
                res.reason = bytes(ev.reason)
                res.http_version = bytes(ev.http_version)
                res.headers = [(bytes(n), bytes(v)) for n, v in ev.headers.raw_items()]
                res.headers = [(n.lower(), v) for n, v in res.headers]
            elif isinstance(ev, h11.Data):
                body += ev.data
            elif isinstance(ev, h11.EndOfMessage):
                res.complete = True
                break
            elif isinstance(ev, h11.ConnectionClosed):
                break
            else:  # pragma: no cover - PAUSED cannot happen before EndOfMessage
                raise AssertionError(f"unexpected h11 event {ev!r}")
        trailing, closed = conn.trailing_data
        self.buf = bytes(trailing)
        if closed:
            self.eof = True
        res.body = bytes(body)
        res.raw = bytes(raw)
        if not res.complete and not allow_incomplete:
            raise AssertionError(
                f"server closed before a complete response; bytes: {res.raw[:2000]!r}"
            )
        return res

    def request(self, data: bytes, method: str = "GET") -> Response:
        self.send(data)
        return self.response(method)


def http_request(
    method: str = "GET",
    target: str = "/",
    headers: Optional[list] = None,
    body: bytes = b"",
    version: str = "HTTP/1.1",
) -> bytes:
    """Bytes of a request. headers default to Host: x; Content-Length is added when body is set
    and no framing field is given."""
    hs = [(b"Host", b"x")] if headers is None else [(_b(n), _b(v)) for n, v in headers]
    if body and not any(n.lower() in (b"content-length", b"transfer-encoding") for n, _ in hs):
        hs.append((b"Content-Length", str(len(body)).encode()))
    head = f"{method} {target} {version}\r\n".encode("latin-1")
    head += b"".join(n + b": " + v + b"\r\n" for n, v in hs)
    return head + b"\r\n" + body


def _b(x) -> bytes:
    return x if isinstance(x, bytes) else x.encode("latin-1")


# ----------------------------------------------------------------------------------------------
# The server side


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._lock_list = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock_list:
            self.records.append(record)

    def at_least(self, level: int) -> list:
        with self._lock_list:
            return [r for r in self.records if r.levelno >= level]


def record_text(record: logging.LogRecord) -> str:
    """The message plus its formatted exception, for matching."""
    text = record.getMessage()
    if record.exc_info:
        text += "\n" + logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        text += "\n" + record.exc_text
    return text


class Running:
    """A skirr.Server running in a thread. Use through the ``serve`` fixture."""

    def __init__(self, app: Callable, config: dict) -> None:
        import skirr

        self.loop_name = config["loop"]
        self.config = skirr.Config(app, host="127.0.0.1", port=0, **config)
        self.server = skirr.Server(self.config)
        self.exc: Optional[BaseException] = None
        self.port: int = 0
        self.clients: list[Client] = []
        self._error_log = _Capture()
        self._asyncio_log = _Capture()
        self.thread = threading.Thread(target=self._run, name=f"skirr-{self.loop_name}", daemon=True)

    def _run(self) -> None:
        try:
            self.server.run()
        except BaseException as e:  # reported by stop()
            self.exc = e

    def _attach_logs(self) -> None:
        for name, h in (("skirr.error", self._error_log), ("asyncio", self._asyncio_log)):
            logger = logging.getLogger(name)
            if h not in logger.handlers:
                logger.addHandler(h)

    def _detach_logs(self) -> None:
        logging.getLogger("skirr.error").removeHandler(self._error_log)
        logging.getLogger("asyncio").removeHandler(self._asyncio_log)

    def start(self) -> None:
        self._attach_logs()
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self.server.started.wait(0.05):
            if not self.thread.is_alive():
                self._detach_logs()
                raise AssertionError(f"server thread ended before starting: {self.exc!r}") from self.exc
            if time.monotonic() > deadline:
                self.server.request_shutdown()
                self.thread.join(STOP_TIMEOUT)
                self._detach_logs()
                raise AssertionError(f"server did not start within {START_TIMEOUT}s")
        # The server may have configured logging while starting: make sure we still listen.
        self._attach_logs()
        self.port = self.server.port
        assert isinstance(self.port, int) and self.port > 0, f"bad bound port {self.port!r}"

    def stop(self) -> None:
        for c in self.clients:
            with contextlib.suppress(OSError):
                c.close()
        self.server.request_shutdown()
        self.thread.join(STOP_TIMEOUT)
        self._detach_logs()
        if self.thread.is_alive():
            pytest.fail(f"server thread did not stop within {STOP_TIMEOUT}s of request_shutdown()")
        if self.exc is not None:
            raise AssertionError(f"server.run() raised {self.exc!r}") from self.exc
        exit_code = getattr(self.server, "exit_code", 0)
        assert exit_code == 0, f"server.run() ended with exit_code {exit_code!r}"
        loop_errors = self._asyncio_log.at_least(logging.ERROR)
        if loop_errors:
            pytest.fail(
                "the event loop logged errors (exception escaping a server callback?):\n"
                + "\n---\n".join(record_text(r) for r in loop_errors)
            )

    def connect(self, timeout: float = IO_TIMEOUT) -> Client:
        c = Client(self.port, timeout)
        self.clients.append(c)
        return c

    def errors(self) -> list:
        """Records of level ERROR or above on the ``skirr.error`` logger so far."""
        return self._error_log.at_least(logging.ERROR)

    def get(self, target: str = "/") -> Response:
        """One GET on a fresh connection."""
        c = self.connect()
        try:
            return c.request(http_request("GET", target))
        finally:
            c.close()


def pytest_addoption(parser) -> None:
    _rules.addoption(parser)


def pytest_configure(config) -> None:
    """The ``rule`` marker and its check against spec/ (conformance/_rules.py); and, in the
    process that runs the cases, PYTHONDEVMODE out of the environment when conformance/run.py's
    debug mode put it there only for the pytest-xdist workers (SKIRR_DEVMODE_TESTS_ONLY)."""
    _rules.configure(config)
    xdist_controller = bool(config.getoption("numprocesses", None)) and not hasattr(
        config, "workerinput")
    if os.environ.get("SKIRR_DEVMODE_TESTS_ONLY") and not xdist_controller:
        os.environ.pop("PYTHONDEVMODE", None)


@pytest.fixture(params=LOOPS)
def loop_name(request) -> str:
    """The event loop under test: every case runs on asyncio and on uvloop."""
    return request.param


@pytest.fixture
def serve(loop_name) -> Callable[..., contextlib.AbstractContextManager]:
    """``with serve(app, **config) as srv:`` runs skirr in a thread on the parametrized loop.

    config goes to skirr.Config; defaults: loop=<loop_name>, lifespan="off",
    timeout_graceful_shutdown=2.0."""

    @contextlib.contextmanager
    def _serve(app: Callable, **config: Any) -> Iterator[Running]:
        config.setdefault("loop", loop_name)
        config.setdefault("lifespan", "off")
        # In-flight requests get this long after shutdown; the join below is bounded anyway.
        config.setdefault("timeout_graceful_shutdown", 2.0)
        run = Running(app, config)
        run.start()
        try:
            yield run
        finally:
            run.stop()

    return _serve


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"_skirr_rep_{report.when}", report)


_unchecked: list = []  # nodeid of the last passing test that ran a server, not yet checked


@pytest.fixture(autouse=True)
def _nothing_live_after(request):
    """The leak and lifetime check (issue 4) for every passing test that ran a server
    in-process. It runs when the next test starts (and at the end of the session): only then has
    pytest let go of the previous test's log records, whose tracebacks hold the app's frames."""
    if _unchecked:
        assert_nothing_live(_unchecked.pop())
    yield
    rep = getattr(request.node, "_skirr_rep_call", None)
    if "serve" in request.fixturenames and rep is not None and rep.passed:
        _unchecked.append(request.node.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtestloop(session):
    """The leak check of the session's last server test, once every test has run. A failure
    counts as a failed test: the exit status is 1, and under pytest-xdist the worker's
    ``shouldfail`` reaches the controller, which stops with a non-zero status."""
    yield
    if _unchecked:
        try:
            assert_nothing_live(_unchecked.pop())
        except AssertionError as exc:
            print(f"\n{exc}")
            session.testsfailed += 1
            session.shouldfail = str(exc)


def assert_nothing_live(after: str = "") -> None:
    """Leak and lifetime check (issue 4): once a server has stopped and a collection has run, no
    skirr Server, connection, Request or ready awaitable is alive (skirr._native._live())."""
    from skirr import _native

    # Counted first: a collection only frees, so counts that are all zero stay zero and the
    # collection (about 0.15 s a case in a worker's grown heap: 40% of the suite's time when
    # every case paid it) is needed only when something is still alive.
    live = _native._live()
    if any(live.values()):
        gc.collect()
        live = _native._live()
    assert live == {"servers": 0, "connections": 0, "requests": 0, "awaitables": 0}, (
        f"skirr objects still alive after {after or 'the server stopped'}: {live}")


@pytest.fixture
def echo_app() -> EchoApp:
    return EchoApp()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()
