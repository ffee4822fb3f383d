"""``symgrad.compile`` options: one frozen, validated ``CompileOptions``, read as a mapping."""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import numpy as np
import pytest

import symgrad
from symgrad.compiler import build_cache
from symgrad.compiler.compile import CompiledFunction
from symgrad.compiler.options import DEFAULT_BACKEND, DEFAULT_TIERED, CompileOptions

NAMES = ["parallel", "fastmath", "cache", "backend", "scalar_loss", "numpy_simd", "math", "strict", "tiered"]


def loss(x):
    return (symgrad.exp(x) * x).sum()


def test_fields_defaults_and_mapping_reads():
    o = CompileOptions()
    assert [f.name for f in dataclasses.fields(o)] == NAMES
    assert list(o) == NAMES and len(o) == len(NAMES)
    assert dict(o) == {"parallel": "auto", "fastmath": False, "cache": True, "backend": DEFAULT_BACKEND,
                       "scalar_loss": "joint", "numpy_simd": True, "math": "vector", "strict": False,
                       "tiered": DEFAULT_TIERED}
    assert o["math"] == o.math == "vector" and "math" in o and "fn" not in o
    with pytest.raises(KeyError):
        o["fn"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.math = "libm"
    with pytest.raises(TypeError):
        o["math"] = "libm"
    assert hash(o) == hash(CompileOptions()) and o == CompileOptions(backend=DEFAULT_BACKEND)
    assert pickle.loads(pickle.dumps(o)) == o


@pytest.mark.parametrize("options, message", [
    ({"backend": "jax"}, "symgrad.compile: unknown backend 'jax' (available: 'numba', 'numpy')"),
    ({"scalar_loss": "fused"}, "symgrad.compile: scalar_loss must be 'joint' or 'split', not 'fused'"),
    ({"math": "svml"}, "symgrad.compile: math must be 'vector' or 'libm', not 'svml'"),
    ({"parallel": "yes"}, "symgrad.compile: parallel must be 'auto', True or False, not 'yes'"),
    ({"parallel": 1}, "symgrad.compile: parallel must be 'auto', True or False, not 1"),
    ({"strict": 1}, "symgrad.compile: strict must be True or False, not 1"),
    ({"tiered": "yes"}, "symgrad.compile: tiered must be True or False, not 'yes'"),
])
def test_bad_values_name_the_option_and_what_it_allows(options, message):
    for make in (lambda: CompileOptions(**options), lambda: symgrad.compile(**options),
                 lambda: symgrad.compile(loss, **options), lambda: CompiledFunction(loss, **options),
                 lambda: CompileOptions().replace(**options)):
        with pytest.raises(ValueError) as e:
            make()
        assert str(e.value) == message


def test_unknown_option_is_a_type_error_listing_the_options():
    with pytest.raises(TypeError, match="unknown option 'paralel' \\(options: parallel, fastmath, cache"):
        symgrad.compile(loss, paralel=False)


def test_compile_signature_lists_the_options():
    params = inspect.signature(symgrad.compile).parameters
    assert list(params) == ["fn", *NAMES]
    assert params["math"].default == "vector" and params["math"].kind is inspect.Parameter.KEYWORD_ONLY


def test_options_pass_on_as_keyword_arguments():
    f = symgrad.compile(loss, parallel=False, math="libm")
    assert f.options["parallel"] is False and f.options["math"] == "libm"
    assert f.compile_options == CompileOptions(parallel=False, math="libm")
    g = CompiledFunction(f.fn, **{**f.options, "math": "vector"})
    assert g.compile_options == f.compile_options.replace(math="vector")
    assert symgrad.value_and_grad(f, math="vector").compiled.options["math"] == "vector"
    assert symgrad.value_and_grad(f).compiled is f


def test_assigning_an_option_validates_it_and_rebuilds():
    f = symgrad.compile(loss, backend="numpy")
    x = symgrad.tensor(np.linspace(-1, 1, 7), requires_grad=True)
    first = f.inspect(x)
    assert first.options == f.compile_options
    with pytest.raises(ValueError, match="math must be"):
        f.options["math"] = "fast"
    assert f.options["math"] == "vector"
    f.options["backend"] = "numba"
    second = f.inspect(x)
    assert second is not first and second.options.backend == "numba" and first.options.backend == "numpy"
    assert f.stats()["traces"] == 2
    with pytest.raises(TypeError):
        del f.options["math"]
    f.options = {"math": "libm"}
    assert f.compile_options == CompileOptions(math="libm")


def test_build_cache_settings_are_the_options_without_cache(monkeypatch):
    seen = []
    real = build_cache.build_key

    def spy(graph, **settings):
        seen.append(settings)
        return real(graph, **settings)

    monkeypatch.setattr(build_cache, "build_key", spy)
    f = symgrad.compile(loss, parallel=False, backend="numpy", scalar_loss="split")
    f(symgrad.tensor(np.ones(3), requires_grad=True))
    assert seen[0]["options"] == {"parallel": False, "fastmath": False, "backend": "numpy",
                                  "scalar_loss": "split", "numpy_simd": True, "math": "vector"}
    assert type(seen[0]["options"]) is dict


def test_dask_reference_carries_the_options():
    from symgrad.dask import LossRef

    ref = LossRef("tests.test_options", "loss", CompileOptions(math="libm"))
    again = pickle.loads(pickle.dumps(ref))
    assert again == ref and hash(again) == hash(ref)
    assert again.compiled().options["math"] == "libm"
    assert LossRef("tests.test_options", "loss").compiled().compile_options == CompileOptions()
