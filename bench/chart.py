"""Chart of the side-by-side drain and latency medians (PostgreSQL) from a results.json.

    bench/.peers/chart/bin/python bench/chart.py bench/results/latest.json bench/chart.png

Runs in the bench-only venv bench/.peers/chart (matplotlib, pinned in
bench/requirements-chart.txt); bench/run_all.py calls it at the end of a run.
"""

import json
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def label(system, config):
    return system if config == "default" else f"{system} ({config})"


def main(src, dst):
    with open(src) as f:
        data = json.load(f)
    records = [r for r in data["records"] if r["db"] == "postgres"]
    drain = defaultdict(list)
    latency = defaultdict(lambda: ([], []))
    variants, cells = [], []
    for r in records:
        v = label(r["system"], r["config"])
        if r["scenario"] == "drain":
            cell = (r["n"], r["concurrency"])
            drain[(cell, v)].append(r["jobs_per_s"])
            if v not in variants:
                variants.append(v)
            if cell not in cells:
                cells.append(cell)
        elif r["scenario"] == "latency":
            latency[v][0].append(r["p50_ms"])
            latency[v][1].append(r["p99_ms"])
    variants.sort(key=lambda v: v != "jobsite")

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 5.5), gridspec_kw={"width_ratios": [3, 2]})
    width = 0.8 / max(1, len(variants))
    colors = plt.get_cmap("tab10").colors
    for k, v in enumerate(variants):
        xs, ys = [], []
        for i, cell in enumerate(cells):
            if drain.get((cell, v)):
                xs.append(i + (k - (len(variants) - 1) / 2) * width)
                ys.append(statistics.median(drain[(cell, v)]))
        ax1.bar(xs, ys, width, label=v, color=colors[k % 10])
    ax1.set_xticks(range(len(cells)), [f"{n:,} jobs\nconcurrency {c}" for n, c in cells])
    ax1.set_yscale("log")
    ax1.set_ylabel("jobs/s (median, log scale)")
    ax1.set_title("Drain pre-enqueued no-op jobs (PostgreSQL)")
    ax1.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax1.grid(axis="y", which="both", alpha=0.3)

    names = sorted(latency, key=lambda v: v != "jobsite")
    xs = range(len(names))
    p50 = [statistics.median(latency[v][0]) for v in names]
    p99 = [statistics.median(latency[v][1]) for v in names]
    ax2.bar([x - 0.2 for x in xs], p50, 0.4, label="p50")
    ax2.bar([x + 0.2 for x in xs], p99, 0.4, label="p99")
    ax2.set_xticks(list(xs), names, rotation=30, ha="right", fontsize=8)
    ax2.set_yscale("log")
    ax2.set_ylabel("ms, enqueue → start (median of rounds, log scale)")
    ax2.set_title("Wake-up latency, idle worker (PostgreSQL)")
    ax2.legend()
    ax2.grid(axis="y", which="both", alpha=0.3)
    meta = data["meta"]
    fig.suptitle(
        f"jobsite vs Python peers — {meta.get('nproc')} cores, {meta.get('postgres', '')}, "
        f"{meta.get('started', '')}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(dst, dpi=110)
    print(f"wrote {dst}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
