"""Operating skirr from the command line (issue 13): the access log on stdout and trace lines on
stderr through skirr's own handlers (as uvicorn's default configuration, issue 36), --log-config, colours, the environment, --metrics-port."""
from __future__ import annotations

import json

import h11
import pytest

import _proc

pytestmark = _proc.each_loop


def get(port: int, target: str = "/", raw: bytes | None = None) -> tuple[int, str]:
    """One request from a socket whose address we know: (status, "127.0.0.1:PORT")."""
    with _proc.connect(port) as sock:
        here = "%s:%d" % sock.getsockname()[:2]
        if raw is not None:
            sock.sendall(raw)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
            return int(data.split(b" ", 2)[1]), here
        conn = h11.Connection(h11.CLIENT)
        _proc.send_request(sock, conn, "GET", target)
        return _proc.read_response(sock, conn).status, here


def access_lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if '"' in x and (" - " in x or x.startswith("{"))]


@pytest.mark.rule("skirr-access-default-line", "skirr-access-refusals")
def test_default_line_on_stdout(tmp_path, loop):
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port)], tmp_path) as proc:
        proc.wait_accepting(port)
        status, me = get(port, "/items?id=3")
        assert status == 200
        status, me2 = get(port, raw=b"GET / HTTP/1.1\r\nHost: x\r\n" +
                          b"".join(b"X-%d: v\r\n" % i for i in range(101)) + b"\r\n")
        assert status == 431
        assert proc.stop() == 0
        lines = access_lines(proc.stdout)
        assert access_lines(proc.stderr) == []
    assert lines == [
        f'INFO:     {me} - "GET /items?id=3 HTTP/1.1" 200 OK',
        f'INFO:     {me2} - "-" 431 Request Header Fields Too Large (refused: too many header '
        f'fields)',
    ]


@pytest.mark.rule("skirr-access-format")
def test_json_lines_on_stdout_are_bare(tmp_path, loop):
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port),
                      "--access-log-format", "json"], tmp_path) as proc:
        proc.wait_accepting(port)
        status, me = get(port, "/j?x=1")
        assert status == 200
        assert proc.stop() == 0
        lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == 1 and proc.stdout == lines[0] + "\n"
    rec = json.loads(lines[0])
    assert (rec["client"], rec["method"], rec["path"], rec["query"], rec["status"]) == (
        me, "GET", "/j", "x=1", 200)


@pytest.mark.rule("skirr-access-off")
def test_no_access_log_flag(tmp_path, loop):
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port), "--no-access-log"],
                     tmp_path) as proc:
        proc.wait_accepting(port)
        assert get(port)[0] == 200
        assert proc.stop() == 0
        assert proc.stdout == "" and access_lines(proc.stderr) == []


@pytest.mark.rule("skirr-log-trace")
def test_trace_connection_events(tmp_path, loop):
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port), "--log-level", "trace",
                      "--timeout-keep-alive", "1"], tmp_path) as proc:
        proc.wait_accepting(port)
        status, me = get(port)  # closed by us after the response
        assert status == 200
        status, bad = get(port, raw=b"GET / HTTP/2.0\r\nHost: x\r\n\r\n")
        assert status == 505
        with _proc.connect(port) as idle:  # left idle: closed by the keep-alive timeout
            idle_addr = "%s:%d" % idle.getsockname()[:2]
            idle.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            idle.settimeout(5)
            data = b""
            while chunk := idle.recv(65536):
                data += chunk
        assert proc.stop() == 0
        err = proc.stderr
    for line in (f"TRACE:    {me} - HTTP connection made",
                 f"TRACE:    {me} - HTTP connection lost (closed by the client)",
                 f"TRACE:    {bad} - HTTP request refused: 505 (HTTP version not supported)",
                 f"TRACE:    {idle_addr} - HTTP connection made",
                 f"TRACE:    {idle_addr} - HTTP connection idle: --timeout-keep-alive",
                 f"TRACE:    {idle_addr} - HTTP connection closed by the server"):
        assert line in err.splitlines(), (line, err)


