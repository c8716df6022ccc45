# Benchmark verbs (issue 6). The top-level Makefile includes this file: `include bench/bench.mk`.
# Extra options for bench/run.py go in BENCH_ARGS, e.g. make bench BENCH_ARGS='--rounds 3'.
# The measured skirr is the one built into VENV (make bench PY=... VENV=.venv312 measures 3.12).
BENCH_RUN := SKIRR_VENV=$(abspath $(VENV)) $(VPY) bench/run.py
BENCH_ARGS ?=
# The WebSocket load generator checked against scripted servers before it measures anything.
BENCH_WS_TEST := $(VPY) -m pytest bench/test_ws_load.py -q -p no:cacheprovider
# The callgrind count's closed-loop client and its overlay of stripped extension modules, checked
# against scripted servers before any count is taken.
BENCH_TRACED_TEST := $(VPY) -m pytest bench/test_traced.py -q -p no:cacheprovider
# The report's charts drawn from a synthetic run before a real one is measured; the first run makes
# bench/.venv-charts (matplotlib from bench/charts.txt), which the report then draws with.
BENCH_CHARTS_TEST := $(VPY) -m pytest bench/test_charts.py -q -p no:cacheprovider
# The report's Targets section (issue 15's verdicts) judged from synthetic rounds.
BENCH_TARGETS_TEST := $(VPY) -m pytest bench/test_targets.py -q -p no:cacheprovider
# The fixed-rate run (h2load --rps) and how it counts responses, against scripted servers.
BENCH_FIXED_TEST := $(VPY) -m pytest bench/test_fixed.py -q -p no:cacheprovider
# The TLS rows' figures and report section (issue 32) judged from synthetic rounds.
BENCH_TLS_TEST := $(VPY) -m pytest bench/test_tls.py -q -p no:cacheprovider
# The HTTP/2 rows' figures, h2load's summary as the harness reads it and their report section
# (issue 33) judged from synthetic rounds.
BENCH_H2_TEST := $(VPY) -m pytest bench/test_h2.py -q -p no:cacheprovider
# The scale rows' connection holder (bench/scale_client.c) against scripted servers, and their
# figures and verdicts (issue 37) from fixed rows.
BENCH_SCALE_TEST := $(VPY) -m pytest bench/test_scale.py -q -p no:cacheprovider
# The matrix's plan from the command line (rows, servers, phases; a --workloads name no row has is
# refused), checked before anything is measured.
BENCH_PLAN_TEST := $(VPY) -m pytest bench/test_plan.py -q -p no:cacheprovider
# make bench and bench-targets measure only a build that passes the conformance suite (the run then
# records BENCH_CONFORMANCE=passed).
# ($(MAKE) stays in the recipes themselves, where make knows the line for a recursive one.)
BENCH_REFUSE = { echo "$@: 'make conformance' failed: refusing to measure this build" >&2; exit 1; }

.PHONY: bench bench-targets bench-quick bench-syscalls bench-callgrind bench-access bench-costs bench-workers bench-threads bench-ws bench-tls bench-h2 bench-scale

# The full matrix (about 2 hours: 11 minutes of conformance, 117 of matrix), only on a build that passes
# the conformance suite; writes the raw results to bench/results/ and the summary to
# bench/RESULTS.md with its charts in bench/charts/ (PNG, drawn with matplotlib).
bench: build
	@$(MAKE) --no-print-directory conformance || $(BENCH_REFUSE)
	$(BENCH_PLAN_TEST)
	$(BENCH_WS_TEST)
	$(BENCH_CHARTS_TEST)
	$(BENCH_TARGETS_TEST)
	$(BENCH_FIXED_TEST)
	$(BENCH_TLS_TEST)
	$(BENCH_H2_TEST)
	BENCH_CONFORMANCE=passed $(BENCH_RUN) matrix --profile full --summary bench/RESULTS.md $(BENCH_ARGS)

