"""Nested reductions: strategies that exchange partial statistics, and their execution with MXNet operators.

BatchNorm split on the batch or on the height: the analysis must find the exchange of the batch mean and
variance (not a fetch of the whole input), and BatchNorm's declared expansion, run over the workers' shards
with the statistics all-reduced, must reproduce MXNet's fused BatchNorm (training mode) in the forward pass
and in the gradients of data, gamma and beta.

Likewise softmax, log_softmax, SoftmaxActivation (row max all-reduced with max, row sum with sum) and LayerNorm
(row mean and variance) split along their softmax / normalized axis: the analysis exchanges the statistics, and
the op's expansion reproduces the fused MXNet op forward and in the gradients of every input.
"""
import mxnet as mx
import numpy as np
import pytest

from tofu import registry
from tofu.analysis.shard import combine
from tofu.analysis.strategies import Replicate, strategies
from tofu.graph.attrs import Attrs
from tofu.graph.single_op import infer_op_shapes
from tofu.tdl.describe import describe, typed_attrs

SHAPES = [(4, 3, 4, 4), (3,), (3,), (3,), (3,)]


def _allreduce(parts, reducer="sum"):
    """The all-reduce given to an expansion: one combined symbol, placed on every worker."""
    if reducer == "sum":
        combined = mx.sym.add_n(*parts)
    else:
        assert reducer == "max", reducer
        combined = mx.sym.max(mx.sym.stack(*parts, axis=0), axis=0)
    return [combined] * len(parts)


def _strategy(attrs, var, k):
    out = infer_op_shapes("BatchNorm", attrs, SHAPES)
    desc = describe("BatchNorm", attrs, SHAPES, out)
    return desc, next(s for s in strategies(desc, k) if s.var == var)


@pytest.mark.parametrize("var", ["i0", "i2"])
def test_batch_norm_split_exchanges_statistics_instead_of_fetching(var):
    _, s = _strategy(Attrs.of(fix_gamma=False, output_mean_var=True), var, 2)
    assert [(x.tensor, x.reducer) for x in s.exchanges] == [("mean", "sum"), ("var", "sum")]
    assert s.exchange_elements == (3, 3)          # one value per channel each way
    dim = int(var[1:])
    for w in range(2):
        data = s.input_regions[w][0]
        assert data.shape[dim] == SHAPES[0][dim] // 2     # each worker reads only its half


def _full_reference(attrs, x, gamma, beta, head):
    """MXNet's fused BatchNorm forward and gradients."""
    sym = mx.sym.BatchNorm(mx.sym.var("data"), mx.sym.var("gamma"), mx.sym.var("beta"),
                           mx.sym.var("mm"), mx.sym.var("mv"), **attrs.to_mxnet())
    args = {"data": mx.nd.array(x), "gamma": mx.nd.array(gamma), "beta": mx.nd.array(beta)}
    grads = {k: mx.nd.zeros(v.shape) for k, v in args.items()}
    exe = sym.bind(mx.cpu(), args, args_grad=grads, aux_states={"mm": mx.nd.zeros(3), "mv": mx.nd.ones(3)})
    outs = exe.forward(is_train=True)
    exe.backward([mx.nd.array(head[0])] + [mx.nd.zeros(o.shape) for o in outs[1:]])
    return [o.asnumpy() for o in outs], {k: g.asnumpy() for k, g in grads.items()}


