"""A tiny raw ASGI 3 application, for benchmarks: reads the whole request body, answers
``Hello, world!`` (text/plain, with content-length). Run: python -m skirr raw:app --app-dir examples
--lifespan off
"""

BODY = b"Hello, world!"
START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(BODY)).encode())],
}
END = {"type": "http.response.body", "body": BODY}


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send(START)
    await send(END)