# Issue 15's targets on another interpreter (its target 4; about an hour): the rows and peers
# they name (--profile targets), only on a build that passes the conformance suite under that
# interpreter. Each interpreter keeps its own peers' venv (bench/.venv-peers-<X.Y>/) and summary:
# make bench-targets PY=$(pyenv root)/versions/3.12.1/bin/python3 VENV=.venv312 writes
# bench/RESULTS-3.12.md, its charts in bench/charts/RESULTS-3.12/.
bench-targets: build
	@$(MAKE) --no-print-directory conformance || $(BENCH_REFUSE)
	$(BENCH_PLAN_TEST)
	$(BENCH_CHARTS_TEST)
	$(BENCH_TARGETS_TEST)
	$(BENCH_FIXED_TEST)
	@v=$$($(VPY) -c 'import sys; print("%d.%d" % sys.version_info[:2])') && \
	  set -x && BENCH_CONFORMANCE=passed BENCH_PEERS_VENV=$(CURDIR)/bench/.venv-peers-$$v \
	  $(BENCH_RUN) matrix --profile targets --summary bench/RESULTS-$$v.md $(BENCH_ARGS)
# The CI smoke test of the harness, <= 5 minutes: raw_get, post_4k and fastapi_json at 64
# connections, 3 rounds, skirr beside uvicorn and the C limit; one round of the WebSocket latency
# row (ws_echo_64, skirr beside uvicorn with websockets); one round of the TLS smoke row (raw_get
# c64, the handshake row and 100 idle TLS connections, skirr beside uvicorn); one round of the
# HTTP/2 smoke row (raw_get, 64 connections of 10 streams, skirr over h2c and over TLS beside its
# HTTP/1.1 baseline). No pass/fail on speed; it fails only
# when a skirr run fails (a socket error, timeout, non-2xx or wrong body; over HTTP/2 also a
# failed, errored or timed-out stream, or a protocol other than h2c/h2), or skirr cannot start.
# Its report and charts stay in its run folder under bench/results/.
bench-quick: build
	$(BENCH_PLAN_TEST)
	$(BENCH_WS_TEST)
	$(BENCH_CHARTS_TEST)
	$(BENCH_TARGETS_TEST)
	$(BENCH_FIXED_TEST)
	$(BENCH_TLS_TEST)
	$(BENCH_H2_TEST)
	$(BENCH_RUN) matrix --profile quick $(BENCH_ARGS)

# 1,001 sequential tiny requests on one keep-alive connection, traced with strace: skirr passes with
# <= 1,010 receive calls, no EAGAIN and exactly 1,001 send calls; then 100 batches of 16 pipelined
# requests on a second connection: exactly 100 send calls, one per batch (the C limit is traced as
# a control).
bench-syscalls: build
	$(BENCH_RUN) syscalls

# Instructions per request (Python, C and libc; not the kernel) under callgrind, for raw_get
# sequential and pipelined: a deterministic figure to compare a hot-path change before and after
# (about 3 minutes). Extra options in CALLGRIND_ARGS: '--n 4000'; another workload, over closed-loop
# connections, with peers counted the same way beside skirr (their whole process trees):
# CALLGRIND_ARGS='--workload fastapi_json --conns 64 --servers peregrine' (about 8 minutes).
# Over TLS (issue 32; skirr-tls and each peer's own TLS with a test certificate made for the run,
# every connection handshaken in the warm-up, so the record layer is what is counted):
# CALLGRIND_ARGS='--tls --workload fastapi_json --conns 64'; its cleartext twin without --tls.
# Over HTTP/2 (issue 33; skirr-h2c or skirr-h2 and each peer's, driven by h2load: one phase of
# --n requests over --conns connections of --streams streams, exact answers checked with curl):
# CALLGRIND_ARGS='--h2 h2c --workload get_64k --streams 10 --servers peregrine'.
CALLGRIND_ARGS ?=
bench-callgrind: build
	$(BENCH_TRACED_TEST)
	$(BENCH_RUN) callgrind $(CALLGRIND_ARGS)

