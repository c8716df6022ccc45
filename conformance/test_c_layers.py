"""The C sources' layers (issue 31): no circle between files.

A module is a file stem (``sk_http1`` = sk_http1.c + sk_http1.h); it depends on every module whose
header its .c or .h includes (``#include "x.h"``). The graph over src/core and src/ext must have no
cycle: a handler never includes another handler's header to borrow its settings, the ASGI layer
never includes a wire's. Read from the sources as they are, so a new include that closes a circle
fails here, naming it.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = [ROOT / "src" / "core", ROOT / "src" / "ext"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)\.h"', re.M)


def include_graph() -> dict[str, set[str]]:
    """{module: modules it includes}, over the project's own headers only."""
    files = [p for d in SRC for p in sorted(d.glob("*.[ch]"))]
    mods = {p.stem for p in files}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for p in files:
        for dep in INCLUDE.findall(p.read_text()):
            if dep in mods and dep != p.stem:
                graph[p.stem].add(dep)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (depth-first search, three colours)."""
    colour: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        colour[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if colour.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in colour:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        colour[m] = 2
        return None

    for m in sorted(graph):
        if m not in colour:
            found = visit(m)
            if found:
                return found
    return None


@pytest.mark.rule("skirr-layout-no-circle-c")
def test_no_include_circle():
    graph = include_graph()
    assert len(graph) >= 18 and "sk_http1" in graph and "sk_transport" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "C files include each other in a circle: " + " -> ".join(cycle)


@pytest.mark.rule("skirr-layout-no-circle-c")
def test_cycle_finder_finds_a_planted_circle():
    """The checker itself: a graph with a circle three long is reported as that circle."""
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(g) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.rule("skirr-layout-no-circle-c")
def test_transport_and_core_include_no_handler():
    """The transport knows no protocol; the core no extension (sk_transport.h's "Never"); the
    stream layer under the transport (sk_stream.h) and its slot allocator (sk_slab.h) are plain
    C that include nothing of the extension."""
    graph = include_graph()
    core = {p.stem for p in (ROOT / "src" / "core").glob("*.[ch]")}
    for m in core:
        assert graph[m] <= core, (m, graph[m] - core)
    allowed = {"sk_module", "sk_core", "sk_transport", "sk_stream", "sk_slab"}
    assert graph["sk_transport"] <= allowed | core, graph["sk_transport"]
    assert graph["sk_stream"] <= core, graph["sk_stream"]
    assert graph["sk_slab"] == set(), graph["sk_slab"]
    # the TLS layer (sk_tls.c over libssl) is a stream layer too: nothing above sk_stream
    assert graph["sk_tls"] <= core | {"sk_stream"}, graph["sk_tls"]


def reach(graph: dict[str, set[str]], m: str) -> set[str]:
    """Every module m includes, directly or through another header."""
    seen: set[str] = set()
    todo = list(graph[m])
    while todo:
        d = todo.pop()
        if d not in seen:
            seen.add(d)
            todo.extend(graph[d])
    return seen


@pytest.mark.rule("skirr-layout-no-circle-c")
def test_asgi_layer_reaches_no_wire():
    """The layers, bottom up: core; transport and its stream layer; the serving context and the
    ASGI exchange and session; the wires (HTTP/1.1, the WebSocket wire); the Server. The ASGI
    exchange (sk_exchange) and session (sk_wssession) reach no wire's header, even through
    another header: an HTTP/2 stream drives them through their tables. The WebSocket wire
    reaches no HTTP/1.1 handler's (the upgrade hands over through sk_wsh_start and the
    transport's switch), and no handler reaches the Server."""
    graph = include_graph()
    wires = {"sk_http1", "sk_wsh"}
    for m in ("sk_exchange", "sk_wssession"):
        assert not reach(graph, m) & (wires | {"sk_server"}), (m, reach(graph, m) & wires)
    assert "sk_exchange" not in reach(graph, "sk_wssession")
    assert "sk_wssession" not in reach(graph, "sk_exchange")
    assert "sk_http1" not in reach(graph, "sk_wsh")
    for m in wires | {"sk_serve", "sk_access", "sk_transport", "sk_stream", "sk_tls"}:
        assert "sk_server" not in reach(graph, m), m
