"""fastapi_json: a FastAPI route returning a small pydantic model (bench/run.py).

GET /json answers {"id":1,"name":"widget","price":9.99,"tags":["a","b"]} (application/json).
GET /cpu (fastapi_cpu) is a `def` endpoint (FastAPI runs it in its thread pool) doing about 1 ms of
pure-Python arithmetic (cpu_work.py), answering {"n":20000,"sum":...}: the row where a free-threaded
Python's thread workers can use more than one core in one process.
"""
from fastapi import FastAPI
from pydantic import BaseModel

from cpu_work import CPU_N, cpu_work

app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)


class Item(BaseModel):
    id: int
    name: str
    price: float
    tags: list[str]


@app.get("/json", response_model=Item)
async def item() -> Item:
    return Item(id=1, name="widget", price=9.99, tags=["a", "b"])


@app.get("/cpu")
def cpu() -> dict[str, int]:
    return {"n": CPU_N, "sum": cpu_work()}
