"""Work of one operator call, derived from its TDL description: floating-point operations and bytes.

Input: an :class:`~tofu.tdl.describe.OpDescription` (an op instantiated for concrete shapes). Output: an
:class:`OpWork` (forward FLOPs, bytes read and written, the op's class, the inputs its contraction reads).

Nothing here is written per operator. The count walks the description's value expressions:

    ops(const) = ops(access) = 0            (an access with data-dependent indices: the ops of its indices)
    ops(f(a)) = 1 + ops(a);  ops(a . b) = 1 + ops(a) + ops(b)      (arithmetic, comparisons, selections)
    ops(a + 0) = ops(a - 0) = ops(a * 1) = ops(a / 1) = ops(a)      (an absent term, e.g. no bias)
    ops(Reduce_{v in V} body) = |V| (ops(body) + 1)                 (one accumulation per term)
    FLOPs = sum_outputs |output| ops(body) + sum_computed |tensor| ops(tensor's body)

So a matrix product out[i, j] = Sum_k A[i, k] B[k, j] costs |out| K (1 + 1) = 2 N K M, a convolution
2 |out| C_in prod(kernel), an element-wise ``a + b`` |out|. A computed intermediate (BatchNorm's batch mean) is
counted once, not at each access. An opaque function counts one operation per element it reads (ours: a
placeholder, no described op in the evaluated models uses one). Bytes are the minimal traffic: every input
read once and every output written once, ``itemsize`` bytes per element.

The op's :class:`OpClass` (whose kernel curve :mod:`tofu.sim.kernels` times it by) is derived from
the same expressions, in this order:

    GEMM           a reduction whose terms read two or more inputs, or multiply one input by itself at two places
                   (_linalg_syrk, the interleaved attention products), no window (FullyConnected, batch_dot, dot)
    CONVOLUTION    such a contraction with a window: an input index depends on an output index and a reduction
                   index at once (x * stride + dx), i.e. the op has a halo
    NORMALIZATION  a computed intermediate (a statistic such as BatchNorm's mean, LayerNorm's, softmax's sum)
    POOLING        a reduction of one input (pooling windows, sums and means over axes)
    DATA_MOVEMENT  no arithmetic, only accesses and selections (slice, concat, reshape, transpose)
    ELEMENTWISE    everything else (activations, element-wise arithmetic, broadcasts)
"""
from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from tofu.graph.attrs import Attrs
from tofu.graph.ir import Graph, Role
from tofu.tdl.describe import OpDescription, describe
from tofu.tdl.expr import (Access, Binary, Compare, Computed, Const, FloorDiv, IndexExpr, IndexValue, Mod, OpaqueCall,
                           Reduce, Select, TensorVar, Unary, Uses, Var, ValueExpr, children, index_vars)


class OpClass(enum.Enum):
    """What kind of kernel an op is (see the module docstring for how it is derived)."""

    GEMM = "gemm"                     # contraction of two inputs without a window
    CONVOLUTION = "convolution"       # contraction with a window (halo)
    NORMALIZATION = "normalization"   # computed statistics (BatchNorm, LayerNorm, softmax)
    POOLING = "pooling"               # reduction of one input (pooling, sum)
    ELEMENTWISE = "elementwise"       # arithmetic per element
    DATA_MOVEMENT = "data_movement"   # no arithmetic (slice, concat, identity, reshape)

    @property
    def contraction(self) -> bool:
        return self in (OpClass.GEMM, OpClass.CONVOLUTION)


@dataclass(frozen=True)
class OpWork:
    """One call of an op, forward only.

    Attributes:
        flops: floating-point operations (see the module docstring).
        bytes: inputs read once plus outputs written once.
        op_class: :class:`OpClass`.
        contracted: names of the inputs read inside a contraction (each has a backward contraction of the
            forward's size when it has a gradient).
        self_contracted: those of them the contraction multiplies by themselves (both operands: two backward
            contractions).
        grain: a convolution's output pixels per image (the product of its first output's dimensions after batch
            and channel), on which its kernels' rate also depends (:func:`tofu.sim.kernels.grain_factor`); inf for
            every other op (no such dependence modelled).
    """

    flops: float
    bytes: float
    op_class: OpClass
    contracted: frozenset[str]
    grain: float = math.inf
    self_contracted: frozenset[str] = frozenset()


