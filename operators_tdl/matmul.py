"""TDL descriptions of the matrix-product family: FullyConnected, dot, batch_dot, and the interleaved attention
products of MXNet's contrib (``_contrib_interleaved_matmul_{selfatt,encdec}_{qk,valatt}``), and the numpy
interface's _npi_matmul, _np_dot, _npi_einsum and _npi_tensordot(_int_axes).

Each is one sum over the contracted index. Inputs of any rank keep one index variable per dimension, so every
access stays affine: FullyConnected with ``flatten=True`` contracts one variable per flattened input dimension
(the weight is read at their row-major combination), and N-d ``dot`` keeps the free dimensions of both operands.

``nary`` (tofu.tdl.expr) builds the reduction lambdas whose number of parameters depends on a rank.
"""
from __future__ import annotations

import math

from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)


def row_major(indices: Sequence, shape: Sequence[int]):
    """The flat row-major offset of ``indices`` in a tensor of ``shape`` (an affine index expression)."""
    flat = 0
    for i, n in zip(indices, shape):
        flat = flat * n + i
    return flat


@dataclass(frozen=True)
class FullyConnectedAttrs:
    num_hidden: int
    no_bias: bool = False
    flatten: bool = True


@tdl_op("FullyConnected", inputs=("data", "weight", "bias?"), attrs=FullyConnectedAttrs, cases=[
    Case(shapes=((4, 6), (3, 6), (3,)), attrs={"num_hidden": 3}),
    Case(shapes=((2, 3, 2, 2), (5, 12), (5,)), attrs={"num_hidden": 5}),
    Case(shapes=((2, 3, 4), (5, 4)), attrs={"num_hidden": 5, "no_bias": True, "flatten": False}),
])
def fully_connected(data: TensorVar, weight: TensorVar, bias: TensorVar | None, attrs: FullyConnectedAttrs):
    """out[b, h] = sum_{k1..kn} data[b, k1, .., kn] * weight[h, flat(k1..kn)] + bias[h]  (flatten=True);
    out[..., h] = sum_k data[..., k] * weight[h, k] + bias[h]  (flatten=False; weight is (num_hidden, in))."""
    bias_of = (lambda h: bias[h]) if bias is not None and not attrs.no_bias else (lambda h: 0.0)
    if attrs.flatten:
        rest = data.shape[1:]
        names = [f"k{d}" for d in range(1, len(rest) + 1)] if len(rest) > 1 else ["k"]
        return lambda b, h: Sum(nary(names, lambda ks: data[(b, *ks)] * weight[h, row_major(ks, rest)])) \
            + bias_of(h)
    return lambda *i: Sum(lambda k: data[(*i[:-1], k)] * weight[i[-1], k]) + bias_of(i[-1])


@dataclass(frozen=True)
class DotAttrs:
    transpose_a: bool = False
    transpose_b: bool = False


@tdl_op("dot", inputs=("lhs", "rhs"), attrs=DotAttrs, cases=[
    Case(shapes=((3, 4), (4, 5))),
    Case(shapes=((4, 3), (5, 4)), attrs={"transpose_a": True, "transpose_b": True}),
    Case(shapes=((2, 3, 4), (4, 5))),
    Case(shapes=((4, 2, 3), (5, 2, 4)), attrs={"transpose_a": True, "transpose_b": True}),
    Case(shapes=((6,), (6,))),
])
def dot(lhs: TensorVar, rhs: TensorVar, attrs: DotAttrs):
    """out[i.., j..] = sum_k lhs[i.., k] * rhs[k, j..]: the last axis of lhs (its first, with transpose_a)
    against the first axis of rhs (its last, with transpose_b); 1-D . 1-D gives shape (1,)."""
    na, nb = lhs.ndim - 1, rhs.ndim - 1
    a_at = (lambda i, k: lhs[(k, *i)]) if attrs.transpose_a else (lambda i, k: lhs[(*i, k)])
    b_at = (lambda j, k: rhs[(*j, k)]) if attrs.transpose_b else (lambda j, k: rhs[(k, *j)])
    if na + nb == 0:   # inner product: MXNet's output has shape (1,)
        return lambda i: Sum(lambda k: a_at((), k) * b_at((), k))
    return lambda *ij: Sum(lambda k: a_at(ij[:na], k) * b_at(ij[na:], k))


