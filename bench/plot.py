#!/usr/bin/env python3
"""Bar charts of dispatch-bench results: one chart per suite, the cases along x, the median
time of each backend, auto and the peers side by side on a log scale. PNG and SVG.

    python3 bench/plot.py --mode sync --out results/plots ours.json [peer.json ...]

Each case uses the chosen mode; a bar is missing where a backend did not run (n/a, skipped,
wrong). Needs matplotlib; without it the script says so and exits with status 2.
"""
import argparse
import os
import sys

from check_results import Invalid, read_results


# One order and one colour per backend in every chart, so that charts can be compared at a glance.
ORDER = ["cpu", "clblast", "fused", "clblast+fused", "auto", "numpy", "torch-cuda", "torch-cpu"]
COLORS = {"cpu": "#1f77b4", "clblast": "#ff7f0e", "fused": "#2ca02c", "clblast+fused": "#d62728",
          "auto": "#9467bd", "numpy": "#7f7f7f", "torch-cuda": "#8c564b", "torch-cpu": "#e377c2"}


def load(paths):
    """The result rows of all files, and the device name of the first (ours)."""
    rows, device = [], None
    for path in paths:
        try:  # read and checked as dispatch-bench reads it (bench/SCHEMA.md)
            doc = read_results(path)
        except Invalid as e:
            print(f"plot: {e}", file=sys.stderr)
            sys.exit(2)
        if device is None:
            device = (doc.get("device") or {}).get("name")
        for r in doc["results"]:
            rows.append(r)
    return rows, device


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("files", nargs="+", help="result files (ours first, then peers)")
    p.add_argument("--mode", default="sync", choices=["device", "sync", "chain"])
    p.add_argument("--out", default="plots", help="output folder")
    args = p.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot: matplotlib is not installed (Debian: apt-get install python3-matplotlib);"
              " no plots written", file=sys.stderr)
        return 2
    rows, device = load(args.files)
    os.makedirs(args.out, exist_ok=True)
    suites = []
    for r in rows:
        if r["suite"] not in suites:
            suites.append(r["suite"])
    written = []
    for suite in suites:
        cases, backends, t = [], [], {}
        for r in rows:
            if r["suite"] != suite:
                continue
            if r["case"] not in cases:
                cases.append(r["case"])
            stats = r.get("modes", {}).get(args.mode)
            if r["status"] != "ok" or not stats:
                continue
            name = r["backend"]
            if name not in backends:
                backends.append(name)
            t[(r["case"], name)] = stats["median_s"] * 1e6
        if not backends:
            continue
        backends.sort(key=lambda b: ORDER.index(b) if b in ORDER else len(ORDER))
        fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(cases) + 2), 4.5))
        width = 0.8 / len(backends)
        for i, b in enumerate(backends):
            xs = [j + (i - (len(backends) - 1) / 2) * width for j, c in enumerate(cases)
                  if (c, b) in t]
            ys = [t[(c, b)] for c in cases if (c, b) in t]
            ax.bar(xs, ys, width, label=b, color=COLORS.get(b))
        ax.set_yscale("log")
        ax.set_ylabel(f"median time per op, us ({args.mode} mode; lower is better)")
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels(cases, rotation=30, ha="right", fontsize=8)
        where = f" on {device}" if device else ""
        ax.set_title(f"dispatch-bench, suite {suite}, {args.mode} mode{where}", fontsize=10)
        # Outside the axes: tall bars in any corner would hide under it.
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        ax.grid(axis="y", which="both", alpha=0.3)
        fig.tight_layout()
        for ext in ("png", "svg"):
            path = os.path.join(args.out, f"{suite}-{args.mode}.{ext}")
            fig.savefig(path, dpi=100)
            written.append(path)
        plt.close(fig)
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
