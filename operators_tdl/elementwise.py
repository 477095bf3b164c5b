"""TDL descriptions of MXNet's element-wise operators: every output element reads the same-position input elements.

Families (each op registered on its own, through a small factory per family):
- activations: Activation (relu, sigmoid, tanh, softrelu, softsign), LeakyReLU (leaky, elu, selu, gelu,
  prelu), Dropout (identity outside training);
- unary math: relu, sigmoid, tanh, exp, log, sqrt, rsqrt, square, negative, abs, sign, reciprocal, log1p,
  expm1, sin, cos, erf, softsign, _copy, BlockGrad, zeros_like, ones_like; trigonometric and hyperbolic
  (tan, arcsin, arccos, arctan, sinh, cosh, arcsinh, arccosh, arctanh, degrees, radians), rounding (floor,
  ceil, round, rint, fix, trunc), cbrt, rcbrt, log2, log10, gamma, gammaln, erfinv, logical_not; the
  straight-through estimators _contrib_round_ste and _contrib_sign_ste (round and sign forward);
- scalar ops: _plus_scalar, _minus_scalar, _rminus_scalar, _mul_scalar, _div_scalar, _rdiv_scalar,
  _power_scalar, _rpower_scalar, _maximum_scalar, _minimum_scalar, _hypot_scalar, _mod_scalar, _rmod_scalar,
  comparisons (_equal_scalar, ...) and logical ops (_logical_and_scalar, ...); _contrib_gradientmultiplier
  (identity forward);
- binary: elemwise_add, elemwise_sub, elemwise_mul, elemwise_div, _grad_add, _power, _hypot, _maximum,
  _minimum, _mod, comparisons (_equal, _not_equal, _greater, _greater_equal, _lesser, _lesser_equal) and
  logical ops (_logical_and, _logical_or, _logical_xor);
- broadcast: broadcast_add, broadcast_sub, broadcast_mul, broadcast_div, broadcast_maximum, broadcast_minimum,
  broadcast_power, broadcast_hypot, broadcast_mod, and the broadcast comparisons and logical ops;
- others: add_n (variadic sum), clip, where, hard_sigmoid, smooth_l1, _contrib_quadratic, Cast, MakeLoss,
  make_loss, _zeros, _ones, _full (no inputs), _npi_full_like;
- the numpy interface's own kernels: _npi_where and its scalar forms (_npi_where_lscalar, _npi_where_rscalar,
  _npi_where_scalar2), _npi_around, _npi_polyval, and arctan2, copysign and ldexp, each broadcast
  (_npi_arctan2) and with a scalar on either side (_npi_arctan2_scalar, _npi_rarctan2_scalar);
- the numpy interface's names of the unary, scalar, broadcast and fill kernels (``NUMPY_NAMES``).

Comparisons and logical ops give 1.0 where they hold and 0.0 elsewhere, in the input's type (as MXNet's
float kernels do); logical ops treat every non-zero value as true.

Broadcast operands are read with the constant index 0 along their extent-1 dimensions (right-aligned with
the output, as MXNet pads the shorter shape with leading 1s).
"""
from __future__ import annotations

import math

from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)

UnaryFn = Callable[[ValueExpr], ValueExpr]


# MXNet's numpy interface (``npx.set_np()``, Gluon blocks on ``mx.np``) exports its own operator for these
# kernels: the same element-wise math on the same attributes (a scalar op's ``is_int`` only types integer
# inputs), numpy broadcasting as the broadcast_* ops do it; each name is checked against its own MXNet operator.
_UNARY_NUMPY = ("tanh", "exp", "log", "log1p", "expm1", "sqrt", "square", "reciprocal", "negative", "sign", "sin",
                "cos", "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "arcsinh", "arccosh", "arctanh",
                "degrees", "radians", "floor", "ceil", "rint", "fix", "trunc", "cbrt", "log2", "log10")
NUMPY_NAMES: dict[str, str] = {
    **{op: f"_npi_{op}" for op in _UNARY_NUMPY},
    "abs": "_npi_absolute", "logical_not": "_npi_logical_not", "relu": "_npx_relu", "sigmoid": "_npx_sigmoid", "_copy": "_np_copy",
    "_plus_scalar": "_npi_add_scalar", "_minus_scalar": "_npi_subtract_scalar",
    "_rminus_scalar": "_npi_rsubtract_scalar", "_mul_scalar": "_npi_multiply_scalar",
    "_div_scalar": "_npi_true_divide_scalar", "_rdiv_scalar": "_npi_rtrue_divide_scalar",
    "_power_scalar": "_npi_power_scalar", "_rpower_scalar": "_npi_rpower_scalar",
    "_maximum_scalar": "_npi_maximum_scalar", "_minimum_scalar": "_npi_minimum_scalar",
    "_hypot_scalar": "_npi_hypot_scalar", "_mod_scalar": "_npi_mod_scalar", "_rmod_scalar": "_npi_rmod_scalar",
    "broadcast_add": "_npi_add", "broadcast_sub": "_npi_subtract", "broadcast_mul": "_npi_multiply",
    "broadcast_div": "_npi_true_divide", "broadcast_maximum": "_npi_maximum", "broadcast_minimum": "_npi_minimum",
    "broadcast_power": "_npi_power", "broadcast_hypot": "_npi_hypot", "broadcast_mod": "_npi_mod",
    "_zeros": "_npi_zeros", "_ones": "_npi_ones",
    # comparisons: numpy's give booleans (1 and 0 here, as MXNet's legacy ones give them in the input's type)
    **{f"_{stem}_scalar": f"_npi_{stem.replace('lesser', 'less')}_scalar" for stem in
       ("equal", "not_equal", "greater", "greater_equal", "lesser", "lesser_equal")},
    **{f"broadcast_{stem}": f"_npi_{stem.replace('lesser', 'less')}" for stem in
       ("equal", "not_equal", "greater", "greater_equal", "lesser", "lesser_equal")},
}
"""Legacy op -> the numpy interface's name of its kernel (registered with it, as an alias)."""


