# sanitizers/sanitize.mk — `make sanitize`: ASan + UBSan over the C unit tests, the fuzz corpora
# and the whole conformance suite (both loops) against an instrumented skirr._native.
#
# Stand-alone:  make -f sanitizers/sanitize.mk sanitize     (from the repository top; needs .venv)
# Included:     include sanitizers/sanitize.mk               (from the top-level Makefile)
#
# The instrumented extension is compiled here directly (not through setup.py, whose in-tree build
# directory would reuse the normal build's objects) into $(SAN_SITE)/skirr/, next to a copy of the
# Python package; the suite runs with PYTHONPATH=$(SAN_SITE) so it imports that copy, with the
# ASan runtime preloaded into every Python interpreter and into no other program
# (sanitizers/sitecustomize.py, copied there too; python itself is not instrumented). See
# sanitizers/README.md.

SAN_CC ?= gcc
# The C unit tests and fuzz replays: clang when present (its UBSan also reports NULL + 0).
SAN_TEST_CC ?= $(shell command -v clang >/dev/null 2>&1 && echo clang || echo gcc)
SAN_PY ?= .venv/bin/python
SAN_DIR ?= build/asan
SAN_SITE ?= $(SAN_DIR)/site
SAN_PREREQ ?=
# pytest-xdist workers for the suite under ASan (they inherit LD_PRELOAD and PYTHONPATH); 0: none.
# sanitize-smoke uses SAN_SMOKE_JOBS (2: its cases under ASan in 5 min 9 s instead of about 10 on
# two cores); the whole suite (make sanitize, with the process-management cases whose timing bounds
# ASan's start-up already strains) keeps SAN_JOBS at 0 until a run with workers is shown clean.
SAN_JOBS ?= 0
SAN_SMOKE_JOBS ?= 2
SAN_XDIST = $(if $(filter 0,$(SAN_JOBS)),,-n $(SAN_JOBS))
SAN_SMOKE_XDIST = $(if $(filter 0,$(SAN_SMOKE_JOBS)),,-n $(SAN_SMOKE_JOBS))
SAN_PYTEST_ARGS ?= -q $(SAN_XDIST)
SAN_TESTS ?= conformance
SAN_FLAGS ?= -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g
SAN_CFLAGS ?= -std=c11 -O1 -Wall -Wextra -Werror
SAN_LLHTTP ?= python3 scripts/fetch_llhttp.py
SAN_CORE := $(wildcard src/core/*.c)
# The harnesses whose seeds and reproducers are replayed (fuzz/fuzz_<name>.c).
SAN_FUZZ_HARNESSES ?= request response ws h2
SAN_EXT := $(wildcard src/ext/*.c)
# libssl and libcrypto (the TLS layer, src/ext/sk_tls.c, and the context): pkg-config, or the plain names.
SAN_OPENSSL := $(shell pkg-config --cflags --libs openssl 2>/dev/null || echo -lssl -lcrypto)
# nghttp2 (the HTTP/2 handler, src/ext/sk_h2.c): pkg-config, or the plain name.
SAN_NGHTTP2 := $(shell pkg-config --cflags --libs libnghttp2 2>/dev/null || echo -lnghttp2)
# What a harness's replay build adds to the core and llhttp: h2 (fuzz/fuzz_h2.c) compiles the
# HTTP/2 handler and its budgets against Python.h's headers (no libpython: fuzz/README.md) and
# links nghttp2.
SAN_FUZZ_EXTRA_h2 = -Isrc/ext -I$$($(SAN_PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])') \
  src/ext/sk_h2.c src/ext/sk_h2guard.c $(SAN_NGHTTP2) -lm

# Runtime settings, shared by every step (the reasons are in sanitizers/README.md).
SAN_ASAN_OPTIONS ?= detect_leaks=0:abort_on_error=1:strict_string_checks=1:check_initialization_order=1:detect_stack_use_after_return=1:suppressions=$(abspath sanitizers/asan.supp)
SAN_UBSAN_OPTIONS ?= halt_on_error=1:abort_on_error=1:print_stacktrace=1:suppressions=$(abspath sanitizers/ubsan.supp)
SAN_ENV = ASAN_OPTIONS=$(SAN_ASAN_OPTIONS):log_path=$(abspath $(SAN_DIR))/logs/asan \
  UBSAN_OPTIONS=$(SAN_UBSAN_OPTIONS):log_path=$(abspath $(SAN_DIR))/logs/ubsan

.PHONY: sanitize sanitize-build sanitize-c sanitize-suite sanitize-smoke

sanitize: sanitize-c sanitize-suite

# CI's smoke run: the C tests and fuzz corpora, then every case that drives the C extension over
# HTTP (not the process-management, packaging and reverse-proxy cases, which run Python and
# external programs: they run under `make sanitize`).
SAN_SMOKE_IGNORE := test_packaging test_workers test_sockets test_gunicorn test_reload test_nginx \
  test_proxy_nginx test_deployment_doc test_cli test_ops_cli test_lifespan test_lifetime test_oracle_h11
sanitize-smoke: sanitize-c
	@$(MAKE) --no-print-directory sanitize-suite \
	  SAN_PYTEST_ARGS="-q $(SAN_SMOKE_XDIST) $(foreach t,$(SAN_SMOKE_IGNORE),--ignore=conformance/$(t).py)"

# The C unit tests (with LeakSanitizer: no interpreter here) and every fuzz seed and reproducer.
sanitize-c: $(SAN_PREREQ)
	@set -e; mkdir -p $(SAN_DIR)/llhttp-test $(SAN_DIR)/logs; rm -f $(SAN_DIR)/logs/*; \
	cflags="$$($(SAN_LLHTTP) --cflags)"; objs=""; \
	for src in $$($(SAN_LLHTTP) --sources); do \
	  obj=$(SAN_DIR)/llhttp-test/$$(basename $$src .c).o; \
	  [ -f $$obj ] && [ $$obj -nt $$src ] || $(SAN_TEST_CC) -std=c11 -O1 -fPIC $(SAN_FLAGS) $$cflags -c $$src -o $$obj; \
	  objs="$$objs $$obj"; \
	done; \
	echo "$(SAN_TEST_CC) $(SAN_FLAGS) ... src/core/test/test_core.c -> $(SAN_DIR)/test_core"; \
	$(SAN_TEST_CC) $(SAN_CFLAGS) $(SAN_FLAGS) -Isrc/core $$cflags $(SAN_CORE) src/core/test/test_core.c $$objs -o $(SAN_DIR)/test_core; \
	echo "$(SAN_TEST_CC) $(SAN_FLAGS) ... src/core/test/test_ws.c -> $(SAN_DIR)/test_ws"; \
	$(SAN_TEST_CC) $(SAN_CFLAGS) $(SAN_FLAGS) -Isrc/core $$cflags $(SAN_CORE) src/core/test/test_ws.c $$objs -o $(SAN_DIR)/test_ws; \
	echo "$(SAN_TEST_CC) $(SAN_FLAGS) ... src/ext/test/test_stream.c -> $(SAN_DIR)/test_stream"; \
	$(SAN_TEST_CC) $(SAN_CFLAGS) $(SAN_FLAGS) -Isrc/core -Isrc/ext src/core/sk_core.c src/ext/sk_stream.c \
	  src/ext/test/test_stream.c -o $(SAN_DIR)/test_stream; \
	echo "$(SAN_TEST_CC) $(SAN_FLAGS) ... src/ext/test/test_tls.c -> $(SAN_DIR)/test_tls"; \
	$(SAN_TEST_CC) $(SAN_CFLAGS) $(SAN_FLAGS) -Isrc/core -Isrc/ext src/ext/sk_stream.c src/ext/sk_tls.c \
	  src/ext/test/test_tls.c $(SAN_OPENSSL) -o $(SAN_DIR)/test_tls; \
	echo "$(SAN_TEST_CC) $(SAN_FLAGS) ... src/ext/test/test_h2guard.c -> $(SAN_DIR)/test_h2guard"; \
	$(SAN_TEST_CC) $(SAN_CFLAGS) $(SAN_FLAGS) -Isrc/core -Isrc/ext src/ext/sk_h2guard.c \
	  src/ext/test/test_h2guard.c -lm -o $(SAN_DIR)/test_h2guard; \
	$(foreach h,$(SAN_FUZZ_HARNESSES),echo "$(SAN_TEST_CC) $(SAN_FLAGS) ... fuzz/fuzz_$(h).c fuzz/replay.c -> $(SAN_DIR)/replay_$(h)"; \
	  $(SAN_TEST_CC) $(SAN_CFLAGS) $(SAN_FLAGS) -Isrc/core $$cflags $(SAN_CORE) fuzz/fuzz_$(h).c fuzz/replay.c $$objs \
	    $(SAN_FUZZ_EXTRA_$(h)) -o $(SAN_DIR)/replay_$(h);) \
	ASAN_OPTIONS=$$(echo "$(SAN_ASAN_OPTIONS)" | sed 's/detect_leaks=0/detect_leaks=1/') \
	  UBSAN_OPTIONS=$(SAN_UBSAN_OPTIONS) $(SAN_DIR)/test_core; \
	ASAN_OPTIONS=$$(echo "$(SAN_ASAN_OPTIONS)" | sed 's/detect_leaks=0/detect_leaks=1/') \
	  UBSAN_OPTIONS=$(SAN_UBSAN_OPTIONS) $(SAN_DIR)/test_ws; \
	ASAN_OPTIONS=$$(echo "$(SAN_ASAN_OPTIONS)" | sed 's/detect_leaks=0/detect_leaks=1/') \
	  UBSAN_OPTIONS=$(SAN_UBSAN_OPTIONS) $(SAN_DIR)/test_stream; \
	ASAN_OPTIONS=$$(echo "$(SAN_ASAN_OPTIONS)" | sed 's/detect_leaks=0/detect_leaks=1/') \
	  UBSAN_OPTIONS=$(SAN_UBSAN_OPTIONS) $(SAN_DIR)/test_tls; \
	ASAN_OPTIONS=$$(echo "$(SAN_ASAN_OPTIONS)" | sed 's/detect_leaks=0/detect_leaks=1/') \
	  UBSAN_OPTIONS=$(SAN_UBSAN_OPTIONS) $(SAN_DIR)/test_h2guard; \
	for h in $(SAN_FUZZ_HARNESSES); do \
	  ASAN_OPTIONS=$$(echo "$(SAN_ASAN_OPTIONS)" | sed 's/detect_leaks=0/detect_leaks=1/') \
	    UBSAN_OPTIONS=$(SAN_UBSAN_OPTIONS) $(SAN_DIR)/replay_$$h fuzz/corpus/$$h fuzz/regressions/$$h; \
	done

# skirr._native with ASan/UBSan, plus a copy of the Python package, in $(SAN_SITE)/skirr/.
sanitize-build: $(SAN_PREREQ)
	@set -e; mkdir -p $(SAN_DIR)/llhttp-pic $(SAN_SITE)/skirr; \
	cflags="$$($(SAN_LLHTTP) --cflags)"; objs=""; \
	for src in $$($(SAN_LLHTTP) --sources); do \
	  obj=$(SAN_DIR)/llhttp-pic/$$(basename $$src .c).o; \
	  [ -f $$obj ] && [ $$obj -nt $$src ] || $(SAN_CC) -std=c11 -O1 -fPIC $(SAN_FLAGS) $$cflags -c $$src -o $$obj; \
	  objs="$$objs $$obj"; \
	done; \
	pyinc=$$($(SAN_PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])'); \
	suffix=$$($(SAN_PY) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))'); \
	rm -rf $(SAN_SITE)/skirr; mkdir -p $(SAN_SITE)/skirr; \
	cp src/skirr/*.py $(SAN_SITE)/skirr/; cp src/skirr/*.pyi src/skirr/py.typed $(SAN_SITE)/skirr/ 2>/dev/null || true; \
	cp sanitizers/sitecustomize.py $(SAN_SITE)/; \
	echo "$(SAN_CC) -shared -fPIC $(SAN_FLAGS) src/core/*.c src/ext/*.c -> $(SAN_SITE)/skirr/_native$$suffix"; \
	$(SAN_CC) -shared -fPIC $(SAN_CFLAGS) $(SAN_FLAGS) -Isrc/core -Isrc/ext -I$$pyinc $$cflags $(SAN_CORE) $(SAN_EXT) $$objs -lz $(SAN_OPENSSL) $(SAN_NGHTTP2) \
	  -o $(SAN_SITE)/skirr/_native$$suffix

# The whole conformance suite (every case runs on asyncio and uvloop) against that build.
# PYTHONMALLOC=malloc: every object allocation goes through ASan's malloc (pymalloc's arenas
# would hide overflows inside them). Any report, from pytest or from a server subprocess, lands
# in $(SAN_DIR)/logs/ and fails the target. SKIRR_SAN_PRELOAD names the runtime for
# $(SAN_SITE)/sitecustomize.py, which keeps LD_PRELOAD out of every program but Python's (a
# report must be about skirr's code, not about make or nginx run by a test).
sanitize-suite: sanitize-build
	@set -e; mkdir -p $(SAN_DIR)/logs; rm -f $(SAN_DIR)/logs/*; \
	asan=$$($(SAN_CC) -print-file-name=libasan.so); \
	[ -f "$$asan" ] || { echo "sanitize: no libasan.so from $(SAN_CC)" >&2; exit 1; }; \
	echo "LD_PRELOAD=$$asan PYTHONMALLOC=malloc PYTHONPATH=$(SAN_SITE) $(SAN_PY) -m pytest $(SAN_TESTS)"; \
	export LD_PRELOAD=$$asan SKIRR_SAN_PRELOAD=$$asan PYTHONMALLOC=malloc \
	  PYTHONPATH=$(abspath $(SAN_SITE)) $(SAN_ENV) \
	  SKIRR_HYPOTHESIS_EXAMPLES=$${SKIRR_HYPOTHESIS_EXAMPLES:-200}; \
	$(SAN_PY) -c 'import skirr._native as n, os, sys; f = n.__file__; print("sanitize: using", f); sys.exit(0 if "$(SAN_SITE)" in f and "LD_PRELOAD" not in os.environ else 1)'; \
	rc=0; $(SAN_PY) -m pytest $(SAN_TESTS) $(SAN_PYTEST_ARGS) || rc=$$?; \
	unset LD_PRELOAD; \
	if ls $(SAN_DIR)/logs/* >/dev/null 2>&1; then \
	  echo "sanitize: sanitizer reports:" >&2; cat $(SAN_DIR)/logs/* >&2; exit 1; \
	fi; \
	exit $$rc
