"""The ways of running a shard beyond "the kernel on the worker's pieces", through the real partitioned runtime.

A plan that picks, for one op of a small trained network, a strategy that MXNet's kernel runs only

* with attributes the original leaves unset or sets from another input (Crop's ``h_w`` once the shard drops the
  input that gave it), or offsets made relative to the piece (an image crop),
* with its output scaled (a mean split on its reduction: each worker's mean of its share, times share / whole),
* on more than the worker's part, keeping that part (a reshape of a longer piece, a halo split along
  channels computed on the region with its halo),
* with a rewritten group count (a grouped convolution, GroupNorm, split on their channels, group-aligned),
* by the op's expansion, statistics exchanged (GroupNorm, InstanceNorm split spatially, L2Normalization over
  the channels it sums),
* with a shorter window (max pooling split on its window: partial maxima reduced with max),
* with part of its halo past the tensor's end materialised (average pooling, 'full' convention, split on its
  rows: the kernel's own border rule then counts the window as the whole operator does),

and at random elsewhere, must give the single-device run's outputs and parameter gradients on k CPU devices.
"""
import random

import mxnet as mx
import numpy as np
import pytest

from tofu.analysis.compose import compose
from tofu.analysis.views import NodeView
from tofu.graph import import_symbol
from tofu.graph.mxnet_export import export_symbol
from tofu.rewrite import apply_plan
from tofu.runtime.data import initial_values, synthetic_batch
from tofu.runtime.train import Trainer, whole_graph
from tofu.search.algorithms import to_plan
from tofu.search.coarsen import coarsen
from tofu.search.problem import CutSolution
from tofu.search.recursive import factorize, search


def _head(x, batch):
    x = mx.sym.FullyConnected(mx.sym.Flatten(x), num_hidden=2, name="head")
    return mx.sym.SoftmaxOutput(x, mx.sym.var("softmax_label"), name="softmax"), batch


def _mean():
    data = mx.sym.var("data")
    h = mx.sym.FullyConnected(data, num_hidden=8, name="fc")
    return _head(mx.sym.mean(mx.sym.reshape(h, shape=(4, 2, 4)), axis=2, keepdims=True, name="target"), 4), \
        {"data": (4, 6)}


def _flatten():
    data = mx.sym.var("data")
    h = mx.sym.Convolution(data, kernel=(1, 1), num_filter=3, name="conv")
    return _head(mx.sym.Flatten(h, name="target"), 4), {"data": (4, 2, 2, 2)}


def _repeat():
    data = mx.sym.var("data")
    h = mx.sym.FullyConnected(data, num_hidden=3, name="fc")
    return _head(mx.sym.repeat(h, repeats=2, axis=1, name="target"), 4), {"data": (4, 5)}


def _grouped_conv():
    data = mx.sym.var("data")
    h = mx.sym.Convolution(data, kernel=(3, 3), pad=(1, 1), num_filter=4, num_group=2, no_bias=True, name="target")
    return _head(mx.sym.Activation(h, act_type="tanh"), 2), {"data": (2, 4, 4, 4)}


def _max_pool_window():
    data = mx.sym.var("data")
    h = mx.sym.Convolution(data, kernel=(1, 1), num_filter=2, name="conv")
    return _head(mx.sym.Pooling(h, kernel=(2, 2), stride=(2, 2), pool_type="max", name="target"), 2), \
        {"data": (2, 2, 4, 4)}


def _image_resize():
    """An NHWC batch resized up by 2 before the network: the data has no gradient, so MXNet never runs
    ``_backward_image_resize`` (in MXNet 1.9.1 it copies the output's gradient into the input's, and fails
    unless the size is kept)."""
    data = mx.sym.var("data")
    h = mx.sym.image.resize(data, size=(8, 8), name="target")
    h = mx.sym.Convolution(mx.sym.transpose(h, axes=(0, 3, 1, 2)), kernel=(1, 1), num_filter=2, name="conv")
    return _head(h, 2), {"data": (2, 4, 4, 3)}


