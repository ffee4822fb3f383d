"""PyTorch's view/base model (symgrad/ops/views.py): views know their base, in-place ops on views rebase
the base's history, stale views regenerate their ``grad_fn``, and PyTorch's refusals are raised.

Every scenario runs on symgrad and on torch and compares values, gradients and errors; the compiled
scenarios also run through ``symgrad.compile`` and must match eager without falling back.
"""

import numpy as np
import pytest

import symgrad

torch = pytest.importorskip("torch")


def _np(t):
    return None if t is None else np.asarray(t.detach().numpy(), dtype=np.float64)


def _run(scenario, lib):
    """``scenario(lib)`` -> a tuple of tensors (or None), each as a float64 array."""
    out = scenario(lib)
    return tuple(_np(o) if o is None or hasattr(o, "detach") else np.asarray(o, dtype=np.float64) for o in out)


def _same_as_torch(scenario, rtol=1e-12):
    ours, theirs = _run(scenario, symgrad), _run(scenario, torch)
    assert len(ours) == len(theirs)
    for k, (a, b) in enumerate(zip(ours, theirs)):
        assert (a is None) == (b is None), f"output {k}: {a} vs torch {b}"
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-14, err_msg=f"output {k}")
    return ours


# --- the reproducers of the silent wrong answers -------------------------------------------------

def test_copy_into_a_slice_of_a_new_tensor_rebases_it():
    def run(lib):
        w = lib.tensor([2.0], dtype=lib.float64, requires_grad=True)
        out = lib.zeros(3, dtype=lib.float64)
        out[1:2].copy_(w * 3)
        ((out ** 2).sum() + (w ** 2).sum()).backward()
        assert out.requires_grad and type(out.grad_fn).__name__ == "CopySlices"
        return w.grad, out

    grad, _ = _same_as_torch(run)
    assert grad.tolist() == [40.0]


INPLACE_ON_VIEWS = {
    "slice.mul_": lambda y, w: y[1:].mul_(w[1:]),
    "select.add_": lambda y, w: y[0].add_(w[0] * 2),
    "t()[0] *=": lambda y, w: y.t()[0].__imul__(w[:, 0]),
    "narrow.fill_": lambda y, w: y.narrow(1, 1, 2).fill_(0.5),
    "slice.masked_fill_": lambda y, w: y[:, 1:].masked_fill_(y[:, 1:] > 1.0, 0.25),
    "slice.sigmoid_": lambda y, w: y[1:, :2].sigmoid_(),
    "slice.clamp_": lambda y, w: y[:, ::2].clamp_(-0.5, 1.5),
    "slice.exp_": lambda y, w: y[1, 1:].exp_(),
    "view(-1).exp_": lambda y, w: y.view(-1).exp_(),
    "diagonal.add_": lambda y, w: y.diagonal().add_(w.diagonal()),
    "T.mul_": lambda y, w: y.T.mul_(w.T),
    "mT.select.sub_": lambda y, w: y.mT[1].sub_(w[0]),
    "transpose.slice.copy_": lambda y, w: y.transpose(0, 1)[1:].copy_(w.t()[1:] * 3),
    "movedim.div_": lambda y, w: y.movedim(0, 1).div_(2.0),
    "unflatten.mul_": lambda y, w: y.view(-1).unflatten(0, (3, 3))[2].mul_(w[2]),
    "as_strided.add_": lambda y, w: y.as_strided((2, 2), (4, 1), 1).add_(w[:2, :2]),
    "unfold.mul_": lambda y, w: y[0].unfold(0, 2, 1)[1].mul_(w[0, :2]),
    "setitem on a view": lambda y, w: y[1:].__setitem__((0, slice(None)), w[0] * 5),
    "squeeze.unsqueeze.add_": lambda y, w: y[None][:, 1].squeeze(0).add_(w[1]),
    "view of view.pow_": lambda y, w: y[1:][:, 1:].pow_(2),
}


