"""The linearizability checker (tools/chaos/linearizability.py) on small hand-written
histories: each is or is not linearizable, and the checker says which."""

from __future__ import annotations

import itertools
import random
import time

import pytest

from tools.chaos.linearizability import Op, check_history, check_key, entity_model, log_model


def put(value: str, t0: float, t1: float | None, etag: str | None = "",
        if_match: str | None = None, refused: bool = False) -> Op:
    """A put of `value`; `t1` None: outcome unknown; `etag` None: answer unknown."""
    result = None if t1 is None or etag is None else \
        ("refused",) if refused else ("ok", etag or f"e-{value}")
    return Op("row", ("put", value, if_match, None), t0, t1, result)


def get(value: str | None, t0: float, t1: float, etag: str | None = None) -> Op:
    result = ("absent",) if value is None else ("value", value, etag or f"e-{value}")
    return Op("row", ("get",), t0, t1, result)


def entity(*ops: Op) -> bool | None:
    return check_key("row", ops, entity_model()).linearizable


def append(records: tuple[str, ...], t0: float, t1: float | None, first: int | None) -> Op:
    return Op("log", ("append", records), t0, t1, first)


def read(start: int, records: tuple[str, ...], t0: float, t1: float, at_end: bool = True
         ) -> Op:
    return Op("log", ("read", start, records, at_end), t0, t1)


def log(*ops: Op) -> bool | None:
    return check_key("log", ops, log_model()).linearizable


def test_a_read_after_an_acknowledged_write_sees_it_not_an_older_value() -> None:
    assert entity(put("a", 0, 1), put("b", 2, 3), get("b", 4, 5))
    assert entity(put("a", 0, 1), put("b", 2, 3), get("a", 4, 5)) is False  # stale read
    assert entity(put("a", 0, 1), get(None, 2, 3)) is False  # an acknowledged put lost
    assert entity(get(None, 0, 1), put("a", 2, 3))


def test_a_lost_write_overwritten_later_is_found() -> None:
    # b was acknowledged, then c; a read between them saw a (b lost), later reads see c.
    history = (put("a", 0, 1), put("b", 2, 3), get("a", 4, 5), put("c", 6, 7), get("c", 8, 9))
    assert entity(*history) is False
    verdict = check_key("row", history, entity_model())
    assert verdict.stuck_at is not None and "get" in verdict.describe()


def test_concurrent_writes_may_take_effect_in_either_order() -> None:
    for last in ("a", "b"):
        assert entity(put("a", 0, 3), put("b", 1, 4), get(last, 5, 6))
    # but once a reader saw b then a, a later reader cannot see b again
    assert entity(put("a", 0, 10), put("b", 1, 10), get("b", 2, 3), get("a", 4, 5))
    assert entity(put("a", 0, 10), put("b", 1, 10), get("b", 2, 3), get("a", 4, 5),
                  get("b", 11, 12)) is False


def test_a_write_of_unknown_outcome_may_be_seen_or_not() -> None:
    unknown = put("b", 2, None, etag=None)
    assert entity(put("a", 0, 1), unknown, get("a", 3, 4))  # not (yet) applied
    assert entity(put("a", 0, 1), unknown, get("b", 3, 4))  # applied
    assert entity(put("a", 0, 1), unknown, get("b", 3, 4), get("a", 5, 6)) is False
    assert entity(put("a", 0, 1), unknown, get("b", 0.5, 0.9)) is False  # before invoke


def test_conditional_puts_follow_the_etag() -> None:
    assert entity(put("a", 0, 1, "e1"), put("b", 2, 3, "e2", if_match="e1"), get("b", 4, 5,
                                                                              "e2"))
    assert entity(put("a", 0, 1, "e1"), put("b", 2, 3, "e2", if_match="e0")) is False
    assert entity(put("a", 0, 1, "e1"), put("b", 2, 3, if_match="e1", refused=True)) is False
    # refused because a write of unknown outcome changed the etag: fine, and it is kept
    assert entity(put("a", 0, 1, "e1"), put("x", 1.5, None, etag=None),
                  put("b", 2, 3, if_match="e1", refused=True))


