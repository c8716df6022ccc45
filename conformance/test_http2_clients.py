"""Real HTTP/2 clients against skirr (spec/http2_fields.toml): curl with prior knowledge (h2c) and
over TLS (ALPN h2), nghttp's view of the SETTINGS skirr sends, an h2load smoke, and the access
log, --limit-concurrency and the metrics counting HTTP/2 streams.

Each client runs as a subprocess on a loopback port of the server this process runs (the
``serve`` fixture, both loops). curl must be built with HTTP/2 (``curl -V`` lists HTTP2: Debian's
is, .ci/run installs it); nghttp and h2load come from Debian's nghttp2-client.
"""
from __future__ import annotations

import asyncio
import importlib.util
import logging
import re
import shutil
import subprocess
import signal
import threading
import time
from pathlib import Path

import pytest

import _proc
from _proc import EXAMPLES_DIR, free_port
from conftest import IO_TIMEOUT
from h2_util import H2Client
from test_metrics import scrape
from tls_util import TLSFiles

rule = pytest.mark.rule

CLIENT_TIMEOUT = 30  # seconds for any client subprocess (the machine may be loaded)


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not installed (.ci/run installs it)"
    return path


def curl(*args: str) -> subprocess.CompletedProcess:
    exe = tool("curl")
    version = subprocess.run([exe, "-V"], capture_output=True, text=True, check=True).stdout
    assert "HTTP2" in version.split("Features:", 1)[1], f"curl is built without HTTP/2:\n{version}"
    return subprocess.run([exe, "-sS", "--max-time", "20", *args], capture_output=True,
                          text=True, timeout=CLIENT_TIMEOUT)


