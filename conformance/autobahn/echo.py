"""The Autobahn|Testsuite echo app (issue 14): accepts every WebSocket and sends each received
message back as the same type (text as text, bytes as bytes) until the client disconnects.

Served by conformance/autobahn/run.py: ``python -m skirr echo:app --app-dir conformance/autobahn``.
Plain HTTP requests get 404.
"""


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 404,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"not found\n"})
        return
    # websocket: the first event is websocket.connect
    await receive()
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("text") is not None:
            await send({"type": "websocket.send", "text": message["text"]})
        else:
            await send({"type": "websocket.send", "bytes": message["bytes"]})
