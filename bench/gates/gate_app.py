"""The ASGI application the gates serve (the same file for skirr and uvicorn).

    /slow-reader   64 MiB: 1,024 body events of 64 KiB, each freshly allocated, with
                   Content-Length (the issue 5 slow-reader scenario; body = event_bytes(i))
    /stream        64 KiB events without end, until the server reports the client gone
    /_live         skirr's live-object counts (skirr._native._live(), JSON), gc counts included
    /upload        reads the whole request body, then "ok" (the slow-uploader gate's target)
    anything else  "ok"
"""
import gc
import json

EVENTS = 1024
EVENT_SIZE = 64 * 1024


def event_bytes(i: int) -> bytes:
    """Event i of /slow-reader: a new 64 KiB object each call (never a reused constant, which a
    transport could keep by reference instead of copying)."""
    return i.to_bytes(4, "big") * (EVENT_SIZE // 4)


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/slow-reader":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(EVENTS * EVENT_SIZE).encode()),
                                (b"content-type", b"application/octet-stream")]})
        for i in range(EVENTS):
            await send({"type": "http.response.body", "body": event_bytes(i),
                        "more_body": i < EVENTS - 1})
        return
    if path == "/stream":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/octet-stream")]})
        try:
            while True:
                await send({"type": "http.response.body", "body": b"s" * EVENT_SIZE,
                            "more_body": True})
        except OSError:  # skirr.ClientDisconnected: the write timeout closed the connection
            return
    body = b"ok"
    if path == "/upload":
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                return  # http.disconnect: the body timeout ended it
            if not msg.get("more_body"):
                break
    if path == "/_live":
        gc.collect()
        from skirr._native import _live

        body = json.dumps({**_live(), "gc_objects": len(gc.get_objects())}).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})
