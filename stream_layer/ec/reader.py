"""Reading erasure-coded extents (§2 "Erasure coding"): straight from the data fragment that
holds a range, or, when that fragment is missing, corrupt or slow, rebuilt from any k.

Contracts:
- `CodedReader.read_range` returns extent bytes [offset, offset+length). Each data fragment
  the range touches is asked first; if it fails, or has not answered within
  `fragment_hedge_ms`, k other fragments are asked for the same columns (one more for each
  that fails; all the rest if none has answered within `fragment_hedge_ms` again: hedged),
  and the first k answers — the slow data fragment's own among them, should it arrive —
  rebuild it. Every answer is CRC32C-checked on the wire, and the node checks its pages at rest.
- `read_frames` has the extent node's Read semantics (whole frames from `offset`, within
  `length`, at least one) and verifies every frame's CRC32C (end to end, §5): bytes that
  fail are re-read without the data fragments they came from, so a read returns the written
  bytes or fails — never silently (§8 invariant 6).
- A fragment found missing or corrupt is reported (`report`), once per reader, so that the
  stream manager rebuilds it; a slow one is not.
- `rebuild_fragments` recomputes whole fragments from any k others, column chunk by column
  chunk, and checks each against the CRC32C recorded at conversion: a rebuilt fragment is
  bit-identical to the lost one or the rebuild fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass

from common.checksums import crc32c
from common.errors import (
    ChecksumError,
    InvalidArgument,
    NotFound,
    OutOfRange,
    StampError,
    Unavailable,
)
from common.proto import stream_manager_pb2 as sm_pb
from erasure import ReedSolomon
from stream_layer import framing
from stream_layer.ec.layout import FragmentLayout, Piece
from stream_layer.extent_client import AsyncExtentClient

log = logging.getLogger(__name__)

Report = Callable[[int, int, str], Awaitable[None]]
# Failures that mean the fragment itself is bad (not merely unreachable): worth a repair.
BAD_FRAGMENT = (ChecksumError, NotFound)


@functools.lru_cache(maxsize=16)
def codec(k: int, m: int) -> ReedSolomon:
    return ReedSolomon(k, m)


@dataclass(frozen=True)
class CodedExtent:
    """What a reader needs of an erasure-coded extent: its layout and where each fragment is."""

    extent_id: int
    layout: FragmentLayout
    addresses: tuple[str, ...]  # per fragment, data then parity
    crcs: tuple[int, ...]

    @classmethod
    def from_info(cls, info: sm_pb.ExtentInfo) -> CodedExtent:
        if info.state != "erasure_coded":
            raise InvalidArgument(f"extent {info.extent_id} is {info.state}, not erasure-coded")
        return cls(info.extent_id, FragmentLayout(info.ec_k, info.ec_m, tuple(info.ec_cuts)),
                   tuple(info.fragment_addresses), tuple(info.ec_crcs))

    @property
    def fragments(self) -> int:
        return self.layout.k + self.layout.m


class CodedReader:
    def __init__(self, extents: AsyncExtentClient, report: Report | None = None) -> None:
        self.extents = extents
        self.hedge_s = extents.limits.fragment_hedge_ms / 1000
        self._report = report
        self._reported: set[tuple[int, int]] = set()

    # ---- frames ---------------------------------------------------------------------------

    async def read_frames(self, coded: CodedExtent, offset: int, length: int) -> bytes:
        """Whole verified frames from `offset` within `length` (at least one frame)."""
        try:
            return await self._read_frames(coded, offset, length, distrust=())
        except ChecksumError as exc:
            touched = {p.index for p in coded.layout.pieces(
                offset, min(length, coded.layout.length - offset))}
            log.warning("extent %d at %d: %s; rebuilding without data fragments %s",
                        coded.extent_id, offset, exc, sorted(touched))
            return await self._read_frames(coded, offset, length, distrust=touched)

    async def _read_frames(self, coded: CodedExtent, offset: int, length: int,
                           distrust: Collection[int]) -> bytes:
        limit = coded.layout.length
        if offset < 0 or length <= 0:
            raise InvalidArgument(f"read [{offset}, +{length}) of extent {coded.extent_id}")
        if offset >= limit:
            raise OutOfRange(f"extent {coded.extent_id}: offset {offset} is at or past its "
                             f"sealed length {limit}")
        end = min(offset + max(length, framing.HEADER_BYTES), limit)
        data = await self.read_range(coded, offset, end - offset, distrust)
        if len(data) < framing.HEADER_BYTES:
            raise ChecksumError(f"extent {coded.extent_id}: no whole frame header at {offset}")
        first = framing.frame_bytes(framing.HEADER.unpack_from(data)[0])
        if first > len(data):
            if offset + first > limit:
                raise ChecksumError(f"extent {coded.extent_id}: frame at {offset} claims "
                                    f"{first} bytes past the sealed length {limit}")
            data += await self.read_range(coded, offset + len(data), first - len(data),
                                          distrust)
        elif first < len(data) and end - offset > length:
            data = data[:first]  # read a header's worth for a tiny frame: keep just it
        whole = framing.valid_prefix(data)
        what = f"coded extent {coded.extent_id} at {offset}"
        if whole == 0:
            framing.verify_frames(data[:first], what)
            raise ChecksumError(f"{what}: bad frame")
        rest = memoryview(data)[whole:]
        if len(rest) >= framing.HEADER_BYTES:
            size = framing.frame_bytes(framing.HEADER.unpack_from(rest)[0])
            if size <= len(rest):  # a whole frame that fails: corrupt, not merely cut off
                framing.verify_frames(rest[:size], f"{what} + {whole}")
        return data[:whole]

    # ---- byte ranges ----------------------------------------------------------------------

    async def read_range(self, coded: CodedExtent, offset: int, length: int,
                         distrust: Collection[int] = ()) -> bytes:
        """Extent bytes [offset, offset+length), from data fragments or rebuilt; data
        fragments in `distrust` are not used."""
        pieces = coded.layout.pieces(offset, length)
        parts = await asyncio.gather(*(self._read_piece(coded, p, distrust) for p in pieces))
        return b"".join(parts)

    async def _read_piece(self, coded: CodedExtent, piece: Piece,
                          distrust: Collection[int]) -> bytes:
        tasks: dict[asyncio.Task[bytes], int] = {}

        def ask(index: int) -> None:
            task = asyncio.ensure_future(self.extents.read_fragment(
                coded.addresses[index], coded.extent_id, index, piece.fragment_offset,
                piece.length))
            tasks[task] = index

        try:
            if piece.index not in distrust:
                ask(piece.index)
                done, _ = await asyncio.wait(tasks, timeout=self.hedge_s)
                for task in done:
                    if task.exception() is None:
                        return task.result()
                    self._failed(coded, piece.index, task.exception())
            # Rebuild: k other fragments for the same columns (a failure is replaced by the
            # next); if they are slow too, the rest as well. The first k answers win.
            remaining = deque(i for i in range(coded.fragments)
                              if i != piece.index and i not in distrust)

            def top_up(count: int) -> None:
                for _ in range(min(count, len(remaining))):
                    ask(remaining.popleft())

            top_up(coded.layout.k)
            answers: dict[int, bytes] = {}
            errors: list[BaseException] = []
            while len(answers) < coded.layout.k:
                pending = {t for t in tasks if not t.done()}
                if not pending:
                    break
                done, _ = await asyncio.wait(pending, timeout=self.hedge_s if remaining
                                             else None, return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    top_up(len(remaining))  # slow: ask everyone left
                for task in done:
                    index = tasks[task]
                    error = task.exception()
                    if error is not None:
                        errors.append(error)
                        self._failed(coded, index, error)
                        top_up(1)
                    elif index == piece.index:
                        return task.result()  # the slow data fragment came after all
                    else:
                        answers[index] = task.result()
            if len(answers) < coded.layout.k:
                raise Unavailable(f"extent {coded.extent_id}: only {len(answers)} of the "
                                  f"{coded.layout.k} fragments needed answered for bytes "
                                  f"[{piece.extent_offset}, +{piece.length}): "
                                  f"{errors[-1] if errors else 'no answer'}")
            chosen = dict(sorted(answers.items())[:coded.layout.k])
            return codec(coded.layout.k, coded.layout.m).decode(chosen)[piece.index]
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()
                else:
                    with contextlib.suppress(BaseException):
                        task.exception()  # retrieved: no "never retrieved" warnings

    def _failed(self, coded: CodedExtent, index: int, error: BaseException | None) -> None:
        log.info("extent %d: fragment %d at %s failed: %s", coded.extent_id, index,
                 coded.addresses[index], error)
        key = (coded.extent_id, index)
        if isinstance(error, BAD_FRAGMENT) and self._report is not None \
                and key not in self._reported:
            self._reported.add(key)
            task = asyncio.ensure_future(self._report(coded.extent_id, index, str(error)))
            task.add_done_callback(_ignore_failure)


def _ignore_failure(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.info("reporting a bad fragment failed: %s", task.exception())


async def rebuild_fragments(extents: AsyncExtentClient, coded: CodedExtent,
                            lost: Collection[int]) -> dict[int, bytes]:
    """The fragments `lost`, recomputed from any k of the others, each checked against its
    recorded CRC32C (ChecksumError if it differs, Unavailable if k others cannot be read)."""
    k, m = coded.layout.k, coded.layout.m
    size = coded.layout.fragment_bytes
    chunk = extents.limits.fragment_chunk_bytes
    sources = [i for i in range(k + m) if i not in lost]
    if len(sources) < k:
        raise Unavailable(f"extent {coded.extent_id}: {len(sources)} fragments left, "
                          f"{k} needed")
    rebuilt: dict[int, list[bytes]] = {i: [] for i in lost}
    rs = codec(k, m)
    for start in range(0, size, chunk):
        width = min(chunk, size - start)
        columns = await _first_k(extents, coded, sources, start, width)
        data = rs.decode(columns)
        parity = rs.encode(data) if any(i >= k for i in lost) else []
        for index in lost:
            rebuilt[index].append(data[index] if index < k else parity[index - k])
    result = {i: b"".join(parts) for i, parts in rebuilt.items()}
    for index, fragment in result.items():
        if crc32c(fragment) != coded.crcs[index]:
            raise ChecksumError(f"extent {coded.extent_id}: rebuilt fragment {index} does not "
                                f"match its recorded checksum")
    return result


async def _first_k(extents: AsyncExtentClient, coded: CodedExtent, sources: Sequence[int],
                   start: int, width: int) -> dict[int, bytes]:
    """Columns [start, start+width) of k of `sources`, asking k at a time, then the rest."""
    k = coded.layout.k
    answers: dict[int, bytes] = {}
    queue = list(sources)
    last_error: StampError | None = None
    while len(answers) < k and queue:
        batch, queue = queue[:k - len(answers)], queue[k - len(answers):]
        replies = await asyncio.gather(*(extents.read_fragment(
            coded.addresses[i], coded.extent_id, i, start, width) for i in batch),
            return_exceptions=True)
        for index, reply in zip(batch, replies, strict=True):
            if isinstance(reply, StampError):
                last_error = reply
            elif isinstance(reply, BaseException):
                raise reply
            else:
                answers[index] = reply
    if len(answers) < k:
        raise Unavailable(f"extent {coded.extent_id}: only {len(answers)} fragments readable, "
                          f"{k} needed: {last_error}")
    return answers
