"""Proof that MXNet's kernel, run on a worker's shard, computes that worker's part of the operator.

Input: the operator's description at full shapes, a strategy, a worker, and a candidate kernel call (the
shard's inputs, regions and attributes). Output: None when the call is proven right, else the reason.

The kernel's meaning on the shard is the *same description instantiated at the shard's shapes and
attributes*. The call is right when that description, with every shard index variable written as the full one minus
the worker's offset, is the full description term by term:

* every tensor access reads the same element: for each dimension, with the shard's coordinate
  ``c_s`` of an input region starting at ``r`` (after ``p`` materialised halo), ``c_s + r - p`` equals the
  full description's coordinate, as affine forms over the full index variables;
* where the shard reads outside its piece, the full description reads outside the tensor, with the same fill;
* reductions match kind and variables; the split reduction variable covers exactly the worker's range;
* constants, functions and structure are identical (a divisor recomputed from the shard's shape, as in
  average pooling over a partial window, makes the call wrong, and it is rejected);
* intermediate tensors are compared by inlining their bodies at the accessed index.

Checks are exact on affine indices and structural elsewhere (floor division, modulo), hence conservative.
"""
from __future__ import annotations

from collections.abc import Mapping

from tofu.analysis.interval import Interval, bound, evaluate_index
from tofu.analysis.strategies import PartitionStrategy, SplitDim, reduction_root
from tofu.errors import AnalysisError
from tofu.tdl.describe import OpDescription
from tofu.tdl.expr import (FULL, Access, Affine, Binary, Compare, Computed, Const, FloorDiv, IndexExpr,
                           IndexValue, Mod, OpaqueCall, Reduce, Select, Unary, Uses, ValueExpr, Var)


class _Mismatch(Exception):
    pass


def substitute(e: IndexExpr, mapping: Mapping[Var, IndexExpr]) -> IndexExpr:
    """``e`` with every variable replaced by its image (variables not in ``mapping`` are kept)."""
    if isinstance(e, Var):
        return mapping.get(e, e)
    if isinstance(e, Affine):
        out = Affine((), e.const)
        for atom, c in e.terms:
            out = out + substitute(atom, mapping) * c
        return out
    if isinstance(e, FloorDiv):
        return FloorDiv(_as_affine(substitute(e.arg, mapping)), e.k)
    if isinstance(e, Mod):
        return Mod(_as_affine(substitute(e.arg, mapping)), e.k)
    raise TypeError(e)


def _correspond(vs: Var, vf: Var, offset: int, extent: int) -> tuple[IndexExpr, IndexExpr]:
    """Images of a shard variable and its full counterpart in the full variables: ``vs = vf - offset``;
    a variable of extent 1 is the constant it takes (0 on the shard, ``offset`` in full)."""
    if extent == 1:
        return Affine((), 0), Affine((), offset)
    return Affine(((vf, 1),), -offset), Affine(((vf, 1),), 0)


def _as_affine(e: IndexExpr) -> Affine:
    return e if isinstance(e, Affine) else Affine(((e, 1),), 0)


def kernel_mismatch(full: OpDescription, shard: OpDescription, strategy: PartitionStrategy, worker: int,
                    inputs: tuple[int, ...], padded: bool) -> str | None:
    """Why the shard description is not the worker's part of the full one (None: it is).

    Args:
        full: the operator at full shapes.
        shard: the operator at the shard's shapes and attributes (what the kernel computes).
        strategy, worker: the worker's regions and output boxes.
        inputs: for each shard input, the full input it is a piece of.
        padded: the pieces include their halos.
    """
    reason, scale = kernel_scale(full, shard, strategy, worker, inputs, padded)
    return reason if reason is not None or scale == 1.0 else f"the shard's output must be scaled by {scale}"


