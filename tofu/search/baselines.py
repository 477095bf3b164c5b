"""The paper's competing partitioners (PAPER.md, "Evaluation"), as one-cut solvers on Tofu's cost model.

Input: a :class:`~tofu.search.problem.CutProblem`. Output: a :class:`~tofu.search.problem.CutSolution`
whose ``cost`` is ``problem.cost(x, y)``. ``tofu.search.algorithms`` runs each as ONE flat k-way cut.

Notation (problem.py): x_t is the choice of tensor group t, y_g the strategy of op group g, and

    cost(x, y) = sum_g c_g(y_g; x),   c_g(s; x) = const[g][s] + sum_t T_gt[s][x_t]

with T_gt the table of (g, t), repeated terms summed. Two greedy completions recur below:

    best_y(x)_g = argmin_s c_g(s; x)                        (per-op greedy, exact given x)
    best_x(y)_t = argmin_c sum_{g touching t} T_gt[y_g][c]  (exact given y: costs are separable)

and the *best case* of g under a partial assignment x' (undecided tensor groups at their own cheapest
choice, independently per strategy):

    lb_g(s; x') = const[g][s] + sum_{t decided} T_gt[s][x'_t] + sum_{t undecided} min_c T_gt[s][c]

Ties break towards the lowest index.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from tofu.errors import SearchError

from tofu.search.dp import solve_dp
from tofu.search.problem import CutProblem, CutSolution, OpGroup

Table = tuple[tuple[float, ...], ...]


def data_parallel(p: CutProblem) -> CutSolution:
    """Data parallelism: every op splits its batch.

    y_g = the batch strategy of g, i.e. one whose ``produces`` puts g's first output on dimension 0 (the
    best-case cheapest lb_g(s; {}) among several); for an op whose first output cannot be split on
    dimension 0 at this k, argmin_s lb_g(s; {}). Then x = best_x(y), exact given y, except that a tensor group
    offered replication beside its dimensions (a parameter, when the problem holds parameters whole, as MXNet's
    kvstore does: ``cost.build_cut``'s ``whole_params``) takes it.
    """
    y = []
    for g in p.ops:
        batch = [s for s in range(len(g.strategies)) if g.produces[s] and g.produces[s][0][1] == 0]
        y.append(_best_case(g, _tables(g), {}, batch or range(len(g.strategies))))
    x = [t.choices.index(None) if None in t.choices else c for t, c in zip(p.tensors, _best_x(p, y))]
    return _solution(p, x, y)


def allrow_greedy(p: CutProblem) -> CutSolution:
    """AllRow-Greedy: every tensor group split on dimension 0 where it can be (else its first choice), then
    y = best_y(x), per-op greedy."""
    x = [t.choices.index(0) if 0 in t.choices else 0 for t in p.tensors]
    return _solution(p, x, _best_y(p, x))


def spartan(p: CutProblem) -> CutSolution:
    """Spartan: greedy tiling of the largest tensors first.

    Tensor groups in decreasing ``nbytes`` (then id); each takes

        x_t = argmin_c sum_{g touching t} min_s lb_g(s; x' with x'_t = c)

    with x' the groups decided so far; tensor groups no op touches take choice 0. Then y = best_y(x).
    """
    touching = _touching(p)
    tables = [_tables(g) for g in p.ops]
    x: dict[int, int] = {}
    for t in sorted(p.tensors, key=lambda t: (-t.nbytes, t.id)):
        x[t.id] = min(range(len(t.choices)),
                      key=lambda c: sum(min(_lower(g, tables[g.id], {**x, t.id: c}, s)
                                            for s in range(len(g.strategies))) for g in touching[t.id]))
    xs = [x[t.id] for t in p.tensors]
    return _solution(p, xs, _best_y(p, xs))


def equalchop(p: CutProblem) -> CutSolution:
    """EqualChop: one k-way split of each op along one dimension, in topological order, no global search.

    Op groups by ``order``: y_g = argmin_s lb_g(s; x') with x' the tensor groups decided so far; then each
    undecided output tensor group o of g takes the dimension y_g produces on it if that is a choice, else
    argmin_c T_go[y_g][c] (g's own cheapest). Tensor groups still undecided at the end take best_x(y).
    """
    x: dict[int, int] = {}
    y = [0] * len(p.ops)
    for g in sorted(p.ops, key=lambda g: (g.order, g.id)):
        tables = _tables(g)
        s = y[g.id] = _best_case(g, tables, x, range(len(g.strategies)))
        for t, dim in g.produces[s]:
            if t in x:
                continue
            choices = p.tensors[t].choices
            if dim is not None and dim in choices:
                x[t] = choices.index(dim)
            elif t in tables:
                x[t] = min(range(len(choices)), key=lambda c: tables[t][s][c])
    rest = _best_x(p, y)
    xs = [x.get(t.id, rest[t.id]) for t in p.tensors]
    return _solution(p, xs, y)


def icml18(p: CutProblem) -> CutSolution:
    """ICML18 (OptCNN): layer-wise choices limited to the batch and channel dimensions, solved exactly.

    Restricts every op group to the strategies that put its first output on dimension 0 or 1 (all of them
    if none does) and every tensor group to its choices in {0, 1} (all of them if none is), then minimises
    cost(x, y) over the restricted assignments with :func:`~tofu.search.dp.solve_dp`.
    """
    keep_c = []
    for t in p.tensors:
        kept = [c for c, d in enumerate(t.choices) if d in (0, 1)]
        keep_c.append(kept or list(range(len(t.choices))))
    keep_s = []
    for g in p.ops:
        kept = [s for s in range(len(g.strategies)) if g.produces[s] and g.produces[s][0][1] in (0, 1)]
        keep_s.append(kept or list(range(len(g.strategies))))
    return _restricted_optimum(p, keep_c, keep_s)


# Megatron-LM's tensor parallelism with sequence parallelism, per tensor of a block of
# tofu.models.transformer (name without "block{l}_" and "_output"): the dimension each is split along
MEGATRON_DIMS: dict[str, int] = {
    # column-parallel: q, k, v and fc1 split their output features, i.e. the heads and the MLP width
    **{f"{fc}_{p}": 0 for fc in ("q", "k", "v", "fc1") for p in ("weight", "bias")},
    **{role: 2 for role in ("q", "k", "v", "fc1", "gelu", "q_heads", "k_heads", "v_heads", "context_back",
                            "context_merge")},
    # the attention's (batch, heads, seq, ...) split by heads
    **{role: 1 for role in ("q_front", "k_front", "v_front", "scores", "scale", "masked", "probs", "context")},
    # row-parallel: proj and fc2 split their input features (a reduction), their partial outputs reduce-scattered
    "proj_weight": 1, "fc2_weight": 1,
    # sequence-parallel: the residual stream and the LayerNorms split along the sequence
    **{role: 1 for role in ("ln1", "ln2", "proj", "fc2", "attn_add", "mlp_add")},
}

VOCAB_PARALLEL_DIMS: dict[str, int] = {
    # the head as megatron-vp splits it: the final LayerNorm sequence-parallel; the output projection
    # column-parallel over the vocabulary (Megatron-LM's parallel_lm_logits), its logits and the softmax
    # cross-entropy split along the vocabulary, which exchanges each row's max and sum of exponentials
    # (vocab_parallel_cross_entropy)
    "head_ln": 1, "head_proj_weight": 0, "head_proj": 1, "softmax": 1,
    # the token embedding's table split by its rows (VocabParallelEmbedding): each device looks up the tokens
    # of its rows, zeros for the others, a partial sum (its reduction over the vocabulary, VOCAB_PARALLEL_ROWS)
    "embed_token_weight": 0,
}
VOCAB_PARALLEL_ROWS = ("embed_token",)

ROW_PARALLEL = ("proj", "fc2")
HEAD_SPLIT = frozenset({"q_heads", "k_heads", "v_heads", "q_front", "k_front", "v_front", "scores", "scale", "masked",
                        "probs", "context", "context_back"})
"""The tensors whose split is a split of the attention heads (the first that cannot split names the heads)."""


def megatron_sp_bytes(layers: int, batch: int, seq: int, hidden: int, workers: int, itemsize: int = 4) -> int:
    """Bytes Megatron-LM with sequence parallelism moves per training iteration, summed over the devices of
    one tensor-parallel group (docs/search.md, "Megatron-LM + SP, derived"), for an untied GPT:

        4 (k - 1) [ (8 L + 4) b s h + 6 b s + 12 h L + 4 h ]     (itemsize 4)

    Per layer two all-gathers and two reduce-scatters of (b, s, h) forward and their mirrors backward
    (8 L b s h); the vocabulary-parallel embedding's reduce-scatter and its gradient's all-gather, the
    output projection's all-gather and its gradient's reduce-scatter (4 b s h); the cross-entropy's three
    all-reduces of a per-row statistic (max, sum of exponentials, target logit: 6 b s); the all-reduced
    gradients of each layer's LayerNorm gammas and betas and row-parallel biases (12 h L) and of the final
    LayerNorm (4 h). A collective over n elements moves (k - 1) n summed over the devices (all-gather,
    reduce-scatter) or 2 (k - 1) n (ring all-reduce). The vocabulary V does not appear."""
    b, s, h, k, L = batch, seq, hidden, workers, layers
    return itemsize * (k - 1) * ((8 * L + 4) * b * s * h + 6 * b * s + 12 * h * L + 4 * h)


def megatron_vp(p: CutProblem) -> CutSolution:
    """:func:`megatron` with Megatron-LM's vocabulary-parallel head (:data:`VOCAB_PARALLEL_DIMS`): the faithful
    baseline (SoftmaxOutput split along the vocabulary runs by its expansion, operators_tdl/softmax.py)."""
    return megatron(p, vocab_parallel=True)


def megatron(p: CutProblem, vocab_parallel: bool = False) -> CutSolution:
    """Megatron-LM's hand-made partition (Shoeybi et al. 2019) with sequence parallelism (Korthikanti et al.
    2022), on :mod:`tofu.models.transformer`: every block tensor is held on the dimension of
    :data:`MEGATRON_DIMS` and every block op splits as Megatron splits it (its output on that dimension; the
    row-parallel ones their reduction); with ``vocab_parallel`` (``megatron-vp``) the head likewise: the final
    LayerNorm by the sequence, the output projection column-parallel over the vocabulary, the softmax
    cross-entropy split along the vocabulary with each row's max and sum of exponentials all-reduced; without
    it the head takes its optimum among runnable strategies (which, since SoftmaxOutput's vocabulary split runs,
    is usually the same split). The tensors it does not name (LayerNorm parameters, the
    row-parallel biases, the embeddings, the causal mask, which every device makes itself) and every op's
    strategy take their optimum given those, by :func:`~tofu.search.dp.solve_dp` on the restricted problem.

    Where this differs from Megatron-LM's bytes (:func:`megatron_sp_bytes`; docs/search.md states each term):
    the vocabulary-parallel embedding is not expressible (an Embedding reads its table at data-dependent rows,
    which the analysis cannot split), so the table is split by its columns and the lookup's output converted
    to the sequence split, 2 (k-1)/k b s h instead of 2 (k-1) b s h; at b > 1 the (b, s, h) layout makes the
    head's flattening to rows b s + t a conversion, 2 (k-1)/k b s h more; a row-parallel bias is added by one
    worker, which fetches it, instead of all-reduced.

    Raises:
        SearchError: the graph has no transformer block, a block tensor cannot be split k ways on its
            dimension (k must divide the heads, the sequence and the 4h MLP width), or a block op has no
            runnable strategy that splits it so.
    """
    if not any(n.startswith("block") and _block_role(n) in MEGATRON_DIMS for t in p.tensors for n in t.names):
        raise SearchError("megatron: the graph has no transformer block (tensors named as tofu.models.transformer "
                          "names them: block{l}_q_weight, ...)")
    split = {**MEGATRON_DIMS, **(VOCAB_PARALLEL_DIMS if vocab_parallel else {})}
    keep_c = []
    for t in p.tensors:
        dims = {split[role] for role in map(_block_role, t.names) if role in split}
        if len(dims) > 1:
            raise SearchError(f"megatron: tensor group '{t.name}' ties tensors split on dimensions {sorted(dims)}")
        if dims and dims <= set(t.choices):
            keep_c.append([t.choices.index(next(iter(dims)))])
        elif dims and any(_block_role(n) in HEAD_SPLIT for n in t.names):
            heads = t.shape[next(iter(dims))]
            raise SearchError(f"megatron: {p.k} workers do not divide the {heads} attention heads ('{t.name}' of "
                              f"shape {t.shape}); Megatron-LM needs the heads to divide by the workers")
        elif dims:
            raise SearchError(f"megatron: '{t.name}' of shape {t.shape} cannot be split {p.k} ways on dimension "
                              f"{next(iter(dims))}")
        else:
            keep_c.append(list(range(len(t.choices))))
    keep_s, unsplit = [], []
    for g in p.ops:
        role = _block_role(g.name)
        every = range(len(g.strategies))
        if role in ROW_PARALLEL or (vocab_parallel and role in VOCAB_PARALLEL_ROWS):
            kept = [s for s in every if g.kinds[s] == "reduce"]
        elif role in split:
            kept = [s for s in every if g.produces[s] and g.produces[s][0][1] == split[role]
                    and not g.strategies[s].endswith("*")]        # computed whole is not Megatron's split
        else:
            kept = list(every)
        if not kept:
            unsplit.append(g.name)
        keep_s.append(kept)
    if unsplit:
        raise SearchError(f"megatron: no runnable strategy splits {', '.join(unsplit[:4])}"
                          f"{' ...' if len(unsplit) > 4 else ''} as Megatron-LM does at {p.k} workers")
    return _restricted_optimum(p, keep_c, keep_s)


def _block_role(name: str) -> str | None:
    """``block3_q_heads_output`` -> ``q_heads``, ``head_proj_output`` -> ``head_proj``, ``embed_token_weight`` ->
    ``embed_token_weight``, ``softmax_output`` -> ``softmax``; None for a name outside the blocks, the
    embeddings and the head."""
    match = re.fullmatch(r"block[0-9]+_(.+?)(_output)?", name) or \
        re.fullmatch(r"(head_.+?|embed_.+?|softmax)(_output)?", name)
    return match[1] if match else None


def _restricted_optimum(p: CutProblem, keep_c: list[list[int]], keep_s: list[list[int]]) -> CutSolution:
    """The least-cost assignment using only choices ``keep_c[t]`` and strategies ``keep_s[g]`` (by index)."""
    tensors = tuple(dataclasses.replace(t, choices=tuple(t.choices[c] for c in keep_c[t.id])) for t in p.tensors)
    ops = tuple(dataclasses.replace(
        g, strategies=tuple(g.strategies[s] for s in keep_s[g.id]), kinds=tuple(g.kinds[s] for s in keep_s[g.id]),
        const=tuple(g.const[s] for s in keep_s[g.id]), produces=tuple(g.produces[s] for s in keep_s[g.id]),
        terms=tuple((t, tuple(tuple(table[s][c] for c in keep_c[t]) for s in keep_s[g.id])) for t, table in g.terms))
        for g in p.ops)
    sub = solve_dp(CutProblem(p.k, tensors, ops))
    return _solution(p, [keep_c[t][c] for t, c in enumerate(sub.x)], [keep_s[g][s] for g, s in enumerate(sub.y)])


def _solution(p: CutProblem, x, y) -> CutSolution:
    x, y = tuple(x), tuple(y)
    p.check(x, y)
    return CutSolution(x, y, p.cost(x, y))


def _tables(g: OpGroup) -> dict[int, Table]:
    """T_gt per touched tensor group, repeated terms summed."""
    out: dict[int, Table] = {}
    for t, table in g.terms:
        out[t] = table if t not in out else tuple(tuple(a + b for a, b in zip(ra, rb))
                                                  for ra, rb in zip(out[t], table))
    return out


def _lower(g: OpGroup, tables: Mapping[int, Table], x: Mapping[int, int], s: int) -> float:
    """lb_g(s; x), ``tables`` being g's."""
    return g.const[s] + sum(table[s][x[t]] if t in x else min(table[s]) for t, table in tables.items())


def _best_case(g: OpGroup, tables: Mapping[int, Table], x: Mapping[int, int], candidates) -> int:
    return min(candidates, key=lambda s: _lower(g, tables, x, s))


def _best_y(p: CutProblem, x) -> list[int]:
    return [min(range(len(g.strategies)), key=lambda s: p.op_cost(g, s, x)) for g in p.ops]


def _best_x(p: CutProblem, y) -> list[int]:
    tables = [_tables(g) for g in p.ops]
    touching = _touching(p)
    return [min(range(len(t.choices)), key=lambda c: sum(tables[g.id][t.id][y[g.id]][c] for g in touching[t.id]))
            for t in p.tensors]


def _touching(p: CutProblem) -> dict[int, list[OpGroup]]:
    out: dict[int, list[OpGroup]] = {t.id: [] for t in p.tensors}
    for g in p.ops:
        for t in dict.fromkeys(g.tensors()):
            out[t].append(g)
    return out
