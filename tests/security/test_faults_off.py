"""Issue 28, item 4: the Faults service (arm crash, delay, flip, torn writes; cut the network)
checks no credentials, so a server serves it only when started with it (`--faults-rpc`: tests
and `stamp chaos` ask for it through LocalStamp's `faults` option). A stamp started without
it refuses Faults calls on every kind of server, and ignores STAMP_FAULTS in its
environment. Real processes: one small whole stamp, shared by the module."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from common import rpc
from common.errors import FaultInjected, NotFound
from common.proto import extent_node_pb2 as en_pb
from common.proto import extent_node_pb2_grpc as en_grpc
from common.proto import faults_pb2, faults_pb2_grpc
from tests.conftest import module_stamp
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

MESSAGE_BYTES_MAX = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    """One process of every kind (3 ENs: the stream manager waits for a fault domain's
    worth), started as `stamp up` by hand starts them: without the Faults service."""
    with module_stamp(tmp_path_factory, "faults-off", faults=False, extent_nodes=3,
                      stream_managers=1, lock_servers=1, partition_managers=1,
                      partition_servers=1, front_ends=1) as local:
        yield local


def arm_status(address: str) -> grpc.StatusCode | None:
    """The status of asking the server at `address` to arm a (harmless) fault point."""
    with rpc.sync_channel(address, MESSAGE_BYTES_MAX) as channel:
        try:
            faults_pb2_grpc.FaultsStub(channel).Arm(
                faults_pb2.ArmRequest(spec="nowhere=delay:1,times=1"), timeout=10)
        except grpc.RpcError as exc:
            return exc.code()
    return None


def test_every_server_refuses_the_faults_service(stamp: LocalStamp) -> None:
    kinds = {rec.kind for rec in stamp.records.values()}
    assert kinds == {"extent-node", "stream-manager", "lock", "partition-manager",
                     "partition-server", "front-end"}
    refused = {rec.name: arm_status(rec.address) for rec in stamp.records.values()}
    assert refused == {name: grpc.StatusCode.UNIMPLEMENTED for name in stamp.records}


def test_fault_points_in_the_environment_are_ignored(stamp: LocalStamp) -> None:
    """en-1 restarted with STAMP_FAULTS arming its read path: a read of an unknown extent
    still says NotFound (armed, it would say FaultInjected)."""
    stamp.kill("en-1")
    stamp.start("en-1", env={"STAMP_FAULTS": "en.read=fail"})
    with rpc.sync_channel(stamp.address("en-1"), MESSAGE_BYTES_MAX) as channel, \
            pytest.raises(grpc.RpcError) as failed:
        en_grpc.ExtentNodeStub(channel).Read(
            en_pb.ReadRequest(extent_id=987654, offset=0, length=1), timeout=10)
    error = rpc.from_rpc_error(failed.value)
    assert not isinstance(error, FaultInjected)
    assert isinstance(error, NotFound), error
