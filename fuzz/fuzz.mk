# fuzz/fuzz.mk — `make fuzz` and `make fuzz-smoke`: libFuzzer and AFL++ over the byte-level core
# (request, response, ws) and the HTTP/2 handler with its exchanges stubbed (h2).
#
# Stand-alone:  make -f fuzz/fuzz.mk fuzz FUZZ_SECONDS=60    (from the repository top)
# Included:     include fuzz/fuzz.mk                          (from the top-level Makefile)
#
# Each harness (fuzz/fuzz_<name>.c) runs FUZZ_SECONDS under libFuzzer, then FUZZ_SECONDS under
# AFL++ (persistent mode, started from the corpus libFuzzer grew; what AFL++ finds is copied back
# for the next run). One fuzzer process at a time. Any crash fails the target and is left in
# build/fuzz/<name>/crashes/ (libFuzzer) or build/fuzz/<name>/afl/default/crashes/ (AFL++): copy
# it to fuzz/regressions/<name>/, fix the bug, add a C unit test. Working corpora live in
# build/fuzz/<name>/corpus/ (seeded from fuzz/corpus/<name>/ and fuzz/regressions/<name>/).
# Needs clang (with libFuzzer: libclang-rt-dev) and afl++ (Debian packages clang, afl++).

FUZZ_SECONDS ?= 300
FUZZ_SMOKE_SECONDS ?= 60
FUZZ_HARNESSES ?= request response ws h2
FUZZ_DIR ?= build/fuzz
FUZZ_PY ?= python3
FUZZ_LLHTTP ?= $(FUZZ_PY) scripts/fetch_llhttp.py
FUZZ_CLANG ?= clang
FUZZ_AFL_CC ?= afl-clang-fast
FUZZ_SANITIZE ?= -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_CFLAGS ?= -std=c11 -g -O1 -fno-omit-frame-pointer
FUZZ_CORE := $(wildcard src/core/*.c)
FUZZ_CORE_DEPS := $(FUZZ_CORE) $(wildcard src/core/*.h)

# llhttp is located in the recipes only (recursive variables), so merely reading this file never
# downloads anything.
fuzz_llhttp_cflags = $$($(FUZZ_LLHTTP) --cflags)
fuzz_llhttp_sources = $$($(FUZZ_LLHTTP) --sources)

# The HTTP/2 harness (fuzz/fuzz_h2.c) also compiles the handler (src/ext/sk_h2.c, unchanged) and
# its budgets (sk_h2guard.c) against Python.h (only its headers: no libpython is linked, the
# harness defines the few CPython functions the handler reaches) and links nghttp2 (pkg-config
# libnghttp2, or the plain name).
FUZZ_H2_SOURCES := src/ext/sk_h2.c src/ext/sk_h2guard.c
FUZZ_H2_DEPS := $(FUZZ_H2_SOURCES) $(wildcard src/ext/*.h)
fuzz_h2_cflags = -Isrc/ext -I$$($(FUZZ_PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])') \
  $$(pkg-config --cflags libnghttp2 2>/dev/null)
fuzz_h2_libs = $$(pkg-config --libs libnghttp2 2>/dev/null || echo -lnghttp2) -lm
# The replay build (fuzz-replay): the harness over fuzz/replay.c, no fuzzer, ASan and UBSan; clang
# when present (its UBSan also reports NULL + 0), else gcc.
FUZZ_REPLAY_CC ?= $(shell command -v clang >/dev/null 2>&1 && echo clang || echo gcc)
FUZZ_REPLAY_SANITIZE ?= -fsanitize=address,undefined -fno-sanitize-recover=all

FUZZ_LIBFUZZER_BINS := $(foreach h,$(FUZZ_HARNESSES),$(FUZZ_DIR)/$(h)/libfuzzer)
FUZZ_AFL_BINS := $(foreach h,$(FUZZ_HARNESSES),$(FUZZ_DIR)/$(h)/afl-bin)

.PHONY: fuzz fuzz-smoke fuzz-build fuzz-seeds fuzz-replay

fuzz: fuzz-build
	@FUZZ_DIR=$(FUZZ_DIR) sh fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_HARNESSES)

fuzz-smoke: fuzz-build
	@FUZZ_DIR=$(FUZZ_DIR) sh fuzz/run.sh $(FUZZ_SMOKE_SECONDS) $(FUZZ_HARNESSES)

fuzz-build: $(FUZZ_LIBFUZZER_BINS) $(FUZZ_AFL_BINS)

# Regenerates fuzz/corpus/ (checked in) from the list in make_seeds.py and the conformance cases;
# the HTTP/2 seeds need the h2, hpack and hyperframe packages (the test requirements: .venv's).
FUZZ_SEEDS_PY ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,$(FUZZ_PY))
fuzz-seeds:
	$(FUZZ_SEEDS_PY) fuzz/make_seeds.py

# Every seed and reproducer of FUZZ_HARNESSES run once through the replay build of its harness
# (ASan, UBSan, LeakSanitizer): no fuzzer needed. The suite's h2-fuzz-harness case runs it for h2.
fuzz-replay: $(foreach h,$(FUZZ_HARNESSES),$(FUZZ_DIR)/$(h)/replay)
	@set -e; for h in $(FUZZ_HARNESSES); do \
	  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	    $(FUZZ_DIR)/$$h/replay fuzz/corpus/$$h fuzz/regressions/$$h; \
	done

# libFuzzer: the harness, the core and llhttp all instrumented, with ASan and UBSan.
$(FUZZ_DIR)/%/libfuzzer: fuzz/fuzz_%.c $(FUZZ_CORE_DEPS) fuzz/fuzz.mk
	@mkdir -p $(@D)
	$(FUZZ_CLANG) $(FUZZ_CFLAGS) -fsanitize=fuzzer $(FUZZ_SANITIZE) -Isrc/core $(fuzz_llhttp_cflags) \
	  $< $(FUZZ_CORE) $(fuzz_llhttp_sources) -o $@ -w

# AFL++: the same harness behind fuzz/afl_driver.c (persistent mode, shared-memory test cases),
# with ASan and UBSan (AFL_USE_ASAN/AFL_USE_UBSAN).
$(FUZZ_DIR)/%/afl-bin: fuzz/fuzz_%.c fuzz/afl_driver.c $(FUZZ_CORE_DEPS) fuzz/fuzz.mk
	@mkdir -p $(@D)
	AFL_USE_ASAN=1 AFL_USE_UBSAN=1 AFL_QUIET=1 $(FUZZ_AFL_CC) $(FUZZ_CFLAGS) -Isrc/core \
	  $(fuzz_llhttp_cflags) $< fuzz/afl_driver.c $(FUZZ_CORE) $(fuzz_llhttp_sources) -o $@ -w

# The replay build of each harness (fuzz-replay).
$(FUZZ_DIR)/%/replay: fuzz/fuzz_%.c fuzz/replay.c $(FUZZ_CORE_DEPS) fuzz/fuzz.mk
	@mkdir -p $(@D)
	$(FUZZ_REPLAY_CC) $(FUZZ_CFLAGS) $(FUZZ_REPLAY_SANITIZE) -Isrc/core $(fuzz_llhttp_cflags) \
	  $< fuzz/replay.c $(FUZZ_CORE) $(fuzz_llhttp_sources) -o $@ -w

# The HTTP/2 harness's three builds: as above, with the handler, Python.h's directory and nghttp2.
# llhttp is not what this harness exercises (sk_h2.c only asks the core for method ids), so it is
# compiled once, without instrumentation, into $(FUZZ_DIR)/h2/llhttp.a for all three: its
# instrumented compile is most of a build's time (CI's fuzz-smoke).
$(FUZZ_DIR)/h2/llhttp.a: scripts/fetch_llhttp.py fuzz/fuzz.mk
	@mkdir -p $(@D)/llhttp
	@set -e; objs=""; for src in $(fuzz_llhttp_sources); do \
	  obj=$(@D)/llhttp/$$(basename $$src .c).o; \
	  echo "$(FUZZ_REPLAY_CC) -std=c11 -O1 -c $$src"; \
	  $(FUZZ_REPLAY_CC) -std=c11 -O1 -fno-omit-frame-pointer $(fuzz_llhttp_cflags) -c $$src -o $$obj -w; \
	  objs="$$objs $$obj"; \
	done; rm -f $@; ar rcs $@ $$objs

$(FUZZ_DIR)/h2/libfuzzer: fuzz/fuzz_h2.c fuzz/fuzz_common.h $(FUZZ_CORE_DEPS) $(FUZZ_H2_DEPS) fuzz/fuzz.mk $(FUZZ_DIR)/h2/llhttp.a
	$(FUZZ_CLANG) $(FUZZ_CFLAGS) -fsanitize=fuzzer $(FUZZ_SANITIZE) -Isrc/core $(fuzz_llhttp_cflags) \
	  $(fuzz_h2_cflags) $< $(FUZZ_H2_SOURCES) $(FUZZ_CORE) $(@D)/llhttp.a $(fuzz_h2_libs) -o $@ -w

$(FUZZ_DIR)/h2/afl-bin: fuzz/fuzz_h2.c fuzz/fuzz_common.h fuzz/afl_driver.c $(FUZZ_CORE_DEPS) $(FUZZ_H2_DEPS) fuzz/fuzz.mk $(FUZZ_DIR)/h2/llhttp.a
	AFL_USE_ASAN=1 AFL_USE_UBSAN=1 AFL_QUIET=1 $(FUZZ_AFL_CC) $(FUZZ_CFLAGS) -Isrc/core \
	  $(fuzz_llhttp_cflags) $(fuzz_h2_cflags) $< fuzz/afl_driver.c $(FUZZ_H2_SOURCES) $(FUZZ_CORE) \
	  $(@D)/llhttp.a $(fuzz_h2_libs) -o $@ -w

$(FUZZ_DIR)/h2/replay: fuzz/fuzz_h2.c fuzz/fuzz_common.h fuzz/replay.c $(FUZZ_CORE_DEPS) $(FUZZ_H2_DEPS) fuzz/fuzz.mk $(FUZZ_DIR)/h2/llhttp.a
	$(FUZZ_REPLAY_CC) $(FUZZ_CFLAGS) $(FUZZ_REPLAY_SANITIZE) -Isrc/core \
	  $(fuzz_llhttp_cflags) $(fuzz_h2_cflags) $< fuzz/replay.c $(FUZZ_H2_SOURCES) $(FUZZ_CORE) \
	  $(@D)/llhttp.a $(fuzz_h2_libs) -o $@ -w
