# ruff: noqa: E501  (the seed snippets are kept verbatim, long lines included)
"""The code examples of the three seed tutorials, run with ``symgrad`` in place of ``torch``.

Each example is kept verbatim as a string (only ``import torch`` becomes
``import symgrad as torch``) and executed; the tests then check what real PyTorch 2.x does
with that code: the printed text (memory addresses and module prefixes of node reprs removed),
node class names via ``type(node).__name__``, values, and the errors PyTorch raises.

Where a seed's comments disagree with PyTorch, PyTorch wins (docs/eager.md, "Where symgrad follows PyTorch"):

* seed 000 example 2: ``z = y.detach() + 2`` does not require grad, its ``grad_fn`` is None,
  and ``z.backward()`` raises RuntimeError (the seed claims AddBackward0 and a zero gradient);
* seed 001: in ``z = y + 3`` the constant is ``(None, 0)``, not an AccumulateGrad;
  ``y = x * 2; y += 1`` raises nothing; the ``print_graph`` helper prints one line and then
  fails with AttributeError, because a graph node has no ``.grad_fn``;
* seed 002: an f-string of a 0-d tensor formats it like a Python float (``0.4899999797344208``).

Not covered: seed 001's ``torchviz.make_dot`` and ``CompiledFunction`` snippets (they need a
third-party package or undefined names and are not runnable on their own).
"""

import re

import numpy as np
import pytest
from numpy.testing import assert_allclose

import symgrad
import symgrad as torch  # the seeds' spelling

_NODE_REPR = re.compile(r"<(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*) object at 0x[0-9a-fA-F]+>")


def normalise(text):
    """Printed text with ``<mod.Name object at 0x...>`` shortened to ``<Name>``; trailing blanks dropped."""
    lines = [_NODE_REPR.sub(r"<\1>", line).rstrip() for line in text.split("\n")]
    while lines and lines[-1] == "":
        lines.pop()
    return lines


def run(code, capsys, ns=None, raises=None):
    """exec a seed snippet; return (namespace, printed lines, exception info or None)."""
    if ns is None:
        ns = {}
    source = code.replace("import torch\n", "import symgrad as torch\n")
    assert "import torch\n" not in source
    compiled = compile(source, "<seed example>", "exec")
    info = None
    if raises is None:
        exec(compiled, ns)
    else:
        with pytest.raises(raises) as info:
            exec(compiled, ns)
    return ns, normalise(capsys.readouterr().out), info


def name(node):
    return None if node is None else type(node).__name__


def next_names(node):
    return tuple((name(fn), nr) for fn, nr in node.next_functions)


def values(t):
    return np.asarray(t.detach().tolist())


# =========================================================================== seed 000

SEED000_EXAMPLE1 = """\
import torch

x = torch.tensor([2.0], requires_grad=True)
y = x**2
z = 2*y
print(f"x.grad_fn: {x.grad_fn}")  # Output: None
print(f"y.grad_fn: {y.grad_fn}")  # Output: <PowBackward0 object at 0x...>
print(f"z.grad_fn: {z.grad_fn}")  # Output: <MulBackward0 object at 0x...>

z.backward()
print(f"x.grad: {x.grad}")      # Output: tensor([8.])
"""

SEED000_EXAMPLE2 = """\
import torch

x = torch.tensor([3.0], requires_grad=True)
y = x**3
w = y.detach()  # Detaches y from the computation graph
z = w + 2

print(f"x.grad_fn: {x.grad_fn}") # Output: None
print(f"y.grad_fn: {y.grad_fn}") # Output: <PowBackward0 object at 0x...>
print(f"w.grad_fn: {w.grad_fn}") # Output: None
print(f"z.grad_fn: {z.grad_fn}") # Output: <AddBackward0 object at 0x...>

z.backward()
print(f"x.grad: {x.grad}") # Output: tensor([0.])
"""

SEED000_EXAMPLE3 = """\
import torch

x = torch.tensor([1.0], requires_grad=True)
y = torch.tensor([2.0], requires_grad=True)
z = x**2 + y**3

print(f"x.grad_fn: {x.grad_fn}") # Output: None
print(f"y.grad_fn: {y.grad_fn}") # Output: None
print(f"z.grad_fn: {z.grad_fn}") # Output: <AddBackward0 object at 0x...>

z.backward()
print(f"x.grad: {x.grad}") # Output: tensor([2.])
print(f"y.grad: {y.grad}") # Output: tensor([12.])
"""


