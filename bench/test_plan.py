"""The matrix's plan (bench/harness/matrix.py `plan`) from run.py's command line, without
measuring: which rows, servers and phases a run gets. Run by `make bench-quick` before it
measures, and by hand: `.venv/bin/python -m pytest bench/test_plan.py -q`. Stdlib and pytest.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # noqa: E402
from harness.matrix import plan, summary_mismatch  # noqa: E402


def planned(*argv):
    return plan(run.build_parser().parse_args(["matrix", *argv]))


def test_quick_profile_rows_and_servers():
    prof, servers, rows = planned("--profile", "quick")
    assert rows == [("raw_get", 64), ("post_4k", 64), ("fastapi_json", 64)]
    assert servers == ["skirr", "uvicorn-httptools", "limit-c"]
    assert prof["workers"]["rows"] == [("raw_get", 64)]
    assert prof["ws"]["rows"] == [("ws_echo_64", 64)]


def test_targets_profile_has_the_rows_and_peers_issue_15_names():
    prof, servers, rows = planned("--profile", "targets")
    assert rows == [("raw_get", 16), ("raw_get", 64), ("raw_get", 256), ("post_4k", 64),
                    ("post_4k", 256), ("get_64k", 64), ("get_64k", 256), ("fastapi_json", 64),
                    ("fastapi_json", 256), ("pipelined_get", 64), ("pipelined_get", 256)]
    assert servers == ["skirr", "uvicorn-httptools", "granian", "hypercorn", "peregrine",
                       "limit-c"]
    assert (prof["rounds"], prof["fixed_rounds"], prof["stream_rounds"]) == (5, 3, 3)
    assert prof["fixed_rate"] == [("raw_get", 64), ("fastapi_json", 64)]
    assert prof["fixed_pcts"] == [25, 50]
    assert (prof["workers"], prof["costs"], prof["ws"]) == (None, None, None)


def test_workloads_and_conns_select_rows_skirr_always_in():
    prof, servers, rows = planned("--profile", "full", "--servers", "peregrine", "--workloads",
                                  "get_64k", "--conns", "64,256", "--no-workers", "--no-ws")
    assert rows == [("get_64k", 64), ("get_64k", 256)]
    assert servers == ["skirr", "peregrine"]
    assert prof["workers"] is None and prof["ws"] is None


@pytest.mark.parametrize("argv, named", [
    # Not a row of the quick profile: this run used to measure raw_get alone and say nothing.
    (["--profile", "quick", "--workloads", "get_64k,raw_get"], "--workloads get_64k:"),
    (["--profile", "full", "--workloads", "raw_gett"], "--workloads raw_gett:"),
    # ws_echo_64 is a row of the WebSocket phase, which --no-ws leaves out.
    (["--profile", "quick", "--workloads", "ws_echo_64", "--no-ws"], "--workloads ws_echo_64:"),
])
def test_a_workload_no_row_has_is_refused(argv, named):
    with pytest.raises(SystemExit) as e:
        planned(*argv)
    assert str(e.value).startswith(named)
    assert "not a row of the" in str(e.value)


def test_a_workload_only_a_later_phase_has_is_kept():
    prof, servers, rows = planned("--profile", "quick", "--workloads", "ws_echo_64")
    assert rows == []
    assert prof["ws"]["rows"] == [("ws_echo_64", 64)]
    assert prof["workers"]["rows"] == []


def test_unknown_server_is_refused():
    with pytest.raises(SystemExit) as e:
        planned("--servers", "nope")
    assert str(e.value).startswith("unknown server nope; known: skirr")


def test_a_summary_named_for_another_interpreter_is_refused():
    # make bench-targets PY=<3.12> writes bench/RESULTS-3.12.md: the skirr measured must be 3.12's.
    why = summary_mismatch("bench/RESULTS-3.12.md", "3.11.7 /usr/bin/python3.11")
    assert why.startswith("--summary bench/RESULTS-3.12.md names Python 3.12, but the skirr venv (")
    assert why.endswith(") runs 3.11.7: set SKIRR_VENV (make bench-targets sets it from VENV)")
    assert summary_mismatch("bench/RESULTS-3.12.md", "3.12.1 /usr/bin/python3.12") is None
    assert summary_mismatch("bench/RESULTS-3.1.md", "3.12.1 /x") is not None  # not a prefix match
    assert summary_mismatch("bench/RESULTS.md", "3.13.0 /x") is None
    assert summary_mismatch(None, "3.13.0 /x") is None


def test_tls_rows_in_full_quick_and_their_own_profile():
    prof, _, _ = planned("--profile", "full")
    assert prof["tls"]["rows"] == [("raw_get", 64), ("raw_get", 256), ("get_64k", 64),
                                   ("get_64k", 256), ("fastapi_json", 64), ("fastapi_json", 256)]
    assert prof["tls"]["servers"] == ["skirr-tls", "uvicorn-tls", "granian-tls", "hypercorn-tls",
                                      "peregrine-tls", "nginx-tls", "skirr", "nginx"]
    prof, servers, rows = planned("--profile", "tls")
    assert (servers, rows, prof["workers"], prof["costs"], prof["ws"]) == ([], [], None, None,
                                                                           None)
    assert prof["tls"]["rounds"] == 5 and len(prof["tls"]["rows"]) == 6
    prof, _, _ = planned("--profile", "quick")
    assert prof["tls"]["rows"] == [("raw_get", 64)] and prof["tls"]["rounds"] == 1
    assert planned("--profile", "full", "--no-tls")[0]["tls"] is None


def test_tls_rows_follow_workloads_conns_rounds_and_tls_servers():
    prof, _, _ = planned("--profile", "tls", "--workloads", "get_64k", "--conns", "64",
                         "--rounds", "3", "--tls-servers", "nginx-tls,uvicorn-tls")
    assert prof["tls"]["rows"] == [("get_64k", 64)]
    assert prof["tls"]["rounds"] == 3
    assert prof["tls"]["servers"] == ["skirr-tls", "nginx-tls", "uvicorn-tls"]
    with pytest.raises(SystemExit) as e:
        planned("--profile", "tls", "--tls-servers", "nope-tls")
    assert str(e.value).startswith("unknown server nope-tls")


def test_h2_rows_in_full_quick_and_their_own_profile():
    prof, _, _ = planned("--profile", "full")
    assert prof["h2"]["rows"] == [("raw_get", 64, 1), ("raw_get", 64, 10), ("get_64k", 64, 1),
                                  ("get_64k", 64, 10), ("fastapi_json", 64, 1),
                                  ("fastapi_json", 64, 10)]
    assert prof["h2"]["servers"] == ["skirr-h2c", "skirr-h2", "hypercorn-h2c", "hypercorn-h2",
                                     "granian-h2c", "granian-h2", "peregrine-h2c", "peregrine-h2",
                                     "nginx-h2c", "nginx-h2"]
    assert prof["h2"]["baselines"] == ["skirr", "skirr-tls"]
    prof, servers, rows = planned("--profile", "h2")
    assert (servers, rows) == ([], [])
    assert prof["h2"]["rounds"] == 5 and len(prof["h2"]["rows"]) == 6
    assert (prof["workers"], prof["costs"], prof["ws"], prof["tls"]) == (None, None, None, None)
    prof, _, _ = planned("--profile", "quick")
    assert prof["h2"]["rows"] == [("raw_get", 64, 10)] and prof["h2"]["rounds"] == 1
    assert prof["h2"]["servers"] == ["skirr-h2c", "skirr-h2"]
    assert prof["h2"]["baselines"] == ["skirr"]
    assert planned("--profile", "full", "--no-h2")[0]["h2"] is None
    assert planned("--profile", "tls")[0]["h2"] is None


def test_h2_rows_follow_workloads_conns_streams_rounds_and_h2_servers():
    prof, _, _ = planned("--profile", "h2", "--workloads", "get_64k", "--conns", "16,64",
                         "--streams", "10", "--rounds", "2", "--h2-servers", "nginx-h2")
    assert prof["h2"]["rows"] == [("get_64k", 16, 10), ("get_64k", 64, 10)]
    assert prof["h2"]["rounds"] == 2
    assert prof["h2"]["servers"] == ["skirr-h2c", "nginx-h2"]
    assert prof["h2"]["baselines"] == ["skirr"]  # skirr-tls only beside skirr-h2
    prof, _, _ = planned("--profile", "h2", "--h2-servers", "skirr-h2,granian-h2")
    assert prof["h2"]["servers"] == ["skirr-h2c", "skirr-h2", "granian-h2"]
    assert prof["h2"]["baselines"] == ["skirr", "skirr-tls"]
    # a workload only the HTTP/2 rows have is a row of the run, not refused
    assert planned("--profile", "h2", "--workloads", "fastapi_json")[0]["h2"]["rows"] == [
        ("fastapi_json", 64, 1), ("fastapi_json", 64, 10)]
    with pytest.raises(SystemExit) as e:
        planned("--profile", "h2", "--workloads", "post_4k")
    assert "not a row of the h2 profile" in str(e.value)
    with pytest.raises(SystemExit) as e:
        planned("--profile", "h2", "--h2-servers", "nope-h2")
    assert str(e.value).startswith("unknown server nope-h2")


def test_threads_profile_rows_servers_and_command_lines():
    prof, servers, rows = planned("--profile", "threads")
    assert (servers, rows, prof["costs"], prof["ws"]) == ([], [], None, None)
    assert prof["workers"] == {"servers": ["skirr-w1", "skirr-w2", "skirr-t2", "granian-t2"],
                               "rows": [("fastapi_json", 64), ("fastapi_cpu", 64)], "rounds": 5}
    assert planned("--profile", "threads", "--workloads", "fastapi_cpu",
                   "--rounds", "2")[0]["workers"]["rows"] == [("fastapi_cpu", 64)]
    from harness.peers import SERVERS
    argv = SERVERS["skirr-t2"].argv("fastapi_json:app", 8000, "/tmp")
    assert argv[argv.index("--workers") + 1] == "2" and argv[-2:] == ["--worker-kind", "thread"]
    # unpinned as the workers row (1), without waiting for worker processes it does not have
    assert (SERVERS["skirr-t2"].workers, SERVERS["granian-t2"].workers) == (1, 1)
    assert "fastapi_cpu" not in SERVERS["limit-c"].serves


def test_fastapi_cpu_expects_the_apps_own_answer():
    from harness.workloads import WORKLOADS
    import cpu_work
    assert WORKLOADS["fastapi_cpu"]["expect"] == b'{"n":20000,"sum":%d}' % sum(
        i * i % 7 for i in range(20000))
    assert cpu_work.CPU_BODY is WORKLOADS["fastapi_cpu"]["expect"]
