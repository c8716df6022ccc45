"""The workloads: which app each one serves, the request it sends and the exact answer it expects.

Owns: the workload table (raw_get, post_4k, get_64k, fastapi_json, pipelined_get, file_1m, and
streaming; the WebSocket rows ws_echo_64 and ws_echo_1k: message size and frame type),
the request shapes wrk sends for them (its Lua request scripts), a minimal HTTP/1.1 client for the
exact status-and-body checks made before and after every run (over TLS for the TLS rows: Python's
`ssl` verifying the run's test certificate as its CA), and the app called directly with a
workload's scope (no network) for the app's own CPU per request.

Never: starts or stops a server, reads /proc or times a run (measure.py does), or decides what a
figure means (report.py does). The expected bodies come from the apps in bench/apps, never from a
copy here.
"""
from __future__ import annotations

import selectors
import socket
import ssl
import sys
import time

from .env import APPS, tls_files

if str(APPS) not in sys.path:
    sys.path.insert(0, str(APPS))  # the apps are imported by name: raw_apps here, any in direct_caller
import raw_apps  # noqa: E402  (the expected bodies come from the apps themselves)
import file_apps  # noqa: E402
import cpu_work  # noqa: E402

HELLO = raw_apps.HELLO
BIG = raw_apps.BIG
FILE_1M = file_apps.FILE_1M
FILE_1M_PATH = file_apps.PATH
POST_BODY = b"0123456789abcdef" * 256  # 4 KiB, the same bytes the wrk script sends
JSON_BODY = b'{"id":1,"name":"widget","price":9.99,"tags":["a","b"]}'
PIPELINE_DEPTH = 16

# wrk's request shapes beyond a plain GET of the workload's path (prepended to the report script).
LUA_POST = """
wrk.method = "POST"
wrk.body = string.rep("0123456789abcdef", 256)
wrk.headers["Content-Type"] = "application/octet-stream"
"""
LUA_PIPELINE = """
local batch
init = function(args)
  local r = {}
  for i = 1, %d do r[i] = wrk.format(nil, nil) end
  batch = table.concat(r)
end
request = function() return batch end
""" % PIPELINE_DEPTH

# The churn rows (issue 37): every request asks for its connection to be closed, so wrk opens a new
# TCP connection per request (it reconnects when the server closes).
LUA_CLOSE = """
wrk.headers["Connection"] = "close"
"""

# name -> app (module:attr in bench/apps), request path, method, request body, exact response body,
# requests per write when pipelined, wrk's Lua request shape
WORKLOADS = {
    "raw_get": dict(app="raw_apps:raw", path="/", method="GET", body=b"", expect=HELLO),
    "post_4k": dict(app="raw_apps:echo", path="/echo", method="POST", body=POST_BODY, expect=POST_BODY,
                    wrk_lua=LUA_POST),
    "get_64k": dict(app="raw_apps:big", path="/64k", method="GET", body=b"", expect=BIG),
    "fastapi_json": dict(app="fastapi_json:app", path="/json", method="GET", body=b"", expect=JSON_BODY),
    # a `def` endpoint doing ~1 ms of pure-Python work in FastAPI's thread pool (bench/apps/
    # cpu_work.py): the threads profile's row (issue 34), where a free-threaded Python's thread
    # workers can use every core from one process
    "fastapi_cpu": dict(app="fastapi_json:app", path="/cpu", method="GET", body=b"",
                        expect=cpu_work.CPU_BODY),
    "pipelined_get": dict(app="raw_apps:raw", path="/", method="GET", body=b"", expect=HELLO,
                          pipeline=PIPELINE_DEPTH, wrk_lua=LUA_PIPELINE),
    # Starlette FileResponse of 1 MiB (issue 17); the app's own CPU is measured with pathsend
    # offered, as skirr and granian run it
    "file_1m": dict(app="file_apps:app", path="/file_1m", method="GET", body=b"", expect=FILE_1M,
                    extensions={"http.response.pathsend": {}}),
    # The churn rows (issue 37, bench/harness/scale.py): raw_get and fastapi_json, a new
    # connection per request
    "raw_get_close": dict(app="raw_apps:raw", path="/", method="GET", body=b"", expect=HELLO,
                          wrk_lua=LUA_CLOSE),
    "fastapi_json_close": dict(app="fastapi_json:app", path="/json", method="GET", body=b"",
                               expect=JSON_BODY, wrk_lua=LUA_CLOSE),
}
# The WebSocket rows (issue 14), driven by bench/ws_load.c instead of wrk: every connection a closed
# loop of one masked frame of `size` bytes out and its echo back (compared byte for byte);
# `binary`: binary frames, else text (ASCII, so every server decodes and re-encodes UTF-8 as an
# app's str messages make it). name -> app (module:attr in bench/apps), path, size, binary
WS_WORKLOADS = {
    "ws_echo_64": dict(app="ws_apps:echo", path="/", size=64, binary=False),  # the latency row
    "ws_echo_1k": dict(app="ws_apps:echo", path="/", size=1024, binary=False),
}
STREAM_APP = "raw_apps:stream"
STREAM_EXPECT = raw_apps.STREAM_FIRST + raw_apps.STREAM_LAST
ALL_WORKLOADS = set(WORKLOADS) | {"streaming"}


