"""MXNet's gradient rule: which inputs of an op its backward gives a gradient that is not MXNet's zero.

Input: an op's name (or an op run by its expansion, with its pieces' shapes and origins) and what reaches its
outputs. Output: per input, a gradient or not. The facts are MXNet 1.9.1's (``src/nnvm/gradient.cc`` and the
ops' ``FGradient``), checked against MXNet's own gradient pass for every described op in
tests/search/test_softmax_class_split_bytes.py. Both the plan's byte count (:mod:`tofu.search.copies`) and the
simulator's program (:mod:`tofu.sim.program`) follow it, so it lives below both.
"""
from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Protocol

from tofu.graph.ir import LOSS_OPS

ZERO_GRADIENT_OPS = frozenset({
    "BlockGrad", "stop_gradient", "zeros_like", "ones_like", "one_hot", "argmax", "argmin", "argsort", "round",
    "rint", "ceil", "floor", "fix", "trunc", "logical_not", "shape_array", "size_array", "_equal", "_not_equal",
    "_greater", "_greater_equal", "_lesser", "_lesser_equal", "_equal_scalar", "_not_equal_scalar",
    "_greater_scalar", "_greater_equal_scalar", "_lesser_scalar", "_lesser_equal_scalar", "_logical_and",
    "_logical_or", "_logical_xor", "_logical_and_scalar", "_logical_or_scalar", "_logical_xor_scalar",
    "broadcast_equal", "broadcast_not_equal", "broadcast_greater", "broadcast_greater_equal", "broadcast_lesser",
    "broadcast_lesser_equal", "broadcast_logical_and", "broadcast_logical_or", "broadcast_logical_xor",
    "_contrib_arange_like", "_random_normal_like", "_random_uniform_like", "_random_exponential_like",
    "_random_gamma_like", "_random_poisson_like", "_random_negative_binomial_like",
    "_random_generalized_negative_binomial_like",
    # the numpy interface's (npx.set_np): fills, var and std (MXNet 1.9.1 does not differentiate them), rounding,
    # logical_not, comparisons
    "_npi_full_like", "_npi_var", "_npi_std", "_npi_rint", "_npi_ceil", "_npi_floor", "_npi_fix", "_npi_trunc",
    "_npi_around", "_npi_logical_not", "_npi_argmax", "_npi_argmin", "_np_all", "_np_any", "_npi_where_scalar2",
    *(f"_npi_{stem}{suffix}" for stem in ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")
      for suffix in ("", "_scalar"))})
"""Ops whose gradient to every input is MXNet's zero (their FGradient is ``MakeZeroGradNodes``: a ``zeros_like``
node, not a backward): nothing they read gets a gradient through them (an index read by ``one_hot``, what
``BlockGrad`` stops, a comparison's operands, an input ``arange_like`` or a ``_like`` sampler reads for its
shape; and MXNet 1.9.1's numpy ``_npi_var`` and ``_npi_std``, which it does not differentiate)."""

ZERO_GRADIENT_INPUTS = {"pick": frozenset({1}), "gather_nd": frozenset({1}), "broadcast_like": frozenset({1}),
                        "reshape_like": frozenset({1}), "where": frozenset({0}), "_npi_where": frozenset({0}),
                        "_npi_where_lscalar": frozenset({0}), "_npi_where_rscalar": frozenset({0})}
"""Ops whose gradient to some of their inputs (by position) is MXNet's zero: an index, a condition, an input
read for its shape."""

RUNS_ON_ZEROS = frozenset({
    "Concat", "concat", "_rnn_param_concat", "add_n", "ElementWiseSum", "SliceChannel", "split", "Pad", "pad",
    "SwapAxis", "swapaxes", "_npi_swapaxes", "Crop", "FullyConnected", "Convolution", "Deconvolution", "batch_dot",
    "Activation",
    "LeakyReLU", "Dropout", "Pooling", "UpSampling", "BatchNorm", "LayerNorm", "GroupNorm", "InstanceNorm",
    "L2Normalization", "LRN", "SequenceLast", "SequenceMask", "SequenceReverse", "gather_nd", "moments", "where",
    "_npi_where", "_npi_where_lscalar", "_npi_where_rscalar", "_npi_norm", "_npi_solve",
    "CTCLoss", "ctc_loss", "_contrib_CTCLoss", "_contrib_ctc_loss", "BilinearSampler", "GridGenerator",
    "SpatialTransformer", "_linalg_det", "_linalg_slogdet", "_linalg_potri", "_linalg_trsm", "ROIPooling",
    "_contrib_ROIAlign", "_contrib_PSROIPooling", "Correlation", "_contrib_DeformableConvolution",
    "_contrib_ModulatedDeformableConvolution", "_random_pdf_normal", "_random_pdf_uniform", "_random_pdf_exponential",
    "_random_pdf_gamma", "_random_pdf_poisson"})