def test_seed000_example1_pow_then_mul(capsys):
    ns, out, _ = run(SEED000_EXAMPLE1, capsys)
    x, y, z = ns["x"], ns["y"], ns["z"]
    assert x.grad_fn is None and x.is_leaf
    assert name(y.grad_fn) == "PowBackward0"
    assert name(z.grad_fn) == "MulBackward0"
    assert next_names(z.grad_fn) == (("PowBackward0", 0), (None, 0))  # the 2 is a constant
    assert next_names(y.grad_fn) == (("AccumulateGrad", 0),)
    assert z.grad_fn.next_functions[0][0] is y.grad_fn
    assert_allclose(values(z), [8.0])
    assert_allclose(values(x.grad), [8.0])  # dz/dx = 4x
    assert x.grad.dtype == symgrad.float32


def test_seed000_example1_prints(capsys):
    _, out, _ = run(SEED000_EXAMPLE1, capsys)
    assert out == [
        "x.grad_fn: None",
        "y.grad_fn: <PowBackward0>",
        "z.grad_fn: <MulBackward0>",
        "x.grad: tensor([8.])",
    ]


def test_seed000_example2_detach_then_add_raises(capsys):
    # The seed says z.grad_fn is AddBackward0 and x.grad ends up tensor([0.]).  In PyTorch
    # z = w + 2 with a detached w does not require grad and z.backward() raises.
    ns, out, info = run(SEED000_EXAMPLE2, capsys, raises=RuntimeError)
    assert "require" in str(info.value)
    x, y, w, z = ns["x"], ns["y"], ns["w"], ns["z"]
    assert name(y.grad_fn) == "PowBackward0"
    assert w.grad_fn is None and w.requires_grad is False and w.is_leaf
    assert z.grad_fn is None and z.requires_grad is False
    assert_allclose(values(w), [27.0])
    assert_allclose(values(z), [29.0])
    assert x.grad is None
    # the line after z.backward() never ran
    assert out == [
        "x.grad_fn: None",
        "y.grad_fn: <PowBackward0>",
        "w.grad_fn: None",
        "z.grad_fn: None",
    ]


def test_seed000_example3_two_leaves(capsys):
    ns, out, _ = run(SEED000_EXAMPLE3, capsys)
    x, y, z = ns["x"], ns["y"], ns["z"]
    assert x.grad_fn is None and y.grad_fn is None
    assert name(z.grad_fn) == "AddBackward0"
    assert next_names(z.grad_fn) == (("PowBackward0", 0), ("PowBackward0", 0))
    assert z.grad_fn.next_functions[0][0] is not z.grad_fn.next_functions[1][0]
    assert_allclose(values(z), [9.0])
    assert_allclose(values(x.grad), [2.0])
    assert_allclose(values(y.grad), [12.0])
    assert out == [
        "x.grad_fn: None",
        "y.grad_fn: None",
        "z.grad_fn: <AddBackward0>",
        "x.grad: tensor([2.])",
        "y.grad: tensor([12.])",
    ]


# =========================================================================== seed 001

SEED001_SIMPLE = """\
import torch

x = torch.tensor([2.0], requires_grad=True)
y = x ** 2
z = y + 3

print(f"x.grad_fn: {x.grad_fn}")  # None (leaf node)
print(f"y.grad_fn: {y.grad_fn}")  # <PowBackward0>
print(f"z.grad_fn: {z.grad_fn}")  # <AddBackward0>
"""

SEED001_LEAF = """\
x = torch.tensor([2.0], requires_grad=True)  # Leaf tensor
print(x.is_leaf)  # True
print(x.grad_fn)  # None
"""

SEED001_NONLEAF = """\
y = x * 2  # Non-leaf tensor
print(y.is_leaf)  # False
print(y.grad_fn)  # <MulBackward0>
"""

SEED001_CHAIN = """\
x = torch.tensor([2.0], requires_grad=True)
y = x * 2
z = y + 3

print(z.grad_fn)  # <AddBackward0>
print(z.grad_fn.next_functions)
# ((<MulBackward0>, 0), (<AccumulateGrad>, 0))
#    ^-- previous operation  ^-- gradient accumulator for constant
"""

