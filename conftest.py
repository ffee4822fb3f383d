"""pytest configuration shared by the tests and the doctests in symgrad/ and codegen/."""

import numpy as np
import pytest

import symgrad


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace):
    # docstring examples use `symgrad` and `np` without importing them
    doctest_namespace["symgrad"] = symgrad
    doctest_namespace["np"] = np
