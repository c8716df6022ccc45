#!/usr/bin/env python3
"""Writes the fuzz seed corpora: fuzz/corpus/request/, fuzz/corpus/response/ and fuzz/corpus/ws/.

Request seeds are realistic requests (the list below) plus every request-looking bytes literal
of the conformance cases (conformance/*.py, read with ast, never imported), each prefixed with
the harness's 8 configuration bytes (default limits, whole/split choices; see fuzz_request.c).
Response seeds are structured inputs for fuzz_response.c (status, flags, headers, body events).
WebSocket seeds are client frame sequences (masked, RFC 6455 §5.7's examples, fragments, control
frames, close codes, UTF-8 edges, each rule's violation) behind fuzz_ws.c's 4 configuration bytes.
File names are content hashes, so re-running adds files and never duplicates one. Run from the
repository top: python3 fuzz/make_seeds.py
"""
import ast
import glob
import hashlib
import os
import struct

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

REQUESTS = [
    b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
    b"GET /a/b%20c?x=1&y=%2F HTTP/1.1\r\nHost: example.com:8080\r\nUser-Agent: curl/8.0\r\n"
    b"Accept: */*\r\n\r\n",
    b"GET / HTTP/1.0\r\n\r\n",
    b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    b"HEAD /index.html HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    b"POST /form HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
    b"Content-Length: 7\r\n\r\na=1&b=2",
    b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n",
    b"PUT /x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
    b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n"
    b"POST /3 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nokGET /4 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
    b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
    b"GET http://example.com/p?q=1 HTTP/1.1\r\nHost: example.com\r\n\r\n",
    b"GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    b"DELETE /r/1 HTTP/1.1\r\nHost: x\r\nCookie: a=1; b=2\r\nCookie: c=3\r\n\r\n",
    b"PATCH /r HTTP/1.1\r\nHost: [::1]:8000\r\nContent-Length: 0\r\n\r\n",
    b"\r\nGET / HTTP/1.1\r\nHost: x\r\nX-Empty:\r\nX-Spaces:   v  \r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    # refusals: each must stay a refusal however it is split
    b"GET / HTTP/2.0\r\nHost: x\r\n\r\n",
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    b"BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET  / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET / HTTP/1.1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc",
    b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    b"GET / HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\n Folded: v\r\n\r\n",
    b"GET /" + b"a" * 300 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
]

# Configuration prefixes: defaults whole vs random splits, byte by byte, two pieces, small limits.
CONFIGS = [
    bytes(8),
    bytes([0, 0, 0, 0, 0, 1, 0, 0]),
    bytes([0, 0, 0, 0, 0, 2, 0, 17]),
    bytes([0x83, 0x84, 0x84, 0x83, 0x83, 3, 1, 2]),
]


def request_literals():
    """Bytes literals of the conformance cases that start like a request (method SP)."""
    found = []
    for path in sorted(glob.glob(os.path.join(TOP, "conformance", "*.py"))):
        with open(path, "rb") as f:
            try:
                tree = ast.parse(f.read(), path)
            except SyntaxError:
                continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, bytes):
                b = node.value
                head = b.split(b" ", 1)[0]
                if len(b) >= 8 and head.isalpha() and head.isupper() and b" HTTP/" in b:
                    found.append(b)
    return found


def response_seed(status, flags, headers, events):
    """headers: (name_index or raw bytes, value_index or raw bytes); events: (bytes, more)."""
    out = bytearray()
    if isinstance(status, tuple):
        out += bytes(status)
    else:
        out += struct.pack(">H", status)
    out.append(flags)
    out.append(len(headers))
    for name, value in headers:
        if isinstance(name, int):
            out.append(name)
        else:
            out.append(0x80 | len(name))
            out += name
        if isinstance(value, int):
            out.append(0x80 | value)
        else:
            out.append(len(value))
            out += value
    for data, more in events:
        out.append(len(data) | (0x40 if more else 0))
        out += data
    return bytes(out)


