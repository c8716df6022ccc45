"""gRPC's own Python client (grpcio, gRPC C-core's HTTP/2 transport) calling the methods of
test_grpc.py's ASGI app: run as ``python _grpc_calls.py PORT [CA_PEM]`` by the case, in its own
process (grpcio's threads and C-core stay out of the suite's). Over TLS (CA_PEM given) the channel
trusts that CA and checks the certificate against 127.0.0.1.

Prints one line per call, what the client got (the case compares the whole output):
  unary, server-stream, client-stream and ping-pong bidi results as Python reprs; a call ending
  with a non-zero grpc-status (in trailers after the response head, and trailers-only: the
  status in the one HEADERS) as its code and details; a 3,000,000-byte message echoed (both
  directions past the 65,535-byte initial windows: flow control and gRPC's BDP PINGs) as its
  length and whether the bytes match; 20 concurrent calls on the one connection; a server-stream
  the client cancels after two messages (RST_STREAM CANCEL), then one more call on the same
  channel. Messages are raw bytes (no protobuf: the serializers are identity).
"""
from __future__ import annotations

import queue
import sys

import grpc

TIMEOUT = 20  # seconds per call (the machine may be loaded)


def main() -> None:
    port = int(sys.argv[1])
    options = [("grpc.enable_http_proxy", 0)]
    target = f"127.0.0.1:{port}"
    if len(sys.argv) > 2:
        with open(sys.argv[2], "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        channel = grpc.secure_channel(target, creds, options=options)
    else:
        channel = grpc.insecure_channel(target, options=options)
    raw = {"request_serializer": None, "response_deserializer": None}
    with channel:
        unary = channel.unary_unary("/skirr.Test/Unary", **raw)
        print("unary", unary(b"hi", timeout=TIMEOUT))
        stream = channel.unary_stream("/skirr.Test/ServerStream", **raw)
        print("server-stream", list(stream(b"3", timeout=TIMEOUT)))
        upload = channel.stream_unary("/skirr.Test/ClientStream", **raw)
        print("client-stream", upload(iter([b"a", b"b", b"c"]), timeout=TIMEOUT))

        # ping-pong: each request is sent only after the answer to the one before arrived, so
        # the server must stream its answers while the request body is still open
        sends: queue.Queue = queue.Queue()

        def requests():
            while (item := sends.get()) is not None:
                yield item

        sends.put(b"0")
        answers = []
        for answer in channel.stream_stream("/skirr.Test/Bidi", **raw)(requests(),
                                                                       timeout=TIMEOUT):
            answers.append(answer)
            n = int(answer.split(b":")[1])
            sends.put(str(n + 1).encode() if n < 4 else None)
        print("bidi", answers)

        for method in ("/skirr.Test/Fail", "/skirr.Test/Missing"):
            try:
                channel.unary_unary(method, **raw)(b"q", timeout=TIMEOUT)
                print("status", method, "OK")
            except grpc.RpcError as e:
                print("status", method, e.code().name, repr(e.details()))

        big = bytes(range(256)) * (3_000_000 // 256) + b"x" * (3_000_000 % 256)
        got = unary(big, timeout=TIMEOUT)
        print("large", len(got), got == b"echo:" + big)

        futures = [unary.future(b"%d" % i, timeout=TIMEOUT) for i in range(20)]
        print("concurrent", [f.result() for f in futures] == [b"echo:%d" % i for i in range(20)])

        endless = stream(b"-1", timeout=TIMEOUT)
        first = [next(endless), next(endless)]
        endless.cancel()
        print("cancelled", first, endless.code().name)
        print("after", unary(b"again", timeout=TIMEOUT))


if __name__ == "__main__":
    main()
