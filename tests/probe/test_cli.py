"""The `stamp` command as a user runs it: up, status, kill, start, demo, extent, down."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.errors import NotFound
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

# 6 extent nodes: after the demo kills one, three fault domains still have a live node.
CONFIG = "".join(f'[[extent_nodes]]\nname = "en-{i}"\nfault_domain = "fd-{(i - 1) % 3 + 1}"\n'
                 f'upgrade_domain = "ud-{i}"\nport = 0\n' for i in range(1, 7)) + "".join(
    f'[[stream_managers]]\nname = "sm-{i}"\nport = 0\nraft_port = 0\n'
    f'[[lock_servers]]\nname = "lock-{i}"\nport = 0\nraft_port = 0\n' for i in (1, 2, 3)) + "".join(
    f'[[partition_managers]]\nname = "pm-{i}"\nport = 0\n'
    f'[[partition_servers]]\nname = "ps-{i}"\nport = 0\n'
    f'[[front_ends]]\nname = "fe-{i}"\nport = 0\n' for i in (1, 2))
ENS = {f"en-{i}" for i in range(1, 7)}
# No job schedulers (spark/scheduler.py): their own probe test starts them.
CONFIG = "job_schedulers = []\n" + CONFIG


def stamp(data_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "tools.cli", "--data-dir", str(data_dir),
                             *args], capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"stamp {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "stamp.toml").write_text(CONFIG)
    yield tmp_path / "data"
    with contextlib.suppress(NotFound):
        LocalStamp.load(tmp_path / "data").kill_all()


def test_up_status_kill_start_demo_down(data_dir: Path) -> None:
    out = stamp(data_dir, "up", "--config", str(data_dir.parent / "stamp.toml")).stdout
    assert "started 18 processes" in out
    assert "already running" in stamp(data_dir, "up").stdout

    status = json.loads(stamp(data_dir, "status", "--json").stdout)
    assert {p["name"]: p["serving"] for p in status["processes"]} == {
        name: True for name in ENS | {"sm-1", "sm-2", "sm-3", "lock-1", "lock-2", "lock-3",
                                      "pm-1", "pm-2", "ps-1", "ps-2", "fe-1", "fe-2"}}
    # Front ends answer their Status RPC (with their counters: nothing refused yet).
    assert all(p["requests"] >= 0 and p["throttled"] == 0 and p["refused"] == 0
               for p in status["processes"] if p["kind"] == "front-end")
    table = stamp(data_dir, "status").stdout
    assert [line.split()[0] for line in table.splitlines() if "throttled" in line] == [
        "fe-1", "fe-2"]
    assert sorted(p.get("role", "") for p in status["processes"]
                  if p["kind"] != "front-end") == [
        *[""] * 8, *["follower"] * 4, *["leader"] * 3, "standby"]

    demo = stamp(data_dir, "demo").stdout
    assert "the subscription saw every one in order" in demo
    assert "acknowledged records read back in order" in demo
    # The analytics step: Spark counted each log's records through the data source (it
    # asserts the counts equal each log's peek; views-* got 1200 records).
    assert "counted by Spark through the Stamp data source" in demo
    assert any(line.split()[:2] == [line.split()[0], "1200"] and line.split()[0].startswith(
        "views-") for line in demo.splitlines() if line.strip())

    assert "created stream events" in stamp(data_dir, "stream", "create", "events").stdout
    stamp(data_dir, "stream", "append", "events", "one", "two")
    subprocess.run([sys.executable, "-m", "tools.cli", "--data-dir", str(data_dir), "stream",
                    "append", "events"], input="three\nfour\n", text=True, check=True,
                   capture_output=True)
    assert stamp(data_dir, "stream", "cat", "events").stdout.split() == [
        "one", "two", "three", "four"]
    [events] = [s for s in json.loads(stamp(data_dir, "stream", "ls", "--json").stdout)
                if s["name"] == "events"]
    first = events["extents"][0]["extent_id"]
    assert "sealed at" in stamp(data_dir, "extent", "seal", str(first)).stdout
    stamp(data_dir, "stream", "append", "events", "five")
    assert stamp(data_dir, "stream", "cat", "events").stdout.split()[-1] == "five"
    extents = json.loads(stamp(data_dir, "extent", "ls", "--json").stdout)
    states = {e["extent_id"]: e["state"] for e in extents if "events" in e["streams"]}
    assert states[first] == "sealed" and list(states.values()).count("open") == 1

    from lock_service.client import LockClient
    locks = LockClient.from_stamp(data_dir, holder="ps-7")
    lease = locks.acquire("partition/7", ttl_s=30.0)
    assert lease is not None
    rows = json.loads(stamp(data_dir, "lock", "ls", "--json").stdout)
    [row] = [r for r in rows if r["lock"] == "partition/7"]
    assert (row["holder"], row["token"]) == ("ps-7", lease.token)
    assert {"pm/leader", "partition/1"} <= {r["lock"] for r in rows}  # the partition layer's
    lease.release()
    locks.close()
    assert "partition/7" not in stamp(data_dir, "lock", "ls").stdout

    assert "SIGKILL" in stamp(data_dir, "kill", "en-2").stdout
    status = json.loads(stamp(data_dir, "status", "--json").stdout)
    assert [p["alive"] for p in status["processes"] if p["name"] == "en-2"] == [False]
    assert "started en-2" in stamp(data_dir, "start", "en-2").stdout

    assert "stopped 18 processes" in stamp(data_dir, "down").stdout
    assert "nothing was running" in stamp(data_dir, "down").stdout


def test_user_mistakes_are_one_line_errors(tmp_path: Path) -> None:
    result = stamp(tmp_path / "nowhere", "status", check=False)
    assert result.returncode == 1
    assert result.stderr.startswith("stamp: error: no stamp in")
    assert "Traceback" not in result.stderr
    result = stamp(tmp_path, "extent", "seal", "banana", check=False)
    assert result.returncode == 2 and "an extent id" in result.stderr and "banana" in result.stderr
    (tmp_path / "bad.toml").write_text("[extent_node]\nspeed = 1\n")
    result = stamp(tmp_path / "d", "up", "--config", str(tmp_path / "bad.toml"), check=False)
    assert result.returncode == 1 and "unknown config key extent_node.speed" in result.stderr


# (arguments, a fragment of the one-line error). Each is refused before anything is sent.
BAD_ARGUMENTS = [
    (["log", "read", "orders", "--from", "-5"], "argument --from: a sequence number"),
    (["log", "read", "orders", "--from", "banana"], "a sequence number is a whole number"),
    (["log", "read", "orders", "--from", str(1 << 64)], "a sequence number is from 0"),
    (["log", "read", "orders", "--limit", "0"], "argument --limit: a record count"),
    (["log", "tail", "orders", "--from", "-1"], "argument --from"),
    (["log", "trim", "orders", "-1"], "argument upto"),
    (["log", "trim", "orders"], "the following arguments are required: upto"),
    (["log", "append", "", "x"], "log name '' has 0 characters"),
    (["log", "read", "x" * 2000], "has 2000 characters; a log name has 3 to 63"),
    (["log", "read", "Orders"], "characters other than lowercase letters"),
    (["log", "peek", "orders", "--timeout", "0"], "argument --timeout: a timeout is more"),
    (["log", "ls", "--prefix", "A"], "argument --prefix"),
    (["log", "frobnicate", "orders"], "invalid choice"),
    (["entity", "get", "users", ""], "argument ROW: a row key is not empty"),
    (["entity", "put", "u", "row", "v"], "argument PNAME: partition name 'u' has 1"),
    (["entity", "ls", "users", "--limit", "0"], "argument --limit: a record count"),
    (["entity", "delete", "users"], "the following arguments are required: ROW"),
    (["scan", "--start", "a/b"], "argument --start: partition name 'a'"),
    (["scan", "--limit", "-1"], "argument --limit: a record count"),
    (["partition", "move", "-1", "ps-2"], "a partition id is from 0"),
    (["partition", "move", "one", "ps-2"], "a partition id is a whole number"),
    (["extent", "seal", "-3"], "an extent id"),
    (["extent", "read", "5", "--offset", "-1"], "a byte offset is from 0"),
    (["extent", "read", "5", "--length", "0"], "a byte length is from 1"),
    (["extent", "ec", "5", "--k", "0"], "a fragment count is from 1"),
    (["fault", "en-1", "nonsense"], "is not name=action"),
    (["fault", "en-1", "x=explode"], "unknown fault action 'explode'"),
    (["fault", "en-1", "x=delay:soon"], "argument spec"),
    (["fault", "en-1", "x=fail,after=z"], "argument spec"),
    (["stream", "create", "a\nb"], "no NUL or line break"),
    (["lock", "get", ""], "a name is not empty"),
    (["kill", ""], "a name is not empty"),
    (["frobnicate"], "invalid choice"),
]
# Commands that need a stamp: where there is none, and where it is not running.
NEED_A_STAMP = [["log", "read", "orders"], ["log", "append", "orders", "x"], ["log", "ls"],
                ["entity", "get", "users", "alice"], ["scan"],
                ["partition", "ls"], ["partition", "move", "1", "ps-2"], ["stream", "ls"],
                ["lock", "ls"], ["extent", "ls"], ["kill", "en-1"],
                ["fault", "en-1", "x=fail"]]
NEED_IT_RUNNING = [["log", "read", "orders"], ["log", "tail", "orders"], ["partition", "ls"],
                   ["entity", "ls", "users"], ["scan"],
                   ["partition", "move", "1", "ps-2"], ["stream", "ls"], ["lock", "ls"]]


def assert_one_line_error(result: subprocess.CompletedProcess[str], fragment: str,
                          code: int) -> None:
    lines = result.stderr.splitlines()
    assert result.returncode == code and len(lines) == 1 and fragment in lines[0] \
        and lines[0].startswith("stamp") and "Traceback" not in result.stderr, (
        result.args, result.returncode, result.stderr)


def test_every_bad_argument_is_one_line(tmp_path: Path) -> None:
    """Issue 15 hole 10: `stamp log read orders --from -5` printed a traceback."""
    from concurrent.futures import ThreadPoolExecutor

    from common.config import load_config

    with ThreadPoolExecutor(4) as pool:  # independent commands: run a few at once
        bad = list(pool.map(lambda a: stamp(tmp_path / "nowhere", *a[0], check=False),
                            BAD_ARGUMENTS))
        missing = list(pool.map(lambda a: stamp(tmp_path / "nowhere", *a, check=False),
                                NEED_A_STAMP))
    for result, (_, fragment) in zip(bad, BAD_ARGUMENTS, strict=True):
        assert_one_line_error(result, fragment, 2)
    for result in missing:
        assert_one_line_error(result, "no stamp in", 1)
    # A stamp that was planned but is not running (every pid 0): refused at once, not
    # retried against dead ports until the client's timeout.
    stopped = LocalStamp(tmp_path / "stopped", load_config(None))
    stopped.plan()
    stopped.plan_front_ends()
    stopped.save()
    for args in NEED_IT_RUNNING:
        assert_one_line_error(stamp(stopped.data_dir, *args, check=False), "is not running", 1)
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "stamp.json").write_text("{not json")
    assert_one_line_error(stamp(tmp_path / "damaged", "status", check=False),
                          "is not valid JSON", 1)
    assert_one_line_error(stamp(tmp_path / "d", "up", "--config", str(tmp_path / "none.toml"),
                                check=False), "none.toml", 1)
