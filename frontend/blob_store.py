"""Containers and append blobs on the partition layer, through the front end's forwarding
client (frontend/forward.py): the I/O around frontend/blob_model.py's decisions.

Every write is conditional on the ETag of the row it changes (a container's row in
`$containers`, a blob's properties row), so front ends decide without talking to each other:
one that decided on a stale row loses its condition (PreconditionFailed), reads the row again
and decides again, at most `blob_write_attempts_max` times. What a front end remembers (a
container's existence for `blob_container_cache_ttl_ms`, the properties of the last
`blob_props_cached_max` blobs it wrote) only saves reads: a refusal is never decided on a
remembered row, only on one read afresh.

Contract: every method returns or raises BlobError with the service's status and code; the
partition layer's errors are mapped once, in `service_error`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from common import faults
from common.checksums import crc32c
from common.clock import Clock
from common.config import FrontEndLimits
from common.errors import (
    DeadlineExceeded,
    InvalidArgument,
    Moved,
    NotFound,
    PreconditionFailed,
    StampError,
    Throttled,
    Unavailable,
)
from common.proto import partition_pb2 as pb
from frontend import blob_model as model
from frontend.blob_model import BlobError, Conditions, Container, Props
from frontend.forward import ForwardingClient
from partition_layer.payload_crc import verify_value

log = logging.getLogger(__name__)

ROW_END = b"\xff"  # after every row of a prefix: names are UTF-8, which never holds 0xff
OFFSET_END = (1 << 64) - 1
# A List Blobs entry: a blob (name, properties, row ETag), or a BlobPrefix (its name).
Listed = tuple[str, Props, str] | str


# A write of an account this stamp is the geo secondary of (issue 30): 421 Misdirected
# Request, "this server does not answer this request; ask another", with this code. Not 409
# (Azure's SDKs make a 409 a ResourceExistsError) nor a 5xx (their retry policies repeat
# those here, where it cannot succeed); the message names the primary stamp (Moved's).
MOVED_STATUS = 421
MOVED_CODE = "AccountMoved"


def service_error(exc: StampError) -> BlobError:
    """The service's answer for an error of the partition layer, or of the front end's own
    checks (Moved: MOVED_STATUS, MOVED_CODE)."""
    if isinstance(exc, Moved):
        return BlobError(MOVED_STATUS, MOVED_CODE, str(exc))
    if isinstance(exc, Throttled):
        retry_s = max(1, math.ceil(exc.retry_after_s or 1))
        return BlobError(503, "ServerBusy", f"Ingress is over the account limit: {exc}",
                         {"Retry-After": str(retry_s)})
    if isinstance(exc, Unavailable | DeadlineExceeded):
        return BlobError(503, "ServerBusy", f"The server is busy: {exc}")
    if isinstance(exc, InvalidArgument):
        return BlobError(400, "InvalidInput", str(exc))
    return BlobError(500, "InternalError", f"{type(exc).__name__}: {exc}")


def _blob_not_found() -> BlobError:
    return BlobError(404, "BlobNotFound", "The specified blob does not exist.")


def _container_not_found() -> BlobError:
    return BlobError(404, "ContainerNotFound", "The specified container does not exist.")


class BlobStore:
    def __init__(self, client: ForwardingClient, limits: FrontEndLimits, clock: Clock) -> None:
        self.client = client
        self.limits = limits
        self.clock = clock
        self._containers: dict[tuple[str, str], tuple[float, Container | None]] = {}
        self._props: collections.OrderedDict[tuple[str, str, str], tuple[Props, str]] = \
            collections.OrderedDict()
        self._sweeps: set[asyncio.Task[None]] = set()
        # Container reads under way, shared by every request that waits for one.
        self._container_reads: dict[tuple[str, str], asyncio.Task[Container | None]] = {}

    def _now_ms(self) -> int:
        return int(self.clock.wall() * 1000)

    # ---- containers -------------------------------------------------------------------------

    async def _container_row(self, account: str, name: str) -> tuple[Container, str] | None:
        try:
            value, etag = await self.client.get(account, model.CONTAINERS_GROUP, name)
        except NotFound:
            return None
        return Container.decode(value), etag

    async def container(self, account: str, name: str) -> Container:
        """The live container `name` (remembered for blob_container_cache_ttl_ms). When the
        memory of it runs out, one read refreshes it for every request that needs it then:
        concurrent appenders to a container would each read its row once a TTL otherwise."""
        key = (account, name)
        cached = self._containers.get(key)
        if cached is not None and self.clock.monotonic() < cached[0]:
            found = cached[1]
        else:
            reading = self._container_reads.get(key)
            if reading is None:
                reading = asyncio.get_running_loop().create_task(
                    self._refresh_container(account, name))
                self._container_reads[key] = reading
                reading.add_done_callback(lambda _: self._container_reads.pop(key, None))
            found = await asyncio.shield(reading)
        if found is None:
            raise _container_not_found()
        return found

    async def _refresh_container(self, account: str, name: str) -> Container | None:
        # Dated from before the read: what it returns may be as old as that.
        read_at = self.clock.monotonic()
        row = await self._container_row(account, name)
        found = row[0] if row is not None and not row[0].deleted_ms else None
        if len(self._containers) >= self.limits.blob_props_cached_max:
            self._containers.clear()
        self._containers[(account, name)] = (
            read_at + self.limits.blob_container_cache_ttl_ms / 1000, found)
        return found

    async def container_props(self, account: str, name: str) -> tuple[Container, str]:
        row = await self._container_row(account, name)
        if row is None or row[0].deleted_ms:
            raise _container_not_found()
        return row

    async def create_container(self, account: str, name: str, metadata: dict[str, str]
                               ) -> tuple[Container, str]:
        now = self._now_ms()
        row = await self._container_row(account, name)
        held_ms = 2 * self.limits.blob_container_cache_ttl_ms
        if row is not None and not row[0].deleted_ms:
            raise BlobError(409, "ContainerAlreadyExists", "The specified container already "
                            "exists.")
        if row is not None and now < row[0].deleted_ms + held_ms:
            raise BlobError(409, "ContainerBeingDeleted", "The specified container is being "
                            "deleted. Try operation later.")
        container = Container(secrets.token_hex(model.GEN_BYTES), now, metadata)
        try:
            etag = await self.client.put(account, model.CONTAINERS_GROUP, name,
                                         container.encode(),
                                         if_match=row[1] if row is not None else None,
                                         if_none_match=None if row is not None else "*")
        except PreconditionFailed:
            raise BlobError(409, "ContainerAlreadyExists", "The specified container already "
                            "exists.") from None
        self._containers[(account, name)] = (
            self.clock.monotonic() + self.limits.blob_container_cache_ttl_ms / 1000, container)
        return container, etag

    async def set_container_metadata(self, account: str, name: str,
                                     metadata: dict[str, str]) -> tuple[Container, str]:
        for _ in range(self.limits.blob_write_attempts_max):
            container, etag = await self.container_props(account, name)
            try:
                changed = replace(container, metadata=metadata)
                new_etag = await self.client.put(account, model.CONTAINERS_GROUP, name,
                                                 changed.encode(), if_match=etag)
                return changed, new_etag
            except PreconditionFailed:
                continue
        raise BlobError(503, "ServerBusy", "The container kept changing.")

    async def delete_container(self, account: str, name: str, conds: Conditions) -> None:
        """Its name stays taken for a while (ContainerBeingDeleted) so that no front end
        still trusting it can write under it once it is created again."""
        container, etag = await self.container_props(account, name)
        model.check_etag_conditions(conds, etag, read=False, modified_ms=container.created_ms)
        gone = replace(container, deleted_ms=self._now_ms())
        try:
            await self.client.put(account, model.CONTAINERS_GROUP, name, gone.encode(),
                                  if_match=etag)
        except PreconditionFailed:
            raise _container_not_found() from None
        self._containers[(account, name)] = (
            self.clock.monotonic() + self.limits.blob_container_cache_ttl_ms / 1000, None)
        # Once no front end can still write under it (its name is held that long).
        self._sweep(account, model.container_group(name, container.gen), b"\x00", ROW_END,
                    delay_s=2 * self.limits.blob_container_cache_ttl_ms / 1000)

    async def list_containers(self, account: str, prefix: str, marker: str, limit: int
                              ) -> tuple[list[tuple[str, Container, str]], str]:
        """Live containers from `marker` (or `prefix`) on, at most `limit`, and the marker of
        the next page ("" at the end)."""
        start = max(prefix, marker)
        found: list[tuple[str, Container, str]] = []
        while True:
            items, more = await self._scan(account, model.CONTAINERS_GROUP, start.encode(),
                                           prefix.encode() + ROW_END, limit + 1 - len(found))
            for item in items:
                container = Container.decode(item.value)
                if not container.deleted_ms:
                    found.append((item.row.decode(), container, item.etag))
            if len(found) > limit:
                return found[:limit], found[limit][0]
            if not more or not items:
                return found, ""
            start = items[-1].row.decode() + "\x00"

    # ---- blobs ------------------------------------------------------------------------------

    async def read_props(self, account: str, container: str, name: str
                         ) -> tuple[str, Props, str]:
        """(the container's group, the blob's properties, their row ETag), read afresh."""
        group = model.container_group(container, (await self.container(account,
                                                                       container)).gen)
        return (group, *await self._fresh_props(account, group, name))

    async def _fresh_props(self, account: str, group: str, name: str) -> tuple[Props, str]:
        key = (account, group, name)
        try:
            value, etag = await self.client.get(account, group, model.props_row(name))
        except NotFound:
            self._props.pop(key, None)
            raise _blob_not_found() from None
        props = Props.decode(value)
        self._remember(key, props, etag)
        return props, etag

    def _remember(self, key: tuple[str, str, str], props: Props, etag: str) -> None:
        self._props[key] = (props, etag)
        self._props.move_to_end(key)
        while len(self._props) > self.limits.blob_props_cached_max:
            self._props.popitem(last=False)

    async def create_blob(self, account: str, container: str, name: str,
                          content: dict[str, str], metadata: dict[str, str],
                          conds: Conditions) -> tuple[Props, str]:
        """A new, empty append blob (replacing one of that name: a new generation, so its
        old records are never read again)."""
        group = model.container_group(container, (await self.container(account,
                                                                       container)).gen)
        now = self._now_ms()
        props = Props(secrets.token_hex(model.GEN_BYTES), now, now, metadata=metadata,
                      content=content)
        if_match = None
        replaced: tuple[Props, str] | None = None
        if conds.if_none_match is None:  # the one it replaces, whose records go
            try:
                replaced = await self._fresh_props(account, group, name)
            except BlobError:
                replaced = None
        if conds.if_match is not None:
            model.check_etag_conditions(conds, replaced[1] if replaced else None, read=False,
                                        modified_ms=replaced[0].modified_ms if replaced
                                        else None)
            if_match = replaced[1] if replaced else None
        try:
            etag = await self.client.put(
                account, group, model.props_row(name), props.encode(), if_match=if_match,
                if_none_match="*" if conds.if_none_match is not None else None)
        except PreconditionFailed:
            if conds.if_none_match is not None:
                raise BlobError(409, "BlobAlreadyExists",
                                "The specified blob already exists.") from None
            raise BlobError(412, "ConditionNotMet", "The condition specified using HTTP "
                            "conditional header(s) is not met.") from None
        self._remember((account, group, name), props, etag)
        if replaced is not None and replaced[0].gen != props.gen:
            self._sweep_blob(account, group, name, replaced[0].gen)
        return props, etag

    async def append(self, account: str, container: str, name: str, block: bytes,
                     conds: Conditions) -> tuple[int, Props, str]:
        """Append `block` atomically: (the offset it starts at, the properties, ETag)."""
        group = model.container_group(container, (await self.container(account,
                                                                       container)).gen)
        key = (account, group, name)
        crc = crc32c(block)
        cached = self._props.get(key)
        fresh = cached is None
        props, etag = cached if cached is not None else await self._fresh_props(
            account, group, name)
        for _ in range(self.limits.blob_write_attempts_max):
            try:
                decision = model.decide_append(props, etag, len(block), crc, conds,
                                               self._now_ms(), self.limits.blob_appends_max)
            except BlobError:
                if fresh:
                    raise
                props, etag = await self._fresh_props(account, group, name)
                fresh = True
                continue
            if isinstance(decision, model.Dedup):
                if not fresh:  # decided on what it remembered: only a row read now says so
                    props, etag = await self._fresh_props(account, group, name)
                    fresh = True
                    continue
                return decision.offset, props, etag
            ops: list[tuple[object, ...]] = [
                ("put", model.props_row(name), decision.props.encode(), etag)]
            ops += [("put", model.data_row(name, props.gen, end), data)
                    for end, data in model.records_of(block, decision.offset,
                                                      self.limits.blob_record_bytes_max)]
            try:
                etags = await self.client.batch(account, group, ops)
            except PreconditionFailed:  # another writer was first: decide on what it left
                props, etag = await self._fresh_props(account, group, name)
                fresh = True
                continue
            except StampError:
                self._props.pop(key, None)  # it may or may not have been written
                raise
            self._remember(key, decision.props, etags[0])
            # Appended, not yet answered: a crash here loses the answer (the SDK retries).
            await faults.apoint("fe.blob.append.before_answer")
            return decision.offset, decision.props, etags[0]
        raise BlobError(503, "ServerBusy", "The blob kept changing under this append.")

    async def update(self, account: str, container: str, name: str, conds: Conditions,
                     change: Callable[[Props], Props]) -> tuple[Props, str]:
        """Write `change(props)` on the condition of the ETag it was read with (seal,
        metadata), after `conds` hold."""
        group, props, etag = await self.read_props(account, container, name)
        for _ in range(self.limits.blob_write_attempts_max):
            model.check_etag_conditions(conds, etag, read=False, modified_ms=props.modified_ms)
            changed = replace(change(props), modified_ms=self._now_ms())
            try:
                new_etag = await self.client.put(account, group, model.props_row(name),
                                                 changed.encode(), if_match=etag)
            except PreconditionFailed:
                props, etag = await self._fresh_props(account, group, name)
                continue
            self._remember((account, group, name), changed, new_etag)
            return changed, new_etag
        raise BlobError(503, "ServerBusy", "The blob kept changing.")

    async def delete_blob(self, account: str, container: str, name: str,
                          conds: Conditions) -> None:
        """Its records stay behind, unreachable: a blob of the same name gets another
        generation."""
        group, props, etag = await self.read_props(account, container, name)
        model.check_etag_conditions(conds, etag, read=False, modified_ms=props.modified_ms)
        self._props.pop((account, group, name), None)
        try:
            await self.client.delete(account, group, model.props_row(name), if_match=etag)
        except (NotFound, PreconditionFailed):
            raise BlobError(412, "ConditionNotMet", "The blob changed while it was being "
                            "deleted.") from None
        self._sweep_blob(account, group, name, props.gen)

    # ---- garbage ----------------------------------------------------------------------------

    def _sweep_blob(self, account: str, group: str, name: str, gen: str) -> None:
        """Delete the records of a blob's generation no properties row names any more."""
        prefix = model.data_prefix(name, gen)
        self._sweep(account, group, prefix, prefix + ROW_END)

    def _sweep(self, account: str, group: str, start: bytes, end: bytes,
               delay_s: float = 0.0) -> None:
        """In the background, delete the rows [start, end) of `group`: unreachable rows (a
        deleted blob's records, a deleted container's rows), so nothing reads them and no
        write races the deletes. Best effort: what a crash interrupts stays, unread."""
        if len(self._sweeps) >= self.limits.blob_props_cached_max:
            log.warning("not sweeping %s of %s: too many sweeps running", group, account)
            return
        task = asyncio.get_running_loop().create_task(
            self._sweep_rows(account, group, start, end, delay_s))
        self._sweeps.add(task)
        task.add_done_callback(self._sweeps.discard)

    async def _sweep_rows(self, account: str, group: str, start: bytes, end: bytes,
                          delay_s: float) -> None:
        try:
            await asyncio.sleep(delay_s)
            while True:
                items, _more = await self._scan(account, group, start, end,
                                                self.client.limits.batch_ops_max)
                if not items:
                    return
                try:
                    await self.client.batch(account, group,
                                            [("delete", item.row) for item in items])
                except NotFound:  # one went meanwhile (another sweep): one at a time
                    for item in items:
                        with contextlib.suppress(NotFound):
                            await self.client.delete(account, group, item.row)
                start = items[-1].row + b"\x00"
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("sweeping rows of %s in account %s", group, account)

    async def close(self) -> None:
        for task in list(self._sweeps):
            task.cancel()
        await asyncio.gather(*self._sweeps, return_exceptions=True)

    async def read(self, account: str, group: str, name: str, gen: str, start: int,
                   end: int) -> AsyncIterator[bytes]:
        """The bytes [start, end) of the blob's generation `gen`, in pieces: its records
        from the one holding `start` (the first whose end offset is past it) on, about
        `blob_read_bytes_max` per call (records counted by the mean size of those read so
        far: a blob of 4 KiB appends is not read 16 records at a time)."""
        record_bytes = self.limits.blob_record_bytes_max  # the mean until one is read
        pos = start
        while pos < end:
            wanted = min(end - pos, self.limits.blob_read_bytes_max)
            limit = min(self.limits.blob_read_records_max,
                        (wanted + record_bytes - 1) // record_bytes + 1)
            items, _more = await self._scan(account, group, model.data_row(name, gen, pos + 1),
                                            model.data_row(name, gen, OFFSET_END), limit)
            if not items:
                raise BlobError(500, "InternalError", f"blob {name!r} has no record holding "
                                f"byte {pos}")
            record_bytes = max(1, sum(len(i.value) for i in items) // len(items))
            for item in items:
                record_end = model.end_of_data_row(item.row)
                record_start = record_end - len(item.value)
                if not record_start <= pos < record_end:
                    raise BlobError(500, "InternalError", f"blob {name!r}: record "
                                    f"[{record_start}, {record_end}) does not hold byte {pos}")
                upto = min(end, record_end)
                yield item.value[pos - record_start:upto - record_start]
                pos = upto
                if pos >= end:
                    return

    async def list_blobs(self, account: str, container: str, prefix: str, marker: str,
                         limit: int, delimiter: str = "") -> tuple[list[Listed], str]:
        """Blobs whose names start with `prefix`, from `marker` on, in name order, at most
        `limit`, and the marker of the next page ("" at the end). With a `delimiter`, the
        names that hold it after the prefix are listed once per group, as the group's
        prefix up to and including the delimiter (a str in the list: a BlobPrefix)."""
        group = model.container_group(container, (await self.container(account,
                                                                       container)).gen)
        start = model.props_row(max(prefix, marker))
        end = model.props_row(prefix) + ROW_END
        found: list[Listed] = []
        while len(found) <= limit:
            items, more = await self._scan(account, group, start, end,
                                           limit + 1 - len(found))
            for item in items:
                name = model.name_of_props_row(item.row)
                cut = name.find(delimiter, len(prefix)) if delimiter else -1
                if cut >= 0:  # a group: listed once, then skipped as a whole
                    found.append(name[:cut + len(delimiter)])
                    start = model.props_row(name[:cut + len(delimiter)]) + ROW_END
                    break
                found.append((name, Props.decode(item.value), item.etag))
                start = item.row + b"\x00"
            else:
                if not more or not items:
                    break
        if len(found) > limit:
            following = found[limit]
            return found[:limit], following if isinstance(following, str) else following[0]
        return found, ""

    async def _scan(self, account: str, group: str, start_row: bytes, end_row: bytes,
                    limit: int) -> tuple[list[pb.ScanItem], bool]:
        """Rows [start_row, end_row) of `group` (one partition name: one partition), at most
        `limit`, each value checked against its CRC32C; and whether more remain."""
        op = pb.ScanOp(start_pname=group, start_row=start_row, has_end=True, end_pname=group,
                       end_row=end_row, limit=limit)
        response = await self.client.call(pb.Request(account=account, scan=op),
                                          idempotent=True)
        for item in response.items:
            verify_value(item.value, item.crc, f"row {item.row!r} of {group!r}")
        return list(response.items), response.more
