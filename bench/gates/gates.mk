# The issue 5 gates (pass/fail, about 1 min): `make gates`. Included from the top-level Makefile
# (include bench/gates/gates.mk); uses its VPY and build.
#   gates-slow-reader: 4 clients x 64 MiB read 16 KiB per ms; skirr peak RSS <= idle + 48 MiB
#                      (uvicorn on the same app reported beside it; installed into the venv if missing)
#   gates-slow-peers:  200 half-heads closed by the head timeout, 200 stalled uploads by the body
#                      timeout, 200 stalled readers by the write timeout; descriptors, live
#                      objects and RSS back to idle
.PHONY: gates gates-slow-reader gates-slow-peers

gates: build
	@rc=0; \
	$(VPY) bench/gates/slow_reader.py || rc=1; \
	$(VPY) bench/gates/slow_peers.py || rc=1; \
	if [ $$rc -eq 0 ]; then echo "gates: PASS"; else echo "gates: FAIL"; fi; \
	exit $$rc

gates-slow-reader: build
	$(VPY) bench/gates/slow_reader.py

gates-slow-peers: build
	$(VPY) bench/gates/slow_peers.py
