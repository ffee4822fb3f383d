"""Elementwise functions of the numpy surface that sympy lacks (or defines differently from numpy),
and scalar implementations of the special functions that neither ``math`` nor Numba provide.

The sympy classes give the rule table's elementwise forwards a derivative (``fdiff``), so the
table's tests can prove each rule against ``sympy.diff``; they print as the vocabulary names
of the same spelling.  ``cbrt`` is not sympy's ``cbrt`` (``x**(1/3)``, complex for negative x),
and ``sinc`` is numpy's normalized ``sin(pi x) / (pi x)``, not sympy's ``sin(x) / x``.

:func:`digamma_scalar` and :func:`polygamma_scalar` use only ``math``, so that
:mod:`codegen.scalar_math` compiles them with Numba, and the eager layer vectorises them where
scipy is missing.
"""

from __future__ import annotations

import math

import sympy


class logaddexp(sympy.Function):
    """``log(exp(a) + exp(b))`` without overflow (numpy.logaddexp)."""
    nargs = 2

    def fdiff(self, argindex=1):
        a, b = self.args
        return 1 / (1 + sympy.exp(b - a)) if argindex == 1 else 1 / (1 + sympy.exp(a - b))


class logaddexp2(sympy.Function):
    """``log2(2**a + 2**b)`` without overflow (numpy.logaddexp2)."""
    nargs = 2

    def fdiff(self, argindex=1):
        a, b = self.args
        return 1 / (1 + 2 ** (b - a)) if argindex == 1 else 1 / (1 + 2 ** (a - b))


class cbrt(sympy.Function):
    """The real cube root, negative for negative x (numpy.cbrt)."""
    nargs = 1

    def fdiff(self, argindex=1):
        return 1 / (3 * cbrt(self.args[0]) ** 2)


class sinc(sympy.Function):
    """numpy's normalized sinc, ``sin(pi x) / (pi x)``, 1 at 0."""
    nargs = 1

    def fdiff(self, argindex=1):
        x = self.args[0]
        return (sympy.cos(sympy.pi * x) - sinc(x)) / x


class _StepFunction(sympy.Function):
    """A piecewise-constant function of one argument: derivative 0 (sympy's floor has none)."""
    nargs = 1

    def fdiff(self, argindex=1):
        return sympy.S.Zero


class rint(_StepFunction):
    """Round half to even (numpy.rint, torch.round)."""


class floor(_StepFunction):
    """Round down (numpy.floor)."""


class ceil(_StepFunction):
    """Round up (numpy.ceil)."""


class xlogy(sympy.Function):
    """``x * log(y)``, 0 where x is 0 (unless y is nan), as scipy.special.xlogy."""
    nargs = 2

    def fdiff(self, argindex=1):
        x, y = self.args
        return sympy.log(y) if argindex == 1 else x / y


class xlog1py(sympy.Function):
    """``x * log1p(y)``, 0 where x is 0 (unless y is nan), as scipy.special.xlog1py."""
    nargs = 2

    def fdiff(self, argindex=1):
        from sympy.codegen.cfunctions import log1p
        x, y = self.args
        return log1p(y) if argindex == 1 else x / (1 + y)


SYMPY_CLASSES = {"logaddexp": logaddexp, "logaddexp2": logaddexp2, "cbrt": cbrt, "sinc": sinc, "rint": rint,
                 "floor": floor, "ceil": ceil, "xlogy": xlogy, "xlog1py": xlog1py}


# --- scalar digamma and polygamma -------------------------------------------------------------

# Bernoulli numbers B_2 .. B_18: the asymptotic series of digamma and of the Hurwitz zeta function.
_B2K = (1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730, 7.0 / 6, -3617.0 / 510, 43867.0 / 798)


_ALL_INTEGERS = 4503599627370496.0      # 2**52: every float64 of at least this magnitude is an integer


def lgamma_scalar(x):
    """log|Gamma(x)| as scipy.special.gammaln: inf at the poles (where Python's math raises), -inf at -inf."""
    if x == -math.inf:
        return x
    try:
        return math.lgamma(x)
    except ValueError:
        return math.inf


