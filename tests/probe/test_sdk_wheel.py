"""The SDK's wheel on the oldest Python it supports (issue 31): `make sdk`'s wheel, installed
into a fresh Python 3.9 virtual environment with nothing of the repository on its path
(its dependencies from the package index), runs a short script against a running stamp:
appends and reads, an entity put with an ETag (a stale one refused), a scan resumed from its
continuation, and the asyncio client.

The environment is kept under .venv/sdk-py39/ keyed by a hash of the SDK's sources, so a
second run with the same SDK only installs the fresh wheel into it (skipped without a
Python 3.9: pyenv's or one on the PATH)."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "sdk"
VENVS = ROOT / ".venv" / "sdk-py39"
PIP_TIMEOUT_S = 600

SCRIPT = r'''
import asyncio, json, sys
import stampsdk
from stampsdk import Client, errors
from stampsdk.aio import Client as AsyncClient

assert sys.version_info[:2] == (3, 9), sys.version
text = sys.argv[1]
with Client.from_connection_string(text, timeout_s=30) as c:
    first = c.append("wheel-log", [b"a", b"b", b"c"])
    assert c.read("wheel-log", first) == [(first, b"a"), (first + 1, b"b"), (first + 2, b"c")]
    etag = c.put("wheel-users", "alice", b"Oslo", if_none_match="*")
    assert c.get("wheel-users", "alice") == (b"Oslo", etag)
    try:
        c.put("wheel-users", "alice", b"Bergen", if_match=etag + "-stale")
        raise AssertionError("a stale ETag was taken")
    except errors.PreconditionFailed:
        pass
    c.put("wheel-users", "alice", b"Bergen", if_match=etag)
    c.put("wheel-users", "bob", b"Rome")
    it = c.scan("wheel-users", "wheel-usert", limit=1)
    head = [(e.row, e.value) for e in it]
    rest = [(e.row, e.value) for e in c.scan("wheel-users", "wheel-usert",
                                             continuation=it.continuation)]
    assert head + rest == [(b"alice", b"Bergen"), (b"bob", b"Rome")], (head, rest)


async def main():
    async with AsyncClient.from_connection_string(text) as c:
        seq = await c.append("wheel-log", [b"d"])
        return await c.read("wheel-log", seq)

assert asyncio.run(main())[0][1] == b"d"
server = [m for m in sys.modules
          if m.split(".")[0] in ("common", "frontend", "partition_layer", "tools")]
print(json.dumps({"ok": True, "server_modules": server}))
'''


def python39() -> str | None:
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3.9")))
    return found[-1] if found else shutil.which("python3.9")


def sources_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted([SDK / "pyproject.toml", *(SDK / "src").rglob("*")]):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(SDK)).encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def build_wheel(out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--disable-pip-version-check", "-w", str(out), str(SDK)],
                   check=True, timeout=PIP_TIMEOUT_S)
    (wheel,) = out.glob("stampsdk-*.whl")
    return wheel


def venv_with(python: str, wheel: Path) -> Path:
    """A Python 3.9 environment with `wheel` installed (reused for the same SDK sources)."""
    venv = VENVS / sources_hash()
    if not (venv / ".ready").exists():
        shutil.rmtree(VENVS, ignore_errors=True)  # older SDKs' environments
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet",
                        "--disable-pip-version-check", str(wheel)], check=True,
                       timeout=PIP_TIMEOUT_S)
        (venv / ".ready").touch()
    return venv


def test_the_wheel_works_on_python_3_9_against_a_stamp(tmp_path: Path,
                                                      admin_connection_string: str) -> None:
    python = python39()
    if python is None:
        pytest.skip("no Python 3.9 here (pyenv's or on the PATH)")
    wheel = build_wheel(tmp_path / "dist")
    venv = venv_with(python, wheel)
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--no-deps",
                    "--force-reinstall", "--disable-pip-version-check", str(wheel)],
                   check=True, timeout=PIP_TIMEOUT_S)
    done = subprocess.run([str(venv / "bin" / "python"), "-c", SCRIPT,
                           admin_connection_string], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"ok": True, "server_modules": []}