@pytest.mark.rule("skirr-log-trace", "skirr-access-refusals")
@pytest.mark.parametrize("access_log", [True, False], ids=["access-log", "no-access-log"])
def test_trace_refusal_names_the_client_the_proxy_gave(tmp_path, loop, access_log):
    """A refusal's trace event names the client its access line does: the one a trusted proxy
    gave, before an exchange (413 from the declared length) and after it (408 for content not
    complete in time: its scope's client, kept for the event without the access log too)."""
    port = _proc.free_port()
    args = ["basic:app", "--loop", loop, "--port", str(port), "--log-level", "trace",
            "--limit-request-body", "10", "--timeout-request-body", "1"]
    with _proc.Skirr(args + ([] if access_log else ["--no-access-log"]), tmp_path) as proc:
        proc.wait_accepting(port)
        assert get(port, raw=b"POST /up HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 203.0.113.7\r\n"
                   b"Content-Length: 100\r\n\r\n")[0] == 413
        assert get(port, raw=b"POST /slow HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 203.0.113.8\r\n"
                   b"Content-Length: 5\r\n\r\nab")[0] == 408
        assert proc.stop() == 0
        err = proc.stderr.splitlines()
    for line in ("TRACE:    203.0.113.7:0 - HTTP request refused: 413 (content too large)",
                 "TRACE:    203.0.113.8:0 - HTTP request refused: 408 (request content not "
                 "complete in time)"):
        assert line in err, (line, err)
    assert access_lines(proc.stdout + proc.stderr) == ([
        'INFO:     203.0.113.7:0 - "POST /up HTTP/1.1" 413 Content Too Large (refused: content '
        'too large)',
        'INFO:     203.0.113.8:0 - "POST /slow HTTP/1.1" 408 Request Timeout (refused: request '
        'content not complete in time)'] if access_log else [])


@pytest.mark.rule("skirr-log-trace")
def test_no_trace_below_trace(tmp_path, loop):
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port), "--log-level", "debug"],
                     tmp_path) as proc:
        proc.wait_accepting(port)
        assert get(port)[0] == 200
        assert proc.stop() == 0
        assert "TRACE" not in proc.stderr


LOG_JSON = {
    "version": 1, "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(name)s|%(levelname)s|%(message)s"}},
    "handlers": {"f": {"class": "logging.FileHandler", "filename": "{out}",
                       "formatter": "plain"}},
    "loggers": {"skirr.access": {"handlers": ["f"], "level": "INFO", "propagate": False}},
}
LOG_INI = """[loggers]
keys=root,access

[handlers]
keys=f

[formatters]
keys=plain

[logger_root]
level=WARNING
handlers=

[logger_access]
level=INFO
handlers=f
qualname=skirr.access
propagate=0

[handler_f]
class=FileHandler
args=(%(out)r,)
formatter=plain

[formatter_plain]
format=%(name)s|%(levelname)s|%(message)s
"""


@pytest.mark.rule("skirr-log-config")
@pytest.mark.parametrize("kind", ["json", "yaml", "ini"])
def test_log_config(tmp_path, loop, kind):
    import yaml

    out = tmp_path / "access.log"
    cfg = tmp_path / f"log.{kind}"
    as_dict = json.loads(json.dumps(LOG_JSON).replace("{out}", str(out)))
    if kind == "json":
        cfg.write_text(json.dumps(as_dict))
    elif kind == "yaml":
        cfg.write_text(yaml.safe_dump(as_dict))
    else:
        cfg.write_text(LOG_INI.replace("%(out)r", repr(str(out))))
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port), "--log-config",
                      str(cfg)], tmp_path) as proc:
        proc.wait_accepting(port)
        status, me = get(port, "/cfg")
        assert status == 200
        assert proc.stop() == 0
        # the access logger no longer propagates, and has no handler of skirr's
        assert access_lines(proc.stderr) == [] and proc.stdout == ""
        assert "skirr running on" in proc.stderr  # skirr.error still has skirr's own handler
    assert out.read_text() == f'skirr.access|INFO|{me} - "GET /cfg HTTP/1.1" 200 OK\n'


@pytest.mark.rule("skirr-log-config")
@pytest.mark.parametrize("content,name,message", [
    ("{not json", "bad.json", "--log-config"),
    ("version: 99\n", "bad.yaml", "--log-config"),
    ("[loggers]\nkeys=nope\n", "bad.ini", "--log-config"),
])
def test_bad_log_config(tmp_path, loop, content, name, message):
    cfg = tmp_path / name
    cfg.write_text(content)
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port), "--log-config",
                      str(cfg)], tmp_path) as proc:
        assert proc.proc.wait(_proc.STOP_TIMEOUT) == 2  # a usage error (issue 36)
        err = proc.stderr
    assert err.startswith(f"skirr: error: --log-config {cfg}: ") and err.count("\n") == 1


@pytest.mark.rule("skirr-log-config")
def test_missing_log_config_is_usage_error(tmp_path, loop):
    with _proc.Skirr(["basic:app", "--loop", loop, "--log-config", str(tmp_path / "no.json")],
                     tmp_path) as proc:
        assert proc.proc.wait(_proc.STOP_TIMEOUT) == 2
        assert proc.stderr == f"skirr: error: --log-config {tmp_path / 'no.json'}: No such file\n"


