"""fastapi_json: a FastAPI route returning a small pydantic model (bench/run.py).

GET /json answers {"id":1,"name":"widget","price":9.99,"tags":["a","b"]} (application/json).
"""
from fastapi import FastAPI
from pydantic import BaseModel

app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)


class Item(BaseModel):
    id: int
    name: str
    price: float
    tags: list[str]


@app.get("/json", response_model=Item)
async def item() -> Item:
    return Item(id=1, name="widget", price=9.99, tags=["a", "b"])
