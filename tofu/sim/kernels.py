"""The kernel-time model: how long one kernel runs on a device, from its work, per op class.

Input: a kernel's op class, FLOPs and bytes, and a
:class:`~tofu.sim.hardware.Profile` whose ``kernels`` hold one :class:`~tofu.sim.hardware.ClassCurve` per
:class:`~tofu.sim.flops.OpClass`. Output: seconds. The engine (:mod:`tofu.sim.engine`) times every compute and
update task with :func:`seconds`.

**The form.** A class's kernels reach, on work w (FLOPs for a contraction, GEMM or convolution; bytes for the
others: normalization, pooling, element-wise, data movement), the rate

    r(w) = R w^a / (w^a + h^a)             R: the class's peak rate, h: its half-rate work (w_half), 0 < a <= 1

so r(h) = R / 2, r rises monotonically with w, r -> R for w >> h, and r ~ R (w / h)^a for w << h (h = 0: r = R,
no fall). A kernel of work w then takes

    t(w) = L + w / r(w) = L + (w + h^a w^(1 - a)) / R           L: the class's launch cost

so beyond its launch and its large-kernel time w / R, a kernel pays h^a w^(1-a) / R, which grows more slowly than
its work: a GPU kernel too small to fill the device's streaming multiprocessors (a GEMM of a few tiles, a
convolution with little parallelism) runs at a fraction of the peak that rises with its size. With a = 1 this is
Hockney's (r_inf, n_1/2) form r = R w / (w + h), the brief's example: there h / R is one more fixed cost per
kernel, which no timing can tell apart from L, so (R, h, L) cannot be fitted; a < 1 makes the extra time depend
on w, and the published GEMM curves fit a = 0.43 (Kepler) and 0.52 (Volta) (:mod:`tofu.sim.published`).
A kernel also moves bytes when it is compute bound (and computes when it is memory bound), so the roofline's
other side bounds it, at the class's ``other`` rate O:

    contraction:  t = L + max(F / r(F), B / O)          (F FLOPs, B bytes read and written)
    the others:   t = L + max(B / r(B), F / O)

**The grain.** A convolution's rate depends on its shape, not on its work alone: measured here (MXNet's CPU
kernels, 3 x 3 filters, 512 channels in and out), a convolution on 1 x 1 pixels runs at 3 GFLOP/s whatever its
batch (8 or 64 images), on 2 x 2 at 22, on 4 x 4 at 40 to 54, on 8 x 8 at 63: the kernels parallelise and
vectorise over the output pixels of one image. A class's curve may hold a second factor in its kernels' grain g
(:attr:`tofu.sim.flops.OpWork.grain`: a convolution's output pixels per image; inf for the other ops)

    q(g) = g^b / (g^b + s^b)                s: the half-rate grain (grain_half), b > 0 (grain_alpha)
    t = L + max(w / r(w), w / (R q(g)), the other side)

(s = 0 or g = inf: q = 1, the curve alone). The two limits do not compound: a kernel runs at the slower of the
rate its work allows and the rate its grain allows. Measured here (resnet-style 3 x 3 convolutions on 1 x 1 output
pixels of 7e4 to 1.2e6 FLOPs, fitted parameters of the 2e7-6e7 FLOP grain sweep), the product r(w) q(g) predicted
4-20x their time, the slower limit -18% to +150%. The backward calls of a convolution keep its forward's grain.

**Fitting** (:func:`fit_curve`). Given measured cases, each t_i = c_i + sum over its kernel calls j of
t(w_ij) (c_i a known fixed part, such as the executor call), minimise the squared relative error

    sum_i ((c_i + sum_j (L + (w_ij + h^a w_ij^(1-a)) / R)) / t_i - 1)^2

over L >= 0, 0 < R <= R_max, 0 <= h <= max_ij w_ij (a bend beyond the largest work measured is not seen) and
0 < a <= 1. For fixed (h, a) the model is linear in (L, 1/R): :func:`fit_rate` solves that constrained linear
least squares exactly; the outer minimum over (h, a) is a search on a grid (h logarithmic, a in steps of 0.05)
refined by a bounded local minimisation. Where a = 1 fits best, only L + h / R is determined; the fit then takes
the smallest such h on its grid. A kernel call may carry its grain factor q, its busy time then
max(w + h^a w^(1-a), w / q) / R; the fit stays linear in (L, 1/R). :func:`fit_grain` adds (s, b): the same fit
at every point of a grid of s (logarithmic, from a quarter of the smallest grain measured to four times the
largest) and b (:data:`GRAIN_ALPHAS`), and s = 0, the least loss taken.

A profile without ``kernels`` (a profile built by hand) is timed by its roofline (:func:`from_rates`: the
curves of its per-class efficiencies with h = 0).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from tofu.sim.flops import OpClass
from tofu.sim.hardware import ClassCurve, KernelModel, Profile

__all__ = ["ClassCurve", "KernelModel", "CurveFit", "busy_seconds", "curve_loss", "fit_curve", "fit_grain",
           "fit_rate", "curve_seconds", "from_rates", "grain_factor", "kernel_model", "rate", "seconds"]


def rate(curve: ClassCurve, work: float) -> float:
    """r(w) = R w^a / (w^a + h^a) (h = 0: R)."""
    if curve.w_half == 0:
        return curve.peak
    if work <= 0:
        return 0.0
    return curve.peak / (1.0 + (curve.w_half / work) ** curve.alpha)


def _extra(work: float, half: float, alpha: float) -> float:
    """h^a w^(1-a): R times the seconds a kernel of work w spends beyond w / R (w = 0: h if a = 1, else 0)."""
    if half == 0:
        return 0.0
    if work <= 0:
        return half if alpha == 1 else 0.0
    return half ** alpha * work ** (1.0 - alpha)


def busy_seconds(curve: ClassCurve, work: float) -> float:
    """w / r(w) = (w + h^a w^(1-a)) / R: the seconds a kernel of work ``work`` computes (or streams), launch
    excluded."""
    return (work + _extra(work, curve.w_half, curve.alpha)) / curve.peak


def _grain_factor(half: float, alpha: float, grain: float) -> float:
    if half == 0 or math.isinf(grain):
        return 1.0
    return 1.0 / (1.0 + (half / max(grain, 1e-12)) ** alpha)


def grain_factor(curve: ClassCurve, grain: float) -> float:
    """q(g) = g^b / (g^b + s^b) (s = 0 or g = inf: 1)."""
    return _grain_factor(curve.grain_half, curve.grain_alpha, grain)


def curve_seconds(curve: ClassCurve, op_class: OpClass, flops: float, nbytes: float,
                  launch: float | None = None, grain: float = math.inf) -> float:
    """t = L + max(w / r(w), w / (R q(g)), v / O) on ``curve`` for a kernel of class ``op_class`` (w, v: its
    FLOPs and bytes, the other way round for a class that is not a contraction; g its grain); ``launch`` replaces
    L when given."""
    work, other = (flops, nbytes) if op_class.contraction else (nbytes, flops)
    busy = max(busy_seconds(curve, work), work / (curve.peak * grain_factor(curve, grain)))
    return (curve.launch if launch is None else launch) + max(busy, other / curve.other)


def seconds(op_class: OpClass, flops: float, nbytes: float, model: KernelModel, launch: float | None = None,
            grain: float = math.inf, op: str | None = None) -> float:
    """:func:`curve_seconds` on ``model``'s curve of the kernel ``op`` (an MXNet op's name, ``_backward_<op>`` for
    its backward) when it has one, else of its class (see the module docstring)."""
    return curve_seconds(model.curve(op_class, op), op_class, flops, nbytes, launch, grain)


@lru_cache(maxsize=64)
def from_rates(profile: Profile) -> KernelModel:
    """The roofline of ``profile``'s per-class efficiencies as curves with h = 0: peak e_c P (contractions) or
    e_m W, other side e_m W or e_c P, the class's launch."""
    curves = []
    for c in OpClass:
        r = profile.rate(c)
        compute, memory = r.compute * profile.peak_flops, r.memory * profile.mem_bandwidth
        peak, other = (compute, memory) if c.contraction else (memory, compute)
        curves.append((c, ClassCurve(peak, 0.0, 1.0, r.launch, other, f"roofline of {profile.name}'s class rates")))
    return KernelModel(tuple(curves))