@pytest.mark.parametrize("name", sorted(INPLACE_ON_VIEWS))
def test_inplace_on_a_view_of_an_intermediate_matches_torch(name):
    def run(lib):
        x = lib.tensor(np.linspace(0.1, 0.9, 9).reshape(3, 3), dtype=lib.float64, requires_grad=True)
        w = lib.tensor(np.linspace(-1.0, 1.2, 9).reshape(3, 3), dtype=lib.float64, requires_grad=True)
        y = x * 1.5
        INPLACE_ON_VIEWS[name](y, w)
        loss = (y * y.detach().exp()).sum() + y[2].sum() * 3
        loss.backward()
        assert type(y.grad_fn).__name__ == "CopySlices"
        return y, x.grad, w.grad

    _same_as_torch(run)


def test_a_view_taken_before_its_base_changed_in_place_follows_the_base():
    def run(lib):
        x = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
        y = x * 1
        v = y[:2]
        y.mul_(3)
        v.sum().backward()
        return v, x.grad

    _, grad = _same_as_torch(run)
    assert grad.tolist() == [3.0, 3.0, 0.0]


def test_views_of_views_and_siblings_see_a_write_through_another_view():
    def run(lib):
        x = lib.tensor(np.arange(1.0, 13.0).reshape(3, 4), dtype=lib.float64, requires_grad=True)
        y = x * 2
        a, b, c = y[1:], y[:, 2], y.t()
        aa = a[:, 1:]
        b.mul_(x[:, 0])                # through one view: the others now read the new values
        loss = (a ** 2).sum() + (aa * 3).sum() + c[0].sum() + (y * y).sum()
        loss.backward()
        return a, aa, c, x.grad

    _same_as_torch(run)


def test_requires_grad_flows_to_the_base_and_to_its_other_views():
    def run(lib):
        w = lib.tensor([0.5, -1.5], dtype=lib.float64, requires_grad=True)
        base = lib.ones(2, 3, dtype=lib.float64)
        other = base[1]
        assert not other.requires_grad
        base[0, 1:].mul_(w)
        assert base.requires_grad and other.requires_grad
        (base.sum() * 2 + other.sum()).backward()
        return base, other, w.grad

    _same_as_torch(run)


def test_retain_grad_follows_the_tensor_through_inplace_ops():
    def run(lib):
        x = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
        y = x * 2
        y.retain_grad()
        y[1:].mul_(2)
        z = x * 1
        z.retain_grad()
        z.add_(1)
        (y * y).sum().add((z * z).sum()).backward()
        return y.grad, z.grad, x.grad

    grads = _same_as_torch(run)
    assert grads[0].tolist() == [4.0, 16.0, 24.0]


def test_retain_grad_of_a_view_written_in_place():
    def run(lib):
        x = lib.tensor([1.0, 2.0, 3.0, 4.0], dtype=lib.float64, requires_grad=True)
        y = x * 1
        v = y[1:3]
        v.retain_grad()
        v.mul_(3)
        (y ** 2).sum().backward()
        return v.grad, x.grad

    _same_as_torch(run)


def test_double_backward_through_an_inplace_write_into_a_view():
    def run(lib):
        x = lib.tensor([0.3, -0.7, 1.1], dtype=lib.float64, requires_grad=True)
        y = x * x
        y[1:].mul_(x[:2])
        (g,) = lib.autograd.grad(y.sum() ** 2, x, create_graph=True)
        (h,) = lib.autograd.grad(g.sum(), x)
        return g, h

    _same_as_torch(run)


# --- which ops are views ---------------------------------------------------------------------------