def kernel_scale(full: OpDescription, shard: OpDescription, strategy: PartitionStrategy, worker: int,
                 inputs: tuple[int, ...], padded: bool, keep: tuple[int | None, ...] | None = None
                 ) -> tuple[str | None, float]:
    """As :func:`kernel_mismatch`, but a partition-n-reduce whose output is its reduction divided (or multiplied)
    by a constant that differs on the shard (a mean divides by the shard's count) is accepted with the factor
    that turns the shard's output into the worker's partial: ``(None, c_shard / c_full)`` for ``R / c``.

    With ``keep`` (per output, where the worker's part starts along the split dimension in a kernel output that
    is longer than it), only that part is compared: the kernel's other outputs are dropped.

    Returns:
        (None, scale) when the call, its output times ``scale``, is the worker's part; else (reason, 1.0).
    """
    if len(shard.outputs) < len(full.outputs):
        return "the kernel has fewer outputs", 1.0
    scale = 1.0
    bodies = [(so.body, fo.body) for fo, so in zip(full.outputs, shard.outputs)]
    if strategy.kind == "reduce" and len(bodies) == 1:
        sb, fb = bodies[0]
        if isinstance(sb, Binary) and isinstance(fb, Binary) and sb.fn == fb.fn and fb.fn in ("div", "mul") \
                and isinstance(fb.lhs, Reduce) and isinstance(sb.rhs, Const) and isinstance(fb.rhs, Const) \
                and sb.rhs.value != fb.rhs.value and fb.rhs.value != 0 and sb.rhs.value != 0:
            # the partial of R / c is (R_w / c_shard) * (c_shard / c_full): the reduction alone is compared
            scale = sb.rhs.value / fb.rhs.value if fb.fn == "div" else fb.rhs.value / sb.rhs.value
            bodies = [(sb.lhs, fb.lhs)]
    checker = _Checker(full, shard, strategy, worker, inputs, padded)
    try:
        for o, ((sbody, fbody), fo, so) in enumerate(zip(bodies, full.outputs, shard.outputs)):
            placement = strategy.outputs[o]
            box = strategy.output_regions[worker][o]
            sub_s: dict[Var, IndexExpr] = {}
            sub_f: dict[Var, IndexExpr] = {}
            env_s: dict[Var, Interval] = {}
            for d, (vs, vf) in enumerate(zip(so.vars, fo.vars)):
                split = isinstance(placement, SplitDim) and d == placement.dim
                start = keep[o] if keep is not None and split and keep[o] is not None else 0
                lo = box.bounds[d][0] if isinstance(placement, SplitDim) else 0
                n = box.shape[d] if start or keep is not None and split else so.shape[d]
                sub_s[vs], sub_f[vf] = _correspond(vs, vf, lo - start, so.shape[d])
                env_s[vs] = Interval.const(start, start + n - 1)
                checker.ranges[vf] = Interval.const(lo, lo + n - 1)
            checker.value(sbody, fbody, sub_s, sub_f, env_s)
    except _Mismatch as e:
        return str(e), 1.0
    return None, scale