def _image_crop():
    """An NHWC crop (MXNet's image operators take 1 or 3 channels) of a convolution's output."""
    data = mx.sym.var("data")
    h = mx.sym.transpose(mx.sym.Convolution(data, kernel=(1, 1), num_filter=3, name="conv"), axes=(0, 2, 3, 1))
    return _head(mx.sym.image.crop(h, x=1, y=2, width=4, height=4, name="target"), 2), {"data": (2, 2, 6, 6)}


def _crop_like():
    """Crop taking its output's height and width from a second input (num_args=2)."""
    data = mx.sym.var("data")
    h = mx.sym.Convolution(data, kernel=(1, 1), num_filter=4, name="conv")
    like = mx.sym.Pooling(h, kernel=(2, 2), stride=(2, 2), pool_type="max", name="like")
    return _head(mx.sym.Crop(h, like, num_args=2, offset=(3, 1), name="target"), 2), {"data": (2, 4, 8, 8)}


def _conv_then(layer, shape=(2, 4, 4, 4)):
    def build():
        data = mx.sym.var("data")
        h = mx.sym.Convolution(data, kernel=(1, 1), num_filter=4, name="conv")
        return _head(layer(h), shape[0]), {"data": shape}
    return build


CASES = {  # network, the target op's strategy (split variable)
    "lrn-channels-halo": (_conv_then(lambda h: mx.sym.LRN(h, nsize=3, alpha=0.5, name="target")), "c"),
    "groupnorm-channels": (_conv_then(lambda h: mx.sym.GroupNorm(h, num_groups=2, name="target")), "c"),
    "groupnorm-spatial": (_conv_then(lambda h: mx.sym.GroupNorm(h, num_groups=2, name="target")), "x0"),
    "instancenorm-spatial": (_conv_then(lambda h: mx.sym.InstanceNorm(h, name="target")), "x1"),
    "l2norm-channels": (_conv_then(lambda h: mx.sym.L2Normalization(h, mode="channel", name="target")), "i1"),
    "pad-spatial": (_conv_then(lambda h: mx.sym.Pad(h, mode="constant", pad_width=(0, 0, 0, 0, 1, 1, 2, 2),
                                                    constant_value=0.5, name="target")), "y0"),
    "avgpool-full-rows": (_conv_then(lambda h: mx.sym.Pooling(h, kernel=(3, 3), stride=(2, 2), pad=(1, 1),
                                                              pool_type="avg", pooling_convention="full",
                                                              name="target"), (2, 4, 6, 6)), "xs0"),
    "upsampling-spatial": (_conv_then(lambda h: mx.sym.UpSampling(h, scale=2, sample_type="nearest", num_args=1,
                                                                  name="target")), "y"),
    "upsampling-bilinear-spatial": (_conv_then(lambda h: mx.sym.UpSampling(
        h, scale=2, sample_type="bilinear", num_filter=4, num_args=1, name="target")), "ys0"),
    "upsampling-bilinear-channels": (_conv_then(lambda h: mx.sym.UpSampling(
        h, scale=3, sample_type="bilinear", num_filter=4, num_args=1, name="target")), "co"),
    "bilinear-resize-spatial": (_conv_then(lambda h: mx.sym.contrib.BilinearResize2D(
        h, height=8, width=8, align_corners=False, name="target")), "y"),
    "bilinear-resize-channels": (_conv_then(lambda h: mx.sym.contrib.BilinearResize2D(
        h, height=7, width=10, name="target")), "c"),
    "crop-channels": (_conv_then(lambda h: mx.sym.Crop(h, num_args=1, h_w=(2, 3), offset=(1, 0),
                                                       name="target")), "c"),
    "crop-spatial": (_conv_then(lambda h: mx.sym.Crop(h, num_args=1, h_w=(2, 2), center_crop=True,
                                                      name="target")), "y"),
    "adaptive-avgpool-channels": (_conv_then(lambda h: mx.sym.contrib.AdaptiveAvgPooling2D(
        h, output_size=(3, 2), name="target")), "c"),
    "adaptive-avgpool-spatial": (_conv_then(lambda h: mx.sym.contrib.AdaptiveAvgPooling2D(
        h, output_size=(4, 2), name="target"), (2, 4, 8, 4)), "y"),
    "image-resize-rows": (_image_resize, "o1"),
    "image-crop-rows": (_image_crop, "o1"),
    "image-crop-columns": (_image_crop, "o2"),
    "crop-like-rows": (_crop_like, "y"),
    "crop-like-columns": (_crop_like, "w"),
    "mean-reduction": (_mean, "k0"),
    "flatten-inner": (_flatten, "j"),
    "repeat-axis": (_repeat, "o1"),
    "grouped-conv-co": (_grouped_conv, "co"),
    "max-pool-window": (_max_pool_window, "dy"),
}


