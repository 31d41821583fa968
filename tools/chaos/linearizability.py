"""A linearizability checker for histories of entities and logs (DESIGN §8 invariant 7: "every
history of reads and writes is linearizable"), in the manner of Wing & Gong's search with
Lowe's memoization (the set of operations placed so far and the model's state, seen once)
as porcupine implements it, run on each key alone (linearizability is compositional: a
history is linearizable iff each key's is, Herlihy & Wing).

Contract:
- An `Op` has real-time bounds: `invoke` (before the call was sent) and `respond` (after its
  answer came back). `respond=None`: the outcome is unknown (a timeout, an error after which
  the write may or may not have happened): it may take effect at any point after `invoke`,
  or never. `result=None` with a `respond`: it did take effect by `respond`, but its answer
  is not known (a part of a batch seen applied on another row).
- A history is linearizable when one total order of its operations (unknown ones may be left
  out) respects real time (an op that responded before another was invoked comes first) and
  gives every operation with a known answer that answer when applied to the sequential
  model, one at a time, from its initial state (an entity that does not exist; an empty log).
- `check_history` returns one `KeyVerdict` per key: linearizable, not (with the op no order
  could place), or undecided (the search passed `steps_max`: reported, never taken as a
  pass or a failure).

Models (the SDK's operations, stampsdk/aio.py):
- entities, `EntityModel`: the state is ABSENT (no row) or (value, etag), the etag None while
  it is unknown (written by an op whose answer was lost; the next get learns it). Every
  write makes a new etag, so an unknown one is none of those answered writes returned.
    ("put", value, if_match, if_none_match) -> ("ok", etag) | ("refused",)
    ("delete", if_match)                    -> ("ok",) | ("refused",) | ("absent",)
    ("get",)                                -> ("value", value, etag) | ("absent",)
- logs, `LogModel`: the state is the sequence of records (kept as a chain of appends, so a
  state is hashed and compared in O(1), see `_Chain`).
    ("append", records)                     -> first sequence number
    ("read", from_seq, records, at_end)     -> None: `records` read from `from_seq`; `at_end`:
                                               the reader knows nothing lay past them
    ("peek",)                               -> next sequence number
Values and records are opaque hashable ids (the chaos workload passes digests).

Pruning (sound: it never makes a linearizable history fail): an unknown-outcome write whose
effect no operation of the history observed is dropped before the search — for a put, no get
returned its value, no op on the key was refused after it was invoked, and none was accepted
over an etag that no answer of the history holds; for an append, no
read returned its records and a read of the whole log, invoked after every other op with a
known answer responded, does not hold them. Left in, each such op doubles what the search may try.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

STEPS_MAX = 2_000_000  # per key; past it the key is reported undecided
_FOREVER = float("inf")


@dataclass(frozen=True)
class Op:
    """One operation of a history (module docstring)."""

    key: Hashable
    call: tuple[Any, ...]  # ("put", value, if_match, if_none_match), ("read", ...) ...
    invoke: float
    respond: float | None  # None: outcome unknown (may take effect after invoke, or never)
    result: Any = None  # None with a respond: took effect, answer unknown
    client: str = ""  # who ran it, for reports

    def describe(self) -> str:
        call = ", ".join(_short(a) for a in self.call)
        when = f"[{self.invoke:.3f}, {'?' if self.respond is None else f'{self.respond:.3f}'}]"
        result = "unknown" if self.respond is None else _short(self.result)
        return f"{self.client} {call} -> {result} {when}".strip()


def _short(value: Any) -> str:
    if isinstance(value, bytes):
        return value[:12].hex() if not value.isascii() else repr(value[:24])
    if isinstance(value, tuple) and len(value) > 4:
        return f"({len(value)} items)"
    if isinstance(value, tuple):
        return "(" + ", ".join(_short(v) for v in value) + ")"
    return repr(value)


class Model(Protocol):
    """A sequential specification: `step` applies one op to a state and returns the state
    after it, or None when the op cannot have its answer in that state."""

    def for_key(self, ops: Sequence[Op]) -> Model: ...
    def initial(self) -> Hashable: ...
    def step(self, state: Any, op: Op) -> Hashable | None: ...
    def observed(self, op: Op, history: Sequence[Op]) -> bool: ...


@dataclass
class KeyVerdict:
    key: Hashable
    ops: int
    linearizable: bool | None  # None: undecided (the step budget ran out)
    steps: int = 0
    stuck_at: Op | None = None  # an op no order could place (when not linearizable)
    placed: int = 0  # how many ops the deepest attempt placed before it

    def describe(self) -> str:
        if self.linearizable:
            return f"{self.key}: linearizable ({self.ops} ops)"
        if self.linearizable is None:
            return f"{self.key}: undecided after {self.steps:,} steps ({self.ops} ops)"
        what = self.stuck_at.describe() if self.stuck_at else "?"
        return (f"{self.key}: not linearizable: no order of its {self.ops} ops explains "
                f"{what} (deepest attempt placed {self.placed})")


# ---- entities -------------------------------------------------------------------------------

ABSENT: Hashable = ("no row",)  # the state of a row that does not exist


class EntityModel:
    """A register with ETags (module docstring). Every write makes a new ETag (the stamp's
    contract), so a write whose answer is unknown made none of the ETags that answered
    writes of the key returned (`write_etags`, from `for_key`)."""

    def __init__(self, write_etags: frozenset[str] = frozenset()) -> None:
        self.write_etags = write_etags
        # What `observed` asks, by the latest time it was seen (from `for_key`)
        self._value_read: dict[Hashable, float] = {}  # value -> latest get of it
        self._refused = -_FOREVER  # latest refusal (refused, or absent on a delete)
        self._foreign_etag = -_FOREVER  # latest put over an etag no answered write made

    def for_key(self, ops: Sequence[Op]) -> Model:
        model = EntityModel(frozenset(op.result[1] for op in ops if op.call[0] == "put"
                                      and op.result is not None and op.result[0] == "ok"))
        for op in ops:
            end = _FOREVER if op.respond is None else op.respond
            if op.call[0] == "put" and op.call[2] is not None \
                    and op.call[2] not in model.write_etags:
                model._foreign_etag = max(model._foreign_etag, end)
            if op.result is None or op.respond is None:
                continue
            if op.call[0] == "get" and op.result[0] == "value":
                value = op.result[1]
                model._value_read[value] = max(model._value_read.get(value, end), end)
            elif op.call[0] != "get" and op.result[0] in ("refused", "absent"):
                model._refused = max(model._refused, end)
        return model

    def initial(self) -> Hashable:
        return ABSENT

    def step(self, state: Any, op: Op) -> Hashable | None:
        kind, result = op.call[0], op.result
        if kind == "get":
            if result[0] == "absent":
                return state if state == ABSENT else None
            _, value, etag = result
            if state == ABSENT or state[0] != value or state[1] not in (None, etag):
                return None
            if state[1] is None and etag in self.write_etags:
                return None  # another write's etag: not the one the unknown write made
            return (value, etag)  # an unknown etag is learnt here
        if kind == "put":
            _, value, if_match, if_none_match = op.call
            ok = self._precondition(state, if_match, bool(if_none_match))
            return _write(state, op, ok, lambda etag: (value, etag))
        if kind == "delete":
            if result is not None and result[0] == "absent":
                return state if state == ABSENT else None
            ok = False if state == ABSENT else self._precondition(state, op.call[1], False)
            return _write(state, op, ok, lambda etag: ABSENT)
        raise ValueError(f"not an entity op: {op.call!r}")

    def observed(self, op: Op, history: Sequence[Op]) -> bool:
        """Whether an op that ended after `op` began may have seen it: a get of its value,
        a refusal (the row's etag changed), a put over an etag only a write in doubt can
        have made. `history` is the one `for_key` indexed."""
        if op.call[0] != "put":
            return True  # deletes are rare and observed by absence: always kept
        return max(self._value_read.get(op.call[1], -_FOREVER), self._refused,
                   self._foreign_etag) >= op.invoke

    def _precondition(self, state: Any, if_match: str | None, if_none_match: bool
                      ) -> bool | None:
        """Whether a write's condition holds in `state`; None when it depends on an
        unknown etag (one that is none of `write_etags`)."""
        if if_none_match:
            return state == ABSENT
        if if_match is None:
            return True
        if state == ABSENT:
            return False
        if state[1] is None:
            return False if if_match in self.write_etags else None
        return bool(state[1] == if_match)


def _write(state: Any, op: Op, ok: bool | None,
           after: Callable[[str | None], Hashable]) -> Hashable | None:
    """The state after a write whose condition is `ok` (None: cannot tell, the row's etag
    is unknown) and whose answer is op.result (None: it took effect, answer unknown)."""
    result = op.result
    if result is None:
        return after(None) if ok is not False else None
    if result[0] == "refused":
        return state if ok is not True else None
    if result[0] != "ok" or ok is False:
        return None
    return after(result[1] if len(result) > 1 else None)


# ---- logs -----------------------------------------------------------------------------------

class _Chain:
    """A log's records as a chain of appends: equal (and hashed) by length and a digest of
    the appends in order, so the memo's lookups cost O(1), not O(length). A digest collision
    (2**-128) is the only way two different logs could compare equal."""

    __slots__ = ("digest", "length", "parent", "records", "start")

    def __init__(self, parent: _Chain | None, records: tuple[Hashable, ...]) -> None:
        self.parent = parent
        self.start = parent.length if parent else 0
        self.records = records
        self.length = self.start + len(records)
        seed = parent.digest if parent else b""
        self.digest = hashlib.blake2b(seed + repr(records).encode(), digest_size=16).digest()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Chain) and (self.length, self.digest) == \
            (other.length, other.digest)

    def __hash__(self) -> int:
        return hash((self.length, self.digest))

    def slice(self, start: int, count: int) -> list[Hashable]:
        """Records [start, start + count) (fewer past the end)."""
        end = min(self.length, start + count)
        out: list[Hashable] = []
        node: _Chain | None = self
        while node is not None and node.length > start:
            lo, hi = max(start, node.start), min(end, node.length)
            if lo < hi:
                out[:0] = node.records[lo - node.start:hi - node.start]
            node = node.parent
        return out


class LogModel:
    """A log of records with consecutive sequence numbers from 0 (module docstring)."""

    def __init__(self) -> None:
        self._read: set[Hashable] = set()  # every record some read returned
        self._whole_read_at = -_FOREVER  # when a read of the whole log began after the rest

    def for_key(self, ops: Sequence[Op]) -> Model:
        model = LogModel()
        ends = sorted(((op.respond, i) for i, op in enumerate(ops) if op.respond is not None),
                      reverse=True)
        for i, op in enumerate(ops):
            if op.call[0] != "read" or op.respond is None:
                continue
            _, start, records, at_end = op.call
            model._read.update(records)
            last_other = next((end for end, j in ends if j != i), -_FOREVER)
            if start == 0 and at_end and op.invoke >= last_other:
                model._whole_read_at = max(model._whole_read_at, op.invoke)
        return model

    def initial(self) -> Hashable:
        return _Chain(None, ())

    def step(self, state: Any, op: Op) -> Hashable | None:
        kind = op.call[0]
        if kind == "append":
            if op.result is not None and op.result != state.length:
                return None
            return _Chain(state, tuple(op.call[1]))
        if kind == "read":
            _, start, records, at_end = op.call
            if start > state.length or state.slice(start, len(records)) != list(records):
                return None
            if at_end and start + len(records) != state.length:
                return None
            return state
        if kind == "peek":
            return state if op.result == state.length else None
        raise ValueError(f"not a log op: {op.call!r}")

    def observed(self, op: Op, history: Sequence[Op]) -> bool:
        if any(record in self._read for record in op.call[1]):
            return True
        # Unseen, it may still count in the sequence numbers or the ends others saw — unless
        # a read of the whole log began after every other op with a known outcome ended:
        # then it lies after that read or nowhere, and nothing after the read can see it.
        return self._whole_read_at < op.invoke


# ---- the search -----------------------------------------------------------------------------

class _Entry:
    __slots__ = ("index", "is_call", "match", "next", "prev")

    def __init__(self, index: int, is_call: bool) -> None:
        self.index = index
        self.is_call = is_call
        self.match: _Entry | None = None
        self.prev: _Entry | None = None
        self.next: _Entry | None = None


def _entries(ops: Sequence[Op]) -> _Entry:
    """The doubly linked list of calls and returns in time order (a call before a return
    at the same instant: ops that touch in time count as concurrent); returns its head."""
    events = []
    for i, op in enumerate(ops):
        call = _Entry(i, True)
        events.append((op.invoke, 0, i, call))
        if op.respond is not None:
            ret = _Entry(i, False)
            call.match = ret
            events.append((op.respond, 1, i, ret))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    head = _Entry(-1, False)
    prev = head
    for *_, entry in events:
        prev.next, entry.prev = entry, prev
        prev = entry
    return head


def _lift(entry: _Entry) -> None:
    for e in (entry, entry.match):
        if e is not None:
            assert e.prev is not None
            e.prev.next = e.next
            if e.next is not None:
                e.next.prev = e.prev


def _unlift(entry: _Entry) -> None:
    for e in (entry.match, entry):
        if e is not None:
            assert e.prev is not None
            e.prev.next = e
            if e.next is not None:
                e.next.prev = e


def check_key(key: Hashable, ops: Sequence[Op], model: Model,
              steps_max: int = STEPS_MAX) -> KeyVerdict:
    """Wing-Gong-Lowe search (module docstring) over one key's ops."""
    model = model.for_key(ops)
    ops = [op for op in ops if op.respond is not None or model.observed(op, ops)]
    head = _entries(ops)
    pending = sum(1 for op in ops if op.respond is not None)
    state: Any = model.initial()
    placed = 0  # a bitset of placed ops
    seen: set[tuple[int, Any]] = set()
    stack: list[tuple[_Entry, Any]] = []
    verdict = KeyVerdict(key, len(ops), False)
    entry = head.next
    while pending:
        verdict.steps += 1
        if verdict.steps > steps_max:
            verdict.linearizable = None
            return verdict
        assert entry is not None  # a return is always reached before the list ends
        if entry.is_call:
            after = model.step(state, ops[entry.index])
            memo = (placed | 1 << entry.index, after)
            if after is not None and memo not in seen:
                seen.add(memo)
                stack.append((entry, state))
                state, placed = after, memo[0]
                pending -= entry.match is not None
                _lift(entry)
                entry = head.next
                continue
            entry = entry.next
            continue
        if len(stack) >= verdict.placed:  # the deepest attempt names what blocked it
            verdict.placed, verdict.stuck_at = len(stack), ops[entry.index]
        if not stack:
            return verdict
        top, state = stack.pop()
        placed &= ~(1 << top.index)
        pending += top.match is not None
        _unlift(top)
        entry = top.next
    verdict.linearizable = True
    return verdict


def check_history(ops: Iterable[Op], model: Model, steps_max: int = STEPS_MAX
                  ) -> list[KeyVerdict]:
    """Every key's verdict, in key order of first appearance."""
    by_key: dict[Hashable, list[Op]] = defaultdict(list)
    for op in ops:
        by_key[op.key].append(op)
    return [check_key(key, key_ops, model, steps_max) for key, key_ops in by_key.items()]


def entity_model() -> Model:
    return EntityModel()


def log_model() -> Model:
    return LogModel()


@dataclass
class Violations:
    """What a check of several histories found, as the chaos report wants it."""

    checked: dict[str, int] = field(default_factory=lambda: {"keys": 0, "ops": 0})
    violations: list[str] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)

    def add(self, verdicts: Iterable[KeyVerdict]) -> None:
        for verdict in verdicts:
            self.checked["keys"] += 1
            self.checked["ops"] += verdict.ops
            if verdict.linearizable is False:
                self.violations.append(verdict.describe())
            elif verdict.linearizable is None:
                self.undecided.append(verdict.describe())
