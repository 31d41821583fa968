"""The availability timeline of a `stamp chaos` run as a PNG (`--plot FILE`): successful
operations per second over the run (failed or in-doubt ones beneath, in red), each fault's
interval shaded and labelled with its kind and target, instant faults (split, merge, move,
flipped bytes) as vertical lines. A long run is drawn as rows of ROW_S seconds, one under
the other, so that a 30-minute run stays readable. matplotlib is imported here only, with the
Agg backend (no display needed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

COLOURS = {"kill": "tab:red", "freeze": "tab:blue", "isolate": "tab:purple",
           "power_cut": "black", "slow_disk": "tab:olive", "failing_disk": "tab:orange",
           "torn_write": "tab:brown", "flip_read": "tab:pink", "flip_disk": "tab:pink",
           "split": "tab:green", "merge": "tab:cyan", "move": "tab:gray"}
INSTANT_S = 0.5  # a fault shorter than this is drawn as a line
ROW_S = 300  # seconds per row


def plot_timeline(report: dict[str, Any], path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timeline = report["timeline"]
    length = max(len(timeline), 1)
    rows = max(1, math.ceil(length / ROW_S))
    width = min(length, ROW_S)
    fig, axes = plt.subplots(rows, 1, figsize=(max(10.0, width / 25), 3.2 * rows + 0.8),
                             squeeze=False)
    top = max([t["ok"] for t in timeline] + [1])
    labelled: set[str] = set()
    for row, ax in enumerate(axes[:, 0]):
        low, high = row * ROW_S, min(length, (row + 1) * ROW_S) if rows > 1 else length
        part = timeline[low:high]
        ax.plot([t["t"] for t in part], [t["ok"] for t in part], color="tab:blue",
                linewidth=1, label="successful ops/s" if row == 0 else None)
        ax.plot([t["t"] for t in part], [t["failed"] for t in part], color="tab:red",
                linewidth=0.8, label="failed or in-doubt ops/s" if row == 0 else None)
        _faults(ax, report["fault_log"], low, high, top, labelled)
        ax.set_xlim(low, low + (ROW_S if rows > 1 else max(high - low, 1)))
        ax.set_ylim(0, top * 1.3)
        ax.set_ylabel("ops/s")
    axes[-1, 0].set_xlabel("seconds since the workload started")
    violations = len(report["violations"])
    axes[0, 0].set_title(
        f"stamp chaos --minutes {report['minutes']:g} --seed {report['seed']}: "
        f"{report['ops_total']:,} ops acknowledged, "
        f"{sum(report['faults'].values())} faults, {violations} violations")
    # Below the chart: over it, it would hide the fault labels.
    fig.legend(loc="lower center", fontsize=7, ncol=7)
    fig.tight_layout(rect=(0, 0.45 / (3.2 * rows + 0.8), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _faults(ax: Any, fault_log: list[dict[str, Any]], low: int, high: int, top: int,
            labelled: set[str]) -> None:
    for record in fault_log:
        if record["outcome"] == "skipped" or not low <= record["start_s"] < high:
            continue
        kind = record["kind"]
        colour = COLOURS.get(kind, "tab:gray")
        label = kind if kind not in labelled else None
        labelled.add(kind)
        if record["end_s"] - record["start_s"] < INSTANT_S:
            ax.axvline(record["start_s"], color=colour, linestyle="--", linewidth=0.8,
                       label=label)
        else:
            ax.axvspan(record["start_s"], record["end_s"], color=colour, alpha=0.18,
                       label=label)
        ax.text(record["start_s"], top * 1.02, f"{kind} {record['target']}", rotation=90,
                fontsize=5, va="bottom")
