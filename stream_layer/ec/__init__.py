"""Erasure-coded extents (§2 "Erasure coding"): the fragment layout, conversion of a sealed
extent, coded reads and fragment rebuilds. The codec itself is `erasure.ReedSolomon`."""
