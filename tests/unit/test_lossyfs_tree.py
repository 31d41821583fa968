"""LossyTree: what a power cut keeps is exactly what was fsync'd (bytes and directory
entries), on real files, without FUSE."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tools.lossyfs.tree import LossyTree


def make(tmp_path: Path) -> LossyTree:
    return LossyTree(tmp_path / "backing")


def write_file(tree: LossyTree, rel: str, data: bytes, sync: bool = True) -> None:
    fd = tree.create(rel, os.O_RDWR, 0o644)
    tree.write(fd, data, 0)
    if sync:
        tree.fsync(fd)
    tree.close(fd)


def test_a_synced_file_whose_directory_was_not_synced_is_lost(tmp_path: Path) -> None:
    tree = make(tmp_path)
    write_file(tree, "a", b"hello")
    report = tree.cut()
    assert not (tree.root / "a").exists()
    assert report.entries_dropped == 1


def test_a_synced_file_in_a_synced_directory_survives_whole(tmp_path: Path) -> None:
    tree = make(tmp_path)
    write_file(tree, "a", b"hello")
    tree.fsync_dir("")
    tree.cut()
    assert (tree.root / "a").read_bytes() == b"hello"


def test_unsynced_appends_and_overwrites_are_undone(tmp_path: Path) -> None:
    tree = make(tmp_path)
    write_file(tree, "a", b"0123456789")
    tree.fsync_dir("")
    fd = tree.open("a", os.O_RDWR)
    tree.write(fd, b"XY", 3)          # overwrite inside the durable part
    tree.write(fd, b"tail", 10)       # append past it
    tree.write(fd, b"Z", 4)           # overwrite the overwrite
    tree.close(fd)
    assert (tree.root / "a").read_bytes() == b"012XZ56789tail"
    report = tree.cut()
    assert (tree.root / "a").read_bytes() == b"0123456789"
    assert report.files_rolled_back == 1


def test_an_unsynced_truncate_is_undone_and_a_synced_one_kept(tmp_path: Path) -> None:
    tree = make(tmp_path)
    write_file(tree, "a", b"0123456789")
    write_file(tree, "b", b"0123456789")
    tree.fsync_dir("")
    tree.truncate("a", 4)
    fd = tree.open("b", os.O_RDWR | os.O_TRUNC)
    tree.write(fd, b"new", 0)
    tree.fsync(fd)
    tree.close(fd)
    tree.cut()
    assert (tree.root / "a").read_bytes() == b"0123456789"
    assert (tree.root / "b").read_bytes() == b"new"


def test_a_rename_is_durable_only_once_its_directory_is_synced(tmp_path: Path) -> None:
    tree = make(tmp_path)
    write_file(tree, "meta", b"old")
    tree.fsync_dir("")
    write_file(tree, "meta.tmp", b"new")
    tree.rename("meta.tmp", "meta")
    assert (tree.root / "meta").read_bytes() == b"new"
    tree.cut()
    assert (tree.root / "meta").read_bytes() == b"old"      # the replaced inode came back
    assert not (tree.root / "meta.tmp").exists()


def test_a_synced_rename_replaces_for_good(tmp_path: Path) -> None:
    tree = make(tmp_path)
    write_file(tree, "meta", b"old")
    tree.fsync_dir("")
    write_file(tree, "meta.tmp", b"new")
    tree.rename("meta.tmp", "meta")
    tree.fsync_dir("")
    tree.cut()
    assert sorted(os.listdir(tree.root)) == ["meta"]
    assert (tree.root / "meta").read_bytes() == b"new"


def test_an_unsynced_unlink_comes_back_with_its_durable_bytes(tmp_path: Path) -> None:
    tree = make(tmp_path)
    write_file(tree, "seg-1", b"journal")
    tree.fsync_dir("")
    fd = tree.open("seg-1", os.O_RDWR)
    tree.write(fd, b"more", 7)
    tree.close(fd)
    tree.unlink("seg-1")
    tree.cut()
    assert (tree.root / "seg-1").read_bytes() == b"journal"


def test_directories_new_and_nested_follow_their_parents(tmp_path: Path) -> None:
    tree = make(tmp_path)
    tree.mkdir("en-1", 0o755)
    tree.mkdir("en-1/data", 0o755)
    write_file(tree, "en-1/data/x", b"x")
    tree.fsync_dir("en-1/data")
    tree.fsync_dir("en-1")
    # en-1 itself was never made durable in the root: all of it goes.
    tree.cut()
    assert os.listdir(tree.root) == []

    tree = make(tmp_path / "second")
    tree.mkdir("en-1", 0o755)
    tree.fsync_dir("")
    tree.mkdir("en-1/data", 0o755)
    write_file(tree, "en-1/data/x", b"x")
    tree.fsync_dir("en-1/data")
    # en-1/data was never made durable in en-1: en-1 stays, empty.
    tree.cut()
    assert os.listdir(tree.root) == ["en-1"]
    assert os.listdir(tree.root / "en-1") == []


def test_files_written_in_place_in_untouched_directories_roll_back(tmp_path: Path) -> None:
    """A second mount over a tree made earlier: nothing tracked until written."""
    first = make(tmp_path)
    first.mkdir("d", 0o755)
    write_file(first, "d/f", b"durable")
    first.fsync_dir("d")
    first.fsync_dir("")
    first.cut()
    tree = make(tmp_path)  # the remount
    fd = tree.open("d/f", os.O_RDWR)
    tree.write(fd, b"-lost", 7)
    tree.close(fd)
    tree.cut()
    assert (tree.root / "d" / "f").read_bytes() == b"durable"


def test_the_tree_refuses_everything_after_a_cut(tmp_path: Path) -> None:
    tree = make(tmp_path)
    tree.cut()
    with pytest.raises(OSError):
        tree.create("late", os.O_RDWR, 0o644)


def test_always_durable_names_survive_without_any_sync(tmp_path: Path) -> None:
    tree = LossyTree(tmp_path / "backing", frozenset({"server.log"}))
    tree.mkdir("ps-1", 0o755)
    tree.fsync_dir("")
    write_file(tree, "ps-1/server.log", b"line 1\n", sync=False)
    write_file(tree, "ps-1/data", b"lost", sync=False)
    tree.cut()
    assert os.listdir(tree.root / "ps-1") == ["server.log"]
    assert (tree.root / "ps-1" / "server.log").read_bytes() == b"line 1\n"