@pytest.mark.parametrize("fix_gamma", [False, True])
@pytest.mark.parametrize("var", ["i0", "i2"])
@pytest.mark.parametrize("k", [2, 4])
def test_batch_norm_expansion_matches_fused_kernel(var, k, fix_gamma):
    attrs = Attrs.of(fix_gamma=fix_gamma, eps=1e-3, output_mean_var=True)
    desc, s = _strategy(attrs, var, k)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(SHAPES[0]).astype(np.float32)
    gamma, beta = rng.uniform(0.5, 2, 3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    head = [rng.standard_normal(SHAPES[0]).astype(np.float32)]
    expected, expected_grads = _full_reference(attrs, x, gamma, beta, head)

    pieces, shapes, feed = [], [], {}
    g_sym, b_sym = mx.sym.var("gamma"), mx.sym.var("beta")     # one variable each, read by every worker
    for w in range(k):
        region = s.input_regions[w][0]
        feed[f"x{w}"] = x[region.slices()]
        pieces.append([mx.sym.var(f"x{w}"), g_sym, b_sym])
        shapes.append([region.shape, (3,), (3,)])
    expand = registry.expansion("BatchNorm")
    outs = expand(pieces, shapes, typed_attrs(type(desc.attrs), attrs, "BatchNorm"), _allreduce)
    group = mx.sym.Group([o for worker in outs for o in worker])
    args = {n: mx.nd.array(v) for n, v in {**feed, "gamma": gamma, "beta": beta}.items()}
    grads = {n: mx.nd.zeros(v.shape) for n, v in args.items()}
    # the expansion's affine kernels read statistics of their own, which must be zero
    _, _, aux_shapes = group.infer_shape(**{n: v.shape for n, v in args.items() if n in group.list_arguments()})
    aux = {n: mx.nd.zeros(shape) for n, shape in zip(group.list_auxiliary_states(), aux_shapes)}
    exe = group.bind(mx.cpu(), args, args_grad=grads, aux_states=aux)
    got = [o.asnumpy() for o in exe.forward(is_train=True)]
    per_worker = [got[3 * w:3 * w + 3] for w in range(k)]

    np.testing.assert_allclose(combine(s, 0, [p[0] for p in per_worker]), expected[0], rtol=1e-4, atol=1e-5)
    for p in per_worker:          # the statistics are replicated on every worker
        np.testing.assert_allclose(p[1], expected[1], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(p[2], expected[2], rtol=1e-4, atol=1e-5)

    heads = []
    for w in range(k):
        heads += [mx.nd.array(head[0][s.output_regions[w][0].slices()]), mx.nd.zeros(3), mx.nd.zeros(3)]
    exe.backward(heads)
    dx = np.empty_like(x)
    for w in range(k):
        dx[s.input_regions[w][0].slices()] = grads[f"x{w}"].asnumpy()
    np.testing.assert_allclose(dx, expected_grads["data"], rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(grads["beta"].asnumpy(), expected_grads["beta"], rtol=1e-4, atol=1e-5)
    if not fix_gamma:
        np.testing.assert_allclose(grads["gamma"].asnumpy(), expected_grads["gamma"], rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ softmax family and LayerNorm: row statistics

SOFTMAX_STATS = [("rowmax", "max"), ("rowsum", "sum")]
NORM_STATS = [("mean", "sum"), ("var", "sum")]

# (op, attrs, input shapes, split dimension of data, exchanges): every split dimension is the softmax or
# normalized axis, of extent 8 (a multiple of k = 2 and 4)
ROW_CASES = [
    ("softmax", {"axis": -1}, [(4, 8)], 1, SOFTMAX_STATS),
    ("softmax", {"axis": 1, "temperature": 2.0}, [(2, 8, 3)], 1, SOFTMAX_STATS),
    ("log_softmax", {"axis": -1, "temperature": 0.5}, [(4, 8)], 1, SOFTMAX_STATS),
    ("log_softmax", {"axis": 1}, [(2, 8, 3)], 1, SOFTMAX_STATS),
    ("SoftmaxActivation", {}, [(2, 3, 8)], 2, SOFTMAX_STATS),
    ("SoftmaxActivation", {}, [(2, 3, 2, 8)], 3, SOFTMAX_STATS),   # MXNet's backward reduces over axis 1
    ("SoftmaxActivation", {"mode": "channel"}, [(2, 8, 3)], 1, SOFTMAX_STATS),
    ("LayerNorm", {"axis": -1}, [(2, 3, 8), (8,), (8,)], 2, NORM_STATS),
    ("LayerNorm", {"axis": 1, "eps": 1e-3, "output_mean_var": True}, [(2, 8, 3), (8,), (8,)], 1, NORM_STATS),
]
INPUT_NAMES = ("data", "gamma", "beta")


def _row_strategy(op, attrs, shapes, dim, k):
    out = infer_op_shapes(op, attrs, shapes)
    desc = describe(op, attrs, shapes, out)
    found = [s for s in strategies(desc, k) if s.exchanges]
    assert len(found) == 1, [str(s) for s in strategies(desc, k)]
    assert found[0].var == f"i{dim}"
    return desc, out, found[0]


def _row_inputs(shapes, rng):
    xs = [rng.standard_normal(shapes[0]).astype(np.float32)]
    if len(shapes) > 1:            # LayerNorm's gamma and beta
        xs += [rng.uniform(0.5, 2, shapes[1]).astype(np.float32), rng.standard_normal(shapes[2]).astype(np.float32)]
    return xs


def _fused(op, attrs, xs, head):
    """MXNet's fused op on the whole input: forward (training mode) and the gradients of every input."""
    names = INPUT_NAMES[:len(xs)]
    sym = getattr(mx.sym, op)(*[mx.sym.var(n) for n in names], **attrs.to_mxnet())
    args = {n: mx.nd.array(x) for n, x in zip(names, xs)}
    grads = {n: mx.nd.zeros(x.shape) for n, x in zip(names, xs)}
    exe = sym.bind(mx.cpu(), args, args_grad=grads)
    outs = exe.forward(is_train=True)
    exe.backward([mx.nd.array(head)] + [mx.nd.zeros(o.shape) for o in outs[1:]])
    return [o.asnumpy() for o in outs], [grads[n].asnumpy() for n in names]


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("op, attrs, shapes, dim, stats", ROW_CASES,
                         ids=[f"{c[0]}-{'-'.join(f'{a}={v}' for a, v in c[1].items()) or 'default'}-{len(c[2][0])}d"
                              for c in ROW_CASES])
def test_row_statistics_expansion_matches_fused_kernel(op, attrs, shapes, dim, stats, k):
    attrs = Attrs.of(**attrs)
    desc, out_shapes, s = _row_strategy(op, attrs, shapes, dim, k)
    assert [(x.tensor, x.reducer) for x in s.exchanges] == stats
    for w in range(k):          # each worker reads only its share of the data
        assert s.input_regions[w][0].shape[dim] == shapes[0][dim] // k
    _check_expansion(op, attrs, shapes, desc, out_shapes, s, k)


def _check_expansion(op, attrs, shapes, desc, out_shapes, s, k):
    """The op's expansion over the workers' pieces under ``s`` equals MXNet's fused kernel, forward (the split
    output reassembled, the others whole on every worker) and in the gradient of every input."""
    rng = np.random.default_rng(1)
    xs = _row_inputs(shapes, rng)
    head = rng.standard_normal(shapes[0]).astype(np.float32)
    expected, expected_grads = _fused(op, attrs, xs, head)

    pieces, piece_shapes, feed, where = [], [], {}, {}   # where: variable name -> (input, region or None)
    shared = [all(s.input_regions[w][i].shape == shapes[i] for w in range(k)) for i in range(len(shapes))]
    whole = {i: mx.sym.var(INPUT_NAMES[i]) for i in range(len(shapes)) if shared[i]}  # one variable, every worker
    for i in whole:
        feed[INPUT_NAMES[i]], where[INPUT_NAMES[i]] = xs[i], (i, None)
    for w in range(k):
        ws, wshapes = [], []
        for i, region in enumerate(s.input_regions[w]):
            if shared[i]:
                ws.append(whole[i])
            else:
                name = f"{INPUT_NAMES[i]}{w}"
                feed[name], where[name] = xs[i][region.slices()], (i, region)
                ws.append(mx.sym.var(name))
            wshapes.append(region.shape)
        pieces.append(ws)
        piece_shapes.append(wshapes)
    outs = registry.expansion(op)(pieces, piece_shapes, typed_attrs(type(desc.attrs), attrs, op), _allreduce)
    n_out = len(out_shapes)
    group = mx.sym.Group([o for worker in outs for o in worker[:n_out]])
    args = {n: mx.nd.array(v) for n, v in feed.items()}
    grads = {n: mx.nd.zeros(v.shape) for n, v in args.items()}
    exe = group.bind(mx.cpu(), args, args_grad=grads)
    got = [o.asnumpy() for o in exe.forward(is_train=True)]
    per_worker = [got[n_out * w:n_out * (w + 1)] for w in range(k)]

    assert len(expected) == n_out
    np.testing.assert_allclose(combine(s, 0, [p[0] for p in per_worker]), expected[0], rtol=1e-4, atol=1e-5)
    for o in range(1, n_out):
        # LayerNorm's mean and std do not depend on the split axis (kept at extent 1): every worker holds them
        # whole (Replicate, tested below).
        for p in per_worker:
            np.testing.assert_allclose(p[o], expected[o], rtol=1e-4, atol=1e-5)

    heads = []
    for w in range(k):
        heads.append(mx.nd.array(head[s.output_regions[w][0].slices()]))
        heads += [mx.nd.zeros(o.shape) for o in per_worker[w][1:]]
    exe.backward(heads)
    for i, x in enumerate(xs):
        g = np.zeros_like(x)      # a tensor's gradient: the sum over the variables that read it
        for name, (j, region) in where.items():
            if j == i:
                g[... if region is None else region.slices()] += grads[name].asnumpy()
        np.testing.assert_allclose(g, expected_grads[i], rtol=1e-3, atol=1e-5, err_msg=INPUT_NAMES[i])


def test_layer_norm_statistics_are_replicated_when_split_along_the_normalized_axis():
    """The mean and std keep the normalized axis with extent 1, named like the output's split variable: they
    are replicated, not split (each worker holds them whole after the exchange)."""
    _, out_shapes, s = _row_strategy("LayerNorm", Attrs.of(axis=1, output_mean_var=True),
                                     [(2, 8, 3), (8,), (8,)], 1, 2)
    assert all(isinstance(p, Replicate) for p in s.outputs[1:])


# ------------------------------------------------- GroupNorm, InstanceNorm, L2Normalization: statistics exchanged

GROUP_CASES = [   # every split of these that exchanges statistics (the spatial dims; L2Normalization's summed ones)
    ("GroupNorm", {"num_groups": 2}, [(2, 4, 4, 4), (2,), (2,)]),
    ("GroupNorm", {"num_groups": 4, "eps": 0.5, "output_mean_var": True}, [(2, 4, 4, 2), (4,), (4,)]),
    ("InstanceNorm", {"eps": 1e-3}, [(2, 3, 4, 4), (3,), (3,)]),
    ("InstanceNorm", {}, [(2, 2, 8), (2,), (2,)]),
    ("L2Normalization", {}, [(2, 4, 4)]),
    ("L2Normalization", {"mode": "channel", "eps": 0.5}, [(2, 4, 2, 4)]),
    ("L2Normalization", {"mode": "spatial"}, [(2, 3, 4, 4)]),
]


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("op, attrs, shapes", GROUP_CASES,
                         ids=[f"{c[0]}-{'-'.join(f'{a}={v}' for a, v in c[1].items()) or 'default'}-{len(c[2][0])}d"
                              for c in GROUP_CASES])
def test_grouped_statistics_expansion_matches_fused_kernel(op, attrs, shapes, k):
    attrs = Attrs.of(**attrs)
    out_shapes = infer_op_shapes(op, attrs, shapes)
    desc = describe(op, attrs, shapes, out_shapes)
    found = [s for s in strategies(desc, k) if s.exchanges]
    assert found, f"{op}: no split exchanges statistics"
    for s in found:
        assert registry.expansion(op) is not None
        _check_expansion(op, attrs, shapes, desc, out_shapes, s, k)
