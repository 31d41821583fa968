"""Last sync times at the location (issue 30): the manager's report of its partitions
(location/sync_report.py, partition_layer/geo_report.py), its signature, the location's door
for it and the account's last sync time Resolve derives from it (location/service.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from common.errors import NotFound, Unauthenticated, Unavailable
from common.proto import location_internal_pb2 as internal_pb
from common.proto import location_v1_pb2 as location_pb
from common.proto import partition_pb2 as pb
from location import geo_auth
from location.geo_auth import GeoSettings
from location.placement import AccountPlacement, StampInfo
from location.service import LocationInternalServicer, LocationServicer, PlacementCache
from location.sync_report import account_lag_ops, account_synced_ms, report_ranges
from partition_layer import keys
from partition_layer.geo_report import SyncReporter
from partition_layer.partition_map import PartitionEntry, PartitionMap

SECRET = b"s" * 32
SPLIT = keys.account_prefix("m")  # accounts before "m" in the first partition, after in the 2nd


def two_partitions() -> PartitionMap:
    return PartitionMap(1, (PartitionEntry(1, b"", SPLIT, "ps-1"),
                            PartitionEntry(2, SPLIT, None, "ps-1")))


def load(partition_id: int, synced_s: float, geo: bool = True, lag: int = 0
         ) -> pb.PartitionLoad:
    return pb.PartitionLoad(partition_id=partition_id, geo=geo, geo_synced_s=synced_s,
                            geo_lag_ops=lag)


def test_every_partition_is_reported_and_one_not_shipping_is_unknown() -> None:
    ranges = report_ranges(two_partitions(), {1: load(1, 50.0, lag=3), 2: load(2, 9, geo=False)})
    assert [(r.low, r.has_high, r.synced_ms, r.lag_ops) for r in ranges] == [
        (b"", True, 50_000, 3), (SPLIT, False, 0, 0)]
    assert account_synced_ms(ranges, "acme") == 50_000 and account_lag_ops(ranges, "acme") == 3
    assert account_synced_ms(ranges, "zed") == 0  # its partition does not ship: unknown
    assert report_ranges(two_partitions(), {})[0].synced_ms == 0  # no heartbeat yet


def test_an_account_spanning_partitions_takes_the_least_and_none_is_unknown() -> None:
    inside = keys.pname_prefix("acme", "log-k")
    ranges = report_ranges(
        PartitionMap(1, (PartitionEntry(1, b"", inside, "ps-1"),
                         PartitionEntry(2, inside, None, "ps-1"))),
        {1: load(1, 30.0), 2: load(2, 20.0)})
    assert account_synced_ms(ranges, "acme") == 20_000  # both halves hold acme's keys
    assert account_synced_ms([], "acme") == 0


def signed(ranges: list[internal_pb.SyncedRange], stamp: str = "west-1",
           at_ms: int = 1_000_000) -> internal_pb.SyncReport:
    report = internal_pb.SyncReport(stamp=stamp, timestamp_ms=at_ms, ranges=ranges)
    report.signature = geo_auth.sign_report(SECRET, report)
    return report


def test_a_report_is_verified_over_its_ranges_and_its_time() -> None:
    report = signed(report_ranges(two_partitions(), {1: load(1, 50.0)}))
    geo_auth.verify_report(SECRET, report, now_s=1_000.0)
    tampered = internal_pb.SyncReport.FromString(report.SerializeToString())
    tampered.ranges[0].synced_ms += 60_000  # a claim of more than was synced
    with pytest.raises(Unauthenticated, match="signature"):
        geo_auth.verify_report(SECRET, tampered, now_s=1_000.0)
    with pytest.raises(Unauthenticated, match="signature"):
        geo_auth.verify_report(b"x" * 32, report, now_s=1_000.0)
    with pytest.raises(Unauthenticated, match="off"):
        geo_auth.verify_report(SECRET, report, now_s=1_000.0 + 301)


class FakeStore:
    """location/store.py's reads and the reports it keeps."""

    def __init__(self) -> None:
        self.reports: dict[str, internal_pb.SyncReport] = {}

    def resolve(self, account: str) -> tuple[AccountPlacement, int]:
        if account != "acme":
            raise NotFound(account)
        return AccountPlacement("acme", "west-1", "east-1", "live"), 1

    def stamps(self) -> dict[str, StampInfo]:
        return {"west-1": StampInfo("west-1", "west", ("127.0.0.2:1",)),
                "east-1": StampInfo("east-1", "east", ("127.0.0.3:1",))}

    def sync_report(self, stamp: str) -> internal_pb.SyncReport | None:
        return self.reports.get(stamp)

    def put_sync_report(self, report: internal_pb.SyncReport) -> None:
        self.reports[report.stamp] = report


class Context:
    def invocation_metadata(self) -> tuple[()]:
        return ()

    async def abort(self, code: Any, details: str) -> None:
        raise AssertionError(f"aborted {code}: {details}")

    def set_trailing_metadata(self, metadata: Any) -> None:
        pass