VIEW_OPS = {
    "diagonal": lambda x: x.diagonal(), "diagonal(1, 0, 2)": lambda x: x.diagonal(1, 0, 2),
    "t": lambda x: x[0].t(), "T": lambda x: x.T, "mT": lambda x: x.mT, "H": lambda x: x[0].H,
    "mH": lambda x: x.mH, "adjoint": lambda x: x.adjoint(), "narrow": lambda x: x.narrow(1, 1, 2),
    "select": lambda x: x.select(2, 1), "unbind": lambda x: x.unbind(1)[1], "chunk": lambda x: x.chunk(2, 2)[1],
    "split": lambda x: x.split(1, 0)[1], "split sizes": lambda x: x.split([1, 2], 1)[1],
    "tensor_split": lambda x: x.tensor_split(2, 2)[0], "unflatten": lambda x: x.unflatten(2, (2, 2)),
    "expand": lambda x: x[:, :1].expand(2, 3, 4), "movedim": lambda x: x.movedim(0, 2),
    "as_strided": lambda x: x.as_strided((3, 2), (4, 2), 1), "view": lambda x: x.view(6, 4),
    "view_as": lambda x: x.view_as(x.new_zeros(4, 6)), "reshape (viewable)": lambda x: x.reshape(-1),
    "flatten": lambda x: x.flatten(1), "squeeze": lambda x: x[:, :1].squeeze(1),
    "unsqueeze": lambda x: x.unsqueeze(1), "transpose": lambda x: x.transpose(0, 2),
    "swapaxes": lambda x: x.swapaxes(1, 2), "swapdims": lambda x: x.swapdims(0, 1),
    "permute": lambda x: x.permute(2, 0, 1), "unfold": lambda x: x.unfold(2, 2, 1),
    "x[1:]": lambda x: x[1:], "x[None]": lambda x: x[None], "x[...]": lambda x: x[...], "x[0]": lambda x: x[0],
    "x[:, 1, ::2]": lambda x: x[:, 1, ::2],
}
NOT_VIEWS = {"detach": lambda x: x.detach(), "x[[0]]": lambda x: x[[0]], "reshape (copy)": lambda x: x.mT.reshape(-1),
             "contiguous (copy)": lambda x: x.mT.contiguous(), "clone": lambda x: x.clone()}


@pytest.mark.parametrize("name", sorted(VIEW_OPS) + sorted(NOT_VIEWS))
def test_views_are_the_ops_pytorch_documents_as_views(name):
    make = VIEW_OPS.get(name) or NOT_VIEWS[name]
    for lib in (symgrad, torch):
        x = lib.tensor(np.arange(24.0).reshape(2, 3, 4), dtype=lib.float64)
        v = make(x)
        assert v._is_view() == (name in VIEW_OPS), (lib.__name__, name)
        assert (v._base is x) == (name in VIEW_OPS), (lib.__name__, name)
        if name in VIEW_OPS:
            x.add_(100)      # the view sees its base's writes
            assert float(v.min()) >= 100 - 1e-12, (lib.__name__, name)


@pytest.mark.parametrize("name", sorted(n for n in VIEW_OPS if n not in ("expand", "unbind", "chunk", "split",
                                                                             "split sizes", "unfold")))
def test_inplace_on_every_view_op_gives_torch_gradients(name):
    def run(lib):
        x = lib.tensor(np.linspace(-1, 1, 24).reshape(2, 3, 4), dtype=lib.float64, requires_grad=True)
        y = x * 1.7
        v = VIEW_OPS[name](y)
        v.mul_(lib.arange(1.0, 1.0 + v.numel(), dtype=lib.float64).reshape(v.shape))
        (y * y).sum().backward()
        return y, x.grad

    _same_as_torch(run)


def test_inplace_on_a_view_whose_elements_share_memory_is_refused():
    """``unfold`` with a step smaller than its size reads elements twice: an in-place op on it has no
    well-defined result (torch writes some elements twice), so symgrad refuses it, as torch does for
    expanded tensors."""
    y = symgrad.tensor(np.arange(6.0), requires_grad=True) * 1
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        y.unfold(0, 3, 1).mul_(2)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        symgrad.ones(6).unfold(0, 2, 1).add_(1)
    symgrad.ones(6).unfold(0, 2, 2).add_(1)        # disjoint windows are fine


def test_diagonal_add_writes_the_matrix():
    for lib in (symgrad, torch):
        A = lib.zeros(3, 3, dtype=lib.float64)
        A.diagonal().add_(1e-3)
        assert np.allclose(_np(A), np.eye(3) * 1e-3)


# --- PyTorch's refusals ------------------------------------------------------------------------

def _errors_alike(scenario):
    messages = []
    for lib in (symgrad, torch):
        with pytest.raises(RuntimeError) as info:
            scenario(lib)
        messages.append(str(info.value))
    return messages


