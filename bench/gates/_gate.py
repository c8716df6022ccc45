"""Shared pieces of the gates: a server subprocess and what /proc says about it.

``ServerProcess(cmd, port)`` starts a server (stdout/stderr to a log file, so no pipe fills up),
waits until one request to ``/`` is answered, and stops it with SIGINT (then SIGKILL). ``rss()``,
``hwm()`` (peak RSS) and ``fds()`` read /proc/<pid>; ``Sampler`` polls VmRSS in a thread.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PY = sys.executable
MIB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port: int, path: str = "/", timeout: float = 5.0) -> bytes:
    """One GET with Connection: close; the whole raw response."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return data
            data += chunk


def skirr_cmd(port: int, loop: str, *extra: str) -> list[str]:
    return [PY, "-m", "skirr", "gate_app:app", "--app-dir", str(HERE), "--port", str(port),
            "--loop", loop, "--lifespan", "off", "--log-level", "warning", *extra]


def uvicorn_cmd(port: int, loop: str) -> list[str]:
    return [PY, "-m", "uvicorn", "gate_app:app", "--app-dir", str(HERE), "--port", str(port),
            "--loop", loop, "--http", "httptools", "--lifespan", "off", "--log-level", "warning"]


def ensure_uvicorn() -> bool:
    """uvicorn[standard] importable in this interpreter, installing it with pip if missing."""
    probe = [PY, "-c", "import uvicorn, httptools, uvloop"]
    if subprocess.run(probe, capture_output=True).returncode == 0:
        return True
    print("installing uvicorn[standard] into", sys.prefix, flush=True)
    subprocess.run([PY, "-m", "pip", "install", "-q", "uvicorn[standard]"], check=False)
    return subprocess.run(probe, capture_output=True).returncode == 0


def _status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{key} not in /proc/{pid}/status")


class ServerProcess:
    def __init__(self, cmd: list[str], port: int, name: str) -> None:
        self.cmd, self.port, self.name = cmd, port, name
        self.log = tempfile.NamedTemporaryFile(prefix=f"gate-{name.replace('/', '-')}-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {self.proc.returncode}: {self.log_text()}")
            try:
                if get(port).startswith(b"HTTP/1.1 200"):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{name} did not answer within 20 s: {self.log_text()}")
            time.sleep(0.1)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss(self) -> int:
        """Resident set size now, bytes."""
        return _status_kib(self.pid, "VmRSS") * 1024

    def hwm(self) -> int:
        """Peak resident set size since start (VmHWM), bytes."""
        return _status_kib(self.pid, "VmHWM") * 1024

    def fds(self) -> int:
        """Open descriptors."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def log_text(self) -> str:
        return Path(self.log.name).read_text(errors="replace")[-3000:]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


class Sampler:
    """Polls a server's VmRSS every `interval` seconds in a thread; ``peak`` is the largest."""

    def __init__(self, server: ServerProcess, interval: float = 0.005) -> None:
        self.server, self.interval = server, interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.server.rss())
            except (OSError, RuntimeError):
                return
            time.sleep(self.interval)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def mib(n: float) -> str:
    return f"{n / MIB:.1f} MiB"
