"""A small HTTP/2 client for the conformance cases (issue 33): the `h2` library (PyPI) as the client
and the oracle, over a raw socket, so a case sees every frame and event skirr sends.

`H2Client.open(port)` connects in cleartext with prior knowledge (RFC 9113 §3.3: the preface and a
SETTINGS frame, sent at once); `H2Client.open_tls(port, ctx)` over TLS, offering ALPN "h2" (the
negotiated protocol is in `.alpn`). Then:

- `request(headers, body=b"", end=True)` sends a request on a new stream and returns its id;
  `get(path)` is a GET with :authority "testserver" and answers `Answer` (status, headers, body,
  trailers, interim responses, how the stream ended);
- `events_until(pred, timeout)` reads and returns h2 events until `pred(event)` is true (the
  event included), the peer closes (`ConnectionClosed` events are synthesised) or the timeout
  passes (AssertionError); `answer(stream_id)` collects one stream's events into an `Answer`;
- `send_raw(bytes)` writes bytes as they are (hyperframe frames h2 refuses to make: `frame(...)`
  serialises one; `raw_frame(...)` makes bytes hyperframe refuses to, a bad length or padding),
  `.conn` is the h2 state machine for anything else, `flush()` sends what it queued;
- `frames_until(pred, timeout)`, for a case that writes every frame itself (h2's state machine
  knows nothing of its streams): the server's frames as hyperframe parsed them, each HEADERS with
  its block decoded in `.fields`, the server's SETTINGS acknowledged.

Window updates are NOT sent automatically: `events_until` acknowledges received DATA only when
`ack_data=True` (the default), so a case can hold the server's window closed. Every socket read is
bounded by `timeout` (seconds).
"""
from __future__ import annotations

import dataclasses
import socket
import ssl
import time
from typing import Callable, Optional

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack
import hyperframe.frame

IO_TIMEOUT = 5.0
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class ConnectionClosed:
    """Synthesised event: the server closed the connection (EOF or reset)."""

    def __repr__(self) -> str:
        return "<ConnectionClosed>"


@dataclasses.dataclass
class Answer:
    """One stream's answer, as the h2 client saw it."""
    status: Optional[int] = None
    headers: list = dataclasses.field(default_factory=list)   # [(name, value)] bytes, no :status
    body: bytes = b""
    trailers: Optional[list] = None
    interim: list = dataclasses.field(default_factory=list)   # [(status, headers)]
    ended: bool = False            # END_STREAM seen
    reset: Optional[int] = None    # RST_STREAM error code from the server
    goaway: Optional[h2.events.ConnectionTerminated] = None
    closed: bool = False           # the connection ended before the stream did
    events: list = dataclasses.field(default_factory=list)

    def header(self, name: bytes) -> Optional[bytes]:
        for n, v in self.headers:
            if n == name:
                return v
        return None


def hpack_int(value: int, prefix: int, first: int = 0) -> bytes:
    """An HPACK integer (RFC 7541 §5.1) with an N-bit prefix, OR-ed into `first`."""
    limit = (1 << prefix) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes(out + [value])


