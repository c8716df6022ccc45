# skirr's verbs. `make run` serves examples/app.py on 127.0.0.1:8000; `make test` runs every test.
# Another interpreter: make test PY=$(pyenv root)/versions/3.12.1/bin/python3 (the venv is remade
# when PY or the test dependencies change).

PY ?= python3
VENV ?= .venv
CC ?= cc
VPY := $(VENV)/bin/python
# Test and example dependencies (the package itself needs none; uvloop is its optional extra).
TEST_DEPS := pytest pytest-timeout h11 hypothesis uvloop fastapi pydantic gunicorn watchfiles websockets \
  python-dotenv PyYAML prometheus-client
# Identifies the venv: the interpreter's path and version plus TEST_DEPS.
PY_EXE := $(shell $(PY) -c 'import sys; print(sys.executable, sys.version.split()[0])' 2>/dev/null)
PY_ID := $(PY_EXE) $(TEST_DEPS)

SK_SOURCES := $(wildcard src/core/*.c src/core/*.h src/ext/*.c src/ext/*.h src/skirr/*.py src/skirr/*.pyi)
CORE_SOURCES := $(wildcard src/core/*.c)
# The WebSocket frame codec's tests need only it and the buffer (no llhttp).
WS_CORE_SOURCES := src/core/sk_core.c src/core/sk_ws.c
LLHTTP_FETCH := $(PY) scripts/fetch_llhttp.py
LLHTTP_OBJ_DIR := build/test-c/llhttp

.PHONY: venv build run test test-c conformance fuzz sanitize bench clean FORCE

venv: $(VENV)/.skirr-venv

# Remade only when PY_ID changes (FORCE runs the check; the file is rewritten only on change, so
# what depends on it is rebuilt only then).
$(VENV)/.skirr-venv: FORCE
	@if [ "$$(cat $@ 2>/dev/null)" != "$(PY_ID)" ]; then \
	  set -e; \
	  [ -n "$(PY_EXE)" ] || { echo "make: $(PY) is not a working Python" >&2; exit 1; }; \
	  echo "creating $(VENV) with $(PY)"; \
	  rm -rf $(VENV); \
	  $(PY) -m venv $(VENV); \
	  $(VPY) -m pip install -q $(TEST_DEPS); \
	  echo "$(PY_ID)" > $@; \
	fi

build: $(VENV)/.skirr-build

# The real, non-editable install of the wheel; skirr has no runtime dependencies to (re)install.
$(VENV)/.skirr-build: $(VENV)/.skirr-venv $(SK_SOURCES) pyproject.toml setup.py scripts/fetch_llhttp.py
	$(VPY) -m pip install -q --no-deps --force-reinstall .
	@touch $@

run: build
	$(VPY) -m skirr app:app --app-dir examples --host 127.0.0.1 --port 8000

test: build test-c
	$(VPY) -m pytest conformance -q

# The sans-I/O core's plain-C unit tests (no Python): test_core (HTTP, over llhttp, compiled
# without -Werror) and test_ws (the WebSocket frame codec).
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
	build/test_core; \
	build/test_ws

clean:
	rm -rf build dist src/skirr.egg-info src/*.egg-info

FORCE:

# Verbs that live beside what they drive.
include conformance/conformance.mk
include bench/bench.mk
include bench/gates/gates.mk
SAN_PY := $(VPY)
SAN_PREREQ := venv
include fuzz/fuzz.mk
include sanitizers/sanitize.mk
include sanitizers/lint.mk
