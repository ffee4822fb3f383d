"""pytest configuration shared by the tests and the doctests in symgrad/ and codegen/."""

import os

# Compiled functions build their Numba kernels in the call (tiered=False) unless a test asks for
# tiered execution: the suite's tests of fused kernels must run the kernels, not the numpy tier, and
# background builds would compete for the CPUs the tests run on. tests/test_tiered.py tests tiering.
# Set before symgrad is imported: the compile options read it once.
os.environ.setdefault("SYMGRAD_TIERED", "0")

import importlib.util  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import symgrad  # noqa: E402

# Optional test oracles. Without one, the tests that need it skip (pytest.importorskip, whose reason
# reads "could not import 'torch'"); the run records which, and `python -m pytest --oracle-skipped`
# run later with the oracle installed runs exactly those (.ci/run does: first without torch, then with).
ORACLES = ("torch",)
_ORACLE_CACHE_KEY = "symgrad/oracle-skipped"
_MISSING = [name for name in ORACLES if importlib.util.find_spec(name) is None]

# Modules of the package that import an absent oracle at the top cannot be collected for their
# doctests; they are left out (and recorded like the skipped tests).
_OPTIONAL_MODULES = {"torch": ["symgrad/torch_backend/joint.py"]}
collect_ignore = [path for name in _MISSING for path in _OPTIONAL_MODULES[name]]


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


def pytest_addoption(parser):
    parser.addoption("--oracle-skipped", action="store_true",
                     help="run only the tests that the last run skipped because an oracle "
                          f"({', '.join(ORACLES)}) was not installed; fail if one is still missing")


_ORACLE_SKIPS: set[str] = set()    # node ids this run skipped for want of an oracle


def _skipped_for_an_oracle(report) -> bool:
    if not report.skipped or not isinstance(report.longrepr, tuple):
        return False
    reason = str(report.longrepr[2])
    return any(f"could not import {name!r}" in reason for name in ORACLES)


def pytest_collectreport(report):
    if _skipped_for_an_oracle(report):      # a module that imports the oracle at the top
        _ORACLE_SKIPS.add(report.nodeid)


def pytest_runtest_logreport(report):
    if _skipped_for_an_oracle(report):
        _ORACLE_SKIPS.add(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workerinput") or getattr(config, "cache", None) is None:
        return          # an xdist worker: the controller sees every report
    if config.getoption("oracle_skipped"):
        if _ORACLE_SKIPS:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            config.get_terminal_writer().line(
                f"--oracle-skipped: {len(_ORACLE_SKIPS)} tests were skipped again for want of "
                f"{' or '.join(ORACLES)}, e.g. {sorted(_ORACLE_SKIPS)[0]}", red=True)
    elif _whole_default_run(config):
        # a run of the whole suite (the README's command): kept for a later --oracle-skipped
        config.cache.set(_ORACLE_CACHE_KEY, sorted(_ORACLE_SKIPS | set(collect_ignore)))


def _whole_default_run(config) -> bool:
    """No paths, no ``-k``, and the marks pyproject.toml's addopts select (``-m heavy`` is not the
    README's command: its skips must not replace that run's record)."""
    addopts = config.getini("addopts")      # already split into arguments
    default_marks = addopts[addopts.index("-m") + 1] if "-m" in addopts else ""
    return (config.args_source is pytest.Config.ArgsSource.TESTPATHS and not config.option.keyword
            and config.option.markexpr == default_marks)


def _select_oracle_skipped(config, items) -> None:
    recorded = config.cache.get(_ORACLE_CACHE_KEY, None)
    if recorded is None:
        raise pytest.UsageError("--oracle-skipped: no record of an earlier run of the whole suite; run "
                                "`python -m pytest` first")
    prefixes = tuple(recorded)
    keep, drop = [], []
    for item in items:
        nodeid = item.nodeid.split("@")[0]
        (keep if any(nodeid == p or nodeid.startswith(p + "::") for p in prefixes) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


def pytest_collection_modifyitems(config, items):
    if config.getoption("oracle_skipped"):
        _select_oracle_skipped(config, items)
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
