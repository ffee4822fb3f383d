"""symgrad/build_cache.py: generated code kept per traced graph, and printed elementwise forwards."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import symgrad
from symgrad.compiler import build_cache
from symgrad.rules import diskcache

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(d))
    return d


def loss(x):
    return (symgrad.sin(x) * symgrad.exp(-x * x)).sum()


def builds(d: Path) -> list[Path]:
    return sorted(d.glob(f"{build_cache.BUILD_PREFIX}*.json"))


# --- fingerprints ----------------------------------------------------------------------------

def fp(fn, *args):
    return build_cache.graph_fingerprint(symgrad.trace(fn, *args))


def test_fingerprint_is_stable_across_traces():
    x = np.linspace(-1, 1, 5)
    assert fp(loss, x) == fp(loss, x)


@pytest.mark.parametrize("other", [
    pytest.param(lambda x: (symgrad.sin(x) * symgrad.exp(-x * x * 1.0000000000000002)).sum(), id="constant-last-bit"),
    pytest.param(lambda x: (symgrad.cos(x) * symgrad.exp(-x * x)).sum(), id="op"),
    pytest.param(lambda x: (symgrad.sin(x) * symgrad.exp(-x * x)).mean(), id="reduction"),
    pytest.param(lambda x: (symgrad.sin(x) * symgrad.exp(-x * x)).sum() + 0.0, id="extra-node"),
])
def test_fingerprint_changes_with_anything_the_code_depends_on(other):
    x = np.linspace(-1, 1, 5)
    assert fp(loss, x) != fp(other, x)


def test_fingerprint_covers_shape_dtype_names_and_array_constants():
    x = np.linspace(-1, 1, 5)
    base = fp(loss, x)
    assert fp(loss, np.linspace(-1, 1, 6)) != base
    assert fp(loss, x.astype(np.float32)) != base

    def renamed(y):
        return (symgrad.sin(y) * symgrad.exp(-y * y)).sum()
    assert fp(renamed, x) != base     # value names appear in the generated code
    w1, w2 = np.arange(100.0), np.arange(100.0)
    w2[57] += 1e-12
    assert fp(lambda v: (v * symgrad.tensor(w1)).sum(), np.ones(100)) != \
        fp(lambda v: (v * symgrad.tensor(w2)).sum(), np.ones(100))


def test_settings_and_rules_are_part_of_the_key():
    g = symgrad.trace(loss, np.ones(3))
    k = build_cache.build_key(g, wrt=[0], options={"math": "vector"})
    assert k == build_cache.build_key(g, wrt=[0], options={"math": "vector"})
    assert k != build_cache.build_key(g, wrt=[0], options={"math": "libm"})
    assert k != build_cache.build_key(g, wrt=[], options={"math": "vector"})
    assert build_cache._rule_signature("sin") != build_cache._rule_signature("cos")


def test_a_graph_that_cannot_be_fingerprinted_exactly_is_not_cached():
    g = symgrad.trace(loss, np.ones(3))
    g.nodes[0].meta["odd"] = object()
    assert build_cache.build_key(g, wrt=[0]) is None


@pytest.mark.parametrize("value", [None, True, 3, -2**70, 0.1, -0.0, float("inf"), "s", (1, 2.5),
                                   [None, slice(1, None, 2)], Ellipsis, np.float32(1.5), np.dtype("int8"),
                                   symgrad.float32, {"a": 1},
                                   np.arange(6, dtype=np.int16).reshape(2, 3)])
def test_constants_round_trip_exactly(value):
    back = build_cache._decode_value(json.loads(json.dumps(build_cache._encode_value(value))))
    if isinstance(value, np.ndarray):
        assert back.dtype == value.dtype and np.array_equal(back, value)
    elif isinstance(value, float):
        assert back.hex() == value.hex()
    else:
        assert back == value and type(back) is type(value)


# --- builds -----------------------------------------------------------------------------------

def test_an_identical_graph_reuses_the_generated_code(cache_dir):
    x = np.linspace(-2, 2, 50)
    first = symgrad.value_and_grad(loss)
    v1, g1 = first(x)
    assert first.compiled.stats()["build_cache_loads"] == 0 and len(builds(cache_dir)) == 1
    second = symgrad.value_and_grad(loss)        # a new function object: nothing in memory
    v2, g2 = second(x)
    s = second.compiled.stats()
    assert s["build_cache_loads"] == 1 and s["autodiff_s"] == 0.0
    assert v1 == v2 and np.array_equal(g1, g2)
    eager = symgrad.tensor(x, requires_grad=True)
    loss(eager).backward()
    np.testing.assert_allclose(g2, eager.grad.numpy(), rtol=1e-12)


def test_tensor_api_from_the_build_cache_composes_and_inspects(cache_dir):
    x = np.linspace(-2, 2, 7)
    symgrad.compile(loss)(symgrad.tensor(x, requires_grad=True)).backward()   # fills the cache
    f = symgrad.compile(loss)
    t = symgrad.tensor(x, requires_grad=True)
    out = f(t * 1.0)                               # a non-leaf input
    assert type(out.grad_fn).__name__ == "CompiledFunctionBackward"
    (out * 3.0).backward()
    assert f.stats()["build_cache_loads"] == 1
    ref = symgrad.tensor(x, requires_grad=True)
    (loss(ref) * 3.0).backward()
    np.testing.assert_allclose(t.grad.numpy(), ref.grad.numpy(), rtol=1e-12)
    k = f.inspect(symgrad.tensor(x, requires_grad=True))
    assert k.joint is not None and k.parts is not None     # rebuilt on first use
    assert "sin" in k.forward_source or "sin" in k.joint_source


def test_a_damaged_build_entry_is_ignored_and_rewritten(cache_dir):
    x = np.linspace(-2, 2, 9)
    v1, g1 = symgrad.value_and_grad(loss)(x)
    (entry,) = builds(cache_dir)
    raw = bytearray(entry.read_bytes())
    raw[len(raw) // 2] ^= 0x20
    entry.write_bytes(bytes(raw))
    vg = symgrad.value_and_grad(loss)
    v2, g2 = vg(x)
    assert vg.compiled.stats()["build_cache_loads"] == 0          # rebuilt, not loaded
    assert v1 == v2 and np.array_equal(g1, g2)
    assert diskcache.read_json(entry) is not None                    # and written again
    entry.write_bytes(entry.read_bytes()[:100])                    # truncated
    vg = symgrad.value_and_grad(loss)
    assert vg(x)[0] == v1 and vg.compiled.stats()["build_cache_loads"] == 0


def test_cache_false_neither_reads_nor_writes_builds(cache_dir):
    x = np.linspace(-2, 2, 9)
    symgrad.compile(loss, cache=False)(symgrad.tensor(x, requires_grad=True))
    assert not cache_dir.exists() or not builds(cache_dir)


def test_an_entry_under_another_key_is_not_used(cache_dir):
    x = np.linspace(-2, 2, 9)
    symgrad.value_and_grad(loss)(x)
    (entry,) = builds(cache_dir)
    payload = diskcache.read_json(entry)
    payload["key"] = "0" * 64                                      # the name matches, the key does not
    diskcache.write_json(entry, payload)
    vg = symgrad.value_and_grad(loss)
    vg(x)
    assert vg.compiled.stats()["build_cache_loads"] == 0


def test_a_namespace_entry_from_an_untrusted_module_is_refused():
    with pytest.raises(ImportError):
        build_cache._resolve(["os", "system"])
    assert build_cache._reference(os.system) is None


# --- a second process -------------------------------------------------------------------------

WARM_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import symgrad
    before = {m for m in sys.modules if m.startswith("sympy")}

    def loss(x):
        return (symgrad.sin(x) * symgrad.exp(-x * x) + symgrad.log1p(x * x) * symgrad.tanh(x)).sum()

    vg = symgrad.value_and_grad(loss)
    value, grad = vg(np.linspace(-2, 2, 1000))
    s = vg.compiled.stats()
    print(json.dumps({"value": value, "loads": s["build_cache_loads"], "autodiff_s": s["autodiff_s"],
                      "compiles": s["kernel_compiles"],
                      "new_sympy_modules": sorted({m for m in sys.modules if m.startswith("sympy")} - before)}))
""")


@pytest.mark.heavy
def test_a_warm_second_process_uses_no_sympy_and_compiles_nothing(tmp_path):
    env = dict(os.environ, SYMGRAD_CACHE_DIR=str(tmp_path / "c"), NUMBA_CACHE_DIR=str(tmp_path / "n"),
               PYTHONPATH=str(REPO))
    runs = [json.loads(subprocess.run([sys.executable, "-c", WARM_SCRIPT], env=env, capture_output=True, text=True,
                                      check=True, timeout=300).stdout.strip().splitlines()[-1]) for _ in range(2)]
    cold, warm = runs
    assert cold["loads"] == 0 and cold["new_sympy_modules"]        # the cold process did use sympy
    assert warm["loads"] == 1 and warm["autodiff_s"] == 0.0 and warm["compiles"] == 0
    assert warm["new_sympy_modules"] == []
    assert warm["value"] == cold["value"]
