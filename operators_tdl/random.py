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

The densities _random_pdf_normal, _random_pdf_uniform, _random_pdf_exponential, _random_pdf_gamma and
_random_pdf_poisson draw nothing: element-wise functions of given samples and of parameters indexed by the
samples' leading indices, as MXNet's kernels compute them (the gamma's beta a rate there, a scale in the sampler;
the uniform's density 1 / (high - low) at every sample, in its support or not).
"""
from __future__ import annotations

import math

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
class _Drawn:
    """What every sampler takes beside its distribution's parameters: the shape drawn (none for a _like form,
    which draws data's) and the type."""
    shape: tuple[int, ...] = ()
    dtype: str = "float32"


@dataclass(frozen=True)
class NormalAttrs(_Drawn):
    loc: float = 0.0
    scale: float = 1.0


@dataclass(frozen=True)
class UniformAttrs(_Drawn):
    low: float = 0.0
    high: float = 1.0


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
class ExponentialAttrs(_Drawn):
    lam: float = 1.0


@dataclass(frozen=True)
class GammaAttrs(_Drawn):
    alpha: float = 1.0
    beta: float = 1.0


@dataclass(frozen=True)
class PoissonAttrs(_Drawn):
    lam: float = 1.0


@dataclass(frozen=True)
class NegativeBinomialAttrs(_Drawn):
    k: int = 1
    p: float = 1.0


@dataclass(frozen=True)
class GeneralizedNegativeBinomialAttrs(_Drawn):
    mu: float = 1.0
    alpha: float = 1.0


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


# ------------------------------------------------------------------------------- densities of given samples

@dataclass(frozen=True)
class PdfAttrs:
    is_log: bool = False


def _density(name: str, log_density: Callable, params: tuple[str, ...], cases: list) -> None:
    """Registers ``_random_pdf_<name>``: out[i] = the density (``is_log``: its log) of sample[i] under the
    distribution whose parameters are each parameter tensor at i's leading indices (the parameters' shape is a
    prefix of the sample's: one distribution per leading index, its density at every sample of that row).
    ``log_density(x, *parameters)`` is the log density, in TDL expressions."""
    def pdf(sample, *args):
        *tensors, attrs = args
        lead = tensors[0].ndim
        for t in tensors:
            if tuple(t.shape) != tuple(sample.shape[:lead]):
                raise TDLError(f"_random_pdf_{name}: parameter {tuple(t.shape)} for samples {tuple(sample.shape)}; "
                               f"described: every parameter of the samples' leading shape")

        def out(*i):
            logp = log_density(sample[i], *(t[i[:lead]] for t in tensors))
            return logp if attrs.is_log else exp(logp)
        return out

    op = f"_random_pdf_{name}"
    pdf.__name__ = pdf.__qualname__ = op.lstrip("_")
    pdf.__doc__ = (f"out[i] = the {name} density (is_log: its log) of sample[i] under parameters "
                   f"{', '.join(p + '[i_lead]' for p in params)}, i_lead the leading indices of i that the "
                   f"parameters' shape has.")
    tdl_op(op, inputs=("sample", *params), attrs=PdfAttrs, cases=cases)(pdf)


_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)

_density("normal", lambda x, mu, sigma: -square(x - mu) / (2.0 * square(sigma)) - log(sigma) - _LOG_SQRT_2PI,
         ("mu", "sigma"), [Case(shapes=((2, 3), (2,), (2,)), positive=(2,)),
                           Case(shapes=((2, 2, 3), (2, 2), (2, 2)), positive=(2,), attrs={"is_log": True})])
# MXNet's kernel checks no support: 1 / (high - low) at every sample
_density("uniform", lambda x, low, high: uses(-log(high - low), x), ("low", "high"),
         [Case(shapes=((2, 3), (2,), (2,)), uniform=((1, -1.0, 0.0), (2, 1.0, 2.0))),
          Case(shapes=((3, 4), (3,), (3,)), uniform=((1, -1.0, 0.0), (2, 1.0, 2.0)), attrs={"is_log": True})])
_density("exponential", lambda x, lam: log(lam) - lam * x, ("lam",),
         [Case(shapes=((2, 3), (2,)), positive=(0, 1)),
          Case(shapes=((2, 2, 3), (2, 2)), positive=(0, 1), attrs={"is_log": True})])
# beta is the rate here (the sampler _random_gamma takes it as the scale): MXNet's kernel
_density("gamma", lambda x, alpha, beta: alpha * log(beta) + (alpha - 1.0) * log(x) - beta * x - gammaln(alpha),
         ("alpha", "beta"), [Case(shapes=((2, 3), (2,), (2,)), positive=(0, 1, 2)),
                             Case(shapes=((2, 2, 3), (2, 2), (2, 2)), positive=(0, 1, 2), attrs={"is_log": True})])
_density("poisson", lambda k, lam: k * log(lam) - lam - gammaln(k + 1.0), ("lam",),
         [Case(shapes=((2, 3), (2,)), ints=((0, 6),), positive=(1,)),
          Case(shapes=((2, 2, 3), (2, 2)), ints=((0, 6),), positive=(1,), attrs={"is_log": True})])
