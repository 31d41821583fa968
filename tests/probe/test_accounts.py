"""Probe test of accounts (issue 16) on a real stamp: a 3-replica lock service holds them,
`stamp account ...` runs as a real process, and a front end's AccountStore (its cache on a
manual clock) checks signatures and tokens against what is stored."""

from __future__ import annotations

import base64
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from stampsdk import connection_string

from common.clock import ManualClock
from common.errors import PermissionDenied, Unauthenticated
from frontend import accounts, sas, signing
from frontend.accounts import AccountStore
from lock_service.client import LockClient
from tools.local_stamp import LocalStamp


def stamp_cli(data_dir: Path, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "tools.cli", "--data-dir", str(data_dir),
                             "account", *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == code, (args, result.returncode, result.stdout, result.stderr)
    if code:
        assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr, (
            result.stderr)
    return result


def accepts(store: AccountStore, key: bytes, clock: ManualClock) -> bool:
    request = signing.sign(key, "acme", "Append", "/acme/orders",
                           signing.digest_of(b"r"), clock.wall())
    try:
        signing.verify(request, keys_of=store.keys_of, now_s=clock.wall())
    except Unauthenticated:
        return False
    return True


@pytest.mark.slow
def test_account_create_keys_rotate_sas_delete(
        stamp_factory: Callable[..., LocalStamp]) -> None:
    stamp = stamp_factory(extent_nodes=0, lock_servers=3, partition_managers=1)
    data_dir = stamp.data_dir
    created = stamp_cli(data_dir, "create", "acme")
    assert "no front ends yet" in created.stderr  # the temporary endpoints are said so
    first = connection_string.parse(created.stdout.splitlines()[0])
    assert first.account == "acme" and first.key is not None
    assert list(first.endpoints) == [r.address for r in stamp.partition_managers()]
    stamp_cli(data_dir, "create", "acme", code=1)  # AlreadyExists, one line
    stamp_cli(data_dir, "create", "Acme", code=2)  # a naming rule, one line
    keys = stamp_cli(data_dir, "keys", "acme").stdout.split()
    assert keys[0] == "key1" and base64.b64decode(keys[1]) == first.key and keys[2] == "key2"
    old_key2 = base64.b64decode(keys[3])
    assert stamp_cli(data_dir, "ls").stdout.split() == ["acme"]

    clock = ManualClock()
    with LockClient.from_stamp(data_dir, holder="fe-test") as lock_client:
        front_end = AccountStore(lock_client, clock, cache_ttl_s=accounts.CACHE_TTL_MAX_S)
        assert accepts(front_end, first.key, clock)  # now cached for 10 s of `clock`
        rotated = connection_string.parse(
            stamp_cli(data_dir, "rotate", "acme", "--key", "1").stdout.strip())
        assert rotated.key not in (None, first.key)
        assert base64.b64decode(stamp_cli(data_dir, "keys", "acme").stdout.split()[3]) \
            == old_key2  # the other key is untouched
        fresh = AccountStore(lock_client, clock)
        assert not accepts(fresh, first.key, clock) and accepts(fresh, rotated.key, clock)
        assert accepts(front_end, first.key, clock)  # within the TTL: the cache still has it
        clock.advance(accounts.CACHE_TTL_MAX_S)
        assert not accepts(front_end, first.key, clock)  # at most 10 s later: refused
        assert accepts(front_end, rotated.key, clock)

        token = stamp_cli(data_dir, "sas", "acme", "--permissions", "read,scan", "--prefix",
                          "ord", "--expiry", "1h", "--key", "2").stdout.strip()
        assert sas.decode(token).key_index == 2
        granted = sas.check(token, account="acme", permission="read", name="orders",
                            now_s=time.time(), keys_of=fresh.keys_of)
        assert granted.permissions == {"read", "scan"}
        with pytest.raises(PermissionDenied, match="does not grant append"):
            sas.check(token, account="acme", permission="append", name="orders",
                      now_s=time.time(), keys_of=fresh.keys_of)
        stamp_cli(data_dir, "sas", "acme", "--permissions", "read", "--expiry", "400d",
                  code=1)  # longer than a token may live
        stamp_cli(data_dir, "rotate", "acme", "--key", "2")
        with pytest.raises(Unauthenticated, match="does not match key 2"):
            sas.check(token, account="acme", permission="read", name="orders",
                      now_s=time.time(), keys_of=AccountStore(lock_client, clock).keys_of)

        stamp_cli(data_dir, "delete", "acme", code=1)  # no partition layer to purge it
        deleted = stamp_cli(data_dir, "delete", "acme", "--no-purge").stdout
        assert "deleted account acme" in deleted and "not removed yet" in deleted
        stamp_cli(data_dir, "delete", "nobody", "--no-purge", code=1)
        stamp_cli(data_dir, "create", "acme", code=1)  # retired (test_account_delete.py)
        stamp_cli(data_dir, "keys", "acme", code=1)
        assert stamp_cli(data_dir, "ls").stdout.split() == []
        assert not accepts(AccountStore(lock_client, clock), rotated.key, clock)
        clock.advance(accounts.CACHE_TTL_MAX_S)
        assert not accepts(front_end, rotated.key, clock)
