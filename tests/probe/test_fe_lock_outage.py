"""The request path without the lock service (issue 29), on real processes: every lock
service replica is frozen (SIGSTOP) for FREEZE_S, longer than the front end's key cache TTL
(CACHE_TTL_MS); the SDK's appends, puts and gets of an account the front end has seen keep
working throughout (frontend/auth.py keeps the keys it holds while the store does not
answer). Once thawed, a rotated key stops working within ROTATION_BOUND_S.

This stamp's key cache TTL is 2.5 s, half the default, and the freeze 6 s, not 12: the freeze
still outlasts the TTL more than twice over, so the keys expire, and their refresh finds the
lock service frozen, twice during it, as before. Every second of the freeze is the suite's.

Scope: the partition layer's leases live in the lock service too (2 s by default), and a
partition server that cannot renew them stops serving (DESIGN §8 invariants 3 and 7) — rightly.
So this stamp's partition, session and manager leases are longer than the outage: what is
tested is the front end's key path, not how long a partition layer outlives its lock
service."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from stampsdk import Client
from stampsdk.errors import StampError, Unauthenticated

from common.clock import SystemClock
from frontend.accounts import AccountStore
from lock_service.client import LockClient
from tests.conftest import module_stamp
from tools.local_stamp import LocalStamp

# serial: its bounds are timings (or it freezes processes); `make test` runs it alone.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

CACHE_TTL_MS = 2500  # the front end's key cache TTL (FrontEndLimits.account_cache_ttl_ms)
FREEZE_S = 6.0  # over twice the key cache's TTL
ROTATION_BOUND_S = 10.0  # the bound, once the lock service answers again
CALL_TIMEOUT_S = 5.0  # one SDK call, retries included: a refused or stuck call fails in it
LEASES_MS = {"partition_lease_ttl_ms": 30_000, "server_session_ttl_ms": 30_000,
             "manager_lease_ttl_ms": 30_000}  # outlive the freeze (module docstring)


@pytest.fixture(scope="module")
def stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    with module_stamp(tmp_path_factory, "fe-lock-outage", partition=LEASES_MS,
                      front_end={"account_cache_ttl_ms": CACHE_TTL_MS}, extent_nodes=3,
                      stream_managers=1, lock_servers=3, partition_managers=1,
                      partition_servers=1, front_ends=1) as local:
        yield local


def client(stamp: LocalStamp, key: bytes) -> Client:
    return Client([r.address for r in stamp.front_ends()], "outage", key=key,
                  timeout_s=CALL_TIMEOUT_S)


def work(sdk: Client, n: int) -> None:
    """One append, one put and one get of the account."""
    sdk.append("events", [f"e{n}".encode()])
    sdk.put("rows", "r", f"v{n}".encode())
    assert sdk.get("rows", "r")[0] == f"v{n}".encode()


def test_requests_go_on_while_the_lock_service_is_frozen_and_rotation_works_after(
        stamp: LocalStamp) -> None:
    with LockClient.from_stamp(stamp.data_dir, holder="outage-test") as locks:
        store = AccountStore(locks, SystemClock(), cache_ttl_s=0)
        account = store.create("outage")
        sdk = client(stamp, account.keys[0])
        try:
            work(sdk, 0)  # the front end has seen the account: its keys are cached
            pids = [r.pid for r in stamp.lock_servers()]
            frozen_at = time.monotonic()
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            n = 0
            try:
                while time.monotonic() < frozen_at + FREEZE_S:
                    n += 1
                    try:
                        work(sdk, n)
                    except StampError as exc:
                        pytest.fail(f"{time.monotonic() - frozen_at:.1f}s into the lock "
                                    f"service's outage, request {n} failed: {exc!r}")
                    time.sleep(0.1)  # pacing the load, not waiting for a condition
            finally:
                for pid in pids:
                    os.kill(pid, signal.SIGCONT)
            rotated = store.rotate("outage", 1)  # through the thawed lock service
            rotated_at = time.monotonic()
            new = client(stamp, rotated.keys[0])
            try:
                while True:
                    try:
                        sdk.get("rows", "r")
                    except Unauthenticated:
                        break
                    assert time.monotonic() < rotated_at + ROTATION_BOUND_S, \
                        "the rotated-away key still works"
                    time.sleep(0.1)
                work(new, n + 1)
            finally:
                new.close()
        finally:
            sdk.close()
