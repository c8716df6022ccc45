# `make testssl` (issue 32): Debian's testssl.sh against a local skirr serving TLS on a loopback
# port with a test CA and certificate (scripts/testssl.py says what it runs and how it judges);
# fails on any finding rated above LOW, listing them. TESTSSL_SCOPE=ci runs the fast subset
# (protocols, cipher categories, forward secrecy, vulnerabilities). testssl.sh is installed with
# apt-get when it is missing and this runs as root, as the bench verbs install their tools.
TESTSSL_SCOPE ?= full

.PHONY: testssl

testssl: build
	@command -v testssl >/dev/null 2>&1 || command -v testssl.sh >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends testssl.sh >/dev/null; } || true
	$(VPY) scripts/testssl.py --python $(VPY) --scope $(TESTSSL_SCOPE)