class _Checker:
    def __init__(self, full, shard, strategy, worker, inputs, padded):
        self.full, self.shard, self.s, self.w = full, shard, strategy, worker
        self.piece = {id(t): i for t, i in zip(shard.inputs, inputs)}
        self.index_of = {id(t): i for i, t in enumerate(full.inputs)}
        self.padded = padded
        self.regions = strategy.input_regions[worker]
        self.ranges: dict[Var, Interval] = {}     # full index variable -> the worker's range of it
        self.split_var = None             # the full description's reduction variable a reduce strategy splits
        if strategy.kind == "reduce":
            root = reduction_root(full.outputs[0].body)
            self.split_var = next((v for v in root[0].vars if v.name == strategy.var), None) if root else None

    def value(self, es: ValueExpr, ef: ValueExpr, sub_s, sub_f, env_s) -> None:
        if isinstance(ef, Select) and not isinstance(es, Select):
            branch = self._decide(ef.cond, sub_f)
            if branch is not None:      # the full operator's choice is fixed on this worker's range
                return self.value(es, ef.then if branch else ef.other, sub_s, sub_f, env_s)
        if isinstance(ef, Select) and isinstance(es, Select):
            branch = self._decide(ef.cond, sub_f)
            if branch is not None and branch == self._decide_shard(es.cond, env_s):   # both take one branch
                return self.value(es.then if branch else es.other, ef.then if branch else ef.other,
                                  sub_s, sub_f, env_s)
        if isinstance(es, Uses) and isinstance(ef, Uses):
            if len(es.reads) != len(ef.reads):
                raise _Mismatch("declared reads differ")
            for a, b in zip(es.reads, ef.reads):
                self.access(a, b, sub_s, sub_f, env_s)
            return self.value(es.value, ef.value, sub_s, sub_f, env_s)
        if type(es) is not type(ef):
            if isinstance(es, Access) and isinstance(es.tensor, Computed) or \
               isinstance(ef, Access) and isinstance(ef.tensor, Computed):
                raise _Mismatch("an intermediate tensor differs")
            raise _Mismatch(f"{es} differs from {ef}")
        if isinstance(es, Const):
            if es.value != ef.value:
                raise _Mismatch(f"constant {es.value} on the shard, {ef.value} in full (shape-dependent)")
            return
        if isinstance(es, Unary):
            self._same(es.fn, ef.fn)
            return self.value(es.arg, ef.arg, sub_s, sub_f, env_s)
        if isinstance(es, Compare) and isinstance(ef, Compare) and es.fn == ef.fn:
            # index <op> c that holds (or fails) everywhere on both sides' ranges: the same constant
            decided = self._decide(ef, sub_f)
            if decided is not None and decided == self._decide_shard(es, env_s):
                return
        if isinstance(es, Compare) and _index_vs_const(es) and _index_vs_const(ef) and es.fn == ef.fn:
            # index <op> c: compare index - c (a shard's bound moves with its offset)
            return self._index(es.lhs.index - int(es.rhs.value), ef.lhs.index - int(ef.rhs.value), sub_s, sub_f, 0)
        if isinstance(es, (Binary, Compare)):
            self._same(es.fn, ef.fn)
            self.value(es.lhs, ef.lhs, sub_s, sub_f, env_s)
            return self.value(es.rhs, ef.rhs, sub_s, sub_f, env_s)
        if isinstance(es, Select):
            for a, b in ((es.cond, ef.cond), (es.then, ef.then), (es.other, ef.other)):
                self.value(a, b, sub_s, sub_f, env_s)
            return
        if isinstance(es, IndexValue):
            return self._index(es.index, ef.index, sub_s, sub_f, 0)
        if isinstance(es, Reduce):
            return self.reduce(es, ef, sub_s, sub_f, env_s)
        if isinstance(es, OpaqueCall):
            self._same(es.name, ef.name)
            if len(es.args) != len(ef.args) or len(es.index) != len(ef.index):
                raise _Mismatch(f"opaque {es.name} differs")
            for a, b in zip(es.args, ef.args):
                self.access(a, b, sub_s, sub_f, env_s)
            for a, b in zip(es.index, ef.index):
                self._index(a, b, sub_s, sub_f, 0)
            return
        if isinstance(es, Access):
            return self.access(es, ef, sub_s, sub_f, env_s)
        raise _Mismatch(f"cannot compare {es!r}")

    def reduce(self, es: Reduce, ef: Reduce, sub_s, sub_f, env_s) -> None:
        if es.kind != ef.kind or len(es.vars) != len(ef.vars):
            raise _Mismatch(f"reduction {es.kind} differs from {ef.kind}")
        sub_s, sub_f, env_s = dict(sub_s), dict(sub_f), dict(env_s)
        for vs, vf, ns, nf in zip(es.vars, ef.vars, es.extents, ef.extents):
            lo, hi = self._reduce_range(vf, nf)
            if ns != hi - lo + 1:
                raise _Mismatch(f"reduction over {vs} has extent {ns} on the shard, {hi - lo + 1} needed")
            sub_s[vs], sub_f[vf] = _correspond(vs, vf, lo, ns)
            env_s[vs] = Interval.const(0, ns - 1)
            self.ranges[vf] = Interval.const(lo, hi)
        self.value(es.body, ef.body, sub_s, sub_f, env_s)

    def _reduce_range(self, vf: Var, extent: int) -> tuple[int, int]:
        """The full-coordinate range a worker covers of reduction variable ``vf``."""
        if vf == self.split_var:
            step = extent // self.s.k
            return self.w * step, (self.w + 1) * step - 1
        return 0, extent - 1

    def access(self, es: Access, ef: Access, sub_s, sub_f, env_s) -> None:
        if isinstance(es.tensor, Computed) or isinstance(ef.tensor, Computed):
            if not (isinstance(es.tensor, Computed) and isinstance(ef.tensor, Computed)):
                raise _Mismatch("an intermediate tensor differs")
            # inline: the computed body at the accessed index
            inner_s = {v: substitute(i, sub_s) for v, i in zip(es.tensor.vars, es.index)}
            inner_f = {v: substitute(i, sub_f) for v, i in zip(ef.tensor.vars, ef.index)}
            env_inner = {v: bound(i, env_s) for v, i in zip(es.tensor.vars, es.index)}
            return self.value(es.tensor.body, ef.tensor.body, inner_s, inner_f, env_inner)
        i_full = self.piece.get(id(es.tensor))
        if i_full is None or self.index_of.get(id(ef.tensor)) != i_full:
            raise _Mismatch(f"{es} reads another input than {ef}")
        region = self.regions[i_full]
        for d, (a, b) in enumerate(zip(es.index, ef.index)):
            n_shard, n_full = es.tensor.shape[d], ef.tensor.shape[d]
            lo, pad = region.bounds[d][0], (region.pad[d][0] if self.padded else 0)
            delta = lo - pad
            if a is FULL or b is FULL or isinstance(a, ValueExpr) or isinstance(b, ValueExpr):
                if (a is FULL) != (b is FULL) or delta != 0 or n_shard != n_full:
                    raise _Mismatch(f"dimension {d} of {es} is not whole on the shard")
                if isinstance(a, ValueExpr) or isinstance(b, ValueExpr):
                    if not (isinstance(a, ValueExpr) and isinstance(b, ValueExpr)):
                        raise _Mismatch(f"{es} and {ef} index dimension {d} differently")
                    self.value(a, b, sub_s, sub_f, env_s)
                continue
            self._index(a, b, sub_s, sub_f, delta)
            # reads outside the shard's piece must be reads outside the tensor, with the same fill
            iv = bound(a, env_s)
            if iv.lower is None or iv.upper is None:
                continue
            r0 = evaluate_index(iv.lower, {})
            r1 = evaluate_index(iv.upper, {})
            if r0 < 0 and -1 + delta >= 0:
                raise _Mismatch(f"{es} reads before its piece where the tensor has data")
            if r1 > n_shard - 1 and n_shard + delta <= n_full - 1:
                raise _Mismatch(f"{es} reads past its piece where the tensor has data")
            if (r0 < 0 or r1 > n_shard - 1 or (self.padded and region.pad[d] != (0, 0))) and es.fill != ef.fill:
                if not (self.padded and es.fill is None and region.pad[d] == (0, 0)):
                    raise _Mismatch(f"{es} pads with {es.fill}, the full access with {ef.fill}")

    def _decide(self, cond: ValueExpr, sub_f) -> bool | None:
        """The value of ``index <op> constant`` over the worker's range, when it does not vary."""
        if not (isinstance(cond, Compare) and isinstance(cond.lhs, IndexValue) and isinstance(cond.rhs, Const)):
            return None
        try:
            iv = bound(substitute(cond.lhs.index, sub_f), self.ranges)
        except AnalysisError:
            return None
        if iv.lower is None or iv.upper is None:
            return None
        return _holds(cond.fn, evaluate_index(iv.lower, {}), evaluate_index(iv.upper, {}), cond.rhs.value)

    @staticmethod
    def _decide_shard(cond: ValueExpr, env_s) -> bool | None:
        """The value of the shard's ``index <op> constant`` over the shard's ranges, when it does not vary."""
        if not (isinstance(cond, Compare) and isinstance(cond.lhs, IndexValue) and isinstance(cond.rhs, Const)):
            return None
        try:
            iv = bound(cond.lhs.index, env_s)
        except AnalysisError:
            return None
        if iv.lower is None or iv.upper is None:
            return None
        return _holds(cond.fn, evaluate_index(iv.lower, {}), evaluate_index(iv.upper, {}), cond.rhs.value)

    def _index(self, a: IndexExpr, b: IndexExpr, sub_s, sub_f, delta: int) -> None:
        fast_a, fast_b = _linear(a, sub_s), _linear(b, sub_f)
        if fast_a is not None and fast_b is not None:      # both affine in variables: compare coefficients
            (ca, ka), (cb, kb) = fast_a, fast_b
            if ka + delta == kb and {v: c for v, c in ca.items() if c} == {v: c for v, c in cb.items() if c}:
                return
            raise _Mismatch(f"index {a} on the shard differs from {b} in the full operator (offset {delta})")
        left = _as_affine(substitute(a, sub_s)) + delta
        right = _as_affine(substitute(b, sub_f))
        if _canonical(left) != _canonical(right) and \
                _canonical(self._steady(left)) != _canonical(self._steady(right)):
            raise _Mismatch(f"index {a} on the shard is {left}, the full operator reads {right}")

    def _steady(self, e: Affine) -> Affine:
        """``e`` with every // and % whose quotient does not vary over the worker's range replaced by its
        affine value there (one head of a reshape into heads: o // 4 = w and o % 4 = o - 4 w for o in
        [4 w, 4 w + 3])."""
        out = Affine((), e.const)
        for atom, c in e.terms:
            if isinstance(atom, (FloorDiv, Mod)):
                q = self._constant(FloorDiv(atom.arg, atom.k))
                if q is not None:
                    value = Affine((), q) if isinstance(atom, FloorDiv) else \
                        self._steady(_as_affine(atom.arg)).plus(Affine((), -atom.k * q))
                    out = out.plus(value.scaled(c))
                    continue
            out = out.plus(Affine(((atom, c),), 0))
        return out

    def _constant(self, e: IndexExpr) -> int | None:
        """The value of ``e`` over the worker's range, when it does not vary there."""
        iv = bound(e, self.ranges)
        if iv.lower is None or iv.upper is None:
            return None
        a, b = evaluate_index(iv.lower, {}), evaluate_index(iv.upper, {})
        return a if a == b else None

    @staticmethod
    def _same(x, y) -> None:
        if x != y:
            raise _Mismatch(f"{x} differs from {y}")


