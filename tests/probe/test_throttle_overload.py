"""Probe test of throttling under partition-server overload (issue 16, DESIGN §6; WAS §8): a
noisy account flooding a partition server through the SDK is refused with Throttled once the
server reports overload, while a quiet account on the same server keeps its p99 latency
within 2x of its unloaded value. The per-account rate limits are set far above the flood, so
what refuses it is the overload throttle (sample-and-hold of the top talkers), nothing else.

The flood runs in a process of its own (`python -m tests.probe.test_throttle_overload`): in
the test's process it would take the GIL from the quiet client and inflate the very latency
this measures. It is a well-behaved client: a Throttled answer is counted, not retried by the
SDK, and the appender waits the retry-after it was given before its next append. Beside it
a direct partition client appends a record every 200 ms only to collect the partition
server's pressure reports, shown when the test fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import stampsdk as sdk
from stampsdk.errors import StampError, Throttled
from stampsdk.retry import RetryPolicy

from common.clock import SystemClock
from frontend.accounts import AccountStore
from lock_service.client import LockClient
from tests.front_end_raw import RawFrontEnd
from tests.support.waiting import wait_until
from tools.local_stamp import LocalStamp

# serial: its bounds are timings (or it freezes processes); `make test` runs it alone.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

StampFactory = Callable[..., LocalStamp]

# The quiet account: sequential appends of one small record. Its p99 unloaded and flooded
# are each taken over ROUNDS rounds of QUIET_SAMPLES, unloaded and flooded in turns: this
# machine's speed drifts with the other processes on it, and alternating makes the drift
# weigh on both alike (the unloaded baseline of each flooded round is measured right before
# it). 3 x 250 samples: the p99 is the 8th slowest, not one unlucky sample.
ROUNDS = 3
QUIET_SAMPLES = 250
QUIET_WARMUP = 30
QUIET_RECORD = b"q" * 100
# The flood: this many appenders, each appending batches of this many records of 1 KiB.
# Unthrottled it takes the quiet p99 from ~14 ms to ~500 ms here (a ratio of ~35).
FLOOD_APPENDERS = 16
FLOOD_BATCH = 50
FLOOD_RECORD_BYTES = 1024
# Rate limits far above anything this machine can send: they must not be what throttles.
HIGH_RATES = {"account_requests_per_s_max": 1e6, "account_burst_requests_max": 1_000_000,
              "account_bytes_per_s_max": 1 << 40, "account_burst_bytes_max": 1 << 40}
# Overload as this machine sees it: unloaded, the partition server has at most two or three
# operations open at once (the quiet account's one, the flood process's pressure probe);
# under the flood, about one per appender. The queue is the signal here, not the p99: on
# this shared 2-core machine the p99 of a quiet account alone wanders past 20 ms with the
# other processes' load, and an account alone on a server reported overloaded is throttled
# (it is the whole load) — which put retry-afters of seconds into the unloaded baseline.
# The p99 threshold stays reachable (the unthrottled flood takes it to 200-700 ms).
OVERLOAD = {"overload_queue_ops_min": 4, "overload_p99_ms_min": 1000.0}


@dataclass
class FloodResult:
    appended: int
    throttled: int
    other_errors: int
    pressure: list[tuple[int, float]]


def _accounts(stamp: LocalStamp, *names: str) -> list[bytes]:
    with LockClient.from_stamp(stamp.data_dir, holder="test") as locks:
        store = AccountStore(locks, SystemClock(), cache_ttl_s=0)
        return [store.create(name).keys[0] for name in names]


def _quiet_latencies(client: sdk.Client) -> list[float]:
    """QUIET_SAMPLES sequential appends of the quiet account: their latencies in ms."""
    samples = []
    for _ in range(QUIET_SAMPLES):
        started = time.perf_counter()
        client.append("calm", [QUIET_RECORD])
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def p99(samples: list[float]) -> float:
    return sorted(samples)[int(0.99 * len(samples))]


class Flood:
    """The noisy account's flood, in a process of its own (module docstring), driven through
    its stdin: "go" floods, "pause" stops (it answers "paused" once no append is open), end
    of input ends it (it answers with the FloodResult as JSON)."""

    def __init__(self, stamp: LocalStamp, key: bytes) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.probe.test_throttle_overload",
             stamp.address("fe-1"), "noisy", key.hex(), str(stamp.data_dir)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._process.stdout is not None
        self._expect("ready")

    def go(self) -> None:
        self._send("go")

    def pause(self) -> None:
        self._send("pause")
        self._expect("paused")

    def stop(self) -> FloodResult:
        out, _ = self._process.communicate("", timeout=60)
        return FloodResult(**json.loads(out))

    def kill(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def _send(self, line: str) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(line + "\n")
        self._process.stdin.flush()

    def _expect(self, line: str) -> None:
        assert self._process.stdout is not None
        got = self._process.stdout.readline()
        assert got.strip() == line, got


def test_a_noisy_account_is_throttled_while_a_quiet_one_keeps_its_p99(
        stamp_factory: StampFactory) -> None:
    stamp = stamp_factory(3, 1, lock_servers=1, partition_managers=1, partition_servers=1,
                          front_ends=1, front_end={**HIGH_RATES, **OVERLOAD})
    quiet_key, noisy_key = _accounts(stamp, "quiet", "noisy")
    fe = RawFrontEnd(stamp.address("fe-1"))
    quiet = sdk.Client([stamp.address("fe-1")], "quiet", key=quiet_key, timeout_s=30)
    unloaded: list[float] = []
    flooded: list[float] = []
    try:
        for _ in range(QUIET_WARMUP):
            quiet.append("calm", [QUIET_RECORD])
        flood = Flood(stamp, noisy_key)
        try:
            for _ in range(ROUNDS):
                unloaded += _quiet_latencies(quiet)
                refusals = fe.status().throttled
                flood.go()
                wait_until(lambda: fe.status().throttled > refusals, 60,  # noqa: B023
                           "the flood is throttled")
                flooded += _quiet_latencies(quiet)
                flood.pause()
            result = flood.stop()
        finally:
            flood.kill()
        throttled = fe.status().throttled
    finally:
        quiet.close()
        fe.close()
    pressure = result.pressure[::max(1, len(result.pressure) // 20)]
    report = (f"quiet p99 unloaded {p99(unloaded):.1f} ms, flooded {p99(flooded):.1f} ms "
              f"(ratio {p99(flooded) / p99(unloaded):.2f}); flood: {result.appended} batches "
              f"appended, {result.throttled} throttled ({throttled} refusals at the front "
              f"end); pressure (open ops, p99 ms): {pressure}")
    print(report)
    assert result.throttled > 0 and result.other_errors == 0, report
    # Only the noisy account was refused: the quiet one was never throttled.
    assert throttled == result.throttled, report
    assert p99(flooded) <= 2 * p99(unloaded), report


# ---- the flood process ------------------------------------------------------------------------

class _NoThrottledRetries(RetryPolicy):
    """The SDK's policy, except that Throttled comes back to the caller (who counts it)."""

    def delay(self, error: StampError, attempt: int, idempotent: bool, rng: object
              ) -> float | None:
        if isinstance(error, Throttled):
            return None
        return super().delay(error, attempt, idempotent, rng)  # type: ignore[arg-type]


