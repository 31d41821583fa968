"""The lock service's state machine (lock_service/state.py) and leader time, without I/O:
examples, then hypothesis properties against dumb reference models."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.clock import ManualClock
from lock_service import commands as c
from lock_service import limits
from lock_service.leader_time import LeaderTime
from lock_service.state import LockState


def applied(state: LockState, *commands: c.Command) -> list[c.Result]:
    results = []
    for command in commands:
        results.append(state.apply(command))
        state.check_invariants()
    return results


def expire_due(state: LockState, at: float) -> None:
    """What a leader whose lessor saw no renewal but the logged ones logs before stamping `at`."""
    now = max(state.now, at)
    due = tuple(token for expires_at, token in state.expiry if expires_at <= now)
    if due:
        applied(state, c.Expire(at, due))


# --- locks -----------------------------------------------------------------------------------


def test_one_holder_and_tokens_rise() -> None:
    s = LockState()
    first, held = applied(s, c.Acquire(1.0, "r1", "p/7", "ps-1", 5.0),
                          c.Acquire(2.0, "r2", "p/7", "ps-2", 5.0))
    assert first == c.Granted(1, 6.0)
    assert held == c.Held("ps-1", 1, 6.0)
    assert applied(s, c.Release(3.0, 1)) == [c.Released(True)]
    assert s.take_freed() == ["p/7"]
    (second,) = applied(s, c.Acquire(3.0, "r3", "p/7", "ps-2", 5.0))
    assert isinstance(second, c.Granted) and second.token > first.token


def test_only_an_expire_ends_a_lease_and_only_once_its_logged_time_is_up() -> None:
    s = LockState()
    applied(s, c.Acquire(10.0, "r1", "L", "a", 2.0))
    applied(s, c.Tick(100.0))  # time alone ends nothing: renewals may be in the leader's memory
    assert s.holder_of("L") is not None
    s = LockState()
    applied(s, c.Acquire(10.0, "r1", "L", "a", 2.0))
    applied(s, c.Expire(11.999, (1,)))  # a logged renewal the leader had not seen yet
    assert s.holder_of("L") is not None
    applied(s, c.Expire(12.0, (1,)))
    assert s.holder_of("L") is None and s.take_freed() == ["L"]
    assert [event.kind for event in s.take_lease_events()] == ["granted", "ended"]


def test_time_never_goes_back() -> None:
    s = LockState()
    applied(s, c.Acquire(10.0, "r1", "L", "a", 2.0), c.Expire(13.0, (1,)))
    applied(s, c.Tick(5.0), c.Acquire(6.0, "r2", "L", "b", 2.0))
    assert s.now == 13.0
    assert s.leases[2].expires_at == 15.0  # granted at the state's time, not the stamp


def test_a_deposed_leaders_stamps_are_refused_once_a_newer_term_began() -> None:
    s = LockState()
    applied(s, c.Barrier(2), c.Acquire(10.0, "r1", "L", "a", 5.0, term=2), c.Barrier(3))
    # pysyncobj forwarded the old leader's queue: its clock may be ahead of the new leader's.
    (stale,) = applied(s, c.Tick(100.0, term=2))
    assert isinstance(stale, c.Rejected) and stale.error == "NotLeader"
    assert s.now == 10.0 and s.holder_of("L") is not None
    (stale_write,) = applied(s, c.Write(100.0, "w1", "k", b"v", term=2))
    assert isinstance(stale_write, c.Rejected) and "w1" not in s.dedup
    assert applied(s, c.Write(10.5, "w1", "k", b"v", term=3)) == [c.Written(1)]  # the retry


def test_renew_keeps_token_and_fails_once_ended() -> None:
    s = LockState()
    applied(s, c.Acquire(0.0, "r1", "L", "a", 2.0))
    assert applied(s, c.Renew(1.5, 1, 2.0)) == [c.Renewed(3.5)]
    assert s.holder_of("L").token == 1
    (late,) = applied(s, c.Expire(3.5, (1,)), c.Renew(3.5, 1, 2.0))[1:]
    assert isinstance(late, c.Rejected) and late.error == "NotFound"


def test_retry_with_same_request_id_is_applied_once() -> None:
    s = LockState()
    grant, again = applied(s, c.Acquire(0.0, "r1", "L", "a", 2.0),
                           c.Acquire(0.5, "r1", "L", "a", 2.0))
    assert grant == again and s.last_token == 1
    put, put_again = applied(s, c.Write(1.0, "w1", "k", b"v", 0), c.Write(1.0, "w1", "k", b"v", 0))
    assert put == put_again == c.Written(1) and s.revision == 1


def test_dedup_forgets_after_its_window() -> None:
    s = LockState()
    applied(s, c.Write(0.0, "w1", "k", b"v"))
    applied(s, c.Tick(limits.DEDUP_WINDOW_S + 1))
    assert "w1" not in s.dedup
    assert applied(s, c.Write(limits.DEDUP_WINDOW_S + 1, "w1", "k", b"v")) == [c.Written(2)]


def test_session_keys_vanish_with_the_lease() -> None:
    s = LockState()
    (session,) = applied(s, c.OpenSession(0.0, "s1", "ps-1", 1.0))
    assert isinstance(session, c.Granted)
    applied(s, c.Write(0.0, "w1", "members/ps-1", b"x", lease=session.token),
            c.Write(0.0, "w2", "members/ps-9", b"y", lease=session.token),
            c.Write(0.0, "w3", "members/ps-9", b"z"))  # rebound: no longer ephemeral
    applied(s, c.Expire(1.0, (session.token,)))
    assert list(s.kv) == ["members/ps-9"]
    (dead,) = applied(s, c.Write(1.0, "w4", "members/ps-1", b"x", lease=session.token))
    assert isinstance(dead, c.Rejected) and dead.error == "PreconditionFailed"


def test_fenced_write_refused_after_the_lease_ends() -> None:
    s = LockState()
    applied(s, c.Acquire(0.0, "r1", "pm", "pm-1", 1.0))
    assert applied(s, c.Write(0.5, "w1", "map", b"1", fence=1)) == [c.Written(1)]
    expire_due(s, 1.0)
    (refused,) = applied(s, c.Write(1.0, "w2", "map", b"2", fence=1))
    assert isinstance(refused, c.Rejected) and refused.error == "PreconditionFailed"


# --- key/value ---------------------------------------------------------------------------------


def test_versions_never_repeat_across_delete_and_recreate() -> None:
    s = LockState()
    results = applied(s, c.Write(0, "1", "k", b"a", 0), c.Delete(0, "2", "k"),
                      c.Write(0, "3", "k", b"b", 0), c.Write(0, "4", "k", b"c", 1))
    assert results == [c.Written(1), c.Deleted(True), c.Written(2), c.Mismatch(2)]
    assert applied(s, c.Get("k")) == [c.Value(b"b", 2)]


def test_list_by_prefix_in_order_with_limit() -> None:
    s = LockState()
    for i, key in enumerate(["a/2", "a/1", "b/1", "a/3", "a"]):
        applied(s, c.Write(0, f"w{i}", key, b""))
    assert applied(s, c.ListKeys("a/", 2), c.ListKeys("b", 10), c.ListKeys("", 100)) == [
        c.Keys(("a/1", "a/2")), c.Keys(("b/1",)), c.Keys(("a", "a/1", "a/2", "a/3", "b/1"))]


def test_a_list_with_values_carries_each_keys_value_and_version() -> None:
    s = LockState()
    applied(s, c.Write(0, "w1", "ps/1", b"one"), c.Write(0, "w2", "ps/2", b"two"),
            c.Write(0, "w3", "ps/1", b"uno"), c.Write(0, "w4", "q", b"other"))
    assert applied(s, c.ListKeys("ps/", 10, True)) == [
        c.Keys(("ps/1", "ps/2"), ((b"uno", 3), (b"two", 2)))]


def test_a_list_with_values_stops_adding_values_at_its_byte_budget() -> None:
    s = LockState()
    big = b"x" * limits.VALUE_BYTES_MAX
    fit = limits.LIST_VALUE_BYTES_MAX // limits.VALUE_BYTES_MAX
    applied(s, *(c.Write(0, f"w{i}", f"k/{i}", big) for i in range(fit + 1)))
    (result,) = applied(s, c.ListKeys("k/", 100, True))
    assert isinstance(result, c.Keys)
    assert result.keys == tuple(f"k/{i}" for i in range(fit + 1))  # every key...
    assert [value for value, _ in result.values] == [big] * fit  # ...values of those that fit



@pytest.mark.parametrize("command", [
    c.Acquire(0, "r", "", "h", 1.0), c.Acquire(0, "r", "L", "h", 0.0),
    c.Acquire(0, "r", "L", "h", float("nan")), c.Write(0, "w", "k", "not bytes"),
    c.Write(0, "w", "k", b"x" * (limits.VALUE_BYTES_MAX + 1)), c.Write(0, "w", "k", b"", -1),
    c.Get("x" * (limits.KEY_BYTES_MAX + 1)), c.ListKeys("", -1), c.Renew(0, -1, 1.0),
    c.Expire(0, [1]), c.Expire(0, (-1,)), c.Expire(0, (1,) * (limits.EXPIRE_TOKENS_MAX + 1))])
def test_bad_commands_are_rejected_not_raised(command: c.Command) -> None:
    s = LockState()
    (result,) = applied(s, command)
    assert isinstance(result, c.Rejected) and result.error == "InvalidArgument"


def test_commands_survive_pickling_into_the_log() -> None:
    for command in [c.Acquire(1.0, "r", "L", "h", 1.0), c.Barrier(), c.Write(1, "w", "k", b"v")]:
        assert pickle.loads(pickle.dumps(command, protocol=2)) == command


# --- leader time --------------------------------------------------------------------------------


def test_leader_time_runs_at_the_monotonic_rate_from_the_state_time() -> None:
    clock = ManualClock(start=500.0)
    leader = LeaderTime(clock)
    leader.anchor(term=3, state_now=42.0)
    clock.advance(1.5)
    assert leader.now() == 43.5
    leader.resign()
    with pytest.raises(AssertionError):
        leader.now()
    leader.anchor(term=4, state_now=43.0)  # the state had not seen 43.5: stand still, never jump
    assert leader.now() == 43.0


# --- properties against dumb references -----------------------------------------------------------

NAMES, HOLDERS = ["a", "b"], ["h1", "h2", "h3"]


class LockModel:
    """The dumbest lock service: lists and linear scans."""

    def __init__(self) -> None:
        self.now, self.token = 0.0, 0
        self.leases: dict[int, list] = {}  # token -> [name, holder, expires_at]

    def advance(self, at: float) -> None:
        self.now = max(self.now, at)
        self.leases = {t: v for t, v in self.leases.items() if v[2] > self.now}

    def step(self, op: tuple) -> c.Result:
        kind, at, *args = op
        self.advance(at)
        if kind == "acquire":
            name, holder, ttl = args
            for t, (n, h, exp) in self.leases.items():
                if n == name:
                    return c.Held(h, t, exp)
            self.token += 1
            self.leases[self.token] = [name, holder, self.now + ttl]
            return c.Granted(self.token, self.now + ttl)
        if kind == "renew":
            token, ttl = args
            if token not in self.leases:
                return "gone"
            self.leases[token][2] = self.now + ttl
            return c.Renewed(self.now + ttl)
        if kind == "release":
            return c.Released(self.leases.pop(args[0], None) is not None)
        return c.Now(self.now)


lock_ops = st.lists(st.one_of(
    st.tuples(st.just("acquire"), st.floats(-1, 3), st.sampled_from(NAMES),
              st.sampled_from(HOLDERS), st.sampled_from([0.5, 1.0, 2.0])),
    st.tuples(st.just("renew"), st.floats(-1, 3), st.integers(1, 12), st.sampled_from([0.5, 2.0])),
    st.tuples(st.just("release"), st.floats(-1, 3), st.integers(1, 12)),
    st.tuples(st.just("tick"), st.floats(-1, 3))), max_size=60)


def to_command(kind: str, at: float, request_id: str, args: list) -> c.Command:
    if kind == "acquire":
        return c.Acquire(at, request_id, *args)
    if kind == "renew":
        return c.Renew(at, *args)
    if kind == "release":
        return c.Release(at, *args)
    return c.Tick(at)


@settings(max_examples=300, deadline=None)
@given(lock_ops)
def test_locks_match_the_reference_and_tokens_strictly_rise(ops: list[tuple]) -> None:
    s, model, t = LockState(), LockModel(), 0.0
    last_grant: dict[str, int] = {}
    for i, (kind, dt, *args) in enumerate(ops):
        t += dt  # stamps may go back: a new leader's clock can be behind
        command = to_command(kind, t, f"r{i}", args)
        expire_due(s, t)
        got, want = s.apply(command), model.step((kind, t, *args))
        s.check_invariants()
        if want == "gone":
            assert isinstance(got, c.Rejected) and got.error == "NotFound"
        else:
            assert got == want
        if isinstance(got, c.Granted):
            name = args[0]
            assert got.token > last_grant.get(name, 0) and got.token == s.last_token
            last_grant[name] = got.token
        holders = {n: [tok for tok, v in model.leases.items() if v[0] == n] for n in NAMES}
        assert all(len(tokens) <= 1 for tokens in holders.values()), "two holders"


KEYS = ["k1", "k2", "k/3"]
kv_ops = st.lists(st.one_of(
    st.tuples(st.just("put"), st.sampled_from(KEYS), st.binary(max_size=4)),
    st.tuples(st.just("cas"), st.sampled_from(KEYS), st.binary(max_size=4),
              st.one_of(st.just(0), st.just(-1), st.integers(1, 8))),
    st.tuples(st.just("delete"), st.sampled_from(KEYS)),
    st.tuples(st.just("get"), st.sampled_from(KEYS)),
    st.tuples(st.just("list"), st.sampled_from(["", "k", "k/", "x"]))), max_size=60)


@settings(max_examples=300, deadline=None)
@given(kv_ops, st.integers(0, 60))
def test_kv_history_replays_against_a_dict(ops: list[tuple], snapshot_at: int) -> None:
    s, ref, revision = LockState(), {}, 0
    for i, (kind, key, *args) in enumerate(ops):
        if i == snapshot_at:  # a snapshot restored mid-history changes nothing
            restored = LockState.from_snapshot(pickle.loads(pickle.dumps(s.to_snapshot())))
            assert restored.digest() == s.digest()
            s = restored
        current = ref.get(key, (None, 0))[1]
        if kind == "put":
            revision += 1
            ref[key] = (args[0], revision)
            assert s.apply(c.Write(0, f"w{i}", key, args[0])) == c.Written(revision)
        elif kind == "cas":
            value, expected = args
            expected = current if expected == -1 else expected
            got = s.apply(c.Write(0, f"w{i}", key, value, expected))
            if expected == current:
                revision += 1
                ref[key] = (value, revision)
                assert got == c.Written(revision)
            else:
                assert got == c.Mismatch(current)
        elif kind == "delete":
            assert s.apply(c.Delete(0, f"d{i}", key)) == c.Deleted(ref.pop(key, None) is not None)
        elif kind == "get":
            want = c.Value(*ref[key]) if key in ref else None
            assert s.apply(c.Get(key)) == want
        else:
            assert s.apply(c.ListKeys(key, 100)) == c.Keys(
                tuple(sorted(k for k in ref if k.startswith(key))))
        s.check_invariants()
