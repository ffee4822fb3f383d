"""The fuzzing profile shared by the fuzzers: the default (CI) profile draws a few derandomized examples
without shrinking (a failure prints its whole case; shrinking would recompile kernels);
``SYMGRAD_FUZZ=long`` draws ``SYMGRAD_FUZZ_EXAMPLES`` (default 300) random ones, shrinks failures and
marks the tests ``slow``.

``SYMGRAD_FUZZ_DTYPE=float64`` (or ``float32``) restricts the fuzzers that draw a float dtype to that one,
so that a long run can be given per dtype; ``SYMGRAD_FUZZ_REPORT=file.json`` writes how many programs each
fuzzer ran, per dtype, after every program (a run stopped by a time limit still reports)."""

import json
import os
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

LONG = os.environ.get("SYMGRAD_FUZZ", "") == "long"
N_LONG = int(os.environ.get("SYMGRAD_FUZZ_EXAMPLES", "300"))
ONLY_DTYPE = os.environ.get("SYMGRAD_FUZZ_DTYPE", "")
BASE = dict(deadline=None, derandomize=not LONG, database=None, print_blob=True,
            phases=[Phase.explicit, Phase.generate] + ([Phase.shrink] if LONG else []),
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])

# fuzzer name -> dtype -> programs run (the main fuzzer adds its own per-dtype statistics)
COUNTS: dict = defaultdict(lambda: defaultdict(int))
EXTRA: dict = {}


def examples(default: int) -> settings:
    """``default`` examples in CI, ``N_LONG`` under the long profile."""
    return settings(max_examples=N_LONG if LONG else default, **BASE)


def slow_when_long(test):
    return pytest.mark.slow(test) if LONG else test


def dtype_names(*weighted: str) -> st.SearchStrategy:
    """A strategy over float dtype names (repeat a name to weight it), restricted by ``SYMGRAD_FUZZ_DTYPE``."""
    names = [n for n in weighted if not ONLY_DTYPE or n == ONLY_DTYPE] or [ONLY_DTYPE]
    return st.sampled_from(names)


def runs_dtype(name: str) -> bool:
    """Whether a fuzzer fixed to the float dtype ``name`` should run under ``SYMGRAD_FUZZ_DTYPE``."""
    return not ONLY_DTYPE or ONLY_DTYPE == name


def record(fuzzer: str, dtype_name: str) -> None:
    """Count one program of ``fuzzer`` in ``dtype_name`` and rewrite the report."""
    COUNTS[fuzzer][dtype_name] += 1
    write_report()


def write_report() -> None:
    path = os.environ.get("SYMGRAD_FUZZ_REPORT")
    if path:
        with open(path + ".part", "w") as f:
            json.dump({"profile": "long" if LONG else "default", "programs": COUNTS, **EXTRA}, f, indent=1)
        os.replace(path + ".part", path)