def test_an_append_is_at_its_sequence_number_and_reads_are_not_stale() -> None:
    assert log(append(("a", "b"), 0, 1, 0), append(("c",), 2, 3, 2),
               read(1, ("b", "c"), 4, 5))
    assert log(append(("a",), 0, 1, 0), append(("c",), 2, 3, 0)) is False  # seq given twice
    assert log(append(("a",), 0, 1, 0), append(("c",), 2, 3, 1),
               read(0, ("a",), 4, 5)) is False  # stale tail: c was acknowledged
    assert log(append(("a",), 0, 1, 0), append(("c",), 2, 3, 1),
               read(0, ("a",), 4, 5, at_end=False))  # a page, not the tail
    assert log(append(("a",), 0, 3, 0), append(("c",), 1, 4, 1), read(0, ("a",), 2, 5))


def test_an_append_of_unknown_outcome_may_be_seen_or_not_but_once() -> None:
    unknown = append(("b",), 1, None, None)
    assert log(append(("a",), 0, 1, 0), unknown, append(("c",), 2, 3, 1),
               read(0, ("a", "c"), 4, 5))
    assert log(append(("a",), 0, 1, 0), unknown, append(("c",), 2, 3, 2),
               read(0, ("a", "b", "c"), 4, 5))
    # its records read, then gone
    assert log(append(("a",), 0, 1, 0), unknown, read(0, ("a", "b"), 2, 3),
               read(0, ("a",), 4, 5)) is False
    # seen only by where a later read starts: b landed after the first whole-log read
    assert log(read(0, (), 2, 3), append(("b",), 1, None, None), read(1, (), 5, 6))
    # a gap: c acknowledged at 2, but b is in no read of the whole log
    assert log(append(("a",), 0, 1, 0), unknown, append(("c",), 2, 3, 2),
               read(0, ("a", "c"), 4, 5)) is False


def test_histories_split_per_key_and_a_long_one_is_checked_fast() -> None:
    rng = random.Random(3)
    ops, t, values = [], 0.0, []
    for i in range(600):  # one writer, two readers overlapping it
        value = f"v{i}"
        ops.append(Op(f"k{i % 3}", ("put", value, None, None), t, t + 1.0, ("ok", f"e{i}")))
        values.append(value)
        if rng.random() < 0.1:
            ops.append(Op(f"k{i % 3}", ("put", f"u{i}", None, None), t + 0.2, None))
        ops.append(Op(f"k{i % 3}", ("get",), t + 0.5, t + 1.5, ("value", value, f"e{i}")))
        t += 2.0
        ops.append(append((f"r{i}",), t, t + 1.0, i))
        ops.append(read(max(0, i - 2), tuple(f"r{j}" for j in range(max(0, i - 2), i + 1)),
                        t + 1.1, t + 2))
        t += 2.0
    started = time.monotonic()
    verdicts = (check_history([o for o in ops if o.key != "log"], entity_model())
                + check_history([o for o in ops if o.key == "log"], log_model()))
    assert all(v.linearizable for v in verdicts), [v.describe() for v in verdicts]
    assert len(verdicts) == 4
    assert time.monotonic() - started < 5.0  # about 0.2 s on an idle machine


# ---- against a dumb reference: every order of every subset ---------------------------------

def brute_force(ops: list[Op], model: object) -> bool:
    """Linearizable by enumeration: some subset of the unknown-outcome ops with every known
    one, in some order that respects real time, gives every op its answer."""
    model = model.for_key(ops)  # type: ignore[attr-defined]
    known = [op for op in ops if op.respond is not None]
    unknown = [op for op in ops if op.respond is None]
    for mask in range(1 << len(unknown)):
        chosen = known + [op for i, op in enumerate(unknown) if mask >> i & 1]
        for order in itertools.permutations(chosen):
            if any(b.respond is not None and b.respond < a.invoke
                   for i, a in enumerate(order) for b in order[i + 1:]):
                continue
            state = model.initial()  # type: ignore[attr-defined]
            for op in order:
                state = model.step(state, op)  # type: ignore[attr-defined]
                if state is None:
                    break
            else:
                return True
    return False


