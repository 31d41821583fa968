"""Arithmetic in GF(2^8) and the matrices of the Reed–Solomon code (§2 "Erasure coding").

Contract: the field is exactly reedsolo's default one — primitive polynomial 0x11d, generator
(alpha) 2 — and `systematic_parity_matrix(k, m)` is exactly the linear map that reedsolo's
`RSCodec(m).encode` (fcr 0, generator polynomial prod_{i<m} (x - 2^i)) applies to a k-byte
message to make its m parity bytes. Stored parity depends on that choice, so it must never
change: a coded extent written today is decoded with these tables in ten years.

Everything here is pure and small (tables, scalars, k×k matrices); the fast per-byte work over
whole fragments lives in `erasure.codec`.
"""

from __future__ import annotations

import numpy as np

from common.errors import InvalidArgument

PRIMITIVE_POLY = 0x11D
GENERATOR = 2
FIELD_SIZE = 256
# Nonzero elements form a cyclic group of this order; a codeword is at most this long.
GROUP_ORDER = FIELD_SIZE - 1


def _build_tables() -> tuple[list[int], list[int]]:
    # EXP is doubled (510 entries) so that EXP[log a + log b] needs no "mod 255", as in reedsolo.
    exp = [0] * (2 * GROUP_ORDER)
    log = [0] * FIELD_SIZE  # LOG[0] is undefined and never read.
    x = 1
    for i in range(GROUP_ORDER):
        exp[i] = x
        log[x] = i
        x <<= 1  # times the generator 2 ...
        if x & 0x100:
            x ^= PRIMITIVE_POLY  # ... reduced modulo the primitive polynomial.
    for i in range(GROUP_ORDER, 2 * GROUP_ORDER):
        exp[i] = exp[i - GROUP_ORDER]
    return exp, log


EXP, LOG = _build_tables()


def mul(a: int, b: int) -> int:
    """The product a·b in GF(256)."""
    if a == 0 or b == 0:
        return 0
    return EXP[LOG[a] + LOG[b]]


def inv(a: int) -> int:
    """The multiplicative inverse of a nonzero a."""
    if a == 0:
        raise ZeroDivisionError("0 has no inverse in GF(256)")
    return EXP[GROUP_ORDER - LOG[a]]


def pow_(a: int, n: int) -> int:
    """a to the power n (n >= 0); 0^0 is 1."""
    if n == 0:
        return 1
    if a == 0:
        return 0
    return EXP[(LOG[a] * n) % GROUP_ORDER]


def _mul_table() -> np.ndarray:
    logs = np.array(LOG, dtype=np.int64)
    exps = np.array(EXP, dtype=np.uint8)
    table = exps[logs[:, None] + logs[None, :]]
    table[0, :] = 0
    table[:, 0] = 0
    return table


# MUL_TABLE[a, b] == mul(a, b); 64 KiB, used to vectorize row operations on small matrices.
MUL_TABLE: np.ndarray = _mul_table()
MUL_TABLE.flags.writeable = False


def poly_mul(p: list[int], q: list[int]) -> list[int]:
    """Product of two polynomials given highest-degree coefficient first (reedsolo's order)."""
    out = [0] * (len(p) + len(q) - 1)
    for i, a in enumerate(p):
        for j, b in enumerate(q):
            out[i + j] ^= mul(a, b)
    return out


def rs_generator_poly(nsym: int) -> list[int]:
    """reedsolo's `rs_generator_poly(nsym, fcr=0, generator=2)`: prod_{i<nsym} (x - 2^i)."""
    g = [1]
    for i in range(nsym):
        g = poly_mul(g, [1, pow_(GENERATOR, i)])
    return g


def check_shape(k: int, m: int) -> None:
    """Raise InvalidArgument unless RS(k, m) is a code this module can build."""
    for name, value in (("k", k), ("m", m)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgument(f"{name} must be an int, got {value!r}")
        if value < 1:
            raise InvalidArgument(f"{name} must be >= 1, got {value}")
    if k + m > GROUP_ORDER:
        raise InvalidArgument(f"k + m must be <= {GROUP_ORDER} in GF(256), got {k} + {m}")


def systematic_parity_matrix(k: int, m: int) -> np.ndarray:
    """The m×k matrix P with parity[j] = sum_i P[j, i]·message[i] (all in GF(256)).

    reedsolo's parity of a message M (M[0] the highest-degree coefficient) is the remainder
    of M(x)·x^m modulo the generator polynomial g, highest-degree coefficient first. It is
    linear in M, so column i of P is the remainder of x^(m + k-1-i) mod g: x^m mod g is g
    without its leading 1 (g is monic and -1 = 1), and each next power is x times the last,
    reduced by adding back g's tail times the coefficient that overflowed into x^m.
    """
    check_shape(k, m)
    tail = np.array(rs_generator_poly(m)[1:], dtype=np.uint8)
    matrix = np.zeros((m, k), dtype=np.uint8)
    remainder = tail.copy()  # x^m mod g, coefficients of x^(m-1) .. x^0.
    for i in range(k - 1, -1, -1):
        matrix[:, i] = remainder
        overflow = int(remainder[0])
        remainder = np.append(remainder[1:], np.uint8(0)) ^ MUL_TABLE[overflow, tail]
    return matrix


def generator_matrix(k: int, m: int) -> np.ndarray:
    """The (k+m)×k systematic generator: identity on top (fragment i is data i), P below."""
    return np.vstack([np.eye(k, dtype=np.uint8), systematic_parity_matrix(k, m)])


def invert(matrix: np.ndarray) -> np.ndarray:
    """The inverse of a square matrix over GF(256), by Gauss–Jordan elimination.

    Raises InvalidArgument if the matrix is singular (for RS this means a caller asked to
    decode from rows that are not independent, which an MDS code never produces).
    """
    n, n2 = matrix.shape
    if n != n2:
        raise InvalidArgument(f"cannot invert a {n}×{n2} matrix")
    # Augmented [A | I], reduced in place to [I | A^-1]; each step is a whole-matrix numpy op.
    work = np.hstack([matrix.astype(np.uint8), np.eye(n, dtype=np.uint8)])
    for col in range(n):
        nonzero = np.flatnonzero(work[col:, col])
        if nonzero.size == 0:
            raise InvalidArgument("matrix is singular over GF(256)")
        pivot = col + int(nonzero[0])
        if pivot != col:
            work[[col, pivot]] = work[[pivot, col]]
        work[col] = MUL_TABLE[inv(int(work[col, col])), work[col]]
        factors = work[:, col].copy()
        factors[col] = 0
        # Row r -= factors[r]·pivot row, for every row at once (subtraction is XOR).
        work ^= MUL_TABLE[factors[:, None], work[col][None, :]]
    return work[:, n:].copy()


def mat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Matrix product over GF(256) (small matrices only: it builds an a×b×inner cube)."""
    products = MUL_TABLE[a[:, :, None], b[None, :, :]]
    return np.bitwise_xor.reduce(products, axis=1).astype(np.uint8)