def _numpy_names(op: str) -> tuple[str, ...]:
    return (NUMPY_NAMES[op],) if op in NUMPY_NAMES else ()


def _register(op: str, fn: Callable, doc: str, *, inputs: Sequence[str], cases: Sequence[Case],
              attrs: type = NoAttrs, aliases: Sequence[str] = ()) -> None:
    """Registers ``fn`` under ``op`` (and ``aliases``: the numpy interface's name of the same kernel) with its own
    name (for error messages) and docstring."""
    fn.__name__ = fn.__qualname__ = op.lstrip("_")
    fn.__doc__ = doc
    tdl_op(op, inputs=inputs, attrs=attrs, cases=cases, aliases=aliases)(fn)


def _softsign(x: ValueExpr) -> ValueExpr:
    return x / (1.0 + abs_(x))


# ------------------------------------------------------------------------------------------- activations

ACTIVATIONS: dict[str, UnaryFn] = {"relu": relu, "sigmoid": sigmoid, "tanh": tanh, "softrelu": softrelu,
                                   "softsign": _softsign}


@dataclass(frozen=True)
class ActivationAttrs:
    act_type: str


@tdl_op("Activation", inputs=("data",), attrs=ActivationAttrs, cases=[
    Case(shapes=((3, 4),), attrs={"act_type": "relu"}),
    Case(shapes=((2, 3, 4),), attrs={"act_type": "sigmoid"}),
    Case(shapes=((4, 5),), attrs={"act_type": "tanh"}),
    Case(shapes=((2, 6),), attrs={"act_type": "softrelu"}),
    Case(shapes=((2, 2, 3),), attrs={"act_type": "softsign"}),
])
def activation(data: TensorVar, attrs: ActivationAttrs):
    """out[i] = act(data[i]), act one of relu, sigmoid, tanh, softrelu = log(1 + e^x), softsign = x / (1 + |x|)."""
    if attrs.act_type not in ACTIVATIONS:
        raise TDLError(f"Activation: act_type '{attrs.act_type}' is not one of {', '.join(ACTIVATIONS)}")
    act = ACTIVATIONS[attrs.act_type]
    return lambda *i: act(data[i])


@dataclass(frozen=True)
class LeakyReLUAttrs:
    act_type: str = "leaky"
    slope: float = 0.25


SELU_ALPHA = 1.6732632423543772848170429916717
SELU_LAMBDA = 1.0507009873554804934193349852946


@tdl_op("LeakyReLU", inputs=("data", "gamma?"), attrs=LeakyReLUAttrs, cases=[
    Case(shapes=((3, 4),)),
    Case(shapes=((2, 3, 4),), attrs={"act_type": "leaky", "slope": 0.1}),
    Case(shapes=((2, 3, 4),), attrs={"act_type": "elu", "slope": 0.3}),
    Case(shapes=((3, 5),), attrs={"act_type": "selu"}),
    Case(shapes=((3, 5),), attrs={"act_type": "gelu"}),
    Case(shapes=((2, 3, 4), (3,)), attrs={"act_type": "prelu"}),
    Case(shapes=((2, 3, 2, 2), (1,)), attrs={"act_type": "prelu"}),
])
def leaky_relu(data: TensorVar, gamma: TensorVar | None, attrs: LeakyReLUAttrs):
    """out[i] = data[i] if data[i] > 0 else a negative branch: slope * x (leaky), slope * (e^x - 1) (elu),
    gamma[channel] * x (prelu, channel = axis 1); selu and gelu (x * Phi(x))
    are smooth. rrelu is not described (its second output, the random slope mask, is left unwritten outside
    training)."""
    kind = attrs.act_type

    def negative_slope(i: tuple[Var, ...]) -> ValueExpr | float:
        if kind == "leaky":
            return attrs.slope
        if gamma is None:
            raise TDLError("LeakyReLU: act_type 'prelu' needs the gamma input")
        return gamma[0] if gamma.shape[0] == 1 else gamma[i[1]]

    if kind in ("leaky", "prelu"):
        return lambda *i: where(gt(data[i], 0.0), data[i], negative_slope(i) * data[i])
    if kind == "elu":
        return lambda *i: where(gt(data[i], 0.0), data[i], attrs.slope * expm1(data[i]))
    if kind == "selu":
        return lambda *i: SELU_LAMBDA * where(gt(data[i], 0.0), data[i], SELU_ALPHA * expm1(data[i]))
    if kind == "gelu":
        return lambda *i: 0.5 * data[i] * (1.0 + erf(data[i] / math.sqrt(2.0)))
    raise TDLError(f"LeakyReLU: act_type '{kind}' is not described")


@dataclass(frozen=True)
class DropoutAttrs:
    p: float = 0.5
    mode: str = "training"
    axes: tuple[int, ...] = ()


