"""conv2d (+ max_pool2d) forward+backward: symgrad eager and compiled vs torch eager, one thread.

    python -m benchmarks.conv              # N=32, C=16->32, 32x32, k=3, padding 1, float32
    python -m benchmarks.conv --quick      # fewer, shorter samples

One call = leaves created, ``loss = max_pool2d(conv2d(x, w, b, padding=1), 2).square().mean()`` (the
square makes the gradient depend on the values), ``loss.backward()``; the gradients of x, w and b.
Implementations:

- ``symgrad eager``: ``symgrad.nn.functional`` (im2col by ``_im2col``, then one batched matmul);
- ``symgrad compiled``: the same function through ``symgrad.compile`` (Numba backend);
- ``torch eager``: ``torch.nn.functional`` (its own CPU convolution kernels).

Before timing, every implementation's loss and gradients are checked against torch's (a mismatch
aborts).  One thread everywhere: BLAS and OpenMP via the environment variables below (set before
numpy is imported), Numba via NUMBA_NUM_THREADS, torch via ``set_num_threads(1)``.  Timings are
reported, never asserted.
"""

import os
import sys

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
               "NUMEXPR_NUM_THREADS", "NUMBA_NUM_THREADS")
if __name__ == "__main__":
    for _var in THREAD_VARS:
        os.environ[_var] = "1"

import argparse  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.timing import interleaved  # noqa: E402


def _program(F):
    def loss(x, w, b):
        y = F.max_pool2d(F.conv2d(x, w, b, padding=1), 2)
        return (y * y).mean()
    return loss


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--n", type=int, default=32)
    parser.add_argument("--cin", type=int, default=16)
    parser.add_argument("--cout", type=int, default=32)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--k", type=int, default=3)
    args = parser.parse_args(argv)

    import torch

    import symgrad
    import symgrad.nn.functional as SF
    torch.set_num_threads(1)

    r = np.random.default_rng(0)
    arrays = [r.standard_normal((args.n, args.cin, args.size, args.size)).astype(np.float32),
              (r.standard_normal((args.cout, args.cin, args.k, args.k)) * 0.1).astype(np.float32),
              r.standard_normal(args.cout).astype(np.float32)]
    sym_loss, torch_loss = _program(SF), _program(torch.nn.functional)
    compiled = symgrad.compile(sym_loss)

    def run_symgrad(fn):
        def call():
            leaves = [symgrad.tensor(a, requires_grad=True) for a in arrays]
            loss = fn(*leaves)
            loss.backward()
            return loss.item(), [t.grad.numpy() for t in leaves]
        return call

    def run_torch():
        leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
        loss = torch_loss(*leaves)
        loss.backward()
        return loss.item(), [t.grad.numpy() for t in leaves]

    impls = {"symgrad eager": run_symgrad(sym_loss), "symgrad compiled": run_symgrad(compiled),
             "torch eager": run_torch}
    want_loss, want_grads = run_torch()
    for name, call in impls.items():
        got_loss, got_grads = call()
        np.testing.assert_allclose(got_loss, want_loss, rtol=1e-4, err_msg=name)
        for g, w in zip(got_grads, want_grads):
            np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-6 * np.abs(w).max(), err_msg=name)

    shape = f"N={args.n}, C={args.cin}->{args.cout}, {args.size}x{args.size}, k={args.k}, float32, 1 thread"
    print(f"conv2d(padding=1) + max_pool2d(2) forward+backward, {shape}")
    timings = interleaved(impls, samples=5 if args.quick else 9, min_sample_time=0.05 if args.quick else 0.2)
    base = timings["torch eager"].median
    for name, t in timings.items():
        print(f"  {name:18s} {t.median * 1e3:9.2f} ms/call   {t.median / base:5.2f}x torch eager")
    return 0


if __name__ == "__main__":
    sys.exit(main())
