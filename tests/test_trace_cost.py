"""benchmarks/trace_cost.py and the property it measures: building a gradient costs time linear in
the length of the traced function (trace, build key, autodiff, simplify, partition, codegen).

Growth is measured by counting Python function calls, not seconds: counts do not depend on how
loaded the machine is, and a step that walks the graph once per node shows up as a count that
grows with the square of the chain's length.
"""

import sys

import numpy as np
import pytest

from benchmarks import trace_cost


def _calls(fn) -> int:
    count = [0]

    def profile(frame, event, arg):
        if event == "call":
            count[0] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count[0]


@pytest.mark.parametrize("shape", trace_cost.SHAPES)
def test_building_a_gradient_grows_linearly_with_the_chain(shape):
    trace_cost.build_phases(shape, 10)   # rule tables and sympy's caches are filled once
    short = _calls(lambda: trace_cost.build_phases(shape, 50))
    long = _calls(lambda: trace_cost.build_phases(shape, 200))
    # 4x the ops: a linear build makes ~4x the calls; a per-node walk of the graph (an augmenting
    # path search over the whole flow graph per saved value, a scan of every earlier loop or buffer
    # per node) made 4.7x-5.9x here
    assert long / short < 4.45, (short, long)


@pytest.mark.parametrize("shape", trace_cost.SHAPES)
def test_every_chain_shape_differentiates_like_eager_autograd(shape):
    assert trace_cost.joint_matches_eager(shape, 9)


def test_phases_and_sizes_are_reported():
    seconds, sizes = trace_cost.build_phases("reduce", 8)
    assert set(seconds) == set(trace_cost.PHASES) and all(s >= 0 for s in seconds.values())
    assert sizes["forward_nodes"] > 8 and sizes["joint_nodes"] > sizes["forward_nodes"] and sizes["kernels"] >= 1


def test_the_elementwise_chain_matches_its_hand_gradient():
    import symgrad
    from symgrad.compiler.autodiff import autodiff
    from symgrad.ir import interpret

    x = np.linspace(-2.0, 2.0, 7)
    tangent = np.linspace(0.5, 1.5, 7)
    value, grad = interpret(autodiff(symgrad.trace(trace_cost.make_chain(13, symgrad), x)), x, tangent)
    want_value, want_grad = trace_cost.numpy_value_and_grad(13, x, tangent)
    np.testing.assert_allclose(value, want_value, rtol=1e-13)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-12)
