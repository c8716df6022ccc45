"""The application of the thread-worker tests (conformance/test_workers.py, --worker-kind
thread): every answer names the process and the thread (its event loop) that gave it.

    GET /            -> "PID TID VERSION": TID is threading.get_ident() of the serving loop's
                        thread; VERSION the text of $SKIRR_TEST_VERSION_FILE read at import ("v1")
    GET /gil         -> "1" while the GIL is enabled, else "0"
    GET /slow?s=S    -> logs "slow-start PID TID", sleeps S seconds, answers "done PID TID"
    GET /block?s=S   -> logs "block PID TID", blocks its loop S seconds (time.sleep), "PID TID"
    GET /spin?s=S    -> burns CPU for S seconds in a sync loop, answers "PID TID"
    lifespan         -> logs "startup PID TID" / "shutdown PID TID"; the Nth startup in a
                        process (N = $SKIRR_TEST_FAIL_STARTUP, counted from 1) fails with
                        "refused startup N"

When the file $SKIRR_TEST_IMPORT_DELAY_FILE exists at import, the import sleeps the seconds it
holds (a replacement process that a test wants slow to serve). $SKIRR_TEST_SLOW_STARTUP (seconds)
delays every lifespan startup in a process but its first (its first loop serves meanwhile).
"""
import asyncio
import os
import sys
import threading
import time
from urllib.parse import parse_qs

from basic import log, read_body, respond

_VERSION_FILE = os.environ.get("SKIRR_TEST_VERSION_FILE")
VERSION = open(_VERSION_FILE).read().strip() if _VERSION_FILE else "v1"
PID = os.getpid()
_DELAY_FILE = os.environ.get("SKIRR_TEST_IMPORT_DELAY_FILE")
if _DELAY_FILE and os.path.exists(_DELAY_FILE):
    time.sleep(float(open(_DELAY_FILE).read()))
log(f"import {PID}")
_FAIL_AT = int(os.environ.get("SKIRR_TEST_FAIL_STARTUP", "0"))
_SLOW_STARTUP = float(os.environ.get("SKIRR_TEST_SLOW_STARTUP", "0"))
_startups = 0
_lock = threading.Lock()


def _me():
    return f"{PID} {threading.get_ident()}"


async def app(scope, receive, send):
    global _startups
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                with _lock:
                    _startups += 1
                    nth = _startups
                if nth > 1 and _SLOW_STARTUP:
                    await asyncio.sleep(_SLOW_STARTUP)
                if nth == _FAIL_AT:
                    await asyncio.sleep(0.2)  # the other loops are starting meanwhile
                    await send({"type": "lifespan.startup.failed",
                                "message": f"refused startup {nth}"})
                    return
                log(f"startup {_me()}")
                await send({"type": "lifespan.startup.complete"})
            else:
                log(f"shutdown {_me()}")
                await send({"type": "lifespan.shutdown.complete"})
                return
    await read_body(receive)
    query = parse_qs(scope["query_string"].decode())
    seconds = float(query.get("s", ["1"])[0])
    if scope["path"] == "/gil":
        is_enabled = getattr(sys, "_is_gil_enabled", lambda: True)
        await respond(send, b"1" if is_enabled() else b"0")
    elif scope["path"] == "/slow":
        log(f"slow-start {_me()}")
        await asyncio.sleep(seconds)
        await respond(send, f"done {_me()}".encode())
    elif scope["path"] == "/block":
        log(f"block {_me()}")
        time.sleep(seconds)
        await respond(send, _me().encode())
    elif scope["path"] == "/spin":
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass
        await respond(send, _me().encode())
    else:
        await respond(send, f"{_me()} {VERSION}".encode())