"""Ops whose backward MXNet runs when every gradient arriving at their outputs is its zero (their FGradient
builds the backward node without checking: ``MakeGradNode``, a legacy op's): their inputs get a gradient (of
zeros, but one MXNet keeps, sums and copies). Every other op's FGradient (``MakeNonlossGradNode``,
``CloneGradient``) gives zeros for zeros: a zero passes back through it."""

ZERO_GRADIENT_ATTRS = {"topk": ("ret_typ", frozenset({"indices", "mask"}), "indices")}
"""Ops whose gradient to every input is MXNet's zero for some values of one attribute: (the attribute, those
values, its default). topk differentiates its values, not their positions or its mask."""

NO_GRADIENT_OPS = ZERO_GRADIENT_OPS | {"_zeros", "zeros", "_full", "full", "_random_normal", "_random_uniform",
                                       "_random_exponential", "_random_gamma", "_random_poisson",
                                       "_random_negative_binomial", "_random_generalized_negative_binomial"}
"""Ops through which no gradient flows (their FGradient gives zeros, or they read nothing)."""


NOT_DIFFERENTIABLE = frozenset({"_grad_add", "adam_update", "argmax_channel", "khatri_rao", "sgd_mom_update",
                                "sgd_update", "sort", "_npi_copysign_scalar", "_npi_rcopysign_scalar"})
"""Described ops MXNet 1.9.1 cannot differentiate (no FGradient; ``sort`` without an ``axis`` attribute, whose
backward is built with ``axis=""`` and refused; the numpy copysign's scalar forms, whose backward node is
declared with one input and given two): MXNet cannot bind a training graph whose gradient must pass
through one (tests/search/test_softmax_class_split_bytes.py holds the set to MXNet's gradient pass)."""


def undifferentiable(graph) -> tuple:
    """The nodes of :data:`NOT_DIFFERENTIABLE` ops that some input's gradient must pass through (an input reads a
    tensor with one): the graph cannot be trained. (``sort`` given its axis differentiates.)"""
    grads = graph.with_gradient
    return tuple(n for n in graph.nodes if n.op in NOT_DIFFERENTIABLE and any(t in grads for t in n.inputs)
                 and not (n.op == "sort" and "axis" in n.attrs))


def trained_parameters(graph) -> frozenset[int]:
    """The ids of the parameters a loss's gradient reaches (:func:`gives_gradient`, back from the loss ops): the
    others keep their values whatever the steps (a loss behind ``BlockGrad``, ``round`` or a comparison)."""
    from tofu.graph.ir import Role

    reached: set[int] = set()
    for node in reversed(graph.nodes):                  # nodes in a topological order
        if node.op not in LOSS_OPS and not reached.intersection(node.outputs):
            continue
        for p, t in enumerate(node.inputs):
            if gives_gradient(node.op, True, p, node.attrs) and not (p and node.op in LOSS_OPS):
                reached.add(t)
    return frozenset(t for t in reached if graph.tensors[t].role is Role.PARAM)


class DataflowOp(Protocol):
    """What :func:`contributions` reads of an op: its name, and the ids of the values it reads and writes."""

    op: str
    inputs: Sequence[int]
    outputs: Sequence[int]


def needing(ops: Sequence[DataflowOp], live: Sequence[int], needs: list[bool],
            gives: Callable[[int, int], bool]) -> list[bool]:
    """``needs`` (per value: a variable that needs a gradient, given) extended, in the topological order
    ``live``, to every value an op computes from one through an input it gives a gradient (``gives(op index,
    position)``: :func:`gives_gradient` with a gradient arriving), but a loss's outputs: the values MXNet's
    gradient pass differentiates towards."""
    for i in live:
        op = ops[i]
        if op.op not in LOSS_OPS and any(needs[v] for p, v in enumerate(op.inputs) if gives(i, p)):
            for v in op.outputs:
                needs[v] = True
    return needs


