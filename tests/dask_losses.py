"""Losses for tests/test_dask.py and benchmarks/dask_throughput.py.

They live in a module of their own because symgrad.dask sends a loss to the Dask workers by module
and name: each worker imports this file (the tests put its folder on the workers' PYTHONPATH).
"""

import os
import signal

import numpy as np

import symgrad


def w2(x, w, b):
    """W2: the mean over x[N, F] of tanh(x * w + b)**2 (a mean of per-row means: reduction="mean")."""
    return (symgrad.tanh(x * w + b) ** 2).mean()


def logistic(theta, X, y):
    """Logistic regression's negative log-likelihood, summed over rows (reduction="sum");
    theta holds the weights and, last, the intercept."""
    z = X @ theta[:-1] + theta[-1]
    return (symgrad.log1p(symgrad.exp(z)) - y * z).sum()


@symgrad.compile(parallel=False)
def logistic_mean(theta, X, y):
    """The same loss averaged over rows (reduction="mean"), compiled with options that travel with it."""
    z = X @ theta[:-1] + theta[-1]
    return (symgrad.log1p(symgrad.exp(z)) - y * z).mean()


def cross_entropy(W, X, labels):
    """Softmax regression: the row's log-probability of its label, picked with arange(n)."""
    logp = symgrad.log_softmax(X @ W, 1)
    return -logp[np.arange(X.shape[0]), labels].sum()


def gram(W, X):
    """sum(W * X.T @ X): a sum over rows of per-row outer products, so additive."""
    return ((X.t() @ X) * W).sum()


# --- losses that cannot be split over rows ---------------------------------------------------------

def centred(w, x):
    """Centres x over the rows of the chunk: each row's term depends on the chunk's mean."""
    return ((x - x.mean(0)) ** 2 * w).sum()


def row_softmax(w, x):
    """A softmax over axis 0 (the rows)."""
    return (symgrad.softmax(x * w, 0) * x).sum()


def differences(w, x):
    """Differences of consecutive rows."""
    return ((x[1:] - x[:-1]) ** 2 * w).sum()


def squared_sum(w, x):
    """The square of a sum over rows: no op mixes rows, but it is not additive."""
    return (x * w).sum() ** 2


def plus_constant(w, x):
    """A sum plus a constant: additive only as a mean."""
    return (x * w).sum() + 1.0


# --- fault injection -------------------------------------------------------------------------------

def kill_once(block, marker, target=3, block_id=None):
    """For ``map_blocks``: the first time block ``target`` is computed in a Dask worker, the worker
    process kills itself (SIGKILL) after creating ``marker``; later runs return the block unchanged."""
    if block_id is not None and block_id[0] == target and _in_worker():
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return block
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)
    return block


def _in_worker() -> bool:
    try:
        from distributed import get_worker

        get_worker()
    except (ImportError, ValueError):
        return False
    return True
