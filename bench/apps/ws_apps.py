"""The WebSocket apps shared by every server in the benchmark's WebSocket rows (bench/run.py).

    echo    ws_echo_64, ws_echo_1k: accepts the WebSocket (no subprotocol, no extra headers) and
            sends every received message back as the same type, text as text and bytes as
            bytes, until the client disconnects
    fanout  the scale part's fan-out rows (issue 37 item 3; bench/fanout_client.c drives it): a
            WebSocket on PUBLISH_PATH is the publisher, one on any other path a subscriber. A
            subscriber is accepted, added to the app's set and sent WELCOME (so its client knows
            it will get the next broadcast); what it sends is ignored. Every message the publisher
            sends is sent to every subscriber (the same type), and once all those sends have
            returned the publisher is answered `sent K` (text), K the subscribers whose send
            returned without raising. Plain ASGI, no framework, so every server runs the same code.

Plain HTTP requests (the servers' readiness probes, if any) get 404; lifespan returns at once
(every server is run with lifespan off where it can be).
"""
import asyncio

_ACCEPT = {"type": "websocket.accept"}
_NOT_FOUND_START = {
    "type": "http.response.start",
    "status": 404,
    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"10")],
}
_NOT_FOUND_BODY = {"type": "http.response.body", "body": b"not found\n"}


async def _accepted(scope, receive, send):
    """True once the connection is an accepted WebSocket; a plain HTTP request is answered 404 and
    lifespan returns at once (False for both)."""
    if scope["type"] == "http":
        await send(_NOT_FOUND_START)
        await send(_NOT_FOUND_BODY)
        return False
    if scope["type"] != "websocket":
        return False
    await receive()  # websocket.connect
    await send(_ACCEPT)
    return True


async def echo(scope, receive, send):
    if not await _accepted(scope, receive, send):
        return
    while True:
        message = await receive()
        if message["type"] != "websocket.receive":  # websocket.disconnect
            return
        text = message.get("text")
        if text is not None:
            await send({"type": "websocket.send", "text": text})
        else:
            await send({"type": "websocket.send", "bytes": message["bytes"]})


PUBLISH_PATH = "/pub"
WELCOME = {"type": "websocket.send", "text": "welcome"}
# The fan-out app's subscribers: a key of its own (an object) for each one's ASGI send callable,
# which is not hashable on every server.
_subscribers = {}


async def fanout(scope, receive, send):
    if not await _accepted(scope, receive, send):
        return
    if scope["path"] == PUBLISH_PATH:
        await _publish(receive, send)
    else:
        await _subscribe(receive, send)


async def _subscribe(receive, send):
    key = object()
    _subscribers[key] = send
    try:
        await send(WELCOME)
        while (await receive())["type"] == "websocket.receive":
            pass
    finally:
        del _subscribers[key]


async def _publish(receive, send):
    while True:
        message = await receive()
        if message["type"] != "websocket.receive":  # websocket.disconnect
            return
        text = message.get("text")
        out = ({"type": "websocket.send", "text": text} if text is not None
               else {"type": "websocket.send", "bytes": message["bytes"]})
        # Every subscriber's send at once, as a chat or notification service writes it: awaiting
        # them one after another would hold every later subscriber behind one whose socket is
        # full (its send waits for the drain), and return_exceptions keeps one that disconnected
        # mid-broadcast from failing the rest. list(): the set changes while the sends run.
        results = await asyncio.gather(*(s(out) for s in list(_subscribers.values())),
                                       return_exceptions=True)
        sent = sum(not isinstance(r, BaseException) for r in results)
        await send({"type": "websocket.send", "text": f"sent {sent}"})
