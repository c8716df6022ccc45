"""What issue 32 plans for TLS and skirr does not do yet (spec/tls_wire.toml, status "planned"):
each case asserts the planned behaviour and is an expected failure (strict) until it is built,
so CONFORMANCE.md shows it as planned and a case that starts passing flips the rule.
"""
from __future__ import annotations

import pytest

import _proc
from tls_util import TLSFiles


@pytest.mark.rule("skirr-tls-ktls-sendfile")
@pytest.mark.xfail(strict=True, reason="planned (issue 32): the TLS layer runs libssl over memory "
                   "BIOs, which cannot hand records to kernel TLS; files are read and encrypted")
@pytest.mark.parametrize("loop", _proc.LOOPS)
def test_files_go_through_kernel_tls(tmp_path, loop):
    """A TLS server sends files through kernel TLS (SSL_sendfile): its startup line says so."""
    files = TLSFiles(tmp_path / "certs")
    port = _proc.free_port()
    args = ["basic:app", "--loop", loop, "--port", str(port),
            *files.server_args()]
    with _proc.Skirr(args, tmp_path) as proc:
        proc.wait_accepting(port)
        stderr = proc.wait_stderr("skirr running on")
        assert proc.stop() == 0
    assert "files: sendfile (kernel TLS)" in stderr
