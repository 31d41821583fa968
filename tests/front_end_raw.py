"""Talking to a front end as the SDK would, without the SDK (tests/probe/test_front_end*.py):
a raw gRPC stub, requests signed here with frontend/wire.py."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

from common.clock import SystemClock
from common.errors import StampError
from common.proto import frontend_pb2 as fe_pb
from common.proto import frontend_pb2_grpc as fe_grpc
from common.proto import partition_pb2 as pb
from common.rpc import sync_channel
from frontend import wire
from frontend.accounts import AccountStore
from lock_service.client import LockClient
from partition_layer.payload_crc import payload_crcs
from tools.local_stamp import LocalStamp

StampFactory = Callable[..., LocalStamp]
MESSAGE_BYTES_MAX = 64 * 1024 * 1024


class RawFrontEnd:
    """A front end through its raw stub: one Call stream per `call`."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._channel = sync_channel(address, MESSAGE_BYTES_MAX)
        self.stub = fe_grpc.FrontEndStub(self._channel)

    def call_many(self, requests: list[pb.Request], timeout_s: float = 30.0
                  ) -> dict[int, pb.Response]:
        for i, request in enumerate(requests):
            request.id = i + 1
        answers: dict[int, pb.Response] = {}
        for batch in self.stub.Call(iter([pb.RequestBatch(requests=requests)]),
                                    timeout=timeout_s):
            for response in batch.responses:
                answers[response.id] = response
        assert sorted(answers) == [r.id for r in requests], answers
        return answers

    def call(self, request: pb.Request) -> pb.Response:
        return self.call_many([request])[1]

    def status(self) -> fe_pb.FrontEndStatus:
        return self.stub.Status(fe_pb.FrontEndStatusRequest(), timeout=10)

    def close(self) -> None:
        self._channel.close()


def append_request(account: str, log: str, records: list[bytes], token: str = "") -> pb.Request:
    return pb.Request(account=account, pname=log, append=pb.AppendOp(
        records=records, crcs=payload_crcs(records), token=token or f"t-{time.time_ns()}"))


def signed(request: pb.Request, credentials: wire.Credentials, skew_s: float = 0.0
           ) -> pb.Request:
    wire.sign_call(request, credentials, time.time() + skew_s)
    return request


def refused(response: pb.Response, error: type[StampError], *words: str) -> None:
    assert response.error == error.__name__, (response.error, response.message)
    for word in words:
        assert word in response.message, (word, response.message)


def account_store(stamp: LocalStamp) -> Iterator[AccountStore]:
    """The stamp's accounts, read through (no cache), for the duration of a fixture."""
    with LockClient.from_stamp(stamp.data_dir, holder="test") as locks:
        yield AccountStore(locks, SystemClock(), cache_ttl_s=0)


def raw_front_end(stamp: LocalStamp, name: str = "fe-1") -> Iterator[RawFrontEnd]:
    front_end = RawFrontEnd(stamp.address(name))
    yield front_end
    front_end.close()


def rss_bytes(pid: int) -> int:
    """The resident set of process `pid` (VmRSS in /proc/PID/status), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")