SEED001_MYSQUARE = """\
class MySquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 2

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * 2 * x

# Usage
x = torch.tensor([2.0], requires_grad=True)
y = MySquare.apply(x)
print(y.grad_fn)  # <MySquareBackward object>

y.backward()
print(x.grad)  # tensor([4.0]) = 2 * 2
"""

SEED001_PRINT_GRAPH = """\
def print_graph(tensor, indent=0):
    print(' ' * indent + str(tensor.grad_fn))
    if tensor.grad_fn is not None:
        for next_fn, _ in tensor.grad_fn.next_functions:
            if next_fn is not None:
                print_graph(next_fn, indent + 2)

print_graph(z)
"""

SEED001_CHECK_GRADS = """\
x = torch.tensor([2.0], requires_grad=True)
y = x * 2
z = y + 3

print(x.requires_grad)  # True
print(y.requires_grad)  # True
print(z.requires_grad)  # True
"""

SEED001_RETAIN_GRAD = """\
y.retain_grad()  # Keep gradient for non-leaf
z.backward()
print(y.grad)  # Now available!
"""

SEED001_INPLACE = """\
x = torch.tensor([2.0], requires_grad=True)
y = x * 2
y += 1  # Error! In-place op on tensor used in backward
"""

SEED001_HOOK = """\
def hook_fn(grad):
    print(f"Gradient: {grad}")

x = torch.tensor([2.0], requires_grad=True)
x.register_hook(hook_fn)

y = x ** 2
y.backward()
# Prints: Gradient: tensor([4.0])
"""


def test_seed001_simple_example(capsys):
    ns, out, _ = run(SEED001_SIMPLE, capsys)
    x, y, z = ns["x"], ns["y"], ns["z"]
    assert x.grad_fn is None
    assert name(y.grad_fn) == "PowBackward0"
    assert name(z.grad_fn) == "AddBackward0"
    assert_allclose(values(z), [7.0])
    assert out == [
        "x.grad_fn: None",
        "y.grad_fn: <PowBackward0>",
        "z.grad_fn: <AddBackward0>",
    ]


def test_seed001_leaf_and_non_leaf(capsys):
    ns, out, _ = run(SEED001_LEAF, capsys, ns={"torch": symgrad})
    assert ns["x"].is_leaf is True and ns["x"].grad_fn is None
    assert out == ["True", "None"]
    ns, out, _ = run(SEED001_NONLEAF, capsys, ns=ns)
    y = ns["y"]
    assert y.is_leaf is False
    assert name(y.grad_fn) == "MulBackward0"
    assert out == ["False", "<MulBackward0>"]


def test_seed001_grad_fn_chain_constant_is_none(capsys):
    # The seed claims ((<MulBackward0>, 0), (<AccumulateGrad>, 0)); the 3 is a constant: (None, 0).
    ns, out, _ = run(SEED001_CHAIN, capsys, ns={"torch": symgrad})
    z = ns["z"]
    assert name(z.grad_fn) == "AddBackward0"
    assert next_names(z.grad_fn) == (("MulBackward0", 0), (None, 0))
    assert z.grad_fn.next_functions[0][0] is ns["y"].grad_fn
    assert out == [
        "<AddBackward0>",
        "((<MulBackward0>, 0), (None, 0))",
    ]


def test_seed001_custom_mysquare(capsys):
    ns, out, _ = run(SEED001_MYSQUARE, capsys, ns={"torch": symgrad})
    x, y = ns["x"], ns["y"]
    assert name(y.grad_fn) == "MySquareBackward"
    assert next_names(y.grad_fn) == (("AccumulateGrad", 0),)
    assert y.grad_fn.next_functions[0][0].variable is x
    assert_allclose(values(y), [4.0])
    assert_allclose(values(x.grad), [4.0])
    # the node prints as a Python object whose class is MySquareBackward (module prefix dropped)
    assert out == ["<MySquareBackward>", "tensor([4.])"]


def test_seed001_print_graph_fails_after_first_line(capsys):
    # The seed's helper calls .grad_fn on the *node* it recurses into; nodes have no grad_fn,
    # so PyTorch prints the root and then raises AttributeError (the seed shows a 4-line tree).
    ns, _, _ = run(SEED001_SIMPLE, capsys)
    ns, out, info = run(SEED001_PRINT_GRAPH, capsys, ns=ns, raises=AttributeError)
    assert "grad_fn" in str(info.value)
    assert out == ["<AddBackward0>"]


