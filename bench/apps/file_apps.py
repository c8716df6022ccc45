"""The file_1m workload (issue 17): Starlette's FileResponse of a 1 MiB file, as a static-file route
is served in practice. On a server offering ``http.response.pathsend`` (skirr, granian) Starlette
hands the path to the server; elsewhere it reads the file in 64 KiB chunks and sends body events.

The file (1,048,576 bytes 0..255 repeated) is written once into the temporary directory the first
time this module is imported, so every server serves the same bytes from the page cache.
"""
import os
import tempfile

from starlette.responses import FileResponse

FILE_1M = bytes(range(256)) * 4096  # 1,048,576 bytes
PATH = os.path.join(tempfile.gettempdir(), "skirr-bench-file_1m.bin")


def _ensure_file():
    try:
        with open(PATH, "rb") as f:
            if f.read() == FILE_1M:
                return
    except OSError:
        pass
    tmp = PATH + f".{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(FILE_1M)
    os.replace(tmp, PATH)  # atomic: a concurrent reader sees the old file or the whole new one


_ensure_file()


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await FileResponse(PATH, media_type="application/octet-stream")(scope, receive, send)


# Two diagnostic variants for bench/file_1m_regimes.sh (not in the matrix): the same response with
# less of Starlette's work per request, to split the app's part from the server's.
_STAT = os.stat(PATH)
_HEADERS = FileResponse(PATH, media_type="application/octet-stream", stat_result=_STAT).raw_headers


async def stat_inline(scope, receive, send):
    """FileResponse given its stat result (os.stat called inline): no anyio worker-thread hop."""
    if scope["type"] != "http":
        return
    await FileResponse(PATH, media_type="application/octet-stream",
                       stat_result=os.stat(PATH))(scope, receive, send)


async def pathsend_only(scope, receive, send):
    """No framework: FileResponse's status and headers (computed once) and one pathsend message;
    the server's part and the kernel's alone (needs a server offering http.response.pathsend)."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
    await send({"type": "http.response.pathsend", "path": PATH})
