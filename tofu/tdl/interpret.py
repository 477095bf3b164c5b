"""Reference interpreter: evaluates an :class:`~tofu.tdl.describe.OpDescription` on numpy arrays.

It gives the description's meaning independently of MXNet, so that the conformance test can compare the
two. Evaluation is vectorized: every index variable in scope owns one axis of a broadcast grid, an access is
one advanced-indexing gather, and a reduction adds axes for its variables and reduces them away.
Arithmetic is in float64. A data-dependent subscript (a value) is truncated toward zero, as MXNet casts a float
index to an integer, and clipped to the dimension, as MXNet's ``clip`` mode does (take, pick, Embedding); a
description whose operator does otherwise (gather_nd wraps negative indices) says so in its value arithmetic.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tofu.errors import TDLError
from tofu.tdl.describe import OpDescription
from tofu.tdl.expr import (FULL, Access, Affine, Binary, Compare, Computed, Const, FloorDiv, IndexExpr,
                           IndexValue, Mod, OpaqueCall, Reduce, Select, TensorLike, Unary, Uses, ValueExpr, Var)


def _special(name: str):
    """scipy.special's ``name`` (imported on first use)."""
    def fn(x: np.ndarray) -> np.ndarray:
        import scipy.special
        return getattr(scipy.special, name)(x)
    return fn


