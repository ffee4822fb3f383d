"""codegen/jit.py: kernel modules in the cache directory, loaded by a second process from Numba's cache."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import symgrad

REPO = Path(__file__).resolve().parents[1]

PROBE = textwrap.dedent("""
    import sys
    import numpy as np, symgrad
    def w1(x):
        return (symgrad.sin(x) * symgrad.exp(-x * x) + symgrad.log1p(x * x) * symgrad.tanh(x)).sum()
    v, g = symgrad.value_and_grad(w1)(np.linspace(-1, 1, 64))
    vg = symgrad.value_and_grad(w1)
    vg(np.linspace(-1, 1, 64))
    vg(np.linspace(-1, 1, 100))                 # another size: the same kernel
    s = vg.compiled.stats()
    print(s["kernel_cache_loads"], s["kernel_compiles"], repr(v))
""")


def _run_probe(cache: Path) -> tuple[int, int, float]:
    env = dict(os.environ, SYMGRAD_CACHE_DIR=str(cache), PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True, cwd=REPO)
    hits, misses, value = out.stdout.split()
    return int(hits), int(misses), float(value)


def test_second_process_loads_kernels_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    hits, misses, v1 = _run_probe(cache)
    assert (hits, misses) == (0, 1)              # first process compiles
    hits, misses, v2 = _run_probe(cache)
    assert (hits, misses) == (1, 0)              # second process: no Numba compilation of the kernel
    assert v1 == v2
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    assert list(cache.glob("symgrad_kernels_*.py"))


def test_a_damaged_module_file_is_rewritten(tmp_path):
    cache = tmp_path / "cache"
    _, _, good = _run_probe(cache)
    for f in cache.glob("symgrad_kernels_*.py"):
        f.write_text(f.read_text()[:40])         # truncated
    _, _, again = _run_probe(cache)
    assert again == good


def test_a_cache_writable_by_others_is_refused(tmp_path, monkeypatch):
    cache = tmp_path / "open"
    cache.mkdir()
    cache.chmod(0o777)
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(cache))
    with pytest.warns(UserWarning, match="refusing kernel cache"):
        f = symgrad.compile(lambda x: (symgrad.exp(x) * x).sum())
        x = symgrad.tensor(np.ones(3), dtype=symgrad.float64, requires_grad=True)
        f(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.e)
    assert not list(cache.glob("symgrad_kernels_*.py"))
