"""What every Stamp server process does around its own start-up: log in one format, arm fault
points and partitions (STAMP_ISOLATE) from the environment, run on uvloop, and stop cleanly
on SIGTERM or SIGINT (SIGKILL is what tests use, and recovery is built for it)."""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import logging
import os
import signal
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from common import durable_fs, faults, isolation

GC_YOUNG_THRESHOLD = 50_000


def start_process(name: str, directory: Path, level: str = "INFO") -> None:
    """Before the event loop: the process's directory, logging and armed fault points."""
    durable_fs.make_dirs(directory)
    # A crash in C (gRPC, uvloop) would otherwise kill the process without a word in its log.
    faulthandler.enable()
    logging.basicConfig(level=level.upper(),
                        format=f"%(asctime)s {name} %(levelname)s %(name)s: %(message)s")
    faults.arm_from_env()
    isolation.set_process_name(name)  # before any channel: they name it to their peers
    isolation.arm_from_env()
    # Servers allocate many short-lived objects per request: with the default threshold
    # (700) the cyclic collector runs hundreds of times a second, and its full passes over a
    # large memtable stall the event loop for milliseconds. Collect far less often.
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 20)


def run(main: Coroutine[Any, Any, None]) -> None:
    """Run the server's main coroutine on uvloop (STAMP_UVLOOP=0: the stock asyncio loop)."""
    if os.environ.get("STAMP_UVLOOP", "1") == "1":
        import uvloop
        uvloop.run(main)
    else:
        asyncio.run(main)


async def until_stopped() -> None:
    """Return once the process is asked to stop (SIGTERM or SIGINT)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
