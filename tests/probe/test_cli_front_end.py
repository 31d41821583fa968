"""The `stamp` commands that go through a front end (issue 16): `log`, `entity`, `scan`, run
as a user runs them (a subprocess of the real CLI) against a stamp with front ends.

One stamp serves the whole module (starting one costs most of the time); each test uses
names of its own.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from common.errors import NotFound
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

CONFIG = "".join(f'[[extent_nodes]]\nname = "en-{i}"\nfault_domain = "fd-{i}"\n'
                 f'upgrade_domain = "ud-{i}"\nport = 0\n' for i in (1, 2, 3)) + "".join(
    f'[[stream_managers]]\nname = "sm-{i}"\nport = 0\nraft_port = 0\n'
    f'[[lock_servers]]\nname = "lock-{i}"\nport = 0\nraft_port = 0\n' for i in (1, 2, 3)) + (
    '[[partition_managers]]\nname = "pm-1"\nport = 0\n'
    '[[partition_servers]]\nname = "ps-1"\nport = 0\n') + "".join(
    f'[[front_ends]]\nname = "fe-{i}"\nport = 0\n' for i in (1, 2))
ENV_VAR = "STAMP_CONNECTION_STRING"
ADMIN_FILE = "admin-connection-string"
# No job schedulers (spark/scheduler.py): their own probe test starts them.
CONFIG = "job_schedulers = []\n" + CONFIG


@dataclass(frozen=True)
class Result:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    stdout_bytes: bytes


def run(data_dir: Path, *args: str, env: dict[str, str] | None = None,
        stdin: bytes | str | None = None, check: bool = True) -> Result:
    """`stamp --data-dir DATA_DIR ARGS...`; without `env`, $STAMP_CONNECTION_STRING is unset
    (so the admin file is what the command falls back to)."""
    environment = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    environment.update(env or {})
    done = subprocess.run([sys.executable, "-m", "tools.cli", "--data-dir", str(data_dir),
                           *args], capture_output=True, timeout=120, env=environment,
                          input=stdin.encode() if isinstance(stdin, str) else stdin)
    result = Result(list(args), done.returncode, done.stdout.decode(errors="replace"),
                    done.stderr.decode(errors="replace"), done.stdout)
    if check and result.returncode != 0:
        raise AssertionError(f"stamp {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result


def assert_one_line_error(result: Result, fragment: str, code: int = 1) -> None:
    lines = result.stderr.splitlines()
    assert result.returncode == code and len(lines) == 1 and fragment in lines[0] \
        and lines[0].startswith("stamp") and "Traceback" not in result.stderr, (
        result.args, result.returncode, result.stderr)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("cli-front-end")
    (root / "stamp.toml").write_text(CONFIG)
    data = root / "data"
    run(data, "up", "--config", str(root / "stamp.toml"))
    yield data
    with contextlib.suppress(NotFound):
        LocalStamp.load(data).kill_all()



def test_log_commands(data_dir: Path) -> None:
    assert "appended 2 record(s) at 0..1" in run(data_dir, "log", "append", "orders",
                                                 "one", "two").stdout
    assert "at 2..3" in run(data_dir, "log", "append", "orders", stdin="three\nfour\n").stdout
    assert run(data_dir, "log", "read", "orders").stdout == \
        "0\tone\n1\ttwo\n2\tthree\n3\tfour\n"
    assert run(data_dir, "log", "read", "orders", "--from", "1", "--limit", "2").stdout == \
        "1\ttwo\n2\tthree\n"
    # Bytes that are not UTF-8, as arguments and on stdin: appended as they are.
    raw = subprocess.run([sys.executable, "-m", "tools.cli", "--data-dir", str(data_dir), "log",
                          "append", "raw-bytes", b"\xff\xfe"], capture_output=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != ENV_VAR})
    assert raw.returncode == 0, raw.stderr
    run(data_dir, "log", "append", "raw-bytes", stdin=b"\x80\n\xc3\xa9\n")
    assert run(data_dir, "log", "read", "raw-bytes").stdout == "0\t\\xff\\xfe\n1\t\\x80\n2\té\n"
    # An idempotency token: the retry of an append appends nothing twice.
    once = run(data_dir, "log", "append", "orders", "five", "--token", "t-1").stdout
    assert run(data_dir, "log", "append", "orders", "five", "--token", "t-1").stdout == once
    assert run(data_dir, "log", "peek", "orders").stdout == "first 0 next 5\n"
    run(data_dir, "log", "append", "orders-eu", "x")
    run(data_dir, "log", "append", "invoices", "y")
    assert run(data_dir, "log", "ls", "--prefix", "orders").stdout.split() == [
        "orders", "orders-eu"]
    assert {"orders", "orders-eu", "invoices"} <= set(run(data_dir, "log", "ls").stdout.split())

    with _tail(data_dir, "orders", "--from", "3") as lines:
        assert [lines.get(timeout=60) for _ in range(2)] == ["3\tfour", "4\tfive"]
        run(data_dir, "log", "append", "orders", "six")
        assert lines.get(timeout=60) == "5\tsix"

    assert "trimmed orders below 2" in run(data_dir, "log", "trim", "orders", "2").stdout
    assert run(data_dir, "log", "peek", "orders").stdout == "first 2 next 6\n"
    assert "sealed orders" in run(data_dir, "log", "seal", "orders").stdout
    followed = run(data_dir, "log", "tail", "orders", "--from", "4")  # a sealed log ends
    assert followed.stdout == "4\tfive\n5\tsix\n" and "is sealed" in followed.stderr
    assert_one_line_error(run(data_dir, "log", "append", "orders", "seven", check=False),
                          "Sealed")
    assert_one_line_error(run(data_dir, "log", "append", "Orders", "x", check=False),
                          "log name 'Orders' has characters other than", code=2)


@contextlib.contextmanager
def _tail(data_dir: Path, *args: str) -> Iterator[queue.Queue[str]]:
    """`stamp log tail ARGS` running; its stdout lines arrive on the queue. It is stopped
    with SIGINT (^C) and must leave with 130 and one line, no traceback."""
    environment = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    # ^C as at a terminal: a suite started in the background (`make test &`) hands its
    # children SIGINT ignored, and the tail would never see it.
    tail = subprocess.Popen([sys.executable, "-m", "tools.cli", "--data-dir", str(data_dir),
                             "log", "tail", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=environment,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert tail.stdout is not None
        for line in tail.stdout:
            lines.put(line.rstrip("\n"))
    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        yield lines
    finally:
        tail.send_signal(signal.SIGINT)
        try:
            _, stderr = tail.communicate(timeout=60)
        finally:
            tail.kill()
    assert tail.returncode == 130 and stderr == "stamp: interrupted\n", (tail.returncode, stderr)


def test_entity_commands(data_dir: Path) -> None:
    etag = run(data_dir, "entity", "put", "users", "alice", "Oslo").stdout.strip()
    assert etag and "\n" not in etag
    assert run(data_dir, "entity", "get", "users", "alice").stdout == "Oslo"
    assert json.loads(run(data_dir, "entity", "get", "users", "alice", "--json").stdout) == {
        "value": "Oslo", "etag": etag}
    # Conditions: a stale ETag and an existing row are refused, and nothing is written.
    new_etag = run(data_dir, "entity", "put", "users", "alice", "Bergen", "--if-match",
                   etag).stdout.strip()
    assert new_etag != etag
    assert_one_line_error(run(data_dir, "entity", "put", "users", "alice", "Lost",
                              "--if-match", etag, check=False), "PreconditionFailed")
    assert_one_line_error(run(data_dir, "entity", "put", "users", "alice", "Lost",
                              "--if-none-match", check=False), "PreconditionFailed")
    assert run(data_dir, "entity", "get", "users", "alice").stdout == "Bergen"
    run(data_dir, "entity", "put", "users", "bob", "Rome", "--if-none-match")

    # Bytes that are not UTF-8, from stdin and from a file: stored and returned exactly.
    blob = bytes(range(256))
    run(data_dir, "entity", "put", "users", "carol", "--value-file", "-", stdin=blob)
    got = run(data_dir, "entity", "get", "users", "carol")
    assert got.stdout_bytes == blob
    shown = json.loads(run(data_dir, "entity", "get", "users", "carol", "--json").stdout)
    assert base64.b64decode(shown["value_base64"]) == blob and "value" not in shown
    path = data_dir.parent / "value.bin"
    path.write_bytes(b"\x00from a file\n")
    run(data_dir, "entity", "put", "users", "dave", "--value-file", str(path))
    assert run(data_dir, "entity", "get", "users", "dave").stdout_bytes == \
        b"\x00from a file\n"
    run(data_dir, "entity", "put", "users-x", "zed", "another partition name")

    listed = run(data_dir, "entity", "ls", "users").stdout.splitlines()
    assert [line.split("\t")[0] for line in listed] == ["alice", "bob", "carol", "dave"]
    assert listed[:2] == ["alice\tBergen", "bob\tRome"]
    # One line an entity: control characters and bytes that are not UTF-8 are escaped.
    assert listed[2].startswith("carol\t\\x00\\x01") and "\\t\\n" in listed[2]
    assert listed[3] == "dave\t\\x00from a file\\n"
    rows = [json.loads(line) for line in
            run(data_dir, "entity", "ls", "users", "--json", "--limit", "2").stdout.splitlines()]
    assert rows == [{"pname": "users", "row": "alice", "value": "Bergen", "etag": new_etag},
                    {"pname": "users", "row": "bob", "value": "Rome",
                     "etag": rows[1]["etag"]}]

    assert_one_line_error(run(data_dir, "entity", "delete", "users", "alice", "--if-match",
                              etag, check=False), "PreconditionFailed")
    assert "deleted users/alice" in run(data_dir, "entity", "delete", "users", "alice",
                                        "--if-match", new_etag).stdout
    assert_one_line_error(run(data_dir, "entity", "get", "users", "alice", check=False),
                          "NotFound")
    assert_one_line_error(run(data_dir, "entity", "put", "users", "x", check=False),
                          "give the value either as an argument or with --value-file")
    assert_one_line_error(run(data_dir, "entity", "put", "users", "x", "--value-file",
                              str(data_dir / "no-such-file"), check=False), "no-such-file")
    assert_one_line_error(run(data_dir, "entity", "get", "users", "", check=False),
                          "a row key is not empty", code=2)
    assert_one_line_error(run(data_dir, "entity", "put", "users", "x", "v", "--if-match",
                              "e", "--if-none-match", check=False), "not allowed with", code=2)


def test_scan_in_key_order_with_continuation(data_dir: Path) -> None:
    expected = []
    for pname in ("scan-a", "scan-b", "scan-c"):
        for row in ("r1", "r2", "r3"):
            run(data_dir, "entity", "put", pname, row, f"{pname}:{row}")
            expected.append(f"{pname}/{row}\t{pname}:{row}")
    whole = run(data_dir, "scan", "--start", "scan-a", "--end", "scan-d")
    assert whole.stdout.splitlines() == expected and whole.stderr == ""

    # From a row, up to (not including) another; paged by --limit and continued.
    args = ["--start", "scan-a/r2", "--end", "scan-c/r2"]
    first = run(data_dir, "scan", *args, "--limit", "3")
    assert first.stdout.splitlines() == expected[1:4]
    [note] = first.stderr.splitlines()
    assert note.startswith("continuation: ")
    token = note.removeprefix("continuation: ")
    rest = run(data_dir, "scan", *args, "--continuation", token)
    assert rest.stdout.splitlines() == expected[4:7] and rest.stderr == ""

    items = [json.loads(line) for line in
             run(data_dir, "scan", "--start", "scan-b", "--end", "scan-c", "--json").stdout
             .splitlines()]
    assert [(i["pname"], i["row"], i["value"]) for i in items] == [
        ("scan-b", r, f"scan-b:{r}") for r in ("r1", "r2", "r3")]
    assert all(i["etag"] for i in items)
    assert_one_line_error(run(data_dir, "scan", "--start", "Scan", check=False),
                          "argument --start", code=2)
    assert_one_line_error(run(data_dir, "scan", "--limit", "0", check=False),
                          "argument --limit", code=2)


def test_connection_string_sources(data_dir: Path) -> None:
    admin = (data_dir / ADMIN_FILE).read_text().strip()
    other = run(data_dir, "account", "create", "tenant").stdout.splitlines()[0]
    assert other.startswith("Endpoint=") and "Account=tenant;" in other

    # --connection-string, the variable, the admin file: each reaches its own account's logs.
    run(data_dir, "log", "append", "tenant-log", "by option", "--connection-string", other)
    run(data_dir, "log", "append", "tenant-log", "by variable", env={ENV_VAR: other})
    assert run(data_dir, "log", "read", "tenant-log", env={ENV_VAR: other}).stdout == \
        "0\tby option\n1\tby variable\n"
    assert "tenant-log" not in run(data_dir, "log", "ls").stdout  # the admin file's account
    run(data_dir, "log", "append", "tenant-log", "by admin file")
    assert run(data_dir, "log", "read", "tenant-log").stdout == "0\tby admin file\n"
    # The option wins over the variable; an empty variable counts as unset.
    assert run(data_dir, "log", "read", "tenant-log", "--connection-string", admin,
               env={ENV_VAR: other}).stdout == "0\tby admin file\n"
    assert run(data_dir, "log", "read", "tenant-log", env={ENV_VAR: ""}).stdout == \
        "0\tby admin file\n"

    # A garbled one is one line naming where it came from, and nothing is sent.
    garbled = other.replace("Key=", "Kee=")
    assert_one_line_error(run(data_dir, "log", "read", "tenant-log", "--connection-string",
                              garbled, check=False),
                          "the connection string from --connection-string is not valid")
    assert_one_line_error(run(data_dir, "scan", env={ENV_VAR: "Endpoint=nowhere"},
                              check=False),
                          f"the connection string from ${ENV_VAR} is not valid")
    key = other.split("Key=")[1]
    assert key not in run(data_dir, "log", "read", "x-y", "--connection-string", garbled,
                          check=False).stderr  # an error never shows the secret

    # The admin file, missing or garbled: a data dir of the same running stamp without it.
    copy = data_dir.parent / "copy"
    copy.mkdir()
    (copy / "stamp.json").write_text((data_dir / "stamp.json").read_text())
    assert_one_line_error(run(copy, "log", "ls", check=False),
                          f"{copy / ADMIN_FILE} does not exist")
    (copy / ADMIN_FILE).write_text("Account=tenant\n")
    assert_one_line_error(run(copy, "entity", "ls", "users", check=False),
                          f"the connection string from {copy / ADMIN_FILE} is not valid")
    # A well-formed string with a wrong key: the front end refuses it, one line.
    wrong = other.replace(key, base64.b64encode(bytes(32)).decode())
    assert_one_line_error(run(data_dir, "log", "read", "tenant-log", "--connection-string",
                              wrong, check=False), "Unauthenticated")


def test_shared_access_token_reads_but_does_not_append(data_dir: Path) -> None:
    run(data_dir, "log", "append", "shared-log", "public record")
    token = run(data_dir, "account", "sas", _admin_account(data_dir), "--permissions",
                "read", "--prefix", "shared", "--expiry", "1h").stdout.strip()
    endpoints = (data_dir / ADMIN_FILE).read_text().split(";")[0]
    reader = f"{endpoints};Account={_admin_account(data_dir)};SharedAccessSignature={token}"
    assert run(data_dir, "log", "read", "shared-log", "--connection-string",
               reader).stdout == "0\tpublic record\n"
    assert_one_line_error(run(data_dir, "log", "append", "shared-log", "not allowed",
                              "--connection-string", reader, check=False), "PermissionDenied")
    assert_one_line_error(run(data_dir, "log", "read", "other-log", "--connection-string",
                              reader, check=False), "PermissionDenied")
    assert_one_line_error(run(data_dir, "entity", "put", "shared-rows", "r", "v",
                              "--connection-string", reader, check=False), "PermissionDenied")
    assert run(data_dir, "log", "read", "shared-log").stdout == "0\tpublic record\n"


def _admin_account(data_dir: Path) -> str:
    settings = dict(part.split("=", 1) for part in
                    (data_dir / ADMIN_FILE).read_text().strip().split(";") if part)
    return settings["Account"]


def test_help_of_every_new_command(data_dir: Path) -> None:
    for args in (["log", "ls"], ["log", "tail"], ["entity", "put"], ["entity", "get"],
                 ["entity", "delete"], ["entity", "ls"], ["scan"]):
        out = run(data_dir, *args, "--help").stdout
        assert "--connection-string" in out and "STAMP_CONNECTION_STRING" in out, args


def test_unreachable_front_end_is_one_line_after_the_timeout(tmp_path: Path) -> None:
    """No stamp is needed when the connection string is given: a dead endpoint is retried
    until --timeout, then one line."""
    dead = f"Endpoint=127.0.0.1:1;Account=abc;Key={base64.b64encode(bytes(32)).decode()}"
    for args in (["log", "read", "orders"], ["scan"], ["entity", "get", "users", "r"]):
        assert_one_line_error(run(tmp_path, *args, "--connection-string", dead, "--timeout",
                                  "1", check=False), "Unavailable")
