"""The TLS rows' figures (bench/harness/tls.py) and their report section (report.py `render_tls`)
judged from synthetic rounds, without measuring: the per-round ratios against each peer, skirr's
TLS cost against nginx's, handshakes per CPU second and their verdicts; and that nginx, the TLS
cost's reference, is set to skirr's TLS defaults (read from src/ext/sk_tlsctx.c). Run first by
`make bench-tls`, `make bench` and `make bench-quick`: `.venv/bin/python -m pytest
bench/test_tls.py -q`. Stdlib and pytest.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import peers, report, tls  # noqa: E402


def run_(server, rnd, cpu, wl="raw_get", conns=64, ok=True):
    return {"server": server, "workload": wl, "conns": conns, "round": rnd, "ok": ok,
            "error": None if ok else "RuntimeError: boom", "cpu_us_per_req": cpu, "rps": 1e6 / cpu,
            "p99_ms": 1.0, "p50_ms": 0.5, "rss_mib": 30.0, "pss_mib": 20.0, "errors": {},
            "gen_cpu": 0.5, "client_bound": False, "server_util": 1.0, "other_cpu0": 0.0,
            "steal_cpu0": 0.0, "pinned": True,
            "tls": {"version": "TLSv1.3", "cipher": "TLS_AES_256_GCM_SHA384", "alpn": None}}


def test_peer_ratio_is_met_only_when_skirr_is_ahead_in_every_round():
    runs = [run_("skirr-tls", 0, 20), run_("skirr-tls", 1, 20),
            run_("uvicorn-tls", 0, 60), run_("uvicorn-tls", 1, 61),
            run_("granian-tls", 0, 40), run_("granian-tls", 1, 19.9),
            run_("hypercorn-tls", 0, 300), run_("hypercorn-tls", 1, 300, ok=False)]
    got = tls.peer_ratios(runs, 2)
    assert got[("raw_get", 64, "uvicorn-tls")]["verdict"] == "met"
    assert got[("raw_get", 64, "uvicorn-tls")]["ratios"] == [3.0, 3.05]
    assert got[("raw_get", 64, "granian-tls")]["verdict"] == "MISSED"
    assert got[("raw_get", 64, "granian-tls")]["ahead"] == 1
    assert got[("raw_get", 64, "hypercorn-tls")]["verdict"] == "unproven"
    # a round skirr failed is a round it was not ahead in
    runs[1] = run_("skirr-tls", 1, 20, ok=False)
    assert tls.peer_ratios(runs, 2)[("raw_get", 64, "uvicorn-tls")]["verdict"] == "MISSED"


def test_tls_cost_is_tls_minus_cleartext_per_round_against_nginx():
    runs = [run_("skirr-tls", 0, 20), run_("skirr", 0, 15), run_("nginx-tls", 0, 16),
            run_("nginx", 0, 12),
            run_("skirr-tls", 1, 21), run_("skirr", 1, 15), run_("nginx-tls", 1, 16),
            run_("nginx", 1, 12)]
    got = tls.tls_costs(runs, 2)[("raw_get", 64)]
    assert got["skirr_us"] == [5, 6] and got["nginx_us"] == [4, 4]
    assert got["ratios"] == [1.25, 1.5]
    assert got["verdict"] == "MISSED"  # 1.5 > 1.25 in round 1
    got = tls.tls_costs(runs[:4], 2)[("raw_get", 64)]
    assert got["verdict"] == "unproven" and got["rounds_ok"] == 1  # round 1 missing


def hs(server, rnd, per_s, ok=True):
    return {"server": server, "workload": "handshake", "conns": 40, "round": rnd, "ok": ok,
            "error": None if ok else "RuntimeError: h2load", "handshakes_per_cpu_s": per_s,
            "rps": 400.0, "h2load_negotiated": {"TLS Protocol": "TLSv1.3",
                                                "Cipher": "TLS_AES_128_GCM_SHA256"}}


def test_handshakes_ahead_of_peers_and_at_least_0_8_of_nginx():
    rows = [hs("skirr-tls", 0, 1700), hs("skirr-tls", 1, 1600),
            hs("nginx-tls", 0, 2100), hs("nginx-tls", 1, 2000),
            hs("uvicorn-tls", 0, 1500), hs("uvicorn-tls", 1, 1650)]
    got = tls.handshake_figures(rows, 2)
    assert got["per_server"]["skirr-tls"] == [1700, 1600]
    assert got["vs"]["nginx-tls"]["verdict"] == "met"  # 0.81, 0.80
    assert got["vs"]["uvicorn-tls"]["verdict"] == "MISSED"  # behind in round 1
    rows[3] = hs("nginx-tls", 1, 2001)
    assert tls.handshake_figures(rows, 2)["vs"]["nginx-tls"]["verdict"] == "MISSED"


def test_render_tls_shows_every_part():
    runs = [run_(s, 0, c) for s, c in (("skirr-tls", 20), ("skirr", 15), ("nginx-tls", 16),
                                       ("nginx", 12), ("uvicorn-tls", 60))]
    idle = [{"server": "skirr-tls", "round": 0, "ok": True, "kib_per_conn": 12.5},
            {"server": "nginx-tls", "round": 0, "ok": False, "error": "RuntimeError: closed"}]
    t = {"runs": runs, "handshakes": [hs("skirr-tls", 0, 1700), hs("nginx-tls", 0, 2000)],
         "idle": idle, "not_measured": {"granian-tls": "failed the start check: x"},
         "certificate": "self-signed ECDSA P-256",
         "config": {"rounds": 1, "rows": [["raw_get", 64]], "idle_conns": 500,
                    "handshake": {"wl": "raw_get", "hs_rate": 40, "hs_period_ms": 100,
                                  "hs_total": 2000, "hs_warmup": 200}}}
    L = []
    report.render_tls(L, t, {"duration": 5, "warmup": 1})
    text = "\n".join(L)
    assert "- not measured: **granian-tls**: failed the start check: x" in text
    assert "| raw_get | 64 | skirr-tls | 50,000 |" in text
    assert "TLSv1.3 TLS_AES_256_GCM_SHA384" in text
    assert "| raw_get | 64 | uvicorn-tls | 3.000 (3.000–3.000) | 1/1 | met |" in text
    assert "| raw_get | 64 | 5.0 (5.0–5.0) | 4.0 (4.0–4.0) | 1.250 (1.250–1.250) | 1/1 | met |" in text
    assert "| nginx-tls | 2,000 (2,000–2,000) | 400 (400–400) | TLSv1.3 TLS_AES_128_GCM_SHA256 | " \
           "0.850 (0.850–0.850) | met |" in text
    assert "| skirr-tls | 12.5 (12.5–12.5) |" in text
    assert "- idle r0 nginx-tls failed: `RuntimeError: closed`" in text


def c_macro(text, name):
    """What a C #define in text expands to: its string literals joined, or its number."""
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith(f"#define {name} "))
    body = lines[i][len(f"#define {name} "):]
    while body.rstrip().endswith("\\"):
        i += 1
        body = body.rstrip()[:-1] + lines[i]
    parts = re.findall(r'"([^"]*)"', body)
    return "".join(parts) if parts else int(body)


def test_nginx_tls_is_set_to_skirrs_defaults():
    """The TLS cost compares the same work: nginx's TLS 1.2 list, TLS 1.3 suites in their order
    and tickets per full handshake are skirr's defaults from src/ext/sk_tlsctx.c."""
    src = (Path(__file__).resolve().parent.parent / "src/ext/sk_tlsctx.c").read_text()
    assert peers.NGINX_TLS12_CIPHERS == c_macro(src, "DEFAULT_CIPHERS")
    assert peers.NGINX_TLS13_SUITES == c_macro(src, "TLS13_SUITES")
    conf = peers.NGINX_TLS.format(cert="c.pem", key="k.pem", ciphers=peers.NGINX_TLS12_CIPHERS,
                                  suites=peers.NGINX_TLS13_SUITES)
    assert f"ssl_conf_command Ciphersuites {c_macro(src, 'TLS13_SUITES')};" in conf
    assert f"ssl_conf_command NumTickets {c_macro(src, 'TLS13_TICKETS')};" in conf
    assert "ssl_prefer_server_ciphers on;" in conf
