"""Regenerate the Python gRPC code beside the .proto files in this folder.

`python -m common.proto.generate` (or `make proto`) writes it in place;
`python -m common.proto.generate --check` exits 1 when the committed code is stale. The proto
path is the repository root, so generated modules import each other as `common.proto.X_pb2`.

The public protocol (protocol/*.proto, issue 31) is generated here too, for the front end
that implements it, from its own folder as the proto path: its descriptors are named as the
SDK's copy of it names them (`frontend_v1.proto`), so the two can be loaded in one process.
Its gRPC module's import of its messages is pointed at common/proto.

`python -m common.proto.generate --sdk` (`make sdk-proto`) writes the SDK's own copy of the
public protocol's code into sdk/src/stampsdk/_proto instead, with its gRPC module's import
pointed there. It must run with grpcio-tools at most SDK_TOOLS_MAX (the Makefile runs it on
Python 3.9): newer gencode demands a protobuf runtime that Python 3.9 does not have. Whether
that copy is stale is tested by comparing its descriptor with the server's
(tests/unit/test_sdk_imports.py), as both come from the same .proto.
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.metadata
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

PROTO_DIR = Path(__file__).resolve().parent
ROOT = PROTO_DIR.parent.parent
PUBLIC_DIR = ROOT / "protocol"
SDK_PROTO_DIR = ROOT / "sdk" / "src" / "stampsdk" / "_proto"
SDK_TOOLS_MAX = (1, 80)  # grpcio-tools 1.80: protobuf 6 gencode, which runs on 6 and 7


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


def _generate_public(include: Path, out_dir: Path, package: str = "common.proto") -> None:
    """The public protocol's code into `out_dir`, its gRPC modules importing their messages
    from `package` (module docstring)."""
    protos = sorted(PUBLIC_DIR.glob("*.proto"))
    args = ["protoc", f"-I{PUBLIC_DIR}", f"-I{include}", f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}", f"--pyi_out={out_dir}"]
    if protoc.main(args + [p.name for p in protos]) != 0:
        raise SystemExit("protoc failed (protocol/)")
    for proto in protos:
        grpc_module = out_dir / f"{proto.stem}_pb2_grpc.py"
        text = grpc_module.read_text()
        grpc_module.write_text(text.replace(f"import {proto.stem}_pb2 as",
                                            f"from {package} import {proto.stem}_pb2 as"))


def generate_sdk() -> None:
    """The SDK's copy of the public protocol's code, in place (module docstring)."""
    version = importlib.metadata.version("grpcio-tools")
    if tuple(int(part) for part in version.split(".")[:2]) > SDK_TOOLS_MAX:
        raise SystemExit(f"grpcio-tools {version} makes gencode too new for the SDK's "
                         f"oldest protobuf; use {'.'.join(map(str, SDK_TOOLS_MAX))} "
                         f"(`make sdk-proto`)")
    include = Path(protoc.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        _generate_public(include, Path(tmp), "stampsdk._proto")
        for f in sorted(Path(tmp).glob("*_pb2*")):
            (SDK_PROTO_DIR / f.name).write_bytes(f.read_bytes())
            print(f"wrote {(SDK_PROTO_DIR / f.name).relative_to(ROOT)}")


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
    parser.add_argument("--sdk", action="store_true",
                        help="write the SDK's copy of the public protocol's code instead")
    args = parser.parse_args()
    if args.sdk:
        generate_sdk()
        return
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
