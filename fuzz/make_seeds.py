#!/usr/bin/env python3
"""Writes the fuzz seed corpora: fuzz/corpus/request/, fuzz/corpus/response/, fuzz/corpus/ws/ and
fuzz/corpus/h2/.

Request seeds are realistic requests (the list below) plus every request-looking bytes literal
of the conformance cases (conformance/*.py, read with ast, never imported), each prefixed with
the harness's 8 configuration bytes (default limits, whole/split choices; see fuzz_request.c).
Response seeds are structured inputs for fuzz_response.c (status, flags, headers, body events).
WebSocket seeds are client frame sequences (masked, RFC 6455 §5.7's examples, fragments, control
frames, close codes, UTF-8 edges, each rule's violation) behind fuzz_ws.c's 4 configuration bytes.
HTTP/2 seeds are client byte streams (the connection preface, SETTINGS, HPACK-encoded HEADERS,
DATA, RST_STREAM, WINDOW_UPDATE, PING, PRIORITY, CONTINUATION, GOAWAY; well-formed conversations
made with the `h2` client and frames made with `hyperframe` and `hpack`, the PyPI packages of the
test requirements; each published attack in small) behind fuzz_h2.c's 8 configuration bytes; they
are written only when those packages import (make fuzz-seeds runs this with .venv's Python).
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


def h2_streams():
    """Client byte streams for fuzz_h2.c: conversations the h2 client makes, then hand-made
    frame sequences (hyperframe, hpack) for what it refuses to send. None without the packages."""
    try:
        import h2.config
        import h2.connection
        import hpack
        import hyperframe.frame as hf
    except ImportError:
        return None

    def client():
        c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        c.initiate_connection()
        return c

    def req(path=b"/", method=b"GET", extra=()):
        return [(b":method", method), (b":path", path), (b":scheme", b"http"),
                (b":authority", b"testserver")] + list(extra)

    out = []
    c = client()
    c.send_headers(1, req(), end_stream=True)
    out.append(c.data_to_send())
    c = client()
    c.send_headers(1, req(b"/up", b"POST", [(b"content-length", b"11")]))
    c.send_data(1, b"hello")
    c.send_data(1, b" world", end_stream=True)
    out.append(c.data_to_send())
    c = client()
    for sid in (1, 3, 5):
        c.send_headers(sid, req(b"/s%d?q=1" % sid), end_stream=True)
    out.append(c.data_to_send())
    c = client()
    c.send_headers(1, req(b"/h", b"HEAD"), end_stream=True)
    c.send_headers(3, req(b"/o", b"OPTIONS"), end_stream=True)
    out.append(c.data_to_send())
    c = client()
    c.send_headers(1, req(b"/grpc", b"POST", [(b"te", b"trailers"),
                                              (b"content-type", b"application/grpc")]))
    c.send_data(1, b"\x00\x00\x00\x00\x03abc")
    c.send_headers(1, [(b"x-trailer", b"t")], end_stream=True)
    out.append(c.data_to_send())
    c = client()
    c.send_headers(1, req(b"/c", extra=[(b"cookie", b"a=1"), (b"cookie", b"b=2"),
                                        (b"accept", b"*/*"), (b"user-agent", b"h2/4")]),
                   end_stream=True)
    c.send_headers(3, req(b"/c", extra=[(b"cookie", b"a=1"), (b"accept", b"*/*")]),
                   end_stream=True)  # HPACK's dynamic table in use
    out.append(c.data_to_send())
    c = client()
    c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0,
                       h2.settings.SettingCodes.MAX_FRAME_SIZE: 1 << 20,
                       h2.settings.SettingCodes.HEADER_TABLE_SIZE: 0})
    c.send_headers(1, req(b"/big"), end_stream=True)
    c.increment_flow_control_window(1000, stream_id=1)
    c.increment_flow_control_window(70000)
    out.append(c.data_to_send())
    c = client()
    c.send_headers(1, req(), end_stream=True)
    c.ping(b"12345678")
    c.send_headers(3, req(b"/p", b"POST"))
    c.send_data(3, b"x" * 100, pad_length=10)
    c.reset_stream(3)
    c.close_connection()
    out.append(c.data_to_send())

    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    enc = hpack.Encoder()

    def fr(f):
        return f.serialize()

    def headers(sid, fields, flags=("END_HEADERS", "END_STREAM")):
        f = hf.HeadersFrame(sid)
        f.data = enc.encode(fields)
        f.flags = set(flags)
        return fr(f)

    def settings(**kw):
        f = hf.SettingsFrame(0)
        f.settings = {getattr(hf.SettingsFrame, k): v for k, v in kw.items()}
        return fr(f)

    def data(sid, payload, end=False):
        f = hf.DataFrame(sid)
        f.data = payload
        if end:
            f.flags.add("END_STREAM")
        return fr(f)

    def rst(sid, code=8):
        f = hf.RstStreamFrame(sid)
        f.error_code = code
        return fr(f)

    def wu(sid, inc):
        f = hf.WindowUpdateFrame(sid)
        f.window_increment = inc
        return fr(f)

    def ping():
        f = hf.PingFrame(0)
        f.opaque_data = b"\x00" * 8
        return fr(f)

    def prio(sid, dep):
        f = hf.PriorityFrame(sid)
        f.depends_on = dep
        f.stream_weight = 15
        return fr(f)

    def raw(t, flags, sid, payload=b""):
        return struct.pack(">I", len(payload))[1:] + bytes([t, flags]) + struct.pack(">I", sid) \
            + payload

    start = preface + settings()
    get = [(":method", "GET"), (":path", "/"), (":scheme", "http"), (":authority", "x")]
    # CONTINUATION: a header block in three frames
    block = hpack.Encoder().encode(get + [("x-long", "v" * 200)])
    out.append(preface + settings() + raw(1, 0x1, 1, block[:10]) + raw(9, 0, 1, block[10:100])
               + raw(9, 0x4, 1, block[100:]))
    # Rapid Reset (CVE-2023-44487) in small: HEADERS then RST_STREAM, 20 times
    enc = hpack.Encoder()
    out.append(start + b"".join(headers(2 * i + 1, get) + rst(2 * i + 1) for i in range(20)))
    # CONTINUATION flood (CVE-2024-27316) in small: a block that never ends
    enc = hpack.Encoder()
    out.append(start + raw(1, 0x1, 1, hpack.Encoder().encode(get))
               + b"".join(raw(9, 0, 1, b"\x40\x01a\x01b") for _ in range(12)))
    # MadeYouReset (CVE-2025-8671) in small: WINDOW_UPDATE 0 on open streams
    enc = hpack.Encoder()
    out.append(start + b"".join(headers(2 * i + 1, get, ("END_HEADERS",))
                                + raw(8, 0, 2 * i + 1, b"\x00\x00\x00\x00") for i in range(12)))
    # SETTINGS, PING, empty DATA, PRIORITY and WINDOW_UPDATE floods in small
    enc = hpack.Encoder()
    out.append(start + settings() * 12 + ping() * 12)
    out.append(start + headers(1, get, ("END_HEADERS",)) + data(1, b"") * 12 + data(1, b"", True))
    out.append(start + b"".join(prio(2 * i + 1, 0) for i in range(12)) + wu(0, 1) * 12)
    # body and flow control: content-length kept and broken, window updates, a zero window
    enc = hpack.Encoder()
    post = [(":method", "POST"), (":path", "/up"), (":scheme", "http"), (":authority", "x")]
    out.append(start + headers(1, post + [("content-length", "3")], ("END_HEADERS",))
               + data(1, b"abcd", True))
    enc = hpack.Encoder()
    out.append(start + headers(1, post, ("END_HEADERS",)) + data(1, b"x" * 1000)
               + wu(1, 1 << 30) + wu(0, 1 << 30) + data(1, b"y" * 1000, True))
    enc = hpack.Encoder()
    out.append(preface + settings(INITIAL_WINDOW_SIZE=0) + headers(1, get) + ping()
               + settings(INITIAL_WINDOW_SIZE=100) + wu(1, 10))
    # malformed requests (stream errors) and connection errors
    for fields in (
        get + [("connection", "keep-alive")],
        get + [("te", "gzip")],
        get + [("Upper", "x")],
        [(":method", "GET"), (":scheme", "http"), (":authority", "x")],
        [(":method", "CONNECT"), (":authority", "x:443")],
        get + [("host", "y")],
        [(":method", "GET"), (":path", "/a#b"), (":scheme", "http"), (":authority", "x")],
        [(":method", "GET"), (":path", "/"), (":scheme", "ftp"), (":authority", "x")],
        [(":method", "BREW"), (":path", "/"), (":scheme", "http"), (":authority", "u@x")],
    ):
        enc = hpack.Encoder()
        out.append(start + headers(1, fields) + headers(3, get))
    enc = hpack.Encoder()
    out.append(start + raw(0, 0, 0, b"x") + headers(1, get))
    out.append(start + raw(8, 0, 0, b"\x00\x00\x00\x00"))
    out.append(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n" + settings())
    out.append(start + raw(5, 0x4, 1, b"\x00\x00\x00\x02"))  # PUSH_PROMISE from a client
    out.append(start + headers(2, get))  # an even stream id
    enc = hpack.Encoder()
    out.append(start + headers(3, get) + headers(1, get))  # a stream id going down
    enc = hpack.Encoder()  # nine ranges of ids skipped, then the oldest (forgotten) and the next
    out.append(start + b"".join(headers(4 * i + 1, get) for i in range(10)) + headers(3, get)
               + headers(7, get))
    enc = hpack.Encoder()  # the highest stream id first, then one below it
    out.append(start + headers(0x7FFFFFFF, get) + headers(1, get))
    enc = hpack.Encoder()  # a stream the client ended, opened again; one it reset, likewise
    out.append(start + headers(1, get) + headers(3, get) + headers(1, get))
    enc = hpack.Encoder()
    out.append(start + headers(1, post, ("END_HEADERS",)) + rst(1) + headers(3, get)
               + headers(1, get))
    enc = hpack.Encoder()  # expect: 100-continue, the content after the 100 and without it
    out.append(start + headers(1, post + [("expect", "100-continue")], ("END_HEADERS",))
               + data(1, b"abc", True) + headers(3, post + [("expect", "100-continue")]))
    enc = hpack.Encoder()
    out.append(start + headers(1, get + [("x-big", "v" * 300)] * 4))  # over a small header list
    for extra in ([("host", "x"), ("host", "x")], [("host", "a b")], [("content-length", "1000")]):
        enc = hpack.Encoder()
        out.append(start + headers(1, get + extra) + headers(3, post, ("END_HEADERS",))
                   + data(3, b"z" * 300) + data(3, b"z" * 300, True))
    # a PING ACK, as a client answers the shutdown notice's PING (RFC 9113 §6.8)
    ack = hf.PingFrame(0)
    ack.opaque_data = b"skirrbye"
    ack.flags.add("ACK")
    enc = hpack.Encoder()
    out.append(start + headers(1, get) + fr(ack) + headers(3, get))
    return out


# fuzz_h2.c's configuration bytes (see its header): defaults (random reads, apps answer at once);
# every script in turn, eager starts, shutdown, trace on; small limits, tiny budgets, byte by
# byte, a peer reading 1 KiB per round; a window of 16, streams limit 1, body limit, a peer that
# never reads; --limit-concurrency 2, a body limit and a body timeout with apps that answer and
# stall; a graceful shutdown with the peer reading 1 KiB per round.
H2_CONFIGS = [
    bytes(8),
    bytes([0x00, 0x70, 0, 1, 0, 0, 0, 1]),
    bytes([0x31, 0x05, 5, 3, 1, 2, 3, 4]),
    bytes([0xc5, 0x8a, 2, 7, 2, 9, 9, 9]),
    bytes([0xc0, 0x90, 14, 0, 0, 0, 0, 2]),
    bytes([0x40, 0x24, 13, 1, 3, 0, 1, 0]),
    # --proxy-headers on with the access log: a refusal's client (sk_proxy_client, and
    # sk_exchange_client for an exchange's 413 and 408: the apps echo, or hang) under the body
    # deadline, --limit-concurrency and --limit-request-body
    bytes([0xc0, 0xd0, 2, 0, 0, 2, 0, 2]),
    bytes([0xc0, 0xd0, 3, 0, 0, 2, 0, 2]),
    bytes([0x00, 0x70, 0, 1, 0, 2, 0, 1]),
]


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
    streams = h2_streams()
    if streams is None:
        print("h2 seeds not written: the h2, hpack and hyperframe packages do not import")
        nh2 = 0
    else:
        h2_seeds = sorted({cfg + s for s in streams for cfg in H2_CONFIGS})
        write(os.path.join(TOP, "fuzz", "corpus", "h2"), h2_seeds)
        nh2 = len(h2_seeds)
    print(f"{len(blobs)} request seeds, {len(RESPONSES)} response seeds, {len(ws)} ws seeds, "
          f"{nh2} h2 seeds")


if __name__ == "__main__":
    main()
