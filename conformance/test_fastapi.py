"""A real FastAPI application (examples/app.py, the one `make run` serves) through skirr (issue 2
§8): JSON GET, POST with a pydantic body (200 echo, 422 when invalid), a StreamingResponse
(chunked), 404. One server per loop serves every case of this module; it must then stop with 0.
"""
import json
import signal

import pytest

try:
    from . import _proc
except ImportError:
    import _proc


@pytest.fixture(scope="module", params=_proc.LOOPS)
def port(request, tmp_path_factory):
    port = _proc.free_port()
    tmp = tmp_path_factory.mktemp(f"fastapi-{request.param}")
    args = ["app:app", "--app-dir", str(_proc.EXAMPLES_DIR), "--loop", request.param,
            "--port", str(port)]
    with _proc.Skirr(args, tmp) as proc:
        proc.wait_accepting(port)
        yield port
        assert proc.stop(signal.SIGINT) == 0, proc.stderr
        assert "Traceback" not in proc.stderr


@pytest.mark.rule("skirr-fastapi-app")
def test_json_get(port):
    response = _proc.request(port, "GET", "/")
    assert response.status == 200
    assert response.header(b"content-type") == b"application/json"
    assert response.header(b"content-length") == b"17"
    assert response.body == b'{"hello":"world"}'


@pytest.mark.rule("skirr-fastapi-app")
def test_post_pydantic_body_is_echoed(port):
    body = json.dumps({"name": "pen", "price": 1.5, "tags": ["blue"]}).encode()
    response = _proc.request(
        port, "POST", "/items", [("content-type", "application/json")], body
    )
    assert response.status == 200
    assert response.body == b'{"name":"pen","price":1.5,"tags":["blue"]}'


@pytest.mark.rule("skirr-fastapi-app")
def test_post_invalid_body_is_422(port):
    body = json.dumps({"name": "pen", "price": "free"}).encode()
    response = _proc.request(
        port, "POST", "/items", [("content-type", "application/json")], body
    )
    assert response.status == 422
    detail = json.loads(response.body)["detail"]
    assert [error["loc"] for error in detail] == [["body", "price"]]


@pytest.mark.rule("skirr-fastapi-app", "RFC9112-7.1-response-chunked")
def test_streaming_response_is_chunked(port):
    response = _proc.request(port, "GET", "/stream?count=3&delay=0.01")
    assert response.status == 200
    assert response.chunked
    assert response.header(b"content-length") is None
    assert response.body == b"chunk 0\nchunk 1\nchunk 2\n"


@pytest.mark.rule("skirr-fastapi-app")
def test_unknown_route_is_404(port):
    response = _proc.request(port, "GET", "/missing")
    assert response.status == 404
    assert response.body == b'{"detail":"Not Found"}'