@pytest.mark.rule("skirr-log-config")
@pytest.mark.parametrize("flag,colored", [("--use-colors", True), ("--no-use-colors", False)])
def test_use_colors(tmp_path, loop, flag, colored):
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port), flag], tmp_path) as proc:
        proc.wait_accepting(port)
        status, me = get(port)
        assert proc.stop() == 0
        err, out = proc.stderr, proc.stdout
    if colored:  # uvicorn's colours: the level name, the request line bold, the status by class
        assert "\x1b[32mINFO\x1b[0m:     skirr running on" in err
        assert out == (f'\x1b[32mINFO\x1b[0m:     {me} - "\x1b[1mGET / HTTP/1.1\x1b[0m" '
                       '\x1b[32m200 OK\x1b[0m\n')
    else:
        assert "\x1b[" not in err + out and out == f'INFO:     {me} - "GET / HTTP/1.1" 200 OK\n'


@pytest.mark.rule("skirr-env-options")
def test_env_file(tmp_path, loop):
    env = tmp_path / ".env"
    env.write_text("SKIRR_ACCESS_LOG=false\nSKIRR_HEADER=x-from-env: 1\nMY_APP_SETTING=7\n")
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port), "--env-file", str(env)],
                     tmp_path) as proc:
        proc.wait_accepting(port)
        r = _proc.request(port)
        assert r.status == 200 and r.header(b"x-from-env") == b"1"
        assert proc.stop() == 0
        assert proc.stdout == "" and access_lines(proc.stderr) == []


@pytest.mark.rule("skirr-env-options")
def test_env_options_and_command_line_wins(tmp_path, loop, monkeypatch):
    port = _proc.free_port()
    monkeypatch.setenv("SKIRR_PORT", str(port))
    monkeypatch.setenv("SKIRR_SERVER_HEADER", "no")
    monkeypatch.setenv("SKIRR_ACCESS_LOG", "off")
    with _proc.Skirr(["basic:app", "--loop", loop, "--access-log"], tmp_path) as proc:
        proc.wait_accepting(port)
        r = _proc.request(port)
        assert r.status == 200 and r.header(b"server") is None
        assert proc.stop() == 0
        assert len(access_lines(proc.stdout)) == 1  # --access-log beat SKIRR_ACCESS_LOG=off


@pytest.mark.rule("skirr-env-options")
@pytest.mark.parametrize("var,value,message", [
    ("SKIRR_PORT", "abc", "skirr: error: SKIRR_PORT: invalid port: 'abc'\n"),
    ("SKIRR_LOOP", "tokio", "skirr: error: SKIRR_LOOP: invalid choice 'tokio' (choose from "
                            "auto, asyncio, uvloop)\n"),
    ("SKIRR_PROXY_HEADERS", "maybe", "skirr: error: SKIRR_PROXY_HEADERS: expected one of "
                                     "1/true/yes/on/0/false/no/off, got 'maybe'\n"),
    pytest.param("SKIRR_PROXY_HEADERS_MODE", "both",
                 "skirr: error: SKIRR_PROXY_HEADERS_MODE: invalid choice 'both' (choose from "
                 "x-forwarded, forwarded)\n", marks=pytest.mark.rule("RFC7239-8.1-one-family")),
])
def test_bad_env_value_is_usage_error(tmp_path, loop, monkeypatch, var, value, message):
    monkeypatch.setenv(var, value)
    with _proc.Skirr(["basic:app", "--loop", loop], tmp_path) as proc:
        assert proc.proc.wait(_proc.STOP_TIMEOUT) == 2
        assert proc.stderr == message


