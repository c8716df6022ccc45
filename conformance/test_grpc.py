"""gRPC's own client against an ASGI app served by skirr over HTTP/2 (spec/http2.toml,
skirr-h2-grpc): what users ask HTTP/2 for (issue 33: "gRPC-style streaming with trailers").

The app speaks gRPC's wire format by hand (each message a 5-byte prefix, compressed flag and
big-endian length; grpc-status in the trailers, or alone in the response head: "trailers-only"),
so the case needs no protobuf and no gRPC server library: what it proves is skirr's half, the
ASGI exchange per stream, request bodies streamed while responses stream back, trailers, resets.
The client is grpcio (gRPC C-core's HTTP/2 transport), run in its own process
(``_grpc_calls.py``) on h2c (prior knowledge: gRPC's insecure channel) and on TLS (ALPN h2).
"""
from __future__ import annotations

import asyncio
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import IO_TIMEOUT
from tls_util import TLSFiles

rule = pytest.mark.rule

CLIENT = Path(__file__).with_name("_grpc_calls.py")
CLIENT_TIMEOUT = 120  # seconds for the whole client process (the machine may be loaded)
# The client is not skirr: -I keeps it out of the sanitizer legs' interpreter hook
# (sanitizers/sitecustomize.py, found through PYTHONPATH), which would start it again under ASan
# and put grpcio's C-core, built without it, under LeakSanitizer's exit check.


def message(data: bytes) -> bytes:
    """One gRPC length-prefixed message: not compressed."""
    return b"\x00" + struct.pack(">I", len(data)) + data


def messages(buf: bytearray) -> list[bytes]:
    """The whole messages at buf's head, removed from it."""
    out = []
    while len(buf) >= 5:
        size = struct.unpack(">I", buf[1:5])[0]
        if len(buf) < 5 + size:
            break
        out.append(bytes(buf[5:5 + size]))
        del buf[:5 + size]
    return out


GRPC = [(b"content-type", b"application/grpc")]


def grpc_app(cancelled: list[str]):
    """The test service's methods (skirr.Test/...); `cancelled` gets what the endless
    server-stream's send raised once the client cancelled it."""

    async def app(scope, receive, send):
        assert scope["type"] == "http" and scope["http_version"] == "2"
        assert scope["method"] == "POST"
        headers = dict(scope["headers"])
        assert headers[b"content-type"] == b"application/grpc"
        assert headers[b"te"] == b"trailers"
        method = scope["path"].rsplit("/", 1)[1]
        if method == "Missing":  # trailers-only: the status in the response head, END_STREAM
            await send({"type": "http.response.start", "status": 200,
                        "headers": GRPC + [(b"grpc-status", b"12"),
                                           (b"grpc-message", b"no such method")]})
            await send({"type": "http.response.body", "body": b""})
            return
        await send({"type": "http.response.start", "status": 200, "headers": GRPC,
                    "trailers": True})
        buf = bytearray()
        got: list[bytes] = []
        more = True
        while more:
            event = await receive()
            assert event["type"] == "http.request", event
            buf += event["body"]
            more = event["more_body"]
            for m in messages(buf):
                if method == "Bidi":  # answered at once: the client waits for it
                    await send({"type": "http.response.body", "body": message(b"re:" + m),
                                "more_body": True})
                got.append(m)
        status = b"0"
        if method == "Unary":
            await send({"type": "http.response.body", "body": message(b"echo:" + got[0]),
                        "more_body": True})
        elif method == "ServerStream" and got == [b"-1"]:
            try:
                for i in range(100_000):
                    await send({"type": "http.response.body", "body": message(b"%d" % i),
                                "more_body": True})
                    await asyncio.sleep(0.005)
            except Exception as e:  # noqa: BLE001 - what send raised is the case's subject
                cancelled.append(type(e).__name__)
                return
            cancelled.append("never cancelled")
        elif method == "ServerStream":
            for i in range(int(got[0])):
                await send({"type": "http.response.body", "body": message(b"%d" % i),
                            "more_body": True})
        elif method == "ClientStream":
            await send({"type": "http.response.body", "body": message(b"+".join(got)),
                        "more_body": True})
        elif method == "Fail":
            status = b"5"
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        trailers = [(b"grpc-status", status)]
        if status != b"0":
            trailers.append((b"grpc-message", b"not here"))
        await send({"type": "http.response.trailers", "headers": trailers})

    return app


EXPECTED = """\
unary b'echo:hi'
server-stream [b'0', b'1', b'2']
client-stream b'a+b+c'
bidi [b're:0', b're:1', b're:2', b're:3', b're:4']
status /skirr.Test/Fail NOT_FOUND 'not here'
status /skirr.Test/Missing UNIMPLEMENTED 'no such method'
large 3000005 True
concurrent True
cancelled [b'0', b'1'] CANCELLED
after b'echo:again'
"""


@rule("skirr-h2-grpc")
@pytest.mark.parametrize("transport", ["h2c", "tls"])
def test_grpcio_calls_every_kind_of_method(serve, tmp_path, transport):
    cancelled: list[str] = []
    config = {}
    args = [sys.executable, "-I", str(CLIENT)]
    if transport == "tls":
        tls = TLSFiles(tmp_path / "tls")
        config = tls.server_config()
    with serve(grpc_app(cancelled), **config) as srv:
        args.append(str(srv.port))
        if transport == "tls":
            args.append(str(tls.ca_pem))
        out = subprocess.run(args, capture_output=True, text=True, timeout=CLIENT_TIMEOUT)
        deadline = time.monotonic() + IO_TIMEOUT
        while not cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
    assert (out.returncode, out.stdout) == (0, EXPECTED), out.stderr
    assert cancelled == ["ClientDisconnected"]
