"""Elementwise ufuncs (numpy and scipy.special) and rounding."""
