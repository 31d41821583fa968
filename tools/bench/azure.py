"""`stamp bench blob-append` (issue 20): Azure's own SDK (`azure-storage-blob`) appending
4 KiB blocks to append blobs, 1 client sequentially and 16 concurrently (each its own blob),
against a fresh stamp's Azure Blob endpoint (clients spread over its front ends) and against
Azurite, the Azure emulator, in the same run, taking turns (this shared machine's speed
drifts within seconds: both systems see the same drift).

Azurite comes from the npm registry, installed once into a cache directory
(`$STAMP_CACHE_DIR/azurite`, by default ~/.cache/stamp/azurite) when `npm` is present; when it
cannot be had, its rows are left out and a note on stderr says why. Stamp fsyncs every append
on three replicas; Azurite fsyncs nothing.

Clients run in worker processes (16 clients: 4 processes of 4 threads), so the SDK's own
Python cost is not one GIL's. Targets: Stamp >= 3x Azurite's appends/s with 16 clients, and
a p50 no worse than Azurite's with 1.

Each row also gives the CPU each side spent per append (from /proc, over the timed turns):
the SDK clients (`client_cpu_us_per_append`), the server (`server_cpu_us_per_append`: every
process of the stamp, idle Raft groups included, or Azurite's), for the stamp its front ends,
partition servers and extent nodes apart, and how busy the whole machine was
(`machine_busy`, 0 to 1 of all its cores). On this 2-core machine, shared with other work,
the clients, the server and the rest of the machine compete for the same cores: when they
are saturated, appends/s is about the CPU left divided by client + server CPU per append, so
the stamp row's `cpu_ratio` (Azurite's client + server CPU per append over the stamp's) is
what `ratio` tends to there, and it cannot pass (client + Azurite) / client however cheap
the stamp is. When other work loads the machine too, `ratio` says more about the scheduler
than about either system: the kernel shares the cores out by runnable threads, and a
stamp's turn runs some twenty processes where Azurite's runs one (with the load average
near 17 on 2 cores, a stamp turn got about 1.3 cores and an Azurite turn 0.3): compare
`cpu_ratio` and the CPU per append then.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import process
from common.config import HOST
from tools.bench.fresh_stamp import with_fresh_stamp
from tools.bench.measure import latency_metrics, row

AZURITE_VERSION = "3.37.0"
# Azurite's well-known development account (its documentation's; not a secret).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
               "KBHBeksoGMGw==")
BLOCK_BYTES = 4096
CLIENT_COUNTS = (1, 16)
THREADS_PER_PROCESS_MAX = 4
TURNS = 4  # turns of each system per client count
NPM_INSTALL_TIMEOUT_S = 600
AZURITE_START_TIMEOUT_S = 60
CONTAINER = "bench"
ACCOUNT = "bench"
# The stamp's processes by part, each given its own CPU per append ("rest": the lock
# service, stream managers and partition managers, idle work mostly).
STAMP_PARTS = ("fe", "ps", "en", "rest")

Progress = Callable[[str], None]


# ---- the clients (in worker processes) ------------------------------------------------------

def _append_for(connection_strings: list[str], blobs: list[str], seconds: float
                ) -> tuple[int, list[float], float]:
    """Threads, one per blob, each appending BLOCK_BYTES blocks with its own SDK client for
    `seconds`: (appends done, their latencies in seconds, the CPU seconds this process spent
    while they ran: the SDK's cost, the only work of a worker process)."""
    from azure.storage.blob import BlobClient

    block = os.urandom(BLOCK_BYTES)
    results: list[tuple[int, list[float]]] = []
    lock = threading.Lock()
    cpu_started: list[float] = []  # when every client is warm: the timed part starts
    start = threading.Barrier(len(blobs),
                              action=lambda: cpu_started.append(time.process_time()))

    def client(index: int) -> None:
        blob = BlobClient.from_connection_string(
            connection_strings[index % len(connection_strings)], CONTAINER, blobs[index])
        blob.append_block(block)  # warm: the connection open
        latencies = []
        start.wait()
        end = time.monotonic() + seconds
        while (now := time.monotonic()) < end:
            blob.append_block(block)
            latencies.append(time.monotonic() - now)
        with lock:
            results.append((len(latencies), latencies))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(blobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cpu_s = time.process_time() - cpu_started[0] if cpu_started else 0.0
    return sum(r[0] for r in results), [x for r in results for x in r[1]], cpu_s


def _make_blobs(connection_string: str, names: list[str]) -> None:
    from azure.core.exceptions import ResourceExistsError
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient.from_connection_string(connection_string)
    with contextlib.suppress(ResourceExistsError):
        service.create_container(CONTAINER)
    for name in names:
        service.get_blob_client(CONTAINER, name).create_append_blob()


def _measure(pool: concurrent.futures.ProcessPoolExecutor, connection_strings: list[str],
             clients: int, seconds: float, tag: str) -> tuple[int, list[float], float]:
    """(appends, latencies in s, the clients' CPU seconds) of one turn."""
    names = [f"{tag}-{i}" for i in range(clients)]
    _make_blobs(connection_strings[0], names)
    per_process = min(THREADS_PER_PROCESS_MAX, clients)
    futures = [pool.submit(_append_for, connection_strings, names[at:at + per_process],
                           seconds) for at in range(0, clients, per_process)]
    done = [f.result() for f in futures]
    return (sum(d[0] for d in done), [x for d in done for x in d[1]],
            sum(d[2] for d in done))


# ---- CPU ------------------------------------------------------------------------------------

def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy_s() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, all cores (/proc/stat)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - idle) / tick, sum(fields) / tick


@dataclass
class CpuUse:
    """CPU seconds of one system over its turns: its server processes by part (the stamp:
    fe, ps, en and the rest; Azurite: one part), the SDK clients, and the machine."""

    parts: dict[str, float] = field(default_factory=dict)
    client_s: float = 0.0
    machine_busy_s: float = 0.0
    machine_s: float = 0.0

    def add_turn(self, before: dict[str, float], after: dict[str, float], client_s: float,
                 machine_before: tuple[float, float], machine_after: tuple[float, float]
                 ) -> None:
        for part, seconds in after.items():
            self.parts[part] = self.parts.get(part, 0.0) + seconds - before.get(part, 0.0)
        self.client_s += client_s
        self.machine_busy_s += machine_after[0] - machine_before[0]
        self.machine_s += machine_after[1] - machine_before[1]

    def server_s(self) -> float:
        return sum(self.parts.values())

    def metrics(self, appends: int) -> dict[str, float]:
        n = max(1, appends)
        found = {"client_cpu_us_per_append": round(self.client_s * 1e6 / n, 1),
                 "server_cpu_us_per_append": round(self.server_s() * 1e6 / n, 1)}
        for part in STAMP_PARTS:
            if part in self.parts:
                found[f"{part}_cpu_us_per_append"] = round(self.parts[part] * 1e6 / n, 1)
        found["machine_busy"] = round(self.machine_busy_s / self.machine_s, 3) \
            if self.machine_s else 0.0
        return found


def _sample(pids: dict[str, list[int]]) -> dict[str, float]:
    return {part: sum(_cpu_seconds(pid) for pid in found) for part, found in pids.items()}


def _stamp_pids(stamp: Any) -> dict[str, list[int]]:
    """The stamp's pids by part: front ends, partition servers, extent nodes, the rest (lock
    service, stream managers, partition managers: idle work, mostly)."""
    parts: dict[str, list[int]] = {}
    for part, records in (("fe", stamp.front_ends()), ("ps", stamp.partition_servers()),
                          ("en", stamp.extent_nodes())):
        parts[part] = [r.pid for r in records if r.pid]
    taken = {pid for found in parts.values() for pid in found}
    parts["rest"] = [pid for pid in stamp.pids() if pid not in taken]
    return parts


# ---- Azurite --------------------------------------------------------------------------------

def _cache_dir() -> Path:
    root = os.environ.get("STAMP_CACHE_DIR") or str(Path.home() / ".cache" / "stamp")
    return Path(root) / "azurite"


def azurite_binary(progress: Progress) -> tuple[Path | None, str]:
    """Azurite's blob server, installed from npm into the cache directory when missing;
    (None, why) when it cannot be had."""
    binary = _cache_dir() / "node_modules" / ".bin" / "azurite-blob"
    if binary.exists():
        return binary, ""
    if shutil.which("npm") is None or shutil.which("node") is None:
        return None, "no npm/node on this machine: Azurite cannot be installed"
    progress(f"installing azurite@{AZURITE_VERSION} from npm into {_cache_dir()}")
    _cache_dir().mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(["npm", "install", "--prefix", str(_cache_dir()),
                        f"azurite@{AZURITE_VERSION}", "--no-audit", "--no-fund", "--silent"],
                       check=True, capture_output=True, timeout=NPM_INSTALL_TIMEOUT_S)
    except (subprocess.SubprocessError, OSError) as exc:
        return None, f"npm install azurite failed: {exc}"
    return (binary, "") if binary.exists() else (None, "npm installed no azurite-blob")


@contextlib.contextmanager
def running_azurite(binary: Path) -> Iterator[tuple[str, int]]:
    """Azurite's blob service on a free port with a fresh directory; (its connection
    string, its pid). Killed by pid afterwards."""
    port = process.free_port(HOST)
    with tempfile.TemporaryDirectory(prefix="stamp-bench-azurite-") as location:
        proc = subprocess.Popen([str(binary), "--blobHost", HOST, "--blobPort", str(port),
                                 "--location", location, "--silent", "--skipApiVersionCheck",
                                 "--loose"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + AZURITE_START_TIMEOUT_S
            while not _answers(port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Azurite did not start on port {port}")
                time.sleep(0.1)
            yield (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
                   f"AccountKey={AZURITE_KEY};"
                   f"BlobEndpoint=http://{HOST}:{port}/{AZURITE_ACCOUNT};", proc.pid)
        finally:
            proc.kill()
            proc.wait(timeout=10)


def _answers(port: int) -> bool:
    import socket

    with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.5):
        return True
    return False


# ---- the bench ------------------------------------------------------------------------------

def _stamp_connection_strings(stamp: Any) -> list[str]:
    """The bench account's Azure connection strings, one per front end."""
    from common.clock import SystemClock
    from frontend.accounts import AccountStore
    from lock_service.client import LockClient
    from tools.local_front_ends import azure_connection_string

    with LockClient([r.address for r in stamp.lock_servers()], holder="bench") as locks:
        account = AccountStore(locks, SystemClock()).create(ACCOUNT)
    found = [azure_connection_string(rec, ACCOUNT, account.keys[0])
             for rec in stamp.front_ends()]
    return [text for text in found if text is not None]


def run_blob_append(seconds: float, progress: Progress) -> list[dict[str, Any]]:
    binary, why = azurite_binary(progress)
    if binary is None:
        progress(f"note: the Azurite rows are left out: {why}")

    def body(stamp: Any) -> list[dict[str, Any]]:
        systems = {"stamp": (_stamp_connection_strings(stamp), _stamp_pids(stamp))}
        with contextlib.ExitStack() as stack:
            if binary is not None:
                text, pid = stack.enter_context(running_azurite(binary))
                systems["azurite"] = ([text], {"azurite": [pid]})
            return _turns(systems, seconds, progress)

    return with_fresh_stamp("", body, progress, stream_layer_only=False)


System = tuple[list[str], dict[str, list[int]]]  # connection strings, server pids by part


def _turns(systems: dict[str, System], seconds: float, progress: Progress
           ) -> list[dict[str, Any]]:
    rows = []
    workers = max(CLIENT_COUNTS) // THREADS_PER_PROCESS_MAX
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers) as pool:
        for clients in CLIENT_COUNTS:
            totals = {name: [0, 0.0, []] for name in systems}  # appends, seconds, latencies
            cpu = {name: CpuUse() for name in systems}
            for turn in range(TURNS):
                for name, (strings, pids) in systems.items():
                    progress(f"{name}: {clients} client(s), turn {turn + 1} of {TURNS}")
                    before, machine_before = _sample(pids), _machine_busy_s()
                    count, latencies, client_s = _measure(pool, strings, clients,
                                                          seconds / TURNS,
                                                          f"c{clients}-t{turn}")
                    cpu[name].add_turn(before, _sample(pids), client_s, machine_before,
                                       _machine_busy_s())
                    totals[name][0] += count
                    totals[name][1] += seconds / TURNS
                    totals[name][2].extend(latencies)  # type: ignore[union-attr]
            rows.extend(_rows(clients, totals, cpu))
    return rows


def _rows(clients: int, totals: dict[str, list[Any]], cpu: dict[str, CpuUse]
          ) -> list[dict[str, Any]]:
    rates = {n: t[0] / t[1] for n, t in totals.items()}
    rows = []
    for name, (count, _, latencies) in totals.items():
        metrics: dict[str, Any] = {"appends_per_s": round(rates[name], 1),
                                   **latency_metrics(latencies), "appends": count,
                                   **cpu[name].metrics(count)}
        if name == "stamp" and "azurite" in rates and rates["azurite"] > 0:
            metrics["ratio"] = round(rates["stamp"] / rates["azurite"], 2)
            azurite_p50 = latency_metrics(totals["azurite"][2])["p50_ms"]
            metrics["p50_ratio"] = round(metrics["p50_ms"] / azurite_p50, 2) \
                if azurite_p50 else None
            metrics["cpu_ratio"] = cpu_ratio(cpu["azurite"], totals["azurite"][0],
                                             cpu["stamp"], count)
        rows.append(row({"system": name, "clients": clients, "block_bytes": BLOCK_BYTES},
                        metrics))
    return rows


def cpu_ratio(other: CpuUse, other_appends: int, stamp: CpuUse, stamp_appends: int
              ) -> float | None:
    """The other system's client + server CPU per append over the stamp's: the ratio of
    appends/s on a machine whose cores they saturate (None: nothing measured)."""
    if not other_appends or not stamp_appends:
        return None
    theirs = (other.client_s + other.server_s()) / other_appends
    ours = (stamp.client_s + stamp.server_s()) / stamp_appends
    return round(theirs / ours, 2) if ours > 0 else None