@tdl_op("batch_dot", inputs=("lhs", "rhs"), attrs=DotAttrs, cases=[
    Case(shapes=((2, 3, 4), (2, 4, 5))),
    Case(shapes=((2, 4, 3), (2, 5, 4)), attrs={"transpose_a": True, "transpose_b": True}),
    Case(shapes=((2, 2, 3, 4), (2, 2, 3, 5)), attrs={"transpose_a": True}),
])
def batch_dot(lhs: TensorVar, rhs: TensorVar, attrs: DotAttrs):
    """out[b.., m, n] = sum_k lhs[b.., m, k] * rhs[b.., k, n]; the transpose flags swap an operand's last two
    axes."""
    a_at = (lambda b, m, k: lhs[(*b, k, m)]) if attrs.transpose_a else (lambda b, m, k: lhs[(*b, m, k)])
    b_at = (lambda b, n, k: rhs[(*b, n, k)]) if attrs.transpose_b else (lambda b, n, k: rhs[(*b, k, n)])
    return lambda *i: Sum(lambda k: a_at(i[:-2], i[-2], k) * b_at(i[:-2], i[-1], k))


# The numpy interface's products (``npx.set_np()``). A 1-D operand (numpy's vector rules, a 0-d result for two
# of them) is not described for matmul; _np_dot is legacy dot's contraction where b has at most two dimensions.

def _batch_read(x: TensorVar, batch: Sequence, row, col):
    """x[batch.., row, col] with x's batch dimensions right-aligned to ``batch`` and broadcast (extent 1 read at 0)."""
    lead = len(batch) - (x.ndim - 2)
    return x[(*(0 if n == 1 else v for n, v in zip(x.shape[:-2], batch[lead:])), row, col)]


@tdl_op("_npi_matmul", inputs=("a", "b"), cases=[
    Case(shapes=((3, 4), (4, 5))),
    Case(shapes=((2, 3, 4), (2, 4, 5))),
    Case(shapes=((2, 1, 3, 4), (3, 4, 2))),       # batch dimensions broadcast
    Case(shapes=((2, 3, 4), (4, 5))),
])
def np_matmul(a: TensorVar, b: TensorVar, attrs: NoAttrs):
    """out[t.., m, n] = sum_k a[t.., m, k] * b[t.., k, n]  (the batch dimensions t broadcast as numpy's)."""
    if a.ndim < 2 or b.ndim < 2:
        raise TDLError("_npi_matmul: a 1-D operand (numpy's vector product) is not described")
    return lambda *i: Sum(lambda k: _batch_read(a, i[:-2], i[-2], k) * _batch_read(b, i[:-2], k, i[-1]))


@tdl_op("_np_dot", inputs=("a", "b"), cases=[
    Case(shapes=((3, 4), (4, 5))),
    Case(shapes=((2, 3, 4), (4, 5))),
    Case(shapes=((2, 3, 4), (4,))),
])
def np_dot(a: TensorVar, b: TensorVar, attrs: NoAttrs):
    """out[i.., j] = sum_k a[i.., k] * b[k, j]  (b of one or two dimensions; numpy's dot)."""
    if b.ndim > 2 or a.ndim + b.ndim < 3:
        raise TDLError(f"_np_dot: operands of {a.ndim} and {b.ndim} dimensions are not described (b of one or "
                       f"two, not both vectors)")
    return dot(a, b, DotAttrs())


@dataclass(frozen=True)
class EinsumAttrs:
    num_args: int
    subscripts: str = ""
    optimize: int = 0


