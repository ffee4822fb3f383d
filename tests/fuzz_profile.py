"""The fuzzing profile shared by the edge and mixed-dtype fuzzers: the default (CI) profile draws a
few derandomized examples without shrinking (a failure prints its whole case; shrinking would
recompile kernels); ``SYMGRAD_FUZZ=long`` draws ``SYMGRAD_FUZZ_EXAMPLES`` (default 300) random ones,
shrinks failures and marks the tests ``slow``."""

import os

import pytest
from hypothesis import HealthCheck, Phase, settings

LONG = os.environ.get("SYMGRAD_FUZZ", "") == "long"
N_LONG = int(os.environ.get("SYMGRAD_FUZZ_EXAMPLES", "300"))
BASE = dict(deadline=None, derandomize=not LONG, database=None, print_blob=True,
            phases=[Phase.explicit, Phase.generate] + ([Phase.shrink] if LONG else []),
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])


def examples(default: int) -> settings:
    """``default`` examples in CI, ``N_LONG`` under the long profile."""
    return settings(max_examples=N_LONG if LONG else default, **BASE)


def slow_when_long(test):
    return pytest.mark.slow(test) if LONG else test
