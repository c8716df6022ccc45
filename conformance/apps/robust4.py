"""Applications for issue 35 items 3 and 12 (served by `python -m skirr robust4:X` in
conformance/test_robustness_round4_apps.py). Events go one a line to $SKIRR_TEST_LOG.

    app              lifespan supported (events startup, shutdown). WebSocket:
                     /exit-after-accept   SystemExit(3) after accept and the first message
                     /interrupt-before    KeyboardInterrupt before answering the handshake
                     /echo                echoes text messages until the client closes
                     HTTP: "ok"
    hang_startup     lifespan startup never answers (events startup, startup-cancelled).
    hang_shutdown    lifespan startup completes, shutdown never answers (events startup,
                     shutdown, shutdown-cancelled); HTTP: "ok".
    stubborn         lifespan supported; an HTTP request, or a WebSocket session after accept,
                     never ends and ignores every cancellation (events request or session, then
                     one http-cancelled / websocket-cancelled per cancellation). HTTP /spawn:
                     "ok", after starting a task of its own that ignores every cancellation
                     (events spawned, other-cancelled ...).
    stubborn_shutdown  lifespan shutdown never answers and ignores cancellation (events
                     startup, shutdown, shutdown-cancelled ...); HTTP: "ok".
    stubborn_startup   lifespan startup never answers and ignores cancellation (events
                     startup, startup-cancelled ...).
    exits_after_startup  lifespan startup completes, then the lifespan task raises
                     SystemExit(4) 0.2 s later (events startup, exit); HTTP: "ok".
    fails_after_startup  the same raising RuntimeError("after-startup").
    endless_agen     lifespan supported; HTTP: "ok" after taking one item of an async generator
                     that it keeps, whose clean-up (finally) never ends and ignores cancellation
                     (events agen-closing, agen-cancelled ...).
    exits_factory    a factory raising SystemExit(3) (--factory).
    interrupt_factory  a factory raising KeyboardInterrupt (--factory).
"""
import asyncio
import os


def log(event):
    path = os.environ.get("SKIRR_TEST_LOG")
    if path:
        with open(path, "a") as f:
            f.write(event + "\n")


async def ok(send):
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def app(scope, receive, send):
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
    if scope["type"] == "http":
        await ok(send)
        return
    path = scope["path"]
    await receive()  # websocket.connect
    if path == "/interrupt-before":
        raise KeyboardInterrupt
    await send({"type": "websocket.accept"})
    while True:
        msg = await receive()
        if msg["type"] == "websocket.disconnect":
            return
        if path == "/exit-after-accept":
            raise SystemExit(3)
        await send({"type": "websocket.send", "text": msg["text"]})


async def hang_startup(scope, receive, send):
    assert scope["type"] == "lifespan"
    await receive()
    log("startup")
    try:
        await asyncio.sleep(1000)
    except asyncio.CancelledError:
        log("startup-cancelled")
        raise


async def hang_shutdown(scope, receive, send):
    if scope["type"] == "http":
        await ok(send)
        return
    await receive()
    log("startup")
    await send({"type": "lifespan.startup.complete"})
    await receive()
    log("shutdown")
    try:
        await asyncio.sleep(1000)
    except asyncio.CancelledError:
        log("shutdown-cancelled")
        raise


async def ignore_cancellation(what):
    """Sleeps forever; each cancellation is logged (cancelled-WHAT) and ignored."""
    while True:
        try:
            await asyncio.sleep(1000)
        except asyncio.CancelledError:
            log(f"{what}-cancelled")


SPAWNED = set()  # the /spawn tasks (a reference, as asyncio asks)


async def stubborn(scope, receive, send):
    if scope["type"] == "lifespan":
        await app(scope, receive, send)
        return
    if scope["path"] == "/spawn":
        SPAWNED.add(asyncio.get_running_loop().create_task(ignore_cancellation("other")))
        log("spawned")
        await ok(send)
        return
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        log("session")
    else:
        log("request")
    await ignore_cancellation(scope["type"])


async def stubborn_shutdown(scope, receive, send):
    if scope["type"] == "http":
        await ok(send)
        return
    await receive()
    log("startup")
    await send({"type": "lifespan.startup.complete"})
    await receive()
    log("shutdown")
    await ignore_cancellation("shutdown")


async def stubborn_startup(scope, receive, send):
    assert scope["type"] == "lifespan"
    await receive()
    log("startup")
    await ignore_cancellation("startup")


def raising_after_startup(exc):
    async def app(scope, receive, send):
        if scope["type"] == "http":
            await ok(send)
            return
        await receive()
        log("startup")
        await send({"type": "lifespan.startup.complete"})
        await asyncio.sleep(0.2)
        log("exit")
        raise exc

    return app


exits_after_startup = raising_after_startup(SystemExit(4))
fails_after_startup = raising_after_startup(RuntimeError("after-startup"))


async def _endless_clean_up():
    try:
        while True:
            yield b"x"
    finally:
        log("agen-closing")
        await ignore_cancellation("agen")


KEPT = []  # the generators /endless_agen took an item of (closed only by the loop's shutdown)


async def endless_agen(scope, receive, send):
    if scope["type"] == "lifespan":
        await app(scope, receive, send)
        return
    gen = _endless_clean_up()
    KEPT.append(gen)
    await gen.__anext__()
    await ok(send)


def exits_factory():
    raise SystemExit(3)


def interrupt_factory():
    raise KeyboardInterrupt
