"""The limits the SDK checks arguments against before anything is sent (they are the
stamp's own: its `partition` config section). A stamp configured otherwise is met by
passing `limits=` to a Client: a `Limits`, or any object with these attributes (the
server's own PartitionLimits has them)."""

from __future__ import annotations

from dataclasses import dataclass

KiB = 1024
MiB = 1024 * KiB
TOKEN_BYTES_MAX = 128  # a mutation's token, UTF-8


@dataclass(frozen=True)
class Limits:
    """The defaults of a stamp (names and units as in its config)."""

    value_bytes_max: int = 4 * MiB - 4 * KiB
    record_bytes_max: int = 1 * MiB
    append_records_max: int = 10_000
    append_bytes_max: int = 4 * MiB
    batch_ops_max: int = 100
    row_bytes_max: int = 1 * KiB
    read_records_max: int = 10_000
    read_bytes_max: int = 4 * MiB
    # gRPC messages to and from a front end (a read of read_bytes_max with its framing).
    rpc_message_bytes_max: int = 64 * MiB