def random_entity_history(rng: random.Random) -> list[Op]:
    """4-5 ops on one row, answered by a real execution at random points in their bounds,
    then one answer changed half the time."""
    ops, row, etags = [], None, 0
    timed = []
    for i in range(rng.randint(4, 5)):
        t0 = rng.uniform(0, 6)
        t1 = t0 + rng.uniform(0, 3)
        unknown = rng.random() < 0.2
        kind = rng.choice(["put", "cas", "get", "get"])
        timed.append((rng.uniform(t0, t1) if not unknown or rng.random() < 0.5 else None,
                      i, kind, t0, None if unknown and kind != "get" else t1))
    for point, i, kind, t0, t1 in sorted(timed, key=lambda x: (x[0] is None, x[0] or 0)):
        if kind == "get":
            result = ("absent",) if row is None else ("value", *row)
            ops.append(Op("r", ("get",), t0, t1, result))
            continue
        if_match = None if kind == "put" else rng.choice(
            [row[1] if row else "e0", f"e{rng.randint(0, 3)}"])
        ok = if_match is None or (row is not None and row[1] == if_match)
        if point is not None and ok:
            etags += 1
            row = (f"v{i}", f"e{etags}")
        result = None if t1 is None else ("ok", f"e{etags}") if ok else ("refused",)
        ops.append(Op("r", ("put", f"v{i}", if_match, None), t0, t1, result))
    if rng.random() < 0.5:
        j = rng.randrange(len(ops))
        if ops[j].call[0] == "get" and ops[j].respond is not None:
            ops[j] = Op("r", ("get",), ops[j].invoke, ops[j].respond,
                        rng.choice([("absent",), ("value", "v0", "e1"), ("value", "v1", "e2")]))
    return ops


def random_log_history(rng: random.Random) -> list[Op]:
    """4-5 appends and reads of one log, answered by a real execution, perturbed half the
    time."""
    ops, records = [], []
    timed = []
    for i in range(rng.randint(4, 5)):
        t0 = rng.uniform(0, 6)
        t1 = t0 + rng.uniform(0, 3)
        unknown = rng.random() < 0.2
        kind = rng.choice(["append", "read"])
        timed.append((rng.uniform(t0, t1) if not unknown or rng.random() < 0.5 else None,
                      i, kind, t0, None if unknown and kind == "append" else t1))
    for point, i, kind, t0, t1 in sorted(timed, key=lambda x: (x[0] is None, x[0] or 0)):
        if kind == "read":
            start = rng.randint(0, len(records))
            ops.append(read(start, tuple(records[start:]), t0, t1))
            continue
        first = len(records)
        if point is not None:
            records.append(f"r{i}")
        ops.append(append((f"r{i}",), t0, t1, None if t1 is None else first))
    if rng.random() < 0.5:
        j = rng.randrange(len(ops))
        if ops[j].call[0] == "read":
            _, start, got, _ = ops[j].call
            ops[j] = read(start, got[:-1] if got else ("r0",), ops[j].invoke,
                          ops[j].respond or 0.0)
    return [Op("log", op.call, op.invoke, op.respond, op.result) for op in ops]


@pytest.mark.parametrize("kind", ["entity", "log"])
def test_the_checker_agrees_with_enumerating_every_order(kind: str) -> None:
    rng = random.Random(11)
    make, model = ((random_entity_history, entity_model()) if kind == "entity"
                   else (random_log_history, log_model()))
    verdicts = []
    for _ in range(150):
        ops = make(rng)
        expected = brute_force(ops, model)
        got = check_key("k", ops, model).linearizable
        assert got is expected, [op.describe() for op in ops]
        verdicts.append(expected)
    assert 20 < sum(verdicts) < 130  # both kinds of history were tried
