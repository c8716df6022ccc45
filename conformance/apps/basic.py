"""Raw ASGI test applications for the CLI and lifespan tests (served by `python -m skirr basic:X`).

Each writes what happens to it, one event a line, to the file named by $SKIRR_TEST_LOG (if set),
so a test can check the order of startup, requests and shutdown after the process has exited.

    app             lifespan supported; startup puts {"greeting": "hi"} in state.
                    GET /scope -> JSON of the scope's fields; GET /slow?s=SECONDS -> "done" after
                    sleeping; POST /mutate-state -> adds a key to its state copy; else "ok".
    create_app      a factory returning `app` (for --factory).
    NOT_CALLABLE    not an application.
    startup_failed  answers lifespan.startup.failed, message "database unreachable".
    shutdown_failed starts, then answers lifespan.shutdown.failed, message "flush failed".
    no_lifespan     raises on a lifespan scope (does not support lifespan); serves "ok".
"""
import asyncio
import json
import os
from urllib.parse import parse_qs

NOT_CALLABLE = 42


def log(event):
    path = os.environ.get("SKIRR_TEST_LOG")
    if path:
        with open(path, "a") as f:
            f.write(event + "\n")


async def respond(send, body, status=200, content_type=b"text/plain"):
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())],
    })
    await send({"type": "http.response.body", "body": body})


async def read_body(receive):
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return body


async def lifespan(scope, receive, send):
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            scope["state"]["greeting"] = "hi"
            log("startup")
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            log("shutdown")
            await send({"type": "lifespan.shutdown.complete"})
            return


async def http(scope, receive, send):
    await read_body(receive)
    path = scope["path"]
    if path.endswith("/scope"):
        fields = ("type", "http_version", "scheme", "method", "path", "raw_path", "root_path",
                  "server", "client", "state")
        shown = {k: scope.get(k) for k in fields}
        shown["raw_path"] = shown["raw_path"].decode("latin-1") if shown["raw_path"] else None
        log("request " + json.dumps(shown.get("state"), sort_keys=True))
        await respond(send, json.dumps(shown).encode(), content_type=b"application/json")
    elif path.endswith("/slow"):
        seconds = float(parse_qs(scope["query_string"].decode()).get("s", ["1"])[0])
        log("slow-start")
        await asyncio.sleep(seconds)
        log("slow-end")
        await respond(send, b"done")
    elif path.endswith("/mutate-state"):
        scope["state"]["mutated"] = True
        await respond(send, b"mutated")
    else:
        await respond(send, b"ok")


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send)
    else:
        await http(scope, receive, send)


def create_app():
    log("factory")
    return app


async def startup_failed(scope, receive, send):
    if scope["type"] == "lifespan":
        await receive()
        log("startup")
        await send({"type": "lifespan.startup.failed", "message": "database unreachable"})
        return
    await http(scope, receive, send)


async def shutdown_failed(scope, receive, send):
    if scope["type"] == "lifespan":
        await receive()
        await send({"type": "lifespan.startup.complete"})
        await receive()
        log("shutdown")
        await send({"type": "lifespan.shutdown.failed", "message": "flush failed"})
        return
    await http(scope, receive, send)


async def no_lifespan(scope, receive, send):
    if scope["type"] != "http":
        raise RuntimeError(f"unsupported scope type {scope['type']!r}")
    await http(scope, receive, send)
