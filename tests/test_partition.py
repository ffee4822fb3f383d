"""codegen/partition.py: the forward/backward split of joint graphs (W1–W5 and small programs)."""

import numpy as np
import pytest
from workloads import w1 as _w1  # the workloads, defined once
from workloads import w2 as _w2
from workloads import w3 as _w3
from workloads import w5 as _w5

import symgrad
from codegen.partition import partition, recomputable, value_bytes
from symgrad.compiler.autodiff import autodiff
from symgrad.ir import interpret, trace


def _inputs(seed):
    r = np.random.default_rng(seed)
    return {
        "w1": (_w1, [r.uniform(-2, 2, 50)], None),
        "w2": (_w2, [r.standard_normal((6, 5)), r.standard_normal(5), r.standard_normal(5)], None),
        "w3": (_w3, [r.standard_normal(s) for s in [(7, 4), (4, 3), (3,), (3, 1), (1,), (7, 1)]], [1, 2, 3, 4]),
        "w5": (_w5, [r.standard_normal((6, 5)), r.integers(0, 5, 6)], [0]),
    }


@pytest.fixture(scope="module", params=["w1", "w2", "w3", "w5"])
def case(request):
    fn, args, wrt = _inputs(0)[request.param]
    joint = autodiff(trace(fn, *args), wrt=wrt)
    return request.param, joint, partition(joint)


def test_forward_then_backward_equals_the_joint_graph_on_new_inputs(case):
    name, joint, p = case
    _, args, _ = _inputs(1)[name]  # different values, same shapes
    tangents = [np.ones(v.shape, v.dtype.np) for v in joint.placeholders[joint.n_primals:]]
    reference = interpret(joint, *args, *tangents)
    fwd = interpret(p.forward, *args)
    outputs, saved = fwd[:p.n_forward_outputs], fwd[p.n_forward_outputs:]
    grads = interpret(p.backward, *saved, *tangents)
    for got, want in zip(outputs + grads, reference):
        if want is None:
            assert got is None
        else:
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)


def test_matmul_reductions_and_indexing_are_never_recomputed(case):
    _, _, p = case
    forward_nodes = set(p.forward.nodes)
    for node in p.backward.nodes:
        if node in forward_nodes:
            assert recomputable(node), f"{node.op} was recomputed in the backward"


def test_saves_no_more_than_saving_everything_the_backward_reads(case):
    _, joint, p = case
    bw_values = {u for n in p.backward.nodes for u in n.inputs} | {v for v in joint.outputs if v is not None}
    fwd_values = set(joint.placeholders[:joint.n_primals]) | {o for n in p.forward.nodes for o in n.outputs}
    naive = sum(value_bytes(v) for v in bw_values & fwd_values)
    assert p.saved_bytes <= naive
    assert p.saved_bytes == sum(value_bytes(v) for v in p.saved)


def test_w1_saves_transcendentals_and_recomputes_arithmetic():
    fn, args, _ = _inputs(0)["w1"]
    p = partition(autodiff(trace(fn, *args)))
    saved_ops = {v.producer.op if v.producer else "input" for v in p.saved}
    assert saved_ops == {"input", "sin", "exp", "log1p", "tanh"}
    recomputed_ops = {v.producer.op for v in p.recomputed}
    assert not recomputed_ops & {"sin", "exp", "tanh", "log1p"}
    assert "mul.Tensor" in recomputed_ops      # x*x and the like are redone in the backward loop
    assert f"saved ({5 * 400} bytes)" in p.describe()


def test_w3_keeps_matmul_results_instead_of_recomputing_them():
    fn, args, wrt = _inputs(0)["w3"]
    p = partition(autodiff(trace(fn, *args), wrt=wrt))
    saved_ops = {v.producer.op if v.producer else "input" for v in p.saved}
    assert saved_ops <= {"input", "add.Tensor", "sub.Tensor", "mm", "tanh"}
    assert not any(n.op == "mm" for n in p.backward.nodes if n in set(p.forward.nodes))


def test_a_value_needed_only_as_metadata_is_not_saved():
    # sum's gradient needs only the input's shape: nothing of x has to be kept
    p = partition(autodiff(trace(lambda x: x.sum() * 3.0, np.ones(4))))
    assert p.saved == [] and p.saved_bytes == 0


def _brute_force_min_cut(n_vertices, edges):
    """The smallest total capacity of edges leaving a vertex set that holds 0 and not the last vertex."""
    best = float("inf")
    inner = range(1, n_vertices - 1)
    for mask in range(1 << len(inner)):
        side = {0} | {v for k, v in enumerate(inner) if mask >> k & 1}
        best = min(best, sum(c for u, v, c in edges if u in side and v not in side))
    return best


@pytest.mark.parametrize("seed", range(40))
def test_max_flow_equals_the_brute_force_min_cut_and_its_cut_is_minimal(seed):
    from codegen.partition import INF, _Flow

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 9))
    edges = []
    for _ in range(int(rng.integers(1, 25))):
        u, v = (int(k) for k in rng.integers(0, n, 2))
        if u != v:
            edges.append((u, v, INF if rng.random() < 0.25 else int(rng.integers(1, 20))))
    flow = _Flow()
    for u, v, c in edges:
        flow.add(u, v, c)
    want = _brute_force_min_cut(n, edges)
    if want == INF:
        with pytest.raises(ValueError, match="infinite-capacity path"):
            flow.max_flow(0, n - 1)
        return
    assert flow.max_flow(0, n - 1) == want
    side = flow.reachable(0)
    assert n - 1 not in side
    assert sum(c for u, v, c in edges if u in side and v not in side) == want


@pytest.mark.parametrize("steps", [60, 240])
def test_a_long_chain_saves_every_transcendental_value_once(steps):
    """Many augmenting paths (one per saved value): x and every sin but the last are saved (the
    backward reads cos of each sin's argument, recomputed as ``0.9 * sin``)."""
    def chain(x):
        for _ in range(steps // 2):
            x = np.sin(x) * 0.9
        return x.sum()

    p = partition(autodiff(trace(chain, np.linspace(-1, 1, 16))))
    assert [v.name.rstrip("0123456789_") for v in p.saved] == ["x"] + ["sin"] * (steps // 2 - 1)


def test_a_gradient_that_does_not_depend_on_the_tangents_reaches_the_backward():
    """Found by tests/test_fuzz_views.py: after ``fill_`` the gradient is ``where(mask, 0, 0)``, which
    reads no tangent; the cut once saved nothing for it, and the backward needed the inputs."""
    def f(x, w):
        y = x * 1.3 + w * 0.5
        y.masked_fill_(y > 0.5, 1.0)
        y.fill_(1.0)
        return (y * y).sum()

    x = symgrad.tensor([0.3], dtype=symgrad.float64, requires_grad=True)
    w = symgrad.tensor([0.9], dtype=symgrad.float64, requires_grad=True)
    symgrad.compile(f, backend="numpy", strict=True)(x, w).backward()
    assert x.grad.tolist() == [0.0] and w.grad.tolist() == [0.0]
