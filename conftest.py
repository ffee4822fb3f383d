"""pytest configuration shared by the tests and the doctests in symgrad/ and codegen/."""

import os

# Compiled functions build their Numba kernels in the call (tiered=False) unless a test asks for
# tiered execution: the suite's tests of fused kernels must run the kernels, not the numpy tier, and
# background builds would compete for the CPUs the tests run on. tests/test_tiered.py tests tiering.
# Set before symgrad is imported: the compile options read it once.
os.environ.setdefault("SYMGRAD_TIERED", "0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import symgrad  # noqa: E402


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace):
    # docstring examples use `symgrad` and `np` without importing them
    doctest_namespace["symgrad"] = symgrad
    doctest_namespace["np"] = np


@pytest.fixture(autouse=True, scope="session")
def _kernel_cache(tmp_path_factory):
    # compiled kernels go to a temporary cache, shared by the whole run (every xdist worker: a kernel
    # one worker built is loaded by the other), never the user's own
    import os

    if "SYMGRAD_CACHE_DIR" not in os.environ:
        base = tmp_path_factory.getbasetemp()
        if os.environ.get("PYTEST_XDIST_WORKER"):
            base = base.parent     # the run's directory, above each worker's own
        cache = base / "symgrad-cache"
        cache.mkdir(mode=0o700, exist_ok=True)
        os.environ["SYMGRAD_CACHE_DIR"] = str(cache)
    yield


def pytest_collection_modifyitems(config, items):
    # The scheduler of `--dist loadgroup` keeps tests whose node ids end in the same "@group" on one
    # worker (tests/test_compile_differential.py's batches: one worker builds each batch once).
    # pytest-xdist 3.8's worker adds that suffix from the `xdist_group` mark by setting `_nodeid`,
    # which pytest 9's items no longer read (their node id is `_id`), so it is added here.
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and not item.nodeid.endswith("@" + "_".join(names)):
            item._id = f"{item.nodeid}@{'_'.join(names)}"
