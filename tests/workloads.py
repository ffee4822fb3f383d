"""The benchmark workloads the compiler tests run: W1-W3 as in ``examples/losses.py`` (the
functions ``symgrad inspect`` shows), and W5, a softmax cross-entropy."""

import symgrad
from examples.losses import w1, w2, w3

__all__ = ["w1", "w2", "w3", "w5"]


def w5(L, labels):
    """W5: mean(logsumexp(L, dim=1) - L[rows, labels])."""
    return (symgrad.logsumexp(L, dim=1) - L[symgrad.arange(L.shape[0]), labels]).mean()
