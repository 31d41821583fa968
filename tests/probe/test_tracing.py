"""Tracing across a real stamp (issue 31): started with STAMP_TRACE_FILE (what `stamp up
--trace` sets), one SDK append made by a traced client process is ONE trace, one tree by
parent ids whose only root is the SDK's call span: the front end's request under it, the
partition server's commit under that (its group-commit wait, the commit-log append and the
stream client's replicated append under it), the primary extent node's write under that, the
secondaries' writes under the primary's, and each one's journal group commit and fsync under
it. The trace context crosses the multiplexed streams in each request's `traceparent`;
`stamp trace` shows the tree by the append's request id."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from common import tracing
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
REQUEST_ID = "trace-probe-1"

# A client process of its own: its tracer provider is set up once, as an application's.
CLIENT = """
import sys
from common import rpc, tracing
from common.proto import partition_pb2, partition_pb2_grpc
from stampsdk import Client
assert tracing.start("sdk")
with Client.from_connection_string(sys.argv[1]) as client:
    client.append("traced-log", [b"one record"], token=sys.argv[2])
# A unary call within a trace: its context goes to the partition server in gRPC metadata.
with tracing.span("probe.status"), rpc.sync_channel(sys.argv[3], 1 << 20) as channel:
    partition_pb2_grpc.PartitionServerStub(channel).Status(partition_pb2.ServerStatusRequest(),
                                                           timeout=5)
