# sanitizers/lint.mk — `make lint`: clang-tidy (.clang-tidy) and clang-format (.clang-format).
#
# Stand-alone:  make -f sanitizers/lint.mk lint       (from the repository top)
# Included:     include sanitizers/lint.mk
#
# clang-tidy runs over the extension (with the Python and llhttp include paths), the C tests and
# the fuzz harnesses and the WebSocket load generator bench/ws_load.c (bench/limit_http.c predates
# the format and is not checked); `clang-format --dry-run --Werror` over the same files and the headers.
# `make format` rewrites them in place (clang-format -i). Debian: apt-get install clang-tidy
# clang-format.

LINT_TIDY ?= clang-tidy
LINT_FORMAT ?= clang-format
LINT_PY ?= python3
LINT_LLHTTP ?= python3 scripts/fetch_llhttp.py
# clang-tidy processes side by side (one file each; xargs fails the target if any of them fails).
LINT_JOBS ?= 2
LINT_C := $(wildcard src/core/*.c src/core/test/*.c src/ext/*.c src/ext/test/*.c fuzz/*.c) bench/ws_load.c
LINT_H := $(wildcard src/core/*.h src/core/test/*.h src/ext/*.h fuzz/*.h)

.PHONY: lint lint-layers lint-tidy lint-format format

lint: lint-layers lint-tidy lint-format

# The byte-level core (src/core/) is plain C: it must never include Python.h or any header of
# the extension (src/ext/), so fuzzers, sanitizers and the C unit tests can drive it alone. The
# transport knows protocol handlers only through its handler table, so it includes none of theirs.
LINT_EXT_H := $(notdir $(wildcard src/ext/*.h))
lint-layers:
	@bad=$$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](Python\.h|$(subst $(eval) ,|,$(LINT_EXT_H)))[">]' \
	  src/core/*.c src/core/*.h src/core/test/*.c); \
	if [ -n "$$bad" ]; then \
	  echo "lint: the core (src/core/) includes Python.h or an extension header:"; echo "$$bad"; exit 1; \
	fi; echo "lint-layers: src/core/ includes neither Python.h nor src/ext/ headers"
	@bad=$$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"sk_(http1|asgi|server)\.h"' \
	  src/ext/sk_transport.c src/ext/sk_transport.h src/ext/sk_module.h); \
	if [ -n "$$bad" ]; then \
	  echo "lint: the transport includes a protocol handler's header (it knows handlers only"; \
	  echo "through sk_handler_ops_t):"; echo "$$bad"; exit 1; \
	fi; echo "lint-layers: the transport (src/ext/sk_transport.*) includes no handler header"
	@bad=$$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](Python\.h|$(subst $(eval) ,|,$(filter-out sk_stream.h sk_tls.h,$(LINT_EXT_H))))[">]' \
	  src/ext/sk_stream.c src/ext/sk_stream.h src/ext/sk_tls.c src/ext/sk_tls.h); \
	if [ -n "$$bad" ]; then \
	  echo "lint: the stream layer includes Python.h or another extension header (a layer is"; \
	  echo "plain C over a socket, below the transport):"; echo "$$bad"; exit 1; \
	fi; echo "lint-layers: the stream layers (src/ext/sk_stream.*, sk_tls.*) include neither Python.h nor another src/ext/ header"

lint-tidy:
	@set -e; \
	pyinc=$$($(LINT_PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])'); \
	cflags="$$($(LINT_LLHTTP) --cflags)"; \
	echo "$(LINT_TIDY) --quiet <$(words $(LINT_C)) files, $(LINT_JOBS) at a time> -- -std=c11 -Isrc/core -Isrc/ext -I$$pyinc $$cflags"; \
	printf '%s\n' $(LINT_C) | xargs -P $(LINT_JOBS) -n 1 sh -c \
	  '$(LINT_TIDY) --quiet "$$0" -- -std=c11 -Isrc/core -Isrc/ext -I'"$$pyinc $$cflags"

lint-format:
	$(LINT_FORMAT) --dry-run --Werror $(LINT_C) $(LINT_H)

format:
	$(LINT_FORMAT) -i $(LINT_C) $(LINT_H)
