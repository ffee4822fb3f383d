"""The compiler: trace, differentiate symbolically, partition, generate code, cache, report.

It sits above the eager core, the IR and :mod:`codegen`; ``symgrad`` imports it on first use of
``symgrad.compile``, ``value_and_grad`` or ``grad``.
"""