# The cost rows of the matrix alone (issue 13, about 3 minutes): raw_get c64 CPU per request with
# skirr's access log (to its log file) and --metrics-port on against off, and uvicorn's access log
# on against off, 5 rounds (server on CPU 0, wrk on CPU 1). Target: skirr's access log on <= 1.25x
# off and below uvicorn's with its log on. `make bench` runs the same rows in its matrix. The summary
# goes to bench/COSTS.md; rule skirr-access-cost's case reads the newest of it and bench/RESULTS.md.
bench-costs: build
	$(BENCH_RUN) matrix --profile costs --summary bench/COSTS.md $(BENCH_ARGS)

# The workers row of the matrix alone (issue 12, about 6 minutes): raw_get and fastapi_json at c64,
# skirr with 1 and 2 worker processes beside uvicorn, granian and gunicorn+uvicorn-worker at 2, all
# sharing both CPUs with wrk -t2, 5 rounds. Target: skirr's CPU per request with 2 workers <= 1.5x
# one process's (median of per-round ratios). The summary goes to bench/WORKERS.md; rule
# skirr-workers-cpu-per-request's case reads the newest of it and bench/RESULTS.md.
bench-workers: build
	$(BENCH_RUN) matrix --profile workers --summary bench/WORKERS.md $(BENCH_ARGS)

# Thread workers on a free-threaded Python (issue 34, about 4 minutes; refused on a GIL build):
# make bench-threads PY=/path/to/python3.14t VENV=.venv314t. FastAPI `async def` (fastapi_json)
# and `def` doing pure-Python work (fastapi_cpu) at c64, unpinned with wrk -t2 as the workers
# row: skirr --worker-kind thread (2 loops, one process) beside 2 worker processes and one process,
# and granian's 2 workers (threads on its free-threaded build), 5 rounds. The peers get their own
# venv per interpreter (bench/.venv-peers-<X.Y>[t]/); the summary goes to bench/THREADS-<X.Y>t.md.
bench-threads: build
	$(BENCH_PLAN_TEST)
	@v=$$($(VPY) -c 'import sys, sysconfig; print("%d.%d" % sys.version_info[:2] + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""))') && \
	  set -x && BENCH_PEERS_VENV=$(CURDIR)/bench/.venv-peers-$$v \
	  $(BENCH_RUN) matrix --profile threads --summary bench/THREADS-$$v.md $(BENCH_ARGS)

# The WebSocket rows of the matrix alone (issue 14, about 6 minutes): echo over 64 connections
# driven by bench/ws_load.c (built into bench/build/), ws_echo_64 (round-trip p50/p99, msgs/s)
# and ws_echo_1k (msgs/s), skirr beside uvicorn (websockets, wsproto), granian and peregrine,
# 5 rounds (server on CPU 0, the generator on CPU 1); server CPU per message as for HTTP. Its own
# run folder and report.md under bench/results/; `make bench` runs the same rows in its matrix.
bench-ws: build
	$(BENCH_WS_TEST)
	$(BENCH_RUN) matrix --profile ws --summary bench/WEBSOCKET.md $(BENCH_ARGS)

# The TLS rows of the matrix alone (issue 32, about 35 minutes at 5 rounds; bench/harness/tls.py):
# raw_get, get_64k and fastapi_json at 64 and 256 connections over TLS, skirr beside uvicorn,
# granian, hypercorn and peregrine each with its own TLS and nginx (the reference), skirr and nginx
# in cleartext on the same rows (the TLS cost); the handshake row (h2load, a full handshake per
# connection at a fixed offered rate); memory per idle TLS connection. The same test certificate
# for all, made per run with the openssl CLI. Its summary goes to bench/TLS.md; `make bench` runs
# the same rows in its matrix.
bench-tls: build
	$(BENCH_PLAN_TEST)
	$(BENCH_TLS_TEST)
	$(BENCH_RUN) matrix --profile tls --summary bench/TLS.md $(BENCH_ARGS)

