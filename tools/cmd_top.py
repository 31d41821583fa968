"""`stamp top`: a live view of a stamp (issue 19), redrawn every
`watch.top_refresh_interval_ms` until ^C (tools/top_view.py draws it)."""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any


def register(commands: Any) -> None:
    top = commands.add_parser(
        "top", help="a live view of the stamp (^C to stop)",
        description="Redraw every second until ^C: processes and their health, ops/s and "
                    "p99 per partition server, partitions by load, disk per extent node, "
                    "the repair backlog (from every process's metrics and health).")
    top.add_argument("--once", action="store_true",
                     help="draw one frame and exit (rates over one refresh interval)")
    top.set_defaults(handler=cmd_top)


def cmd_top(args: argparse.Namespace) -> int:
    from rich.live import Live

    from tools import tables
    from tools.local_stamp import LocalStamp
    from tools.top_view import render, take_frame

    stamp = LocalStamp.load(args.data_dir)
    interval_s = stamp.config.watch.top_refresh_interval_ms / 1000
    console = tables.console()
    before = asyncio.run(take_frame(stamp))
    if args.once:
        time.sleep(interval_s)  # a second frame, so rates cover one interval
        console.print(render(stamp, asyncio.run(take_frame(stamp)), before))
        return 0
    try:
        with Live(render(stamp, before, None), console=console, auto_refresh=False,
                  screen=console.is_terminal, transient=False) as live:
            while True:
                next_at = before.at + interval_s
                time.sleep(max(0.0, next_at - time.monotonic()))
                frame = asyncio.run(take_frame(stamp))
                live.update(render(stamp, frame, before), refresh=True)
                before = frame
    except KeyboardInterrupt:
        return 0
