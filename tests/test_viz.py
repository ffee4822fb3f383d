"""symgrad.viz: the grad_fn graph as DOT text / graphviz.Digraph (torchviz's make_dot), the IR as DOT,
and the print_graph text tree."""

from __future__ import annotations

import io
import re
import shutil
import sys

import numpy as np
import pytest

import symgrad
from symgrad import viz
from symgrad.compiler.autodiff import autodiff


def _w2_eager():
    x = symgrad.tensor(np.ones((4, 3)), dtype=symgrad.float64, requires_grad=True)
    w = symgrad.tensor(np.ones(3), dtype=symgrad.float64, requires_grad=True)
    b = symgrad.tensor(np.ones(3), dtype=symgrad.float64, requires_grad=True)
    loss = (symgrad.tanh(x * w + b) ** 2).mean()
    return loss, {"x": x, "w": w, "b": b}


def _nodes(dot: str) -> dict[str, str]:
    """node id -> label"""
    return {ident: quoted or bare for ident, quoted, bare in
            re.findall(r'^\t(\w+) \[label=(?:"([^"]*)"|(\w+))', dot, flags=re.M)}


def test_to_dot_is_like_torchviz():
    loss, params = _w2_eager()
    dot = viz.to_dot(loss, params=params)
    nodes = _nodes(dot)
    labels = list(nodes.values())
    assert dot.startswith("digraph grad_fn {") and dot.rstrip().endswith("}")
    # node classes, leaves with their names and shapes, the output, saved tensors with their shapes
    for label in ("MeanBackward0", "PowBackward0", "TanhBackward0", "AddBackward0", "MulBackward0",
                  "x\\nf64[4, 3]", "w\\nf64[3]", "b\\nf64[3]", "output\\nf64[]", "saved\\nf64[4, 3]"):
        assert label in labels, label
    assert "AccumulateGrad" not in dot                   # leaves are drawn as themselves
    assert "fillcolor=lightblue" in dot and "fillcolor=orange" in dot and "fillcolor=darkolivegreen1" in dot
    assert "dir=none style=dashed label=other" in dot    # MulBackward0 saved w (its `other`) as it is
    # edges run from inputs towards the output
    by_label = {v: k for k, v in nodes.items()}
    assert f"{by_label['MulBackward0']} -> {by_label['AddBackward0']}" in dot
    out = by_label["output\\nf64[]"]
    assert f"{by_label['MeanBackward0']} -> {out}" in dot


def test_to_dot_options_and_unnamed_leaves():
    x = symgrad.tensor([2.0], requires_grad=True)
    z = x ** 3
    dot = viz.to_dot(z, show_saved=False, show_attrs=True)
    assert "PowBackward0\\nexponent: 3" in dot
    assert "orange" not in dot and "dashed" not in dot
    assert 'label="f32[1]"' in dot                        # a leaf not in params has no name
    pair = viz.to_dot((z, z * 2))
    assert "output 0" in pair and "output 1" in pair


def test_to_dot_after_backward_has_no_saved_tensors():
    loss, params = _w2_eager()
    loss.backward()
    dot = viz.to_dot(loss, params)
    assert "MulBackward0" in dot and "orange" not in dot


def test_print_graph_in_the_seeds_style():
    x = symgrad.tensor([2.0], requires_grad=True)
    y = x ** 2
    z = y + 3
    buf = io.StringIO()
    viz.print_graph(z, file=buf)
    lines = buf.getvalue().splitlines()
    assert [re.sub(r"0x[0-9a-f]+", "0x...", line) for line in lines] == [
        "<AddBackward0 object at 0x...>",
        "  <PowBackward0 object at 0x...>",
        "    <AccumulateGrad object at 0x...>",
    ]
    buf = io.StringIO()
    viz.print_graph(x * x, show_rules=True, params={"x": x}, file=buf)
    assert buf.getvalue().splitlines() == ["MulBackward0   <- mul.Tensor", "  AccumulateGrad   (leaf x: f32[1])",
                                           "  AccumulateGrad   (leaf x: f32[1])   (shown above)"]
    buf = io.StringIO()
    viz.print_graph(x, file=buf)
    assert "has no grad_fn" in buf.getvalue()


def test_ir_to_dot_forward_and_joint():
    g = symgrad.trace(lambda x: (symgrad.sin(x) * x).sum(), np.ones(3))
    dot = viz.ir_to_dot(g)
    assert 'v_x [label="x\\nf64[3]" fillcolor=lightblue]' in dot
    assert "sin  # sin(x)" in dot and "v_x -> v_sin" in dot and "v_sum -> out_0" in dot
    joint = viz.ir_to_dot(autodiff(g), name="joint")
    assert "tangent_0\\nf64[]" in joint and "<- SinBackward0 of %sin" in joint and "<- MulBackward0 of %mul" in joint


def test_make_dot_returns_a_graphviz_digraph():
    graphviz = pytest.importorskip("graphviz")
    loss, params = _w2_eager()
    d = viz.make_dot(loss, params=params)
    assert isinstance(d, graphviz.Digraph)
    for name in ("MeanBackward0", "MulBackward0", "TanhBackward0"):
        assert name in d.source
    assert d.source.count(" -> ") == viz.to_dot(loss, params).count(" -> ")


@pytest.mark.skipif(shutil.which("dot") is None, reason="the Graphviz `dot` program is not installed")
def test_make_dot_renders_like_torchviz(tmp_path):
    pytest.importorskip("graphviz")
    loss, params = _w2_eager()
    path = viz.make_dot(loss, params=params).render(str(tmp_path / "graph"), format="png")
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert viz.render(viz.to_dot(loss, params), "svg").lstrip().startswith(b"<?xml")


def test_make_dot_without_graphviz_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "graphviz", None)  # `import graphviz` now raises ImportError
    loss, params = _w2_eager()
    with pytest.raises(ImportError, match=r"pip install graphviz .*to_dot"):
        viz.make_dot(loss, params=params)
    assert viz.to_dot(loss, params).startswith("digraph")  # the text path needs nothing


def test_render_without_dot(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    with pytest.raises(viz.DotNotFound, match="not installed"):
        viz.render("digraph g {}", "png")