def raw_frame(ftype: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One frame's bytes as given (RFC 9113 §4.1): any type, flags, stream id (the reserved bit
    included) and payload, lengths and padding unchecked."""
    return (len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + stream_id.to_bytes(4, "big")
            + payload)


def frame(kind: type, stream_id: int = 0, **attrs) -> bytes:
    """One hyperframe frame serialised: frame(hyperframe.frame.PingFrame, opaque_data=b"12345678")."""
    f = kind(stream_id)
    for k, v in attrs.items():
        setattr(f, k, v)
    return f.serialize()


class H2Client:
    """An HTTP/2 client connection (see the module docstring)."""

    def __init__(self, sock: socket.socket, timeout: float = IO_TIMEOUT, settings: Optional[dict] = None,
                 preface: bool = True) -> None:
        self.sock = sock
        self.timeout = timeout
        self.sock.settimeout(timeout)
        self.conn = h2.connection.H2Connection(config=h2.config.H2Configuration(
            client_side=True, header_encoding=None, validate_outbound_headers=False,
            validate_inbound_headers=False,
            normalize_inbound_headers=False))
        self.alpn: Optional[str] = None
        self.closed = False
        self.pending: list = []   # events read but not yet returned by events_until
        self.raw = b""            # frames_until: bytes read, not yet a whole frame
        self.decoder = hpack.Decoder()
        if preface:
            self.conn.initiate_connection()
            if settings:
                self.conn.update_settings(settings)
            self.flush()

    @classmethod
    def open(cls, port: int, timeout: float = IO_TIMEOUT, **kw) -> "H2Client":
        """h2c with prior knowledge (RFC 9113 §3.3) to 127.0.0.1:port."""
        return cls(socket.create_connection(("127.0.0.1", port), timeout=timeout), timeout, **kw)

    @classmethod
    def open_tls(cls, port: int, ctx: ssl.SSLContext, timeout: float = IO_TIMEOUT,
                 alpn: tuple = ("h2",), server_hostname: str = "127.0.0.1", **kw) -> "H2Client":
        """h2 over TLS, offering ALPN `alpn` (RFC 9113 §3.2); `.alpn` is what was selected."""
        ctx.set_alpn_protocols(list(alpn))
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        tls = ctx.wrap_socket(raw, server_hostname=server_hostname)
        c = cls(tls, timeout, **kw)
        c.alpn = tls.selected_alpn_protocol()
        return c

    # ---- writing ----

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data and not self.closed:
            try:
                self.sock.sendall(data)
            except OSError:
                self.closed = True

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, headers: list, body: bytes = b"", end: bool = True,
                stream_id: Optional[int] = None) -> int:
        """Sends HEADERS (and DATA when body) on a new stream; end: END_STREAM on the last."""
        sid = stream_id if stream_id is not None else self.conn.get_next_available_stream_id()
        hdrs = [(k.encode() if isinstance(k, str) else k, v.encode() if isinstance(v, str) else v)
                for k, v in headers]
        self.conn.send_headers(sid, hdrs, end_stream=end and not body)
        if body:
            self.conn.send_data(sid, body, end_stream=end)
        self.flush()
        return sid

    def get(self, path: str = "/", method: str = "GET", extra: list = (), body: bytes = b"",
            authority: str = "testserver", scheme: str = "http") -> int:
        return self.request([(":method", method), (":scheme", scheme), (":path", path),
                             (":authority", authority), *extra], body)

    # ---- reading ----

    def _recv(self, deadline: float) -> bytes:
        """One read: the bytes, b"" once the server has closed (self.closed)."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("timed out waiting for the server")
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise AssertionError("timed out waiting for the server") from None
        except (ConnectionResetError, ssl.SSLError, OSError):
            data = b""
        if not data:
            self.closed = True
        return data

    def _read(self, deadline: float) -> list:
        data = self._recv(deadline)
        if not data:
            return [ConnectionClosed()]
        events = self.conn.receive_data(data)
        self.flush()   # SETTINGS ACK, PING ACK
        return events

    def events_until(self, pred: Callable, timeout: Optional[float] = None,
                     ack_data: bool = True) -> list:
        """h2 events up to the first one pred() accepts (included); a closed connection ends
        the wait too (ConnectionClosed last). AssertionError after timeout seconds."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        out: list = []
        while True:
            while self.pending:
                e = self.pending.pop(0)
                out.append(e)
                if isinstance(e, h2.events.DataReceived) and ack_data and not self.closed:
                    self.conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                    self.flush()
                if pred(e) or isinstance(e, ConnectionClosed):
                    return out
            if self.closed:
                out.append(ConnectionClosed())
                return out
            self.pending.extend(self._read(deadline))

    def frames_until(self, pred: Callable, timeout: Optional[float] = None) -> list:
        """Raw reading: the server's frames (hyperframe) up to the first one pred() accepts
        (included), or up to the close (ConnectionClosed last); AssertionError after timeout
        seconds. A HEADERS frame with END_HEADERS gets `.fields`, its block decoded (one hpack
        decoder for the connection); a SETTINGS without ACK is acknowledged. Not to be mixed
        with events_until on one connection (h2 never sees these bytes)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        out: list = []
        while True:
            frames, self.raw = split_frames(self.raw, most=1)
            if frames:
                f = frames[0]
                if isinstance(f, hyperframe.frame.HeadersFrame) and "END_HEADERS" in f.flags:
                    f.fields = self.decoder.decode(bytes(f.data), raw=True)
                if (isinstance(f, hyperframe.frame.SettingsFrame) and "ACK" not in f.flags
                        and not self.closed):
                    ack = hyperframe.frame.SettingsFrame(0, flags=["ACK"])
                    try:
                        self.send_raw(ack.serialize())
                    except OSError:
                        pass
                out.append(f)
                if pred(f):
                    return out
                continue
            if self.closed:
                out.append(ConnectionClosed())
                return out
            self.raw += self._recv(deadline)

    def answer(self, sid: int, timeout: Optional[float] = None, ack_data: bool = True) -> Answer:
        """Reads until stream sid ended (END_STREAM or RST_STREAM) or the connection did."""
        a = Answer()

        def done(e) -> bool:
            return (isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset))
                    and e.stream_id == sid)

        for e in self.events_until(lambda e: done(e), timeout, ack_data):
            sid_e = getattr(e, "stream_id", None)
            if isinstance(e, h2.events.ConnectionTerminated):
                a.goaway = e
            if isinstance(e, ConnectionClosed):
                a.closed = True
            if sid_e != sid:
                continue
            a.events.append(e)
            if isinstance(e, h2.events.InformationalResponseReceived):
                hd = dict(e.headers)
                a.interim.append((int(hd[b":status"]), [h for h in e.headers if h[0] != b":status"]))
            elif isinstance(e, h2.events.ResponseReceived):
                hd = dict(e.headers)
                a.status = int(hd[b":status"])
                a.headers = [h for h in e.headers if h[0] != b":status"]
            elif isinstance(e, h2.events.DataReceived):
                a.body += e.data
            elif isinstance(e, h2.events.TrailersReceived):
                a.trailers = list(e.headers)
            elif isinstance(e, h2.events.StreamEnded):
                a.ended = True
            elif isinstance(e, h2.events.StreamReset):
                a.reset = int(e.error_code)
        return a

    def goaway(self, timeout: Optional[float] = None) -> h2.events.ConnectionTerminated:
        """Reads until a GOAWAY; AssertionError if the connection closes without one."""
        evs = self.events_until(lambda e: isinstance(e, h2.events.ConnectionTerminated), timeout)
        last = evs[-1]
        assert isinstance(last, h2.events.ConnectionTerminated), f"no GOAWAY: {evs!r}"
        return last

    def wait_closed(self, timeout: Optional[float] = None) -> list:
        """Every event until the server closes the connection."""
        return self.events_until(lambda e: False, timeout)

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "H2Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def split_frames(data: bytes, most: Optional[int] = None) -> tuple:
    """(the whole frames at the start of data, parsed by hyperframe, at most `most` of them; the
    bytes after them)."""
    out: list = []
    while len(data) >= 9 and (most is None or len(out) < most):
        f, length = hyperframe.frame.Frame.parse_frame_header(memoryview(data[:9]))
        if len(data) < 9 + length:
            break
        f.parse_body(memoryview(data[9:9 + length]))
        out.append(f)
        data = data[9 + length:]
    return out, data


def raw_frames(data: bytes) -> list:
    """hyperframe frames parsed from bytes the server sent (after its preface-less start)."""
    return split_frames(data)[0]