tracing.flush()
"""


def _wait_until(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """`check()` once it is truthy, within `timeout_s` (spans go out in batches)."""
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        assert time.monotonic() < deadline, f"not within {timeout_s:g}s: {what}"
        time.sleep(0.05)
    return found


def _spans(path: Path) -> list[dict[str, Any]]:
    return list(tracing.read_spans(str(path))) if path.exists() else []


def _by_id(spans: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {span["span_id"]: span for span in spans}


def _whole(spans: list[dict[str, Any]]) -> bool:
    """Whether every span of the SDK append's trace has its parent among `spans`: each
    process exports its spans in its own batches, so a child can be written before its
    parent (an extent node's replica write before the primary's span it answers)."""
    roots = [s for s in spans if s["name"] == "stampsdk.append"]
    if not roots:
        return False
    trace = [s for s in spans if s["trace_id"] == roots[0]["trace_id"]]
    by_id = _by_id(trace)
    return all(s["parent_id"] is None or s["parent_id"] in by_id for s in trace)


def test_one_append_is_traced_hop_by_hop(stamp_factory: Callable[..., LocalStamp],
                                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    trace_file = tmp_path / "traces.jsonl"
    monkeypatch.setenv(tracing.FILE_ENV_VAR, str(trace_file))  # the processes inherit it
    stamp = stamp_factory(3, 1, lock_servers=1, partition_managers=1, partition_servers=1,
                          front_ends=1)
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, stamp.admin_connection_string_file.read_text().strip(),
         REQUEST_ID, stamp.address("ps-1")],
        cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr

    def all_there() -> list[dict[str, Any]] | None:
        spans = _spans(trace_file)
        names = {(s["service"], s["name"]) for s in spans}
        wanted = {("sdk", "stampsdk.append"), ("fe-1", "fe.request"), ("ps-1", "ps.commit"),
                  ("ps-1", "stream.append"), ("ps-1", "/stamp.partition.PartitionServer/Status")}
        if wanted <= names and len([s for s in spans
                                    if s["name"] == "en.journal.fsync"]) == 3 \
                and _whole(spans):
            return spans
        return None
    spans = _wait_until(all_there, 15, "spans of the SDK, fe-1, ps-1 and an extent node, "
                        "the SDK's trace whole")

    tagged = {s["service"]: s for s in spans
              if s["attributes"].get(tracing.REQUEST_ID) == REQUEST_ID}
    assert set(tagged) == {"sdk", "fe-1", "ps-1"}
    sdk = tagged["sdk"]
    assert sdk["name"] == "stampsdk.append" and sdk["kind"] == "CLIENT"
    assert tagged["fe-1"]["attributes"]["stamp.op"] == "append"

    # ONE trace, ONE tree by parent ids, and its only root is the SDK's call span.
    trace = [s for s in spans if s["trace_id"] == sdk["trace_id"]]
    by_id = _by_id(trace)
    assert [s for s in trace if s["parent_id"] not in by_id] == [sdk]
    assert {s["span_id"] for s in tagged.values()} <= set(by_id)

    def child(parent: dict[str, Any], name: str) -> dict[str, Any]:
        (found,) = [s for s in trace if s["parent_id"] == parent["span_id"]
                    and s["name"] == name]
        return found

    # SDK -> front end -> partition server, over the Call streams.
    front_end = child(sdk, "fe.request")
    commit = child(front_end, "ps.commit")
    assert (front_end["service"], commit["service"]) == ("fe-1", "ps-1")
    assert commit is tagged["ps-1"] and front_end is tagged["fe-1"]
    # In the partition server: its wait for the group commit, the block's commit-log append
    # and the stream client's append under that.
    wait = child(commit, "ps.group_commit_wait")
    log_append = child(commit, "ps.commit_log_append")
    stream_append = child(log_append, "stream.append")
    assert sdk["start_ns"] <= front_end["start_ns"] <= commit["start_ns"] <= wait["end_ns"] \
        <= log_append["start_ns"] <= stream_append["start_ns"] <= stream_append["end_ns"] \
        <= commit["end_ns"] <= front_end["end_ns"] <= sdk["end_ns"]
    assert stream_append["attributes"]["replicas"] == 3

    # Over the append stream to the primary, and its forward streams to the secondaries.
    primary = child(stream_append, "en.append")
    secondaries = [s for s in trace if s["parent_id"] == primary["span_id"]
                   and s["name"] == "en.replica_write"]
    writes = [primary, *secondaries]
    assert {s["service"] for s in writes} == {"en-1", "en-2", "en-3"}
    extent, offset = stream_append["attributes"]["extent"], stream_append["attributes"]["offset"]
    for write in writes:
        assert write["attributes"]["extent"] == extent
        assert write["attributes"]["offset"] <= offset < write["attributes"]["end"]
    assert stream_append["start_ns"] <= primary["start_ns"] <= primary["end_ns"] \
        <= stream_append["end_ns"]
    # Each write's journal group commit and its fsync under it, down to every extent node.
    for write in writes:
        journal = child(write, "en.journal")
        fsync = child(journal, "en.journal.fsync")
        assert journal["service"] == fsync["service"] == write["service"]
        assert write["start_ns"] <= journal["start_ns"] <= fsync["start_ns"] \
            <= fsync["end_ns"] == journal["end_ns"] <= write["end_ns"]
    # Only traced writes leave journal spans (not the stamp's own, e.g. partition loads'),
    # and all of them are this request's.
    assert len([s for s in spans if s["name"] == "en.journal"]) == 3
    assert len([s for s in trace if s["name"] == "en.journal.fsync"]) == 3

    # A unary call made within a trace continues it in the server (the official gRPC
    # instrumentation, context in metadata); calls made outside any span (the background
    # loops' heartbeats and renewals) are not traced at all.
    status = "/stamp.partition.PartitionServer/Status"
    by_id_all = _by_id(spans)
    (served,) = [s for s in spans if s["name"] == status and s["service"] == "ps-1"]
    sent = by_id_all[served["parent_id"]]
    assert sent["name"] == status and sent["service"] == "sdk" and sent["kind"] == "CLIENT"
    assert by_id_all[sent["parent_id"]]["name"] == "probe.status"
    assert served["trace_id"] == sent["trace_id"] and served["kind"] == "SERVER"
    assert all(s["parent_id"] for s in spans if s["name"].startswith("/stamp."))

    # `stamp trace` shows the request's one trace, hop by hop. (Run here, the CLI would
    # turn tracing on in this process for the tests after this one, were the variable set.)
    monkeypatch.delenv(tracing.FILE_ENV_VAR)
    from tools import cli
    with pytest.raises(SystemExit) as exit_:
        cli.main(["trace", REQUEST_ID, "--file", str(trace_file)])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and not tracing.enabled
    assert out.count("trace ") == 1 and f"trace {sdk['trace_id']}" in out
    for line in ("stampsdk.append", "fe.request", "ps.commit", "  ps.group_commit_wait",
                 "  ps.commit_log_append", "    stream.append", "en.append",
                 "en.replica_write", "  en.journal", "    en.journal.fsync"):
        assert line in out
