"""Logistic regression fitted with L-BFGS over a local Dask cluster: run it as a plain script.

    python examples/dask_logistic.py            # 2 worker processes
    python examples/dask_logistic.py --threads  # workers as threads of this process (starts faster)

The loss is defined right here, in ``__main__``: symgrad.dask sends it to the workers by value
(cloudpickle), and each worker compiles it once.  docs/dask.md shows this file; tests/test_dask.py
runs it.
"""

import sys

import dask.array as da
import numpy as np
import scipy.optimize
from distributed import Client, LocalCluster

import symgrad
import symgrad.dask


def logistic(theta, X, y):
    z = X @ theta[:-1] + theta[-1]
    return (symgrad.log1p(symgrad.exp(z)) - y * z).sum()


if __name__ == "__main__":      # worker processes start by importing this file: create the cluster only here
    processes = "--threads" not in sys.argv
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=processes, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        rng = da.random.default_rng(0)
        X = rng.standard_normal((200_000, 8), chunks=(50_000, 8))          # rows chunked along axis 0
        w_true = np.linspace(-1, 1, 8)
        y = ((X @ w_true + 0.5 + rng.logistic(size=200_000, chunks=50_000)) > 0).astype(np.float64)
        X, y = client.persist([X, y])                                        # keep the data on the workers

        vg = symgrad.dask.value_and_grad(logistic, argnums=0, data_argnums=(1, 2), reduction="sum")
        fit = scipy.optimize.minimize(vg, np.zeros(9), args=(X, y), jac=True, method="L-BFGS-B")
        print("loss sent", "by value" if isinstance(vg.loss_ref, symgrad.dask.LossByValue) else "by reference")
        print("converged:", fit.success, "iterations:", fit.nit)
        print("weights:", np.round(fit.x[:-1], 2), "intercept:", round(float(fit.x[-1]), 2))
