"""TDL expressions: the abstract syntax of operator descriptions.

An operator's output is a lambda over index variables returning a *value expression*; tensor accesses take
*index expressions*. Both are immutable trees built with ordinary Python operators:

    lambda b, co, x: Sum(lambda ci, dx: data[b, ci, x * 2 + dx] * weight[co, ci, dx])

Index expressions are integer linear combinations of atoms (index variables, and floor-division / modulo of an
index expression by a constant, which reshapes need); a product of two index variables is rejected. Value
expressions are floats: constants, tensor accesses, arithmetic, math functions, comparisons, selections,
reductions (``Sum``/``Max``/``Min``/``Prod``), uses of an index as a value, and opaque functions.

The range of a reduction variable comes from the input shapes: the extent of a tensor dimension that the
variable indexes directly (``weight[co, ci, dx]`` gives ``dx`` the extent of weight's last dimension).
"""
from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Union

from tofu.errors import TDLError

_ids = itertools.count()   # makes index variables of nested lambdas distinct even when their names clash


# ----------------------------------------------------------------------------------------------- indices

class IndexExpr:
    """An integer-valued expression of index variables."""

    def __add__(self, other: "IndexLike") -> "Affine":
        return _affine(self).plus(_affine(as_index(other, "+")))

    __radd__ = __add__

    def __sub__(self, other: "IndexLike") -> "Affine":
        return _affine(self).plus(_affine(as_index(other, "-")).scaled(-1))

    def __rsub__(self, other: "IndexLike") -> "Affine":
        return _affine(as_index(other, "-")).plus(_affine(self).scaled(-1))

    def __neg__(self) -> "Affine":
        return _affine(self).scaled(-1)

    def __mul__(self, other: int) -> "Affine":
        if isinstance(other, IndexExpr):
            if isinstance(c := _affine(other).constant_value(), int):
                return _affine(self).scaled(c)
            raise TDLError(f"index ({self}) * ({other}) is a product of index variables and not affine")
        if not isinstance(other, int) or isinstance(other, bool):
            raise TDLError(f"index {self} multiplied by {other}: index arithmetic takes integers only")
        return _affine(self).scaled(other)

    __rmul__ = __mul__

    def __floordiv__(self, k: int) -> "IndexExpr":
        _check_divisor(self, k, "//")
        return self if k == 1 else FloorDiv(_affine(self), k)

    def __mod__(self, k: int) -> "IndexExpr":
        _check_divisor(self, k, "%")
        return Affine((), 0) if k == 1 else Mod(_affine(self), k)

    def __truediv__(self, other):
        raise TDLError(f"index {self} / {other!r}: use // for index division")

    def __getitem__(self, item):
        raise TDLError(f"index variable {self} cannot be indexed; did you mean a tensor?")


def _check_divisor(e: IndexExpr, k, sym: str) -> None:
    if isinstance(k, IndexExpr) or not isinstance(k, int) or isinstance(k, bool) or k <= 0:
        raise TDLError(f"index ({e}) {sym} {k} is not affine: the divisor must be a positive integer constant")


@dataclass(frozen=True, eq=True)
class Var(IndexExpr):
    """An index variable; ``name`` comes from the lambda parameter, ``uid`` keeps nested ones apart."""

    name: str
    uid: int = field(default_factory=lambda: next(_ids))

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class FloorDiv(IndexExpr):
    arg: "Affine"
    k: int

    def __str__(self) -> str:
        return f"({self.arg}) // {self.k}"


@dataclass(frozen=True)
class Mod(IndexExpr):
    arg: "Affine"
    k: int

    def __str__(self) -> str:
        return f"({self.arg}) % {self.k}"


Atom = Union[Var, FloorDiv, Mod]


