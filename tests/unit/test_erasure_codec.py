"""The RS codec (erasure/) against dumb references: reedsolo for parity, the data for decode.

Property tests are derandomized (the same examples every run, so CI is reproducible; on a
failure hypothesis prints the falsifying example). Small shapes are checked exhaustively:
every erasure pattern the code must survive.
"""

from __future__ import annotations

import array
import functools
import itertools
import sys
import threading

import numpy as np
import pytest
import reedsolo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.errors import InvalidArgument, StampError
from erasure import ReedSolomon, codec, gf256
from erasure.bench import bench_codec

PROPERTY = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


@functools.cache
def _reedsolo_codec(m: int) -> reedsolo.RSCodec:
    return reedsolo.RSCodec(m)


def reedsolo_parity(data: list[bytes], m: int) -> list[bytes]:
    """The reference: reedsolo's systematic encoding, column by column."""
    k, length = len(data), len(data[0])
    parity = [bytearray(length) for _ in range(m)]
    for column in range(length):
        codeword = _reedsolo_codec(m).encode(bytes(f[column] for f in data))
        for j in range(m):
            parity[j][column] = codeword[k + j]
    return [bytes(p) for p in parity]


def random_fragments(k: int, length: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, length, dtype=np.uint8).tobytes() for _ in range(k)]


@st.composite
def stripes(draw: st.DrawFn, k_max: int = 16, m_max: int = 10, length_max: int = 48):
    k = draw(st.integers(1, k_max))
    m = draw(st.integers(1, m_max))
    length = draw(st.integers(0, length_max))
    data = [draw(st.binary(min_size=length, max_size=length)) for _ in range(k)]
    return k, m, data


# --- the field ------------------------------------------------------------------------------


def test_field_tables_are_reedsolos() -> None:
    log, exp, field_charac = reedsolo.init_tables(prim=0x11D, generator=2, c_exp=8)
    assert field_charac == gf256.GROUP_ORDER
    assert list(exp) == gf256.EXP
    assert list(log)[1:] == gf256.LOG[1:]


def test_mul_matches_reedsolo_for_every_pair() -> None:
    reedsolo.init_tables()
    for a in range(256):
        row = [reedsolo.gf_mul(a, b) for b in range(256)]
        assert row == [gf256.mul(a, b) for b in range(256)]
        assert row == gf256.MUL_TABLE[a].tolist()


def test_every_nonzero_element_has_its_inverse() -> None:
    for a in range(1, 256):
        assert gf256.mul(a, gf256.inv(a)) == 1
    with pytest.raises(ZeroDivisionError):
        gf256.inv(0)


def test_generator_polynomial_is_reedsolos() -> None:
    for nsym in (1, 2, 3, 4, 16, 100):
        assert gf256.rs_generator_poly(nsym) == list(reedsolo.rs_generator_poly(nsym))


@given(st.integers(1, 12), st.integers(1, 8), st.data())
@PROPERTY
def test_invert_gives_the_inverse_of_any_k_generator_rows(k: int, m: int, data) -> None:
    rows = sorted(data.draw(st.permutations(range(k + m)))[:k])
    square = gf256.generator_matrix(k, m)[rows]
    inverse = gf256.invert(square)
    identity = np.eye(k, dtype=np.uint8)
    assert np.array_equal(gf256.mat_mul(inverse, square), identity)
    assert np.array_equal(gf256.mat_mul(square, inverse), identity)


def test_invert_refuses_a_singular_matrix() -> None:
    with pytest.raises(InvalidArgument, match="singular"):
        gf256.invert(np.array([[1, 2], [2, 4]], dtype=np.uint8))  # row 2 = 2·row 1
    with pytest.raises(InvalidArgument):
        gf256.invert(np.zeros((2, 3), dtype=np.uint8))


# --- encode: bit-identical to reedsolo ------------------------------------------------------


@given(stripes())
@PROPERTY
def test_parity_is_reedsolos_column_by_column(stripe) -> None:
    k, m, data = stripe
    assert ReedSolomon(k, m).encode(data) == reedsolo_parity(data, m)


@pytest.mark.parametrize(("k", "m"), [(6, 3), (1, 1), (254, 1), (1, 254), (250, 5), (128, 127)])
def test_parity_is_reedsolos_at_the_edges_of_the_field(k: int, m: int) -> None:
    data = random_fragments(k, 5, seed=k * 1000 + m)
    assert ReedSolomon(k, m).encode(data) == reedsolo_parity(data, m)


def test_parity_is_reedsolos_across_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tiny slices so that one short fragment spans many, with a partial last one.
    monkeypatch.setattr(codec, "SLICE_BYTES", 7)
    monkeypatch.setattr(codec, "SLICE_BYTES_MIN", 7)
    data = random_fragments(6, 7 * 5 + 3, seed=1)
    rs = ReedSolomon(6, 3)
    parity = rs.encode(data)
    assert parity == reedsolo_parity(data, 3)
    assert rs.decode({i: f for i, f in enumerate(data + parity) if i >= 3}) == data