@pytest.mark.rule("skirr-env-options")
@pytest.mark.parametrize("env,message", [
    # checked by Config after argparse: each kind (a field's syntax, a file, a format, a list)
    ({"SKIRR_HEADER": "bad name:v"},
     "SKIRR_HEADER: header 'bad name:v': invalid field name 'bad name'"),
    ({"SKIRR_ENV_FILE": "/nope"}, "SKIRR_ENV_FILE: --env-file /nope: No such file"),
    ({"SKIRR_LOG_CONFIG": "/nope.json"},
     "SKIRR_LOG_CONFIG: --log-config /nope.json: No such file"),
    ({"SKIRR_ACCESS_LOG_FORMAT": "%(zz)s"},
     "SKIRR_ACCESS_LOG_FORMAT: invalid access log format '%(zz)s': 'zz'"),
    ({"SKIRR_FORWARDED_ALLOW_IPS": "10.0.0.1,foo"},
     "SKIRR_FORWARDED_ALLOW_IPS: forwarded_allow_ips: 'foo' is not an IP address, a network, "
     "'*' or 'unix:'"),
    ({"SKIRR_ROOT_PATH": "api"},
     "SKIRR_ROOT_PATH: root_path must be empty or start with '/'; got 'api'"),
    ({"SKIRR_APP": "noattr"},
     'SKIRR_APP: import string "noattr" must be in format "<module>:<attribute>"'),
    # combinations checked after argparse
    ({"SKIRR_RELOAD_DIR": "."}, "SKIRR_RELOAD_DIR needs --reload"),
    ({"SKIRR_UDS": "/tmp/x.sock", "SKIRR_PORT": "9000"},
     "SKIRR_UDS cannot be used together with --host or SKIRR_PORT"),
])
def test_late_checked_env_value_names_the_variable(tmp_path, loop, env, message):
    args = ["--loop", loop] if "SKIRR_APP" in env else ["basic:app", "--loop", loop]
    with _proc.Skirr(args, tmp_path, env=env) as proc:
        assert proc.proc.wait(_proc.STOP_TIMEOUT) == 2
        assert proc.stderr == f"skirr: error: {message}\n"


@pytest.mark.rule("skirr-env-options")
def test_command_line_value_is_checked_not_the_overridden_variable(tmp_path, loop):
    """A bad SKIRR_HEADER replaced by --header is not reported; a bad --header is, by its flag."""
    port = _proc.free_port()
    env = {"SKIRR_HEADER": "bad name:v"}
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port), "--header", "x-a:1"],
                     tmp_path, env=env) as proc:
        proc.wait_accepting(port)
        assert _proc.request(port).header(b"x-a") == b"1"
        assert proc.stop() == 0
    with _proc.Skirr(["basic:app", "--loop", loop, "--header", "bad name:v"], tmp_path) as proc:
        assert proc.proc.wait(_proc.STOP_TIMEOUT) == 2
        assert proc.stderr == "skirr: error: header 'bad name:v': invalid field name 'bad name'\n"


@pytest.mark.rule("skirr-metrics")
def test_metrics_port_flag(tmp_path, loop):
    mport = _proc.free_port()
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port), "--metrics-port",
                      str(mport)], tmp_path) as proc:
        proc.wait_accepting(port)
        assert get(port)[0] == 200
        with _proc.connect(mport) as sock:
            sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        assert proc.stop() == 0
    assert b'skirr_requests_total{method="GET",status="2xx"} 1.0' in data


@pytest.mark.rule("skirr-proxy-trusted", "skirr-proxy-untrusted")
@pytest.mark.parametrize("allow,client", [("unix:", ["203.0.113.7", 0]), ("127.0.0.1", None)])
def test_unix_socket_peer(tmp_path, loop, allow, client):
    path = str(tmp_path / "s.sock")
    with _proc.Skirr(["basic:app", "--loop", loop, "--uds", path, "--forwarded-allow-ips", allow],
                     tmp_path) as proc:
        proc.wait_accepting(path)
        r = _proc.request(path, target="/scope", headers=[("X-Forwarded-For", "203.0.113.7"),
                                                          ("X-Forwarded-Proto", "https")])
        assert r.status == 200
        assert proc.stop() == 0
    assert json.loads(r.body)["client"] == client


@pytest.mark.rule("RFC7239-8.1-one-family")
@pytest.mark.parametrize("args,env,client,scheme", [
    ([], {}, ["203.0.113.7", 0], "http"),
    (["--proxy-headers-mode", "x-forwarded"], {}, ["203.0.113.7", 0], "http"),
    (["--proxy-headers-mode", "forwarded"], {}, ["198.51.100.9", 0], "https"),
    ([], {"SKIRR_PROXY_HEADERS_MODE": "forwarded"}, ["198.51.100.9", 0], "https"),
    (["--proxy-headers-mode", "x-forwarded"], {"SKIRR_PROXY_HEADERS_MODE": "forwarded"},
     ["203.0.113.7", 0], "http"),
])
def test_proxy_headers_mode_flag(tmp_path, loop, args, env, client, scheme):
    """--proxy-headers-mode (or SKIRR_PROXY_HEADERS_MODE) picks the one family read."""
    port = _proc.free_port()
    with _proc.Skirr(["basic:app", "--loop", loop, "--port", str(port), *args], tmp_path,
                     env=env) as proc:
        proc.wait_accepting(port)
        r = _proc.request(port, target="/scope", headers=[
            ("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "http"),
            ("Forwarded", "for=198.51.100.9;proto=https")])
        assert r.status == 200
        assert proc.stop() == 0
    scope = json.loads(r.body)
    assert (scope["client"], scope["scheme"]) == (client, scheme)