@dataclass(frozen=True)
class Affine(IndexExpr):
    """sum_i coeff_i * atom_i + const; truly affine when every atom is a :class:`Var`."""

    terms: tuple[tuple[Atom, int], ...]
    const: int = 0

    def plus(self, other: "Affine") -> "Affine":
        coeffs: dict[Atom, int] = dict(self.terms)
        for atom, c in other.terms:
            coeffs[atom] = coeffs.get(atom, 0) + c
        return Affine(tuple((a, c) for a, c in coeffs.items() if c != 0), self.const + other.const)

    def scaled(self, k: int) -> "Affine":
        if k == 1:
            return self
        if k == 0:
            return Affine((), 0)
        return Affine(tuple((a, c * k) for a, c in self.terms), self.const * k)

    def constant_value(self) -> int | None:
        return self.const if not self.terms else None

    def single_var(self) -> Var | None:
        """The variable when the expression is exactly one variable (coefficient 1, no constant)."""
        if self.const == 0 and len(self.terms) == 1 and self.terms[0][1] == 1 and isinstance(self.terms[0][0], Var):
            return self.terms[0][0]
        return None

    def linear(self) -> dict[Var, int] | None:
        """``{var: coeff}`` when every atom is a variable, else None (not affine)."""
        if all(isinstance(a, Var) for a, _ in self.terms):
            return {a: c for a, c in self.terms}
        return None

    def __str__(self) -> str:
        parts = [(f"{a}" if c == 1 else f"{c}*{a}") for a, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")


IndexLike = Union[IndexExpr, int]


def _affine(e: IndexExpr) -> Affine:
    return e if isinstance(e, Affine) else Affine(((e, 1),), 0)


def as_index(x, what: str = "index") -> IndexExpr:
    """Coerces an int or index expression to an :class:`IndexExpr`; rejects values."""
    if isinstance(x, IndexExpr):
        return x
    if isinstance(x, (int,)) and not isinstance(x, bool):
        return Affine((), int(x))
    if isinstance(x, ValueExpr):
        raise TDLError(f"a value ({x}) is used in index arithmetic '{what}'; to index with a value, write the "
                       f"whole subscript as a value (index variables lifted with IndexValue: IndexValue(i) + value)")
    raise TDLError(f"{x!r} is not an index expression")


def index_vars(e: IndexExpr) -> set[Var]:
    """Every variable an index expression depends on."""
    if isinstance(e, Var):
        return {e}
    if isinstance(e, Affine):
        return set().union(*(index_vars(a) for a, _ in e.terms)) if e.terms else set()
    if isinstance(e, (FloorDiv, Mod)):
        return index_vars(e.arg)
    raise TypeError(e)


# ------------------------------------------------------------------------------------------------ values

class ValueExpr:
    """A float-valued expression."""

    def __add__(self, o): return Binary("add", self, as_value(o))
    def __radd__(self, o): return Binary("add", as_value(o), self)
    def __sub__(self, o): return Binary("sub", self, as_value(o))
    def __rsub__(self, o): return Binary("sub", as_value(o), self)
    def __mul__(self, o): return Binary("mul", self, as_value(o))
    def __rmul__(self, o): return Binary("mul", as_value(o), self)
    def __truediv__(self, o): return Binary("div", self, as_value(o))
    def __rtruediv__(self, o): return Binary("div", as_value(o), self)
    def __pow__(self, o): return Binary("pow", self, as_value(o))
    def __rpow__(self, o): return Binary("pow", as_value(o), self)
    def __neg__(self): return Unary("neg", self)


def as_value(x) -> "ValueExpr":
    if isinstance(x, ValueExpr):
        return x
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return Const(float(x))
    if isinstance(x, IndexExpr):
        raise TDLError(f"index expression {x} used as a value; wrap it in IndexValue({x})")
    raise TDLError(f"{x!r} is not a TDL value")


@dataclass(frozen=True)
class Const(ValueExpr):
    value: float

    def __str__(self) -> str:
        return repr(self.value)


UNARY = ("neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "softrelu", "abs", "square",
         "log1p", "expm1", "sin", "cos", "sign", "erf", "reciprocal", "arcsin", "arccos", "arctan", "floor", "ceil",
         "trunc", "round", "rint", "gamma", "gammaln", "erfinv")
BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum")
COMPARE = ("gt", "ge", "lt", "le", "eq", "ne")
REDUCERS = ("sum", "max", "min", "prod")


@dataclass(frozen=True)
class Unary(ValueExpr):
    fn: str
    arg: ValueExpr

    def __post_init__(self):
        if self.fn not in UNARY:
            raise TDLError(f"unknown function '{self.fn}'; TDL knows {', '.join(UNARY)}")

    def __str__(self) -> str:
        return f"{self.fn}({self.arg})"


@dataclass(frozen=True)
class Binary(ValueExpr):
    fn: str
    lhs: ValueExpr
    rhs: ValueExpr

    def __str__(self) -> str:
        return f"{self.fn}({self.lhs}, {self.rhs})"


@dataclass(frozen=True)
class Compare(ValueExpr):
    """1.0 where the comparison holds, else 0.0."""

    fn: str
    lhs: ValueExpr
    rhs: ValueExpr

    def __str__(self) -> str:
        return f"{self.fn}({self.lhs}, {self.rhs})"


@dataclass(frozen=True)
class Select(ValueExpr):
    cond: ValueExpr
    then: ValueExpr
    other: ValueExpr

    def __str__(self) -> str:
        return f"select({self.cond}, {self.then}, {self.other})"


@dataclass(frozen=True)
class IndexValue(ValueExpr):
    """An index used as a value (e.g. comparing a label with a class index)."""

    index: IndexExpr

    def __str__(self) -> str:
        return f"float({self.index})"


@dataclass(frozen=True)
class Uses(ValueExpr):
    """The value of ``value``, declaring that the operator also reads ``reads`` (e.g. a label that only its
    gradient uses, or moving statistics it updates in place): they count in the regions, not in the value."""

    value: ValueExpr
    reads: tuple["Access", ...]

    def __str__(self) -> str:
        return f"uses({self.value}; {', '.join(map(str, self.reads))})"


def uses(value, *reads: "Access") -> Uses:
    for r in reads:
        if not isinstance(r, Access):
            raise TDLError(f"uses(...): {r} is not a tensor access")
    return Uses(as_value(value), tuple(reads))


class _Full:
    """The ``:`` of a sliced access (only as an argument of an opaque function)."""

    def __repr__(self) -> str:
        return ":"


FULL = _Full()
Subscript = Union[IndexExpr, ValueExpr, _Full]


@dataclass(frozen=True)
class Access(ValueExpr):
    """``tensor[index]``. An index that is a value is data-dependent (e.g. Embedding's lookup).
    ``fill`` is the value read outside the tensor (zero padding of a convolution); None forbids it.
    ``valid`` declares that the values read are integers in ``[low, high]`` (both included): indices or lengths
    the operator needs in range (see :func:`tofu.tdl.describe.index_ranges`). It does not change the value."""

    tensor: "TensorLike"
    index: tuple[Subscript, ...]
    fill: float | None = None
    valid: tuple[int, int] | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"{self.tensor.name}[{', '.join(map(str, self.index))}]"

    @property
    def sliced(self) -> bool:
        return any(i is FULL for i in self.index)


@dataclass(frozen=True)
class Reduce(ValueExpr):
    kind: str                     # one of REDUCERS
    vars: tuple[Var, ...]
    extents: tuple[int, ...]      # each variable ranges over [0, extent)
    body: ValueExpr

    def __str__(self) -> str:
        return f"{self.kind.capitalize()}(lambda {', '.join(map(str, self.vars))}: {self.body})"


@dataclass(frozen=True)
class OpaqueCall(ValueExpr):
    """An opaque function applied to (possibly sliced) accesses, then indexed by ``index``.
    ``fn`` maps numpy arrays (sliced dimensions last, any leading batch dimensions) to one array whose
    trailing dimensions ``index`` addresses. Dimensions under a slice cannot be partitioned."""

    name: str
    fn: Callable = field(compare=False)
    args: tuple[Access, ...]
    index: tuple[IndexExpr, ...]

    def __str__(self) -> str:
        return f"{self.name}({', '.join(map(str, self.args))})[{', '.join(map(str, self.index))}]"


@dataclass(frozen=True)
class Opaque:
    """``Opaque("cholesky", np.linalg.cholesky)(a[b, :, :])[i, j]``."""

    name: str
    fn: Callable = field(compare=False)

    def __call__(self, *args: Access) -> "_OpaqueResult":
        for a in args:
            if not isinstance(a, Access):
                raise TDLError(f"opaque function '{self.name}' takes tensor accesses, got {a}")
        return _OpaqueResult(self, tuple(args))


@dataclass(frozen=True)
class _OpaqueResult:
    opaque: Opaque
    args: tuple[Access, ...]

    def __getitem__(self, index) -> OpaqueCall:
        index = index if isinstance(index, tuple) else (index,)
        return OpaqueCall(self.opaque.name, self.opaque.fn, self.args, tuple(as_index(i) for i in index))


# ------------------------------------------------------------------------------------------------ tensors

class TensorLike:
    name: str
    shape: tuple[int, ...]

    def __getitem__(self, index) -> Access:
        return self.at(index)

    def at(self, index, fill: float | None = None, valid: tuple[int, int] | None = None) -> Access:
        """An access; with ``fill``, reads outside the tensor give ``fill`` (padding); with ``valid=(low, high)``,
        the values read are integers in [low, high] (an index or a length the operator needs in range)."""
        if valid is not None:
            if isinstance(self, Computed):
                raise TDLError(f"access of '{self.name}': valid= declares the values of an input, and "
                               f"'{self.name}' is an intermediate tensor")
            valid = _valid_range(self.name, valid)
        if not isinstance(index, tuple):
            index = (index,)
        if len(index) == 1 and isinstance(index[0], tuple):
            index = index[0]
        if len(index) != len(self.shape):
            raise TDLError(f"access {self.name}[{', '.join(map(str, index))}] has rank {len(index)} but "
                           f"'{self.name}' has rank {len(self.shape)} (shape {self.shape})")
        subs: list[Subscript] = []
        for i in index:
            if isinstance(i, slice):
                if i != slice(None):
                    raise TDLError(f"access {self.name}[...]: only the full slice ':' is allowed")
                subs.append(FULL)
            elif isinstance(i, ValueExpr):
                subs.append(i)
            else:
                subs.append(as_index(i))
        return Access(self, tuple(subs), fill, valid)

    @property
    def ndim(self) -> int:
        return len(self.shape)


def _valid_range(name: str, valid) -> tuple[int, int]:
    ok = isinstance(valid, tuple) and len(valid) == 2 and all(
        isinstance(v, int) and not isinstance(v, bool) for v in valid)
    if not ok or valid[0] > valid[1]:
        raise TDLError(f"access of '{name}': valid={valid!r} must be a pair of integers (low, high) with low <= high")
    return valid


@dataclass(frozen=True, eq=False)
class TensorVar(TensorLike):
    """An input tensor of a description, with its concrete shape."""

    name: str
    shape: tuple[int, ...]

    def __repr__(self) -> str:
        return f"TensorVar({self.name}, {self.shape})"


@dataclass(frozen=True, eq=False)
class Computed(TensorLike):
    """An intermediate tensor defined by its own lambda (BatchNorm's batch mean, softmax's row maximum)."""

    name: str
    shape: tuple[int, ...]
    vars: tuple[Var, ...]
    body: ValueExpr

    def __repr__(self) -> str:
        return f"Computed({self.name}, {self.shape})"


def compute(name: str, shape: Sequence[int], fn: Callable[..., ValueExpr]) -> Computed:
    """Defines an intermediate tensor: ``mean = compute("mean", (C,), lambda c: Sum(...) / n)``."""
    vars_ = lambda_vars(fn, len(shape), f"compute('{name}')")
    return Computed(name, tuple(int(s) for s in shape), vars_, as_value(fn(*vars_)))


# ----------------------------------------------------------------------------------------------- builders

def lambda_vars(fn: Callable, rank: int | None, where: str) -> tuple[Var, ...]:
    """Index variables named after a lambda's parameters; ``*i`` takes ``rank`` of them (i0, i1, ...)."""
    if not callable(fn):
        raise TDLError(f"{where}: expected a lambda over index variables, got {fn!r}")
    params = list(inspect.signature(fn).parameters.values())
    if params and params[-1].kind is inspect.Parameter.VAR_POSITIONAL:
        if rank is None:
            raise TDLError(f"{where}: a '*{params[-1].name}' lambda needs a known rank")
        fixed = [p.name for p in params[:-1]]
        names = fixed + [f"{params[-1].name}{k}" for k in range(rank - len(fixed))]
    else:
        names = [p.name for p in params]
    if rank is not None and len(names) != rank:
        raise TDLError(f"{where}: the lambda takes {len(names)} index variables ({', '.join(names)}) "
                       f"but the tensor has rank {rank}")
    return tuple(Var(n) for n in names)


def nary(names: Sequence[str], body: Callable[[tuple[Var, ...]], object]) -> Callable:
    """A lambda with one parameter per name, calling ``body`` with them as a tuple: for descriptions whose
    number of index variables depends on the shapes, or whose variables need given names.

    ``Sum(nary(["k1", "k2"], lambda ks: x[b, ks[0], ks[1]]))`` is ``Sum(lambda k1, k2: x[b, k1, k2])``.
    """
    fn = lambda *vs: body(tuple(vs))
    fn.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names])
    return fn


