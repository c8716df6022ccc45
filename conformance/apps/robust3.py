"""An application that raises BaseExceptions from its requests (issue 11 items 7 and 8; served by
`python -m skirr robust3:app` in conformance/test_robustness_round3.py).

    /exit-in-call          SystemExit raised by app() itself (its synchronous part)
    /interrupt-before      KeyboardInterrupt before the coroutine's first await
    /exit-after            SystemExit after the first await
    /interrupt-after-head  KeyboardInterrupt after the response head and one chunk
    /slow?s=SECONDS        "done" after sleeping
    anything else          "ok"

Lifespan is supported; events (startup, shutdown, slow-start) go one a line to $SKIRR_TEST_LOG.
"""
import asyncio
import os


def log(event):
    path = os.environ.get("SKIRR_TEST_LOG")
    if path:
        with open(path, "a") as f:
            f.write(event + "\n")


def app(scope, receive, send):
    if scope["type"] == "http" and scope["path"] == "/exit-in-call":
        raise SystemExit(3)
    return serve(scope, receive, send)


async def serve(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                log("startup")
                await send({"type": "lifespan.startup.complete"})
            else:
                log("shutdown")
                await send({"type": "lifespan.shutdown.complete"})
                return
    path = scope["path"]
    if path == "/interrupt-before":
        raise KeyboardInterrupt
    await receive()
    if path == "/exit-after":
        raise SystemExit(4)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    if path == "/interrupt-after-head":
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        raise KeyboardInterrupt
    if path == "/slow":
        log("slow-start")
        await asyncio.sleep(float(scope["query_string"].decode().partition("=")[2]))
        body = b"done"
    else:
        body = b"ok"
    await send({"type": "http.response.body", "body": body})
