"""The ec job's work (§7 "ec"): erasure-code the sealed extents of streams whose policy asks
for it (`stamp stream policy NAME --ec 6+3 --after 10m`, stream_manager/policies.py), one
extent per item, through the existing conversion (stream_layer/ec/convert.py): read the
replicas, write and verify the k+m fragments on their nodes, record the switch in the
stream manager, drop the replicas.

Resuming: the conversion is restartable at every step (see convert.py): an item whose
extent is sealed starts over, one already recorded as coded but still listing replicas
only deletes them. `ec_candidates` lists both kinds, so a rerun after a killed job finishes
what it left, and readers use the replicas until the switch, the fragments after it: the
extent is readable throughout.

Streams no policy names follow the default policies (`jobs.ec_default_patterns`: the row
data and blob data of partitions, `jobs.ec_default_after_s` after their seal).

An extent several streams hold (a split's children) follows the first holder, by name, that
has a policy due for it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from common.config import JobLimits
from common.proto import stream_manager_pb2 as sm_pb
from spark.job_context import JobContext
from spark.job_result import DONE, FAILED, SKIPPED, WOULD, ItemResult
from stream_layer.ec.convert import convert_extent
from stream_layer.sm_client import AsyncStreamManagerClient
from stream_layer.stream_manager.policies import policy_for
from stream_layer.stream_manager.records import StreamPolicy

SEALED, ERASURE_CODED = "sealed", "erasure_coded"

EcItem = tuple[int, int, int]  # (extent id, k, m); k = m = DEFAULT_CODE: the stamp's
DEFAULT_CODE = 0


@dataclass(frozen=True)
class ExtentView:
    """What the choice needs of one extent (from the stream manager's listing)."""

    extent_id: int
    state: str
    sealed_at: float
    streams: tuple[str, ...]
    replicas: int          # replicas still listed
    ec_k: int = 0
    ec_m: int = 0


def ec_candidates(extents: Iterable[ExtentView], policies: Mapping[str, StreamPolicy],
                  now: float) -> list[EcItem]:
    """The extents the ec job works on now (pure): sealed ones a holder's policy makes due
    (sealed at least `after_s` before `now`; an unknown seal time counts as long ago), and
    coded ones that still list replicas (a conversion that stopped before dropping them)."""
    items: list[EcItem] = []
    for e in extents:
        if e.state == ERASURE_CODED and e.replicas:
            items.append((e.extent_id, e.ec_k, e.ec_m))
        elif e.state == SEALED:
            for stream in sorted(e.streams):
                policy = policy_for(stream, policies)
                if policy is not None and now - e.sealed_at >= policy.after_s:
                    items.append((e.extent_id, policy.ec_k, policy.ec_m))
                    break
    return sorted(items)


def views(infos: Sequence[sm_pb.ExtentInfo]) -> list[ExtentView]:
    return [ExtentView(e.extent_id, e.state, e.sealed_at, tuple(e.streams), len(e.replicas),
                       e.ec_k, e.ec_m) for e in infos]


def default_policies(limits: JobLimits) -> dict[str, StreamPolicy]:
    """The policies that apply when the stream manager has none for a stream: k = m = 0,
    the stamp's default code (convert.py's `default_code`, narrower on a small stamp)."""
    return {p: StreamPolicy(p, DEFAULT_CODE, DEFAULT_CODE, limits.ec_default_after_s)
            for p in limits.ec_default_patterns}


async def list_items(sm: AsyncStreamManagerClient, now: float, limits: JobLimits
                     ) -> list[EcItem]:
    policies = {**default_policies(limits),
                **{p.pattern: StreamPolicy(p.pattern, p.ec_k, p.ec_m, p.after_s)
                   for p in await sm.list_stream_policies()}}
    return ec_candidates(views(await sm.list_extents()), policies, now)


async def ec_extent(ctx: JobContext, item: EcItem) -> ItemResult:
    """Convert (or finish converting) one extent as RS(k, m)."""
    extent_id, k, m = item
    info = await ctx.sm.get_extent(extent_id)
    if info.state not in (SEALED, ERASURE_CODED) or (info.state == ERASURE_CODED
                                                     and not info.replicas):
        return ItemResult(extent_id, SKIPPED, detail=f"extent is {info.state} "
                                                     f"(nothing to do)")
    if ctx.dry_run:
        code = f"RS({k},{m})" if k else "the default code"
        what = (f"would encode {code}" if info.state == SEALED
                else f"would delete the replicas left on {', '.join(info.replicas)}")
        return ItemResult(extent_id, WOULD, bytes=info.sealed_length, detail=what)
    done = await convert_extent(ctx.sm, ctx.extents, extent_id, k or None, m or None)
    if done.replicas:
        return ItemResult(extent_id, FAILED, len(done.fragments), done.sealed_length,
                          detail=f"coded RS({done.ec_k},{done.ec_m}); replicas on "
                                 f"{', '.join(done.replicas)} not deleted yet (rerun)")
    return ItemResult(extent_id, DONE, len(done.fragments), done.sealed_length,
                      detail=f"RS({done.ec_k},{done.ec_m}) on {', '.join(done.fragments)}")