def call_lambda(fn: Callable, vars_: Sequence[Var]) -> ValueExpr:
    params = list(inspect.signature(fn).parameters.values())
    return as_value(fn(*vars_)) if params else as_value(fn())


def _reduction(kind: str) -> Callable:
    def build(fn: Callable[..., ValueExpr], extents: Sequence[int] | None = None) -> Reduce:
        vars_ = lambda_vars(fn, None if extents is None else len(extents), kind.capitalize())
        if not vars_:
            raise TDLError(f"{kind.capitalize()}(lambda: ...) needs at least one reduction variable")
        body = as_value(fn(*vars_))
        if extents is None:
            found = direct_extents(body)
            missing = [v.name for v in vars_ if v not in found]
            if missing:
                raise TDLError(f"{kind.capitalize()} over {', '.join(missing)}: the variable never indexes a "
                               f"tensor dimension on its own, so its range is unknown (pass extents=...)")
            extents = [found[v] for v in vars_]
        return Reduce(kind, vars_, tuple(int(e) for e in extents), body)

    build.__name__ = kind.capitalize()
    build.__doc__ = f"``{kind.capitalize()}(lambda k, ...: body)``: the {kind} of body over the variables."
    return build


Sum = _reduction("sum")
Max = _reduction("max")
Min = _reduction("min")
Prod = _reduction("prod")