@tdl_op("Dropout", inputs=("data",), attrs=DropoutAttrs, cases=[
    Case(shapes=((3, 4),), attrs={"p": 0.5}),
    Case(shapes=((2, 3, 4),), attrs={"p": 0.2, "axes": (1,)}),
])
def dropout(data: TensorVar, attrs: DropoutAttrs):
    """out[i] = data[i]: Dropout outside training (mode='training', the deterministic setting compared here).
    In training it multiplies by a random mask / (1 - p); the mask is an opaque random input, not described.
    With ``axes`` (variational dropout) one mask is shared along those axes, which shards drawing their own
    masks would not share: those axes are read whole, through an opaque identity, so they do not split."""
    if attrs.mode == "always":
        raise TDLError("Dropout: mode 'always' is random even at inference and is not described")
    shared = {a % data.ndim for a in attrs.axes}
    if not shared:
        return lambda *i: data[i]
    whole = Opaque("Dropout", lambda a: a)

    def out(*i):
        return whole(data[tuple(slice(None) if d in shared else x for d, x in enumerate(i))])[
            tuple(x for d, x in enumerate(i) if d in shared)]
    return out


# -------------------------------------------------------------------------------------------- unary math

def _unary_op(op: str, fn: UnaryFn, formula: str, *, positive: bool = False, draw: dict | None = None) -> None:
    """Registers ``op``: out[i] = fn(data[i]), with two cases (ranks 2 and 3) whose inputs are drawn as ``draw``
    says (Case keywords; ``positive`` is short for positive inputs)."""
    draw = draw or ({"positive": (0,)} if positive else {})
    _register(op, lambda data, attrs: (lambda *i: fn(data[i])), f"out[i] = {formula}   (element-wise).",
              inputs=("data",), cases=[Case(shapes=((3, 4),), **draw), Case(shapes=((2, 3, 5),), **draw)],
              aliases=_numpy_names(op))


_unary_op("relu", relu, "max(data[i], 0)")
_unary_op("sigmoid", sigmoid, "1 / (1 + exp(-data[i]))")
_unary_op("tanh", tanh, "tanh(data[i])")
_unary_op("softsign", _softsign, "data[i] / (1 + |data[i]|)")
_unary_op("exp", exp, "exp(data[i])")
_unary_op("log", log, "log(data[i])", positive=True)
_unary_op("log1p", log1p, "log(1 + data[i])", positive=True)
_unary_op("expm1", expm1, "exp(data[i]) - 1")
_unary_op("sqrt", sqrt, "sqrt(data[i])", positive=True)
_unary_op("rsqrt", rsqrt, "1 / sqrt(data[i])", positive=True)
_unary_op("square", square, "data[i] ** 2")
_unary_op("reciprocal", reciprocal, "1 / data[i]", positive=True)
_unary_op("negative", lambda x: -x, "-data[i]")
_unary_op("abs", abs_, "|data[i]|")
_unary_op("sign", sign, "sign(data[i])")
_unary_op("sin", sin, "sin(data[i])")
_unary_op("cos", cos, "cos(data[i])")
_unary_op("erf", erf, "erf(data[i])")
_unary_op("_copy", lambda x: x, "data[i]  (identity)")
_unary_op("BlockGrad", lambda x: x, "data[i]  (identity forward; stops the gradient)")
_unary_op("zeros_like", lambda x: uses(0.0, x), "0  (shape of data: its elements are read for their positions)")
_unary_op("ones_like", lambda x: uses(1.0, x), "1  (shape of data: its elements are read for their positions)")

UNIT = {"uniform": ((0, -0.95, 0.95),)}     # inside the domain (-1, 1) of arcsin, arccos, arctanh, erfinv
SMALL_INTS = {"ints": ((0, 3),)}            # 0, 1 and 2: zeros for the logical ops


def _cbrt(x: ValueExpr) -> ValueExpr:
    return sign(x) * abs_(x) ** (1.0 / 3.0)


_unary_op("tan", lambda x: sin(x) / cos(x), "sin(data[i]) / cos(data[i])")
_unary_op("arcsin", arcsin, "arcsin(data[i])", draw=UNIT)
_unary_op("arccos", arccos, "arccos(data[i])", draw=UNIT)
_unary_op("arctan", arctan, "arctan(data[i])")
_unary_op("sinh", lambda x: (exp(x) - exp(-x)) / 2.0, "(exp(data[i]) - exp(-data[i])) / 2")
_unary_op("cosh", lambda x: (exp(x) + exp(-x)) / 2.0, "(exp(data[i]) + exp(-data[i])) / 2")
_unary_op("arcsinh", lambda x: log(x + sqrt(square(x) + 1.0)), "log(data[i] + sqrt(data[i]^2 + 1))")
_unary_op("arccosh", lambda x: log(x + sqrt(square(x) - 1.0)), "log(data[i] + sqrt(data[i]^2 - 1))",
          draw={"uniform": ((0, 1.0, 3.0),)})
_unary_op("arctanh", lambda x: 0.5 * log((1.0 + x) / (1.0 - x)), "log((1 + data[i]) / (1 - data[i])) / 2",
          draw=UNIT)
