"""tools/bench/fresh_stamp.with_fresh_stamp stops the stamp's processes whatever happens:
after the body, after a body that raises, and after `up` itself fails part way (a port
taken meanwhile: the processes it started must not be left running on a shared machine)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tools.bench import fresh_stamp


class _Stamp:
    """Stands for LocalStamp: records whether it was brought down."""

    made: list[_Stamp] = []
    fail_up = False

    def __init__(self, data_dir: Path, config: Any, config_path: str,
                 faults: bool = False) -> None:
        self.downed = False
        _Stamp.made.append(self)

    def up(self, progress: Any = None) -> list[str]:
        if _Stamp.fail_up:
            raise RuntimeError("Failed to bind to address 127.0.0.1:18167")
        return []

    def down(self, progress: Any = None) -> list[str]:
        self.downed = True
        return []


@pytest.fixture(autouse=True)
def fake_stamp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fresh_stamp, "LocalStamp", _Stamp)
    _Stamp.made.clear()
    _Stamp.fail_up = False


def test_a_stamp_that_fails_to_come_up_is_brought_down() -> None:
    _Stamp.fail_up = True
    with pytest.raises(RuntimeError, match="bind"):
        fresh_stamp.with_fresh_stamp("", lambda stamp: None, lambda _: None,
                                     stream_layer_only=True)
    assert [s.downed for s in _Stamp.made] == [True]


def test_the_stamp_is_brought_down_after_the_body_and_after_a_failing_body() -> None:
    assert fresh_stamp.with_fresh_stamp("", lambda stamp: 42, lambda _: None,
                                        stream_layer_only=True) == 42

    def failing(stamp: Any) -> None:
        raise ValueError("bench failed")
    with pytest.raises(ValueError):
        fresh_stamp.with_fresh_stamp("", failing, lambda _: None, stream_layer_only=True)
    assert [s.downed for s in _Stamp.made] == [True, True]