def kernel_model(profile: Profile) -> KernelModel:
    """``profile.kernels``, or its roofline (:func:`from_rates`) when it has none."""
    return profile.kernels if profile.kernels is not None else from_rates(profile)


# ------------------------------------------------------------------------------------------------- fitting

def fit_rate(points: Sequence[tuple[float, float, float, float]], max_rate: float = math.inf) -> tuple[float, float]:
    """(R, L) minimising sum_i ((c_i + n_i L + x_i / R) / t_i - 1)^2 over points (t_i, c_i, n_i, x_i), L >= 0
    (t_i measured, c_i its known fixed part, n_i its kernel calls, x_i its work), R <= ``max_rate`` (when the
    work explains nothing of the time, R is the bound, infinite only when unbounded, and L is refitted).

    >>> r, l = fit_rate([(2.5, 0.5, 1, 10.0), (3.5, 0.5, 1, 20.0)])
    >>> round(r, 6), round(l, 6)
    (10.0, 1.0)
    """
    import numpy as np

    t, c, n, x = (np.array([p[i] for p in points], dtype=float) for i in range(4))
    a = np.stack([n / t, x / t], axis=1)
    b = 1.0 - c / t
    floor = 1.0 / max_rate                       # the smallest 1/R allowed (0 when unbounded)

    def launch_for(inv: float) -> float:
        r = b - inv * x / t
        return max(0.0, float((r * n / t).sum() / ((n / t) ** 2).sum()))

    # The minimum of a convex quadratic over {L >= 0, 1/R >= floor} is the unconstrained one when feasible,
    # else it lies on an edge: L = 0 (1/R refitted) or 1/R = floor (L refitted).
    (launch, inv), *_ = np.linalg.lstsq(a, b, rcond=None)
    candidates = [(float(launch), float(inv))] if launch >= 0 and inv >= floor and inv > 0 else []
    inv0 = max(floor, float((b * x / t).sum() / ((x / t) ** 2).sum()))
    if inv0 > 0:
        candidates.append((0.0, inv0))
    candidates.append((launch_for(floor), floor))
    launch, inv = min(candidates, key=lambda li: float(((a @ np.array(li) - b) ** 2).sum()))
    return (1.0 / inv if inv > 0 else math.inf), launch