def test_seed001_print_graph_corrected_walk(capsys):
    # What the helper meant to show, walking nodes instead of tensors; names, not addresses.
    ns, _, _ = run(SEED001_SIMPLE, capsys)
    lines = []

    def walk(node, indent=0):
        lines.append(" " * indent + name(node))
        for next_fn, _ in node.next_functions:
            if next_fn is not None:
                walk(next_fn, indent + 2)

    walk(ns["z"].grad_fn)
    # only three nodes: the constant 3 has no AccumulateGrad (the seed prints a fourth line)
    assert lines == ["AddBackward0", "  PowBackward0", "    AccumulateGrad"]


def test_seed001_debugging_requires_grad_and_retain_grad(capsys):
    ns, out, _ = run(SEED001_CHECK_GRADS, capsys, ns={"torch": symgrad})
    assert out == ["True", "True", "True"]
    ns, out, _ = run(SEED001_RETAIN_GRAD, capsys, ns=ns)
    y, x = ns["y"], ns["x"]
    assert y.retains_grad is True
    assert_allclose(values(y.grad), [1.0])
    assert_allclose(values(x.grad), [2.0])
    assert out == ["tensor([1.])"]


def test_seed001_inplace_on_unsaved_result_is_fine(capsys):
    # The seed says "Error!"; MulBackward0 saved x and the number, not y, so PyTorch is happy.
    ns, out, _ = run(SEED001_INPLACE, capsys, ns={"torch": symgrad})
    x, y = ns["x"], ns["y"]
    assert out == []
    assert_allclose(values(y), [5.0])
    assert name(y.grad_fn) == "AddBackward0"
    assert next_names(y.grad_fn) == (("MulBackward0", 0), (None, 0))
    assert y._version == 1
    y.backward()
    assert_allclose(values(x.grad), [2.0])


def test_seed001_hook_prints_gradient(capsys):
    ns, out, _ = run(SEED001_HOOK, capsys, ns={"torch": symgrad})
    assert_allclose(values(ns["x"].grad), [4.0])
    # the seed writes tensor([4.0]); PyTorch prints tensor([4.])
    assert out == ["Gradient: tensor([4.])"]


# =========================================================================== seed 002

SEED002_BREADCRUMBS = """\
# Potion Ingredients:
import torch

# Leaf Tensor: Our learnable pixel value
p = torch.tensor([0.5], requires_grad=True)
print(f"\\nPixel 'p': {p}")
print(f"p.requires_grad: {p.requires_grad}") # Output: True
print(f"p.grad_fn: {p.grad_fn}")          # Output: None (It's a leaf!)

# --- Spells create grad_fn --- #

# Spell 1: Add Brightness (Non-leaf result)
bright_p = p + 0.2
print(f"\\nbright_p = p + 0.2: {bright_p}")
print(f"bright_p.requires_grad: {bright_p.requires_grad}") # Output: True (inherited from p)
print(f"bright_p.grad_fn: {bright_p.grad_fn}")          # Output: <AddBackward0 object ...>

# Spell 2: Square the value (Non-leaf result)
squared_bright_p = bright_p * bright_p # or bright_p**2
print(f"\\nsquared_bright_p = bright_p * bright_p: {squared_bright_p}")
print(f"squared_bright_p.requires_grad: {squared_bright_p.requires_grad}") # Output: True
print(f"squared_bright_p.grad_fn: {squared_bright_p.grad_fn}")          # Output: <MulBackward0 object ...> (or PowBackward0)

# Spell 3: Average (if it were multiple values) (Non-leaf result)
# For a single value, mean is just the value itself, but it still gets a grad_fn
final_value = squared_bright_p.mean()
print(f"\\nfinal_value = squared_bright_p.mean(): {final_value}")
print(f"final_value.requires_grad: {final_value.requires_grad}") # Output: True
print(f"final_value.grad_fn: {final_value.grad_fn}")          # Output: <MeanBackward0 object ...>
"""

SEED002_PEEK = """\
# Spell Snippet (Peeking deeper - not usually needed!):
# final_value was created by mean()
print(f"final_value.grad_fn: {final_value.grad_fn}") # MeanBackward0
# Shows the grad_fn of the *input* to the mean() operation
print(f"final_value.grad_fn.next_functions: {final_value.grad_fn.next_functions}") # ((<MulBackward0...>, 0),)
"""

