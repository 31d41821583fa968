"""A log append's row value (record_batch.py): records with the CRC32Cs their writer sent,
round trips, the format marker that keeps format 1 (no CRCs) readable and apart, and refusal
of malformed or truncated buffers."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.checksums import crc32c
from common.errors import Internal
from partition_layer.record_batch import decode_records, encode_records, encoded_bytes

records_lists = st.lists(st.binary(max_size=40), min_size=1, max_size=12)


@given(records_lists, st.data(), st.integers(0, 2**40))
def test_round_trip_keeps_the_crcs_it_was_given(records: list[bytes], data: st.DataObject,
                                                offset: int) -> None:
    # Whatever CRCs come in are stored as they are: the writer's, never recomputed here
    # (a record changed after it was verified must fail the reader's check).
    crcs = data.draw(st.lists(st.integers(0, 2**32 - 1), min_size=len(records),
                              max_size=len(records)))
    last = offset + len(records) - 1
    encoded = encode_records(records, crcs)
    assert len(encoded) == encoded_bytes(records) == 8 + 8 * len(records) + sum(
        map(len, records))
    assert decode_records(encoded, last) == [
        (offset + i, r, c) for i, (r, c) in enumerate(zip(records, crcs, strict=True))]


@given(records_lists)
def test_every_truncation_or_extension_raises_internal(records: list[bytes]) -> None:
    encoded = encode_records(records, [crc32c(r) for r in records])
    for cut in range(len(encoded)):
        with pytest.raises(Internal):
            decode_records(encoded[:cut], 100)
    with pytest.raises(Internal):
        decode_records(encoded + b"\x00", 100)


def test_format_one_reads_with_crcs_of_its_bytes() -> None:
    """Rows written before end-to-end checksums: u32 count, lengths, records. Its count is
    never 0, format 2's marker, so neither is read as the other."""
    records = [b"old", b"", b"rows"]
    legacy = struct.pack("<4I", 3, 3, 0, 4) + b"".join(records)
    assert decode_records(legacy, 9) == [(7 + i, r, crc32c(r)) for i, r in enumerate(records)]
    assert encode_records(records, [1, 2, 3])[:4] == b"\x00" * 4


def test_malformed_batches_raise_internal() -> None:
    for bad in [struct.pack("<II", 0, 0),                    # format 2 of no record
                struct.pack("<II", 0, 1 << 30),              # a count the buffer cannot hold
                struct.pack("<IIII", 0, 1, 5, 0) + b"abcd",  # a length past the end
                struct.pack("<I", 2) + struct.pack("<I", 1)]:  # format 1, lengths cut short
        with pytest.raises(Internal):
            decode_records(bad, 10)
