"""`stamp bench blob-append`'s Azurite: found in the cache directory, or left out with the
reason when it cannot be installed (tools/bench/azure.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.bench import azure


def test_azurite_is_left_out_with_a_reason_without_npm(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAMP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(azure.shutil, "which", lambda name: None)
    said: list[str] = []
    binary, why = azure.azurite_binary(said.append)
    assert binary is None and "npm" in why and said == []


def test_azurite_in_the_cache_directory_is_used_as_it_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAMP_CACHE_DIR", str(tmp_path))
    installed = tmp_path / "azurite" / "node_modules" / ".bin" / "azurite-blob"
    installed.parent.mkdir(parents=True)
    installed.write_text("#!/bin/sh\n")
    monkeypatch.setattr(azure.shutil, "which", lambda name: None)  # npm is not even asked
    assert azure.azurite_binary(lambda message: None) == (installed, "")