def contributions(ops: Sequence[DataflowOp], live: Sequence[int], needs: Sequence[bool],
                  gives: Callable[[int, int, bool | None], bool]) -> tuple[Counter, dict[int, list[int]]]:
    """Per value, how many gradient contributions MXNet's backward pass writes for it; per op, the input
    positions its backward writes one for (none: the op has no backward). ``live``: the ops that run, in a
    topological order; ``needs``: per value, whether it needs a gradient (a parameter, or computed from one);
    ``gives(op index, position, arrives)``: the op's rule (:func:`gives_gradient`). An input gets a contribution
    when it needs a gradient and the op gives it one for what arrives at the op's outputs: a contribution, only
    zeros (every reader's gradient for it is MXNet's zero), or nothing. A value with no contribution has no
    gradient: MXNet writes its zero, and no copy of it is sent back."""
    count: Counter = Counter()
    zeros: set[int] = set()
    given: dict[int, list[int]] = {}
    for i in reversed(live):
        op = ops[i]
        arrives = True if any(count[v] for v in op.outputs) else False if zeros & set(op.outputs) else None
        for p, v in enumerate(op.inputs):
            if not needs[v]:
                continue
            if gives(i, p, arrives):
                count[v] += 1
                given.setdefault(i, []).append(p)
            elif arrives is not None or op.op in NO_GRADIENT_OPS or op.op in LOSS_OPS:
                zeros.add(v)        # MXNet's zero: dropped from the sum, passed on where it alone arrives
    return count, given


def gives_gradient(op: str, arrives: bool | None, position: int | None = None, attrs=None) -> bool:
    """Whether MXNet's backward of ``op`` gives its input at ``position`` (None: any input but those of
    :data:`ZERO_GRADIENT_INPUTS`) a gradient that is not MXNet's zero, ``arrives`` telling what reaches the op's
    outputs: True a gradient, False only zeros, None nothing (no output is read towards a variable with a
    gradient). The rule (``src/nnvm/gradient.cc``, the ops' FGradient; tests/search/test_softmax_class_split_bytes.py
    checks the tables against MXNet's gradient pass for every described op): none through
    :data:`ZERO_GRADIENT_OPS` (and the inputs of :data:`ZERO_GRADIENT_INPUTS`); a loss's backward ignores
    what arrives (it injects the loss gradient); zeros pass back through every op but :data:`RUNS_ON_ZEROS`.
    A zero is dropped from a sum with other contributions, so a value whose every contribution is zero has
    none: MXNet prunes its backward, and a cross-device copy of it sends nothing back. ``attrs`` (the op's, parsed
    or MXNet's strings) decide for the ops of :data:`ZERO_GRADIENT_ATTRS`, which need them.

    Raises:
        ValueError: ``op`` is one of :data:`ZERO_GRADIENT_ATTRS` and ``attrs`` is None."""
    if op in NO_GRADIENT_OPS or position in ZERO_GRADIENT_INPUTS.get(op, ()):
        return False
    rule = ZERO_GRADIENT_ATTRS.get(op)
    if rule is not None:
        if attrs is None:
            raise ValueError(f"the gradient of {op} depends on its attribute '{rule[0]}': give its attrs")
        if str(attrs.get(rule[0], rule[2])) in rule[1]:
            return False
    if arrives or op in LOSS_OPS:
        return True
    return arrives is False and op in RUNS_ON_ZEROS


def expansion_gradients(op: str, attrs, shapes: tuple[tuple[int, ...], ...], origins: tuple[tuple[int, ...], ...],
                        arrives: bool = True) -> tuple[bool, ...]:
    """Per input of ``op`` run by its expansion (``tofu.registry.expansion``) on one worker's pieces of
    ``shapes`` starting at ``origins``: whether the expansion's MXNet symbol gives it a gradient, ``arrives``
    telling whether one reaches the outputs (else only zeros). Traced back from the outputs with
    :func:`gives_gradient`, the statistics exchange as an ``add_n`` (its concats and sums run their backward on
    zeros): SoftmaxOutput's reads its label through ``one_hot`` alone, so the label gets none. An expansion that
    does not read the origins builds one symbol for every worker: it is traced once per shapes."""
    from tofu import registry

    if not registry.expansion(op).reads_origins:
        origins = tuple((0,) * len(s) for s in shapes)
    return _expansion_gradients(op, attrs, shapes, origins, arrives)


