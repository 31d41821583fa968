"""Progress of a long CLI command on stderr (issue 19): one look for `stamp up`, `down`,
`start`, `demo`, `bench`, `scan`, and the partition manager's splits, merges, moves and
balancing.

Contract:
- It writes to stderr only (or the file given): stdout stays the command's result, so
  `--json` output parses and a pipe gets only data.
- On a terminal (the file is a tty and TERM is not "dumb") it is a rich live line: a spinner,
  then a bar with M/N while a total is known, the elapsed time and the status. It is
  transient: gone when the command ends, so the result stands alone.
- Anywhere else (CI logs, tests capturing output, a file) it is plain lines, never a control
  code: one `[LABEL] STATUS (ELAPSED s)` line per `phase()` or `status()` call (a count
  update alone prints nothing: a log needs the steps, not every tick). `plain=False` prints
  nothing at all there, for commands whose stderr is itself a contract (`stamp scan` writes
  its continuation token there).
- `show_after_s`: nothing is shown, on a terminal or as lines, until the work has lasted
  that long; then the current status is shown and every later change. Commands that are
  usually quick (one RPC to the partition manager) stay silent when they are.

A `Progress` is also a `Callable[[str], None]` (`status`): the benches' `progress(message)`.
`SILENT` takes every call and shows nothing, for library code called without a display.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO, Any

# A plain line says how long the command has run: the CI log shows where the time went.
ELAPSED_FORMAT = "({:.1f} s)"
# Commands that usually answer at once show a wait only after this long (user-visible
# latency below ~1 s needs no reassurance; above it the user wonders whether it hangs).
WAIT_SHOW_AFTER_S = 1.0
# The live line's redraws per second: enough to look alive, little CPU on a shared machine.
REFRESHES_PER_S = 8


def is_terminal(file: Any) -> bool:
    """True when `file` is an interactive terminal that understands control codes."""
    try:
        tty = bool(file.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False
    return tty and os.environ.get("TERM", "").lower() not in ("dumb", "unknown")


class Progress:
    """One command's progress (module docstring). Use as a context manager; every method
    may be called from any thread, and before `__enter__` or after `__exit__` (then it only
    records)."""

    def __init__(self, label: str, *, total: int | None = None, show_after_s: float = 0.0,
                 plain: bool = True, file: IO[str] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.file: IO[str] = file if file is not None else sys.stderr
        self.terminal = is_terminal(self.file)
        self.plain = plain
        self.show_after_s = show_after_s
        self._clock = clock
        self._lock = threading.RLock()
        self._text = ""
        self._done = 0
        self._total = total
        self._started_at = clock()
        self._shown = False
        self._closed = False
        self._timer: threading.Timer | None = None
        self._live: Any = None   # rich.progress.Progress while shown on a terminal
        self._task: Any = None

    # ---- what the command reports -----------------------------------------------------

    def phase(self, text: str, total: int | None = None) -> None:
        """A new step: its status, its count from 0, and its total (None: unknown, a
        spinner)."""
        with self._lock:
            self._text, self._done, self._total = text, 0, total
            self._changed(line=True)

    def status(self, text: str) -> None:
        """A new status within the step (the count stays)."""
        with self._lock:
            self._text = text
            self._changed(line=True)

    __call__ = status

    def advance(self, steps: int = 1, text: str | None = None) -> None:
        """Count `steps` more done (and change the status quietly: no plain line)."""
        with self._lock:
            self._done += steps
            if text is not None:
                self._text = text
            self._changed(line=False)

    @property
    def done(self) -> int:
        return self._done

    @property
    def total(self) -> int | None:
        return self._total

    def elapsed_s(self) -> float:
        return self._clock() - self._started_at

    # ---- showing it -------------------------------------------------------------------

    def __enter__(self) -> Progress:
        self._started_at = self._clock()
        if not self.terminal and not self.plain:
            return self
        if self.show_after_s <= 0:
            self._show()
        else:
            self._timer = threading.Timer(self.show_after_s, self._show)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            self._closed = True
            if self._live is not None:
                self._live.stop()
                self._live = None

    def _show(self) -> None:
        with self._lock:
            if self._shown or self._closed:
                return
            self._shown = True
            if self.terminal:
                self._start_live()
            elif self._text:
                self._write_line()

    def _changed(self, line: bool) -> None:
        if not self._shown or self._closed:
            return
        if self._live is not None:
            self._sync_live()
        elif line and not self.terminal:
            self._write_line()

    def _write_line(self) -> None:
        count = "" if not self._done else f"{self._done:,} " if self._total is None \
            else f"{self._done}/{self._total} "
        elapsed = ELAPSED_FORMAT.format(self.elapsed_s())
        self.file.write(f"[{self.label}] {count}{self._text} {elapsed}\n")
        self.file.flush()

    def _start_live(self) -> None:
        from rich.console import Console
        from rich.progress import Progress as RichProgress
        from rich.progress import SpinnerColumn, TextColumn

        bar, count, elapsed = _columns()
        console = Console(file=self.file, force_terminal=True, highlight=False)
        # stdout goes above the live line only when it is a terminal too (the same screen):
        # a pipe or file must get the command's output untouched, never through stderr.
        # Other writes to sys.stderr meanwhile (a note, a warning) go above it as well.
        self._live = RichProgress(
            SpinnerColumn(), bar(bar_width=24), count(),
            elapsed(self.elapsed_s), TextColumn(f"{self.label}: {{task.description}}",
                                            markup=False),
            console=console, transient=True, refresh_per_second=REFRESHES_PER_S,
            redirect_stdout=is_terminal(sys.stdout),
            redirect_stderr=self.file is sys.stderr)
        self._sync_live()
        self._live.start()

    def _sync_live(self) -> None:
        live = self._live
        task = next((t for t in live.tasks if t.id == self._task), None)
        if task is not None and (task.total is None) == (self._total is None):
            live.update(self._task, description=self._text, completed=self._done,
                        total=self._total)
            return
        # Rich cannot take a total back (None means "unchanged" to update()): a step of
        # unknown length after one with a total gets a task of its own.
        if task is not None:
            live.remove_task(self._task)
        self._task = live.add_task(self._text, total=self._total, completed=self._done)


_COLUMNS: tuple[type, type, type] | None = None


def _columns() -> tuple[type, type, type]:
    """Rich's bar and M/N columns, drawn only while a total is known (a spinner and the
    count otherwise); made on first use so that importing this module does not import
    rich."""
    global _COLUMNS
    if _COLUMNS is None:
        from datetime import timedelta

        from rich.progress import BarColumn, MofNCompleteColumn, ProgressColumn, Task
        from rich.text import Text

        class BarIfKnown(BarColumn):
            def render(self, task: Task) -> Any:
                return super().render(task) if task.total is not None else Text("")

        class CountIfKnown(MofNCompleteColumn):
            """M/N; with no total, the count alone once there is one."""

            def render(self, task: Task) -> Any:
                if task.total is not None:
                    return super().render(task)
                return Text(f"{int(task.completed):,}" if task.completed else "",
                            style="progress.download")
        class Elapsed(ProgressColumn):
            """The time since the command started (rich's own column counts from each
            task's start: a new step would start again from 0)."""

            def __init__(self, elapsed_s: Callable[[], float]) -> None:
                super().__init__()
                self.elapsed_s = elapsed_s

            def render(self, task: Task) -> Any:
                return Text(str(timedelta(seconds=int(self.elapsed_s()))),
                            style="progress.elapsed")
        _COLUMNS = (BarIfKnown, CountIfKnown, Elapsed)
    return _COLUMNS


class _Silent(Progress):
    """Takes every report, keeps and shows nothing (shared: it holds no state)."""

    def __init__(self) -> None:
        super().__init__("", plain=False, file=sys.stderr)
        self.terminal = False

    def phase(self, text: str, total: int | None = None) -> None:
        pass

    def status(self, text: str) -> None:
        pass

    __call__ = status

    def advance(self, steps: int = 1, text: str | None = None) -> None:
        pass

    def __enter__(self) -> Progress:
        return self


SILENT: Progress = _Silent()


def waiting(label: str, text: str, show_after_s: float = WAIT_SHOW_AFTER_S,
            plain: bool = True) -> Progress:
    """A spinner for one wait whose length is not known (an RPC that does the work): shown
    only once it has lasted `show_after_s`."""
    progress = Progress(label, show_after_s=show_after_s, plain=plain)
    progress.status(text)
    return progress


def beside_data(label: str, text: str) -> Progress:
    """A count for a command whose stdout is data (`stamp scan`, `entity ls`, `stream
    cat`): shown only on a terminal's stderr while stdout goes elsewhere (rows on the
    screen are their own progress, and a live line would tangle with them), never as plain
    lines (such a command's stderr may carry a contract: scan's continuation token)."""
    if is_terminal(sys.stdout):
        return SILENT
    progress = Progress(label, show_after_s=WAIT_SHOW_AFTER_S, plain=False)
    progress.status(text)
    return progress
