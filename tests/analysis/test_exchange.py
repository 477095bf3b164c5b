"""Nested reductions: strategies that exchange partial statistics, and their execution with MXNet operators.

BatchNorm split on the batch or on the height: the analysis must find the exchange of the batch mean and
variance (not a fetch of the whole input), and BatchNorm's declared expansion, run over the workers' shards
with the statistics all-reduced, must reproduce MXNet's fused BatchNorm (training mode) in the forward pass
and in the gradients of data, gamma and beta.
"""
import mxnet as mx
import numpy as np
import pytest

from tofu import registry
from tofu.analysis.shard import combine
from tofu.analysis.strategies import strategies
from tofu.graph.attrs import Attrs
from tofu.graph.single_op import infer_op_shapes
from tofu.tdl.describe import describe, typed_attrs

SHAPES = [(4, 3, 4, 4), (3,), (3,), (3,), (3,)]


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
    outs = expand(pieces, shapes, typed_attrs(type(desc.attrs), attrs, "BatchNorm"),
                  lambda parts: [mx.sym.add_n(*parts)] * len(parts))
    group = mx.sym.Group([o for worker in outs for o in worker])
    args = {n: mx.nd.array(v) for n, v in {**feed, "gamma": gamma, "beta": beta}.items()}
    grads = {n: mx.nd.zeros(v.shape) for n, v in args.items()}
    exe = group.bind(mx.cpu(), args, args_grad=grads)
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
