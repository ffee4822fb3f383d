"""Code generation: sympy printers now; partitioning, fused emitters and the Numba backend next."""
