"""Inter-stamp replication's door at a front end (frontend/geo_door.py, issue 30): a call
signed with the location's secret, for this stamp, of an account held here as the caller's
secondary at the caller's epoch, is applied whole; anything else is refused before anything
is applied."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from common.errors import (
    InvalidArgument,
    PreconditionFailed,
    StampError,
    Unauthenticated,
    Unavailable,
)
from common.proto import frontend_pb2 as fe_pb
from common.proto import partition_pb2 as pb
from frontend.accounts import PRIMARY, SECONDARY, GeoRole
from frontend.auth import Held
from frontend.geo_door import GeoDoor
from location import geo_auth
from location.geo_auth import GeoSettings
from partition_layer import keys
from partition_layer.requests import handle
from partition_layer.rows import Row, encode_row
from tests.support.geo import LIMITS, Side

SECRET = bytes(range(32))
NOW_S = 1_800_000_000.0
HERE = GeoSettings("east-1", ("127.0.0.1:9",), SECRET)
HELD = GeoRole(SECONDARY, "west-1", 2)  # the account here: west-1's secondary at epoch 2


class Accounts:
    """Authenticator.account as the door asks it."""

    def __init__(self, role: GeoRole) -> None:
        self.role = role

    async def account(self, name: str, peer: str = "") -> Held | None:
        return Held((b"k" * 32, b"l" * 32), self.role) if name == "acct" else None


def replicate(pname: str, row: bytes, value: bytes, account: str = "acct") -> pb.Request:
    key = keys.encode_key(account, pname, keys.KIND_ENTITY, row)
    return pb.Request(account=account, pname=pname, replicate=pb.ReplicateOp(
        keys=[key], rows=[encode_row(Row(41, value=value))]))


def signed(requests: list[pb.Request], *, source: str = "west-1", target: str = "east-1",
           account: str = "acct", epoch: int = 2, secret: bytes = SECRET,
           at_s: float = NOW_S) -> fe_pb.ReplicateCall:
    timestamp_ms = int(at_s * 1000)
    digest = geo_auth.requests_digest(r.SerializeToString() for r in requests)
    return fe_pb.ReplicateCall(
        source_stamp=source, target_stamp=target, account=account, epoch=epoch,
        requests=requests, timestamp_ms=timestamp_ms,
        signature=geo_auth.sign(secret, source, target, account, epoch, timestamp_ms, digest))


def door(side: Side, role: GeoRole = HELD,
         settings: GeoSettings | None = HERE) -> GeoDoor:
    async def read() -> GeoSettings | None:
        return settings

    async def forward(request: pb.Request) -> pb.Response:
        from common import rpc

        request.id = next(side.ids)
        response = await handle(request, side.server.find, LIMITS)
        if response.error:
            raise rpc.error_from_name(response.error, response.message)
        return response

    return GeoDoor(read, Accounts(role), forward, wall=lambda: NOW_S)  # type: ignore[arg-type]


async def value(side: Side, pname: str, row: bytes) -> Any:
    got = await side.ask(pname, get=pb.GetOp(row=row))
    return got.error or got.value


def test_a_signed_call_of_a_held_secondary_is_applied_whole() -> None:
    async def scenario() -> None:
        side = Side()
        call = signed([replicate("users", b"a", b"1"), replicate("logs", b"b", b"2")])
        answer = await door(side).replicate(call)
        assert answer.applied == 2
        assert await value(side, "users", b"a") == b"1"
        assert await value(side, "logs", b"b") == b"2"

    asyncio.run(scenario())


CASES: dict[str, tuple[dict[str, Any], type[StampError], str]] = {
    "stand-alone stamp": ({"settings": None}, Unavailable, "in no location"),
    "another target": ({"call": {"target": "south-1"}}, Unauthenticated, "south-1"),
    "wrong secret": ({"call": {"secret": bytes(32)}}, Unauthenticated, "signature"),
    "stale timestamp": ({"call": {"at_s": NOW_S - 301}}, Unauthenticated, "301 s off"),
    "primary here": ({"role": GeoRole(PRIMARY)}, PreconditionFailed, "held here as primary"),
    "another primary": ({"role": GeoRole(SECONDARY, "south-1", 2)}, PreconditionFailed,
                        "secondary of south-1"),
    "older epoch": ({"call": {"epoch": 1}}, PreconditionFailed, "not as the secondary"),
    "unknown account": ({"call": {"account": "ghost"}, "account": "ghost"},
                        PreconditionFailed, "not held here"),
    "other account's op": ({"requests": "other"}, InvalidArgument, "of its account only"),
    "not a replicate op": ({"requests": "put"}, InvalidArgument, "of its account only"),
    "one name twice": ({"requests": "twice"}, InvalidArgument, "twice"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_anything_else_is_refused_before_anything_is_applied(case: str) -> None:
    how, error, message = CASES[case]
    good = replicate("users", b"a", b"1", account=how.get("account", "acct"))
    requests = {
        None: [good],
        "other": [good, replicate("more", b"x", b"2", account="other")],
        "put": [good, pb.Request(account="acct", pname="more", put=pb.PutOp(row=b"x"))],
        "twice": [good, replicate("users", b"b", b"2")],
    }[how.get("requests")]

    async def scenario() -> None:
        side = Side()
        gate = door(side, how.get("role", HELD), how.get("settings", HERE))
        with pytest.raises(error, match=message):
            await gate.replicate(signed(requests, **how.get("call", {})))
        assert await value(side, "users", b"a") == "NotFound"

    asyncio.run(scenario())
