"""The ``symgrad`` command.

    symgrad demo            a guided tour: a loss, its grad_fn graph, the rules used, checked gradients
    symgrad rules [OP]      the rule table (all entries, or those of one op)

>>> main(["rules", "tanh"])        # doctest: +ELLIPSIS
tanh(Tensor self) -> Tensor
...
"""

from __future__ import annotations

import argparse
import sys
import time


def _graph_lines(node, depth: int = 0, seen=None) -> list[str]:
    """The grad_fn graph below ``node`` as an indented tree (shared nodes are shown once)."""
    seen = set() if seen is None else seen
    name = type(node).__name__
    if node in seen:
        return ["  " * depth + f"{name} (shown above)"]
    seen.add(node)
    rule = getattr(node, "_rule", None)
    label = f"{name}   <- {rule.schema.key}" if rule is not None else name
    if hasattr(node, "variable"):
        label += f"   (leaf of shape {list(node.variable.shape)})"
    lines = ["  " * depth + label]
    for child, _ in node.next_functions:
        if child is not None:
            lines += _graph_lines(child, depth + 1, seen)
    return lines


def cmd_demo(args) -> int:
    import numpy as np

    import symgrad

    print("symgrad demo: the W1 loss  sum(sin(x)*exp(-x*x) + log1p(x*x)*tanh(x))\n")
    rng = np.random.default_rng(0)
    data = rng.uniform(-2, 2, args.size)
    x = symgrad.tensor(data, dtype=symgrad.float64, requires_grad=True)
    loss = (symgrad.sin(x) * symgrad.exp(-x * x) + symgrad.log1p(x * x) * symgrad.tanh(x)).sum()
    print(f"loss = {loss.item():.6f}   ({loss!r})\n")
    print("grad_fn graph (each node is generated from one entry of derivatives.yaml):")
    for line in _graph_lines(loss.grad_fn):
        print("  " + line)

    from .ops.table import load_rules

    rules = load_rules()
    print("\nrules used:")
    for key in ("sin", "exp", "mul.Tensor", "log1p", "tanh", "add.Tensor", "neg", "sum"):
        rule = rules[key]
        formulas = "; ".join(f"{k}: {f.text}" for k, f in rule.formulas.items())
        print(f"  {rule.node_name:<14} {formulas}")

    loss.backward()
    grad = x.grad.numpy()
    # central differences of the same numpy expression
    f = lambda v: float(np.sum(np.sin(v) * np.exp(-v * v) + np.log1p(v * v) * np.tanh(v)))  # noqa: E731
    eps = 1e-6
    picks = rng.choice(args.size, size=min(5, args.size), replace=False)
    worst = 0.0
    for i in picks:
        e = np.zeros_like(data)
        e[i] = eps
        fd = (f(data + e) - f(data - e)) / (2 * eps)
        worst = max(worst, abs(fd - grad[i]) / max(1.0, abs(fd)))
    print(f"\ngradient check against central finite differences at {len(picks)} points: "
          f"max relative error {worst:.1e} -> {'OK' if worst < 1e-6 else 'MISMATCH'}")

    def eager():
        t = symgrad.tensor(data, dtype=symgrad.float64, requires_grad=True)
        (symgrad.sin(t) * symgrad.exp(-t * t) + symgrad.log1p(t * t) * symgrad.tanh(t)).sum().backward()

    def numpy_hand():
        s, c, e, l1, th = np.sin(data), np.cos(data), np.exp(-data * data), np.log1p(data * data), np.tanh(data)
        val = np.sum(s * e + l1 * th)
        g = c * e - 2 * data * s * e + 2 * data / (1 + data * data) * th + l1 * (1 - th * th)
        return val, g

    def best_of(fn, reps=5):
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    te, tn = best_of(eager), best_of(numpy_hand)
    print(f"\nforward+backward of {args.size} elements (best of 5):")
    print(f"  symgrad eager          {te * 1e3:8.2f} ms")
    print(f"  numpy hand-written     {tn * 1e3:8.2f} ms   (eager / numpy = {te / tn:.2f}x)")
    print("\nNext: `symgrad rules` lists the whole rule table; benchmarks/ compares with other tools.")
    return 0 if worst < 1e-6 else 1


def cmd_rules(args) -> int:
    from .ops.table import load_rules

    rules = load_rules()
    shown = 0
    for key, rule in rules.items():
        if args.op and rule.schema.name != args.op and key != args.op:
            continue
        shown += 1
        print(rule.schema.text)
        if rule.node_name:
            print(f"    node: {rule.node_name}   (derivatives.yaml line {rule.line})")
        if rule.elementwise is not None:
            print(f"    elementwise: {rule.elementwise}")
        for name, f in rule.formulas.items():
            print(f"    {name}: {f.text}")
        for name in rule.non_differentiable:
            print(f"    {name}: non_differentiable")
    if not shown:
        print(f"symgrad: no op named {args.op!r} in the rule table (try `symgrad rules` for the list)",
              file=sys.stderr)
        return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="symgrad", description="Inspectable autograd driven by one rule table.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="a guided tour on an example loss",
                          description="Run the W1 loss eagerly, print its grad_fn graph and the rules used, "
                                      "check the gradient by finite differences and time it. "
                                      "Example: symgrad demo --size 100000")
    demo.add_argument("--size", type=int, default=1_000_000, help="number of elements (default 1e6)")
    demo.set_defaults(func=cmd_demo)
    rules = sub.add_parser("rules", help="list the rule table, or one op's entries",
                           description="Print the derivatives.yaml entries: schema, node class, formulas. "
                                       "Example: symgrad rules pow")
    rules.add_argument("op", nargs="?", help="an op name such as mul or pow (default: all)")
    rules.set_defaults(func=cmd_rules)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``symgrad`` console script."""
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
