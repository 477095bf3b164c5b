"""TDL descriptions of MXNet's fused optimizer updates: sgd_update, sgd_mom_update, adam_update.

All are element-wise over the weight. Each returns the new weight; the stateful variants also update their
state inputs (momentum, Adam's mean and var) in place, which MXNet does not expose as outputs: a
description covers only the returned weight (the state update is written in its docstring).

The gradient is first rescaled and, when ``clip_gradient >= 0``, clipped to [-clip_gradient, clip_gradient].
"""
from __future__ import annotations

from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)


def clipped(g: ValueExpr, clip_gradient: float) -> ValueExpr:
    """MXNet's gradient clipping: none when clip_gradient < 0."""
    return g if clip_gradient < 0 else minimum(maximum(g, -clip_gradient), clip_gradient)


@dataclass(frozen=True)
class SGDAttrs:
    lr: float
    wd: float = 0.0
    rescale_grad: float = 1.0
    clip_gradient: float = -1.0


@tdl_op("sgd_update", inputs=("weight", "grad"), attrs=SGDAttrs, cases=[
    Case(shapes=((3, 4), (3, 4)), attrs={"lr": 0.1}),
    Case(shapes=((2, 3, 2), (2, 3, 2)), attrs={"lr": 0.05, "wd": 0.01, "rescale_grad": 0.5, "clip_gradient": 0.3}),
])
def sgd_update(weight: TensorVar, grad: TensorVar, attrs: SGDAttrs):
    """out[i] = (1 - lr * wd) * weight[i] - lr * clip(rescale_grad * grad[i])."""
    return lambda *i: ((1.0 - attrs.lr * attrs.wd) * weight[i]
                       - attrs.lr * clipped(attrs.rescale_grad * grad[i], attrs.clip_gradient))


@dataclass(frozen=True)
class SGDMomAttrs(SGDAttrs):
    momentum: float = 0.0


@tdl_op("sgd_mom_update", inputs=("weight", "grad", "mom"), attrs=SGDMomAttrs, cases=[
    Case(shapes=((3, 4),) * 3, attrs={"lr": 0.1, "momentum": 0.9}),
    Case(shapes=((2, 3, 2),) * 3, attrs={"lr": 0.05, "momentum": 0.5, "wd": 0.01, "rescale_grad": 0.5,
                                         "clip_gradient": 0.3}),
])
def sgd_mom_update(weight: TensorVar, grad: TensorVar, mom: TensorVar, attrs: SGDMomAttrs):
    """out[i] = weight[i] + mom'[i], where mom'[i] = momentum * mom[i] - lr * wd * weight[i]
    - lr * clip(rescale_grad * grad[i]). MXNet also writes mom' into the ``mom`` input in place."""
    def new_mom(i) -> ValueExpr:
        return (attrs.momentum * mom[i] - attrs.lr * attrs.wd * weight[i]
                - attrs.lr * clipped(attrs.rescale_grad * grad[i], attrs.clip_gradient))

    return lambda *i: weight[i] + new_mom(i)


@dataclass(frozen=True)
class AdamAttrs:
    lr: float
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    wd: float = 0.0
    rescale_grad: float = 1.0
    clip_gradient: float = -1.0


@tdl_op("adam_update", inputs=("weight", "grad", "mean", "var"), attrs=AdamAttrs, cases=[
    Case(shapes=((3, 4),) * 4, attrs={"lr": 0.01}, positive=(3,)),
    Case(shapes=((2, 3, 2),) * 4, attrs={"lr": 0.1, "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-3, "wd": 0.01,
                                         "rescale_grad": 0.5, "clip_gradient": 0.3}, positive=(3,)),
])
def adam_update(weight: TensorVar, grad: TensorVar, mean: TensorVar, var: TensorVar, attrs: AdamAttrs):
    """out[i] = weight[i] - lr * m[i] / (sqrt(v[i]) + epsilon), with g = clip(rescale_grad * grad + wd * weight),
    m = beta1 * mean + (1 - beta1) * g, v = beta2 * var + (1 - beta2) * g^2 (no bias correction: MXNet folds it
    into lr). MXNet also writes m and v into the ``mean`` and ``var`` inputs in place."""
    def g(i) -> ValueExpr:
        return clipped(attrs.rescale_grad * grad[i] + attrs.wd * weight[i], attrs.clip_gradient)

    def m(i) -> ValueExpr:
        return attrs.beta1 * mean[i] + (1.0 - attrs.beta1) * g(i)

    def v(i) -> ValueExpr:
        return attrs.beta2 * var[i] + (1.0 - attrs.beta2) * g(i) * g(i)

    return lambda *i: weight[i] - attrs.lr * m(i) / (sqrt(v(i)) + attrs.epsilon)