def _einsum_letters(subscripts: str, data: Sequence[TensorVar]) -> tuple[list[str], str]:
    """The operands' letters and the output's (numpy's implicit output: the letters met once, sorted)."""
    if "." in subscripts:
        raise TDLError("_npi_einsum: an ellipsis ('...') is not described")
    spec = subscripts.replace(" ", "")
    ins, arrow, out = spec.partition("->")
    terms = ins.split(",")
    if len(terms) != len(data):
        raise TDLError(f"_npi_einsum: '{subscripts}' names {len(terms)} operands, {len(data)} given")
    letters = "".join(terms)
    if not arrow:
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    for term, x in zip(terms, data):
        if len(term) != x.ndim or len(set(term)) != len(term):
            raise TDLError(f"_npi_einsum: '{term}' does not name the {x.ndim} dimensions of an operand once each "
                           f"(a diagonal is not described)")
    if len(set(out)) != len(out) or not set(out) <= set(letters):
        raise TDLError(f"_npi_einsum: the output '{out}' repeats a letter or names one no operand has")
    return terms, out


@tdl_op("_npi_einsum", inputs=("*data",), attrs=EinsumAttrs, cases=[
    Case(shapes=((3, 4), (4, 5)), attrs={"num_args": 2, "subscripts": "ij,jk->ik"}),
    Case(shapes=((2, 2, 3, 4), (2, 2, 5, 4)), attrs={"num_args": 2, "subscripts": "bhqd,bhkd->bhqk"}),
    Case(shapes=((3, 4), (3, 4)), attrs={"num_args": 2, "subscripts": "ij,ij->i"}),
    Case(shapes=((3,), (4,)), attrs={"num_args": 2, "subscripts": "i,j"}),            # implicit output: ij
    Case(shapes=((2, 3, 4),), attrs={"num_args": 1, "subscripts": "abc->cab"}),
    Case(shapes=((2, 3), (3, 4), (4, 2)), attrs={"num_args": 3, "subscripts": "ab,bc,cd->ad"}),
])
def np_einsum(data: tuple[TensorVar, ...], attrs: EinsumAttrs):
    """out[o] = sum_k prod_n data_n[letters_n]  (the output's letters are o, the others k; no ellipsis, no
    diagonal)."""
    terms, out = _einsum_letters(attrs.subscripts, data)
    summed = sorted({c for term in terms for c in term} - set(out))

    def product(at: dict) -> ValueExpr:
        value = None
        for term, x in zip(terms, data):
            read = x[tuple(at[c] for c in term)]
            value = read if value is None else value * read
        return value

    if not summed:
        return lambda *o: product(dict(zip(out, o)))
    return lambda *o: Sum(nary([f"k_{c}" for c in summed], lambda ks: product({**dict(zip(out, o)),
                                                                              **dict(zip(summed, ks))})))


@dataclass(frozen=True)
class TensordotIntAttrs:
    axes: int = 2


@dataclass(frozen=True)
class TensordotAttrs:
    a_axes_summed: tuple[int, ...]
    b_axes_summed: tuple[int, ...]


def _tensordot(op: str, a: TensorVar, b: TensorVar, a_sum: Sequence[int], b_sum: Sequence[int]):
    """out[i.., j..] = sum_k a[i.. with k on a_sum] * b[j.. with k on b_sum]: a's free axes, then b's."""
    if len(a_sum) != len(b_sum):
        raise TDLError(f"{op}: {len(a_sum)} summed axes of a against {len(b_sum)} of b")
    a_sum = [x % a.ndim for x in a_sum]
    b_sum = [x % b.ndim for x in b_sum]
    if any(a.shape[x] != b.shape[y] for x, y in zip(a_sum, b_sum)):
        raise TDLError(f"{op}: summed axes of different extents")
    a_free = [d for d in range(a.ndim) if d not in a_sum]
    b_free = [d for d in range(b.ndim) if d not in b_sum]
    if not a_free and not b_free:
        raise TDLError(f"{op}: a 0-d (scalar) result is not described")

    def read(x: TensorVar, free, summed, o, k):
        idx: list = [0] * x.ndim
        for d, v in zip(free, o):
            idx[d] = v
        for d, v in zip(summed, k):
            idx[d] = v
        return x[tuple(idx)]

    def out(*o):
        oa, ob = o[:len(a_free)], o[len(a_free):]
        if not a_sum:
            return read(a, a_free, a_sum, oa, ()) * read(b, b_free, b_sum, ob, ())
        return Sum(nary([f"k{j}" for j in range(len(a_sum))],
                        lambda k: read(a, a_free, a_sum, oa, k) * read(b, b_free, b_sum, ob, k)))
    return out


