"""An extent node's recovery (§2): at start, before it serves, rebuild every replica from its
commit point (the *latest* one only) plus the journal, then write the result through, so the
node starts with an empty journal.

Contract:
- Bytes in a data file past its commit point are garbage or journaled: the replay settles
  which, and the file is cut to the replayed end.
- A torn journal tail is cut by the journal's replay; records are applied in order.
- Every open replica comes back UNPROVEN (replica_state.py): this node may have died after
  forwarding an append and before journaling it, so it takes no append as the primary there
  until the extent is sealed.
- When `recover` returns, every replica's data file is fsync'd, its commit point written,
  the directory entries of everything created or deleted are durable, and the journal
  segments it replayed are gone.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from common.checksums import crc32c
from common.durable_fs import fsync_dir
from common.errors import Internal
from stream_layer import framing
from stream_layer.extent_node import records
from stream_layer.extent_node.extent_files import (
    create_data_file,
    fsync_file,
    remove_files,
    truncate_file,
    write_runs,
)
from stream_layer.extent_node.journal import Journal
from stream_layer.extent_node.records import IN_FILE, RECORD
from stream_layer.extent_node.replica import (
    Replica,
    ReplicaMeta,
    read_range_from_file,
    replica_paths,
    write_meta,
)
from stream_layer.extent_node.replica_state import Event, State, next_state

log = logging.getLogger(__name__)


def new_replica(data_dir: Path, extent_id: int, replicas: list[str], keep: bool,
                sync_dir: bool = True) -> Replica:
    """A replica with an empty commit point and its data file created, name durable unless
    `sync_dir` is False (`keep`: a replay may find synced large appends already in the file)."""
    data_path, meta_path = replica_paths(data_dir, extent_id)
    create_data_file(data_path, keep, sync_dir)
    return Replica(ReplicaMeta(extent_id, replicas), data_path, meta_path, dirty=True)


class Recovery:
    def __init__(self, data_dir: Path, journal: Journal) -> None:
        self.data_dir = data_dir
        self.journal = journal
        self.replicas: dict[int, Replica] = {}

    def run(self) -> dict[int, Replica]:
        """Rebuild every replica (blocking); return them by extent id."""
        for tmp in self.data_dir.glob("*.meta.tmp"):
            tmp.unlink()
        for meta_path in sorted(self.data_dir.glob("ext-*.meta")):
            self._load_commit_point(meta_path)
        replayed = list(self.journal.replay())
        last_segment = replayed[-1][0] if replayed else 0
        # Two passes: an append's bytes may have been cut by a seal recorded after it (a large
        # append's bytes are then gone from the data file), so learn the seals first.
        seals: dict[int, int] = {}
        for _, body in replayed:
            kind, extent_id, length = RECORD.unpack_from(body)
            if kind == records.SEAL:
                seals[extent_id] = length
        for _, body in replayed:
            self._replay(body, seals)
        known = {r.data_path for r in self.replicas.values()}
        for orphan in self.data_dir.glob("ext-*.dat"):
            if orphan not in known:
                log.warning("deleting %s: not a replica (deleted, or never created)", orphan)
                orphan.unlink()
        for replica in self.replicas.values():
            truncate_file(replica.data_path, replica.file_end)
            if replica.dirty:
                fsync_file(replica.data_path)
                replica.meta.file_length = replica.file_end
                write_meta(replica.meta_path, replica.meta.encode())
                replica.dirty = False
            replica.state = next_state(replica.state, Event.RESTART)
        # Creations and unlinks above (orphans, replayed DELETEs) before the journal goes.
        fsync_dir(self.data_dir)
        for path in self.journal.segments():
            if int(path.stem.split("-")[1]) <= last_segment:
                path.unlink()
        fsync_dir(self.journal.directory)
        log.info("recovered %d extents, replayed %d journal records", len(self.replicas),
                 len(replayed))
        return self.replicas

    def _load_commit_point(self, meta_path: Path) -> None:
        meta = ReplicaMeta.decode(meta_path.read_bytes(), str(meta_path))
        data_path, _ = replica_paths(self.data_dir, meta.extent_id)
        state = State.SEALED if meta.sealed else State.FENCED if meta.fenced else State.OPEN
        replica = Replica(meta, data_path, meta_path, state=state)
        size = data_path.stat().st_size if data_path.exists() else 0
        end = min(size, meta.file_length)
        if meta.sealed:
            end = min(end, meta.sealed_length)
        if size < meta.file_length:
            log.error("extent %d: data file has %d bytes, its commit point claims %d",
                      meta.extent_id, size, meta.file_length)
        replica.accepted_end = replica.durable_end = replica.file_end = end
        self.replicas[meta.extent_id] = replica

    def _replay(self, body: bytes, seals: dict[int, int]) -> None:
        kind, extent_id, offset = RECORD.unpack_from(body)
        replica = self.replicas.get(extent_id)
        if kind == records.CREATE:
            if replica is None:
                # The directory is synced once, before the journal is dropped.
                self.replicas[extent_id] = new_replica(
                    self.data_dir, extent_id, json.loads(bytes(body[RECORD.size:])), keep=True,
                    sync_dir=False)
            return
        if kind == records.DELETE:
            if replica is not None:
                del self.replicas[extent_id]
                remove_files(replica.meta_path, replica.data_path)
            return
        if replica is None:
            return  # deleted since
        if kind == records.SEAL:
            self._replay_seal(replica, offset)
        elif kind == records.FENCE:
            replica.meta.fenced = replica.dirty = True
            replica.state = next_state(replica.state, Event.FENCE)
        elif kind == records.APPEND_IN_FILE:
            length, crc = IN_FILE.unpack_from(body, RECORD.size)
            self._replay_in_file(replica, offset, length, crc, self._cap(replica, seals))
        elif kind == records.APPEND:
            self._replay_append(replica, offset, memoryview(body)[RECORD.size:],
                                self._cap(replica, seals))
        else:
            raise Internal(f"unknown journal record kind {kind}")

    @staticmethod
    def _cap(replica: Replica, seals: dict[int, int]) -> int | None:
        return replica.meta.sealed_length if replica.sealed else seals.get(replica.extent_id)

    @staticmethod
    def _replay_seal(replica: Replica, length: int) -> None:
        end = replica.file_end
        if end < length:
            log.error("extent %d: sealed at %d but holds only %d", replica.extent_id, length,
                      end)
        elif end > length:
            truncate_file(replica.data_path, length)
        replica.accepted_end = replica.durable_end = replica.file_end = min(end, length)
        replica.meta.sealed, replica.meta.sealed_length = True, length
        replica.dirty = True
        replica.state = next_state(replica.state, Event.SEAL)

    @staticmethod
    def _replay_append(replica: Replica, offset: int, frames: memoryview,
                       cap: int | None) -> None:
        end = replica.file_end
        if cap is not None:
            # A seal cuts what lies beyond it, but what lies below it may still be only in
            # the journal (sealed before any checkpoint).
            frames = frames[:max(0, cap - offset)]
        record_end = offset + len(frames)
        if record_end <= end:
            return  # already in the data file, or wholly cut by the seal
        if offset > end:
            log.error("extent %d: journal record at %d, but the replica ends at %d: "
                      "the replica stays at %d", replica.extent_id, offset, end, end)
            return
        suffix = frames[end - offset:]
        framing.verify_frames(suffix, f"journal replay of extent {replica.extent_id} at {end}")
        write_runs([(replica.data_path, [(end, bytes(suffix))], replica.writeback_end)])
        replica.accepted_end = replica.durable_end = replica.file_end = record_end
        replica.dirty = True

    @staticmethod
    def _replay_in_file(replica: Replica, offset: int, length: int, crc: int,
                        cap: int | None) -> None:
        """The frames of an APPEND_IN_FILE record were fdatasync'd before the record: check
        they are there and move the replica's end past them."""
        end = replica.file_end
        record_end = offset + length
        if cap is not None:
            record_end = min(record_end, cap)
        if record_end <= end:
            return
        if offset != end:
            log.error("extent %d: journal record at %d, but the replica ends at %d",
                      replica.extent_id, offset, end)
            return
        frames = read_range_from_file(replica.data_path, offset, record_end)
        whole = record_end == offset + length
        if len(frames) != record_end - offset or (whole and crc32c(frames) != crc):
            raise Internal(f"extent {replica.extent_id}: the bytes [{offset}, {record_end}) "
                           f"the journal says were synced to the data file are not there")
        # Cut by a seal, the record's CRC no longer covers what is left: its frames' do.
        framing.verify_frames(frames, f"journal replay of extent {replica.extent_id} at "
                              f"{offset}")
        replica.accepted_end = replica.durable_end = replica.file_end = record_end
        replica.dirty = True
