"""Converting one sealed extent to Reed–Solomon fragments (§2 "Erasure coding", §7 "ec"): a
plain function, so a Spark job can call it per extent and `stamp extent ec ID` once.

The steps, and why a crash after any of them leaves the extent readable and the conversion
restartable (a rerun starts over, or finishes what is left):
1. read the sealed extent from its replicas (every frame's CRC32C checked) — nothing changed;
2. cut it on frame boundaries into k data fragments (layout.py) and encode m parity ones;
3. place the k+m fragments on distinct extent nodes spread over fault domains, write them
   (each node checks the fragment's CRC32C, fsyncs and renames it into place) — the stream
   manager still says "sealed, on these replicas": readers use the replicas; fragments of a
   stopped attempt are overwritten by the next one (or left for GC if placed elsewhere);
4. verify each fragment as stored (the node rereads it from disk) against its CRC32C;
5. record the fragments, layout and checksums in the stream manager, atomically
   (RecordErasureCoding: state -> erasure_coded) — from here readers use the fragments;
6. delete the replicas and record that (ReleaseReplicas); a rerun of a coded extent does
   only this step, for the replicas still listed (e.g. on a node that was down).
"""

from __future__ import annotations

import asyncio
import logging

from common import faults
from common.errors import InvalidArgument, NotFound, PreconditionFailed, StampError, Unavailable
from common.proto import stream_manager_pb2 as sm_pb
from stream_layer.ec.layout import default_code, layout_extent
from stream_layer.ec.reader import codec
from stream_layer.extent_client import AsyncExtentClient
from stream_layer.sm_client import AsyncStreamManagerClient
from stream_layer.stream_manager.placement import Candidate, place_fragments

log = logging.getLogger(__name__)

ERASURE_CODED, SEALED = "erasure_coded", "sealed"


async def convert_extent(sm: AsyncStreamManagerClient, extents: AsyncExtentClient,
                         extent_id: int, k: int | None = None, m: int | None = None
                         ) -> sm_pb.ExtentInfo:
    """Erasure-code sealed extent `extent_id` as RS(k, m) (default: the configured code, 6+3,
    or a narrower one on a small stamp: `default_code` of the healthy extent nodes) and drop
    its replicas; see the module for the steps.
    Returns the extent's record; its `replicas` list what could not be deleted yet (rerun).
    An extent coded already is only cleaned up (its k and m stay)."""
    info = await sm.get_extent(extent_id)
    if info.state == SEALED:
        info = await _encode_and_record(sm, extents, info, k, m)
    elif info.state != ERASURE_CODED:
        raise PreconditionFailed(f"extent {extent_id} is {info.state}: only sealed extents "
                                 f"are erasure-coded")
    return await _drop_replicas(sm, extents, info)


async def _encode_and_record(sm: AsyncStreamManagerClient, extents: AsyncExtentClient,
                             info: sm_pb.ExtentInfo, k: int | None, m: int | None
                             ) -> sm_pb.ExtentInfo:
    nodes = [n for n in await sm.list_nodes() if n.state == "alive" and not n.suspect]
    if k is None or m is None:
        k, m = default_code(len(nodes), sm.limits.ec_data_fragments,
                            sm.limits.ec_parity_fragments)
    extent = await read_sealed(extents, info)
    layout = layout_extent(extent, k, m)
    data = layout.data_fragments(extent)
    del extent
    fragments = data + codec(k, m).encode(data)
    await faults.apoint("ec.convert.after_encode")

    names = place_fragments([Candidate(n.name, n.fault_domain, n.extents) for n in nodes],
                            k + m)
    address_of = {n.name: n.address for n in nodes}
    addresses = [address_of[name] for name in names]
    crcs = await asyncio.gather(*(
        extents.write_fragment(a, info.extent_id, i, f)
        for i, (a, f) in enumerate(zip(addresses, fragments, strict=True))))
    await faults.apoint("ec.convert.after_write")
    stored = await asyncio.gather(*(extents.verify_fragment(a, info.extent_id, i)
                                    for i, a in enumerate(addresses)))
    if list(stored) != list(crcs):
        bad = [i for i, (a, b) in enumerate(zip(stored, crcs, strict=True)) if a != b]
        raise Unavailable(f"extent {info.extent_id}: fragments {bad} do not read back as "
                          f"written; conversion abandoned (rerun it)")
    recorded = await sm.record_erasure_coding(info.extent_id, names, k, m, layout.cuts, crcs)
    log.info("extent %d erasure-coded as RS(%d,%d) on %s", info.extent_id, k, m, names)
    await faults.apoint("ec.convert.after_record")
    return recorded


async def read_sealed(extents: AsyncExtentClient, info: sm_pb.ExtentInfo) -> bytes:
    """A sealed extent's bytes, chunk by chunk from the first replica that serves each
    (every frame verified by the extent client)."""
    if not info.addresses:
        raise Unavailable(f"extent {info.extent_id} lists no replica")
    parts: list[bytes] = []
    offset = 0
    while offset < info.sealed_length:
        last_error: StampError | None = None
        want = min(extents.limits.read_bytes_max, info.sealed_length - offset)
        for address in info.addresses:
            try:
                frames = await extents.read_frames(address, info.extent_id, offset, want)
                break
            except StampError as exc:
                last_error = exc
        else:
            raise Unavailable(f"extent {info.extent_id}: no replica serves offset {offset}: "
                              f"{last_error}")
        parts.append(frames)
        offset += len(frames)
    if offset != info.sealed_length:
        raise InvalidArgument(f"extent {info.extent_id}: read {offset} bytes of "
                              f"{info.sealed_length}")
    return b"".join(parts)


async def _drop_replicas(sm: AsyncStreamManagerClient, extents: AsyncExtentClient,
                         info: sm_pb.ExtentInfo) -> sm_pb.ExtentInfo:
    deleted = []
    for name, address in zip(info.replicas, info.addresses, strict=True):
        try:
            await extents.delete_extent(address, info.extent_id)
        except NotFound:
            pass  # deleted by an earlier attempt
        except StampError as exc:
            log.warning("extent %d: cannot delete the replica on %s yet (%s)", info.extent_id,
                        name, exc)
            continue
        deleted.append(name)
        await faults.apoint("ec.convert.after_delete_replica")
    if not deleted:
        return info
    return await sm.release_replicas(info.extent_id, deleted)