def workload_order(rows):
    """(workload, conns) rows sorted in the table's order (the WebSocket rows last), then by
    connection count."""
    order = list(WORKLOADS) + list(WS_WORKLOADS)
    return sorted(rows, key=lambda r: (order.index(r[0]), r[1]))


# ----------------------------------------------------------------------------------------------
# A minimal HTTP/1.1 client for the exact checks, streaming samples and the traced gates


def tls_client_context():
    """A client context trusting only the run's test certificate (its own CA), offering ALPN
    http/1.1 and OpenSSL's default TLS 1.3 suites (those wrk offers; Python sets only the TLS 1.2
    list), TLS 1.2 and 1.3."""
    ctx = ssl.create_default_context(cafile=tls_files()[1])
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class Conn:
    """`tls`: the connection is TLS (the certificate verified against the run's test
    certificate, for 127.0.0.1)."""

    def __init__(self, port, timeout=10.0, tls=False):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:
            self.sock = tls_client_context().wrap_socket(self.sock, server_hostname="127.0.0.1")
        self.buf = b""
        self.t_first = None
        self.status_line = None

    def close(self):
        self.sock.close()

    def _fill(self):
        data = self.sock.recv(262144)
        if not data:
            raise ConnectionError("connection closed by the server")
        if self.t_first is None:
            self.t_first = time.perf_counter()
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def read_response(self, on_body=None):
        """(status, headers, body); on_body(t) is called when the first body bytes arrive."""
        self.t_first = None if not self.buf else time.perf_counter()
        self.status_line = status_line = self._line()
        status = int(status_line.split()[1])
        headers = {}
        while True:
            line = self._line()
            if not line:
                break
            k, _, v = line.partition(b":")
            headers[k.strip().lower()] = v.strip()
        body = []
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    while self._line():
                        pass
                    break
                chunk = self._take(size)
                if on_body and not body:
                    on_body(time.perf_counter())
                body.append(chunk)
                self._take(2)
        else:
            n = int(headers.get(b"content-length", b"0"))
            if n:
                while not self.buf:
                    self._fill()
                if on_body:
                    on_body(time.perf_counter())
                body.append(self._take(n))
        return status, headers, b"".join(body)

    @staticmethod
    def request_bytes(method, path, body=b""):
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        if body:
            head += f"Content-Type: application/octet-stream\r\nContent-Length: {len(body)}\r\n"
        return head.encode() + b"\r\n" + body


def check_workload(wl, port, tls=False):
    """Exact status and body over one keep-alive connection (and one pipelined batch); `tls`:
    over TLS."""
    spec = WORKLOADS[wl]
    c = Conn(port, tls=tls)
    try:
        req = c.request_bytes(spec["method"], spec["path"], spec["body"])
        for _ in range(2):
            c.sock.sendall(req)
            status, _, body = c.read_response()
            if status != 200 or body != spec["expect"]:
                raise AssertionError(f"{wl}: status {status}, body {len(body)} bytes "
                                     f"{body[:60]!r} (expected {len(spec['expect'])} bytes)")
        n = spec.get("pipeline", 0)
        if n:
            c.sock.sendall(req * n)
            for i in range(n):
                status, _, body = c.read_response()
                if status != 200 or body != spec["expect"]:
                    raise AssertionError(f"{wl}: pipelined response {i}: status {status}, "
                                         f"body {body[:60]!r}")
    finally:
        c.close()


def tls_negotiated(wl, port):
    """{"version", "cipher", "alpn"} a TLS connection to `port` negotiated (the client as
    tls_client_context()), after one exact request of workload `wl` on it."""
    spec = WORKLOADS[wl]
    c = Conn(port, tls=True)
    try:
        c.sock.sendall(c.request_bytes(spec["method"], spec["path"], spec["body"]))
        status, _, body = c.read_response()
        if status != 200 or body != spec["expect"]:
            raise AssertionError(f"{wl} over TLS: status {status}, body {body[:60]!r}")
        return {"version": c.sock.version(), "cipher": c.sock.cipher()[0],
                "alpn": c.sock.selected_alpn_protocol()}
    finally:
        c.close()


def status_line(wl, port, tls=False):
    """The status line (bytes, without CRLF) of one request of workload `wl` (`tls`: over TLS);
    AssertionError when its body is not the workload's."""
    spec = WORKLOADS[wl]
    c = Conn(port, tls=tls)
    try:
        c.sock.sendall(c.request_bytes(spec["method"], spec["path"], spec["body"]))
        _, _, body = c.read_response()
        if body != spec["expect"]:
            raise AssertionError(f"{wl}: body {len(body)} bytes {body[:60]!r}")
        return c.status_line
    finally:
        c.close()


def check_stream(port):
    c = Conn(port)
    try:
        c.sock.sendall(c.request_bytes("GET", "/stream"))
        status, _, body = c.read_response()
        if status != 200 or body != STREAM_EXPECT:
            raise AssertionError(f"streaming: status {status}, body {body!r}")
    finally:
        c.close()