_unary_op("degrees", lambda x: x * (180.0 / math.pi), "data[i] * 180 / pi")
_unary_op("radians", lambda x: x * (math.pi / 180.0), "data[i] * pi / 180")
_unary_op("floor", floor, "floor(data[i])")
_unary_op("ceil", ceil, "ceil(data[i])")
_unary_op("round", round_, "data[i] rounded to the nearest integer, halves away from zero")
_unary_op("rint", rint, "data[i] rounded to the nearest integer, halves to the even one")
_unary_op("fix", trunc, "data[i] rounded toward zero")
_unary_op("trunc", trunc, "data[i] rounded toward zero")
_unary_op("cbrt", _cbrt, "sign(data[i]) * |data[i]|^(1/3)")
_unary_op("rcbrt", lambda x: 1.0 / _cbrt(x), "1 / cbrt(data[i])")
_unary_op("log2", lambda x: log(x) / math.log(2.0), "log(data[i]) / log(2)", positive=True)
_unary_op("log10", lambda x: log(x) / math.log(10.0), "log(data[i]) / log(10)", positive=True)
_unary_op("gamma", gamma, "gamma(data[i])")
_unary_op("gammaln", gammaln, "log |gamma(data[i])|")
_unary_op("erfinv", erfinv, "erf^-1(data[i])", draw=UNIT)
_unary_op("logical_not", lambda x: eq(x, 0.0), "1 if data[i] == 0 else 0", draw=SMALL_INTS)
# quantization-aware training: MXNet's backward passes the gradient straight through (not round's zeros)
_unary_op("_contrib_round_ste", round_, "data[i] rounded to the nearest integer, halves away from zero")
_unary_op("_contrib_sign_ste", sign, "sign(data[i])")


# -------------------------------------------------------------------------------------------- scalar ops

BinaryFnLike = Callable[[ValueExpr, "ValueExpr | float"], ValueExpr]


@dataclass(frozen=True)
class ScalarAttrs:
    scalar: float = 1.0


def _scalar_op(op: str, fn: Callable[[ValueExpr, float], ValueExpr], formula: str, *,
               scalars: tuple[float, float] = (2.5, -0.75), positive: bool = False, draw: dict | None = None) -> None:
    """Registers ``op``: out[i] = fn(data[i], scalar), with one case per scalar value (inputs drawn as
    ``draw`` says, as for :func:`_unary_op`)."""
    draw = draw or ({"positive": (0,)} if positive else {})
    _register(op, lambda data, attrs: (lambda *i: fn(data[i], attrs.scalar)),
              f"out[i] = {formula}   (element-wise, scalar attribute s).", inputs=("data",), attrs=ScalarAttrs,
              cases=[Case(shapes=((3, 4),), attrs={"scalar": scalars[0]}, **draw),
                     Case(shapes=((2, 3, 5),), attrs={"scalar": scalars[1]}, **draw)], aliases=_numpy_names(op))


_scalar_op("_plus_scalar", lambda x, s: x + s, "data[i] + s")
_scalar_op("_minus_scalar", lambda x, s: x - s, "data[i] - s")
_scalar_op("_rminus_scalar", lambda x, s: s - x, "s - data[i]")
_scalar_op("_mul_scalar", lambda x, s: x * s, "data[i] * s")
# a gradient reversal layer (domain adaptation): MXNet's backward multiplies the gradient by s
_scalar_op("_contrib_gradientmultiplier", lambda x, s: x, "data[i]  (identity forward)")
_scalar_op("_div_scalar", lambda x, s: x / s, "data[i] / s")
_scalar_op("_rdiv_scalar", lambda x, s: s / x, "s / data[i]", positive=True)
_scalar_op("_power_scalar", lambda x, s: x ** s, "data[i] ** s", scalars=(2.0, 0.5), positive=True)
_scalar_op("_maximum_scalar", maximum, "max(data[i], s)", scalars=(0.1, -0.3))
_scalar_op("_minimum_scalar", minimum, "min(data[i], s)", scalars=(0.1, -0.3))


def _hypot(a: ValueExpr, b: ValueExpr | float) -> ValueExpr:
    return sqrt(square(a) + square(b))


def _mod(a: ValueExpr | float, b: ValueExpr | float) -> ValueExpr:
    """a - floor(a / b) * b (the sign of b, as numpy's mod), and 0 where b is 0 (MXNet's choice)."""
    return where(eq(b, 0.0), 0.0, a - floor(a / b) * b)


def _truth(x: ValueExpr | float) -> ValueExpr:
    return ne(x, 0.0)


def _logical_and(a, b) -> ValueExpr:
    return _truth(a) * _truth(b)


def _logical_or(a, b) -> ValueExpr:
    return maximum(_truth(a), _truth(b))


def _logical_xor(a, b) -> ValueExpr:
    return ne(_truth(a), _truth(b))


_scalar_op("_rpower_scalar", lambda x, s: s ** x, "s ** data[i]", scalars=(2.5, 0.5))
_scalar_op("_hypot_scalar", _hypot, "sqrt(data[i]^2 + s^2)")
_scalar_op("_mod_scalar", _mod, "data[i] mod s  (the sign of s; 0 where s = 0)", scalars=(1.5, -0.75))
_scalar_op("_rmod_scalar", lambda x, s: _mod(s, x), "s mod data[i]  (the sign of data[i]; 0 where it is 0)",
           scalars=(2.5, -1.25), draw={"ints": ((0, 4),)})

# MXNet's name stem -> (function, how the formula writes it)
COMPARISONS: dict[str, tuple[BinaryFnLike, str]] = {
    "equal": (eq, "=="), "not_equal": (ne, "!="), "greater": (gt, ">"), "greater_equal": (ge, ">="),
    "lesser": (lt, "<"), "lesser_equal": (le, "<=")}
LOGICAL: dict[str, tuple[BinaryFnLike, str]] = {
    "logical_and": (_logical_and, "and"), "logical_or": (_logical_or, "or"), "logical_xor": (_logical_xor, "xor")}