ALPHAS = tuple(round(0.05 * i, 2) for i in range(1, 21))
"""The grid of a that :func:`fit_curve` searches before refining."""


@dataclass(frozen=True)
class CurveFit:
    """A fitted curve's parameters and its loss (the sum of squared relative errors of :func:`fit_curve`); the
    grain's (s, b) when :func:`fit_grain` fitted them (s = 0: none)."""

    peak: float
    w_half: float
    alpha: float
    launch: float
    loss: float
    grain_half: float = 0.0
    grain_alpha: float = 1.0


Call = float | tuple[float, float]
"""A kernel call's work w, or (w, q): q its grain factor q(g), its busy time max(w + h^a w^(1-a), w / q) / R."""
CasePoint = tuple[float, float, Sequence[Call]]
"""(t_i, c_i, calls): a case's measured seconds, its known fixed part, its kernel calls."""


def _graded(call: Call) -> tuple[float, float]:
    return (float(call), 1.0) if isinstance(call, (int, float)) else call


def _busy_work(w: float, q: float, w_half: float, alpha: float) -> float:
    """R times a call's busy seconds: max(w + h^a w^(1-a), w / q)."""
    return max(w + _extra(w, w_half, alpha), w / q)


def curve_loss(points: Sequence[CasePoint], peak: float, w_half: float, alpha: float, launch: float) -> float:
    """sum_i ((c_i + sum_j (L + max(w_ij + h^a w_ij^(1-a), w_ij / q_ij) / R)) / t_i - 1)^2, q_ij a call's grain
    factor (1 unless given): the objective of :func:`fit_curve`."""
    return sum(((c + sum(launch + _busy_work(w, q, w_half, alpha) / peak for w, q in map(_graded, calls)))
                / t - 1.0) ** 2 for t, c, calls in points)


def _fit_at(points: Sequence[CasePoint], w_half: float, alpha: float, max_rate: float) -> CurveFit:
    linear = [(t, c, len(calls), sum(_busy_work(w, q, w_half, alpha) for w, q in map(_graded, calls)))
              for t, c, calls in points]
    peak, launch = fit_rate(linear, max_rate)
    return CurveFit(peak, w_half, alpha, launch, curve_loss(points, peak, w_half, alpha, launch))