@tdl_op("_npi_tensordot_int_axes", inputs=("a", "b"), attrs=TensordotIntAttrs, cases=[
    Case(shapes=((3, 4), (4, 5)), attrs={"axes": 1}),
    Case(shapes=((2, 3, 4), (3, 4, 5)), attrs={"axes": 2}),
    Case(shapes=((2, 3), (4,)), attrs={"axes": 0}),                      # an outer product
])
def np_tensordot_int_axes(a: TensorVar, b: TensorVar, attrs: TensordotIntAttrs):
    """out[i.., j..] = sum_k a[i.., k..] * b[k.., j..]  (a's last ``axes`` axes against b's first)."""
    n = attrs.axes
    return _tensordot("_npi_tensordot_int_axes", a, b, list(range(a.ndim - n, a.ndim)), list(range(n)))


@tdl_op("_npi_tensordot", inputs=("a", "b"), attrs=TensordotAttrs, cases=[
    Case(shapes=((3, 4, 2), (4, 5, 3)), attrs={"a_axes_summed": (0, 1), "b_axes_summed": (2, 0)}),
    Case(shapes=((2, 3), (3, 2)), attrs={"a_axes_summed": (1,), "b_axes_summed": (0,)}),
])
def np_tensordot(a: TensorVar, b: TensorVar, attrs: TensordotAttrs):
    """out[i.., j..] = sum_k a[i.. with k on a_axes_summed] * b[j.. with k on b_axes_summed]."""
    return _tensordot("_npi_tensordot", a, b, attrs.a_axes_summed, attrs.b_axes_summed)


# ------------------------------------------------------------------------------------------------------------
# The interleaved attention products of MXNet's contrib (BERT's self-attention in GluonNLP): the projections are
# laid out per head, (heads, 3, d) for self-attention's queries, keys and values, (heads, 2, d) for
# encoder-decoder keys and values, along the last axis of a time-major (seq, batch, .) tensor; scores are
# (batch * heads, q_seq, kv_seq), row b * heads + h. MXNet's kernel takes the projections' last axis whole (it
# strides over the interleaved layout), so each description also reads the slots it does not multiply
# (``uses``): a shard's input is whole along that axis, and the bytes of those slots are charged. The head of a
# score row is a modulo: split along that axis, a shard reads every head of its batch rows (the bounding box).

@dataclass(frozen=True)
class HeadsAttrs:
    heads: int


def _heads(x: TensorVar, heads: int, per_head: int, op: str) -> int:
    """The head width d of ``x``'s last axis, laid out as (heads, per_head, d)."""
    width = x.shape[-1]
    if x.ndim != 3 or heads < 1 or width % (heads * per_head):
        raise TDLError(f"{op}: the last axis ({width}) is not {heads} heads x {per_head} x d")
    return width // (heads * per_head)


