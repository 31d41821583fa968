"""Shared measuring for benchmarks: latency percentiles, the rows of the JSON output, and
a cold page cache."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
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


def drop_page_cache(paths: Iterable[Path]) -> None:
    """Ask the kernel to forget the files' cached pages (synced first: only clean pages can
    go), so the next read is the disk's. Files gone meanwhile are passed over."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except (FileNotFoundError, IsADirectoryError):
            continue
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
