"""Linear algebra: einsum, tensordot, numpy.linalg."""