def _predicates(lhs: str, rhs: str) -> list[tuple[str, BinaryFnLike, str]]:
    """(name stem, function, formula) of every comparison and logical op, its operands written lhs and rhs."""
    return ([(name, fn, f"1 if {lhs} {sym} {rhs} else 0") for name, (fn, sym) in COMPARISONS.items()]
            + [(name, fn, f"1 if ({lhs} != 0) {word} ({rhs} != 0) else 0") for name, (fn, word) in LOGICAL.items()])


for _stem, _fn, _formula in _predicates("data[i]", "s"):      # s = 1 and s = 0 against data in {0, 1, 2}
    _scalar_op(f"_{_stem}_scalar", _fn, _formula, scalars=(1.0, 0.0), draw=SMALL_INTS)


# ---------------------------------------------------------------------------------- binary and broadcast

BinaryFn = Callable[[ValueExpr, ValueExpr], ValueExpr]


def _elemwise_op(op: str, fn: BinaryFn, formula: str, *, positive_rhs: bool = False,
                 draw: dict | None = None) -> None:
    """Registers ``op``: out[i] = fn(lhs[i], rhs[i]) on equal shapes (inputs drawn as ``draw`` says)."""
    draw = draw or ({"positive": (1,)} if positive_rhs else {})
    _register(op, lambda lhs, rhs, attrs: (lambda *i: fn(lhs[i], rhs[i])),
              f"out[i] = {formula}   (element-wise, equal shapes).", inputs=("lhs", "rhs"),
              cases=[Case(shapes=((3, 4), (3, 4)), **draw), Case(shapes=((2, 3, 5), (2, 3, 5)), **draw)])


_elemwise_op("elemwise_add", lambda a, b: a + b, "lhs[i] + rhs[i]")
_elemwise_op("elemwise_sub", lambda a, b: a - b, "lhs[i] - rhs[i]")
_elemwise_op("elemwise_mul", lambda a, b: a * b, "lhs[i] * rhs[i]")
_elemwise_op("elemwise_div", lambda a, b: a / b, "lhs[i] / rhs[i]", positive_rhs=True)
_elemwise_op("_grad_add", lambda a, b: a + b, "lhs[i] + rhs[i]  (the sum of gradients in backward graphs)")
_elemwise_op("_power", lambda a, b: a ** b, "lhs[i] ** rhs[i]", draw={"positive": (0,)})
_elemwise_op("_hypot", _hypot, "sqrt(lhs[i]^2 + rhs[i]^2)")
_elemwise_op("_maximum", maximum, "max(lhs[i], rhs[i])")
_elemwise_op("_minimum", minimum, "min(lhs[i], rhs[i])")
_elemwise_op("_mod", _mod, "lhs[i] mod rhs[i]  (the sign of rhs[i]; 0 where rhs[i] = 0)",
             draw={"ints": ((0, 5), (1, 3))})
BOTH_INTS = {"ints": ((0, 3), (1, 3))}       # equal elements and zeros occur
for _stem, _fn, _formula in _predicates("lhs[i]", "rhs[i]"):
    _elemwise_op(f"_{_stem}", _fn, _formula, draw=BOTH_INTS)


def broadcast_read(x: TensorVar, i: Sequence[Var]) -> ValueExpr:
    """``x`` at output index ``i`` under NumPy-style broadcasting: dims right-aligned, extent-1 dims read at 0."""
    lead = len(i) - x.ndim
    return x[tuple(0 if n == 1 else v for n, v in zip(x.shape, i[lead:]))]


BROADCAST_CASES = [
    Case(shapes=((2, 3, 4), (2, 1, 4))),        # rhs broadcast along the middle dim
    Case(shapes=((2, 1, 4), (1, 3, 1))),        # both sides broadcast, on different dims
    Case(shapes=((1, 4), (3, 1))),              # outer product shape
    Case(shapes=((2, 3, 4), (4,))),             # lower-rank rhs (padded with leading 1s)
]


def _broadcast_op(op: str, fn: BinaryFn, formula: str, *, positive_rhs: bool = False,
                  draw: dict | None = None) -> None:
    """Registers ``op``: out[i] = fn(lhs[i'], rhs[i'']) with broadcasting (inputs drawn as ``draw`` says; with
    it, only the first three shapes of BROADCAST_CASES)."""
    if draw:
        cases = [Case(c.shapes, **draw) for c in BROADCAST_CASES[:3]]
    else:
        cases = [Case(c.shapes, positive=(1,)) for c in BROADCAST_CASES] if positive_rhs else BROADCAST_CASES
    _register(op, lambda lhs, rhs, attrs: (lambda *i: fn(broadcast_read(lhs, i), broadcast_read(rhs, i))),
              f"out[i] = {formula}   (broadcasting: extent-1 and missing leading dims repeat).",
              inputs=("lhs", "rhs"), cases=cases, aliases=_numpy_names(op))


