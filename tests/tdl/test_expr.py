"""The TDL language (tofu.tdl.expr) and its reference interpreter (tofu.tdl.interpret), without MXNet.

Syntax: index expressions normalize to affine forms, everything non-affine or ill-typed is rejected with a
message naming the expression, accesses check ranks, reductions infer their ranges. Semantics: small
descriptions written here, interpreted, equal plain numpy references (loop-based where the indexing is the
point, as in TVM's topi testing references).
"""
import math
import re

import numpy as np
import pytest
from scipy.special import erf as np_erf

from tofu.errors import TDLError
from tofu.tdl import expr
from tofu.tdl.describe import NoAttrs, OpDescription, OutputDef
from tofu.tdl.expr import (NEG_INF, UNARY, Access, Affine, Const, FloorDiv, IndexValue, Max, Min, Mod, Opaque,
                           Prod, Reduce, Sum, TensorVar, Unary, Var, compute, eq, exp, gt, lambda_vars, maximum,
                           minimum, nary, uses, where)
from tofu.tdl.interpret import evaluate


def interpret(out_shape, fn, **arrays):
    """Evaluates ``fn(**tensors)`` (an output lambda) on ``arrays``, one TensorVar per keyword."""
    tensors = {name: TensorVar(name, np.shape(a)) for name, a in arrays.items()}
    body_fn = fn(**tensors)
    vars_ = lambda_vars(body_fn, len(out_shape), "output")
    desc = OpDescription("test_op", NoAttrs(), tuple(tensors.values()),
                         (OutputDef("output", tuple(out_shape), vars_, expr.call_lambda(body_fn, vars_)),))
    (out,) = evaluate(desc, [np.asarray(a, dtype=np.float64) for a in arrays.values()])
    return out


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# ----------------------------------------------------------------------------------- index expressions

def test_affine_normal_form():
    x, dx = Var("x"), Var("dx")
    e = (x * 2 + dx) - 1
    assert isinstance(e, Affine)
    assert e.linear() == {x: 2, dx: 1}
    assert e.const == -1


@pytest.mark.parametrize("build,coeffs,const", [
    (lambda x, y: -x, {"x": -1}, 0),
    (lambda x, y: 3 - x, {"x": -1}, 3),
    (lambda x, y: 2 * x + y * 3 - x, {"x": 1, "y": 3}, 0),
    (lambda x, y: x - x + 4, {}, 4),
    (lambda x, y: x * (y - y + 2), {"x": 2}, 0),      # a constant index expression is a valid factor
    (lambda x, y: (x + 1) * 0 + y, {"y": 1}, 0),
], ids=["neg", "rsub", "merge", "cancel", "constant-factor", "times-zero"])
def test_affine_coefficients(build, coeffs, const):
    x, y = Var("x"), Var("y")
    e = build(x, y)
    assert {v.name: c for v, c in e.linear().items()} == coeffs
    assert e.const == const


def test_single_var_only_for_a_bare_variable():
    x = Var("x")
    assert (x + 0).single_var() == x
    assert (x + 1).single_var() is None
    assert (2 * x).single_var() is None


