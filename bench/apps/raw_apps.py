"""Raw ASGI 3 applications shared by every server in the benchmark (bench/run.py).

Each workload is its own attribute, so a server imports exactly one small app:

    raw     raw_get and pipelined_get: reads the request body, answers ``Hello, world!``
    echo    post_4k: answers with the request body it read (application/octet-stream)
    big     get_64k: answers 65,536 bytes
    stream  streaming: one chunk, then waits 50 ms, then the last chunk (no content-length)

Non-HTTP scopes (lifespan) return at once; every server is run with lifespan off where it can be.
"""
import asyncio

HELLO = b"Hello, world!"
BIG = bytes(range(256)) * 256  # 65,536 bytes
STREAM_FIRST = b"first chunk\n"
STREAM_LAST = b"last chunk\n"
STREAM_DELAY = 0.05

_HELLO_START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"13")],
}
_HELLO_BODY = {"type": "http.response.body", "body": HELLO}
_BIG_START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"application/octet-stream"), (b"content-length", b"65536")],
}
_BIG_BODY = {"type": "http.response.body", "body": BIG}
_STREAM_START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/plain")],
}


async def _drain(receive):
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)


async def raw(scope, receive, send):
    if scope["type"] != "http":
        return
    await _drain(receive)
    await send(_HELLO_START)
    await send(_HELLO_BODY)


async def echo(scope, receive, send):
    if scope["type"] != "http":
        return
    chunks = []
    more = True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    body = b"".join(chunks)
    await send({
        "type": "http.response.start",
        "status": 200,
        "headers": [
            (b"content-type", b"application/octet-stream"),
            (b"content-length", str(len(body)).encode()),
        ],
    })
    await send({"type": "http.response.body", "body": body})


async def big(scope, receive, send):
    if scope["type"] != "http":
        return
    await _drain(receive)
    await send(_BIG_START)
    await send(_BIG_BODY)


async def stream(scope, receive, send):
    if scope["type"] != "http":
        return
    await _drain(receive)
    await send(_STREAM_START)
    await send({"type": "http.response.body", "body": STREAM_FIRST, "more_body": True})
    await asyncio.sleep(STREAM_DELAY)
    await send({"type": "http.response.body", "body": STREAM_LAST})
