"""Response backpressure (spec/flow_control.toml; DESIGN "Streaming responses"; the accepted shape
of shared/seeds/002): after every ``http.response.body`` with ``more_body: true``, ``send()``
completes only when the connection's unsent output is below 64 KiB; the final event is not held
back; a single event larger than the mark goes out whole and is drained before ``send()``
returns; a send blocked on drain can be cancelled.

The client fixes its receive buffer (SO_RCVBUF 32 KiB, so the kernel holds 64 KiB on its side and
does not autotune), so while it reads nothing the app can get at most this far ahead:
the server's send buffer (at most net.ipv4.tcp_wmem's maximum) + the client's receive buffer +
the 64 KiB mark + one event.
"""
import asyncio
import hashlib

import pytest

from _flow import HIGH_WATER, KIB, MIB, Progress, kernel_send_buffer_max, small_client
from conftest import Recorder, http_request

CHUNK = 64 * KIB
RCVBUF = 32 * KIB


def chunk(i: int) -> bytes:
    """A freshly allocated 64 KiB event whose bytes depend on i (order is checked)."""
    return i.to_bytes(4, "big") * (CHUNK // 4)


def stalled_bound(client) -> int:
    """The most an app may have handed to skirr while this client reads nothing."""
    return kernel_send_buffer_max() + client.rcvbuf + HIGH_WATER + CHUNK


@pytest.mark.rule("skirr-flow-send-backpressure")
def test_streaming_send_pending_until_client_reads(serve):
    """1,024 events of 64 KiB (64 MiB). While the client reads nothing, the app's sends stop:
    exactly one send is pending (started, not completed), and what the app produced fits in the
    kernel buffers + 64 KiB + one event. Once the client reads, every send completes and every
    byte arrives in order."""
    n = 1024
    progress = Progress()

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(n):
            progress.bump("started")
            await send({"type": "http.response.body", "body": chunk(i), "more_body": True})
            progress.bump("done")
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        progress.bump("finished")

    with serve(app) as srv:
        c = small_client(srv, rcvbuf=RCVBUF, timeout=10.0)
        c.send(http_request())
        done = progress.wait_stable("done")
        assert progress.get("started") == done + 1, "no send is pending while the client reads nothing"
        assert done < n
        assert done * CHUNK <= stalled_bound(c), (
            f"the app produced {done * CHUNK} bytes for a client that read nothing"
            f" (bound {stalled_bound(c)})"
        )
        r = c.response()
        assert (r.status, r.get(b"transfer-encoding"), len(r.body)) == (200, b"chunked", n * CHUNK)
        expected = hashlib.sha256(b"".join(chunk(i) for i in range(n))).hexdigest()
        assert hashlib.sha256(r.body).hexdigest() == expected
        assert (progress.get("done"), progress.get("finished")) == (n, 1)
        assert srv.errors() == []


@pytest.mark.rule("skirr-flow-large-event-whole")
def test_single_huge_event_delivered_whole(serve):
    """One event larger than everything the kernel can hold (tcp_wmem max + 4 MiB, at least
    8 MiB): its send stays pending while the client reads nothing (it is drained before control
    returns to the app), then the client gets it whole."""
    size = max(8 * MIB, kernel_send_buffer_max() + 4 * MIB)
    big = bytes(range(256)) * (size // 256)
    progress = Progress()

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(big) + 3).encode())]})
        progress.bump("started")
        await send({"type": "http.response.body", "body": big, "more_body": True})
        progress.bump("done")
        await send({"type": "http.response.body", "body": b"end", "more_body": False})

    with serve(app) as srv:
        c = small_client(srv, rcvbuf=RCVBUF, timeout=10.0)
        c.send(http_request())
        progress.wait_stable("started", quiet=0.5)  # the client reads nothing meanwhile
        assert progress.get("done") == 0, "the huge event's send completed while nothing was read"
        r = c.response()
        assert (r.status, r.get(b"content-length")) == (200, str(size + 3).encode())
        assert len(r.body) == size + 3
        assert r.body[:size] == big and r.body[size:] == b"end"
        assert progress.get("done") == 1


@pytest.mark.rule("skirr-flow-final-event-cheap")
def test_final_event_does_not_wait_for_the_client(serve):
    """A final event (more_body false) of 8 MiB completes at once although the client reads
    nothing; the client then gets all of it."""
    size = 8 * MIB
    body = b"f" * size
    done = Recorder()

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body, "more_body": False})
        done.put("final send returned")

    with serve(app) as srv:
        c = small_client(srv, rcvbuf=RCVBUF, timeout=10.0)
        c.send(http_request())
        assert done.wait(1, timeout=2.0) == ["final send returned"]
        r = c.response()
        assert (r.status, r.get(b"content-length"), r.body == body) == (200, str(size).encode(), True)


@pytest.mark.rule("skirr-flow-drain-cancellable")
def test_cancel_task_waiting_on_drain(serve):
    """The app's task is cancelled while its send waits on drain: the app sees CancelledError at
    that await, nothing is logged as an application error, the connection is closed without
    completing the message, and the server keeps serving."""
    progress = Progress()
    seen = Recorder()
    handles = Recorder()

    async def app(scope, receive, send):
        await receive()
        if scope["path"] == "/ok":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        handles.put((asyncio.get_running_loop(), asyncio.current_task()))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            for i in range(10_000):
                progress.bump("started")
                await send({"type": "http.response.body", "body": chunk(i), "more_body": True})
                progress.bump("done")
        except asyncio.CancelledError:
            seen.put(("cancelled", progress.get("started") - progress.get("done")))
            raise
        except BaseException as e:  # pragma: no cover - reported below
            seen.put(("raised", repr(e)))
            raise
        seen.put(("never blocked", progress.get("done")))

    with serve(app) as srv:
        c = small_client(srv, rcvbuf=RCVBUF, timeout=10.0)
        c.send(http_request())
        progress.wait_stable("done")
        loop, task = handles.wait(1)[0]
        loop.call_soon_threadsafe(task.cancel)
        # cancelled at the pending send (1 started, not done)
        assert seen.wait(1, timeout=2.0) == [("cancelled", 1)]
        r = c.response(allow_incomplete=True)
        assert r.status == 200 and not r.complete
        assert c.eof
        assert srv.errors() == []
        r = srv.get("/ok")
        assert (r.status, r.body) == (200, b"ok")
