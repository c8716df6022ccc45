"""The example FastAPI application that `make run` serves on 127.0.0.1:8000.

    curl http://127.0.0.1:8000/
    curl -H 'content-type: application/json' -d '{"name": "pen", "price": 1.5}' \
        http://127.0.0.1:8000/items
    curl -N http://127.0.0.1:8000/stream?count=5
    python -m websockets ws://127.0.0.1:8000/ws      # echoes each message

Over TLS (HTTPS and WSS): add --ssl-keyfile key.pem --ssl-certfile cert.pem.
"""
import asyncio
from collections.abc import AsyncIterator

from fastapi import FastAPI, WebSocket
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

app = FastAPI(title="skirr example")


class Item(BaseModel):
    name: str
    price: float
    tags: list[str] = []


@app.get("/")
async def hello() -> dict[str, str]:
    return {"hello": "world"}


@app.post("/items")
async def create_item(item: Item) -> Item:
    return item


@app.get("/stream")
async def stream(count: int = 3, delay: float = 0.0) -> StreamingResponse:
    async def chunks() -> AsyncIterator[bytes]:
        for i in range(count):
            if delay:
                await asyncio.sleep(delay)
            yield f"chunk {i}\n".encode()

    return StreamingResponse(chunks(), media_type="text/plain")


@app.websocket("/ws")
async def echo(ws: WebSocket) -> None:
    await ws.accept()
    async for text in ws.iter_text():
        await ws.send_text(text)
