"""Draws the report's charts with matplotlib (Agg backend, no display).

Run by charts.py in the charts' venv (bench/.venv-charts, matplotlib from bench/charts.txt) as
`python draw.py OUTDIR` with {"charts": [spec, ...]} (charts.py's chart specs) on its standard
input; writes one PNG per spec into OUTDIR under the spec's file name and prints one JSON line:
{"drawn": [file, ...], "failed": {file: why}}, or {"error": why} when matplotlib cannot be
imported.

Never: reads a run's results or chooses what is drawn (charts.py does); imports nothing of the
harness (it runs in another venv); a chart that fails is reported, the others are still drawn.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path


def main():
    outdir = Path(sys.argv[1])
    job = json.load(sys.stdin)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        print(json.dumps({"error": f"matplotlib is not installed in {sys.executable} ({exc})"}))
        return 0
    drawn, failed = [], {}
    for spec in job["charts"]:
        try:
            fig = figure(plt, spec)
            try:
                fig.savefig(outdir / spec["file"], dpi=spec["dpi"], metadata={"Software": None})
            finally:
                plt.close(fig)
            drawn.append(spec["file"])
        except Exception as exc:  # noqa: BLE001 - one chart's failure is reported, not fatal
            failed[spec["file"]] = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"drawn": drawn, "failed": failed}))
    return 0


def figure(plt, spec):
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig = plt.figure(figsize=spec["size"], dpi=spec["dpi"], layout="constrained")
    fig.suptitle(spec["title"], fontsize=13, fontweight="bold")
    if spec["legend_kind"] == "patch":
        handles = [Patch(facecolor=c, label=s) for s, c, _ in spec["legend"]]
    else:
        handles = [Line2D([], [], color=c, marker="o", linestyle="--" if dashed else "-", label=s)
                   for s, c, dashed in spec["legend"]]
    rows = spec["rows"]
    # A band for the legend above the rows (a figure legend outside the axes would overlap the
    # title once the rows are subfigures).
    head, *subfigs = fig.subfigures(len(rows) + 1, 1, squeeze=False,
                                    height_ratios=spec["heights"])[:, 0]
    head.legend(handles=handles, loc="center", ncols=min(len(handles), 10), frameon=False,
                fontsize=9)
    for sub, row in zip(subfigs, rows):
        # Bars: a facet's width in proportion to its groups; lines: `columns` equal slots a row
        # (the last row's spare ones left empty), or the row's facets sharing it.
        weights = [len(f["groups"]) if f["kind"] == "bars" else 1 for f in row]
        slots = max(spec.get("columns") or len(row), len(row))
        weights += [1] * (slots - len(row))
        share = any(f.get("share_y") for f in row)
        axes = sub.subplots(1, slots, squeeze=False, width_ratios=weights, sharey=share)[0]
        for ax, facet in zip(axes, row):
            (bars if facet["kind"] == "bars" else lines)(ax, facet)
        if share and row[0].get("log_y"):  # the shared axis's span is known only now
            log_ticks(axes[0])
        for ax in axes[len(row):]:
            ax.set_axis_off()
    if spec.get("footnote"):
        fig.supxlabel(spec["footnote"], fontsize=8, color="#555555")
    return fig


def bars(ax, f):
    """Grouped bars: groups along x, a bar per series in each, its value above it."""
    n = len(f["series"])
    width = 0.84 / max(n, 1)
    top = max((y for s in f["series"] for y in s["y"] if y is not None), default=1.0)
    for i, s in enumerate(f["series"]):
        off = (i - (n - 1) / 2) * width
        pts = [(g + off, y) for g, y in enumerate(s["y"]) if y is not None]
        if pts:
            cont = ax.bar([x for x, _ in pts], [y for _, y in pts], width * 0.92, color=s["color"],
                          label=s["label"])
            ax.bar_label(cont, labels=[f["value_fmt"].format(y) for _, y in pts], padding=2,
                         rotation=90, fontsize=7)
        for g, mark in enumerate(s.get("marks") or []):
            if mark:
                ax.text(g + off, top * 0.02, mark, rotation=90, ha="center", va="bottom",
                        fontsize=7, color=s["color"])
    ax.set_xticks(range(len(f["groups"])), f["groups"])
    ax.set_xlim(-0.5, len(f["groups"]) - 0.5)
    ax.set_ylim(0, top * 1.25)
    ax.set_ylabel(f["ylabel"])
    ax.set_title(f["title"], fontsize=11)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def lines(ax, f):
    """A line per series over x (log2 or categorical), optional min–max error bars, optional log y."""
    from matplotlib.ticker import FuncFormatter, NullLocator

    for s in f["series"]:
        pts = [(x, y, lo, hi) for x, y, lo, hi in zip(f["x"], s["y"], s.get("lo") or [None] * len(
            s["y"]), s.get("hi") or [None] * len(s["y"])) if y is not None]
        if not pts:
            continue
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        style = "--" if s.get("dashed") else "-"
        if all(p[2] is not None and p[3] is not None for p in pts):
            err = [[y - lo for _, y, lo, _ in pts], [hi - y for _, y, _, hi in pts]]
            ax.errorbar(xs, ys, yerr=err, color=s["color"], marker="o", markersize=4, capsize=3,
                        linewidth=1.6, linestyle=style, label=s["label"])
        else:
            ax.plot(xs, ys, color=s["color"], marker="o", markersize=4, linewidth=1.6,
                    linestyle=style, label=s["label"])
    if f.get("log2_x"):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(f["x"], f["xticklabels"])
    def unit(v):
        if f.get("y_thousands") and v >= 1e6:
            return f"{v / 1e6:g}M"
        if f.get("y_thousands") and v >= 1e3:
            return f"{v / 1e3:g}k"
        return f"{v:g}"
    if f.get("share_y"):
        ax.tick_params(labelleft=True)
    if f.get("log_y"):
        ax.set_yscale("log")
        log_ticks(ax)
        ax.grid(True, which="both", axis="y", alpha=0.25)
    else:
        ax.set_ylim(bottom=0)
        ax.grid(True, axis="y", alpha=0.3)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: unit(v)))
    ax.set_xlabel(f["xlabel"])
    ax.set_ylabel(f["ylabel"])
    ax.set_title(f["title"], fontsize=11)
    ax.set_axisbelow(True)


def log_ticks(ax):
    """Plain numbers on a log y axis (0.5, 1, 2, 5 rather than 5×10⁻¹), as many per decade as the
    axis's span allows; the minor ticks unlabelled."""
    from matplotlib.ticker import LogLocator, NullFormatter

    lo, hi = ax.get_ylim()
    decades = math.log10(hi / lo)
    subs = (1.0,) if decades > 2.5 else (1.0, 2.0, 5.0) if decades > 0.8 else (
        1.0, 1.5, 2.0, 3.0, 5.0, 7.0)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_minor_formatter(NullFormatter())


if __name__ == "__main__":
    sys.exit(main())