def direct_extents(e: ValueExpr) -> dict[Var, int]:
    """For each variable that alone indexes some tensor dimension in ``e``, that dimension's extent."""
    found: dict[Var, int] = {}
    for acc in walk_accesses(e):
        for d, sub in enumerate(acc.index):
            if isinstance(sub, Var):
                v = sub
            elif isinstance(sub, Affine):
                v = sub.single_var()
            else:
                v = None
            if v is not None and v not in found:
                found[v] = acc.tensor.shape[d]
    return found


def children(e: ValueExpr) -> tuple[ValueExpr, ...]:
    if isinstance(e, (Const, IndexValue)):
        return ()
    if isinstance(e, Unary):
        return (e.arg,)
    if isinstance(e, (Binary, Compare)):
        return (e.lhs, e.rhs)
    if isinstance(e, Select):
        return (e.cond, e.then, e.other)
    if isinstance(e, Access):
        return tuple(i for i in e.index if isinstance(i, ValueExpr))
    if isinstance(e, Reduce):
        return (e.body,)
    if isinstance(e, OpaqueCall):
        return e.args
    if isinstance(e, Uses):
        return (e.value, *e.reads)
    raise TypeError(f"not a TDL value: {e!r}")


def walk_accesses(e: ValueExpr):
    """Every access in ``e`` (not descending into computed tensors' own bodies)."""
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Access):
            yield x
        stack.extend(children(x))


