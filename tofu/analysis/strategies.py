"""Partition strategies of one operator, derived from its TDL description (PAPER.md, "Partition analysis").

Input: an :class:`~tofu.tdl.describe.OpDescription`. Output: its basic strategies for k workers, each
with the exact region of every input that each worker reads.

A basic strategy splits one index variable ``v`` evenly over k workers, worker w taking
``v in [w X/k, (w+1) X/k - 1]`` (X the extent of ``v``) while every other variable takes its whole range:

* ``v`` an output variable: each worker computes its slice of the outputs that have a variable of that
  name (:class:`SplitDim`; outputs lacking it are computed whole, :class:`Replicate`); results concatenate.
* ``v`` a reduction variable of the output's top-level reduction (partition-n-reduce): each worker computes
  a full-size partial output over its share of the reduction; partials are combined with the reduction's
  operator (:class:`PartialSum`). Terms added outside the reduction (a bias) must be counted once: the inputs
  read only there are given to worker 0 alone (``once_inputs``), the others read zeros. This is derived for
  single-output operators only; the reduction variables of a multi-output operator (``moments``) are reported
  as :class:`Unsplittable`, with the reason.

The input regions come from the symbolic interval analysis (:mod:`tofu.analysis.interval`) of every access
of the description, intermediate (``compute``) tensors included: an access of an intermediate tensor gives
the region of it that is needed, and its own body is analysed over that region. A variable that indexes the
result of an opaque function cannot be split. The symbolic result is cached per description and
instantiated for each k.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache

from tofu.analysis.interval import BoundSym, Interval, bound
from tofu.errors import AnalysisError
from tofu.tdl.describe import OpDescription, describe
from tofu.tdl.expr import (FULL, Access, Affine, Binary, Computed, IndexExpr, OpaqueCall, Reduce, ValueExpr, Var,
                           children, index_vars, walk_accesses)


@dataclass(frozen=True)
class SplitDim:
    """The output is split along ``dim``; worker results concatenate."""

    dim: int


@dataclass(frozen=True)
class PartialSum:
    """Every worker holds a full-size partial output; partials are reduced with ``reducer``."""

    reducer: str


@dataclass(frozen=True)
class Replicate:
    """Every worker computes the whole output."""


Placement = SplitDim | PartialSum | Replicate


@dataclass(frozen=True)
class Region:
    """A box of a tensor: per dimension the inclusive ``(lo, hi)`` inside the tensor, and ``pad``: how far the
    needed box extends past the tensor's ends ``(before, after)``, to be filled with the access's fill value
    (the halo of a padded convolution at the border)."""

    bounds: tuple[tuple[int, int], ...]
    pad: tuple[tuple[int, int], ...]

    @cached_property
    def shape(self) -> tuple[int, ...]:
        return tuple(b - a + 1 for a, b in self.bounds)

    @property
    def padded_shape(self) -> tuple[int, ...]:
        return tuple(b - a + 1 + p + q for (a, b), (p, q) in zip(self.bounds, self.pad))

    @cached_property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def slices(self) -> tuple[slice, ...]:
        return tuple(slice(a, b + 1) for a, b in self.bounds)


@dataclass(frozen=True)
class Exchange:
    """A nested reduction (an intermediate tensor such as BatchNorm's batch mean) that every worker computes
    partially over its share of the split and that workers then combine with ``reducer`` (an all-reduce of
    the partial statistics, instead of fetching the whole input)."""

    tensor: str                      # the intermediate tensor's name in the description
    reducer: str
    var: str                         # its reduction variable aligned with the split
    box: tuple[Interval, ...]        # the part of the intermediate tensor each worker needs

    def elements(self, values, shape: Sequence[int]) -> int:
        n = 1
        for iv, extent in zip(self.box, shape):
            a, b, lo, hi = iv.clip(values, extent)
            n *= hi - lo + 1
        return n


@dataclass(frozen=True)
class SymbolicStrategy:
    """A strategy before the number of workers is known: regions as symbolic intervals."""

    var: str
    kind: str                                       # "output" | "reduce"
    outputs: tuple[Placement, ...]
    regions: tuple[tuple[Interval, ...] | None, ...]  # per input: per-dim interval; None if never read
    fills: tuple[float | None, ...]                 # per input: the fill value of its padded accesses
    once_inputs: tuple[int, ...]
    split_extent: int                               # extent X of the split variable
    exchanges: tuple[Exchange, ...] = ()            # nested reductions combined across workers, in order

    def __str__(self) -> str:
        return f"{self.kind}:{self.var}"


@dataclass(frozen=True)
class PartitionStrategy:
    """A strategy instantiated for k workers."""

    op: str
    var: str
    kind: str
    k: int
    outputs: tuple[Placement, ...]
    input_regions: tuple[tuple[Region | None, ...], ...]   # [worker][input]; None: worker reads nothing
    output_regions: tuple[tuple[Region, ...], ...]         # [worker][output]
    fills: tuple[float | None, ...]
    once_inputs: tuple[int, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    split_extent: int
    exchanges: tuple[Exchange, ...] = ()
    exchange_elements: tuple[int, ...] = ()          # per exchange: elements of the statistic per worker

    def __str__(self) -> str:
        return f"{self.op}/{self.kind}:{self.var}/k={self.k}"


@dataclass(frozen=True)
class Unsplittable:
    """An index variable that no strategy may split, and why."""

    var: str
    reason: str


@dataclass(frozen=True)
class Analysis:
    op: str
    strategies: tuple[SymbolicStrategy, ...]
    unsplittable: tuple[Unsplittable, ...]


# ------------------------------------------------------------------------------------------------ analysis

def analyse(desc: OpDescription) -> Analysis:
    """The symbolic strategies of an operator description (cached per description object)."""
    return _analyse(desc)


@lru_cache(maxsize=4096)
def _analyse(desc: OpDescription) -> Analysis:
    strategies: list[SymbolicStrategy] = []
    unsplittable: list[Unsplittable] = []
    opaque_vars = {v.name for out in desc.outputs for v in _opaque_index_vars(out.body)}
    seen: set[str] = set()
    for out in desc.outputs:
        for d, v in enumerate(out.vars):
            if v.name in seen:
                continue
            seen.add(v.name)
            if v.name in opaque_vars:
                unsplittable.append(Unsplittable(v.name, "indexes the result of an opaque function"))
                continue
            strategies.append(_output_strategy(desc, v.name))
    if len(desc.outputs) == 1:
        out = desc.outputs[0]
        root = reduction_root(out.body)
        if root is not None:
            reduce, once_terms = root
            for v, extent in zip(reduce.vars, reduce.extents):
                if v in _opaque_index_vars(reduce.body):
                    unsplittable.append(Unsplittable(v.name, "indexes the result of an opaque function"))
                    continue
                s = _reduce_strategy(desc, reduce, v, extent, once_terms)
                if s is not None:
                    strategies.append(s)
    else:
        unsplittable.extend(_multi_output_reductions(desc))
    return Analysis(desc.op, tuple(strategies), tuple(unsplittable))


def _multi_output_reductions(desc: OpDescription) -> list[Unsplittable]:
    """The variables of the top-level reductions of a multi-output operator, each with why it is not split.

    Partition-n-reduce is derived for single-output operators only: a PartialSum strategy, the kernel forms
    that run it and the rewrite combine one partial output. Splitting a reduction of several outputs would need
    every output to be a reduction over that variable whose partials combine on their own; ``moments`` is the
    counter-example: its variance is centred on the mean, itself a reduction over the same range, so a worker's
    partial variance needs the whole mean.
    """
    reducing: dict[str, list[str]] = {}
    nested: dict[str, str] = {}           # output -> an intermediate reduction its reduction body reads
    for out in desc.outputs:
        root = reduction_root(out.body)
        if root is None:
            continue
        for v in root[0].vars:
            reducing.setdefault(v.name, []).append(out.name)
        for acc in _accesses_deep(root[0].body):
            if isinstance(acc.tensor, Computed) and reduction_root(acc.tensor.body) is not None:
                nested.setdefault(out.name, acc.tensor.name)
                break
    found = []
    for var, outs in reducing.items():
        which = " and ".join(f"'{o}'" for o in outs)
        reason = (f"reduction variable of output{'s' if len(outs) > 1 else ''} {which}: partition-n-reduce is "
                  f"derived for single-output operators only, and this one has {len(desc.outputs)} outputs")
        for o in outs:
            if o in nested:
                reason += (f"; '{o}' reads '{nested[o]}', itself a reduction over the whole range, so a worker's "
                           f"partial '{o}' would need the whole '{nested[o]}'")
                break
        found.append(Unsplittable(var, reason))
    return found


def _output_strategy(desc: OpDescription, name: str) -> SymbolicStrategy:
    """Split the output variable ``name``: every output with a variable of that name and the same extent
    is split along it (a statistic keeping the axis with extent 1, as LayerNorm's, is replicated)."""
    placements, envs = [], []
    extent = next(n for out in desc.outputs for v, n in zip(out.vars, out.shape) if v.name == name)
    for out in desc.outputs:
        env: dict[Var, Interval] = {}
        placement: Placement = Replicate()
        for d, (v, n) in enumerate(zip(out.vars, out.shape)):
            if v.name == name and n == extent:
                env[v] = Interval.of_var(_canonical(name))
                placement = SplitDim(d)
            else:
                env[v] = Interval.const(0, n - 1)
        placements.append(placement)
        envs.append((out.body, env))
    regions, fills, exchanges = _regions(desc, envs, name, extent)
    return SymbolicStrategy(name, "output", tuple(placements), regions, fills, (), extent, exchanges)


def _reduce_strategy(desc: OpDescription, reduce: Reduce, v: Var, extent: int,
                     once_terms: Sequence[ValueExpr]) -> SymbolicStrategy | None:
    out = desc.outputs[0]
    env = {u: Interval.const(0, n - 1) for u, n in zip(out.vars, out.shape)}
    inner = dict(env)
    inner.update({u: (Interval.of_var(_canonical(v.name)) if u == v else Interval.const(0, n - 1))
                  for u, n in zip(reduce.vars, reduce.extents)})
    regions, fills, _ = _regions(desc, [(reduce.body, inner)] + [(t, env) for t in once_terms])
    in_reduce = {id(a.tensor) for a in _accesses_deep(reduce.body)}
    in_once = {id(a.tensor) for t in once_terms for a in _accesses_deep(t)}
    if in_reduce & in_once:
        return None     # a tensor read both inside and outside the reduction cannot be zeroed on other workers
    once = tuple(i for i, t in enumerate(desc.inputs) if id(t) in in_once)
    return SymbolicStrategy(v.name, "reduce", (PartialSum(reduce.kind),), regions, fills, once, extent)


_CANON: dict[str, Var] = {}


def _canonical(name: str) -> Var:
    """One bound-symbol variable per split name, so that outputs sharing a name share the symbols."""
    return _CANON.setdefault(name, Var(name))


def reduction_root(body: ValueExpr) -> tuple[Reduce, list[ValueExpr]] | None:
    """``body`` as ``R``, ``R +- t``, ``t + R``, ``R * c``, ``c * R`` or ``R / c`` with R a reduction and t, c
    free of R's variables (a linear post-operation, valid for sums; only plain R for other reducers)."""
    if isinstance(body, Reduce):
        return body, []
    if isinstance(body, Binary) and body.fn in ("add", "sub", "mul", "div"):
        for r, t in ((body.lhs, body.rhs), (body.rhs, body.lhs)):
            if body.fn == "div" and r is body.rhs:
                continue
            if body.fn == "sub" and r is body.rhs:
                continue    # t - R: sign flip; keep it simple
            inner = reduction_root(r)
            if inner is None or inner[0].kind != "sum":
                continue
            reduce, once = inner
            if _uses_vars(t, set(reduce.vars)):
                continue
            if body.fn in ("add", "sub"):
                return reduce, once + [t]
            if not once:          # (R + t) * c would scale t as well: still linear, but keep the pattern flat
                return reduce, []
    return None


def _uses_vars(e: ValueExpr, vars_: set[Var]) -> bool:
    for x in _walk(e):
        if isinstance(x, Access):
            for s in x.index:
                if isinstance(s, IndexExpr) and index_vars(s) & vars_:
                    return True
    return False


def _walk(e: ValueExpr):
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(children(x))


def _accesses_deep(e: ValueExpr):
    """Accesses of ``e`` and, through intermediate tensors, of their bodies."""
    for x in _walk(e):
        if isinstance(x, Access):
            yield x
            if isinstance(x.tensor, Computed):
                yield from _accesses_deep(x.tensor.body)


def _opaque_index_vars(e: ValueExpr) -> set[Var]:
    found: set[Var] = set()
    for x in _walk(e):
        if isinstance(x, OpaqueCall):
            for i in x.index:
                found |= index_vars(i)
        if isinstance(x, Access) and isinstance(x.tensor, Computed):
            found |= _opaque_index_vars(x.tensor.body)
    return found


def _regions(desc: OpDescription, roots: Sequence[tuple[ValueExpr, dict[Var, Interval]]],
             split: str | None = None, split_extent: int | None = None):
    """Per input, the union of the intervals of all its accesses reachable from ``roots``.

    With ``split`` (an output variable's name): an intermediate tensor that is a reduction over a variable
    indexing the same input dimension as the split variable does (BatchNorm's mean over the batch when the
    batch is split) is computed partially on every worker and combined across workers (:class:`Exchange`)
    instead of being computed from the whole input.

    Returns:
        (regions per input, fill per input, exchanges in dependency order).
    """
    boxes: dict[int, list[Interval]] = {}
    fills: dict[int, float | None] = {}
    aligned = _split_dims(roots, split) if split and _has_computed(desc) else set()
    exchanges: dict[int, Exchange] = {}
    order: list[int] = []
    pending = [(e, env, 0) for e, env in roots]
    while pending:
        expr, env, depth = pending.pop()
        for acc, scope in _accesses_in_scope(expr, env):
            box = tuple(_subscript_interval(s, scope) for s in acc.index)
            if isinstance(acc.tensor, Computed):
                t = acc.tensor
                # the needed part of an intermediate tensor: analyse its body over that box
                inner = {v: (Interval.const(0, n - 1) if iv.is_whole or isinstance(iv, Hull) else iv)
                         for v, iv, n in zip(t.vars, box, t.shape)}
                partial = _aligned_reduction(t, aligned, split_extent)
                if partial is not None:
                    reduce, var = partial
                    inner[var] = Interval.of_var(_canonical(split))
                    if id(t) not in exchanges:
                        exchanges[id(t)] = Exchange(t.name, reduce.kind, var.name,
                                                    tuple(inner[v] for v in t.vars))
                    order.append(id(t))
                pending.append((t.body, inner, depth + 1))
                continue
            key = id(acc.tensor)
            boxes[key] = box if key not in boxes else [_union(a, b) for a, b in zip(boxes[key], box)]
            if acc.fill is not None:
                fills[key] = acc.fill
    regions = tuple(tuple(boxes[id(t)]) if id(t) in boxes else None for t in desc.inputs)
    # a tensor found later in the walk is nested deeper (read by the bodies of earlier ones): exchange it first
    ordered = tuple(exchanges[k] for k in reversed(list(dict.fromkeys(reversed(order)))))
    return regions, tuple(fills.get(id(t)) for t in desc.inputs), ordered[::-1]


@lru_cache(maxsize=4096)
def _has_computed(desc: OpDescription) -> bool:
    return bool(computed_tensors(desc))


def _split_dims(roots, split: str) -> set[tuple[int, int]]:
    """(input, dimension) pairs that the split variable indexes on its own."""
    found = set()
    for expr, env in roots:
        for acc, _ in _accesses_in_scope(expr, env):
            for d, sub in enumerate(acc.index):
                v = sub if isinstance(sub, Var) else (sub.single_var() if isinstance(sub, Affine) else None)
                if v is not None and v.name == split and v in env:
                    found.add((id(acc.tensor), d))
    return found


def _aligned_reduction(t: Computed, aligned: set[tuple[int, int]], extent: int | None):
    """``(reduction, variable)`` when ``t`` is a reduction (with a linear post-operation) over a variable that
    indexes alone one of the ``aligned`` input dimensions and has the split variable's extent."""
    root = reduction_root(t.body)
    if root is None or root[1]:
        return None
    reduce = root[0]
    for v, n in zip(reduce.vars, reduce.extents):
        if n != extent:
            continue
        for acc in walk_accesses(reduce.body):
            for d, sub in enumerate(acc.index):
                u = sub if isinstance(sub, Var) else (sub.single_var() if isinstance(sub, Affine) else None)
                if u is v and (id(acc.tensor), d) in aligned:
                    return reduce, v
    return None


def _accesses_in_scope(e: ValueExpr, env: dict[Var, Interval]):
    """Every access of ``e`` (not inside intermediate tensors) with the variable intervals in its scope."""
    if isinstance(e, Access):
        yield e, env
    if isinstance(e, Reduce):
        inner = dict(env)
        for v, n in zip(e.vars, e.extents):
            inner.setdefault(v, Interval.const(0, n - 1))
        yield from _accesses_in_scope(e.body, inner)
        return
    for c in children(e):
        yield from _accesses_in_scope(c, env)


def _subscript_interval(s, env: dict[Var, Interval]) -> Interval:
    if s is FULL or isinstance(s, ValueExpr):
        return Interval.whole()        # sliced for an opaque function, or data-dependent
    return bound(s, env)


def _union(a: Interval, b: Interval) -> Interval:
    if a == b:
        return a
    members = (a.members if isinstance(a, Hull) else (a,)) + (b.members if isinstance(b, Hull) else (b,))
    return Hull(tuple(dict.fromkeys(members)))


@dataclass(frozen=True, init=False)
class Hull(Interval):
    """The hull of several intervals (one tensor read by several accesses): ``[min lo, max hi]``."""

    members: tuple[Interval, ...]

    def __init__(self, members: tuple[Interval, ...]):
        object.__setattr__(self, "members", members)
        object.__setattr__(self, "lower", None)
        object.__setattr__(self, "upper", None)

    @property
    def is_whole(self) -> bool:
        return any(m.is_whole for m in self.members)

    def evaluate(self, values, extent):
        ends = [m.evaluate(values, extent) for m in self.members]
        return min(a for a, _ in ends), max(b for _, b in ends)

    def clip(self, values, extent):
        """As one interval's, but a member that lies wholly past the tensor's ends reads only its fill value
        and adds nothing (a padding's mirrored index at the far border, on a worker near the other)."""
        parts = [m.clip(values, extent) for m in self.members]
        inside = [p for p in parts if p[2] <= p[3]]
        if not inside or len(inside) == len(parts):
            return super().clip(values, extent)
        return (min(p[0] for p in inside), max(p[1] for p in inside),
                min(p[2] for p in inside), max(p[3] for p in inside))

    def __str__(self) -> str:
        return "hull(" + ", ".join(map(str, self.members)) + ")"


# ----------------------------------------------------------------------------------------- instantiation

def instantiate(desc: OpDescription, s: SymbolicStrategy, k: int) -> PartitionStrategy | None:
    """The strategy for ``k`` workers, or None when the split variable's extent is not a multiple of k."""
    if k < 1:
        raise AnalysisError(f"number of workers must be positive, got {k}")
    if s.split_extent % k:
        return None
    step = s.split_extent // k
    var = _canonical(s.var)
    inputs, outputs = [], []
    for w in range(k):
        values = {BoundSym(var, "lo"): w * step, BoundSym(var, "hi"): (w + 1) * step - 1}
        inputs.append(tuple(None if box is None else _region(box, t.shape, values)
                            for box, t in zip(s.regions, desc.inputs)))
        outputs.append(tuple(_output_region(p, o.shape, w, step) for p, o in zip(s.outputs, desc.outputs)))
    shapes = _computed_shapes(desc)
    values = {BoundSym(var, "lo"): 0, BoundSym(var, "hi"): step - 1}
    elements = tuple(x.elements(values, shapes[x.tensor]) for x in s.exchanges)
    return PartitionStrategy(desc.op, s.var, s.kind, k, s.outputs, tuple(inputs), tuple(outputs), s.fills,
                             s.once_inputs, tuple(t.shape for t in desc.inputs), s.split_extent, s.exchanges,
                             elements)


def computed_tensors(desc: OpDescription) -> dict[str, Computed]:
    """The intermediate tensors of a description, by name."""
    found: dict[str, Computed] = {}
    stack = [o.body for o in desc.outputs]
    while stack:
        e = stack.pop()
        for x in _walk(e):
            if isinstance(x, Access) and isinstance(x.tensor, Computed) and x.tensor.name not in found:
                found[x.tensor.name] = x.tensor
                stack.append(x.tensor.body)
    return found


def _computed_shapes(desc: OpDescription) -> dict[str, tuple[int, ...]]:
    return {name: t.shape for name, t in computed_tensors(desc).items()}


def strategies(desc: OpDescription, k: int) -> tuple[PartitionStrategy, ...]:
    """Every basic strategy of ``desc`` that applies to ``k`` workers."""
    found = (instantiate(desc, s, k) for s in analyse(desc).strategies)
    return tuple(s for s in found if s is not None)


@lru_cache(maxsize=16384)
def signature_strategies(op: str, attrs, ins, outs, k: int) -> tuple[PartitionStrategy, ...]:
    """:func:`strategies` of one op signature (op, attributes, input and output shapes), cached: the search
    costs them and the recount composes every worker's call from them."""
    return strategies(describe(op, attrs, ins, outs), k)


def _region(box: Sequence[Interval], shape: Sequence[int], values) -> Region | None:
    bounds, pads = [], []
    for iv, n in zip(box, shape):
        a, b, lo, hi = iv.clip(values, n)
        if lo > hi:
            return None      # the worker needs nothing of this tensor
        bounds.append((lo, hi))
        pads.append((lo - a, b - hi))
    return Region(tuple(bounds), tuple(pads))


def _output_region(p: Placement, shape: Sequence[int], w: int, step: int) -> Region:
    bounds = [(0, n - 1) for n in shape]
    if isinstance(p, SplitDim):
        bounds[p.dim] = (w * step, (w + 1) * step - 1)
    return Region(tuple(bounds), tuple((0, 0) for _ in shape))


def worker_ranges(desc: OpDescription, s: PartitionStrategy, w: int) -> dict[Var, tuple[int, int]]:
    """Worker ``w``'s inclusive ranges of the index variables ``s`` restricts: its output boxes along the split
    dimension, its share of a split reduction, and its share of every reduction whose partial statistics are
    exchanged (for the reference interpreter's ``restrict``)."""
    step = s.split_extent // s.k
    share = (w * step, (w + 1) * step - 1)
    comps = computed_tensors(desc)
    ranges: dict[Var, tuple[int, int]] = {}
    for x in s.exchanges:
        ranges[next(v for v in reduction_root(comps[x.tensor].body)[0].vars if v.name == x.var)] = share
    for o, out in enumerate(desc.outputs):
        if isinstance(s.outputs[o], SplitDim):
            d = s.outputs[o].dim
            ranges[out.vars[d]] = s.output_regions[w][o].bounds[d]
    if s.kind == "reduce":
        ranges[next(v for v in reduction_root(desc.outputs[0].body)[0].vars if v.name == s.var)] = share
    return ranges
