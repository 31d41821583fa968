"""The SDK guide's examples run (issue 31): every ```python block of docs/*.md, as written,
against one running stamp, each in a fresh namespace with nothing but what the guide tells
its reader to have: the connection string of an account in $STAMP_CONNECTION_STRING
(docs/README.md). A block fails the test if it raises (its own asserts included).

A block that must not run (a shell command, an output) is fenced with another language;
a fence that looks like Python under another name (`py`, `python3`, `pycon`) is refused, so
no example escapes the test by its spelling. One stamp for the module, no sleeps: the suite
is at its time budget."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.conftest import module_stamp
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

DOCS = Path(__file__).resolve().parents[2] / "docs"
ENV_VAR = "STAMP_CONNECTION_STRING"  # what docs/README.md tells the reader to set
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([^\s`]*)")
PYTHON_ALIASES = ("py", "python3", "pycon", "py3", "Python")


class Block(NamedTuple):
    page: str  # the file's name under docs/
    line: int  # the line of the opening fence, from 1
    language: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, in order (unclosed: runs to the end)."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    at = 0
    while at < len(lines):
        opening = FENCE.match(lines[at])
        if opening is None:
            at += 1
            continue
        indent, fence, language = opening.groups()
        body: list[str] = []
        end = at + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            body.append(lines[end][len(indent):] if lines[end].startswith(indent)
                        else lines[end])
            end += 1
        found.append(Block(path.name, at + 1, language, "\n".join(body) + "\n"))
        at = end + 1
    return found


def all_blocks() -> list[Block]:
    return [block for page in sorted(DOCS.glob("*.md")) for block in blocks_of(page)]


def python_blocks() -> list[Block]:
    return [block for block in all_blocks() if block.language == "python"]


@pytest.fixture(scope="module")
def docs_stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    """The smallest whole stamp with a front end; `stamp up` wrote the admin account's
    connection string."""
    with module_stamp(tmp_path_factory, "docs", extent_nodes=3, stream_managers=1,
                      lock_servers=3, partition_managers=1, partition_servers=1,
                      front_ends=1) as stamp:
        yield stamp


@pytest.fixture
def connection_string(docs_stamp: LocalStamp, monkeypatch: pytest.MonkeyPatch) -> str:
    text = docs_stamp.admin_connection_string_file.read_text().strip()
    monkeypatch.setenv(ENV_VAR, text)
    return text


LINK = re.compile(r"\]\(([^)#\s]+\.md)[^)]*\)|^\[[^\]]+\]:\s*(\S+\.md)", re.MULTILINE)


def test_the_guide_has_its_pages_and_examples() -> None:
    pages = {path.name for path in DOCS.glob("*.md")}
    assert "README.md" in pages, "docs/README.md is the guide's index"
    for page in sorted(pages):
        targets = {a or b for a, b in LINK.findall((DOCS / page).read_text())}
        assert targets <= pages, f"{page} links to pages that do not exist: {targets - pages}"
        if page == "README.md":
            assert targets == pages - {"README.md"}, "the index links every page"
    assert python_blocks(), "the guide has no ```python example"
    aliases = [b.where for b in all_blocks() if b.language in PYTHON_ALIASES]
    assert not aliases, f"Python fenced as another language (never run): {aliases}"


@pytest.mark.parametrize("block", python_blocks(), ids=lambda block: block.where)
def test_example_runs(block: Block, connection_string: str) -> None:
    # Compiled at its place in the page: a traceback names the page's own line numbers.
    code = compile("\n" * block.line + block.code, str(DOCS / block.page), "exec")
    exec(code, {"__name__": "__main__"})