def _solver(var: str, seed: int):
    """The target op's strategy named ``var`` wherever offered; everything else at random."""
    rng = random.Random(seed)

    def solve(problem):
        x = tuple(rng.randrange(len(t.choices)) for t in problem.tensors)
        y = []
        for o in problem.ops:
            named = [i for i, s in enumerate(o.strategies) if str(s) == var]
            y.append(named[0] if "target" in o.name and named else rng.randrange(len(o.strategies)))
        return CutSolution(x, tuple(y), problem.cost(x, tuple(y)))
    return solve


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_forms_train_like_one_device(name, k):
    build, var = CASES[name]
    (symbol, _), shapes = build()
    shapes["softmax_label"] = (shapes["data"][0],)
    graph = import_symbol(symbol, shapes, name)
    coarse = coarsen(graph)
    steps = search(graph, factorize(k), _solver(var, k), coarse)
    plan = to_plan(graph, k, "forced", steps, 0.0, coarse.stats(graph))
    target = next(n for n in graph.nodes if n.name == "target")
    first = dict(plan.steps[0].op_choices)["target"]
    assert first.var == var, f"the plan did not pick {var} for the target: {first}"
    calls = compose(NodeView.of(graph, target), tuple(dict(s.op_choices)["target"] for s in plan.steps),
                    tuple(s.factor for s in plan.steps))
    if name in ("mean-reduction",):
        assert all(c.scale != 1.0 for c in calls), "a partial mean runs scaled"
    if name in ("flatten-inner", "repeat-axis"):
        assert any(c.keep is not None for c in calls), "the kernel computes more than the part and keeps it"
    if name == "grouped-conv-co":
        assert all(c.attrs["num_group"] < 2 for c in calls), "a group-aligned split rewrites num_group"
    if name == "groupnorm-channels":
        assert all(c.attrs["num_groups"] < 2 for c in calls), "a group-aligned split rewrites num_groups"
    if name in ("groupnorm-spatial", "instancenorm-spatial", "l2norm-channels"):
        assert all(c.expansion for c in calls), "the statistics are exchanged by the op's expansion"
    if name == "lrn-channels-halo":
        assert any(c.keep is not None for c in calls), "computed on the region with its halo, the part kept"
    if name.startswith("crop-like"):     # the shard drops the second input: h_w gives the piece's extents
        assert all(len(c.inputs) == 1 and c.attrs["num_args"] == 1 and "h_w" in c.attrs for c in calls)
    if name.startswith("image-crop"):    # each worker's piece starts where its crop does
        assert all(c.attrs["x"] == c.attrs["y"] == 0 for c in calls)
    if name == "image-resize-rows":     # size is (width, height): each worker resizes its rows at the full rate
        assert all(c.keep is not None and c.attrs["size"][0] == 8 for c in calls)
    if name == "pad-spatial":     # the halo is materialised (filled with constant_value): the kernel pads nothing
        assert all(not any(c.attrs["pad_width"]) for c in calls)
    values = {**initial_values(graph, 3), **synthetic_batch(graph, 4)}
    got = Trainer(apply_plan(graph, plan), values)
    want = Trainer(whole_graph(graph, export_symbol(graph)), values)
    a, b = got.forward_backward(), want.forward_backward()
    for out in b:
        np.testing.assert_allclose(a[out], b[out], rtol=1e-4, atol=1e-5)
    ga, gb = got.gradients(), want.gradients()
    scale = max(float(np.abs(g).max()) for g in gb.values()) or 1.0
    assert set(ga) == set(gb)
    for p in ga:
        np.testing.assert_allclose(ga[p], gb[p], rtol=1e-4, atol=1e-4 * scale, err_msg=p)