_broadcast_op("broadcast_add", lambda a, b: a + b, "lhs[i] + rhs[i]")
_broadcast_op("broadcast_sub", lambda a, b: a - b, "lhs[i] - rhs[i]")
_broadcast_op("broadcast_mul", lambda a, b: a * b, "lhs[i] * rhs[i]")
_broadcast_op("broadcast_div", lambda a, b: a / b, "lhs[i] / rhs[i]", positive_rhs=True)
_broadcast_op("broadcast_maximum", maximum, "max(lhs[i], rhs[i])")
_broadcast_op("broadcast_minimum", minimum, "min(lhs[i], rhs[i])")
_broadcast_op("broadcast_power", lambda a, b: a ** b, "lhs[i] ** rhs[i]", draw={"positive": (0,)})
_broadcast_op("broadcast_hypot", _hypot, "sqrt(lhs[i]^2 + rhs[i]^2)")
_broadcast_op("broadcast_mod", _mod, "lhs[i] mod rhs[i]  (the sign of rhs[i]; 0 where rhs[i] = 0)",
              draw={"ints": ((0, 5), (1, 3))})
for _stem, _fn, _formula in _predicates("lhs[i]", "rhs[i]"):
    _broadcast_op(f"broadcast_{_stem}", _fn, _formula, draw=BOTH_INTS)


# ---------------------------------------------------------------------------------------------- others

@dataclass(frozen=True)
class AddNAttrs:
    num_args: int


@tdl_op("add_n", inputs=("*args",), attrs=AddNAttrs, cases=[
    Case(shapes=((3, 4),) * 2, attrs={"num_args": 2}),
    Case(shapes=((2, 3, 2),) * 4, attrs={"num_args": 4}),
])
def add_n(args: tuple[TensorVar, ...], attrs: AddNAttrs):
    """out[i] = sum_k args[k][i] over the num_args inputs of equal shape (MXNet's ElementWiseSum)."""
    return lambda *i: sum((a[i] for a in args[1:]), args[0][i])


@dataclass(frozen=True)
class ClipAttrs:
    a_min: float
    a_max: float


@tdl_op("clip", inputs=("data",), attrs=ClipAttrs, cases=[
    Case(shapes=((3, 4),), attrs={"a_min": -0.5, "a_max": 0.5}),
    Case(shapes=((2, 3, 4),), attrs={"a_min": 0.0, "a_max": 1.5}),
])
def clip(data: TensorVar, attrs: ClipAttrs):
    """out[i] = min(max(data[i], a_min), a_max)."""
    return lambda *i: minimum(maximum(data[i], attrs.a_min), attrs.a_max)


@tdl_op("where", inputs=("condition", "x", "y"), cases=[
    Case(shapes=((3, 4), (3, 4), (3, 4)), ints=((0, 3),)),
    Case(shapes=((3,), (3, 2, 5), (3, 2, 5)), ints=((0, 2),)),
])
def where_(condition: TensorVar, x: TensorVar, y: TensorVar, attrs: NoAttrs):
    """out[i] = x[i] if condition[i] != 0 else y[i]  (a 1-D condition selects whole rows: condition[i_0])."""
    if condition.ndim == 1 and x.ndim > 1:
        return lambda *i: where(condition[i[0]], x[i], y[i])
    return lambda *i: where(condition[i], x[i], y[i])


@tdl_op("_npi_where", inputs=("condition", "x", "y"), cases=[
    Case(shapes=((3, 4), (3, 4), (3, 4)), ints=((0, 3),)),
    Case(shapes=((3, 1), (1, 4), (3, 4)), ints=((0, 2),)),         # numpy broadcasting
])
def np_where(condition: TensorVar, x: TensorVar, y: TensorVar, attrs: NoAttrs):
    """out[i] = x[i] if condition[i] != 0 else y[i]  (the three broadcast as numpy's)."""
    return lambda *i: where(broadcast_read(condition, i), broadcast_read(x, i), broadcast_read(y, i))


@dataclass(frozen=True)
class WhereScalarAttrs:
    scalar: float = 0.0


@tdl_op("_npi_where_lscalar", inputs=("condition", "x"), attrs=WhereScalarAttrs, cases=[
    Case(shapes=((3, 4), (3, 4)), ints=((0, 3),), attrs={"scalar": 2.5}),
    Case(shapes=((3, 1), (3, 4)), ints=((0, 2),), attrs={"scalar": -1.0}),
])
def np_where_lscalar(condition: TensorVar, x: TensorVar, attrs: WhereScalarAttrs):
    """out[i] = scalar if condition[i] != 0 else x[i]  (numpy's where(c, s, x): the scalar on the left)."""
    return lambda *i: where(broadcast_read(condition, i), attrs.scalar, broadcast_read(x, i))


@tdl_op("_npi_where_rscalar", inputs=("condition", "y"), attrs=WhereScalarAttrs, cases=[
    Case(shapes=((3, 4), (3, 4)), ints=((0, 3),), attrs={"scalar": 2.5}),
    Case(shapes=((3, 1), (3, 4)), ints=((0, 2),), attrs={"scalar": -1.0}),
])
def np_where_rscalar(condition: TensorVar, y: TensorVar, attrs: WhereScalarAttrs):
    """out[i] = y[i] if condition[i] != 0 else scalar  (numpy's where(c, y, s): the scalar on the right)."""
    return lambda *i: where(broadcast_read(condition, i), broadcast_read(y, i), attrs.scalar)


@dataclass(frozen=True)
class WhereScalarsAttrs:
    x: float = 0.0
    y: float = 0.0


@tdl_op("_npi_where_scalar2", inputs=("condition",), attrs=WhereScalarsAttrs, cases=[
    Case(shapes=((3, 4),), ints=((0, 3),), attrs={"x": 2.5, "y": -1.0}),
    Case(shapes=((2, 3, 2),), ints=((0, 2),), attrs={"x": 0.5}),
])
def np_where_scalar2(condition: TensorVar, attrs: WhereScalarsAttrs):
    """out[i] = x if condition[i] != 0 else y  (numpy's where(c, x, y) on two scalars)."""
    return lambda *i: where(condition[i], attrs.x, attrs.y)


