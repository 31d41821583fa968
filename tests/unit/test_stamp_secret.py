"""The stamp secret's file (common/stamp_secret.py): made once, whole and private; read only
when private and long enough; errors name the path, never the content."""

from __future__ import annotations

import dataclasses
import os
import stat
import threading
from pathlib import Path

import pytest

from common import stamp_secret
from common.config import default_config
from common.errors import InvalidArgument
from tools.local_stamp import LocalStamp


def test_a_new_secret_is_private_long_and_made_once(tmp_path: Path) -> None:
    path = tmp_path / "stamp-secret"
    assert stamp_secret.make(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    secret = stamp_secret.read(path)
    assert len(secret) >= stamp_secret.SECRET_CHARS_MIN
    assert not stamp_secret.make(path)
    assert stamp_secret.read(path) == secret
    assert [p.name for p in tmp_path.iterdir()] == ["stamp-secret"]  # no temporary left


def test_concurrent_makers_end_with_one_secret(tmp_path: Path) -> None:
    path = tmp_path / "stamp-secret"
    made: list[bool] = []
    threads = [threading.Thread(target=lambda: made.append(stamp_secret.make(path)))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 8 and made.count(True) == 1  # every caller returned, one made it
    assert len(stamp_secret.read(path)) >= stamp_secret.SECRET_CHARS_MIN


def test_a_secret_others_may_read_or_too_short_is_refused_without_showing_it(
        tmp_path: Path) -> None:
    path = tmp_path / "stamp-secret"
    stamp_secret.make(path)
    secret = stamp_secret.read(path).decode()
    os.chmod(path, 0o640)
    with pytest.raises(InvalidArgument, match="open to other users") as refused:
        stamp_secret.read(path)
    assert str(path) in str(refused.value) and secret not in str(refused.value)
    os.chmod(path, 0o600)
    path.write_text("short\n")
    with pytest.raises(InvalidArgument, match="too short") as refused:
        stamp_secret.read(path)
    assert "short\n" not in str(refused.value)
    with pytest.raises(InvalidArgument, match="cannot read"):
        stamp_secret.read(tmp_path / "missing")


def test_ensure_makes_one_on_one_machine_and_asks_for_the_copy_across_hosts(
        tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="same one"):
        stamp_secret.ensure(tmp_path / "host-2", may_make=False)
    assert not (tmp_path / "host-2" / stamp_secret.SECRET_FILE).exists()
    path = stamp_secret.ensure(tmp_path / "stamp")
    assert path == tmp_path / "stamp" / stamp_secret.SECRET_FILE and path.exists()
    assert stamp_secret.ensure(tmp_path / "stamp", may_make=False) == path


def test_a_replica_command_line_gets_the_secret_file_once() -> None:
    argv = ["stamp", "serve", "lock", "--name", "lock-1"]
    once = stamp_secret.with_arg(argv, "/d/stamp-secret")
    assert once == [*argv, "--secret-file", "/d/stamp-secret"]
    assert stamp_secret.with_arg(once, "/d/stamp-secret") == once


def test_a_stamp_across_hosts_without_its_secret_is_a_clear_error(tmp_path: Path) -> None:
    """`stamp up --only HOST` with `[hosts]` makes no secret of its own: another host's
    would differ, and the groups would never form."""
    config = default_config()
    stamp = LocalStamp(tmp_path / "host-1",
                       dataclasses.replace(config, hosts={"lock-1": "127.0.0.2"}))
    with pytest.raises(InvalidArgument, match="stamp across hosts"):
        stamp.secret_file()
    local = LocalStamp(tmp_path / "one-machine", config)
    assert stamp_secret.read(local.secret_file())


def test_the_command_that_makes_a_secret_for_a_stamp_across_hosts(tmp_path: Path) -> None:
    path = tmp_path / "stamp-secret"
    stamp_secret.main([str(path)])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = stamp_secret.read(path)
    with pytest.raises(SystemExit, match="exists: not replaced"):
        stamp_secret.main([str(path)])
    assert stamp_secret.read(path) == first
