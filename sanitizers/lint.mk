# sanitizers/lint.mk — `make lint`: clang-tidy (.clang-tidy) and clang-format (.clang-format).
#
# Stand-alone:  make -f sanitizers/lint.mk lint       (from the repository top)
# Included:     include sanitizers/lint.mk
#
# clang-tidy runs over the extension (with the Python and llhttp include paths), the C tests and
# the fuzz harnesses; `clang-format --dry-run --Werror` over the same files and the headers.
# `make format` rewrites them in place (clang-format -i). Debian: apt-get install clang-tidy
# clang-format.

LINT_TIDY ?= clang-tidy
LINT_FORMAT ?= clang-format
LINT_PY ?= python3
LINT_LLHTTP ?= python3 scripts/fetch_llhttp.py
LINT_C := $(wildcard src/*.c src/test/*.c fuzz/*.c)
LINT_H := $(wildcard src/*.h)

.PHONY: lint lint-tidy lint-format format

lint: lint-tidy lint-format

lint-tidy:
	@set -e; \
	pyinc=$$($(LINT_PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])'); \
	cflags="$$($(LINT_LLHTTP) --cflags)"; \
	echo "$(LINT_TIDY) --quiet $(LINT_C) -- -std=c11 -Isrc -I$$pyinc $$cflags"; \
	$(LINT_TIDY) --quiet $(LINT_C) -- -std=c11 -Isrc -I$$pyinc $$cflags

lint-format:
	$(LINT_FORMAT) --dry-run --Werror $(LINT_C) $(LINT_H)

format:
	$(LINT_FORMAT) -i $(LINT_C) $(LINT_H)