def digamma_scalar(x):
    """psi(x) = d/dx log Gamma(x): recurrence up to x >= 10, then the asymptotic series; reflection
    below 0.  Poles (0, -1, -2, ...) give nan, except -inf at +0 as scipy.special.digamma."""
    if x != x or x == math.inf:
        return x
    if x == 0.0:
        return -math.inf if math.copysign(1.0, x) > 0 else math.inf
    shift = 0.0
    if x < 0.0:
        # below -2**52 every float is an integer (and math.floor of them overflows Numba's int64)
        if x <= -_ALL_INTEGERS or x == math.floor(x):
            return math.nan
        # psi(x) = psi(1 - x) - pi cot(pi x); cot has period 1, so reduce exactly to [-1/2, 1/2] first
        shift = -math.pi / math.tan(math.pi * (x - math.floor(x + 0.5)))
        x = 1.0 - x
    acc = 0.0
    while x < 10.0:
        acc -= 1.0 / x
        x += 1.0
    inv2 = 1.0 / (x * x)
    series = 0.0
    power = inv2
    for k in range(len(_B2K)):
        series += _B2K[k] / (2 * (k + 1)) * power
        power *= inv2
    return shift + acc + math.log(x) - 0.5 / x - series


def polygamma_scalar(n, x):
    """The n-th derivative of digamma for integer n >= 1: (-1)**(n+1) n! zeta(n+1, x), the Hurwitz zeta
    summed directly up to x >= n + 15 and then by its Euler-Maclaurin series.  nan at the poles.

    Below 0, n = 1 and 2 (digamma's first two derivatives) reflect: differentiating
    psi(1 - x) - psi(x) = pi cot(pi x) n times gives psi_n(x) = (-1)**n psi_n(1 - x) - pi (d/dx)**n cot(pi x).
    Larger n sum their way up from x, which is refused (nan) below -2**20 rather than looping for long."""
    if n < 1 or x != x:             # n = 0 is digamma: printers spell polygamma(0, x) digamma(x)
        return math.nan
    if x <= 0.0 and (x <= -_ALL_INTEGERS or x == math.floor(x)):
        return math.nan
    if x == math.inf:
        return 0.0
    reflected = 1.0
    extra = 0.0
    if x < 0.0 and n <= 2:
        r = x - math.floor(x + 0.5)         # exact; sin**2 and cot have period 1
        sin_r = math.sin(math.pi * r)
        csc2 = 1.0 / (sin_r * sin_r)
        if n == 1:
            extra = math.pi * math.pi * csc2
            reflected = -1.0
        else:
            extra = -2.0 * math.pi ** 3 * (math.cos(math.pi * r) / sin_r) * csc2
        x = 1.0 - x
    elif x < -1048576.0:
        return math.nan
    s = n + 1
    acc = 0.0
    limit = n + 15.0
    while x < limit:
        acc += 1.0 / x ** s
        x += 1.0
    # zeta(s, x) ~ x**(1-s)/(s-1) + x**-s/2 + sum_k B_2k/(2k)! * s(s+1)...(s+2k-2) * x**(-s-2k+1)
    tail = x ** (1 - s) / (s - 1) + 0.5 / x ** s
    rising = float(s)                       # s(s+1)...(s+2k-2) for k = 1
    factorial = 2.0                         # (2k)!
    power = 1.0 / x ** (s + 1)              # x**(-s-2k+1) for k = 1
    inv2 = 1.0 / (x * x)
    for k in range(len(_B2K)):
        tail += _B2K[k] / factorial * rising * power
        rising *= (s + 2 * k + 1) * (s + 2 * k + 2)
        factorial *= (2 * k + 3) * (2 * k + 4)
        power *= inv2
    sign = 1.0 if n % 2 == 1 else -1.0
    return reflected * sign * math.gamma(n + 1.0) * (acc + tail) + extra
