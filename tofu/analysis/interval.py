"""Symbolic interval analysis of TDL index expressions (PAPER.md, "Partition analysis of one operator").

Input: an index expression of a TDL access and, for every index variable in scope, its interval.
Output: the :class:`Interval` of values the expression takes.

Each index variable ``v`` ranges over ``[v.lo, v.hi]``, two *bound symbols* (a worker's share of ``v`` once a
strategy is chosen; the whole extent otherwise). Bounds are index expressions over these symbols: affine for
affine accesses (``x*2 + dx - 1`` over ``x in [x.lo, x.hi]``, ``dx in [0, 2]`` gives ``[2 x.lo - 1, 2 x.hi + 1]``),
with floor divisions for reshapes. One transfer function per expression kind:

    v                 -> [v.lo, v.hi]
    sum_i c_i a_i + c -> [sum c_i (c_i > 0 ? lo_i : hi_i) + c,  sum c_i (c_i > 0 ? hi_i : lo_i) + c]
    a // k            -> [lo // k, hi // k]                     (monotone)
    a % k             -> [0, k - 1]                             (sound fallback)
    data-dependent    -> the whole dimension                    (sound fallback, Interval.whole())

An interval is evaluated at concrete bound values with :meth:`Interval.evaluate` and clipped to the tensor.
"""
from __future__ import annotations

import math
from functools import cached_property
from collections.abc import Mapping
from dataclasses import dataclass

from tofu.errors import AnalysisError
from tofu.tdl.expr import Affine, FloorDiv, IndexExpr, Mod, Var


@dataclass(frozen=True)
class BoundSym(IndexExpr):
    """The lower (``side == 'lo'``) or upper bound of index variable ``var``."""

    var: Var
    side: str

    def __str__(self) -> str:
        return f"{self.var.name}.{self.side}"


def lo(v: Var) -> Affine:
    return Affine(((BoundSym(v, "lo"), 1),), 0)


def hi(v: Var) -> Affine:
    return Affine(((BoundSym(v, "hi"), 1),), 0)


@dataclass(frozen=True)
class Interval:
    """``[lower, upper]``, both inclusive; a None bound means the end of the dimension (sound fallback).

    ``steps`` record the lattice the values lie on: ``x*2 + dx*2 - 1`` with x and dx ranging takes every
    other integer from its lower bound. Each step is a coefficient and the variable whose range makes it
    (None: a range that always has width); the lattice's stride is the gcd of the steps whose variable does
    range, so that clipping at a tensor's border stays exact.
    """

    lower: IndexExpr | None
    upper: IndexExpr | None
    steps: tuple[tuple[int, Var | None], ...] = ((1, None),)

    @staticmethod
    def whole() -> "Interval":
        return Interval(None, None)

    @staticmethod
    def const(a: int, b: int) -> "Interval":
        if a > b:
            raise AnalysisError(f"empty interval [{a}, {b}]")
        return Interval(Affine((), a), Affine((), b), ((1, None),) if b > a else ())

    @staticmethod
    def of_var(v: Var) -> "Interval":
        return Interval(lo(v), hi(v), ((1, v),))

    @property
    def is_whole(self) -> bool:
        return self.lower is None and self.upper is None

    def evaluate(self, values: Mapping[BoundSym, int], extent: int) -> tuple[int, int]:
        """Concrete ``(lo, hi)`` for bound values, unclipped (None bounds become 0 and extent - 1)."""
        lower, upper = self._forms
        a = 0 if self.lower is None else _apply(lower, self.lower, values)
        b = extent - 1 if self.upper is None else _apply(upper, self.upper, values)
        return a, b

    @cached_property
    def _forms(self):
        """The bounds as (const, ((coeff, symbol), ...)) when linear in bound symbols (the fast path)."""
        return _linear_form(self.lower), _linear_form(self.upper)

    @cached_property
    def _step_keys(self) -> tuple:
        return tuple((step, None, None) if v is None else (step, BoundSym(v, "lo"), BoundSym(v, "hi"))
                     for step, v in self.steps)

    def stride(self, values: Mapping[BoundSym, int]) -> int:
        g = 0
        for step, lo_key, hi_key in self._step_keys:
            if lo_key is None or values[hi_key] > values[lo_key]:
                g = math.gcd(g, step)
        return g or 1

    def clip(self, values: Mapping[BoundSym, int], extent: int) -> tuple[int, int, int, int]:
        """``(a, b, lo, hi)``: the interval evaluated, and clipped to ``[0, extent - 1]`` on its lattice."""
        a, b = self.evaluate(values, extent)
        lo, hi = max(a, 0), min(b, extent - 1)
        g = self.stride(values) if self.lower is not None else 1
        if g > 1:
            lo += (a - lo) % g
            hi -= (hi - a) % g
        return a, b, lo, hi

    def __str__(self) -> str:
        return f"[{'0' if self.lower is None else self.lower}, {'end' if self.upper is None else self.upper}]"


