"""The WebSocket echo app shared by every server in the benchmark's WebSocket rows (bench/run.py).

    echo    ws_echo_64, ws_echo_1k: accepts the WebSocket (no subprotocol, no extra headers) and
            sends every received message back as the same type, text as text and bytes as
            bytes, until the client disconnects

Plain HTTP requests (the servers' readiness probes, if any) get 404; lifespan returns at once
(every server is run with lifespan off where it can be).
"""

_ACCEPT = {"type": "websocket.accept"}
_NOT_FOUND_START = {
    "type": "http.response.start",
    "status": 404,
    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"10")],
}
_NOT_FOUND_BODY = {"type": "http.response.body", "body": b"not found\n"}


async def echo(scope, receive, send):
    if scope["type"] == "http":
        await send(_NOT_FOUND_START)
        await send(_NOT_FOUND_BODY)
        return
    if scope["type"] != "websocket":
        return
    await receive()  # websocket.connect
    await send(_ACCEPT)
    while True:
        message = await receive()
        if message["type"] != "websocket.receive":  # websocket.disconnect
            return
        text = message.get("text")
        if text is not None:
            await send({"type": "websocket.send", "text": text})
        else:
            await send({"type": "websocket.send", "bytes": message["bytes"]})
