"""Operating skirr from the command line (issue 13): the access log and trace lines on stderr
through skirr's own handler, --log-config, colours, the environment, --metrics-port."""
from __future__ import annotations

import json

import h11
import pytest

import _proc

pytestmark = _proc.each_loop


def get(port: int, target: str = "/", raw: bytes | None = None) -> tuple[int, str]:
    """One request from a socket whose address we know: (status, "127.0.0.1:PORT")."""
    with _proc.connect(port) as sock:
        here = "%s:%d" % sock.getsockname()[:2]
        if raw is not None:
            sock.sendall(raw)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
            return int(data.split(b" ", 2)[1]), here
        conn = h11.Connection(h11.CLIENT)
        _proc.send_request(sock, conn, "GET", target)
        return _proc.read_response(sock, conn).status, here


def access_lines(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if '"' in x and (" - " in x or x.startswith("{"))]


@pytest.mark.rule("skirr-access-default-line", "skirr-access-refusals")
def test_default_line_on_stderr(tmp_path, loop):
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port)], tmp_path) as proc:
        proc.wait_accepting(port)
        status, me = get(port, "/items?id=3")
        assert status == 200
        status, me2 = get(port, raw=b"GET / HTTP/1.1\r\nHost: x\r\n" +
                          b"".join(b"X-%d: v\r\n" % i for i in range(101)) + b"\r\n")
        assert status == 431
        assert proc.stop() == 0
        lines = access_lines(proc.stderr)
    assert lines == [
        f'INFO:     {me} - "GET /items?id=3 HTTP/1.1" 200 OK',
        f'INFO:     {me2} - "-" 431 Request Header Fields Too Large (refused: too many header '
        f'fields)',
    ]


@pytest.mark.rule("skirr-access-format")
def test_json_lines_on_stderr_are_bare(tmp_path, loop):
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port),
                      "--access-log-format", "json"], tmp_path) as proc:
        proc.wait_accepting(port)
        status, me = get(port, "/j?x=1")
        assert status == 200
        assert proc.stop() == 0
        lines = [x for x in proc.stderr.splitlines() if x.startswith("{")]
    assert len(lines) == 1
    rec = json.loads(lines[0])
    assert (rec["client"], rec["method"], rec["path"], rec["query"], rec["status"]) == (
        me, "GET", "/j", "x=1", 200)


@pytest.mark.rule("skirr-access-off")
def test_no_access_log_flag(tmp_path, loop):
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port), "--no-access-log"],
                     tmp_path) as proc:
        proc.wait_accepting(port)
        assert get(port)[0] == 200
        assert proc.stop() == 0
        assert access_lines(proc.stderr) == []


@pytest.mark.rule("skirr-log-trace")
def test_trace_connection_events(tmp_path, loop):
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port), "--log-level", "trace",
                      "--timeout-keep-alive", "1"], tmp_path) as proc:
        proc.wait_accepting(port)
        status, me = get(port)  # closed by us after the response
        assert status == 200
        status, bad = get(port, raw=b"GET / HTTP/2.0\r\nHost: x\r\n\r\n")
        assert status == 505
        with _proc.connect(port) as idle:  # left idle: closed by the keep-alive timeout
            idle_addr = "%s:%d" % idle.getsockname()[:2]
            idle.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            idle.settimeout(5)
            data = b""
            while chunk := idle.recv(65536):
                data += chunk
        assert proc.stop() == 0
        err = proc.stderr
    for line in (f"TRACE:    {me} - HTTP connection made",
                 f"TRACE:    {me} - HTTP connection lost (closed by the client)",
                 f"TRACE:    {bad} - HTTP request refused: 505 (HTTP version not supported)",
                 f"TRACE:    {idle_addr} - HTTP connection made",
                 f"TRACE:    {idle_addr} - HTTP connection idle: --timeout-keep-alive",
                 f"TRACE:    {idle_addr} - HTTP connection closed by the server"):
        assert line in err.splitlines(), (line, err)


@pytest.mark.rule("skirr-log-trace")
def test_no_trace_below_trace(tmp_path, loop):
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port), "--log-level", "debug"],
                     tmp_path) as proc:
        proc.wait_accepting(port)
        assert get(port)[0] == 200
        assert proc.stop() == 0
        assert "TRACE" not in proc.stderr


@pytest.mark.rule("skirr-metrics")
def test_metrics_port_flag(tmp_path, loop):
    mport = _proc.free_port()
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port), "--metrics-port",
                      str(mport)], tmp_path) as proc:
        proc.wait_accepting(port)
        assert get(port)[0] == 200
        with _proc.connect(mport) as sock:
            sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        assert proc.stop() == 0
    assert b'skirr_requests_total{method="GET",status="2xx"} 1.0' in data


@pytest.mark.rule("skirr-proxy-trusted", "skirr-proxy-untrusted")
@pytest.mark.parametrize("allow,client", [("unix:", ["203.0.113.7", 0]), ("127.0.0.1", None)])
def test_unix_socket_peer(tmp_path, loop, allow, client):
    path = str(tmp_path / "s.sock")
    with _proc.Skirr(["basic:app", "--loop", loop, "--uds", path, "--forwarded-allow-ips", allow],
                     tmp_path) as proc:
        proc.wait_accepting(path)
        r = _proc.request(path, target="/scope", headers=[("X-Forwarded-For", "203.0.113.7"),
                                                          ("X-Forwarded-Proto", "https")])
        assert r.status == 200
        assert proc.stop() == 0
    assert json.loads(r.body)["client"] == client
