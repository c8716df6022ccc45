"""A FastAPI app with a slow route, for the forced-exit case (a second signal while a request is
in flight during the graceful shutdown). Logs "slow" (basic.log) when /slow is entered."""
import asyncio

from basic import log
from fastapi import FastAPI

app = FastAPI()


@app.get("/slow")
async def slow():
    log("slow")
    await asyncio.sleep(30)
    return {"done": True}


@app.get("/")
async def root():
    return {"ok": True}
