"""The availability timeline of a `stamp chaos` run as a PNG (`--plot FILE`): successful
operations per second over the run (failed or in-doubt ones beneath, in red), each fault's
interval shaded and labelled with its kind and target, instant faults (split, merge, move,
flipped bytes) as vertical lines. matplotlib is imported here only, with the Agg backend (no
display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLOURS = {"kill": "tab:red", "freeze": "tab:blue", "isolate": "tab:purple",
           "power_cut": "black", "slow_disk": "tab:olive", "failing_disk": "tab:orange",
           "torn_write": "tab:brown", "flip_read": "tab:pink", "flip_disk": "tab:pink",
           "split": "tab:green", "merge": "tab:cyan", "move": "tab:gray"}
INSTANT_S = 0.5  # a fault shorter than this is drawn as a line


def plot_timeline(report: dict[str, Any], path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timeline = report["timeline"]
    seconds = [t["t"] for t in timeline]
    fig, ax = plt.subplots(figsize=(max(10.0, min(40.0, len(seconds) / 30)), 5))
    ax.plot(seconds, [t["ok"] for t in timeline], color="tab:blue", linewidth=1,
            label="successful ops/s")
    ax.plot(seconds, [t["failed"] for t in timeline], color="tab:red", linewidth=0.8,
            label="failed or in-doubt ops/s")
    top = max([t["ok"] for t in timeline] + [1])
    seen: set[str] = set()
    for record in report["fault_log"]:
        if record["outcome"] == "skipped":
            continue
        kind = record["kind"]
        colour = COLOURS.get(kind, "tab:gray")
        label = kind if kind not in seen else None
        seen.add(kind)
        if record["end_s"] - record["start_s"] < INSTANT_S:
            ax.axvline(record["start_s"], color=colour, linestyle="--", linewidth=0.8,
                       label=label)
        else:
            ax.axvspan(record["start_s"], record["end_s"], color=colour, alpha=0.18,
                       label=label)
        ax.text(record["start_s"], top * 1.02, f"{kind} {record['target']}", rotation=90,
                fontsize=6, va="bottom")
    ax.set_xlabel("seconds since the workload started")
    ax.set_ylabel("operations per second")
    violations = len(report["violations"])
    ax.set_title(f"stamp chaos --minutes {report['minutes']:g} --seed {report['seed']}: "
                 f"{report['ops_total']:,} ops acknowledged, {violations} violations")
    ax.set_ylim(0, top * 1.3)
    ax.set_xlim(0, max([*seconds, 1]))
    # Below the chart: over it, it would hide the fault labels.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), fontsize=7, ncol=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