def example_app():
    """examples/app.py's FastAPI app (what `make run` serves), loaded from its file."""
    spec = importlib.util.spec_from_file_location("skirr_example_app", EXAMPLES_DIR / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.app


@pytest.fixture
def tls(tmp_path: Path) -> TLSFiles:
    return TLSFiles(tmp_path / "tls")


W = ["-w", "\n%{http_version} %{response_code}"]


@rule("skirr-h2-real-clients")
def test_curl_prior_knowledge_reaches_the_example_app(serve):
    with serve(example_app()) as srv:
        base = f"http://127.0.0.1:{srv.port}"
        get = curl("--http2-prior-knowledge", *W, f"{base}/")
        post = curl("--http2-prior-knowledge", *W, "-H", "content-type: application/json",
                    "-d", '{"name": "pen", "price": 1.5}', f"{base}/items")
        stream = curl("--http2-prior-knowledge", *W, f"{base}/stream?count=3")
    assert (get.returncode, get.stdout, get.stderr) == (0, '{"hello":"world"}\n2 200', "")
    assert (post.returncode, post.stdout, post.stderr) == (
        0, '{"name":"pen","price":1.5,"tags":[]}\n2 200', "")
    assert (stream.returncode, stream.stdout) == (0, "chunk 0\nchunk 1\nchunk 2\n\n2 200")


@rule("skirr-h2-real-clients", "skirr-h2-access-log")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_example_from_the_command_line_over_h2c(tmp_path, loop):
    """The README's first command (python -m skirr app:app --app-dir examples) and curl with
    prior knowledge: the issue's "done when"."""
    port = free_port()
    args = ["--loop", loop, "--app-dir", str(EXAMPLES_DIR), "app:app", "--port", str(port)]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        got = curl("--http2-prior-knowledge", *W, f"http://127.0.0.1:{port}/")
        assert proc.stop() == 0, proc.stderr
    assert (got.returncode, got.stdout, got.stderr) == (0, '{"hello":"world"}\n2 200', "")
    assert re.fullmatch(r'INFO:     127\.0\.0\.1:\d+ - "GET / HTTP/2\.0" 200 OK\n', proc.stdout), (
        proc.stdout)


@rule("skirr-h2-real-clients")
def test_curl_http2_over_tls_negotiates_h2(serve, tls):
    with serve(example_app(), **tls.server_config()) as srv:
        url = f"https://127.0.0.1:{srv.port}/"
        got = curl("--http2", "--cacert", str(tls.ca_pem), "-v", *W, url)
        insecure = curl("--http2", "-k", *W, url)
    assert (got.returncode, got.stdout) == (0, '{"hello":"world"}\n2 200'), got.stderr
    assert "* ALPN: server accepted h2\n" in got.stderr, got.stderr
    assert (insecure.returncode, insecure.stdout) == (0, '{"hello":"world"}\n2 200')


@rule("skirr-h2-real-clients")
def test_curl_http2_over_tls_without_h2_falls_back(serve, tls):
    """A TLS client offering only http/1.1 (curl --http1.1) is served HTTP/1.1 on the same port."""
    with serve(example_app(), **tls.server_config()) as srv:
        got = curl("--http1.1", "--cacert", str(tls.ca_pem), *W, f"https://127.0.0.1:{srv.port}/")
    assert (got.returncode, got.stdout) == (0, '{"hello":"world"}\n1.1 200'), got.stderr


@rule("skirr-h2-real-clients", "RFC9110-8.6-no-content-length-in-204",
      "RFC9110-15.3.6-205-no-content")
@pytest.mark.parametrize("status", [204, 205])
def test_curl_reads_204_and_205_whatever_length_and_body_the_app_gives(serve, status):
    """An app that gives a 204 or 205 a content-length and a body: curl (nghttp2 underneath)
    gets the status with no content over HTTP/2, as over HTTP/1.1 (it failed the 204 as a
    malformed response, exit 92, when the app's content-length went out)."""
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", b"5")]})
        await send({"type": "http.response.body", "body": b"hello"})

    with serve(app) as srv:
        got = [curl(*flag, "-D", "-", *W, f"http://127.0.0.1:{srv.port}/")
               for flag in (["--http2-prior-knowledge"], ["--http1.1"])]
    for g, version in zip(got, ("2", "1.1")):
        assert g.returncode == 0, g.stderr
        lines = g.stdout.split("\n")  # text mode: curl's CRLFs read as LFs
        assert lines[0] == (f"HTTP/2 {status} " if version == "2" else
                            f"HTTP/1.1 {status} {'No Content' if status == 204 else 'Reset Content'}")
        lengths = [ln for ln in lines if ln.lower().startswith("content-length:")]
        assert lengths == ([] if status == 204 else ["content-length: 0"]), g.stdout
        assert g.stdout.endswith(f"\n\n\n{version} {status}"), g.stdout  # no content


async def hello(scope, receive, send):
    while (await receive()).get("more_body"):
        pass
    status = 404 if scope["path"] == "/missing" else 200
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


def received_settings(nghttp_out: str) -> list[str]:
    """The settings of the first non-ACK SETTINGS frame nghttp -v received, as printed."""
    m = re.search(r"recv SETTINGS frame <length=\d+, flags=0x00, stream_id=0>\n"
                  r"\s+\(niv=(\d+)\)\n((?:\s+\[SETTINGS_.*\]\n)*)", nghttp_out)
    assert m, nghttp_out
    lines = [line.strip() for line in m.group(2).splitlines()]
    assert len(lines) == int(m.group(1)), nghttp_out
    return lines


@rule("skirr-h2-real-clients")
def test_nghttp_sees_the_settings_the_flags_say(serve):
    config = dict(http2_max_concurrent_streams=7, http2_initial_stream_window_size=100000,
                  http2_max_frame_size=32768, http2_max_headers_size=9000)
    with serve(hello, **config) as srv:
        out = subprocess.run([tool("nghttp"), "-nv", f"http://127.0.0.1:{srv.port}/"],
                             capture_output=True, text=True, timeout=CLIENT_TIMEOUT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(received_settings(out.stdout)) == sorted([
        "[SETTINGS_MAX_CONCURRENT_STREAMS(0x03):7]",
        "[SETTINGS_INITIAL_WINDOW_SIZE(0x04):100000]",
        "[SETTINGS_MAX_FRAME_SIZE(0x05):32768]",
        "[SETTINGS_MAX_HEADER_LIST_SIZE(0x06):9000]",
        "[SETTINGS_ENABLE_PUSH(0x02):0]",
    ]), out.stdout
    # the connection's window: four stream windows (h2-settings), raised from 65,535
    assert re.findall(r"recv WINDOW_UPDATE frame <length=4, flags=0x00, stream_id=0>\n"
                      r"\s+\(window_size_increment=(\d+)\)", out.stdout) == [
        str(4 * 100000 - 65535)], out.stdout
    # nghttp opens its request on stream 13 (streams 3-11 are its priority placeholders)
    assert re.search(r"recv \(stream_id=13\) :status: 200\n", out.stdout), out.stdout


@rule("skirr-h2-real-clients")
def test_h2load_smoke(serve):
    with serve(hello) as srv:
        out = subprocess.run([tool("h2load"), "-n", "200", "-c", "4", "-m", "10",
                              f"http://127.0.0.1:{srv.port}/"],
                             capture_output=True, text=True, timeout=CLIENT_TIMEOUT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Application protocol: h2c\n" in out.stdout, out.stdout
    assert ("requests: 200 total, 200 started, 200 done, 200 succeeded, 0 failed, 0 errored, "
            "0 timeout\n") in out.stdout, out.stdout
    assert "status codes: 200 2xx, 0 3xx, 0 4xx, 0 5xx\n" in out.stdout, out.stdout


class AccessLines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@rule("skirr-h2-access-log")
def test_access_line_says_http2(serve):
    cap = AccessLines()
    logger = logging.getLogger("skirr.access")
    logger.addHandler(cap)
    try:
        with serve(hello) as srv:
            base = f"http://127.0.0.1:{srv.port}"
            for target in ("/items?id=3", "/missing"):
                assert curl("--http2-prior-knowledge", "-o", "/dev/null", f"{base}{target}"
                            ).returncode == 0
    finally:
        logger.removeHandler(cap)
    assert len(cap.lines) == 2, cap.lines
    assert re.fullmatch(r'127\.0\.0\.1:\d+ - "GET /items\?id=3 HTTP/2\.0" 200 OK', cap.lines[0])
    assert re.fullmatch(r'127\.0\.0\.1:\d+ - "GET /missing HTTP/2\.0" 404 Not Found',
                        cap.lines[1])


@rule("h2-100-continue")
def test_curl_expect_100_continue_gets_its_100_at_once(serve, tmp_path):
    """curl --http2-prior-knowledge -H 'Expect: 100-continue' waits for the 100 before it sends
    the content (--expect100-timeout: up to 10 s here); skirr sends it as the app reads, so the
    upload goes at once and curl never gives up waiting."""
    upload = tmp_path / "up.bin"
    upload.write_bytes(bytes(range(256)) * 1000)

    async def app(scope, receive, send):
        n = 0
        while True:
            m = await receive()
            n += len(m.get("body", b""))
            if not m.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(n).encode()})

    with serve(app) as srv:
        t0 = time.monotonic()
        got = curl("--http2-prior-knowledge", "-v", "--expect100-timeout", "10",
                   "-H", "Expect: 100-continue", "--data-binary", f"@{upload}", *W,
                   f"http://127.0.0.1:{srv.port}/up")
        took = time.monotonic() - t0
    assert (got.returncode, got.stdout) == (0, "256000\n2 200")
    assert "< HTTP/2 100" in got.stderr
    assert "Done waiting for 100-continue" not in got.stderr
    assert took < 5, f"curl took {took:.1f} s: it waited for the 100"


@rule("skirr-h2-limit-concurrency")
def test_limit_concurrency_counts_streams(serve):
    release = threading.Event()
    running = threading.Event()

    async def app(scope, receive, send):
        while (await receive()).get("more_body"):
            pass
        if scope["path"] == "/hold":
            running.set()
            while not release.is_set():
                await asyncio.sleep(0.01)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    with serve(app, limit_concurrency=1) as srv:
        with H2Client.open(srv.port) as c:
            held = c.get("/hold")
            assert running.wait(IO_TIMEOUT)
            over = c.answer(c.get("/over"))
            release.set()
            first = c.answer(held)
            after = c.answer(c.get("/after"))
    assert (over.status, over.ended, over.body) == (503, True, over.body)
    assert (first.status, first.body, after.status, after.body) == (200, b"ok", 200, b"ok")


@rule("skirr-h2-metrics")
def test_metrics_count_http2_streams(serve):
    mport = free_port()
    with serve(hello, metrics_port=mport) as srv:
        with H2Client.open(srv.port) as c:
            # one at a time: answer() drops the events of other streams
            assert [c.answer(c.get(p)).status for p in ("/", "/", "/missing")] == [200, 200, 404]
        # the scrape runs in the listener's thread: the last app call may not have returned
        # (requests_in_flight back to 0) when its stream's end reached the client
        deadline = time.monotonic() + IO_TIMEOUT
        while ((m := scrape(mport))[("skirr_requests_in_flight", ())]
               and time.monotonic() < deadline):
            time.sleep(0.02)
    assert m[("skirr_requests_total", (("method", "GET"), ("status", "2xx")))] == 2
    assert m[("skirr_requests_total", (("method", "GET"), ("status", "4xx")))] == 1
    assert m[("skirr_request_duration_seconds_count", ())] == 3
    assert m[("skirr_response_bytes_total", ())] == 15
    assert m[("skirr_requests_in_flight", ())] == 0


@rule("h2-roll-no-loss")
def test_sighup_roll_under_h2load_loses_no_request(tmp_path):
    """Two workers serving h2c to h2load (8 connections, 10 streams each, 4000 requests over
    about 2 s); a SIGHUP rolls both workers mid-run: every request that reached a worker is
    answered 200 and that answer reaches h2load (the old workers' GOAWAY lets the streams in
    flight finish), none is lost, and the old workers stop. What h2load counts failed never
    reached a worker: it opens no new connection after a GOAWAY, and a request it submits after
    the first GOAWAY arrives is counted started, then refused by its own nghttp2 session
    (NGHTTP2_ERR_START_STREAM_NOT_ALLOWED) without being sent (RFC 9113 §6.8: safe to retry)."""
    port = free_port()
    proc = _proc.Skirr(["workers_app:app", "--port", str(port), "--workers", "2"], tmp_path)
    with proc:
        proc.wait_accepting(port)
        # The port accepts once the first worker listens: wait for both to have started their
        # app (one "Application startup complete." each), so that both are rolled.
        deadline = time.monotonic() + _proc.START_TIMEOUT
        while proc.stderr.count("Application startup complete.") < 2:
            assert time.monotonic() < deadline and proc.proc.poll() is None, proc.stderr
            time.sleep(0.02)
        old = [int(p) for p in re.findall(r"Started worker \[(\d+)\]", proc.stderr)]
        assert len(old) == 2, proc.stderr
        # 8 connections of 10 streams, each at 250 requests/s: 4000 requests over about 2 s
        load = subprocess.Popen([tool("h2load"), "-n", "4000", "-c", "8", "-m", "10",
                                 "--rps", "250", f"http://127.0.0.1:{port}/"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            time.sleep(0.3)
            proc.proc.send_signal(signal.SIGHUP)
            assert load.poll() is None, "h2load ended before the roll: make it longer"
            out, _ = load.communicate(timeout=CLIENT_TIMEOUT * 2)
        finally:
            if load.poll() is None:  # a failed assertion above: h2load outlives no case
                load.kill()
                load.communicate()
        deadline = time.monotonic() + CLIENT_TIMEOUT
        while not all(f"Worker [{p}] stopped" in proc.stderr for p in old):
            assert time.monotonic() < deadline, proc.stderr
            time.sleep(0.05)
        assert proc.stop() == 0
    # The access log has a line for each request a worker's app answered: all 200, and h2load
    # received each of them. Whatever else h2load counts failed was never sent to a worker.
    lines = proc.stdout.splitlines()
    served = [line for line in lines if '"GET / HTTP/2.0"' in line]
    assert len(served) == len(lines) and all(line.endswith('" 200 OK') for line in served), \
        proc.stdout
    m = re.search(r"requests: 4000 total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) "
                  r"failed, (\d+) errored, 0 timeout\n", out)
    assert m, out
    started, done, succeeded, failed, errored = map(int, m.groups())
    assert succeeded == len(served) > 0, out
    assert started == done and failed == errored == 4000 - succeeded, out
    assert f"status codes: {succeeded} 2xx, 0 3xx, 0 4xx, 0 5xx\n" in out, out
