"""TDL descriptions of MXNet's samplers: _random_normal, _random_uniform, _random_exponential, _random_gamma,
_random_poisson, _random_negative_binomial and _random_generalized_negative_binomial (the attribute ``shape``, no
inputs), and their _like forms (the shape of ``data``, whose values are not read).

Every element is an independent draw from the attributes' distribution. A shard draws its own elements with
its own device's generator, so a split draws from the same distribution (as Dropout's masks do) but never the
elements one device would draw; a sampler is not a constant (:mod:`tofu.search.constants`): a region read on
two devices is drawn once and sent, so both read the same values, except where no dimension splits and every
worker computes the op whole (``replicate*``), each then drawing its own.

A description states values, and a draw has none to state: each states the distribution's mean, the value the
sampler draws in ``tofu run --check``'s deterministic step (:func:`tofu.graph.deterministic.at_mean`: a uniform
draw from [mean, mean], MXNet's normal refusing scale 0), the form in which the registry tests hold it to
MXNet's kernel (:data:`MEANS`: each checked here on 200,000 of MXNet's draws). _random_randint (integers) and the
``_sample_*`` ops (per-element parameter tensors) are not described.
"""
from __future__ import annotations

from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)

MEANS: dict[str, Callable] = {
    "normal": lambda a: a.loc,
    "uniform": lambda a: (a.low + a.high) / 2,
    "exponential": lambda a: 1.0 / a.lam,                  # rate lam
    "gamma": lambda a: a.alpha * a.beta,                   # shape alpha, scale beta
    "poisson": lambda a: a.lam,
    "negative_binomial": lambda a: a.k * (1 - a.p) / a.p,  # failures before k successes of probability p
    "generalized_negative_binomial": lambda a: a.mu,
}
"""Per distribution (the op's name after ``_random_``), its mean from the op's typed attributes."""


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
    return lambda *i: MEANS["normal"](attrs)


@tdl_op("_random_uniform", inputs=(), attrs=UniformAttrs, cases=[
    Case(shapes=(), attrs={"shape": (3, 4), "low": -1.0, "high": 3.0}),
    Case(shapes=(), attrs={"shape": (2, 3, 5)}),
])
def random_uniform(attrs: UniformAttrs) -> Callable:
    """out[i] ~ Uniform[low, high) for i in the attribute shape, independently; stated as its mean."""
    return lambda *i: MEANS["uniform"](attrs)


@tdl_op("_random_normal_like", inputs=("data",), attrs=NormalAttrs, cases=[
    Case(shapes=((3, 4),), attrs={"loc": 0.5, "scale": 2.0}),
    Case(shapes=((2, 3, 5),)),
])
def random_normal_like(data: TensorVar, attrs: NormalAttrs) -> Callable:
    """out[i] ~ Normal(loc, scale) for i in data's shape, independently (data's elements are read for their
    positions only); stated as its mean, loc."""
    return lambda *i: uses(MEANS["normal"](attrs), data[i])


@tdl_op("_random_uniform_like", inputs=("data",), attrs=UniformAttrs, cases=[
    Case(shapes=((3, 4),), attrs={"low": -1.0, "high": 3.0}),
    Case(shapes=((2, 3, 5),)),
])
def random_uniform_like(data: TensorVar, attrs: UniformAttrs) -> Callable:
    """out[i] ~ Uniform[low, high) for i in data's shape, independently (data's elements are read for their
    positions only); stated as its mean."""
    return lambda *i: uses(MEANS["uniform"](attrs), data[i])


@dataclass(frozen=True)
class ExponentialAttrs:
    lam: float = 1.0
    shape: tuple[int, ...] = ()
    dtype: str = "float32"


@dataclass(frozen=True)
class GammaAttrs:
    alpha: float = 1.0
    beta: float = 1.0
    shape: tuple[int, ...] = ()
    dtype: str = "float32"


@dataclass(frozen=True)
class PoissonAttrs:
    lam: float = 1.0
    shape: tuple[int, ...] = ()
    dtype: str = "float32"


@dataclass(frozen=True)
class NegativeBinomialAttrs:
    k: int = 1
    p: float = 1.0
    shape: tuple[int, ...] = ()
    dtype: str = "float32"


@dataclass(frozen=True)
class GeneralizedNegativeBinomialAttrs:
    mu: float = 1.0
    alpha: float = 1.0
    shape: tuple[int, ...] = ()
    dtype: str = "float32"


def _sampler(name: str, attrs_type: type, example: dict) -> None:
    """Registers ``_random_<name>`` (the attribute shape) and ``_random_<name>_like`` (data's shape): each element
    an independent draw, stated as the distribution's mean (:data:`MEANS`); ``example``: attributes of a Case."""
    mean = MEANS[name]

    def sampler(attrs):
        return lambda *i: mean(attrs)

    def like(data, attrs):
        return lambda *i: uses(mean(attrs), data[i])

    for fn, op, inputs, cases in (
            (sampler, f"_random_{name}", (), [Case(shapes=(), attrs={"shape": (3, 4), **example}),
                                               Case(shapes=(), attrs={"shape": (2, 3, 5)})]),
            (like, f"_random_{name}_like", ("data",), [Case(shapes=((3, 4),), attrs=example),
                                                        Case(shapes=((2, 3, 5),))])):
        fn.__name__ = fn.__qualname__ = op.lstrip("_")
        fn.__doc__ = (f"out[i] ~ {name.replace('_', ' ')}({', '.join(example)}) independently, for i in "
                      f"{'the attribute shape' if not inputs else 'data' + chr(39) + 's shape'}; stated as its mean.")
        tdl_op(op, inputs=inputs, attrs=attrs_type, cases=cases)(fn)


_sampler("exponential", ExponentialAttrs, {"lam": 4.0})
_sampler("gamma", GammaAttrs, {"alpha": 2.0, "beta": 3.0})
_sampler("poisson", PoissonAttrs, {"lam": 3.0})
_sampler("negative_binomial", NegativeBinomialAttrs, {"k": 3, "p": 0.4})
_sampler("generalized_negative_binomial", GeneralizedNegativeBinomialAttrs, {"mu": 2.5, "alpha": 0.5})
