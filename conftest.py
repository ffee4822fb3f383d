"""pytest configuration shared by the tests and the doctests in symgrad/ and codegen/."""

import numpy as np
import pytest

import symgrad


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace):
    # docstring examples use `symgrad` and `np` without importing them
    doctest_namespace["symgrad"] = symgrad
    doctest_namespace["np"] = np


@pytest.fixture(autouse=True, scope="session")
def _kernel_cache(tmp_path_factory):
    # compiled kernels go to a temporary cache, shared by the whole run, never the user's own
    import os

    if "SYMGRAD_CACHE_DIR" not in os.environ:
        os.environ["SYMGRAD_CACHE_DIR"] = str(tmp_path_factory.mktemp("symgrad-cache"))
    yield
