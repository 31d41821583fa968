"""Fault points: inert unless armed; the STAMP_FAULTS syntax; after= and times=."""

from __future__ import annotations

import asyncio

import pytest

from common import faults
from common.errors import FaultInjected, InvalidArgument


@pytest.fixture(autouse=True)
def clean() -> None:
    faults.disarm()


def test_unarmed_point_does_nothing() -> None:
    faults.point("nothing.here")
    asyncio.run(faults.apoint("nothing.here"))
    assert faults.hit("nothing.here") is None


def test_parse_full_syntax() -> None:
    parsed = faults.parse("a.b=delay:200; c=crash,after=5 ;d=fail,times=2;"
                          "en.forward.before_send@127.0.0.1:7102=delay:9")
    assert parsed == [("a.b", "delay", 200.0, 0, None), ("c", "crash", 0.0, 5, None),
                      ("d", "fail", 0.0, 0, 2),
                      ("en.forward.before_send@127.0.0.1:7102", "delay", 9.0, 0, None)]


@pytest.mark.parametrize("bad", ["noequals", "=fail", "x=fail,color=red"])
def test_parse_rejects_nonsense(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        faults.parse(bad)


def test_unknown_action_rejected() -> None:
    with pytest.raises(InvalidArgument):
        faults.arm("x", "explode")


def test_fail_after_and_times() -> None:
    faults.arm("p", "fail", after=2, times=2)
    faults.point("p")
    faults.point("p")  # the first two hits pass
    for _ in range(2):
        with pytest.raises(FaultInjected):
            faults.point("p")
    faults.point("p")  # disarmed after firing twice
    assert "p" not in faults.armed()


def test_async_delay_point_does_not_block_the_loop() -> None:
    faults.arm("slow", "delay", 50)

    async def scenario() -> int:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.005)
        task = asyncio.ensure_future(ticker())
        await faults.apoint("slow")
        task.cancel()
        return ticks
    assert asyncio.run(scenario()) >= 3


def test_bug_raises_an_error_outside_the_stamp_hierarchy() -> None:
    """`bug` stands for an unexpected exception: code catching StampError lets it through."""
    from common.errors import StampError

    faults.arm("p", "bug", times=1)
    with pytest.raises(faults.FaultBug) as raised:
        asyncio.run(faults.apoint("p"))
    assert not isinstance(raised.value, StampError)
    faults.point("p")  # fired once, disarmed


def test_flip_changes_one_bit_of_the_bytes_passing_a_point() -> None:
    assert faults.flipped("some.flip", b"abcde") == b"abcde"  # unarmed: untouched
    faults.arm("some.flip", "flip", times=1)
    changed = faults.flipped("some.flip", b"abcde")
    assert changed == b"abbde"
    assert sum(bin(a ^ b).count("1") for a, b in zip(changed, b"abcde", strict=True)) == 1
    assert faults.flipped("some.flip", b"abcde") == b"abcde"  # times=1: disarmed
    faults.arm("some.flip", "flip")
    assert faults.flipped("some.flip", b"") == b""
    faults.arm("some.fail", "fail")
    with pytest.raises(FaultInjected):
        faults.flipped("some.fail", b"x")  # another action fires as at a point
