"""spark.session: a missing or old Java is one clear error, not Spark's gateway traceback."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from common.errors import InvalidArgument
from spark import session


def _fake_java(tmp_path: Path, version_line: str) -> str:
    java = tmp_path / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    return str(java)


@pytest.mark.parametrize(("line", "major"), [
    ('openjdk version "17.0.15" 2025-04-15', 17),
    ('java version "1.8.0_292"', 8),
    ('openjdk version "21" 2023-09-19', 21),
])
def test_java_major_version_reads_the_version_line(tmp_path: Path, line: str, major: int
                                                   ) -> None:
    assert session.java_major_version(_fake_java(tmp_path, line)) == major


def test_no_java_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InvalidArgument, match="Java 17"):
        session.spark_session()


def test_an_old_java_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_java(bin_dir, 'java version "1.8.0_292"')
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", os.defpath)
    with pytest.raises(InvalidArgument, match="found Java 8"):
        session.spark_session()
