# fuzz/fuzz.mk — `make fuzz` and `make fuzz-smoke`: libFuzzer and AFL++ over the byte-level core.
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
FUZZ_HARNESSES ?= request response ws
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

FUZZ_LIBFUZZER_BINS := $(foreach h,$(FUZZ_HARNESSES),$(FUZZ_DIR)/$(h)/libfuzzer)
FUZZ_AFL_BINS := $(foreach h,$(FUZZ_HARNESSES),$(FUZZ_DIR)/$(h)/afl-bin)

.PHONY: fuzz fuzz-smoke fuzz-build fuzz-seeds

fuzz: fuzz-build
	@FUZZ_DIR=$(FUZZ_DIR) sh fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_HARNESSES)

fuzz-smoke: fuzz-build
	@FUZZ_DIR=$(FUZZ_DIR) sh fuzz/run.sh $(FUZZ_SMOKE_SECONDS) $(FUZZ_HARNESSES)

fuzz-build: $(FUZZ_LIBFUZZER_BINS) $(FUZZ_AFL_BINS)

# Regenerates fuzz/corpus/ (checked in) from the list in make_seeds.py and the conformance cases.
fuzz-seeds:
	$(FUZZ_PY) fuzz/make_seeds.py

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
