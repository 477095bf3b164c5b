"""Property: on random small graphs built from described operators, under random valid plans (every tensor's
split and every op's strategy drawn at random at every step of the recursion, so layouts disagree and
conversions, fetches and reductions abound), the partitioned graph's outputs and parameter gradients equal
the single-device run's.

Smooth activations and average pooling only: at a ReLU or max-pooling kink, float32 rounding may pick either
branch in either run (docs/runtime.md). ``make test`` runs a few examples; CI (``CI=true``)
runs more.
"""
import os
import random

import mxnet as mx
import numpy as np
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from tofu.errors import SearchError
from tofu.graph import import_symbol
from tofu.graph.mxnet_export import export_symbol
from tofu.rewrite import apply_plan
from tofu.runtime.data import initial_values, synthetic_batch
from tofu.runtime.train import Trainer, whole_graph
from tofu.search.algorithms import to_plan
from tofu.search.coarsen import coarsen
from tofu.search.problem import CutSolution
from tofu.search.recursive import factorize, search

settings.register_profile("default", max_examples=12, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("ci", max_examples=80, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("ci" if os.environ.get("CI") == "true" else "default")


def random_solver(seed: int):
    rng = random.Random(seed)

    def solve(problem):
        x = tuple(rng.randrange(len(t.choices)) for t in problem.tensors)
        y = tuple(rng.randrange(len(o.strategies)) for o in problem.ops)
        return CutSolution(x, y, problem.cost(x, y))
    return solve


@st.composite
def models(draw):
    """A random network: a 4-D trunk of convolutions, normalisation, smooth activations, pooling and residual
    adds, or a 2-D one of fully connected layers; then a softmax loss."""
    batch = draw(st.sampled_from([2, 4, 6, 8, 12]))
    image = draw(st.booleans())
    x = mx.sym.var("data")
    if image:
        channels, size = draw(st.sampled_from([2, 3, 4, 6, 8])), draw(st.sampled_from([4, 6, 8]))
        shape = (batch, channels, size, size)
        for i in range(draw(st.integers(1, 4))):
            layer = draw(st.sampled_from(["conv", "conv", "bn", "act", "pool", "residual"]))
            if layer == "conv":
                kernel = draw(st.sampled_from([1, 3]))
                channels = draw(st.sampled_from([2, 4, 6, 8]))
                stride = draw(st.sampled_from([1, 1, 2])) if size >= 4 else 1
                x = mx.sym.Convolution(x, kernel=(kernel, kernel), pad=(kernel // 2,) * 2, stride=(stride,) * 2,
                                       num_filter=channels, no_bias=draw(st.booleans()), name=f"conv{i}")
                size = (size + 2 * (kernel // 2) - kernel) // stride + 1
            elif layer == "bn":
                x = mx.sym.BatchNorm(x, fix_gamma=draw(st.booleans()), name=f"bn{i}")
            elif layer == "act":
                x = mx.sym.Activation(x, act_type=draw(st.sampled_from(["tanh", "sigmoid", "softrelu"])),
                                      name=f"act{i}")
            elif layer == "pool" and size >= 2 and size % 2 == 0:
                x = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="avg", name=f"pool{i}")
                size //= 2
            elif layer == "residual":
                y = mx.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=channels, no_bias=True,
                                       name=f"res{i}")
                x = mx.sym.elemwise_add(x, mx.sym.Activation(y, act_type="tanh", name=f"rt{i}"), name=f"add{i}")
        x = mx.sym.Flatten(x, name="flatten")
    else:
        shape = (batch, draw(st.sampled_from([3, 4, 6, 8, 12])))
        for i in range(draw(st.integers(1, 3))):
            x = mx.sym.FullyConnected(x, num_hidden=draw(st.sampled_from([2, 4, 6, 8, 12])),
                                      no_bias=draw(st.booleans()), name=f"fc{i}")
            x = mx.sym.Activation(x, act_type=draw(st.sampled_from(["tanh", "sigmoid"])), name=f"act{i}")
    x = mx.sym.FullyConnected(x, num_hidden=draw(st.sampled_from([2, 4, 6])), name="head")
    symbol = mx.sym.SoftmaxOutput(x, mx.sym.var("softmax_label"), name="softmax")
    return symbol, {"data": shape, "softmax_label": (batch,)}


@given(model=models(), k=st.sampled_from([2, 3, 4, 6, 8]), seed=st.integers(0, 2**16))
def test_random_plans_of_random_graphs_equal_one_device(model, k, seed):
    symbol, shapes = model
    note(" -> ".join(f"{n['op']}({n.get('attrs', {})})" for n in __import__("json").loads(symbol.tojson())["nodes"]
                     if n["op"] != "null"))
    graph = import_symbol(symbol, shapes, "random")
    coarse = coarsen(graph)
    try:
        steps = search(graph, factorize(k), random_solver(seed), coarse)
    except SearchError:
        assume(False)          # the input cannot be split k ways: not a plan to test
    plan = to_plan(graph, k, "random", steps, 0.0, coarse.stats(graph))
    values = {**initial_values(graph, seed), **synthetic_batch(graph, seed + 1)}
    got = Trainer(apply_plan(graph, plan), values)
    want = Trainer(whole_graph(graph, export_symbol(graph)), values)
    a, b = got.forward_backward(), want.forward_backward()
    for name in b:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-4, atol=1e-5)
    ga, gb = got.gradients(), want.gradients()
    scale = max(float(np.abs(g).max()) for g in gb.values()) or 1.0
    for name in set(gb) - set(ga):     # a parameter the partitioned graph never reads (BatchNorm's fixed gamma)
        assert not np.any(gb[name]), f"{name} has a gradient on one device but is not read partitioned"
    for name in ga:
        np.testing.assert_allclose(ga[name], gb[name], rtol=1e-4, atol=1e-4 * scale, err_msg=name)
