"""skirr's benchmark harness as a package: bench/run.py is its command line.

    env.py        paths, the CPU split, tools, run folders, what the machine is
    workloads.py  the workloads: app, request shape, exact answer; the checking client
    peers.py      the servers: install, command lines, start and stop
    measure.py    one measured run: /proc CPU and memory, wrk, h2load, app CPU
    traced.py     the syscall gate (strace) and instructions per request (callgrind)
    charts.py     the report's charts: what each draws, the charts' venv, the PNG files
    report.py     rounds aggregated, verdicts, the markdown report
    matrix.py     profiles, plan and order of a matrix run, its metadata

Each module imports only modules above it in this list. Only the standard library is used; the
charts are drawn by draw.py, which runs in the charts' venv (bench/.venv-charts) with matplotlib
and imports none of these.
"""
