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

Progress = Callable[[str], None]


# ---- the clients (in worker processes) ------------------------------------------------------

def _append_for(connection_strings: list[str], blobs: list[str], seconds: float
                ) -> tuple[int, list[float]]:
    """Threads, one per blob, each appending BLOCK_BYTES blocks with its own SDK client for
    `seconds`: (appends done, their latencies in seconds)."""
    from azure.storage.blob import BlobClient

    block = os.urandom(BLOCK_BYTES)
    results: list[tuple[int, list[float]]] = []
    lock = threading.Lock()
    start = threading.Barrier(len(blobs))

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
    return sum(r[0] for r in results), [x for r in results for x in r[1]]


def _make_blobs(connection_string: str, names: list[str]) -> None:
    from azure.core.exceptions import ResourceExistsError
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient.from_connection_string(connection_string)
    with contextlib.suppress(ResourceExistsError):
        service.create_container(CONTAINER)
    for name in names:
        service.get_blob_client(CONTAINER, name).create_append_blob()


def _measure(pool: concurrent.futures.ProcessPoolExecutor, connection_strings: list[str],
             clients: int, seconds: float, tag: str) -> tuple[int, list[float]]:
    names = [f"{tag}-{i}" for i in range(clients)]
    _make_blobs(connection_strings[0], names)
    per_process = min(THREADS_PER_PROCESS_MAX, clients)
    futures = [pool.submit(_append_for, connection_strings, names[at:at + per_process],
                           seconds) for at in range(0, clients, per_process)]
    done = [f.result() for f in futures]
    return sum(d[0] for d in done), [x for d in done for x in d[1]]


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
def running_azurite(binary: Path) -> Iterator[str]:
    """Azurite's blob service on a free port with a fresh directory; its connection
    string. Killed by pid afterwards."""
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
                   f"BlobEndpoint=http://{HOST}:{port}/{AZURITE_ACCOUNT};")
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
        systems = {"stamp": _stamp_connection_strings(stamp)}
        with contextlib.ExitStack() as stack:
            if binary is not None:
                systems["azurite"] = [stack.enter_context(running_azurite(binary))]
            return _turns(systems, seconds, progress)

    return with_fresh_stamp("", body, progress, stream_layer_only=False)


def _turns(systems: dict[str, list[str]], seconds: float, progress: Progress
           ) -> list[dict[str, Any]]:
    rows = []
    workers = max(CLIENT_COUNTS) // THREADS_PER_PROCESS_MAX
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers) as pool:
        for clients in CLIENT_COUNTS:
            totals = {name: [0, 0.0, []] for name in systems}  # appends, seconds, latencies
            for turn in range(TURNS):
                for name, strings in systems.items():
                    progress(f"{name}: {clients} client(s), turn {turn + 1} of {TURNS}")
                    count, latencies = _measure(pool, strings, clients, seconds / TURNS,
                                                f"c{clients}-t{turn}")
                    totals[name][0] += count
                    totals[name][1] += seconds / TURNS
                    totals[name][2].extend(latencies)  # type: ignore[union-attr]
            rates = {n: t[0] / t[1] for n, t in totals.items()}  # type: ignore[operator]
            for name, (count, _, latencies) in totals.items():
                metrics: dict[str, Any] = {"appends_per_s": round(rates[name], 1),
                                           **latency_metrics(latencies),  # type: ignore[arg-type]
                                           "appends": count}
                if name == "stamp" and "azurite" in rates and rates["azurite"] > 0:
                    metrics["ratio"] = round(rates["stamp"] / rates["azurite"], 2)
                    azurite_p50 = latency_metrics(totals["azurite"][2])["p50_ms"]  # type: ignore[arg-type]
                    metrics["p50_ratio"] = round(metrics["p50_ms"] / azurite_p50, 2) \
                        if azurite_p50 else None
                rows.append(row({"system": name, "clients": clients,
                                 "block_bytes": BLOCK_BYTES}, metrics))
    return rows

