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


def test_cpu_per_append_by_part_and_the_machine() -> None:
    use = azure.CpuUse()
    use.add_turn({"fe": 1.0, "ps": 2.0}, {"fe": 1.5, "ps": 2.25}, client_s=1.0,
                 machine_before=(10.0, 20.0), machine_after=(13.0, 24.0))
    use.add_turn({"fe": 5.0, "ps": 5.0}, {"fe": 5.5, "ps": 5.25}, client_s=1.0,
                 machine_before=(20.0, 30.0), machine_after=(21.0, 34.0))
    found = use.metrics(1000)
    assert found["client_cpu_us_per_append"] == 2000.0
    assert found["server_cpu_us_per_append"] == 1500.0
    assert found["fe_cpu_us_per_append"] == 1000.0
    assert found["ps_cpu_us_per_append"] == 500.0
    assert "en_cpu_us_per_append" not in found
    assert found["machine_busy"] == 0.5


def test_cpu_ratio_is_the_other_systems_cpu_per_append_over_the_stamps() -> None:
    azurite = azure.CpuUse(parts={"azurite": 1.0}, client_s=1.0)  # 2 s for 1000: 2 ms
    stamp = azure.CpuUse(parts={"fe": 1.0, "en": 1.0}, client_s=2.0)  # 4 s for 1000: 4 ms
    assert azure.cpu_ratio(azurite, 1000, stamp, 1000) == 0.5
    assert azure.cpu_ratio(azurite, 0, stamp, 1000) is None
