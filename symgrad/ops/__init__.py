"""The op registry (one entry per rule-table overload) and the public op functions."""