# The numpy interface's binary kernels with no legacy twin, each as a broadcast op and its two scalar forms
# (``_npi_<op>_scalar``: the scalar on the right; ``_npi_r<op>_scalar``: on the left).

def _arctan2(y: ValueExpr | float, x: ValueExpr | float) -> ValueExpr:
    """The angle of the point (x, y) in (-pi, pi]: arctan(y / x) moved by pi into the left half-plane; +-pi/2
    (0 at the origin) on the y axis, where y / x is not taken."""
    base = arctan(y / where(eq(x, 0.0), 1.0, x))
    left = where(lt(y, 0.0), base - math.pi, base + math.pi)
    return where(gt(x, 0.0), base, where(lt(x, 0.0), left, sign(y) * (math.pi / 2.0)))


def _copysign(a: ValueExpr | float, b: ValueExpr | float) -> ValueExpr:
    return where(lt(b, 0.0), -abs_(a), abs_(a))


def _ldexp(a: ValueExpr | float, b: ValueExpr | float) -> ValueExpr:
    return a * 2.0 ** b


for _name, _fn, _formula in (("arctan2", _arctan2, "arctan2({a}, {b})  (the angle of the point ({b}, {a}))"),
                             ("copysign", _copysign, "|{a}| with the sign of {b}  (negative where {b} < 0)"),
                             ("ldexp", _ldexp, "{a} * 2 ** {b}")):
    _broadcast_op(f"_npi_{_name}", _fn, _formula.format(a="lhs[i]", b="rhs[i]"))
    _scalar_op(f"_npi_{_name}_scalar", _fn, _formula.format(a="data[i]", b="s"))
    _scalar_op(f"_npi_r{_name}_scalar", lambda x, s, fn=_fn: fn(s, x), _formula.format(a="s", b="data[i]"))


@tdl_op("_npi_polyval", inputs=("p", "x"), cases=[
    Case(shapes=((3,), (3, 4))),
    Case(shapes=((1,), (2, 3))),
    Case(shapes=((5,), (4,)), uniform=((1, -1.5, 1.5),)),
])
def np_polyval(p: TensorVar, x: TensorVar, attrs: NoAttrs):
    """out[i] = sum_j p[j] x[i]^(n-1-j), the polynomial of coefficients p (highest power first) at x[i]:
    ((p[0] x[i] + p[1]) x[i] + ...) + p[n-1]."""
    if p.ndim != 1:
        raise TDLError(f"_npi_polyval: coefficients of rank {p.ndim} (numpy's polyval takes a vector)")

    def out(*i: Var) -> ValueExpr:
        expr = p[0]
        for j in range(1, p.shape[0]):
            expr = expr * x[i] + p[j]
        return expr if p.shape[0] > 1 else uses(p[0], x[i])
    return out


@dataclass(frozen=True)
class AroundAttrs:
    decimals: int = 0


@tdl_op("_npi_around", inputs=("x",), attrs=AroundAttrs, cases=[
    Case(shapes=((3, 4),), uniform=((0, -20.0, 20.0),)),
    Case(shapes=((2, 3, 5),), attrs={"decimals": 1}),
])
def around(x: TensorVar, attrs: AroundAttrs):
    """out[i] = rint(x[i] * 10^decimals) / 10^decimals  (halves to the even neighbour, as numpy's around)."""
    scale = 10.0 ** attrs.decimals
    return lambda *i: rint(x[i] * scale) / scale


@dataclass(frozen=True)
class HardSigmoidAttrs:
    alpha: float = 0.2
    beta: float = 0.5


@tdl_op("hard_sigmoid", inputs=("data",), attrs=HardSigmoidAttrs, cases=[
    Case(shapes=((3, 4),)),
    Case(shapes=((2, 3, 5),), attrs={"alpha": 0.7, "beta": 0.25}),
])
def hard_sigmoid(data: TensorVar, attrs: HardSigmoidAttrs):
    """out[i] = min(max(alpha * data[i] + beta, 0), 1)."""
    return lambda *i: minimum(maximum(attrs.alpha * data[i] + attrs.beta, 0.0), 1.0)


@tdl_op("smooth_l1", inputs=("data",), attrs=ScalarAttrs, cases=[
    Case(shapes=((3, 4),)),
    Case(shapes=((2, 3, 5),), attrs={"scalar": 2.0}),
    Case(shapes=((3, 5),), attrs={"scalar": 0.5}),
])
def smooth_l1(data: TensorVar, attrs: ScalarAttrs):
    """out[i] = (s * x)^2 / 2 if |x| < 1 / s^2 else |x| - 1 / (2 s^2), x = data[i] and s the scalar attribute."""
    s2 = attrs.scalar * attrs.scalar
    return lambda *i: where(lt(abs_(data[i]), 1.0 / s2), 0.5 * s2 * square(data[i]), abs_(data[i]) - 0.5 / s2)


@dataclass(frozen=True)
class QuadraticAttrs:
    a: float = 0.0
    b: float = 0.0
    c: float = 0.0