# math functions -------------------------------------------------------------------------------------------

def _unary(fn: str) -> Callable[[object], Unary]:
    f = lambda x: Unary(fn, as_value(x))
    f.__name__ = fn
    return f


exp, log, sqrt, rsqrt, tanh, sigmoid, relu, softrelu = map(_unary, ("exp", "log", "sqrt", "rsqrt", "tanh",
                                                                     "sigmoid", "relu", "softrelu"))
abs_, square, log1p, expm1, sin, cos, sign, erf, reciprocal = map(_unary, ("abs", "square", "log1p", "expm1",
                                                                          "sin", "cos", "sign", "erf",
                                                                          "reciprocal"))
arcsin, arccos, arctan = map(_unary, ("arcsin", "arccos", "arctan"))
# rounding: round goes half away from zero, rint half to even (MXNet's round and rint)
floor, ceil, trunc, round_, rint = map(_unary, ("floor", "ceil", "trunc", "round", "rint"))
gamma, gammaln, erfinv = map(_unary, ("gamma", "gammaln", "erfinv"))     # gammaln: log |gamma(x)|


def maximum(a, b) -> Binary:
    return Binary("maximum", as_value(a), as_value(b))


def minimum(a, b) -> Binary:
    return Binary("minimum", as_value(a), as_value(b))


def where(cond, then, other) -> Select:
    return Select(as_value(cond), as_value(then), as_value(other))


def _compare(fn: str):
    f = lambda a, b: Compare(fn, as_value(a), as_value(b))
    f.__name__ = fn
    return f


gt, ge, lt, le, eq, ne = map(_compare, COMPARE)

NEG_INF = -math.inf
