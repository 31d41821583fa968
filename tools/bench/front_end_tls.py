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

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import uvloop

from tools.bench.fresh_stamp import with_fresh_stamp
from tools.bench.front_end import (
    LOADS,
    CpuUse,
    Phase,
    admin_sdk,
    compare_rows,
    phase,
    turns_for,
)
from tools.local_stamp import LocalStamp

Progress = Callable[[str], None]
Append = Callable[[str, Sequence[bytes]], Awaitable[int]]
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
    stamps = {"tls": tls_stamp, "plain": plain_stamp}
    rows: list[dict[str, Any]] = []
    try:
        for name, client in clients.items():
            await client.append(f"warm-{name}", [b"x"])
        for load_clients, batch in LOADS:
            found: dict[str, list[Phase]] = {p: [] for p in clients}
            cpu = {p: CpuUse() for p in clients}
            turns = turns_for(seconds)
            for turn in range(turns):
                for name, client in clients.items():
                    progress(f"{load_clients}x{batch} with {name}, turn {turn + 1}/{turns}, "
                             f"{seconds / turns:g} s")
                    fe_pids, other_pids = _pids(stamps[name])
                    before = CpuUse.now(fe_pids, other_pids)
                    found[name].append(await phase(client.append, name, load_clients, batch,
                                                    seconds / turns))
                    cpu[name].add(CpuUse.now(fe_pids, other_pids), before)
            rows.extend(_rows(found, cpu, load_clients, batch))
    finally:
        for client in clients.values():
            await client.close()
    return rows


def _pids(stamp: LocalStamp) -> tuple[list[int], list[int]]:
    fe_pids = [stamp.record(r.name).pid for r in stamp.front_ends()]
    return fe_pids, [pid for pid in stamp.pids() if pid not in fe_pids]


def _rows(found: dict[str, list[Phase]], cpu: dict[str, CpuUse], clients: int, batch: int
          ) -> list[dict[str, Any]]:
    return compare_rows(found, cpu, clients, batch, lambda name: {"tls": name == "tls"},
                        ("tls", "plain"))
