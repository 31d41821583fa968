"""A whole stamp of its own for one benchmark: in a temporary directory, on free ports,
stopped (SIGTERM, then SIGKILL) when the bench is done or interrupted, or when it fails to
come up."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.config import load_config
from tools.local_stamp import LocalStamp
from tools.progress import SILENT, Progress

# A bench measures one thing: the PM does not split or move partitions under it unless it
# is the thing measured (`balancing=True`: stamp bench balance).
BALANCING_OFF = "[partition_manager]\nbalance_interval_s = 0\n"
# Nor do scheduled maintenance jobs start under it (a top-level key: before any table).
SCHEDULERS_OFF = "job_schedulers = []\n"


def with_fresh_stamp(config_text: str, body: Callable[[LocalStamp], Any],
                     progress: Callable[[str], None], *, stream_layer_only: bool,
                     balancing: bool = False, faults: bool = False,
                     job_schedulers: bool = False) -> Any:
    """Run `body(stamp)` on a new stamp of the default shape, overridden by `config_text`
    (TOML, without a [partition_manager] section); `stream_layer_only`: no lock service and
    no partition layer, which stream-layer benches do not use; `balancing`: the PM's
    balancing pass runs (off otherwise); `faults`: its processes serve the Faults service
    (isolation and fault points, for a bench that deals faults); `job_schedulers`: the
    stamp's job schedulers run (none otherwise: a long bench would see Spark jobs start
    under it by schedule). `progress` is told each
    step; when it is the CLI's display (tools/progress.py) it also counts the processes as
    they start and stop."""
    steps = progress if isinstance(progress, Progress) else SILENT
    with tempfile.TemporaryDirectory(prefix="stamp-bench-") as tmp:
        config_path = Path(tmp) / "bench.toml"
        config_path.write_text(("" if job_schedulers else SCHEDULERS_OFF) + config_text
                               + ("" if balancing else "\n" + BALANCING_OFF))
        config = load_config(config_path).with_ephemeral_ports()
        if stream_layer_only:
            config = dataclasses.replace(config, lock_servers=(), partition_managers=(),
                                         partition_servers=())
            progress("starting 3 stream managers and 9 extent nodes")
        else:
            progress("starting a stamp: 3 lock, 3 SM, 9 EN, 2 PM, 2 PS")
        stamp = LocalStamp(Path(tmp) / "stamp", config, str(config_path), faults=faults)
        try:
            # Inside the try: a stamp that fails to come up (a port taken meanwhile, on a
            # shared machine) has its processes started so far stopped, not orphaned.
            stamp.up(progress=steps)
            return body(stamp)
        finally:
            stamp.down(progress=steps)