# The HTTP/2 rows of the matrix alone (issue 33, about 45 minutes at 5 rounds; bench/harness/h2.py):
# raw_get, get_64k and fastapi_json at 64 connections with 1 and with 10 concurrent streams each
# (h2load -t1 -c64 -m1 / -m10), over h2c with prior knowledge and h2 over TLS (ALPN), skirr
# (--http auto) beside hypercorn, granian and peregrine and nginx (http2, the limit), with skirr's
# HTTP/1.1 (wrk, cleartext and TLS) on the same rows in the same rounds: CPU per request against
# each peer per round, skirr's ratio to nginx, and skirr's HTTP/2 CPU per request at 10 streams
# against its HTTP/1.1 (target <= 1). Its summary goes to bench/HTTP2.md; `make bench` runs the
# same rows in its matrix. Fails (exit 1) when a skirr run fails or skirr cannot serve HTTP/2.
bench-h2: build
	$(BENCH_PLAN_TEST)
	$(BENCH_H2_TEST)
	$(BENCH_RUN) matrix --profile h2 --summary bench/HTTP2.md $(BENCH_ARGS)

# The access log's cost in instructions per request under callgrind (off, then on to a file),
# then the cost rows.
bench-access: build
	$(BENCH_TRACED_TEST)
	$(BENCH_RUN) callgrind $(CALLGRIND_ARGS)
	$(BENCH_RUN) callgrind --access-log $(CALLGRIND_ARGS)
	$(BENCH_RUN) matrix --profile costs $(BENCH_ARGS)

# The scale rows (issue 37; bench/harness/scale.py), about 15 minutes at 10,000 connections:
# 10,000 connections that have sent nothing (the baseline) on the HTTP servers, then
# 10,000 and 50,000 idle connections held by bench/scale_client.c (built into bench/build/) from
# 64 source addresses in 127.0.0.0/8, each after one exact HTTP/1.1 keep-alive request (skirr beside
# uvicorn, granian, hypercorn, peregrine and nginx) or an accepted WebSocket with pings off (skirr
# beside uvicorn with websockets and wsproto, granian and peregrine), keep-alive timeouts raised
# for the row; per server RSS and PSS growth per connection (KiB), the time to open them all,
# errors, and RSS after all closed (a leak: over 1.1x the start), two open-hold-close cycles per
# server. RLIMIT_NOFILE is raised as far as the machine allows; a row it cannot hold is reported
# not run, with the reason. Then fan-out (issue 37 item 3): bench/apps/ws_apps.py's fanout app on
# the WebSocket servers, bench/fanout_client.c with 1,000 and 5,000 subscribers and a publisher,
# 64-byte and 1 KiB messages, 5 unmeasured then 200 measured broadcasts, 3 rounds: the server's CPU
# per delivered message against each peer per round, time to the last subscriber (p50, p99), every
# frame checked (alone: BENCH_ARGS='--rows fanout:1000,fanout:5000 --no-churn'). Then churn:
# raw_get and fastapi_json with `Connection: close` (a new connection per request), wrk -c64 on
# CPU 1, the server on CPU 0, the same servers, 3 rounds:
# CPU per request against each peer per round and against nginx; then the churn profile: one more
# skirr run per churn row under `perf record --call-graph dwarf` (cpu-clock without a hardware
# PMU), not counted in the rounds, its samples by path (accept, close, request, Python, other
# kernel) and top symbols (bench/harness/perf.py; BENCH_ARGS=--no-profile skips it). The summary,
# with the targets judged, goes to bench/SCALE.md, and a short Scale section (a line per target
# group with its verdicts and key figures, the memory chart, a link to SCALE.md) into
# bench/RESULTS.md between <!-- scale:begin --> and <!-- scale:end --> (replaced, or inserted
# before the levers); `make bench` keeps that section when it rewrites RESULTS.md.
bench-scale: build
	$(BENCH_SCALE_TEST)
	$(BENCH_RUN) scale --summary bench/SCALE.md $(BENCH_ARGS)
