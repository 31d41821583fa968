"""Regenerate the Python gRPC code beside the .proto files in this folder.

`python -m common.proto.generate` (or `make proto`) writes it in place;
`python -m common.proto.generate --check` exits 1 when the committed code is stale. The proto
path is the repository root, so generated modules import each other as `common.proto.X_pb2`.

The public protocol (protocol/*.proto, issue 31) is generated here too, for the front end
that implements it, from its own folder as the proto path: its descriptors are named as the
SDK's copy of it names them (`frontend_v1.proto`), so the two can be loaded in one process.
Its gRPC module's import of its messages is pointed at common/proto.
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

PROTO_DIR = Path(__file__).resolve().parent
ROOT = PROTO_DIR.parent.parent
PUBLIC_DIR = ROOT / "protocol"


def generate(out_dir: Path) -> list[Path]:
    """Generate code for every .proto here into out_dir (mirroring common/proto); return it."""
    protos = sorted(PROTO_DIR.glob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    args = ["protoc", f"-I{ROOT}", f"-I{include}", f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}", f"--pyi_out={out_dir}"]
    args += [str(p.relative_to(ROOT)) for p in protos]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    generated = out_dir / "common" / "proto"
    _generate_public(include, generated)
    return sorted(generated.glob("*_pb2*"))


def _generate_public(include: Path, out_dir: Path) -> None:
    """The public protocol's code into `out_dir` (module docstring)."""
    protos = sorted(PUBLIC_DIR.glob("*.proto"))
    args = ["protoc", f"-I{PUBLIC_DIR}", f"-I{include}", f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}", f"--pyi_out={out_dir}"]
    if protoc.main(args + [p.name for p in protos]) != 0:
        raise SystemExit("protoc failed (protocol/)")
    for proto in protos:
        grpc_module = out_dir / f"{proto.stem}_pb2_grpc.py"
        text = grpc_module.read_text()
        grpc_module.write_text(text.replace(f"import {proto.stem}_pb2 as",
                                            f"from common.proto import {proto.stem}_pb2 as"))


def stale_files() -> list[str]:
    """Names of generated files that differ from what protoc makes now (or are missing)."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        stale = [f.name for f in fresh
                 if not (PROTO_DIR / f.name).exists() or not filecmp.cmp(
                     f, PROTO_DIR / f.name, shallow=False)]
        names = {f.name for f in fresh}
        stale += [f.name for f in PROTO_DIR.glob("*_pb2*") if f.name not in names]
        return stale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the code is stale")
    args = parser.parse_args()
    if args.check:
        stale = stale_files()
        if stale:
            print(f"stale generated code: {', '.join(stale)}; run 'make proto'", file=sys.stderr)
            raise SystemExit(1)
        return
    with tempfile.TemporaryDirectory() as tmp:
        for f in generate(Path(tmp)):
            (PROTO_DIR / f.name).write_bytes(f.read_bytes())
            print(f"wrote common/proto/{f.name}")


if __name__ == "__main__":
    main()
