"""The generated gRPC code matches the .proto files (regenerate with `make proto`)."""

from common.proto.generate import stale_files


def test_generated_code_is_fresh() -> None:
    assert stale_files() == [], "stale generated code: run 'make proto'"
