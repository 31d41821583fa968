"""Local stamps as a whole: the stamp_factory fixture's type, a stamp with partition
servers, who owns a partition, and what a process wrote to its log."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from common.process import LOG_FILE
from partition_layer.client import PartitionClient
from tools.local_stamp import LocalStamp

StampFactory = Callable[..., LocalStamp]


def partition_stamp(factory: StampFactory, **partition: int) -> LocalStamp:
    return factory(3, 3, lock_servers=3, partition_managers=2, partition_servers=2,
                   partition=partition or None)


def owner_of(stamp: LocalStamp, pc: PartitionClient, partition_id: int = 1) -> str:
    current, _ = pc.partition_map()
    return current.get(partition_id).server


def log_says(stamp: LocalStamp, name: str, text: str) -> bool:
    return text in (Path(stamp.record(name).dir) / LOG_FILE).read_text(errors="replace")


def log_of(record_dir: str | Path) -> str:
    return (Path(record_dir) / LOG_FILE).read_text(errors="replace")