def bound(e: IndexExpr, env: Mapping[Var, Interval]) -> Interval:
    """The interval of ``e`` when every variable lies in its interval of ``env``.

    Raises:
        AnalysisError: ``e`` uses a variable that ``env`` lacks.
    """
    if isinstance(e, Var):
        try:
            return env[e]
        except KeyError:
            raise AnalysisError(f"index variable '{e}' is not in scope") from None
    if isinstance(e, Affine):
        lower: IndexExpr | None = Affine((), e.const)
        upper: IndexExpr | None = Affine((), e.const)
        steps: tuple = ()
        for atom, c in e.terms:
            iv = bound(atom, env)
            a, b = (iv.lower, iv.upper) if c > 0 else (iv.upper, iv.lower)
            lower = None if lower is None or a is None else lower + a * c
            upper = None if upper is None or b is None else upper + b * c
            steps += tuple((abs(c) * k, v) for k, v in iv.steps)
        return Interval(lower, upper, tuple(dict.fromkeys(steps)))
    if isinstance(e, FloorDiv):
        iv = bound(e.arg, env)
        return Interval(_floordiv(iv.lower, e.k), _floordiv(iv.upper, e.k))
    if isinstance(e, Mod):
        return Interval.const(0, e.k - 1)
    raise AnalysisError(f"no transfer function for index {e!r}")


def _floordiv(b: IndexExpr | None, k: int) -> IndexExpr | None:
    """``b // k``, simplified when every coefficient is a multiple of k: (k a + c) // k = a + c // k."""
    if b is None:
        return None
    if isinstance(b, Affine) and all(c % k == 0 for _, c in b.terms):
        return Affine(tuple((a, c // k) for a, c in b.terms), b.const // k)
    return b // k


def _linear_form(e: IndexExpr | None):
    if not isinstance(e, Affine) or not all(type(a) is BoundSym for a, _ in e.terms):
        return None
    return e.const, tuple((c, a) for a, c in e.terms)


def _apply(form, e: IndexExpr, values: Mapping) -> int:
    if form is None:
        return evaluate_index(e, values)
    total, terms = form
    for c, a in terms:
        total += c * values[a]
    return total


def evaluate_index(e: IndexExpr, values: Mapping) -> int:
    """The integer value of an index expression for concrete values of its variables / bound symbols."""
    if isinstance(e, (Var, BoundSym)):
        try:
            return int(values[e])
        except KeyError:
            raise AnalysisError(f"no value for '{e}'") from None
    if isinstance(e, Affine):
        total = e.const
        for a, c in e.terms:
            if type(a) is BoundSym or type(a) is Var:
                try:
                    total += c * values[a]
                except KeyError:
                    raise AnalysisError(f"no value for '{a}'") from None
            else:
                total += c * evaluate_index(a, values)
        return total
    if isinstance(e, FloorDiv):
        return evaluate_index(e.arg, values) // e.k
    if isinstance(e, Mod):
        return evaluate_index(e.arg, values) % e.k
    raise AnalysisError(f"cannot evaluate index {e!r}")
