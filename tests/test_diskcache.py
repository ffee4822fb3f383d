"""symgrad/rules/diskcache.py: the facts the cache digests are the same whether or not Numba (or sympy) is loaded."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("threads", ["1", "2"])
def test_numba_facts_agree_before_and_after_numba_loads(threads):
    code = ("import sys\n"
            "from symgrad.rules import diskcache\n"
            "assert 'numba' not in sys.modules\n"
            "before = diskcache._numba_facts()\n"
            "print('numba' in sys.modules, 'email.parser' in sys.modules)\n"
            "import numba\n"
            "loaded = f'{numba.__version__} threads {numba.config.NUMBA_NUM_THREADS}'\n"
            "print(before == diskcache._numba_facts() == loaded)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NUMBA_NUM_THREADS": threads})
    assert out.returncode == 0, out.stderr
    # read without importing Numba, and without the package metadata's email parser
    assert out.stdout.split() == ["False", "False", "True"]


def test_sympy_version_is_read_without_importing_sympy(monkeypatch):
    import sympy

    from symgrad.rules import diskcache

    loaded = diskcache._sympy_version()
    monkeypatch.delitem(sys.modules, "sympy")     # as in a process that has not imported it
    assert diskcache._sympy_version() == loaded == sympy.__version__
    assert "sympy" not in sys.modules
