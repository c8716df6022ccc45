"""The application of the worker tests (conformance/test_workers.py), served with --workers N.

Every answer names the worker process that gave it, so a test sees how connections spread and
which worker (old or new code) served.

    GET /            -> "PID VERSION": VERSION is the text of $SKIRR_TEST_VERSION_FILE read when
                        this module is imported ("v1" without it), i.e. the code a worker runs
    GET /slow?s=S    -> logs "slow-start PID", sleeps S seconds, answers "done PID"
    GET /block?s=S   -> blocks the worker's event loop for S seconds (time.sleep), then "PID"
    lifespan         -> startup fails ("refused by $SKIRR_TEST_FAIL_FILE") while the file named by
                        $SKIRR_TEST_FAIL_FILE exists; logs "startup PID" / "shutdown PID"; with
                        $SKIRR_TEST_STARTUP_SLEEP, logs "startup-begin PID" and sleeps that long
                        first
    import           -> with $SKIRR_TEST_IMPORT_SLEEP, logs "import PID" and sleeps that long
"""
import asyncio
import os
import time
from urllib.parse import parse_qs

from basic import log, read_body, respond

_VERSION_FILE = os.environ.get("SKIRR_TEST_VERSION_FILE")
VERSION = open(_VERSION_FILE).read().strip() if _VERSION_FILE else "v1"
PID = os.getpid()
if os.environ.get("SKIRR_TEST_IMPORT_SLEEP"):
    log(f"import {PID}")
    time.sleep(float(os.environ["SKIRR_TEST_IMPORT_SLEEP"]))


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if os.environ.get("SKIRR_TEST_STARTUP_SLEEP"):
                    log(f"startup-begin {PID}")
                    await asyncio.sleep(float(os.environ["SKIRR_TEST_STARTUP_SLEEP"]))
                fail = os.environ.get("SKIRR_TEST_FAIL_FILE")
                if fail and os.path.exists(fail):
                    await send({"type": "lifespan.startup.failed",
                                "message": f"refused by {fail}"})
                    return
                log(f"startup {PID}")
                await send({"type": "lifespan.startup.complete"})
            else:
                log(f"shutdown {PID}")
                await send({"type": "lifespan.shutdown.complete"})
                return
    await read_body(receive)
    query = parse_qs(scope["query_string"].decode())
    seconds = float(query.get("s", ["1"])[0])
    if scope["path"] == "/slow":
        log(f"slow-start {PID}")
        await asyncio.sleep(seconds)
        await respond(send, f"done {PID}".encode())
    elif scope["path"] == "/block":
        log(f"block {PID}")
        time.sleep(seconds)
        await respond(send, f"{PID}".encode())
    else:
        await respond(send, f"{PID} {VERSION}".encode())
