"""Op facts: ``tags:`` of the rule table (``symgrad/rules/table.py``), read through ``symgrad.rules.facts``.

Covers: the tag vocabulary and its validation (an unknown tag is a RuleTableError naming the entry
and line), the facts of the shipped table (each backend's former op list, exactly), the IR's own
nodes, and user-registered ops (with and without tags) as code generators see them.
"""

from __future__ import annotations

import numpy as np
import pytest

import symgrad
from codegen import op_facts
from symgrad.ir import opinfo
from symgrad.rules import facts
from symgrad.rules.table import TAGS, RuleTableError, load_rules, parse_rules

ENTRY = "- name: cube(Tensor self) -> Tensor\n  elementwise: self**3\n  self: 3 * grad * self**2\n"


def test_every_shipped_tag_is_in_the_vocabulary():
    used = set().union(*(r.tags for r in load_rules().values()))
    assert used <= set(TAGS)
    assert set(facts.TAGS) == set(TAGS)


def test_tags_are_optional_and_parsed():
    assert parse_rules(ENTRY)["cube"].tags == frozenset()
    rule = parse_rules(ENTRY + "  tags: [view, recomputable]\n")["cube"]
    assert rule.tags == {"view", "recomputable"}


@pytest.mark.parametrize("tags, needle", [
    ("[bogus]", "unknown tag 'bogus'"),
    ("view", "tags must be a list"),
    ("[reduce_sum, reduce_mean]", "at most one reduce_"),
    ("[{view: 1}]", "tags must be a list"),
])
def test_bad_tags_name_the_entry_and_line(tags, needle):
    text = ENTRY + "\n- name: foo(Tensor self) -> Tensor\n  tags: " + tags + "\n  self: grad\n"
    with pytest.raises(RuleTableError, match=r"line 5 \(foo\)") as info:
        parse_rules(text)
    assert needle in str(info.value)


def test_shipped_facts_are_the_backends_former_lists():
    assert facts.ops_tagged("view") == {"expand", "view", "_unsafe_view", "t", "transpose.int", "permute",
                                        "unsqueeze", "squeeze.dim", "detach",
                                        "_check_range",  # torch.nn.functional
                                        "diagonal", "as_strided"}  # PyTorch's view ops
    assert facts.ops_tagged("fresh_result") == {"mm", "addmm", "mv", "bmm", "dot", "sum", "sum.dim_IntList", "mean",
                                                "mean.dim", "amax", "amin", "logsumexp", "index_put_add",
                                                "where.self",
                                                "flip", "keep_last_writes",  # numpy surface: shape
                                                "diagonal_backward",  # views
                                                "_im2col", "_col2im", "_dropout_mask",  # torch.nn.functional
                                                "nll_loss_backward",
                                                # torch surface: selection and repetition
                                                "gather", "value_selecting_reduction_backward", "repeat",
                                                "repeat_backward", "masked_fill.Scalar",
                                                # torch.nn.functional with PyTorch's nodes
                                                "convolution", "convolution_backward_input",
                                                "convolution_backward_weight", "max_pool2d",
                                                "max_pool2d_with_indices_backward", "_max_pool2d_pick",
                                                "avg_pool2d", "avg_pool2d_backward", "constant_pad_nd", "embedding",
                                                "embedding_dense_backward", "native_layer_norm", "masked_fill.Tensor",
                                                "linalg_vector_norm", "linalg_vector_norm.inf",
                                                "linalg_vector_norm.zero", "reflection_pad1d", "reflection_pad2d",
                                                "reflection_pad3d", "replication_pad1d", "replication_pad2d",
                                                "replication_pad3d", "_index_pad", "_index_pad_backward",
                                                "_scaled_dot_product_flash_attention_for_cpu"}
    assert facts.ops_tagged("same_values") == {"detach", "view", "_unsafe_view", "expand", "clone"}
    assert facts.ops_tagged("broadcast") == {"expand"}
    assert facts.ops_tagged("recomputable") == {
        "expand", "view", "_unsafe_view", "unsqueeze", "squeeze", "squeeze.dim", "squeeze.dims", "squeeze_",
        "squeeze_.dim", "t", "transpose.int", "permute", "detach", "constant", "_to_copy", "clone",
        "select.int", "slice.Tensor",
        "flip",  # numpy surface: shape
        "diagonal"}  # views
    kinds = {op: facts.reduction_kind(op) for op in load_rules() if facts.reduction_kind(op)}
    assert kinds == {"sum": "sum", "sum.dim_IntList": "sum", "mean": "mean", "mean.dim": "mean",
                     "amax": "amax", "amin": "amin", "max": "amax", "min": "amin"}
    assert {op for op in kinds if facts.reduces_over_dim(op)} == {"sum.dim_IntList", "mean.dim", "amax", "amin"}


def test_ir_nodes_and_unknown_ops():
    assert facts.has("detach", "same_values") and facts.has("constant", "recomputable")
    assert facts.tags("no_such_op") == frozenset() and facts.reduction_kind("no_such_op") is None
    assert facts.tags("no_such_op", opinfo.rule) == frozenset()
    with pytest.raises(ValueError, match="unknown tag"):
        facts.has("view", "bogus")
    with pytest.raises(ValueError, match="unknown tag"):
        facts.ops_tagged("bogus")


@pytest.fixture
def _registered_ops():
    from symgrad.ops import custom

    yield
    for name in ("f_rowtotal", "f_plain"):   # registration is global: leave the table as it was
        custom._unregister(name)


def test_user_registered_ops_carry_their_tags(_registered_ops):
    symgrad.register_op("""
- name: f_rowtotal(Tensor self, int[1] dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor
  tags: [reduce_sum, fresh_result]
  self: sum_backward(grad, shape(self), dim, keepdim)

- name: f_plain(Tensor self) -> Tensor
  elementwise: self * 2
  self: 2 * grad
""", forwards={"f_rowtotal": lambda self, dim, keepdim=False, dtype=None: self.sum(axis=tuple(dim),
                                                                                  keepdims=keepdim)})
    assert op_facts.reduction_kind("f_rowtotal") == "sum" and op_facts.reduces_over_dim("f_rowtotal")
    assert op_facts.has("f_rowtotal", "fresh_result") and not op_facts.has("f_rowtotal", "view")
    assert opinfo.rule("f_plain").tags == frozenset() and op_facts.reduction_kind("f_plain") is None
    from symgrad.ops.custom import f_rowtotal

    x = symgrad.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    f_rowtotal(x, [1]).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones((2, 3)))
