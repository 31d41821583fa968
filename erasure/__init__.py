"""Erasure coding of sealed extents (§2): the Reed–Solomon codec and its benchmark."""

from erasure.codec import ReedSolomon

__all__ = ["ReedSolomon"]