HTTP11, HEAD, KA, CLOSE, NODATE, ADDCL, ADDTE = 1, 2, 4, 8, 16, 32, 64
RESPONSES = [
    response_seed(200, HTTP11 | KA, [(8, b"text/plain")], [(b"hello", False)]),
    response_seed(200, HTTP11 | KA, [(8, b"text/plain")], [(b"hel", True), (b"lo", False)]),
    response_seed(200, HTTP11 | KA | ADDCL, [], [(b"abc", True), (b"de", False)]),
    response_seed(200, KA, [], [(b"stream", True), (b"ed", False)]),
    response_seed(200, 0, [], [(b"close", True), (b"-delimited", False)]),
    response_seed(204, HTTP11 | KA, [(0, 4)], [(b"", False)]),
    response_seed(304, HTTP11 | KA, [(0, 5)], [(b"", False)]),
    response_seed(101, HTTP11 | KA, [(15, b"websocket"), (4, 9)], [(b"", False)]),
    response_seed(200, HTTP11 | KA | HEAD, [(0, 5)], [(b"", False)]),
    response_seed(404, HTTP11 | KA | CLOSE, [(4, 0)], [(b"not found", False)]),
    response_seed(500, HTTP11 | KA | NODATE, [(6, b"x"), (7, b"me"), (10, b"a=b")], [(b"!", False)]),
    response_seed(200, HTTP11 | KA | ADDTE, [], [(b"a" * 40, True), (b"b" * 30, False)]),
    response_seed(200, HTTP11 | KA, [(0, 5)], [(b"toolong", False)]),
    response_seed(200, HTTP11 | KA, [(b"X-Raw", b"  v  ")], [(b"", False)]),
    response_seed(200, HTTP11 | KA, [(b"Bad Name", b"v")], [(b"", False)]),
    response_seed(200, HTTP11 | KA, [(9, b"a\r\nb")], [(b"", False)]),
    response_seed(99, HTTP11, [], [(b"", False)]),
    response_seed(200, HTTP11 | KA, [(2, 13), (0, 4)], [(b"", False)]),
    response_seed(413, HTTP11 | 0x80, [], []),
    response_seed(431, HTTP11 | HEAD | 0x80, [], []),
]


WS_KEY = b"\x37\xfa\x21\x3d"  # RFC 6455 §5.7's masking key


def ws_frame(b0, payload=b"", enc=0):
    """A masked client frame: first byte b0; length in the shortest encoding, or 16/64 forced."""
    n = len(payload)
    if enc == 0 and n < 126:
        head = bytes([b0, 0x80 | n])
    elif enc != 64 and n <= 0xFFFF:
        head = bytes([b0, 0x80 | 126]) + struct.pack(">H", n)
    else:
        head = bytes([b0, 0x80 | 127]) + struct.pack(">Q", n)
    return head + WS_KEY + bytes(c ^ WS_KEY[i & 3] for i, c in enumerate(payload))


WS_STREAMS = [
    ws_frame(0x81, b"Hello"),
    b"\x81\x05Hello",  # unmasked
    ws_frame(0x01, b"Hel") + ws_frame(0x89, b"x") + ws_frame(0x80, b"lo"),
    ws_frame(0x8A, b"Hello") + ws_frame(0x89, b"") + ws_frame(0x88, b"\x03\xe8bye"),
    ws_frame(0x82, bytes(range(256))),
    ws_frame(0x82, b"\x00" * 300, 64) + ws_frame(0x81, b"Hi", 16),
    ws_frame(0x81, "κόσμε".encode()) + ws_frame(0x81, b"\xf4\x8f\xbf\xbf\xef\xbf\xbf"),
    ws_frame(0x01, b"a\xce") + ws_frame(0x80, b"\xba\xed\xa0\x80"),
    ws_frame(0x81, b"\xe2\x82"),
    ws_frame(0xC1, b"\xff") + ws_frame(0xC0, b"x"),
    ws_frame(0x80, b"cont") + ws_frame(0x09, b"frag"),
    ws_frame(0x01, b"a") + ws_frame(0x81, b"b"),
    ws_frame(0x83) + ws_frame(0x8B) + ws_frame(0xA1, b"r"),
    ws_frame(0x88, b"\x03") + ws_frame(0x88, b"\x03\xed"),
    ws_frame(0x88, b"\x0f\xa0reason") + ws_frame(0x88, b"\x03\xe8\xc0\xaf"),
    ws_frame(0x88, b"\x03\xf4") + ws_frame(0x88, b"\x03\xf7"),
    ws_frame(0x89, b"p" * 125) + ws_frame(0x89, b"p" * 126),
    b"\x82\xff\x80\x00\x00\x00\x00\x00\x00\x00",
    ws_frame(0x01, b"") + ws_frame(0x00, b"abc") + ws_frame(0x80, b""),
]
WS_CONFIGS = [b"\x00\x00\x00\x00", b"\x02\x01\x00\x00", b"\x0b\x02\x12\x34", b"\x06\x03\x00\x07"]


def write(directory, blobs):
    os.makedirs(directory, exist_ok=True)
    for blob in blobs:
        name = hashlib.sha1(blob).hexdigest()[:16]
        with open(os.path.join(directory, name), "wb") as f:
            f.write(blob)


def main():
    requests = REQUESTS + request_literals()
    blobs = {cfg + req for req in requests for cfg in CONFIGS[:2]}
    blobs |= {CONFIGS[2] + req for req in REQUESTS[:8]}
    blobs |= {CONFIGS[3] + req for req in REQUESTS[:8]}
    write(os.path.join(TOP, "fuzz", "corpus", "request"), sorted(blobs))
    write(os.path.join(TOP, "fuzz", "corpus", "response"), RESPONSES)
    ws = sorted({cfg + stream for stream in WS_STREAMS for cfg in WS_CONFIGS})
    write(os.path.join(TOP, "fuzz", "corpus", "ws"), ws)
    print(f"{len(blobs)} request seeds, {len(RESPONSES)} response seeds, {len(ws)} ws seeds")


if __name__ == "__main__":
    main()
