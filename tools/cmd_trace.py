"""`stamp trace REQUEST_ID`: where one request's time went, hop by hop (issue 31).

Reads the spans a traced stamp wrote (`stamp up --trace [FILE]`: common/tracing.py's JSON
lines, one span a line, every process appending to one file), groups them by trace id, and
prints each trace holding a span with that request id (`stamp.request_id`: the SDK's call
span, a front end's "fe.request", a partition server's "ps.commit") as a tree built from
parent ids: each span's process, name, start offset from the request's first span, and
duration. Each request carries its trace context down every hop (common/tracing.py), so a
request traced end to end is ONE trace whose root is the SDK's call span.

Fallback, for spans whose parent is not in the file (a hop of a build that carried no
trace context, or a process whose last batch of spans was lost): such a span is the root of
a trace of its own, shown when it carries the request id (a front end's or partition
server's span) or when it is an extent node's write ("en.append", "en.replica_write") of
bytes the request's "stream.append" placed (joined by extent and offset).

The tree building (`request_traces`) is a plain function of the spans, tested on its own.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.errors import NotFound

TRACE_FILE_NAME = "traces.jsonl"  # in the data directory, unless --trace names another
REQUEST_ID = "stamp.request_id"  # common/tracing.REQUEST_ID, without importing it here


def default_file(data_dir: str) -> str:
    """Where `stamp up --trace` writes without a FILE, and `stamp trace` reads by default
    ($STAMP_TRACE_FILE if set)."""
    return os.environ.get("STAMP_TRACE_FILE") or str(Path(data_dir) / TRACE_FILE_NAME)


def register(commands: Any) -> None:
    trace = commands.add_parser(
        "trace", help="show where one request's time went, hop by hop",
        description="Print the spans of the request with REQUEST_ID (its token: the SDK "
                    "puts it on its call span as stamp.request_id) from the trace file of a "
                    "stamp started with 'stamp up --trace', as a tree: process, span, start "
                    "offset and duration.")
    trace.add_argument("request_id", metavar="REQUEST_ID")
    trace.add_argument("--file", help="the trace file (default: $STAMP_TRACE_FILE, else "
                                      f"DATA_DIR/{TRACE_FILE_NAME})")
    trace.set_defaults(handler=cmd_trace)


@dataclass
class Node:
    span: dict[str, Any]
    children: list[Node] = field(default_factory=list)


@dataclass
class Trace:
    trace_id: str
    start_ns: int
    roots: list[Node]

    def rows(self) -> list[tuple[int, dict[str, Any]]]:
        """(depth, span) in tree order, children by start time."""
        out: list[tuple[int, dict[str, Any]]] = []

        def walk(node: Node, depth: int) -> None:
            out.append((depth, node.span))
            for child in node.children:
                walk(child, depth + 1)
        for root in self.roots:
            walk(root, 0)
        return out


def request_traces(spans: Iterable[dict[str, Any]], request_id: str) -> list[Trace]:
    """Every trace with a span whose request id is `request_id`, and every trace rooted in
    an extent node's write of its appends without a parent in the file (module docstring),
    each as a tree by parent ids (a span whose parent is not in the file is a root), in
    order of start. Empty if no span has that id."""
    by_trace: dict[str, list[dict[str, Any]]] = {}
    span_ids: set[str] = set()
    wanted: set[str] = set()
    for span in spans:
        by_trace.setdefault(span["trace_id"], []).append(span)
        span_ids.add(span["span_id"])
        if (span.get("attributes") or {}).get(REQUEST_ID) == request_id:
            wanted.add(span["trace_id"])
    appended = [(a["extent"], a["offset"]) for trace_id in wanted
                for a in (s.get("attributes") or {} for s in by_trace[trace_id])
                if "extent" in a and "offset" in a]
    if appended:  # the fallback join (module docstring)
        wanted |= {trace_id for trace_id, found in by_trace.items()
                   if trace_id not in wanted and any(
                       s.get("parent_id") not in span_ids and _writes_of(s, appended)
                       for s in found)}
    traces = [_tree(trace_id, by_trace[trace_id]) for trace_id in wanted]
    return sorted(traces, key=lambda t: t.start_ns)


def _writes_of(span: dict[str, Any], appended: list[tuple[int, int]]) -> bool:
    """Whether `span` is an extent node's write ("en.append" at the primary,
    "en.replica_write" at a secondary: extent, offset, end) holding one of the appends
    (extent, offset) of the stream client's "stream.append" spans."""
    found = span.get("attributes") or {}
    if "end" not in found:
        return False
    return any(found.get("extent") == extent and found["offset"] <= offset < found["end"]
               for extent, offset in appended)


def _tree(trace_id: str, spans: list[dict[str, Any]]) -> Trace:
    nodes = {span["span_id"]: Node(span) for span in spans}
    roots: list[Node] = []
    for node in nodes.values():
        parent = nodes.get(node.span.get("parent_id") or "")
        (parent.children if parent is not None and parent is not node else roots).append(node)
    for node in nodes.values():
        node.children.sort(key=lambda n: n.span["start_ns"])
    roots.sort(key=lambda n: n.span["start_ns"])
    return Trace(trace_id, min(span["start_ns"] for span in spans), roots)


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


def trace_rows(trace: Trace, origin_ns: int | None = None
               ) -> list[tuple[str, str, str, str]]:
    """The printed rows of one trace: span (indented by depth), process, start in ms after
    `origin_ns` (default: the trace's first span), duration in ms."""
    origin = trace.start_ns if origin_ns is None else origin_ns
    return [("  " * depth + span["name"], span.get("service", ""),
             _ms(span["start_ns"] - origin), _ms(span["end_ns"] - span["start_ns"]))
            for depth, span in trace.rows()]


def cmd_trace(args: argparse.Namespace) -> int:
    from common import tracing
    from tools import tables

    path = args.file or default_file(args.data_dir)
    if not Path(path).is_file():
        raise NotFound(f"no trace file {path}: start the stamp with 'stamp up --trace' "
                       f"(or name the file with --file)")
    traces = request_traces(tracing.read_spans(path), args.request_id)
    if not traces:
        raise NotFound(f"no span with request id {args.request_id!r} in {path} (spans are "
                       f"written in batches: a request of the last second may not be there "
                       f"yet)")
    # One time line for all of them (the processes of a local stamp share one clock): a
    # request whose hops did not all carry its context is several traces (module docstring).
    origin = traces[0].start_ns
    for trace in traces:
        tables.print_table(["span", "process", "start ms", "ms"], trace_rows(trace, origin),
                           title=f"trace {trace.trace_id}", right=["start ms", "ms"])
    return 0