def fit_curve(points: Sequence[CasePoint], max_rate: float = math.inf, grid: int = 48) -> CurveFit:
    """The constrained least-squares curve (R, h, a, L) of the module docstring through ``points``.

    Args:
        points: (t_i, c_i, works_i) per measured case.
        max_rate: the largest R allowed (a finite bound keeps noisy points from fitting an unbounded rate).
        grid: points of the logarithmic grid of h (per a) before the refinement.

    >>> from tofu.sim.hardware import ClassCurve
    >>> true = ClassCurve(1e9, 1e5, 0.5, 2e-6)
    >>> pts = [(1e-6 + 2e-6 + busy_seconds(true, w), 1e-6, (w,)) for w in (1e2, 1e3, 1e4, 1e5, 1e6, 1e7)]
    >>> f = fit_curve(pts)
    >>> round(f.peak / 1e9, 4), round(f.w_half / 1e5, 4), round(f.alpha, 4), round(f.launch * 1e6, 4)
    (1.0, 1.0, 0.5, 2.0)
    """
    import numpy as np
    from scipy.optimize import minimize

    works = [w for _, _, calls in points for w, _ in map(_graded, calls) if w > 0]
    if not works:
        raise ValueError("fit_curve needs some positive work")
    lo, hi = min(works) / 1e3, max(works)
    halves = np.geomspace(lo, hi, grid).tolist()
    best = _fit_at(points, 0.0, 1.0, max_rate)
    for alpha in ALPHAS:
        for h in halves:
            f = _fit_at(points, h, alpha, max_rate)
            if f.loss < best.loss:
                best = f
    if best.w_half > 0:                         # refine (log h, a) inside the bounds
        def loss(x) -> float:
            return _fit_at(points, math.exp(x[0]), float(x[1]), max_rate).loss
        res = minimize(loss, [math.log(best.w_half), best.alpha], method="L-BFGS-B",
                       bounds=[(math.log(lo), math.log(hi)), (0.01, 1.0)])
        refined = _fit_at(points, math.exp(float(res.x[0])), float(res.x[1]), max_rate)
        if refined.loss < best.loss:
            best = refined
    return best


GRAIN_ALPHAS = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
"""The grid of the grain's b that :func:`fit_grain` searches."""

GrainPoint = tuple[float, float, Sequence[tuple[float, float]]]
"""(t_i, c_i, ((w_ij, g_ij), ...)): a case's measured seconds, its known fixed part, its calls' works and grains."""


def fit_grain(points: Sequence[GrainPoint], max_rate: float = math.inf, grid: int = 24) -> CurveFit:
    """The curve (R, h, a, L) and the grain's (s, b) of the module docstring through ``points``: the loss on a
    coarse grid of (h, a, s, b) (``grid`` logarithmic values of s, :data:`GRAIN_ALPHAS` for b), a bounded local
    minimisation of (log h, a, log s, b) from its best three points, and the plain curve (s = 0) when it fits
    better.

    >>> true = ClassCurve(1e9, 1e5, 0.5, 2e-6, grain_half=8.0, grain_alpha=1.5)
    >>> pts = [(1e-6 + curve_seconds(true, OpClass.CONVOLUTION, w, 0.0, grain=g), 1e-6, ((w, g),))
    ...        for w in (1e3, 1e5, 1e7, 1e9) for g in (1, 4, 16, 64, 256)]
    >>> f = fit_grain(pts)
    >>> round(f.grain_half, 2), round(f.grain_alpha, 2), round(f.peak / 1e9, 3), round(f.w_half / 1e5, 2)
    (8.0, 1.5, 1.0, 1.0)
    """
    import numpy as np
    from scipy.optimize import minimize

    plain = fit_curve([(t, c, [w for w, _ in calls]) for t, c, calls in points], max_rate)
    grains = [g for _, _, calls in points for _, g in calls if math.isfinite(g) and g > 0]
    works = [w for _, _, calls in points for w, _ in calls if w > 0]
    if not grains:
        return plain
    w_lo, w_hi = min(works) / 1e3, max(works)
    g_lo, g_hi = min(grains) / 4, max(grains) * 4

    def at(h: float, a: float, s: float, b: float) -> CurveFit:
        scaled = [(t, c, [(w, _grain_factor(s, b, g)) for w, g in calls]) for t, c, calls in points]
        return replace(_fit_at(scaled, h, a, max_rate), grain_half=s, grain_alpha=b)

    coarse = sorted(((at(float(h), a, float(s), b).loss, float(h), a, float(s), b)
                     for h in np.geomspace(w_lo, w_hi, 10) for a in (0.25, 0.5, 0.75, 1.0)
                     for s in np.geomspace(g_lo, g_hi, grid) for b in GRAIN_ALPHAS))[:3]
    best = plain
    bounds = [(math.log(w_lo), math.log(w_hi)), (0.01, 1.0), (math.log(g_lo), math.log(g_hi)), (0.1, 8.0)]
    for _, h, a, s, b in coarse:
        res = minimize(lambda x: at(math.exp(x[0]), float(x[1]), math.exp(x[2]), float(x[3])).loss,
                       [math.log(h), a, math.log(s), b], method="L-BFGS-B", bounds=bounds)
        f = at(math.exp(float(res.x[0])), float(res.x[1]), math.exp(float(res.x[2])), float(res.x[3]))
        best = min(best, f, key=lambda c: c.loss)
    return best