def test_parity_is_reedsolos_when_buffers_exceed_what_threads_keep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Fresh buffers per call and a slice narrowed to fit the kept-scratch limit.
    monkeypatch.setattr(codec, "SCRATCH_KEPT_BYTES_MAX", 64)
    monkeypatch.setattr(codec, "SLICE_BYTES_MIN", 4)
    data = random_fragments(6, 101, seed=2)
    rs = ReedSolomon(6, 3)
    parity = rs.encode(data)
    assert parity == reedsolo_parity(data, 3)
    assert rs.decode({i: f for i, f in enumerate(data + parity) if i not in (0, 1, 5)}) == data


def test_parity_of_zeros_is_zeros_and_of_ones_is_the_matrix() -> None:
    rs = ReedSolomon(6, 3)
    assert rs.encode([bytes(4)] * 6) == [bytes(4)] * 3
    for i in range(6):
        unit = [b"\x01" if j == i else b"\x00" for j in range(6)]
        assert [p[0] for p in rs.encode(unit)] == rs.parity_matrix()[:, i].tolist()


# --- decode: any k of k+m rebuild the data --------------------------------------------------


@given(stripes(), st.data())
@PROPERTY
def test_decode_rebuilds_the_data_from_any_k_or_more(stripe, data_strategy) -> None:
    k, m, data = stripe
    rs = ReedSolomon(k, m)
    fragments = data + rs.encode(data)
    keep = data_strategy.draw(st.integers(k, k + m))
    indexes = data_strategy.draw(st.permutations(range(k + m)))[:keep]
    assert rs.decode({i: fragments[i] for i in indexes}) == data


@pytest.mark.parametrize(("k", "m"), [(4, 2), (6, 3), (1, 1), (1, 3), (3, 1), (2, 4), (5, 4)])
def test_decode_survives_every_erasure_pattern_of_up_to_m_losses(k: int, m: int) -> None:
    rs = ReedSolomon(k, m)
    data = random_fragments(k, 37, seed=k * 10 + m)  # 37: not a multiple of any word size.
    fragments = data + rs.encode(data)
    patterns = 0
    for lost_count in range(m + 1):
        for lost in itertools.combinations(range(k + m), lost_count):
            survivors = {i: f for i, f in enumerate(fragments) if i not in lost}
            assert rs.decode(survivors) == data, f"lost {lost}"
            patterns += 1
    assert patterns == sum(len(list(itertools.combinations(range(k + m), n))) for n in range(m + 1))


def test_decode_accepts_every_buffer_type_and_returns_bytes() -> None:
    rs = ReedSolomon(4, 2)
    data = random_fragments(4, 16, seed=3)
    parity = rs.encode(data)
    strided = np.zeros(32, dtype=np.uint8)
    strided[::2] = np.frombuffer(parity[1], dtype=np.uint8)
    survivors = {
        1: bytearray(data[1]),
        2: memoryview(data[2]),
        4: np.frombuffer(parity[0], dtype=np.uint8),
        5: strided[::2],  # a non-contiguous numpy view
    }
    decoded = rs.decode(survivors)
    assert decoded == data
    assert all(type(f) is bytes for f in decoded)
    assert rs.decode({0: data[0], 1: data[1], 2: data[2], 3: data[3]})[0] is data[0]


def test_encode_accepts_every_buffer_type_and_leaves_inputs_alone() -> None:
    rs = ReedSolomon(3, 2)
    data = random_fragments(3, 9, seed=4)
    inputs = [bytearray(data[0]), memoryview(data[1]), np.frombuffer(data[2], np.uint8).copy()]
    parity = rs.encode(inputs)
    assert parity == rs.encode(data) == reedsolo_parity(data, 2)
    assert all(type(p) is bytes for p in parity)
    assert [bytes(f) for f in inputs] == data
    assert rs.encode(tuple(data)) == parity
    # A memoryview of wider items is read as its bytes, in memory order.
    words = memoryview(array.array("H", bytes(range(10))))
    assert words.format == "H"
    assert rs.encode([words, bytes(10), bytes(10)]) == rs.encode(
        [bytes(range(10)), bytes(10), bytes(10)]
    )


def test_results_do_not_change_when_the_codec_is_used_again() -> None:
    rs = ReedSolomon(6, 3)
    first_data = random_fragments(6, 100, seed=5)
    first = rs.encode(first_data)
    rs.encode(random_fragments(6, 100, seed=6))
    rs.decode(dict(enumerate(random_fragments(6, 100, seed=7) + first)))
    assert first == reedsolo_parity(first_data, 3)