def test_floordiv_and_mod_are_atoms():
    j = Var("j")
    q, r = (j + 1) // 2, j % 3
    assert isinstance(q, FloorDiv) and q.k == 2 and q.arg.linear() == {j: 1} and q.arg.const == 1
    assert isinstance(r, Mod) and r.k == 3
    e = q * 4 + r - 1
    assert isinstance(e, Affine) and e.linear() is None          # not truly affine: atoms that are not Vars
    assert dict(e.terms) == {q: 4, r: 1} and e.const == -1
    assert expr.index_vars(e) == {j}
    assert ((j // 2) - (j // 2)).terms == ()                       # equal atoms merge and cancel


def test_trivial_division_and_modulo():
    j = Var("j")
    assert j // 1 is j
    assert (j % 1).constant_value() == 0


@pytest.mark.parametrize("build,fragment", [
    (lambda i, j: i * j, "index (i) * (j) is a product of index variables and not affine"),
    (lambda i, j: (i + 1) * (j - 2), "is a product of index variables"),
    (lambda i, j: i * 2.5, "index i multiplied by 2.5"),
    (lambda i, j: i * True, "index arithmetic takes integers only"),
    (lambda i, j: i // j, "the divisor must be a positive integer constant"),
    (lambda i, j: i // 0, "index (i) // 0 is not affine"),
    (lambda i, j: i % -2, "index (i) % -2 is not affine"),
    (lambda i, j: i // 1.5, "the divisor must be a positive integer constant"),
    (lambda i, j: i / 2, "index i / 2: use // for index division"),
    (lambda i, j: i + 1.5, "1.5 is not an index expression"),
    (lambda i, j: i[0], "index variable i cannot be indexed"),
], ids=["product", "product-of-sums", "float-factor", "bool-factor", "var-divisor", "zero-divisor",
        "negative-modulus", "float-divisor", "true-division", "float-offset", "subscripted"])
def test_non_affine_index_arithmetic_is_rejected(build, fragment):
    with pytest.raises(TDLError, match=re.escape(fragment)):
        build(Var("i"), Var("j"))


def test_value_in_index_arithmetic_is_rejected_naming_it():
    data = TensorVar("data", (2, 3))
    x = Var("x")
    with pytest.raises(TDLError, match=r"a value \(data\[0, 1\]\) is used in index arithmetic '\+'"):
        x + data[0, 1]
    with pytest.raises(TDLError, match="index arithmetic takes integers only"):
        x * data[0, 1]


def test_index_errors_print_the_offending_operand_as_tdl():
    data, x, y = TensorVar("data", (2, 3)), Var("x"), Var("y")
    with pytest.raises(TDLError, match=re.escape("index x multiplied by data[0, 1]")):
        x * data[0, 1]
    with pytest.raises(TDLError, match=re.escape("index (x) // y is not affine")):
        x // y


def test_index_in_value_arithmetic_is_rejected_naming_it():
    data = TensorVar("data", (2, 3))
    x = Var("x")
    with pytest.raises(TDLError, match=r"index expression x \+ 1 used as a value; wrap it in IndexValue"):
        data[0, 1] * (x + 1)
    with pytest.raises(TDLError, match="index expression x used as a value"):
        exp(x)


# --------------------------------------------------------------------------------------------- values

def test_python_numbers_become_constants_and_bools_do_not():
    data = TensorVar("data", (3,))
    e = 2 * data[0] + 1
    assert isinstance(e.lhs.lhs, Const) and e.lhs.lhs.value == 2.0 and e.rhs.value == 1.0
    with pytest.raises(TDLError, match="False is not a TDL value"):
        where(data[0] == 0.0, 1.0, 0.0)           # Python's == compares trees; use eq()


def test_unknown_function_is_rejected():
    with pytest.raises(TDLError, match="unknown function 'foo'; TDL knows neg, exp"):
        Unary("foo", Const(1.0))


def test_every_unary_function_is_exported():
    for name in UNARY:
        if name != "neg":
            assert callable(getattr(expr, name, None) or getattr(expr, name + "_")), name


UNARY_REFS = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda a: 1 / np.sqrt(a), "tanh": np.tanh,
    "sigmoid": lambda a: 1 / (1 + np.exp(-a)), "relu": lambda a: np.maximum(a, 0),
    "softrelu": lambda a: np.log1p(np.exp(a)), "abs": np.abs, "square": np.square, "log1p": np.log1p,
    "expm1": np.expm1, "sin": np.sin, "cos": np.cos, "sign": np.sign, "erf": np_erf,
    "reciprocal": lambda a: 1 / a,
}


@pytest.mark.parametrize("name", sorted(UNARY_REFS))
def test_math_functions_match_numpy(name, rng):
    fn = getattr(expr, name, None) or getattr(expr, name + "_")
    a = rng.uniform(0.2, 2.0, size=(3, 4)) * np.array([1, -1, 1, -1])     # negatives where defined
    if name in ("log", "sqrt", "rsqrt", "log1p"):
        a = np.abs(a)
    got = interpret(a.shape, lambda a: lambda i, j: fn(a[i, j]), a=a)
    np.testing.assert_allclose(got, UNARY_REFS[name](a), rtol=1e-12)


def test_arithmetic_comparisons_and_where_match_numpy(rng):
    a, b = rng.standard_normal((3, 4)), rng.uniform(0.5, 2.0, (3, 4))
    got = interpret(a.shape, lambda a, b: lambda i, j: where(
        gt(a[i, j], 0.0), a[i, j] ** 2 / b[i, j], -a[i, j] - 1.0)
        + maximum(a[i, j], b[i, j]) * minimum(a[i, j], 0.5) + eq(a[i, j], a[i, j]), a=a, b=b)
    ref = np.where(a > 0, a ** 2 / b, -a - 1) + np.maximum(a, b) * np.minimum(a, 0.5) + 1.0
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_index_value_uses_an_index_as_a_value():
    got = interpret((3, 4), lambda: lambda i, j: IndexValue(i * 10 + j // 2))
    np.testing.assert_array_equal(got, np.arange(3)[:, None] * 10 + np.arange(4)[None, :] // 2)


def test_uses_keeps_the_value_and_declares_reads(rng):
    a, label = rng.standard_normal((2, 3)), rng.standard_normal((2,))
    got = interpret(a.shape, lambda a, label: lambda i, j: uses(2.0 * a[i, j], label[i]), a=a, label=label)
    np.testing.assert_allclose(got, 2 * a)
    u = uses(Const(1.0), TensorVar("label", (2,))[Var("i")])
    assert [r.tensor.name for r in u.reads] == ["label"]
    with pytest.raises(TDLError, match="is not a tensor access"):
        uses(Const(1.0), Const(2.0))


# ------------------------------------------------------------------------------------------- accesses

def test_wrong_rank_access_names_tensor_and_ranks():
    data = TensorVar("data", (2, 3))
    with pytest.raises(TDLError, match=r"access data\[x\] has rank 1 but 'data' has rank 2 \(shape \(2, 3\)\)"):
        data[Var("x")]
    with pytest.raises(TDLError, match="has rank 3 but 'data' has rank 2"):
        data[0, 1, 2]


def test_tuple_subscripts_and_slices():
    data = TensorVar("data", (2, 3, 4))
    n, xs = Var("n"), (Var("x0"), Var("x1"))
    assert data[(n, *xs)].index == (n, *xs)
    assert data.at((n, *xs), fill=0.0).fill == 0.0
    assert data[n, :, xs[1]].sliced
    with pytest.raises(TDLError, match="only the full slice ':' is allowed"):
        data[n, 0:2, xs[1]]


def test_fill_pads_out_of_range_reads(rng):
    x = rng.standard_normal(4)
    got = interpret((7,), lambda x: lambda i: x.at(i - 2, fill=-5.0), x=x)
    np.testing.assert_array_equal(got, np.concatenate([[-5.0, -5.0], x, [-5.0]]))


def test_out_of_range_read_without_fill_is_an_error():
    with pytest.raises(TDLError, match=r"test_op: access x\[i \+ 1\] reads outside 'x' \(extent 4\) and has no "
                                       r"fill value"):
        interpret((4,), lambda x: lambda i: x[i + 1], x=np.zeros(4))


def test_data_dependent_index_is_a_lookup(rng):
    table, idx = rng.standard_normal((5, 3)), np.array([4.0, 0.0, 2.0, 2.0])
    got = interpret((4, 3), lambda table, idx: lambda i, e: table[idx[i], e], table=table, idx=idx)
    np.testing.assert_array_equal(got, table[idx.astype(int)])


def test_sliced_access_outside_an_opaque_function_is_an_error():
    with pytest.raises(TDLError, match="may only be an argument of an opaque function"):
        interpret((2,), lambda x: lambda i: x[i, :], x=np.zeros((2, 3)))


def test_interpreter_checks_input_shapes():
    t = TensorVar("x", (2, 3))
    i = Var("i")
    desc = OpDescription("test_op", NoAttrs(), (t,), (OutputDef("output", (2,), (i,), t[i, 0]),))
    with pytest.raises(TDLError, match=r"input 'x' has shape \(3, 2\), the description expects \(2, 3\)"):
        evaluate(desc, [np.zeros((3, 2))])


# --------------------------------------------------------------------------------------------- lambdas

def test_star_lambda_takes_the_rank():
    names = [v.name for v in lambda_vars(lambda b, *i: None, 4, "output")]
    assert names == ["b", "i0", "i1", "i2"]
    assert [v.name for v in lambda_vars(lambda *i: None, 0, "output")] == []


def test_star_lambda_without_rank_and_arity_mismatch_are_errors():
    with pytest.raises(TDLError, match=r"Sum: a '\*k' lambda needs a known rank"):
        Sum(lambda *k: Const(1.0))
    with pytest.raises(TDLError, match=r"output: the lambda takes 2 index variables \(i, j\) but the tensor has "
                                       r"rank 3"):
        lambda_vars(lambda i, j: None, 3, "output")


def test_nested_lambdas_get_distinct_variables():
    a = TensorVar("a", (2, 3))
    r = Sum(lambda k: Sum(lambda k: a[k, k], extents=(2,)), extents=(3,))
    assert r.vars[0] != r.body.vars[0] and r.vars[0].name == r.body.vars[0].name == "k"


def test_nary_names_variables_from_a_list():
    x = TensorVar("x", (2, 3, 4))
    r = Sum(nary(["k1", "k2"], lambda ks: x[0, ks[0], ks[1]]))
    assert [v.name for v in r.vars] == ["k1", "k2"] and r.extents == (3, 4)


# ----------------------------------------------------------------------------------------- reductions

def test_reduction_extents_come_from_directly_indexed_dimensions():
    a, b = TensorVar("a", (3, 5)), TensorVar("b", (5, 2))
    i, j = Var("i"), Var("j")
    r = Sum(lambda k: a[i, k] * b[k, j])
    assert isinstance(r, Reduce) and r.kind == "sum" and r.extents == (5,)
    assert Max(lambda p, q: a[p, q]).extents == (3, 5)
    assert Sum(lambda k: a[i, k + 0]).extents == (5,)              # k + 0 is still k alone


@pytest.mark.parametrize("body", [
    lambda a, k: a[0, 2 * k],
    lambda a, k: a[0, k + 1],
    lambda a, k: IndexValue(k),
], ids=["scaled", "offset", "not-an-index"])
def test_reduction_variable_that_never_indexes_alone_needs_extents(body):
    a = TensorVar("a", (3, 8))
    with pytest.raises(TDLError, match="Sum over k: the variable never indexes a tensor dimension on its own, "
                                       r"so its range is unknown \(pass extents=\.\.\.\)"):
        Sum(lambda k: body(a, k))
    assert Sum(lambda k: body(a, k), extents=(3,)).extents == (3,)


def test_reduction_needs_a_variable():
    with pytest.raises(TDLError, match="needs at least one reduction variable"):
        Sum(lambda: Const(1.0))


@pytest.mark.parametrize("reducer,ref", [(Sum, np.sum), (Max, np.max), (Min, np.min), (Prod, np.prod)])
def test_reducers_match_numpy(reducer, ref, rng):
    a = rng.uniform(0.5, 1.5, (3, 4, 5))
    got = interpret((3,), lambda a: lambda i: reducer(lambda j, k: a[i, j, k]), a=a)
    np.testing.assert_allclose(got, ref(a, axis=(1, 2)), rtol=1e-12)


def test_matmul_via_sum_equals_np_dot(rng):
    a, b = rng.standard_normal((4, 6)), rng.standard_normal((6, 3))
    got = interpret((4, 3), lambda a, b: lambda i, j: Sum(lambda k: a[i, k] * b[k, j]), a=a, b=b)
    np.testing.assert_allclose(got, np.dot(a, b), rtol=1e-12)


def conv1d_ncw(x, w, stride, pad):
    """out[b, co, p] = sum_{ci, dx} x_padded[b, ci, p*stride + dx] * w[co, ci, dx], one element at a time."""
    batch, cin, width = x.shape
    cout, _, kernel = w.shape
    xp = np.zeros((batch, cin, width + 2 * pad))
    xp[:, :, pad:pad + width] = x
    out_w = (width + 2 * pad - kernel) // stride + 1
    out = np.zeros((batch, cout, out_w))
    for b in range(batch):
        for co in range(cout):
            for p in range(out_w):
                out[b, co, p] = sum(xp[b, ci, p * stride + dx] * w[co, ci, dx]
                                    for ci in range(cin) for dx in range(kernel))
    return out


@pytest.mark.parametrize("stride,pad", [(1, 0), (2, 1), (3, 2)])
def test_conv1d_with_stride_and_padding_equals_loops(stride, pad, rng):
    x, w = rng.standard_normal((2, 3, 9)), rng.standard_normal((4, 3, 3))
    ref = conv1d_ncw(x, w, stride, pad)
    got = interpret(ref.shape, lambda data, weight: lambda b, co, p: Sum(
        lambda ci, dx: data.at((b, ci, p * stride + dx - pad), fill=0.0) * weight[co, ci, dx]),
        data=x, weight=w)
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_softmax_via_compute_equals_numpy(rng):
    x = rng.standard_normal((3, 5)) * 4

    def softmax(x):
        m = compute("rowmax", (3,), lambda r: Max(lambda k: x[r, k]))
        s = compute("rowsum", (3,), lambda r: Sum(lambda k: exp(x[r, k] - m[r])))
        return lambda r, k: exp(x[r, k] - m[r]) / s[r]

    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(interpret(x.shape, softmax, x=x), e / e.sum(axis=1, keepdims=True), rtol=1e-12)


def test_compute_checks_its_lambda_against_its_shape():
    with pytest.raises(TDLError, match=r"compute\('m'\): the lambda takes 1 index variables"):
        compute("m", (2, 3), lambda r: Const(0.0))


def test_max_pooling_pads_with_neg_inf(rng):
    x = rng.standard_normal((1, 7))
    got = interpret((1, 4), lambda x: lambda c, p: Max(
        lambda d: x.at((c, 2 * p + d - 1), fill=NEG_INF), extents=(3,)), x=x)
    xp = np.concatenate([[-np.inf], x[0], [-np.inf]])
    np.testing.assert_allclose(got[0], [xp[2 * p:2 * p + 3].max() for p in range(4)])


# ------------------------------------------------------------------------------------------------ opaque

def test_opaque_applies_numpy_per_row(rng):
    x = rng.standard_normal((3, 5))
    cumsum = Opaque("cumsum", lambda a: np.cumsum(a, axis=-1))
    got = interpret(x.shape, lambda x: lambda b, j: cumsum(x[b, :])[j], x=x)
    np.testing.assert_allclose(got, np.cumsum(x, axis=1), rtol=1e-12)


def test_opaque_with_two_arguments_and_two_result_indices(rng):
    x, y = rng.standard_normal((2, 3)), rng.standard_normal((2, 4))
    outer = Opaque("outer", lambda a, b: a[..., :, None] * b[..., None, :])
    got = interpret((2, 3, 4), lambda x, y: lambda i, p, q: outer(x[i, :], y[i, :])[p, q], x=x, y=y)
    np.testing.assert_allclose(got, np.einsum("ip,iq->ipq", x, y), rtol=1e-12)


def test_opaque_over_a_whole_matrix(rng):
    a = rng.standard_normal((2, 3, 3))
    spd = a @ a.transpose(0, 2, 1) + 3 * np.eye(3)
    chol = Opaque("cholesky", np.linalg.cholesky)
    got = interpret(spd.shape, lambda a: lambda b, i, j: chol(a[b, :, :])[i, j], a=spd)
    np.testing.assert_allclose(got, np.linalg.cholesky(spd), rtol=1e-12)


def test_opaque_takes_accesses_only_and_checks_result_rank():
    x = TensorVar("x", (2, 3))
    with pytest.raises(TDLError, match="opaque function 'f' takes tensor accesses, got i"):
        Opaque("f", np.sort)(Var("i"))
    bad = Opaque("flat", lambda a: a.sum(axis=-1))
    with pytest.raises(TDLError, match="opaque 'flat' returned rank 0, indexed with 1 indices"):
        interpret((2, 3), lambda x: lambda b, j: bad(x[b, :])[j], x=np.zeros((2, 3)))
    assert isinstance(Opaque("f", np.sort)(x[0, :]).args[0], Access)


def test_math_constant_neg_inf():
    assert NEG_INF == -math.inf
