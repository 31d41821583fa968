"""Shared measuring for benchmarks: latency percentiles and the rows of the JSON output."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (0 for none)."""
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def latency_metrics(latencies_s: Sequence[float]) -> dict[str, float]:
    ordered = sorted(latencies_s)
    return {"p50_ms": round(percentile(ordered, 0.50) * 1000, 3),
            "p99_ms": round(percentile(ordered, 0.99) * 1000, 3)}


def row(params: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any]:
    return {"params": params, "metrics": metrics}