REFUSALS = {
    "view of a leaf": lambda lib: lib.ones(3, requires_grad=True)[:2].add_(1),
    "output of chunk": lambda lib: lib.ones(4, requires_grad=True).clone().chunk(2)[0].add_(1),
    "output of split": lambda lib: lib.ones(4, requires_grad=True).clone().split(2)[1].mul_(2),
    "output of unbind": lambda lib: lib.ones(2, 2, requires_grad=True).clone().unbind()[0].add_(1),
    "expanded tensor": lambda lib: lib.ones(2, 1).expand(2, 3).add_(1),
    "t().view": lambda lib: lib.ones(2, 3).t().view(-1),
    "detach_ of a view": lambda lib: lib.ones(3).clone()[1:].detach_(),
}


def _no_grad_view_modified(lib):
    x = lib.zeros(3)
    with lib.no_grad():
        v = x[:2]
    v.mul_(lib.tensor([2.0], requires_grad=True))


def _no_grad_view_read_after_base_changed(lib):
    x = lib.ones(3, requires_grad=True).clone()
    with lib.no_grad():
        v = x[:2]
    x.mul_(2)
    return v.grad_fn


def _chunk_read_after_base_changed(lib):
    x = lib.ones(4, requires_grad=True).clone()
    a, _ = x.chunk(2)
    x.mul_(2)
    return a.grad_fn


REFUSALS.update({"view made in no_grad": _no_grad_view_modified,
                 "no_grad view read after its base changed": _no_grad_view_read_after_base_changed,
                 "chunk read after its base changed": _chunk_read_after_base_changed})


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refusals_match_torch(name):
    ours, theirs = _errors_alike(REFUSALS[name])
    assert ours.split(".")[0] == theirs.split(".")[0]


def test_allowed_where_torch_allows():
    for lib in (symgrad, torch):
        x = lib.ones(4)
        a, _ = x.chunk(2)
        a.mul_(2)                      # no autograd recording: allowed
        leaf = lib.ones(3, requires_grad=True)
        with lib.no_grad():
            leaf[:2].add_(1)           # an optimizer step through a view
        t = lib.ones(4, requires_grad=True).clone()
        t.tensor_split(2)[0].add_(1)   # tensor_split's pieces are plain views
        assert _np(x).tolist() == [2, 2, 1, 1] and _np(leaf).tolist() == [2, 2, 1]


# --- compiled -----------------------------------------------------------------------------------

def _loss_of_inplace_views(x, w):
    y = x * 1.5
    y[1:].mul_(w[1:])
    v = y[:, :2]
    y.diagonal().add_(w.diagonal())
    y.t()[0] *= 2
    u = y.view(-1)
    u[3:5] = w[0, :2] * 7
    y.mul_(0.5)
    return (v * v).sum() + (y.exp() * y).sum() + u[::2].sum()


def _eager_loss_and_grads(fn, x, w, lib=symgrad):
    xt = lib.tensor(x, requires_grad=True)
    wt = lib.tensor(w, requires_grad=True)
    loss = fn(xt, wt)
    loss.backward()
    return _np(loss), _np(xt.grad), _np(wt.grad)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_inplace_ops_on_views_compile_to_the_same_numbers(backend):
    r = np.random.default_rng(3)
    x, w = r.standard_normal((3, 3)), r.standard_normal((3, 3))
    want = _eager_loss_and_grads(_loss_of_inplace_views, x, w, torch)
    np.testing.assert_allclose(_eager_loss_and_grads(_loss_of_inplace_views, x, w)[0], want[0], rtol=1e-12)
    compiled = symgrad.compile(_loss_of_inplace_views, backend=backend, strict=True)    # strict: no fallback
    got = _eager_loss_and_grads(compiled, x, w)
    value, grads = symgrad.value_and_grad(compiled, argnums=(0, 1))(x, w)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10)
    np.testing.assert_allclose(value, want[0], rtol=1e-10)
    np.testing.assert_allclose(grads[0], want[1], rtol=1e-10)
    np.testing.assert_allclose(grads[1], want[2], rtol=1e-10)


def test_compiled_write_into_a_view_of_an_input_is_refused():
    def f(x):
        x[0].mul_(2)
        return x.sum()

    with pytest.raises(Exception, match="in-place modification of the input"):
        symgrad.compile(f, strict=True)(symgrad.tensor([1.0, 2.0]))
