"""fastapi_cpu's work (bench/apps/fastapi_json.py): pure-Python arithmetic, no I/O, no C call
that could release the GIL, so a GIL build runs one at a time per process and a free-threaded
build runs as many at once as there are threads and cores. About 1 ms on this machine's 3.11.

The harness takes the expected body from here (bench/harness/workloads.py), never from a copy.
"""
CPU_N = 20_000  # loop iterations per request


def cpu_work(n=CPU_N):
    """The sum of i * i % 7 for i below n (an int)."""
    return sum(i * i % 7 for i in range(n))


CPU_BODY = b'{"n":%d,"sum":%d}' % (CPU_N, cpu_work())
