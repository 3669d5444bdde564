"""Draw the side-by-side chart (nimblemcp vs the official SDK vs FastMCP) from results json.

    python benchmarks/chart.py [--results benchmarks/results] [--out benchmarks/chart.png]

Reads what the other scripts saved in benchmarks/results/ (http_throughput.json,
stdio_roundtrip.json, cold_start.json, client_roundtrip.json; any that is missing is left
out of the chart) and draws one panel per figure, one bar per library, each labelled with
its value and its ratio to `mcp` (above 1: better than mcp, whichever way the
figure points). Needs matplotlib: the `bench` extra
(`pip install -e '.[bench]'`), which _peers.sh installs into benchmarks/.venv-nimble; run
from another interpreter, this script re-executes itself there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from _common import NIMBLE_PY, RESULTS, ensure_peers

try:
    import matplotlib
except ImportError:  # not in the driver's interpreter: use the benchmark venv
    ensure_peers()
    os.execv(NIMBLE_PY, [NIMBLE_PY, str(Path(__file__).resolve()), *sys.argv[1:]])

matplotlib.use("Agg")
import matplotlib.pyplot as plt

HERE = Path(__file__).resolve().parent
COLOURS = {"nimblemcp": "#2a7ab0", "mcp": "#d9822b", "FastMCP": "#7a5cad", "bare ASGI app": "#9a9a9a"}
LABELS = {"nimblemcp-run": "nimblemcp run (own engine)", "nimblemcp": "nimblemcp",
          "nimblemcp-async": "nimblemcp (async tool)", "mcp": "mcp",
          "fastmcp": "FastMCP", "bare-asgi": "bare ASGI app on uvicorn",
          "bare-asgi-engine": "bare ASGI app on our engine"}
# http_throughput's "nimblemcp" row is the guarded app under uvicorn (the run row is the engine)
HTTP_LABELS = {"nimblemcp": "nimblemcp app under uvicorn"}
# panel: (results file, key of the value, title, unit, higher is better, names in order)
PANELS = [
    ("http_throughput", "rps", "HTTP tools/call, 64 connections", "req/s", True,
     ["nimblemcp-run", "nimblemcp", "mcp", "fastmcp", "bare-asgi", "bare-asgi-engine"]),
    ("http_throughput", "p99_ms", "HTTP tools/call p99 latency", "ms", False,
     ["nimblemcp-run", "nimblemcp", "mcp", "fastmcp", "bare-asgi", "bare-asgi-engine"]),
    ("stdio_roundtrip", "median_us", "stdio tools/call round trip (median)", "µs", False,
     ["nimblemcp", "nimblemcp-async", "mcp", "fastmcp"]),
    ("cold_start", "median_ms", "spawn to first server/discover (stdio)", "ms", False,
     ["nimblemcp", "mcp", "fastmcp"]),
    ("client_roundtrip", "median_us", "HTTP client, per call (median)", "µs", False,
     ["nimblemcp", "mcp", "fastmcp"]),
    ("client_roundtrip", "first_call_ms", "HTTP client, imports to first result", "ms", False,
     ["nimblemcp", "mcp", "fastmcp"]),
]


def colour(name: str) -> str:
    label = LABELS.get(name, name)
    return next((c for k, c in COLOURS.items() if label.startswith(k)), "#555555")


def load_results(folder: Path) -> dict[str, dict[str, dict[str, float]]]:
    found = {}
    for stem in {p[0] for p in PANELS}:
        path = folder / f"{stem}.json"
        if path.exists():
            data = json.loads(path.read_text())
            rows = data.get("results", data)
            if any("/" in name for name in rows):  # client_roundtrip keys rows "wire/client": the HTTP ones
                rows = {name.split("/", 1)[1]: row for name, row in rows.items() if name.startswith("http/")}
            found[stem] = rows
    return found


def fmt(value: float, unit: str) -> str:
    if unit == "req/s":
        return f"{value / 1000:.1f}k"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def draw(results: dict[str, dict[str, dict[str, float]]], out: Path, note: str) -> int:
    panels = []
    for stem, key, title, unit, higher, names in PANELS:
        rows = [(n, float(results[stem][n][key])) for n in names
                if stem in results and isinstance(results[stem].get(n), dict) and key in results[stem][n]]
        if rows:
            panels.append((stem, key, title, unit, higher, rows))
    if not panels:
        raise SystemExit(f"no results json found in {RESULTS}: run benchmarks/run_all.py first")
    cols = 2
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(11, 2.3 * nrows + 0.9), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, (stem, _key, title, unit, higher, rows) in zip(axes.flat, panels, strict=False):
        names = [HTTP_LABELS.get(n, LABELS.get(n, n)) if stem == "http_throughput" else LABELS.get(n, n)
                 for n, _ in rows][::-1]
        values = [v for _, v in rows][::-1]
        ax.barh(names, values, color=[colour(n) for n, _ in rows][::-1])
        ref = dict(rows).get("mcp")
        for y, (name, v) in enumerate(zip(names, values, strict=True)):
            text = f" {fmt(v, unit)} {unit}"
            if ref and name != "mcp" and not name.startswith("bare"):
                ratio = v / ref if higher else ref / v  # > 1: better than mcp
                text += f"   {ratio:.1f}x vs mcp"
            ax.text(v, y, text, va="center", fontsize=8)
        ax.set_title(title + (" — higher is better" if higher else " — lower is better"), fontsize=9.5)
        ax.set_xlim(0, max(values) * 1.75)
        ax.tick_params(axis="both", labelsize=8)
        ax.spines[["top", "right"]].set_visible(False)
        ax.set_xticks([])
    fig.suptitle("nimblemcp vs the official SDK (mcp) vs FastMCP: the same echo tool, side by side",
                 fontsize=11)
    fig.text(0.5, 0.005, note, ha="center", fontsize=7.5, color="#555555")
    fig.tight_layout(rect=(0, 0.03, 1, 0.96))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return len(panels)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--out", type=Path, default=HERE / "chart.png")
    ap.add_argument("--note", default="", help="added to the footer (e.g. the machine's load)")
    args = ap.parse_args()
    files = [args.results / f"{stem}.json" for stem in {p[0] for p in PANELS}]
    newest = max((f.stat().st_mtime for f in files if f.exists()), default=0.0)
    when = time.strftime("%Y-%m-%d", time.gmtime(newest)) if newest else "?"
    note = (f"Results of {when}, {os.cpu_count()}-core machine{'; ' + args.note if args.note else ''}; "
            "medians of interleaved rounds; compare ratios, not absolute figures (benchmarks/README.md)")
    n = draw(load_results(args.results), args.out, note)
    print(f"wrote {args.out} ({n} panels)")


if __name__ == "__main__":
    main()