@lru_cache(maxsize=16384)
def _expansion_gradients(op: str, attrs, shapes: tuple[tuple[int, ...], ...], origins: tuple[tuple[int, ...], ...],
                         arrives: bool) -> tuple[bool, ...]:
    names, doc = _expansion_graph(op, attrs, shapes, origins)
    got = _arrivals(doc, arrives)
    found = {n["name"]: got[j] for j, n in enumerate(doc["nodes"]) if n["op"] == "null"}
    return tuple(found.get(n) is True for n in names)


def _arrivals(doc: dict, arrives: bool) -> list[bool | None]:
    """Per node of a symbol's JSON: what reaches it back from the heads (``arrives`` there), by
    :func:`gives_gradient`: True a gradient, False only MXNet's zeros, None nothing."""
    nodes = doc["nodes"]
    got: list[bool | None] = [None] * len(nodes)
    for h in doc["heads"]:
        got[h[0]] = arrives
    for i in reversed(range(len(nodes))):               # the JSON lists the nodes in a topological order
        if nodes[i]["op"] == "null":
            continue
        for p, (j, *_) in enumerate(nodes[i]["inputs"]):
            got[j] = True if gives_gradient(nodes[i]["op"], got[i], p, nodes[i].get("attrs", {})) or got[j] \
                else False
    return got


@lru_cache(maxsize=8192)
def _expansion_graph(op: str, attrs, shapes: tuple[tuple[int, ...], ...], origins: tuple[tuple[int, ...], ...]):
    """The input names and the JSON of ``op``'s expansion on one worker's pieces (built once for both values of
    ``arrives``)."""
    import mxnet as mx

    from tofu import registry
    from tofu.tdl.describe import typed_attrs

    expand = registry.expansion(op)
    typed = typed_attrs(registry.lookup(op).attrs_type, attrs, op)
    names = [f"_tofu_input{i}" for i in range(len(shapes))]
    with mx.name.NameManager():      # its own names: the rewriter's later symbols are named as without it
        reduces = itertools.count()
        outs = expand([[mx.sym.var(n) for n in names]], [list(shapes)], typed,
                      lambda parts, reducer="sum": [mx.sym.add_n(*parts, name=f"{ALLREDUCE}{next(reduces)}")],
                      [list(origins)])
        return names, json.loads(mx.sym.Group([o for out in outs for o in out]).tojson())


ALLREDUCE = "_tofu_allreduce"
"""The name prefix of a statistics exchange in a traced expansion (an ``add_n``, numbered in the order of the
expansion's all-reduces)."""


def statistics_gradients(op: str, attrs, shapes: tuple[tuple[int, ...], ...]) -> tuple[bool, ...]:
    """Per statistic that ``op``'s expansion all-reduces (in its order), whether the backward pass all-reduces the
    statistic's gradient as well: a gradient, or MXNet's zeros (the exchange's concats run their backward on
    them), arrives at the exchange from the outputs, and passes from it back to an input. MXNet runs no backward
    that reaches no variable, so a statistic computed under ``BlockGrad`` (the softmax's row maximum, a shift the
    result does not depend on) has none exchanged, while BatchNorm's mean and variance both do. Which statistics
    carry one depends on the op's attributes and its inputs' ranks, not on their extents: traced once per (op,
    attributes, ranks), on the pieces of ``shapes`` (one worker's)."""
    key = (op, attrs, tuple(len(s) for s in shapes))
    found = _STATISTICS.get(key)
    if found is None:
        found = _STATISTICS[key] = _trace_statistics(op, attrs, tuple(tuple(s) for s in shapes))
    return found


_STATISTICS: dict[tuple, tuple[bool, ...]] = {}


def _trace_statistics(op: str, attrs, shapes: tuple[tuple[int, ...], ...]) -> tuple[bool, ...]:
    names, doc = _expansion_graph(op, attrs, shapes, tuple((0,) * len(s) for s in shapes))
    nodes, got = doc["nodes"], _arrivals(doc, True)
    inputs = set(names)
    reaches = [False] * len(nodes)                      # a gradient at the node passes back to an input
    for i, n in enumerate(nodes):
        reaches[i] = n["name"] in inputs if n["op"] == "null" else any(
            reaches[j] and gives_gradient(n["op"], True, p, n.get("attrs", {}))
            for p, (j, *_) in enumerate(n["inputs"]))
    # the exchange's concats run their backward on zeros too: what arrives may be MXNet's zeros
    return tuple(got[i] is not None and reaches[i] for i, n in enumerate(nodes) if n["name"].startswith(ALLREDUCE))