@tdl_op("_contrib_quadratic", inputs=("data",), attrs=QuadraticAttrs, cases=[
    Case(shapes=((3, 4),), attrs={"a": 1.5, "b": -2.0, "c": 0.5}),
    Case(shapes=((2, 3, 5),), attrs={"a": -0.25, "c": 3.0}),
])
def quadratic(data: TensorVar, attrs: QuadraticAttrs):
    """out[i] = a data[i]^2 + b data[i] + c (MXNet's example of an operator written in C++)."""
    return lambda *i: attrs.a * square(data[i]) + attrs.b * data[i] + attrs.c


@dataclass(frozen=True)
class CastAttrs:
    dtype: str


CAST_EXACT = {"float32": "data[i]", "float64": "data[i]", "int32": "trunc(data[i])", "int64": "trunc(data[i])"}


@tdl_op("Cast", inputs=("data",), attrs=CastAttrs, cases=[
    Case(shapes=((3, 4),), attrs={"dtype": "float32"}),
    Case(shapes=((2, 3, 5),), attrs={"dtype": "int32"}),
    Case(shapes=((3, 5),), attrs={"dtype": "float64"}),
])
def cast(data: TensorVar, attrs: CastAttrs):
    """out[i] = data[i] (to float32, float64) or trunc(data[i]) (to int32, int64: toward zero, for values in
    range); the other types round to fewer bits or wrap around and are not described."""
    if attrs.dtype not in CAST_EXACT:
        raise TDLError(f"Cast: dtype '{attrs.dtype}' is not described (only {', '.join(CAST_EXACT)})")
    if attrs.dtype.startswith("int"):
        return lambda *i: trunc(data[i])
    return lambda *i: data[i]


@dataclass(frozen=True)
class MakeLossAttrs:
    normalization: str = "null"


@tdl_op("MakeLoss", inputs=("data",), attrs=MakeLossAttrs, cases=[
    Case(shapes=((3, 4),)),
    Case(shapes=((2, 3, 5),), attrs={"grad_scale": 2.0}),
    Case(shapes=((4, 3),), attrs={"normalization": "batch"}),
    Case(shapes=((4, 3),), attrs={"normalization": "valid", "valid_thresh": 0.1}),
])
def make_loss_layer(data: TensorVar, attrs: MakeLossAttrs):
    """out[i] = data[i]: forward identity; the backward ignores the head gradient and gives grad_scale.
    normalization 'batch' or 'valid' divides that gradient by the batch, or by the elements above valid_thresh
    in the whole tensor, a count each shard would take from its own piece: data is then read whole, through an
    opaque identity, so no dimension splits and the op is computed whole (on the first worker)."""
    if attrs.normalization not in ("null", "batch", "valid"):
        raise TDLError(f"MakeLoss: unknown normalization '{attrs.normalization}' (null, batch or valid)")
    if attrs.normalization == "null":
        return lambda *i: data[i]
    whole, every = Opaque("MakeLoss", lambda a: a), (slice(None),) * data.ndim
    return lambda *i: whole(data[every])[i]


_unary_op("make_loss", lambda x: x, "data[i]  (identity forward; the backward gives ones)")


@dataclass(frozen=True)
class FillAttrs:
    shape: tuple[int, ...]
    dtype: str = "float32"


def _fill_op(op: str, value: float) -> None:
    """Registers ``op``: an input-less tensor of the ``shape`` attribute filled with ``value``."""
    _register(op, lambda attrs: (lambda *i: value), f"out[i] = {value:g} for i in the attribute shape (no inputs).",
              inputs=(), attrs=FillAttrs,
              cases=[Case(shapes=(), attrs={"shape": (3, 4)}), Case(shapes=(), attrs={"shape": (2, 3, 1)})],
              aliases=_numpy_names(op))


_fill_op("_zeros", 0.0)
_fill_op("_ones", 1.0)


@dataclass(frozen=True)
class FullAttrs:
    shape: tuple[int, ...]
    value: float
    dtype: str = "float32"


@dataclass(frozen=True)
class FullLikeAttrs:
    fill_value: float
    dtype: str | None = None


@tdl_op("_npi_full_like", inputs=("a",), attrs=FullLikeAttrs, cases=[
    Case(shapes=((3, 4),), attrs={"fill_value": 0.0}),
    Case(shapes=((2, 3, 5),), attrs={"fill_value": -1.5}),
])
def full_like(a: TensorVar, attrs: FullLikeAttrs):
    """out[i] = fill_value  (the numpy interface's zeros_like, ones_like, full_like: shape of a, its elements read
    for their positions)."""
    if attrs.dtype not in (None, "None", "float32"):
        raise TDLError(f"_npi_full_like: dtype '{attrs.dtype}' is not described (float32 is)")
    return lambda *i: uses(attrs.fill_value, a[i])


@tdl_op("_full", inputs=(), attrs=FullAttrs, cases=[
    Case(shapes=(), attrs={"shape": (3, 4), "value": 0.5}),
    Case(shapes=(), attrs={"shape": (2, 3, 1), "value": -2}),
])
def full(attrs: FullAttrs):
    """out[i] = value for i in the attribute shape (no inputs)."""
    return lambda *i: attrs.value


@tdl_op("_contrib_div_sqrt_dim", inputs=("data",), cases=[
    Case(shapes=((3, 4),)),
    Case(shapes=((2, 3, 8),)),
])
def div_sqrt_dim(data: TensorVar, attrs: NoAttrs):
    """out[i, j] = data[i, j] / sqrt(|j|), j the last axis: its constant follows the last extent, so a split of
    that axis changes it (the analysis refuses the split; coarsening must not merge it as element-wise)."""
    scale = 1.0 / math.sqrt(data.shape[-1])
    return lambda *i: data[i] * scale
