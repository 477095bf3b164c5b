"""SoftmaxOutput split along its class axis (Megatron-LM's vocabulary-parallel cross-entropy): the analysis
exchanges the row max and the row sum of exponentials, and the op's expansion, run over the workers' shards
with the statistics all-reduced, equals MXNet's SoftmaxOutput forward and in the gradient of its data (its
backward local to each shard and independent of the gradient arriving at the output); the attributes it cannot
run leave the strategy unrunnable."""
import mxnet as mx
import numpy as np
import pytest

from tests.analysis.test_exchange import _allreduce
from tofu import registry
from tofu.analysis.shard import combine
from tofu.analysis.strategies import strategies
from tofu.analysis.views import runnable
from tofu.errors import TDLError
from tofu.graph.attrs import Attrs
from tofu.graph.gradients import statistics_gradients
from tofu.graph.single_op import infer_op_shapes
from tofu.tdl.describe import describe, typed_attrs


def _class_split(attrs, shapes, k):
    desc = describe("SoftmaxOutput", attrs, shapes, infer_op_shapes("SoftmaxOutput", attrs, shapes))
    found = [s for s in strategies(desc, k) if s.exchanges]
    assert len(found) == 1, [str(s) for s in strategies(desc, k)]
    return desc, found[0]


def _mxnet(attrs, x, label):
    """MXNet's SoftmaxOutput: its output, and the gradient of data under a random head gradient (ignored)."""
    sym = mx.sym.SoftmaxOutput(mx.sym.var("data"), mx.sym.var("label"), **attrs.to_mxnet())
    grad = mx.nd.zeros(x.shape)
    exe = sym.bind(mx.cpu(), {"data": mx.nd.array(x), "label": mx.nd.array(label)}, args_grad={"data": grad},
                   grad_req={"data": "write", "label": "null"})
    out = exe.forward(is_train=True)[0].asnumpy()
    exe.backward([mx.nd.array(np.random.default_rng(3).standard_normal(x.shape))])
    return out, grad.asnumpy()


CASES = [
    ({}, [(4, 8), (4,)]),
    ({"grad_scale": 0.25}, [(6, 8), (6,)]),
    ({"multi_output": True}, [(3, 8), (3,)]),
    ({"preserve_shape": True, "grad_scale": 2.0}, [(2, 3, 8), (2, 3)]),
]


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("attrs, shapes", CASES, ids=[f"{a or 'default'}-{len(s[0])}d" for a, s in CASES])
def test_vocabulary_split_matches_mxnet(attrs, shapes, k):
    attrs = Attrs.of(**attrs)
    desc, s = _class_split(attrs, shapes, k)
    assert [(x.tensor, x.reducer) for x in s.exchanges] == [("rowmax", "max"), ("rowsum", "sum")]
    assert runnable("SoftmaxOutput", attrs, desc, s)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shapes[0]).astype(np.float32) * 3
    label = rng.integers(0, shapes[0][-1], shapes[1]).astype(np.float32)
    expected, expected_grad = _mxnet(attrs, x, label)

    pieces, piece_shapes, origins, feed = [], [], [], {"label": label}
    for w in range(k):
        data, lab = s.input_regions[w]
        assert lab.shape == shapes[1] and data.shape[-1] == shapes[0][-1] // k    # the label whole, data a shard
        feed[f"x{w}"] = x[data.slices()]
        pieces.append([mx.sym.var(f"x{w}"), mx.sym.var("label")])
        piece_shapes.append([data.shape, lab.shape])
        origins.append([tuple(a for a, _ in data.bounds), tuple(a for a, _ in lab.bounds)])
    outs = registry.expansion("SoftmaxOutput")(pieces, piece_shapes, typed_attrs(type(desc.attrs), attrs,
                                                                                  "SoftmaxOutput"),
                                                _allreduce, origins)
    group = mx.sym.Group([o[0] for o in outs])
    args = {n: mx.nd.array(v) for n, v in feed.items()}
    grads = {f"x{w}": mx.nd.zeros(feed[f"x{w}"].shape) for w in range(k)}
    exe = group.bind(mx.cpu(), args, args_grad=grads, grad_req={**dict.fromkeys(grads, "write"), "label": "null"})
    got = [o.asnumpy() for o in exe.forward(is_train=True)]
    np.testing.assert_allclose(combine(s, 0, got), expected, rtol=1e-5, atol=1e-6)

    head = rng.standard_normal(shapes[0]).astype(np.float32)     # a loss: the gradient arriving is ignored
    exe.backward([mx.nd.array(head[s.output_regions[w][0].slices()]) for w in range(k)])
    dx = np.empty_like(x)
    for w in range(k):
        dx[s.input_regions[w][0].slices()] = grads[f"x{w}"].asnumpy()
    np.testing.assert_allclose(dx, expected_grad, rtol=1e-5, atol=1e-6)


# (normalization 'batch' or 'valid' has no split at all, nor multi_output's spatial axes, whose extent MXNet's
# backward divides by: tests/operators/test_normalized_losses.py; with extent 1 its class axis splits)
@pytest.mark.parametrize("attrs, shapes", [
    ({"use_ignore": True, "ignore_label": 0}, [(4, 8), (4,)]),
    ({"smooth_alpha": 0.1}, [(4, 8), (4,)]),
    ({"multi_output": True}, [(2, 8, 1), (2, 1)]),
], ids=str)
def test_what_the_expansion_cannot_run_stays_unrunnable(attrs, shapes):
    attrs = Attrs.of(**attrs)
    desc = describe("SoftmaxOutput", attrs, shapes, infer_op_shapes("SoftmaxOutput", attrs, shapes))
    found = [s for s in strategies(desc, 2) if s.exchanges]
    assert found
    assert not any(runnable("SoftmaxOutput", attrs, desc, s) for s in found)
    typed = typed_attrs(type(desc.attrs), attrs, "SoftmaxOutput")
    pieces = [[mx.sym.var(f"x{w}"), mx.sym.var("label")] for w in range(2)]
    with pytest.raises(TDLError, match="SoftmaxOutput: no expansion for"):
        registry.expansion("SoftmaxOutput")(pieces, [[shapes[0], shapes[1]]] * 2, typed, _allreduce,
                                            [[(0,) * len(shapes[0]), (0,) * len(shapes[1])]] * 2)


def test_its_statistics_carry_no_gradient():
    """The cost model charges SoftmaxOutput's exchange forward only (its statistics are computed from BlockGrad(x),
    read off its symbol), softmax's row sum backward too, BatchNorm's mean and variance both."""
    assert statistics_gradients("SoftmaxOutput", Attrs.parse({}), ((4, 6), (4,))) == (False, False)
    assert statistics_gradients("softmax", Attrs.parse({}), ((4, 6),)) == (False, True)
    assert statistics_gradients("BatchNorm", Attrs.parse({}), ((4, 3, 2, 2), (3,), (3,), (3,), (3,))) == (True, True)
