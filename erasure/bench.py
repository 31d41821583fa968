"""Throughput of the RS codec against zfec (C), on one stripe: `stamp bench ec`.

Contract: `bench_codec` returns rows `{"params": {...}, "metrics": {...}}`, one per
(impl, op) with impl in {"ours", "zfec"} and op in {"encode", "decode"}, then one per op with
impl "ours/zfec" whose metric `ratio` is ours' median throughput over zfec's (> 1 means we are
faster). Throughput counts the stripe's data bytes (k fragments) per second, MB = 10^6 bytes.
Decode rebuilds the first min(k, m) data fragments from the rest (the worst case: as many data
fragments lost as the code allows). Both implementations are timed interleaved, round by
round, in this process, so a busy machine slows both alike.

zfec is a benchmark-only dependency, imported lazily: when it is missing, its rows carry an
`error` saying so, there are no ratio rows, and ours are still measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from common.errors import InvalidArgument
from erasure.codec import ReedSolomon

MiB = 1024 * 1024
ROUNDS_DEFAULT = 15
# Columns checked against reedsolo itself (pure Python: ~1 MB/s, so only a sample).
REEDSOLO_COLUMNS_CHECKED = 16
ZFEC_MISSING = "zfec is not installed (benchmark-only dependency): pip install zfec"


def _time_once(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _check_against_reedsolo(data: list[bytes], parity: list[bytes], m: int) -> None:
    import reedsolo

    codec = reedsolo.RSCodec(m)
    length = len(data[0])
    for column in np.linspace(0, length - 1, REEDSOLO_COLUMNS_CHECKED, dtype=int):
        message = bytes(fragment[column] for fragment in data)
        expected = bytes(codec.encode(message)[len(message) :])
        got = bytes(fragment[column] for fragment in parity)
        if got != expected:
            raise AssertionError(f"parity differs from reedsolo at column {column}")


def bench_codec(
    k: int = 6,
    m: int = 3,
    stripe_bytes: int = 6 * MiB,
    rounds: int = ROUNDS_DEFAULT,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Measure encode and decode of one `stripe_bytes` stripe, ours and zfec's; see module."""
    codec = ReedSolomon(k, m)  # validates k and m first
    if stripe_bytes <= 0 or stripe_bytes % k:
        raise InvalidArgument(f"stripe_bytes must be a positive multiple of k={k}")
    if rounds < 1:
        raise InvalidArgument("rounds must be >= 1")
    fragment_bytes = stripe_bytes // k
    rng = np.random.default_rng(seed)
    data = [rng.integers(0, 256, fragment_bytes, dtype=np.uint8).tobytes() for _ in range(k)]
    lost = list(range(min(k, m)))

    parity = codec.encode(data)
    _check_against_reedsolo(data, parity, m)
    survivors = {i: f for i, f in enumerate(data + parity) if i not in lost}
    survivors = dict(list(survivors.items())[:k])
    if codec.decode(survivors) != data:
        raise AssertionError("our decode did not rebuild the data")
    ops: dict[tuple[str, str], Callable[[], object]] = {
        ("ours", "encode"): lambda: codec.encode(data),
        ("ours", "decode"): lambda: codec.decode(survivors),
    }

    zfec_error = None
    try:
        import zfec
    except ImportError:
        zfec_error = ZFEC_MISSING
    else:
        encoder = zfec.Encoder(k, k + m)
        decoder = zfec.Decoder(k, k + m)
        parity_nums = list(range(k, k + m))
        zfec_parity = encoder.encode(data, parity_nums)
        zfec_nums = sorted(survivors)
        zfec_blocks = [(data + zfec_parity)[i] for i in zfec_nums]
        if list(decoder.decode(zfec_blocks, zfec_nums)) != data:
            raise AssertionError("zfec's decode did not rebuild the data")
        ops[("zfec", "encode")] = lambda: encoder.encode(data, parity_nums)
        ops[("zfec", "decode")] = lambda: decoder.decode(zfec_blocks, zfec_nums)

    times: dict[tuple[str, str], list[float]] = {key: [] for key in ops}
    for fn in ops.values():  # warm-up: caches, allocator, decode program compile
        fn()
    for _ in range(rounds):
        for key, fn in ops.items():
            times[key].append(_time_once(fn))

    base = {"k": k, "m": m, "stripe_bytes": stripe_bytes}
    params = {
        "encode": dict(base, lost_data_fragments=0),
        "decode": dict(base, lost_data_fragments=len(lost)),
    }
    rows: list[dict[str, Any]] = []
    median_mb_per_s: dict[tuple[str, str], float] = {}
    for (impl, op), samples in times.items():
        median_s = max(statistics.median(samples), 1e-9)  # a clock tick, never 0
        median_mb_per_s[(impl, op)] = stripe_bytes / median_s / 1e6
        metrics = {
            "mb_per_s": round(median_mb_per_s[(impl, op)], 1),
            "best_mb_per_s": round(stripe_bytes / max(min(samples), 1e-9) / 1e6, 1),
            "seconds": round(median_s, 6),
        }
        rows.append(
            {"params": dict(params[op], impl=impl, op=op, rounds=rounds), "metrics": metrics}
        )
    for op in ("encode", "decode"):
        if zfec_error is not None:
            rows.append(
                {"params": dict(params[op], impl="zfec", op=op), "metrics": {}, "error": zfec_error}
            )
            continue
        ratio = median_mb_per_s[("ours", op)] / median_mb_per_s[("zfec", op)]
        rows.append(
            {
                "params": dict(params[op], impl="ours/zfec", op=op),
                "metrics": {"ratio": round(ratio, 3)},
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="RS codec throughput, ours vs zfec")
    parser.add_argument("--k", type=int, default=6)
    parser.add_argument("--m", type=int, default=3)
    parser.add_argument("--stripe-bytes", type=int, default=6 * MiB)
    parser.add_argument("--rounds", type=int, default=ROUNDS_DEFAULT)
    args = parser.parse_args(argv)
    results = bench_codec(args.k, args.m, args.stripe_bytes, args.rounds)
    print(json.dumps({"bench": "ec", "results": results}, indent=2))


if __name__ == "__main__":
    main()