def _ops(e: ValueExpr) -> float:
    """Operations per evaluation of ``e`` (accesses of computed tensors are free here, counted once apart)."""
    if isinstance(e, (Const, IndexValue)):
        return 0.0
    if isinstance(e, Access):
        return sum(_ops(i) for i in e.index if isinstance(i, ValueExpr))
    if isinstance(e, Binary) and _identity(e):
        return _ops(e.lhs)
    if isinstance(e, (Unary, Binary, Compare, Select)):
        return 1.0 + sum(_ops(c) for c in children(e))
    if isinstance(e, Reduce):
        term = _lookup(e)
        if term is not None:
            return _ops(term)
        return math.prod(e.extents) * (_ops(e.body) + 1.0)
    if isinstance(e, Uses):
        return _ops(e.value)                  # the declared reads are not computed on
    if isinstance(e, OpaqueCall):
        return float(sum(math.prod(a.tensor.shape) for a in e.args))
    raise TypeError(f"not a TDL value: {e!r}")


def _identity(e: Binary) -> bool:
    """``x + 0``, ``x - 0``, ``x * 1``, ``x / 1``: a description's absent term (no bias), not computed."""
    unit = {"add": 0.0, "sub": 0.0, "mul": 1.0, "div": 1.0}.get(e.fn)
    return unit is not None and isinstance(e.rhs, Const) and e.rhs.value == unit


def _lookup(r: Reduce) -> ValueExpr | None:
    """The term t of a lookup ``Sum_v where(eq(x, v), t, 0)`` (v the reduction's one variable, x free of it:
    Embedding as a one-hot contraction), which selects one term: the data-dependent access t[v := x]. It is
    counted as that access (the selection and x's truncation and clipping are an index's, not arithmetic);
    None for any other reduction."""
    if r.kind != "sum" or len(r.vars) != 1 or not isinstance(r.body, Select):
        return None
    cond, other = r.body.cond, r.body.other
    if not (isinstance(other, Const) and other.value == 0.0 and isinstance(cond, Compare) and cond.fn == "eq"):
        return None
    v = r.vars[0]
    for x, i in ((cond.lhs, cond.rhs), (cond.rhs, cond.lhs)):
        if isinstance(i, IndexValue) and i.index == v and not _reads_var(x, v):
            return r.body.then
    return None


def _reads_var(e: ValueExpr, v) -> bool:
    return any(isinstance(x, IndexValue) and v in index_vars(x.index)
               or isinstance(x, Access) and any(isinstance(i, IndexExpr) and v in index_vars(i) for i in x.index)
               for x in _nodes(e))


