"""Example losses for `symgrad inspect` and `symgrad graph` (the W1-W3 workloads of the benchmarks).

    symgrad inspect examples/losses.py:w1 --arg x=f64[1000]
    symgrad inspect examples/losses.py:w2 --arg x=f64[1000,1000] --arg w=f64[1000] --arg b=f64[1000]
    symgrad inspect examples/losses.py:w3 --arg X=f64[256,64] --arg W1=f64[64,128] --arg b1=f64[128] \\
        --arg W2=f64[128,1] --arg b2=f64[1] --arg Y=f64[256,1] --wrt W1,b1,W2,b2
    symgrad graph examples/losses.py:w2 --arg x=f64[4,3] --arg w=f64[3] --arg b=f64[3] -o w2.svg

Each is written with `symgrad.` ops, so it runs eagerly (`w1(symgrad.tensor(...))`) and under
`symgrad.compile` alike.
"""

import symgrad


def w1(x):
    """W1: sum(sin(x)*exp(-x*x) + log1p(x*x)*tanh(x)) - a chain of elementwise ops and one sum."""
    return (symgrad.sin(x) * symgrad.exp(-x * x) + symgrad.log1p(x * x) * symgrad.tanh(x)).sum()


def w2(x, w, b):
    """W2: mean(tanh(x*w + b)**2), w and b broadcast over the rows of x."""
    return (symgrad.tanh(x * w + b) ** 2).mean()


def w3(X, W1, b1, W2, b2, Y):
    """W3: a one-hidden-layer MLP's mean squared error, mean((tanh(X@W1+b1)@W2+b2 - Y)**2)."""
    hidden = symgrad.tanh(X @ W1 + b1)
    return ((hidden @ W2 + b2 - Y) ** 2).mean()
