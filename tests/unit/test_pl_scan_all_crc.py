"""AsyncPartitionClient.scan_all checks every value against the CRC32C stored with it, as
`get`, `read` and `scan` do (§5, §8 invariant 6): a flipped byte is a ChecksumError, never
wrong bytes. The pages come from a fake scan_client.scan (the wire is tested in
tests/probe/test_scan.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from common.checksums import crc32c
from common.errors import ChecksumError
from common.proto import partition_pb2 as pb
from partition_layer import client, scan_client


def item(row: bytes, value: bytes) -> pb.ScanItem:
    return pb.ScanItem(pname="grp", row=row, value=value, crc=crc32c(value))


def test_scan_all_fails_on_a_value_that_does_not_match_its_crc(
        monkeypatch: pytest.MonkeyPatch) -> None:
    good = [item(b"a", b"one"), item(b"b", b"two")]
    bad = item(b"c", b"three")
    bad.value = b"thref"

    async def pages(*_: object, **__: object) -> AsyncIterator[scan_client.ScanPage]:
        yield scan_client.ScanPage(good, b"")
        yield scan_client.ScanPage([bad], b"")
    monkeypatch.setattr(scan_client, "scan", pages)

    got: list[tuple[tuple[str, bytes], bytes]] = []

    async def scenario() -> None:
        pc = client.AsyncPartitionClient(["127.0.0.1:1"])
        try:
            async for entry in pc.scan_all("acct"):
                got.append(entry)
        finally:
            await pc.close()

    with pytest.raises(ChecksumError, match="row b'c'"):
        asyncio.run(scenario())
    assert got == [(("grp", b"a"), b"one"), (("grp", b"b"), b"two")]