SEED002_NO_GRAD = """\
# Spell Snippet:
with torch.no_grad():
    chilled_p = p / 2.0
    print(f"\\nInside no_grad: chilled_p = p / 2.0: {chilled_p}")
    print(f"Inside no_grad: chilled_p.requires_grad: {chilled_p.requires_grad}") # Output: False
    print(f"Inside no_grad: chilled_p.grad_fn: {chilled_p.grad_fn}")          # Output: None
"""


def test_seed002_breadcrumbs_graph(capsys):
    ns, _, _ = run(SEED002_BREADCRUMBS, capsys)
    p, bright, squared, final = ns["p"], ns["bright_p"], ns["squared_bright_p"], ns["final_value"]
    assert p.grad_fn is None and p.is_leaf and p.requires_grad
    assert name(bright.grad_fn) == "AddBackward0" and bright.requires_grad
    assert next_names(bright.grad_fn) == (("AccumulateGrad", 0), (None, 0))
    assert name(squared.grad_fn) == "MulBackward0"  # not PowBackward0: it was written bright * bright
    assert next_names(squared.grad_fn) == (("AddBackward0", 0), ("AddBackward0", 0))
    assert squared.grad_fn.next_functions[0][0] is squared.grad_fn.next_functions[1][0]
    assert name(final.grad_fn) == "MeanBackward0"
    assert next_names(final.grad_fn) == (("MulBackward0", 0),)
    assert tuple(final.shape) == ()
    assert_allclose(values(bright), [0.7], rtol=1e-6)
    assert_allclose(values(squared), [0.49], rtol=1e-6)
    assert_allclose(values(final), 0.49, rtol=1e-6)
    assert name((bright ** 2).grad_fn) == "PowBackward0"
    # the backward the text describes: d/dp (p + 0.2)^2 = 2 (p + 0.2)
    final.backward()
    assert_allclose(values(p.grad), [1.4], rtol=1e-6)


def test_seed002_breadcrumbs_prints(capsys):
    ns, out, _ = run(SEED002_BREADCRUMBS, capsys)
    assert out == [
        "",
        "Pixel 'p': tensor([0.5000], requires_grad=True)",
        "p.requires_grad: True",
        "p.grad_fn: None",
        "",
        "bright_p = p + 0.2: tensor([0.7000], grad_fn=<AddBackward0>)",
        "bright_p.requires_grad: True",
        "bright_p.grad_fn: <AddBackward0>",
        "",
        "squared_bright_p = bright_p * bright_p: tensor([0.4900], grad_fn=<MulBackward0>)",
        "squared_bright_p.requires_grad: True",
        "squared_bright_p.grad_fn: <MulBackward0>",
        "",
        # an f-string formats a 0-d tensor through .item(): a Python float, float32 digits and all
        "final_value = squared_bright_p.mean(): 0.4899999797344208",
        "final_value.requires_grad: True",
        "final_value.grad_fn: <MeanBackward0>",
    ]
    ns, out, _ = run(SEED002_PEEK, capsys, ns=ns)
    assert out == [
        "final_value.grad_fn: <MeanBackward0>",
        "final_value.grad_fn.next_functions: ((<MulBackward0>, 0),)",
    ]


def test_seed002_no_grad_chill_zone(capsys):
    ns, _, _ = run(SEED002_BREADCRUMBS, capsys)
    ns, out, _ = run(SEED002_NO_GRAD, capsys, ns=ns)
    chilled = ns["chilled_p"]
    assert chilled.requires_grad is False and chilled.grad_fn is None and chilled.is_leaf
    assert_allclose(values(chilled), [0.25])
    assert ns["p"].requires_grad is True
    assert name((ns["p"] / 2.0).grad_fn) == "DivBackward0"  # outside the block, tracked again
    assert symgrad.is_grad_enabled() is True
    assert out == [
        "",
        "Inside no_grad: chilled_p = p / 2.0: tensor([0.2500])",
        "Inside no_grad: chilled_p.requires_grad: False",
        "Inside no_grad: chilled_p.grad_fn: None",
    ]


def test_zero_dim_tensor_format_spec():
    # the reason for the f-string line above: format() of a 0-d tensor goes through .item()
    t = torch.tensor(0.5)
    assert format(t, ".2f") == "0.50"
    assert f"{torch.tensor(2.5)}" == "2.5"
