"""A lossy file system for power-cut tests (the LazyFS idea): a FUSE mount that passes every
operation through to a backing directory and remembers what was made durable (fsync'd file
bytes, fsync'd directory listings), so that a "power cut" can throw the rest away.

- `tree.LossyTree`: the bookkeeping and the rollback, on real files, no FUSE (unit-tested).
- `fs.LossyFS`: the FUSE operations in front of a tree.
- `python -m tools.lossyfs`: the daemon; `mount.LossyMount` / `mount.power_cut` drive it."""
