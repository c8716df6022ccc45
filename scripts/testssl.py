#!/usr/bin/env python3
"""`make testssl` (issue 32): Debian's testssl.sh against a local skirr serving TLS on a loopback
port with a test certificate; fails on any finding rated above LOW.

    scripts/testssl.py [--python .venv/bin/python] [--scope full|ci] [--json PATH]
                       [--skirr-arg=ARG ...]

The certificate: a test CA (ECDSA P-256, basicConstraints CA:TRUE, made here with the openssl CLI)
and a leaf it signs (ECDSA P-256, 365 days, SAN IP:127.0.0.1 and DNS:localhost, EKU serverAuth),
skirr serving the leaf with `--ssl-keyfile/--ssl-certfile` and its defaults otherwise (the
`examples/raw.py` app). testssl is given the CA with `--add-ca`, so its chain-of-trust checks run
against a CA it trusts, as a deployment's public CA would be; nothing about trust is excluded.

What it runs: `--scope full` (make testssl) every section of testssl's default run but the HTTP
header checks (`-p -s -f -P -S -U -c`: protocols, cipher categories, forward secrecy, server
preference, server defaults with the certificate, every vulnerability check, client simulation);
`--scope ci` a fast subset: `-p -s -f -U` (protocols, cipher categories, forward secrecy, every
vulnerability check). Left out of both: `-h` (HSTS, HPKP, security_headers, cookies, banners),
which judges the response headers the ASGI application writes, not the server.

Judged: every finding of testssl's JSON (`--jsonfile`, one object per check with "id",
"severity", "finding") rated MEDIUM, HIGH or CRITICAL fails the run, and so does a FATAL one (the
scan did not complete); each is listed. LOW, OK, INFO and WARN (testssl's own notices, e.g. the
local openssl's missing GOST engine) are listed and pass. One ID is excluded, because it rates
the test certificate's contents rather than the server, with its reason printed whenever it
occurs (EXCLUDED below). No protocol, cipher or vulnerability finding is ever excluded.

Exit status: 0 passed, 1 a finding above LOW (or FATAL), 2 testssl, openssl or skirr could not run.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAIL = {"MEDIUM", "HIGH", "CRITICAL", "FATAL"}
SHOWN = {"LOW", "WARN"} | FAIL
# IDs excluded from the verdict, each with why: only findings about the test certificate's
# contents (what the test CA issued), never about a protocol, cipher or vulnerability.
EXCLUDED = {
    "cert_revocation": "the leaf has no CRL distribution point or OCSP URI because the test CA "
                       "made here runs neither; it rates what the CA put in the certificate "
                       "(a public CA's certificate carries them), not skirr, which serves the "
                       "certificate it is given",
}
SCOPES = {"full": ["-p", "-s", "-f", "-P", "-S", "-U", "-c"], "ci": ["-p", "-s", "-f", "-U"]}


def run_openssl(*args):
    p = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"testssl: openssl {' '.join(args[:2])} failed: {p.stderr.strip()}")


def make_certs(d):
    """A test CA and a leaf for 127.0.0.1 it signs, in folder `d`; returns (ca, key, cert)."""
    d = Path(d)
    ca_key, ca, key, csr, cert = (d / n for n in ("ca.key", "ca.pem", "key.pem", "leaf.csr",
                                                   "cert.pem"))
    run_openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", str(ca_key), "-out", str(ca), "-days", "365", "-subj",
                "/O=skirr testssl/CN=skirr testssl test CA",
                "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run_openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    ext = d / "leaf.ext"
    ext.write_text("basicConstraints=critical,CA:FALSE\n"
                   "keyUsage=critical,digitalSignature\n"
                   "extendedKeyUsage=serverAuth\n"
                   "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run_openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
                "-CAcreateserial", "-days", "365", "-sha256", "-extfile", str(ext),
                "-out", str(cert))
    return ca, key, cert


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(proc, port, log, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"testssl: skirr exited with {proc.returncode}: "
                             f"{Path(log).read_text()[-800:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"testssl: skirr did not listen on 127.0.0.1:{port} in {timeout:.0f} s")


def judge(findings):
    """(failed, shown, excluded): the findings above LOW (or FATAL) not excluded, those listed
    (LOW and above, WARN), and the excluded ones that occurred above LOW."""
    failed, shown, excluded = [], [], []
    for f in findings:
        sev = f.get("severity", "")
        if sev not in SHOWN:
            continue
        shown.append(f)
        if sev in FAIL:
            (excluded if f.get("id") in EXCLUDED else failed).append(f)
    return failed, shown, excluded


def line(f):
    return f"{f.get('severity')} {f.get('id')}: {f.get('finding')}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"),
                    help="the interpreter skirr is installed in (default: .venv's)")
    ap.add_argument("--scope", choices=sorted(SCOPES), default="full")
    ap.add_argument("--json", help="also copy testssl's JSON findings here")
    ap.add_argument("--skirr-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for skirr's command line (repeatable), e.g. "
                    "--skirr-arg=--ssl-ciphers=ECDHE-ECDSA-AES128-SHA to see a failing scan")
    args = ap.parse_args()
    testssl = shutil.which("testssl") or shutil.which("testssl.sh")
    if not testssl or not shutil.which("openssl"):
        print("testssl: needs testssl.sh and openssl (apt-get install testssl.sh openssl)",
              file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="skirr-testssl-")
    proc = None
    try:
        ca, key, cert = make_certs(tmp)
        port = free_port()
        log = Path(tmp) / "skirr.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [args.python, "-m", "skirr", "raw:app", "--app-dir", str(ROOT / "examples"),
                 "--host", "127.0.0.1", "--port", str(port), "--ssl-keyfile", str(key),
                 "--ssl-certfile", str(cert), "--log-level", "warning", "--no-access-log",
                 *args.skirr_arg],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        wait_listening(proc, port, log)
        jfile = Path(tmp) / "testssl.json"
        argv = [testssl, "--quiet", "--color", "0", "--warnings", "off", "--jsonfile",
                str(jfile), "--add-ca", str(ca), *SCOPES[args.scope], f"127.0.0.1:{port}"]
        print("testssl:", " ".join(argv), flush=True)
        t0 = time.monotonic()
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        took = time.monotonic() - t0
        if not jfile.exists():
            print(f"testssl: no JSON written (exit {p.returncode}):\n{p.stdout[-2000:]}"
                  f"{p.stderr[-1000:]}", file=sys.stderr)
            return 2
        findings = json.loads(jfile.read_text())
        if args.json:
            shutil.copyfile(jfile, args.json)
        failed, shown, excluded = judge(findings)
        print(f"testssl: {len(findings)} findings in {took:.0f} s (scope {args.scope}, "
              f"testssl exit {p.returncode}); LOW and above, and WARN:")
        for f in shown:
            mark = " (excluded)" if f in excluded else ""
            print(f"  {line(f)}{mark}")
        for f in excluded:
            print(f"testssl: excluded {f['id']}: {EXCLUDED[f['id']]}")
        if proc.poll() is not None:
            print(f"testssl: FAILED: skirr exited during the scan ({proc.returncode}): "
                  f"{log.read_text()[-800:]}", file=sys.stderr)
            return 1
        if failed:
            print(f"testssl: FAILED: {len(failed)} finding(s) rated above LOW:\n"
                  + "\n".join(f"  {line(f)}" for f in failed), file=sys.stderr)
            return 1
        print("testssl: passed: no finding rated above LOW")
        return 0
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
