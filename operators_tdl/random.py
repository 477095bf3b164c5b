"""TDL descriptions of MXNet's samplers: _random_normal and _random_uniform (the attribute ``shape``, no inputs),
and their _like forms (the shape of ``data``, whose values are not read).

Every element is an independent draw from the attributes' distribution. A shard draws its own elements with
its own device's generator, so a split draws from the same distribution (as Dropout's masks do) but never the
elements one device would draw; a sampler is not a constant (:mod:`tofu.search.constants`): a region read on
two devices is drawn once and sent, so both read the same values, except where no dimension splits and every
worker computes the op whole (``replicate*``), each then drawing its own.

A description states values, and a draw has none to state: each states the distribution's mean, the value the
sampler draws in ``tofu run --check``'s deterministic step (:func:`tofu.graph.deterministic.at_mean`: a uniform
draw from [mean, mean], MXNet's normal refusing scale 0), the form in which the registry tests hold it to
MXNet's kernel. Other distributions (gamma, exponential, Poisson, the ``_sample_*`` ops with per-element
parameter tensors) are not described.
"""
from __future__ import annotations

from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)


@dataclass(frozen=True)
class NormalAttrs:
    loc: float = 0.0
    scale: float = 1.0
    shape: tuple[int, ...] = ()
    dtype: str = "float32"


@dataclass(frozen=True)
class UniformAttrs:
    low: float = 0.0
    high: float = 1.0
    shape: tuple[int, ...] = ()
    dtype: str = "float32"


@tdl_op("_random_normal", inputs=(), attrs=NormalAttrs, cases=[
    Case(shapes=(), attrs={"shape": (3, 4), "loc": 0.5, "scale": 2.0}),
    Case(shapes=(), attrs={"shape": (2, 3, 5)}),
])
def random_normal(attrs: NormalAttrs) -> Callable:
    """out[i] ~ Normal(loc, scale) for i in the attribute shape, independently; stated as its mean, loc."""
    return lambda *i: attrs.loc


@tdl_op("_random_uniform", inputs=(), attrs=UniformAttrs, cases=[
    Case(shapes=(), attrs={"shape": (3, 4), "low": -1.0, "high": 3.0}),
    Case(shapes=(), attrs={"shape": (2, 3, 5)}),
])
def random_uniform(attrs: UniformAttrs) -> Callable:
    """out[i] ~ Uniform[low, high) for i in the attribute shape, independently; stated as its mean."""
    return lambda *i: (attrs.low + attrs.high) / 2


@tdl_op("_random_normal_like", inputs=("data",), attrs=NormalAttrs, cases=[
    Case(shapes=((3, 4),), attrs={"loc": 0.5, "scale": 2.0}),
    Case(shapes=((2, 3, 5),)),
])
def random_normal_like(data: TensorVar, attrs: NormalAttrs) -> Callable:
    """out[i] ~ Normal(loc, scale) for i in data's shape, independently (data's elements are read for their
    positions only); stated as its mean, loc."""
    return lambda *i: uses(attrs.loc, data[i])


@tdl_op("_random_uniform_like", inputs=("data",), attrs=UniformAttrs, cases=[
    Case(shapes=((3, 4),), attrs={"low": -1.0, "high": 3.0}),
    Case(shapes=((2, 3, 5),)),
])
def random_uniform_like(data: TensorVar, attrs: UniformAttrs) -> Callable:
    """out[i] ~ Uniform[low, high) for i in data's shape, independently (data's elements are read for their
    positions only); stated as its mean."""
    return lambda *i: uses((attrs.low + attrs.high) / 2, data[i])