def _nodes(e: ValueExpr):
    """``e`` and its sub-expressions; of a lookup (:func:`_lookup`), its selected term alone."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        term = _lookup(x) if isinstance(x, Reduce) else None
        stack.extend((term,) if term is not None else children(x))


def _computed(bodies) -> list[Computed]:
    """Every computed tensor the bodies reach, nested ones included, each once."""
    found: dict[int, Computed] = {}
    stack = list(bodies)
    while stack:
        for x in _nodes(stack.pop()):
            if isinstance(x, Access) and isinstance(x.tensor, Computed) and id(x.tensor) not in found:
                found[id(x.tensor)] = x.tensor
                stack.append(x.tensor.body)
    return list(found.values())


def _inputs_read(e: ValueExpr) -> set[str]:
    """Names of the input tensors ``e`` reads, through computed tensors too."""
    names = set()
    for x in _nodes(e):
        if isinstance(x, Access):
            if isinstance(x.tensor, TensorVar):
                names.add(x.tensor.name)
            elif isinstance(x.tensor, Computed):
                names |= _inputs_read(x.tensor.body)
    return names


def _computes(e: ValueExpr) -> bool:
    """Some arithmetic in ``e`` (selections and comparisons only pick among values: concat, pad)."""
    return any(isinstance(x, (Unary, OpaqueCall)) or (isinstance(x, Binary) and not _identity(x))
               for x in _nodes(e))


def _self_products(r: Reduce) -> set[str]:
    """The inputs the reduction multiplies by themselves at two places that both move with its variables (A A^T
    of ``_linalg_syrk``, queries by keys of one interleaved projection): a contraction of one input."""
    own = set(r.vars)

    def reads(e: ValueExpr) -> set:
        return {(x.tensor.name, x.index) for x in _nodes(e) if isinstance(x, Access) and isinstance(x.tensor, TensorVar)
                and any(isinstance(i, IndexExpr) and index_vars(i) & own for i in x.index)}

    found = set()
    for x in _nodes(r.body):
        if isinstance(x, Binary) and x.fn == "mul":
            a, b = reads(x.lhs), reads(x.rhs)
            if a != b:
                found |= {n for n, _ in a} & {n for n, _ in b}
    return found


def _windowed(r: Reduce) -> bool:
    """Some access in the reduction's body has an index in which a reduction variable and another variable are
    added (x * stride + dx, or (y + pad - dy) // stride): the reduction slides a window over its input. A variable
    only under a floor division or modulo of its own (a head's offset, (bh % H) 3 d + e) places, not slides."""
    own = set(r.vars)

    def slides(e: IndexExpr) -> bool:
        if isinstance(e, (FloorDiv, Mod)):
            return slides(e.arg)
        if isinstance(e, Var):
            return False
        plain = {a for a, _ in e.terms if isinstance(a, Var)}
        return bool(plain & own and plain - own) or any(slides(a) for a, _ in e.terms if not isinstance(a, Var))

    return any(isinstance(i, IndexExpr) and slides(i)
               for x in _nodes(r.body) if isinstance(x, Access) for i in x.index)


def op_work(desc: OpDescription, itemsize: int = 4) -> OpWork:
    """The forward work of ``desc`` (one call, on the shapes it was described for)."""
    bodies = [o.body for o in desc.outputs]
    computed = _computed(bodies)
    flops = sum(math.prod(o.shape) * _ops(o.body) for o in desc.outputs)
    flops += sum(math.prod(c.shape) * _ops(c.body) for c in computed)
    contracted: set[str] = set()
    selves: set[str] = set()
    reductions, window = 0, False
    for body in bodies + [c.body for c in computed]:
        for x in _nodes(body):
            if isinstance(x, Reduce) and _lookup(x) is None:
                reductions += 1
                read, own = _inputs_read(x.body), _self_products(x)
                if len(read) >= 2 or own:
                    contracted |= read
                    selves |= own
                    window = window or _windowed(x)
    if contracted:
        cls = OpClass.CONVOLUTION if window else OpClass.GEMM
    elif computed:
        cls = OpClass.NORMALIZATION
    elif reductions:
        cls = OpClass.POOLING
    elif not any(_computes(b) for b in bodies):
        cls = OpClass.DATA_MOVEMENT
    else:
        cls = OpClass.ELEMENTWISE
    elements = sum(math.prod(t.shape) for t in desc.inputs) + sum(math.prod(o.shape) for o in desc.outputs)
    out = desc.outputs[0].shape
    grain = float(math.prod(out[2:])) if cls is OpClass.CONVOLUTION and len(out) >= 3 else math.inf
    return OpWork(float(flops), float(elements * itemsize), cls, frozenset(contracted), grain, frozenset(selves))


Shape = tuple[int, ...]

UPDATE_BYTES_PER_ELEMENT = 5      # SGD with momentum: read weight, gradient, history; write weight, history
UPDATE_FLOPS_PER_ELEMENT = 4


def backward_work(work: OpWork, grads: Sequence[str]) -> tuple[float, float]:
    """(FLOPs, bytes) of the backward of a call whose inputs named ``grads`` have a gradient (none: no backward).

    Ours, kept simple: F_bwd = F max(1, a), a the operands with a gradient that the contraction reads (dX = dY W^T
    and dW = X^T dY of a matrix product: 2F; an input that is both operands counts twice; one element-wise pass
    otherwise), B_bwd = 2 B (reads the output's gradient and the forward's tensors, writes the inputs' gradients)."""
    if not grads:
        return 0.0, 0.0
    adjoints = sum(1 + (g in work.self_contracted) for g in grads if g in work.contracted)
    return work.flops * max(1, adjoints), 2.0 * work.bytes


@lru_cache(maxsize=65536)
def _call_work(op: str, attrs: Attrs, in_shapes: tuple[Shape, ...], out_shapes: tuple[Shape, ...],
               itemsize: int) -> OpWork:
    from tofu.registry import load_builtin_operators

    load_builtin_operators()
    return op_work(describe(op, attrs, in_shapes, out_shapes), itemsize)


def op_call_work(op: str, attrs: Attrs, in_shapes: Sequence[Shape], out_shapes: Sequence[Shape],
                 itemsize: int = 4) -> OpWork:
    """The forward work of one call of ``op`` on these shapes (cached)."""
    return _call_work(op, attrs, tuple(tuple(int(d) for d in s) for s in in_shapes),
                      tuple(tuple(int(d) for d in s) for s in out_shapes), itemsize)


def batch_size(graph: Graph) -> int:
    """The batch: the leading dimension of the graph's data inputs (the largest, if they differ)."""
    data = graph.by_role(Role.DATA)
    if not data:
        raise ValueError(f"model {graph.name} has no data input to take the batch from")
    return max(t.shape[0] for t in data)