def test_the_location_keeps_a_signed_report_and_resolve_says_the_last_sync_time() -> None:
    store = FakeStore()
    cache = PlacementCache(store, ttl_s=0)  # type: ignore[arg-type]
    door = LocationInternalServicer(cache, SECRET, wall=lambda: 1_000.0)
    resolve = LocationServicer(cache)

    async def run() -> None:
        reply = await resolve.Resolve(location_pb.ResolveRequest(account="acme"), Context())
        assert reply.last_sync_ms == 0  # no report yet: unknown
        await door.ReportSync(signed(report_ranges(two_partitions(), {1: load(1, 40.0)})),
                              Context())
        reply = await resolve.Resolve(location_pb.ResolveRequest(account="acme"), Context())
        assert reply.last_sync_ms == 40_000

    asyncio.run(run())
    assert list(store.reports) == ["west-1"]


@pytest.mark.parametrize(("secret", "stamp", "error"), [
    (None, "west-1", Unavailable), (SECRET, "ghost-1", NotFound)])
def test_the_door_refuses_without_a_secret_and_from_an_unknown_stamp(
        secret: bytes | None, stamp: str, error: type[Exception]) -> None:
    store = FakeStore()
    door = LocationInternalServicer(PlacementCache(store), secret,  # type: ignore[arg-type]
                                    wall=lambda: 1_000.0)
    with pytest.raises(error):
        asyncio.run(door.ReportSync.__wrapped__(door, signed([], stamp), Context()))
    assert store.reports == {}


class FakeManager:
    def __init__(self, leader: bool) -> None:
        self.leader = leader
        self.last_map: PartitionMap | None = two_partitions()

    def is_leader(self) -> bool:
        return self.leader

    def partition_loads(self) -> dict[int, pb.PartitionLoad]:
        return {1: load(1, 12.5), 2: load(2, 7.0)}


def test_only_a_leader_in_a_location_reports_and_its_report_is_signed() -> None:
    settings = GeoSettings("west-1", ("127.0.0.1:1",), SECRET)
    sent: list[internal_pb.SyncReport] = []

    async def none() -> GeoSettings | None:
        return None

    async def placed() -> GeoSettings | None:
        return settings

    async def send(servers: tuple[str, ...], report: internal_pb.SyncReport) -> None:
        sent.append(report)

    async def run() -> list[bool]:
        out = []
        for manager, read in ((FakeManager(False), placed), (FakeManager(True), none),
                              (FakeManager(True), placed)):
            reporter = SyncReporter(manager, read, wall=lambda: 1_000.0)
            reporter._send = send  # type: ignore[method-assign]
            out.append(await reporter.report_once())
        return out

    assert asyncio.run(run()) == [False, False, True]
    (report,) = sent
    geo_auth.verify_report(SECRET, report, now_s=1_000.0)
    assert report.stamp == "west-1" and account_synced_ms(report.ranges, "zed") == 7_000


def test_status_falls_back_on_the_locations_last_sync_time_when_the_primary_is_gone() -> None:
    from tools.geo_account import GeoStatus

    placement = AccountPlacement("acme", "west-1", "east-1", "live", 3)
    lines = GeoStatus(placement, None, "west-1 does not answer", 1_000.0).lines(1_004.0)
    assert lines[1] == "replication: unknown (west-1 does not answer)"
    assert lines[2].startswith("the location's last report: last sync ") \
        and lines[2].endswith("(lag 4.0 s)")
    assert len(GeoStatus(placement, None, "gone").lines(1_004.0)) == 2  # none to fall on


def test_no_last_sync_time_and_no_failover_while_the_secondary_is_not_live() -> None:
    from common.errors import PreconditionFailed
    from tools.geo_account import GeoStatus, check_failover_target

    store = FakeStore()
    store.resolve = lambda account: (  # type: ignore[method-assign]
        AccountPlacement("acme", "west-1", "east-1", "unavailable", 2), 1)
    store.reports["west-1"] = signed(report_ranges(two_partitions(), {1: load(1, 40.0)}))
    resolve = LocationServicer(PlacementCache(store, ttl_s=0))  # type: ignore[arg-type]
    reply = asyncio.run(resolve.Resolve(location_pb.ResolveRequest(account="acme"), Context()))
    assert reply.last_sync_ms == 0  # nothing is synced to an unavailable secondary
    placement = store.resolve("acme")[0]
    with pytest.raises(PreconditionFailed, match="east-1 is unavailable, not live"):
        check_failover_target(placement)
    assert "replication: none" in GeoStatus(placement, None).lines(0.0)[1]


def test_an_accounts_shipping_is_known_only_once_every_partition_holding_it_ships() -> None:
    """A partition that does not ship yet has no figures: a drain or status over the others
    would leave its writes out (a planned failover would then lose them)."""
    from tools.geo_account import shipping_in

    def partition(pid: int, low: bytes, high: bytes | None, geo: bool) -> pb.PartitionLoad:
        key_range = pb.KeyRange(low=low, high=high or b"", has_high=high is not None)
        return pb.PartitionLoad(partition_id=pid, range=key_range, geo=geo,
                                geo_synced_s=50.0 if geo else 0.0, geo_lag_ops=2)

    inside = keys.pname_prefix("acme", "log-k")
    one_ships = pb.ServerLoad(partitions=[partition(1, b"", inside, True),
                                          partition(2, inside, None, False)])
    assert shipping_in([one_ships], "acme") is None
    assert shipping_in([one_ships], "aaa") is not None  # only the first partition holds it
    both = pb.ServerLoad(partitions=[partition(1, b"", inside, True),
                                     partition(2, inside, None, True)])
    shipping = shipping_in([both], "acme")
    assert shipping is not None and (shipping.partitions, shipping.lag_ops) == (2, 4)
