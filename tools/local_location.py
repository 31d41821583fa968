"""A location on this machine (issue 30): the location service and two small stamps in two
regions, each on an address of its own in 127.0.0.0/8, as `stamp location up` starts them.

Layout of the location's directory (default ./location-data):
- `service/`: the location service, a lock-service group of three (location/store.py keeps
  the stamps and the accounts' placements there) and a location server `loc-1` answering
  SDKs' Resolve calls from it (location/server_main.py), on 127.0.0.1;
- `stamps/<name>/`: each stamp's data directory (its own `stamp.json`), `west-1` on
  127.0.0.2 in region `west` and `east-1` on 127.0.0.3 in region `east` (and `west-2` on
  127.0.0.4 in region `west` once `up --stamps 3` made it: a stamp to migrate to): 3 lock
  replicas, 3 stream managers, 3 extent nodes in 3 fault domains, 1 partition manager, 1 partition
  server, 1 front end each.
Each stamp is registered in the location service (its front ends, its disk's capacity and the
bytes under its data directory) whenever `up` runs, so a restarted stamp's new endpoints are
what clients resolve; and each stamp is told its place in the location (`geo/stamp` in its
lock service, location/geo_auth.py: its name, the location servers, and the replication
secret kept in `service/replication.secret`), from which its partition servers ship to
secondary stamps and its front ends take replicated writes."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from common import durable_fs, process
from common.config import StampConfig, default_config
from common.errors import NotFound
from location.geo_auth import GeoSettings, new_secret, write_settings
from location.placement import StampInfo
from location.store import LocationStore
from lock_service.client import LockClient
from tools.local_front_ends import http_scheme
from tools.local_stamp import LocalStamp
from tools.process_record import ProcessRecord
from tools.progress import SILENT, Progress

SERVICE_DIR = "service"
STAMPS_DIR = "stamps"
SERVICE_HOST = "127.0.0.1"
SECRET_FILE = "replication.secret"
CAPACITY_FILE = "stamp-capacity-bytes"  # `up --capacity-mb`: each stamp's, for its use %
SETTINGS_FILE = "location-stamp.toml"
LOCATION_CACHE_MS = 1000  # a location's front ends' account cache TTL (small_stamp_config)
LOCATION_SERVER = "loc-1"
KIND_LOCATION = "location"


@dataclass(frozen=True)
class StampSite:
    name: str
    region: str
    host: str


SITES = (StampSite("west-1", "west", "127.0.0.2"), StampSite("east-1", "east", "127.0.0.3"),
         StampSite("west-2", "west", "127.0.0.4"))  # the third: `up --stamps 3` (migrations)
STAMPS_DEFAULT = 2
BALANCE_INTERVAL_S = 30.0


def service_config() -> StampConfig:
    """Three lock replicas and nothing else, on free ports."""
    default = default_config().with_ephemeral_ports()
    return dataclasses.replace(default, host=SERVICE_HOST, extent_nodes=(),
                               stream_managers=(), partition_managers=(),
                               partition_servers=(), front_ends=(), job_schedulers=())


def small_stamp_config(host: str) -> StampConfig:
    """A stamp of the smallest shape that keeps its guarantees (issue 30): 3 lock, 3 SM,
    3 EN in 3 fault domains, 1 PM, 1 PS, 1 FE, on free ports of `host`."""
    default = default_config().with_ephemeral_ports()
    nodes = tuple(dataclasses.replace(spec, name=f"en-{i + 1}")
                  for i, spec in enumerate(default.extent_nodes[::3]))
    assert len({n.fault_domain for n in nodes}) == len(nodes) == 3, nodes
    # Front ends see an account's role move (a failover) within 1 s, not 5: a failover
    # waits that out at the old primary, and writers wait for the new one's (issue 30: a
    # pause of at most 2 s). The cost: a lock-service read per account per second each.
    front_end = dataclasses.replace(default.front_end, account_cache_ttl_ms=LOCATION_CACHE_MS)
    return dataclasses.replace(default, host=host, extent_nodes=nodes,
                               partition_managers=default.partition_managers[:1],
                               partition_servers=default.partition_servers[:1],
                               front_ends=default.front_ends[:1], job_schedulers=(),
                               front_end=front_end)


class LocalLocation:
    def __init__(self, directory: str | Path, stamp_settings: str = "",
                 balance_interval_s: float = BALANCE_INTERVAL_S) -> None:
        """`stamp_settings`: TOML its stamps' processes read besides the location's own
        (at their first start: a benchmark's variant); `balance_interval_s`: how often its
        location server balances (tools/geo_balance.py; set when the location is made)."""
        self.directory = Path(directory).resolve()
        self.stamp_settings = stamp_settings
        self.balance_interval_s = balance_interval_s

    def service(self) -> LocalStamp:
        """The location service's processes (as recorded, or planned anew)."""
        path = self.directory / SERVICE_DIR
        try:
            service = _loaded(path, service_config())
        except NotFound:
            service = LocalStamp(path, service_config())
        plan_location_server(service, self.balance_interval_s)
        return service

    def stamps(self, count: int = STAMPS_DEFAULT) -> Iterator[tuple[StampSite, LocalStamp]]:
        """The location's stamps: the first `count` of SITES, and any other made before."""
        for number, site in enumerate(SITES):
            path = self.directory / STAMPS_DIR / site.name
            if number >= count and not path.exists():
                continue
            try:
                yield site, _loaded(path, small_stamp_config(site.host))
            except NotFound:
                yield site, LocalStamp(path, small_stamp_config(site.host),
                                       config_path=str(write_stamp_settings(
                                           path, self.stamp_settings)))

    def up(self, progress: Progress = SILENT, stamps: int = STAMPS_DEFAULT,
           capacity_bytes: int | None = None) -> list[str]:
        """Start what is not running (the service, then each stamp: at least `stamps` of
        them) and register the stamps; the names started, each as `<part>/<process>`.
        `capacity_bytes`: each stamp's capacity from now on, as the location counts its use
        (kept; by default its disk's size)."""
        secret = self.secret()  # before the location server, which reads it
        if capacity_bytes is not None:
            durable_fs.make_dirs(self.directory / SERVICE_DIR)
            durable_fs.replace_file(self.directory / SERVICE_DIR / CAPACITY_FILE,
                                    str(capacity_bytes).encode())
        started = [f"{SERVICE_DIR}/{name}" for name in self.service().up(progress=progress)]
        servers = tuple(self.location_endpoints())
        with self.store_client() as store:
            for site, stamp in self.stamps(stamps):
                progress.phase(f"starting stamp {site.name} on {site.host}")
                started += [f"{site.name}/{name}" for name in stamp.up(progress=progress)]
                store.register_stamp(stamp_info(site, stamp, self.capacity_bytes()))
                with LockClient.from_stamp(stamp.data_dir, holder="location-cli") as locks:
                    write_settings(locks, GeoSettings(site.name, servers, secret))
        return started

    def capacity_bytes(self) -> int | None:
        """Each stamp's capacity as `up --capacity-mb` set it; None: its disk's size."""
        path = self.directory / SERVICE_DIR / CAPACITY_FILE
        return int(path.read_text()) if path.exists() else None

    def register(self) -> dict[str, StampInfo]:
        """Register every stamp anew (its front ends, capacity and use now); as registered."""
        infos = {}
        with self.store_client() as store:
            for site, stamp in self.stamps():
                infos[site.name] = stamp_info(site, stamp, self.capacity_bytes())
                store.register_stamp(infos[site.name])
        return infos

    def secret(self) -> bytes:
        """The location's replication secret (made once, mode 0600, durable)."""
        path = self.directory / SERVICE_DIR / SECRET_FILE
        if not path.exists():
            durable_fs.make_dirs(path.parent)
            durable_fs.replace_file(path, new_secret())
            path.chmod(0o600)
        return path.read_bytes()

    def down(self, progress: Progress = SILENT) -> list[str]:
        """Stop every stamp, then the service; the names stopped."""
        stopped: list[str] = []
        for site, stamp in self.stamps():
            if stamp.stamp_file.exists():
                stopped += [f"{site.name}/{name}" for name in stamp.down(progress=progress)]
        service = self.service()
        if service.stamp_file.exists():
            stopped += [f"{SERVICE_DIR}/{name}" for name in service.down(progress=progress)]
        return stopped

    def location_endpoints(self) -> list[str]:
        """HOST:PORT of the location servers, as a connection string's `Location` names
        them (empty until they ran once: a port picked at first start)."""
        return [record.address for record in self.service().records.values()
                if record.kind == KIND_LOCATION and not record.address.endswith(":0")]

    @contextlib.contextmanager
    def store_client(self) -> Iterator[LocationStore]:
        """A LocationStore on the service's lock group, its client closed afterwards."""
        with LockClient.from_stamp(self.service().data_dir, holder="location-cli") as locks:
            yield LocationStore(locks)


def write_stamp_settings(data_dir: Path, extra: str = "") -> Path:
    """The config file a location's stamp's processes read (`--config`): the settings in
    which small_stamp_config differs from the default inside processes (its shape, the
    processes it has, is the plan's and needs no file), then `extra` (TOML)."""
    path = data_dir / SETTINGS_FILE
    if not path.exists():
        durable_fs.make_dirs(data_dir)
        durable_fs.replace_file(path, f"[front_end]\naccount_cache_ttl_ms = "
                                      f"{LOCATION_CACHE_MS}\n{extra}".encode())
    return path


def _loaded(path: Path, config: StampConfig) -> LocalStamp:
    """The stamp recorded at `path`, with the shape it was made with: its record names no
    config file (the shape is this module's), and the default one would plan a whole stamp
    into it at the next `up` (its processes keep their recorded ports: only what is missing
    is planned from `config`)."""
    stamp = LocalStamp.load(path)
    stamp.config = config
    return stamp


def plan_location_server(service: LocalStamp, balance_interval_s: float = BALANCE_INTERVAL_S
                         ) -> None:
    """Add the location server to the service's processes (once: its record, with the port
    it picked at first start, is kept in the service's stamp.json like the others'). It
    balances the location's stamps (tools/geo_balance.py) every `balance_interval_s`."""
    if LOCATION_SERVER in service.records:
        return
    service.plan()  # the lock replicas' addresses, which it is given
    locks = ",".join(record.address for record in service.lock_servers())
    directory = service.data_dir / LOCATION_SERVER
    argv = process.stamp_command(
        "serve", KIND_LOCATION, "--name", LOCATION_SERVER, "--dir", str(directory),
        "--host", SERVICE_HOST, "--port", "0", "--lock", locks,
        "--secret-file", str(service.data_dir / SECRET_FILE),
        "--balance-location", str(service.data_dir.parent),
        "--balance-interval-s", str(balance_interval_s), *service.server_flags())
    service.records[LOCATION_SERVER] = ProcessRecord(
        LOCATION_SERVER, KIND_LOCATION, str(directory), argv, address=f"{SERVICE_HOST}:0")


def stamp_info(site: StampSite, stamp: LocalStamp, capacity_bytes: int | None = None
               ) -> StampInfo:
    """`stamp` as the location knows it: its front ends (gRPC and blob doors), its capacity
    (`capacity_bytes`, else its disk's) and the bytes under its data directory."""
    blob = tuple(f"{http_scheme(record)}://{record.extra['http_address']}"
                 for record in stamp.front_ends() if record.extra.get("http_address"))
    return StampInfo(site.name, site.region,
                     tuple(record.address for record in stamp.front_ends()),
                     capacity_bytes or shutil.disk_usage(stamp.data_dir).total,
                     _bytes_under(stamp.data_dir),
                     blob_endpoints=blob)


def _bytes_under(path: Path) -> int:
    total = 0
    for found in path.rglob("*"):
        with contextlib.suppress(FileNotFoundError):  # a file the stamp removed meanwhile
            if found.is_file():
                total += found.stat().st_size
    return total
