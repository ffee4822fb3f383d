"""A scalar loss's gradients computed by the forward kernel: ``symgrad.compile``'s ``scalar_loss="joint"``
for ``torch.compile(backend="symgrad")``.

For a region returning one floating scalar (a loss), the backward's input is one number, the
gradient of whatever follows the loss with respect to it (1 for ``loss.backward()``), and the
vector-Jacobian product is linear in it.  So the partition below (AOTAutograd's ``partition_fn``)
builds a forward that evaluates AOTAutograd's whole joint graph with that number set to 1 -- symgrad
fuses the loss and its gradients into one pass (one row kernel for a cross-entropy, one loop for an
elementwise loss) instead of a forward that writes activations out and a backward that reads them
back and recomputes what the forward had -- and saves the gradients.  The backward graph multiplies
each saved gradient by the incoming number; :func:`scaled_backward` runs it, handing the saved
gradient itself over when that number is 1 and autograd frees the saved tensors after this backward
(no ``retain_graph``), else multiplying.

Anything else -- several outputs, symbolic sizes (dynamic batch), random ops, an op symgrad does not
lower -- is partitioned by AOTAutograd's min-cut partitioner as before (``scalar_loss="split"`` asks
for that always).
"""

from __future__ import annotations

import torch
from torch._functorch import partitioners

aten = torch.ops.aten

# marks the multiplications of the backward graph this module builds
SCALE_TAG = "symgrad_scaled_gradient"


def _static_tensor(val) -> bool:
    return isinstance(val, torch.Tensor) and all(isinstance(d, int) for d in val.shape)


def _loss_tangent(joint_module, num_fwd_outputs: int):
    """The one tangent placeholder of a joint graph whose forward returns one floating scalar and
    whose every size is static, or None."""
    from .runner import unsupported_ops

    placeholders = joint_module.graph.find_nodes(op="placeholder")
    tangents = [p for p in placeholders if partitioners._is_tangent(p)]
    if num_fwd_outputs != 1 or len(tangents) != 1:
        return None
    if any(not (partitioners._is_primal(p) or partitioners._is_tangent(p)) for p in placeholders):
        return None                     # RNG seeds, backward state: leave them to the min-cut partitioner
    if not all(_static_tensor(p.meta.get("val")) for p in placeholders):
        return None
    (output,) = joint_module.graph.find_nodes(op="output")
    loss = output.args[0][0]
    val = loss.meta.get("val") if isinstance(loss, torch.fx.Node) else None
    t = tangents[0].meta["val"]
    if not _static_tensor(val) or val.shape != () or not val.dtype.is_floating_point or t.shape != ():
        return None
    if unsupported_ops(joint_module):
        return None                     # a graph that stays torch's: the usual partition
    return tangents[0]


def partition(joint_module, joint_inputs, *, num_fwd_outputs: int, **kwargs):
    """AOTAutograd's ``partition_fn``: gradients at seed 1 computed in the forward for a scalar loss
    (module docstring), else the min-cut partition."""
    tangent = _loss_tangent(joint_module, num_fwd_outputs)
    if tangent is None:
        return split_partition(joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kwargs)
    graph = torch.fx.Graph()
    env: dict = {}
    out = list(graph.graph_copy(joint_module.graph, env))
    output = graph.output(out)
    output.meta = dict(joint_module.graph.find_nodes(op="output")[0].meta)   # AOTAutograd's output descriptions
    seed = env[tangent]
    # the seed 1, a forward node (it reads no tangent)
    with graph.inserting_after(seed):
        one = graph.call_function(aten.full.default, ([], 1.0),
                                  {"dtype": seed.meta["val"].dtype, "layout": torch.strided,
                                   "device": torch.device("cpu"), "pin_memory": False})
    one.meta = dict(seed.meta)
    # every node reading the tangent, again with the seed 1 instead: the gradients at seed 1
    at_one = {seed: one}
    with graph.inserting_before(output):
        for node in list(graph.nodes):
            if node.op == "call_function" and any(a in at_one for a in node.all_input_nodes):
                at_one[node] = graph.node_copy(node, lambda a: at_one.get(a, a))
    fwd_out, grads = out[:num_fwd_outputs], out[num_fwd_outputs:]
    if any(isinstance(g, torch.fx.Node) and g not in at_one for g in grads):
        # a gradient not computed from the seed (an input passed through): the usual partition
        return split_partition(joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kwargs)
    saved, scaled = [], []
    with graph.inserting_before(output):
        for g in grads:
            if not isinstance(g, torch.fx.Node):
                scaled.append(g)
                continue
            base = at_one[g]
            if base not in saved:
                saved.append(base)
            mul = graph.call_function(aten.mul.Tensor, (base, seed))
            mul.meta = {"val": g.meta["val"], SCALE_TAG: True}
            scaled.append(mul)
    output.args = ([*fwd_out, *scaled],)
    graph.eliminate_dead_code()
    seeded = torch.fx.GraphModule(joint_module, graph)
    return partitioners._extract_fwd_bwd_modules(seeded, saved, [], num_fwd_outputs=num_fwd_outputs,
                                                 ignore_must_be_in_fw_bw=True)


def split_partition(joint_module, joint_inputs, *, num_fwd_outputs: int, **kwargs):
    """AOTAutograd's min-cut partition (activations saved, the rest recomputed in the backward)."""
    return partitioners.min_cut_rematerialization_partition(joint_module, joint_inputs,
                                                            num_fwd_outputs=num_fwd_outputs, **kwargs)


def scaled_plan(gm):
    """For a backward graph built by :func:`partition`: per gradient, (saved input position, seed input
    position) or None; None when ``gm`` is not such a graph."""
    placeholders = {p: i for i, p in enumerate(gm.graph.find_nodes(op="placeholder"))}
    (output,) = gm.graph.find_nodes(op="output")
    plan = []
    for g in output.args[0]:
        if g is None:
            plan.append(None)
            continue
        if not isinstance(g, torch.fx.Node) or not g.meta.get(SCALE_TAG) or g.target is not aten.mul.Tensor:
            return None
        base, seed = g.args
        if base not in placeholders or seed not in placeholders:
            return None
        plan.append((placeholders[base], placeholders[seed]))
    if any(n.op not in ("placeholder", "output") and not n.meta.get(SCALE_TAG) for n in gm.graph.nodes):
        return None
    return plan


def scaled_backward(plan):
    """The boxed backward of :func:`partition`'s backward graph: each saved gradient times the seed."""
    def run(*args):
        if len(args) == 1 and isinstance(args[0], list):
            boxed = args[0]
            args = tuple(boxed)
            boxed.clear()
        # autograd frees the saved gradients after this backward unless the graph is retained: then
        # each may become the gradient itself (once: two inputs never share one gradient tensor)
        hand_over = not torch._C._autograd._get_current_graph_task_keep_graph()
        handed: set[int] = set()
        out = []
        for entry in plan:
            if entry is None:
                out.append(None)
                continue
            base, seed = args[entry[0]], args[entry[1]]
            if hand_over and entry[0] not in handed and seed.item() == 1.0:
                handed.add(entry[0])
                out.append(base)
            else:
                out.append(base * seed)
        return out
    run._boxed_call = True
    return run