def exact_sequential(c, req, n, expect=HELLO):
    """n requests one after another on connection c; how many answered 200 with `expect`."""
    good = 0
    for _ in range(n):
        c.sock.sendall(req)
        status, _, body = c.read_response()
        good += status == 200 and body == expect
    return good


def exact_pipelined(c, req, batches, expect=HELLO):
    """batches of PIPELINE_DEPTH requests, each batch in one write, every response read before the
    next batch; how many answered 200 with `expect`."""
    good = 0
    for _ in range(batches):
        c.sock.sendall(req * PIPELINE_DEPTH)
        for _ in range(PIPELINE_DEPTH):
            status, _, body = c.read_response()
            good += status == 200 and body == expect
    return good


def open_conns(port, conns, timeout=60.0, tls=False):
    """`conns` keep-alive connections for exact_concurrent (TCP_NODELAY; `tls`: each TLS with
    tls_client_context(), handshaken here); the caller closes them (close_conns)."""
    socks = []
    try:
        for _ in range(conns):
            s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            socks.append(s)
            if tls:
                socks[-1] = tls_client_context().wrap_socket(s, server_hostname="127.0.0.1")
    except BaseException:
        close_conns(socks)
        raise
    return socks


def close_conns(socks):
    for s in socks:
        s.close()


def exact_concurrent(port, req, total, conns, expect=HELLO, timeout=60.0, socks=None):
    """`total` requests over `conns` keep-alive connections, each a closed loop (its next request
    sent when its answer is complete), until `total` answers are in; how many answered 200 with
    `expect`. Responses must carry Content-Length (every workload but streaming does).
    ConnectionError when a connection closes; TimeoutError when no byte arrives for `timeout`
    seconds. `socks`: the connections (open_conns(), TLS ones too; left open, idle, for the next
    call), else `conns` cleartext ones opened and closed here."""
    own = socks is None
    if own:
        socks = open_conns(port, min(conns, total), timeout)
    socks = socks[:min(len(socks), total)]
    sel = selectors.DefaultSelector()
    bufs, sent, done, good = {}, 0, 0, 0
    try:
        for s in socks:
            s.setblocking(True)
            s.settimeout(timeout)
            s.sendall(req)
            s.setblocking(False)
            sent += 1
            bufs[s] = b""
            sel.register(s, selectors.EVENT_READ)
        while done < total:
            ready = sel.select(timeout)
            if not ready:
                raise TimeoutError(f"no answer for {timeout:.0f} s ({done}/{total} done)")
            for key, _ in ready:
                s = key.fileobj
                try:
                    data = s.recv(262144)
                    while isinstance(s, ssl.SSLSocket) and s.pending():
                        data += s.recv(262144)  # decrypted bytes no epoll event announces
                except ssl.SSLWantReadError:  # a record not yet complete, or a ticket
                    continue
                if not data:
                    raise ConnectionError(f"connection closed by the server ({done}/{total} done)")
                bufs[s] += data
                while True:
                    b = bufs[s]
                    end_head = b.find(b"\r\n\r\n")
                    if end_head < 0:
                        break
                    head = b[:end_head].split(b"\r\n")
                    length = 0
                    for line in head[1:]:
                        k, _, v = line.partition(b":")
                        if k.strip().lower() == b"content-length":
                            length = int(v)
                    end = end_head + 4 + length
                    if len(b) < end:
                        break
                    good += head[0].split()[1] == b"200" and b[end_head + 4:end] == expect
                    bufs[s] = b[end:]
                    done += 1
                    if sent < total:
                        s.sendall(req)  # small: fits the socket buffer of an idle connection
                        sent += 1
    finally:
        for s in bufs:
            sel.unregister(s)
        sel.close()
        if own:
            close_conns(socks)
    return good


# ----------------------------------------------------------------------------------------------
# The app called directly, no server between


def direct_caller(wl):
    """An async function run(k) that calls the workload's app k times with its scope and request,
    as a server would, discarding what the app sends."""
    spec = WORKLOADS[wl]
    mod, _, attr = spec["app"].partition(":")
    app = getattr(__import__(mod), attr)
    body = spec["body"]
    scope0 = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.5"}, "http_version": "1.1",
        "method": spec["method"], "scheme": "http", "path": spec["path"],
        "raw_path": spec["path"].encode(), "query_string": b"", "root_path": "",
        "headers": [(b"host", b"127.0.0.1")] + (
            [(b"content-type", b"application/octet-stream"),
             (b"content-length", str(len(body)).encode())] if body else []),
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000), "state": {},
    }
    if "extensions" in spec:
        scope0["extensions"] = spec["extensions"]
    message = {"type": "http.request", "body": body, "more_body": False}
    sent = []

    async def receive():
        return message

    async def send(m):
        sent.append(m)

    async def run(k):
        for _ in range(k):
            scope = dict(scope0)
            scope["headers"] = list(scope0["headers"])
            scope["state"] = {}
            await app(scope, receive, send)
            sent.clear()

    return run
