"""The options a read of the Stamp data source takes (which logs, how to cut them, which
names) and the Spark input partitions its plans make: shared by the batch reader
(spark/datasource.py) and the streaming one (spark/stream.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from common.errors import InvalidArgument
from spark.datasource_access import Access
from spark.datasource_plan import Bound, EntityPiece, LogSpan, valid_name

RECORDS_PER_PARTITION = 200_000  # a Spark task's share of a log: a few seconds of reading


def is_log_read(options: Any) -> bool:
    return bool(options.get("log")) or options.get("logPrefix") is not None


def positive_option(options: Any, name: str, default: int) -> int:
    text = options.get(name) or str(default)
    if not text.isdigit() or int(text) <= 0:
        raise InvalidArgument(f"option {name} is a positive integer, not {text!r}")
    return int(text)


def records_per_partition(options: Any) -> int:
    return positive_option(options, "recordsPerPartition", RECORDS_PER_PARTITION)


def log_names(options: Any, access: Access) -> list[str]:
    """The logs a read names (option `log`), or those listed under `logPrefix`."""
    if options.get("log"):
        logs = [name.strip() for name in options["log"].split(",") if name.strip()]
        bad = [name for name in logs if not valid_name(name)]
        if bad:
            raise InvalidArgument(f"option log: {bad[0]!r} is not a log name")
        return sorted(set(logs))
    return list(access.shared_client().list_logs(options.get("logPrefix") or ""))


def name_option(options: Any, name: str) -> Bound | None:
    value = options.get(name)
    if not value:
        return None
    if not valid_name(value):
        raise InvalidArgument(f"option {name}: {value!r} is not a partition name")
    return (value, b"")


@dataclass
class EntityPartition(InputPartition):
    piece: EntityPiece


@dataclass
class LogPartition(InputPartition):
    spans: list[LogSpan]