async def _flood(address: str, account: str, key: bytes, data_dir: str) -> FloodResult:
    from stampsdk.aio import Client

    from partition_layer.client import AsyncPartitionClient
    from tools.local_stamp import LocalStamp

    stamp = LocalStamp.load(data_dir)
    pressure: list[tuple[int, float]] = []
    probe = AsyncPartitionClient([r.address for r in stamp.partition_managers()],
                                 on_pressure=lambda p: pressure.append((p.queue_ops,
                                                                        round(p.p99_ms, 1))))
    flooding = asyncio.Event()
    ended = asyncio.Event()
    loop = asyncio.get_running_loop()
    open_appends = 0

    def commands() -> None:  # a thread: reads stdin (Flood's protocol)
        for line in sys.stdin:
            command = line.strip()
            loop.call_soon_threadsafe(flooding.set if command == "go" else flooding.clear)
            if command == "pause":
                asyncio.run_coroutine_threadsafe(_report_paused(), loop).result()
        loop.call_soon_threadsafe(ended.set)
        loop.call_soon_threadsafe(flooding.set)  # wake the appenders to end

    async def _report_paused() -> None:
        while open_appends:
            await asyncio.sleep(0.01)
        print("paused", flush=True)

    threading.Thread(target=commands, daemon=True).start()
    result = FloodResult(0, 0, 0, pressure)
    records = [os.urandom(FLOOD_RECORD_BYTES) for _ in range(FLOOD_BATCH)]
    async with Client([address], account, key=key, timeout_s=10,
                      policy=_NoThrottledRetries()) as client:
        async def appender(index: int) -> None:
            nonlocal open_appends
            while True:
                await flooding.wait()
                if ended.is_set():
                    return
                open_appends += 1
                try:
                    await client.append(f"flood-{index}", records)
                    result.appended += 1
                except Throttled as exc:
                    result.throttled += 1
                    open_appends -= 1
                    # A well-behaved client waits as told; a pause ends the wait.
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(_paused(), exc.retry_after_s)
                    continue
                except StampError:
                    result.other_errors += 1
                open_appends -= 1

        async def _paused() -> None:
            while flooding.is_set() and not ended.is_set():
                await asyncio.sleep(0.05)

        async def prober() -> None:
            while not ended.is_set():
                await probe.append("noisy", "probe", [b"p"])
                await asyncio.sleep(0.2)

        print("ready", flush=True)
        await asyncio.gather(prober(), *(appender(i) for i in range(FLOOD_APPENDERS)))
    await probe.close()
    return result


if __name__ == "__main__":
    fe_address, noisy, key_hex, data_dir = sys.argv[1:5]
    flood = asyncio.run(_flood(fe_address, noisy, bytes.fromhex(key_hex), data_dir))
    print(json.dumps(flood.__dict__), flush=True)