def test_threads_share_one_codec() -> None:
    rs = ReedSolomon(6, 3)
    jobs = [random_fragments(6, 1000 + 37 * i, seed=100 + i) for i in range(8)]
    expected = [rs.encode(job) for job in jobs]
    failures: list[int] = []

    def work(offset: int) -> None:
        for round_ in range(10):
            i = (offset + round_) % len(jobs)
            parity = rs.encode(jobs[i])
            survivors = {j: f for j, f in enumerate(jobs[i] + parity) if j not in (0, 2, 4)}
            if parity != expected[i] or rs.decode(survivors) != jobs[i]:
                failures.append(i)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_empty_fragments_are_a_valid_stripe() -> None:
    rs = ReedSolomon(6, 3)
    assert rs.encode([b""] * 6) == [b""] * 3
    assert rs.decode({i: b"" for i in range(3, 9)}) == [b""] * 6


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("k", "m"), [(0, 3), (6, 0), (-1, 3), (250, 6), (255, 1), (6.0, 3), ("6", 3), (True, 3)]
)
def test_constructor_refuses_bad_shapes(k, m) -> None:
    with pytest.raises(InvalidArgument):
        ReedSolomon(k, m)


def test_invalid_argument_is_a_stamp_error() -> None:
    assert issubclass(InvalidArgument, StampError)


@pytest.mark.parametrize(
    ("fragments", "message"),
    [
        ([b"ab"] * 5, "encodes 6 data fragments, got 5"),
        ([b"ab"] * 7, "encodes 6 data fragments, got 7"),
        ([b"ab"] * 5 + [b"abc"], "equal lengths"),
        (b"abcdef", "not one fragment"),
        (np.zeros((6, 4), dtype=np.uint8), "not one fragment"),
        (iter([b"ab"] * 6), "not one fragment"),
        ([b"ab"] * 5 + ["ab"], "bytes-like"),
        ([b"ab"] * 5 + [[1, 2]], "bytes-like"),
        ([b"ab"] * 5 + [np.zeros(2, dtype=np.uint16)], "1-D uint8"),
        ([b"ab"] * 5 + [np.zeros((1, 2), dtype=np.uint8)], "1-D uint8"),
        ([b"ab"] * 5 + [memoryview(b"abcd")[::2]], "C-contiguous"),
    ],
)
def test_encode_refuses_bad_input(fragments, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        ReedSolomon(6, 3).encode(fragments)


@pytest.mark.parametrize(
    ("fragments", "message"),
    [
        ({i: b"ab" for i in range(5)}, "needs 6 fragments"),
        ({}, "needs 6 fragments"),
        ({i: b"ab" for i in range(1, 10)}, r"in \[0, 9\)"),
        ({i - 1: b"ab" for i in range(6)}, r"in \[0, 9\)"),
        ({**{i: b"ab" for i in range(5)}, "5": b"ab"}, "must be an int"),
        ({**{i: b"ab" for i in range(5)}, 5.0: b"ab"}, "must be an int"),
        ({**{i: b"ab" for i in range(2, 7)}, True: b"ab"}, "must be an int"),
        ({**{i: b"ab" for i in range(5)}, 8: b"abc"}, "equal lengths"),
        ([b"ab"] * 6, "mapping"),
        ({**{i: b"ab" for i in range(5)}, 6: "ab"}, "bytes-like"),
    ],
)
def test_decode_refuses_bad_input(fragments, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        ReedSolomon(6, 3).decode(fragments)


def test_decode_accepts_numpy_integer_indexes() -> None:
    rs = ReedSolomon(2, 1)
    data = [b"xy", b"zw"]
    parity = rs.encode(data)
    assert rs.decode({np.int64(1): data[1], np.uint8(2): parity[0]}) == data


# --- the benchmark's shape (no timing is asserted) ------------------------------------------


def test_bench_rows_have_params_and_metrics() -> None:
    rows = bench_codec(k=4, m=2, stripe_bytes=4 * 1024, rounds=1)
    ours = [r for r in rows if r["params"]["impl"] == "ours"]
    assert {r["params"]["op"] for r in ours} == {"encode", "decode"}
    for row in rows:
        assert {"k", "m", "stripe_bytes", "impl", "op"} <= row["params"].keys()
    for row in ours:
        assert row["metrics"]["mb_per_s"] > 0 and row["metrics"]["seconds"] > 0
    zfec_rows = [r for r in rows if r["params"]["impl"] != "ours"]
    assert zfec_rows, "zfec rows (measured, or an error saying it is missing) must be present"
    for row in zfec_rows:
        assert "error" in row or row["metrics"]
    with pytest.raises(InvalidArgument):
        bench_codec(k=4, m=2, stripe_bytes=4 * 1024 + 1, rounds=1)


def test_bench_says_when_zfec_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "zfec", None)  # makes `import zfec` raise ImportError
    rows = bench_codec(k=4, m=2, stripe_bytes=4 * 1024, rounds=1)
    zfec_rows = [r for r in rows if r["params"]["impl"] != "ours"]
    assert [r["params"]["impl"] for r in zfec_rows] == ["zfec", "zfec"]
    assert all("not installed" in r["error"] and r["metrics"] == {} for r in zfec_rows)
