"""`stamp bench fe-tls` (issue 28): what TLS costs the SDK's appends. Two stamps of the default
shape run side by side, one with TLS (`[security] tls = true`: mutual TLS between its
processes, TLS at its front ends) and one without, both on this tree (so both sign requests
the same way: SHA-256 over every byte). The `fe-append` loads (1 KiB records: 1x1, 32x1,
32x100) go through the SDK to each stamp, taking turns of about a second in one run (this
machine's speed drifts by 30% within minutes). Targets: the TLS stamp does at least 0.9 of
the plain one's records/s at 32x100, and adds at most 0.2 ms to one appender's p50.

Both stamps idle beside the one being measured: each turn pays the same for the other's
background work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import uvloop

from tools.bench.fresh_stamp import with_fresh_stamp
from tools.bench.front_end import admin_sdk, run_loads, stamp_pids
from tools.local_stamp import LocalStamp

Progress = Callable[[str], None]
TLS_ON = "[security]\ntls = true\n"
TLS_OFF = "[security]\ntls = false\n"


def run_fe_tls(seconds: float = 5.0, progress: Progress = lambda _: None
               ) -> list[dict[str, Any]]:
    def with_plain(tls_stamp: LocalStamp) -> list[dict[str, Any]]:
        return with_fresh_stamp(TLS_OFF, lambda plain: uvloop.run(
            _compare(tls_stamp, plain, seconds, progress)), progress,
            stream_layer_only=False)

    return with_fresh_stamp(TLS_ON, with_plain, progress, stream_layer_only=False)


async def _compare(tls_stamp: LocalStamp, plain_stamp: LocalStamp, seconds: float,
                   progress: Progress) -> list[dict[str, Any]]:
    clients = {"tls": admin_sdk(tls_stamp), "plain": admin_sdk(plain_stamp)}
    pids = {"tls": stamp_pids(tls_stamp), "plain": stamp_pids(plain_stamp)}
    try:
        return await run_loads({name: client.append for name, client in clients.items()},
                               pids.__getitem__, seconds, progress,
                               lambda name: {"tls": name == "tls"}, ("tls", "plain"))
    finally:
        for client in clients.values():
            await client.close()