def round_half_away(x: np.ndarray) -> np.ndarray:
    """C's round: halves away from zero (numpy's rounds them to even)."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


_UNARY = {
    "neg": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "tanh": np.tanh, "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "relu": lambda x: np.maximum(x, 0.0),
    "softrelu": lambda x: np.logaddexp(0.0, x), "abs": np.abs, "square": np.square, "log1p": np.log1p,
    "expm1": np.expm1, "sin": np.sin, "cos": np.cos, "sign": np.sign, "erf": _special("erf"),
    "reciprocal": lambda x: 1.0 / x, "arcsin": np.arcsin, "arccos": np.arccos, "arctan": np.arctan,
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "round": round_half_away, "rint": np.rint,
    "gamma": _special("gamma"), "gammaln": _special("gammaln"), "erfinv": _special("erfinv"),
}
_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
           "maximum": np.maximum, "minimum": np.minimum}
_COMPARE = {"gt": np.greater, "ge": np.greater_equal, "lt": np.less, "le": np.less_equal, "eq": np.equal,
            "ne": np.not_equal}
_REDUCE = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}


def evaluate(desc: OpDescription, inputs: Sequence[np.ndarray],
             restrict: Mapping[Var, tuple[int, int]] | None = None) -> tuple[np.ndarray, ...]:
    """Evaluates every output of ``desc``.

    Args:
        desc: the instantiated description.
        inputs: one array per described input, with the described shapes.
        restrict: optional inclusive ranges for some index variables (output or reduction variables): the
            outputs are computed over those ranges only (one worker's part of a partition strategy).

    Returns:
        One float64 array per output (shrunk along restricted output variables).

    Raises:
        TDLError: an input has the wrong shape, or an access without ``fill`` reads outside its tensor.
    """
    if len(inputs) != len(desc.inputs):
        raise TDLError(f"{desc.op}: {len(inputs)} arrays given for {len(desc.inputs)} inputs")
    arrays: dict[int, np.ndarray] = {}
    for t, a in zip(desc.inputs, inputs):
        a = np.asarray(a, dtype=np.float64)
        if a.shape != t.shape:
            raise TDLError(f"{desc.op}: input '{t.name}' has shape {a.shape}, the description expects {t.shape}")
        arrays[id(t)] = a
    ev = _Evaluator(desc.op, arrays, restrict or {})
    return tuple(ev.tensor(o.vars, o.shape, o.body) for o in desc.outputs)


class _Evaluator:
    def __init__(self, op: str, arrays: dict[int, np.ndarray], restrict: Mapping[Var, tuple[int, int]]):
        self.op = op
        self.arrays = arrays
        self.restrict = restrict

    def _range(self, v: Var, n: int) -> tuple[int, int]:
        return self.restrict.get(v, (0, n - 1))

    def tensor(self, vars_: Sequence[Var], shape: Sequence[int], body: ValueExpr) -> np.ndarray:
        ranges = [self._range(v, n) for v, n in zip(vars_, shape)]
        dims = tuple(b - a + 1 for a, b in ranges)
        env = {v: _axis(k, n, len(dims)) + a for k, (v, n, (a, _)) in enumerate(zip(vars_, dims, ranges))}
        return np.array(np.broadcast_to(self.value(body, env, dims), dims), dtype=np.float64)

    def source(self, t: TensorLike) -> np.ndarray:
        if id(t) not in self.arrays:
            if not isinstance(t, Computed):
                raise TDLError(f"{self.op}: tensor '{t.name}' is not an input of this description")
            self.arrays[id(t)] = self.tensor(t.vars, t.shape, t.body)
        return self.arrays[id(t)]

    # -- values: each returns an array with ndim == len(dims), broadcastable to dims
    def value(self, e: ValueExpr, env: dict, dims: tuple[int, ...]) -> np.ndarray:
        nd = len(dims)
        if isinstance(e, Const):
            return np.full((1,) * nd, e.value)
        if isinstance(e, Unary):
            with np.errstate(all="ignore"):
                return _UNARY[e.fn](self.value(e.arg, env, dims))
        if isinstance(e, Binary):
            with np.errstate(all="ignore"):
                return _BINARY[e.fn](self.value(e.lhs, env, dims), self.value(e.rhs, env, dims))
        if isinstance(e, Compare):
            return _COMPARE[e.fn](self.value(e.lhs, env, dims), self.value(e.rhs, env, dims)).astype(np.float64)
        if isinstance(e, Select):
            return np.where(self.value(e.cond, env, dims) != 0, self.value(e.then, env, dims),
                            self.value(e.other, env, dims))
        if isinstance(e, IndexValue):
            return self.index(e.index, env, dims).astype(np.float64)
        if isinstance(e, Access):
            return self.access(e, env, dims)
        if isinstance(e, Reduce):
            ranges = [self._range(v, n) for v, n in zip(e.vars, e.extents)]
            extents = tuple(b - a + 1 for a, b in ranges)
            inner = dims + extents
            env2 = {v: _lift(a, len(inner)) for v, a in env.items()}
            env2.update({v: _axis(nd + k, n, len(inner)) + a
                         for k, (v, n, (a, _)) in enumerate(zip(e.vars, extents, ranges))})
            body = self.value(e.body, env2, inner)
            full = np.broadcast_to(body, body.shape[:nd] + extents)
            return _REDUCE[e.kind](full, axis=tuple(range(nd, len(inner))))
        if isinstance(e, OpaqueCall):
            return self.opaque(e, env, dims)
        if isinstance(e, Uses):
            return self.value(e.value, env, dims)
        raise TDLError(f"{self.op}: cannot evaluate {e!r}")

    def index(self, e: IndexExpr, env: dict, dims: tuple[int, ...]) -> np.ndarray:
        nd = len(dims)
        if isinstance(e, Var):
            if e not in env:
                raise TDLError(f"{self.op}: index variable '{e}' is used outside its lambda")
            return env[e]
        if isinstance(e, Affine):
            out = np.full((1,) * nd, e.const, dtype=np.int64)
            for atom, c in e.terms:
                out = out + c * self.index(atom, env, dims)
            return out
        if isinstance(e, FloorDiv):
            return np.floor_divide(self.index(e.arg, env, dims), e.k)
        if isinstance(e, Mod):
            return np.mod(self.index(e.arg, env, dims), e.k)
        raise TDLError(f"{self.op}: cannot evaluate index {e!r}")

    def gather(self, acc: Access, env: dict, dims: tuple[int, ...], extra: int = 0) -> np.ndarray:
        """``acc`` evaluated on the grid ``dims``, its sliced dimensions appended as trailing axes."""
        src = self.source(acc.tensor)
        nd = len(dims) + extra
        subs, mask, k = [], np.ones((1,) * nd, dtype=bool), 0
        for d, sub in enumerate(acc.index):
            n = acc.tensor.shape[d]
            if sub is FULL:
                subs.append(_axis(len(dims) + k, n, nd))
                k += 1
                continue
            if isinstance(sub, ValueExpr):      # data-dependent: truncated toward zero, then clipped (MXNet's clip)
                i = _lift(np.trunc(self.value(sub, env, dims)).astype(np.int64), nd)
                subs.append(np.clip(i, 0, n - 1))
                continue
            i = _lift(self.index(sub, env, dims), nd)
            inside = (i >= 0) & (i < n)
            if not inside.all() and acc.fill is None:
                raise TDLError(f"{self.op}: access {acc} reads outside '{acc.tensor.name}' (extent {n}) and "
                               f"has no fill value (use .at(index, fill=...) for padding)")
            mask = mask & inside
            subs.append(np.clip(i, 0, n - 1))
        out = src[tuple(subs)]
        if acc.fill is not None:
            out = np.where(mask, out, acc.fill)
        return out

    def access(self, acc: Access, env: dict, dims: tuple[int, ...]) -> np.ndarray:
        if acc.sliced:
            raise TDLError(f"{self.op}: sliced access {acc} may only be an argument of an opaque function")
        return self.gather(acc, env, dims)

    def opaque(self, e: OpaqueCall, env: dict, dims: tuple[int, ...]) -> np.ndarray:
        nd = len(dims)
        args = [self.gather(a, env, dims, extra=sum(1 for s in a.index if s is FULL)) for a in e.args]
        result = np.asarray(e.fn(*args), dtype=np.float64)
        if result.ndim != nd + len(e.index):
            raise TDLError(f"{self.op}: opaque '{e.name}' returned rank {result.ndim - nd}, indexed with "
                           f"{len(e.index)} indices")
        lead = [_axis(k, result.shape[k], nd) if result.shape[k] > 1 else np.zeros((1,) * nd, np.int64)
                for k in range(nd)]
        trail = [self.index(i, env, dims) for i in e.index]
        return result[tuple(lead + trail)]


def _axis(k: int, n: int, ndim: int) -> np.ndarray:
    shape = [1] * ndim
    shape[k] = n
    return np.arange(n, dtype=np.int64).reshape(shape)


def _lift(a: np.ndarray, ndim: int) -> np.ndarray:
    return a.reshape(a.shape + (1,) * (ndim - a.ndim)) if a.ndim < ndim else a
