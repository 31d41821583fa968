"""The CLI's tables, drawn with rich (issue 19): one look for `stamp status`, `stamp top`,
`partition ls`, `stream ls` and `extent ls`.

Contract: a table printed to something that is not a terminal (a pipe, a file, a test's
captured output) is plain text, one row per line, never wrapped or cut: scripts and tests
read it by line and column. `--json` output never goes through here.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

# Wide enough that no row of ours wraps when the output is not a terminal (rich would wrap
# at 80 columns otherwise).
PLAIN_WIDTH_COLUMNS = 10_000


def console(file: Any = None) -> Console:
    out = file or sys.stdout
    if out.isatty():
        return Console(file=out, highlight=False)
    return Console(file=out, width=PLAIN_WIDTH_COLUMNS, highlight=False, no_color=True,
                   soft_wrap=False)


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None,
          right: Iterable[str] = ()) -> Table:
    """A table of `columns` (those in `right` right-aligned: numbers) and `rows` ("-" for
    None)."""
    aligned = set(right)
    out = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False,
                show_edge=False)
    for column in columns:
        out.add_column(column, justify="right" if column in aligned else "left",
                       no_wrap=True)
    for row in rows:
        out.add_row(*("-" if cell is None else str(cell) for cell in row))
    return out


def print_table(columns: Sequence[str], rows: Iterable[Sequence[Any]],
                title: str | None = None, right: Iterable[str] = ()) -> None:
    console().print(table(columns, rows, title, right))
