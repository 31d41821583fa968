"""Helpers shared by more than one test module (STYLE.md: "A helper with a second caller moves
out of the test module into tests/support/").

The rule, checked by tests/unit/test_support_imports.py: a test module imports what it shares
with others from tests/support (or takes a fixture from tests/conftest.py), never from another
test_*.py module, so that collecting one test module never imports, and never runs the
module-level code of, another. A helper used by one module only stays in that module.

Each module here is named for what it owns:
- waiting.py: `wait_for` (async) and `wait_until` (sync), the only waits on a condition.
- stamps.py: local stamps as a whole (`StampFactory`, `partition_stamp`, `owner_of`) and
  their processes' logs (`log_says`, `log_of`).
- streams.py: the stream layer: an in-memory `FakeStream`, a stream client for a stamp
  (`client_for`, `leader_name`, `converged_digests`) and loads that append to streams.
- steady_appends.py: paced appenders that record when each append was acknowledged.
- extent_nodes.py, extent_store.py, erasure.py: extent nodes as processes, one node's
  store in a directory, erasure-coded extents.
- stream_manager.py: the stream manager's state and leader on plain data (no processes).
- partitions.py, runs.py: the partition layer: a serving partition on a FakeStream,
  operations, the reference table, sorted runs.
- locks.py: the lock service: clients, convergence, a linearizability checker and its load.
- throttle.py, scan_reference.py: the front end's throttle, a reference front end for scans.
"""
