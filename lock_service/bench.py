"""`stamp bench lock`: the lock service's latency, throughput and failover time, on a group
of 3 real replica processes it starts in a temporary directory and stops afterwards.

Rows (DESIGN §9: plain parameter names, metric names with their unit last):
- acquire: latency of granting a free lock (p50_ms, p99_ms);
- renew: latency of one lease renewal (p50_ms, p99_ms) — target p50 <= 2 ms;
- cas: compare-and-sets per second by `clients` clients on their own keys (cas_per_s);
- failover: SIGKILL the leader, time until the next compare-and-set succeeds (seconds is the
  median over `rounds`, max_seconds the worst) — target <= 2 s.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from lock_service.client import LockClient
from lock_service.group import LocalLockGroup

CONVERGE_TIMEOUT_S = 20.0


def bench_lock(base_dir: str | Path | None = None, *, samples: int = 500, clients: int = 4,
               duration_s: float = 3.0, rounds: int = 3) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="stamp-bench-lock-") as tmp:
        group = LocalLockGroup(Path(base_dir or tmp) / "lock")
        try:
            group.start_all()
            client = group.client("bench")
            group.leader(client)
            try:
                return [_acquire(client, samples), _renew(client, samples),
                        _cas(group, clients, duration_s), _failover(group, client, rounds)]
            finally:
                client.close()
        finally:
            group.stop()


def _latency_row(op: str, seconds: list[float], **params: Any) -> dict[str, Any]:
    ms = sorted(s * 1000 for s in seconds)
    return {"params": {"op": op, "samples": len(ms), **params},
            "metrics": {"p50_ms": round(ms[len(ms) // 2], 3),
                        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 3)}}


def _acquire(client: LockClient, samples: int) -> dict[str, Any]:
    seconds = []
    for i in range(samples):
        started = time.perf_counter()
        lease = client.acquire(f"bench/acquire/{i}", ttl_s=10.0)
        seconds.append(time.perf_counter() - started)
        assert lease is not None
        lease.release()
    return _latency_row("acquire", seconds)


def _renew(client: LockClient, samples: int) -> dict[str, Any]:
    lease = client.acquire("bench/renew", ttl_s=10.0)
    assert lease is not None
    seconds = []
    for _ in range(samples):
        started = time.perf_counter()
        lease.renew()
        seconds.append(time.perf_counter() - started)
    lease.release()
    return _latency_row("renew", seconds)


def _cas(group: LocalLockGroup, clients: int, duration_s: float) -> dict[str, Any]:
    counts = [0] * clients
    seconds: list[float] = []
    start = threading.Barrier(clients + 1)

    def worker(index: int) -> None:
        with group.client(f"bench-cas-{index}") as client:
            key, version = f"bench/cas/{index}", 0
            start.wait()
            ends = time.monotonic() + duration_s
            while time.monotonic() < ends:
                began = time.perf_counter()
                written = client.compare_and_set(key, version, b"%d" % counts[index])
                seconds.append(time.perf_counter() - began)
                assert written is not None, "a lone writer's compare-and-set failed"
                version, counts[index] = written, counts[index] + 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.monotonic()
    for thread in threads:
        thread.join()
    row = _latency_row("cas", seconds, clients=clients, duration_s=duration_s)
    row["metrics"]["cas_per_s"] = round(sum(counts) / (time.monotonic() - began), 1)
    return row


def _failover(group: LocalLockGroup, client: LockClient, rounds: int) -> dict[str, Any]:
    key = "bench/failover"
    version = client.put(key, b"0")
    seconds = []
    for round_ in range(rounds):
        leader = group.leader(client)
        version = client.compare_and_set(key, version, b"%d" % round_) or 0  # leader known
        assert version
        killed = time.monotonic()
        group.kill(leader)
        written = client.compare_and_set(key, version, b"after %d" % round_)
        seconds.append(time.monotonic() - killed)
        assert written is not None, "the compare-and-set after the failover was refused"
        version = written
        group.start(leader)
        _wait_converged(group, client)
    return {"params": {"op": "failover", "rounds": rounds},
            "metrics": {"seconds": round(statistics.median(seconds), 3),
                        "max_seconds": round(max(seconds), 3)}}


def _wait_converged(group: LocalLockGroup, client: LockClient) -> None:
    """Until every replica has applied the same log (the restarted one caught up)."""
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    while time.monotonic() < deadline:
        statuses = group.statuses(client, with_digest=True)
        if len(statuses) == len(group.replicas) and len(
                {(s.applied, s.digest) for s in statuses.values()}) == 1:
            return
        time.sleep(0.01)
    raise AssertionError("replicas did not converge after a failover")


def main() -> None:
    """Run the benchmark and print its rows (until the CLI wires `stamp bench lock`)."""
    print(json.dumps({"bench": "lock", "results": bench_lock()}, indent=2))


if __name__ == "__main__":
    main()
