# The Autobahn|Testsuite run (issue 14), included by the Makefile.
#
#   make autobahn                          every case (1.* to 13.*) against skirr's echo app
#   make autobahn AUTOBAHN_CASES='1.* 2.*' a subset (the suite's case ids, fnmatch patterns)
#   make autobahn AUTOBAHN_PEERS=uvicorn   uvicorn (bench/peers.txt's pins) beside skirr, same run
#   make autobahn-smoke                    the CI smoke: cases 1.* to 7.* against skirr only, the
#                                          summary in build/autobahn/smoke.md (AUTOBAHN.md kept)
#
# conformance/autobahn/run.py installs autobahntestsuite from PyPI into build/autobahn/ on first
# use (Python 2.7, from pyenv or $AUTOBAHN_PY2), serves conformance/autobahn/echo.py on a free
# 127.0.0.1 port, runs the suite's fuzzingclient and prints the summary, also written to
# conformance/AUTOBAHN.md. Fails when a case is FAILED or NON-STRICT. AUTOBAHN_ARGS: more options
# of run.py (e.g. --loop asyncio).

AUTOBAHN_CASES ?= *
AUTOBAHN_PEERS ?=
AUTOBAHN_ARGS ?=

AUTOBAHN_SMOKE_CASES = 1.* 2.* 3.* 4.* 5.* 6.* 7.*

.PHONY: autobahn autobahn-smoke

autobahn: build
	$(VPY) conformance/autobahn/run.py --cases '$(AUTOBAHN_CASES)' --peers '$(AUTOBAHN_PEERS)' \
	  $(AUTOBAHN_ARGS)

autobahn-smoke: build
	$(VPY) conformance/autobahn/run.py --cases '$(AUTOBAHN_SMOKE_CASES)' \
	  --output build/autobahn/smoke.md $(AUTOBAHN_ARGS)