def _linear(e: IndexExpr, sub: Mapping[Var, IndexExpr]):
    """``e`` after substitution as ``({var: coeff}, const)`` when it stays affine in variables, else None."""
    if isinstance(e, Var):
        e = Affine(((e, 1),), 0)
    if not isinstance(e, Affine):
        return None
    coeffs: dict[Var, int] = {}
    const = e.const
    for atom, c in e.terms:
        if not isinstance(atom, Var):
            return None
        image = sub.get(atom)
        if image is None:
            coeffs[atom] = coeffs.get(atom, 0) + c
            continue
        if isinstance(image, Var):
            image = Affine(((image, 1),), 0)
        if not isinstance(image, Affine):     # a floor division or modulus (an inlined x[n, c // cg])
            return None
        for v, cv in image.terms:
            if not isinstance(v, Var):
                return None
            coeffs[v] = coeffs.get(v, 0) + c * cv
        const += c * image.const
    return coeffs, const


def _holds(fn: str, a: int, b: int, c: float) -> bool | None:
    """Whether ``x <fn> c`` for every x in [a, b] (True), for none (False), or it varies (None)."""
    test = {"lt": lambda x: x < c, "le": lambda x: x <= c, "gt": lambda x: x > c, "ge": lambda x: x >= c}
    if fn not in test:
        return None
    ta, tb = test[fn](a), test[fn](b)
    return ta if ta == tb else None


def _index_vs_const(e: Compare) -> bool:
    return isinstance(e.lhs, IndexValue) and isinstance(e.rhs, Const) and float(e.rhs.value).is_integer()


def _canonical(e: Affine):
    e = normalize(e)
    return (frozenset((a, c) for a, c in e.terms if c), e.const)


def normalize(e: IndexExpr) -> Affine:
    """Pulls multiples of k out of floor divisions and moduli: (a + q k) // k = a // k + q, (a + q k) % k = a % k."""
    e = _as_affine(e)
    out = Affine((), e.const)
    for atom, c in e.terms:
        if isinstance(atom, (FloorDiv, Mod)):
            arg = normalize(atom.arg)
            q, r = divmod(arg.const, atom.k)
            inner = Affine(arg.terms, r)
            if isinstance(atom, FloorDiv):
                out = out + (Affine(((FloorDiv(inner, atom.k), 1),), q) if inner.terms else Affine((), r // atom.k + q)) * c
            else:
                out = out + (Affine(((Mod(inner, atom.k), 1),), 0) if inner.terms else Affine((), r)) * c
        else:
            out = out + Affine(((atom, 1),), 0) * c
    return out