@tdl_op("_contrib_interleaved_matmul_selfatt_qk", inputs=("queries_keys_values",), attrs=HeadsAttrs, cases=[
    Case(shapes=((4, 2, 24),), attrs={"heads": 2}),
    Case(shapes=((3, 4, 18),), attrs={"heads": 3}),
])
def interleaved_selfatt_qk(qkv: TensorVar, attrs: HeadsAttrs):
    """out[b H + h, i, j] = sum_e qkv[i, b, (3 h) d + e] * qkv[j, b, (3 h + 1) d + e] / sqrt(d), H heads of
    width d: each head's queries against its keys, the queries scaled."""
    d, h = _heads(qkv, attrs.heads, 3, "_contrib_interleaved_matmul_selfatt_qk"), attrs.heads
    scale = 1.0 / math.sqrt(d)
    return lambda bh, i, j: Sum(lambda e: uses(qkv[i, bh // h, (bh % h) * 3 * d + e]
                                               * qkv[j, bh // h, (bh % h) * 3 * d + d + e],
                                               qkv[j, bh // h, (bh % h) * 3 * d + 2 * d + e]), extents=(d,)) * scale


@tdl_op("_contrib_interleaved_matmul_selfatt_valatt", inputs=("queries_keys_values", "attention"),
        attrs=HeadsAttrs, cases=[
            Case(shapes=((4, 2, 24), (4, 4, 4)), attrs={"heads": 2}),
            Case(shapes=((3, 4, 18), (12, 3, 3)), attrs={"heads": 3}),
        ])
def interleaved_selfatt_valatt(qkv: TensorVar, attention: TensorVar, attrs: HeadsAttrs):
    """out[i, b, h d + e] = sum_j attention[b H + h, i, j] * qkv[j, b, (3 h + 2) d + e]: each head's attention
    over its values, the heads side by side."""
    d, h = _heads(qkv, attrs.heads, 3, "_contrib_interleaved_matmul_selfatt_valatt"), attrs.heads
    return lambda i, b, he: Sum(lambda j: uses(attention[b * h + he // d, i, j]
                                               * qkv[j, b, (he // d) * 3 * d + 2 * d + he % d],
                                               qkv[j, b, (he // d) * 3 * d + he % d],
                                               qkv[j, b, (he // d) * 3 * d + d + he % d]))


@tdl_op("_contrib_interleaved_matmul_encdec_qk", inputs=("queries", "keys_values"), attrs=HeadsAttrs, cases=[
    Case(shapes=((4, 2, 8), (5, 2, 16)), attrs={"heads": 2}),
    Case(shapes=((3, 3, 9), (2, 3, 18)), attrs={"heads": 3}),
])
def interleaved_encdec_qk(queries: TensorVar, keys_values: TensorVar, attrs: HeadsAttrs):
    """out[b H + h, i, j] = sum_e queries[i, b, h d + e] * keys_values[j, b, (2 h) d + e] / sqrt(d)."""
    d, h = _heads(queries, attrs.heads, 1, "_contrib_interleaved_matmul_encdec_qk"), attrs.heads
    if keys_values.ndim != 3 or keys_values.shape[-1] != 2 * h * d:
        raise TDLError(f"_contrib_interleaved_matmul_encdec_qk: keys_values' last axis is not {h} heads x 2 x {d}")
    scale = 1.0 / math.sqrt(d)
    return lambda bh, i, j: Sum(lambda e: uses(queries[i, bh // h, (bh % h) * d + e]
                                               * keys_values[j, bh // h, (bh % h) * 2 * d + e],
                                               keys_values[j, bh // h, (bh % h) * 2 * d + d + e]), extents=(d,)) \
        * scale


@tdl_op("_contrib_interleaved_matmul_encdec_valatt", inputs=("keys_values", "attention"), attrs=HeadsAttrs,
        cases=[
            Case(shapes=((5, 2, 16), (4, 4, 5)), attrs={"heads": 2}),
            Case(shapes=((2, 3, 18), (9, 3, 2)), attrs={"heads": 3}),
        ])
def interleaved_encdec_valatt(keys_values: TensorVar, attention: TensorVar, attrs: HeadsAttrs):
    """out[i, b, h d + e] = sum_j attention[b H + h, i, j] * keys_values[j, b, (2 h + 1) d + e]."""
    d, h = _heads(keys_values, attrs.heads, 2, "_contrib_interleaved_matmul_encdec_valatt"), attrs.heads
    return lambda i, b, he: Sum(lambda j: uses(attention[b * h + he // d, i, j]
                                               * keys_values[j, b, (he // d) * 2 * d + d + he % d],
                                               keys_values[j, b, (he // d) * 2 * d + he % d]))
