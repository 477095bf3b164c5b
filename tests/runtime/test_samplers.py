"""The samplers (_random_normal, _random_uniform, _random_gamma, ..., their _like forms; operators_tdl/random.py): partitioned, each
device draws its own shard from the attributes' distribution, no two shards the same draws; ``--check`` runs
them at their means on both sides (tofu.graph.deterministic.at_mean). Refused before ("no TDL description"):
a VAE's reparameterisation noise."""
import mxnet as mx
import numpy as np
import pytest

from tofu import registry
from tofu.api import load_plan, partitioned
from tofu.graph.attrs import Attrs
from tofu.graph.deterministic import at_mean, without_dropout
from tofu.graph.mxnet_import import import_symbol
from tofu.graph.single_op import run_op
from tofu.runtime.data import initial_values, synthetic_batch
from tofu.runtime.train import Trainer
from tofu.search.constants import constant_tensors


def _graph():
    """A loss on a hidden layer, and beside it (a graph output that trains nothing) noise drawn like it."""
    h = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=32, name="fc")
    noise = mx.sym.BlockGrad(mx.sym.random.normal_like(h, loc=1.0, scale=2.0, name="eps"), name="noise")
    uniform = mx.sym.BlockGrad(mx.sym.random.uniform(low=-1.0, high=3.0, shape=(64, 32), name="u"), name="unif")
    return import_symbol(mx.sym.Group([mx.sym.MakeLoss(mx.sym.sum(mx.sym.square(h)), name="loss"), noise, uniform]),
                         {"data": (64, 16)})


@pytest.mark.parametrize("algo", ["tofu", "data-parallel"])
def test_each_device_draws_its_own_shard_of_the_distribution(algo):
    graph = _graph()
    plan = load_plan(graph, 4, algo)
    outs = Trainer(partitioned(graph, plan), {**initial_values(graph), **synthetic_batch(graph)}).forward_backward()
    normal, uniform = outs["noise_output"], outs["unif_output"]
    assert normal.shape == uniform.shape == (64, 32)
    # 2048 draws each: the sample mean within 5 standard errors, the spread within 10%
    assert abs(normal.mean() - 1.0) < 5 * 2.0 / np.sqrt(normal.size) and abs(normal.std() / 2.0 - 1) < 0.1
    assert uniform.min() >= -1.0 and uniform.max() < 3.0
    assert abs(uniform.mean() - 1.0) < 5 * (4 / np.sqrt(12)) / np.sqrt(uniform.size)
    for sample in (normal, uniform):     # no two devices' shards (a quarter each, however cut) drew alike: that
        # would repeat a quarter of the values; 2048 independent float32 draws repeat one 4-6% of the time
        assert sample.size - len(np.unique(sample)) < sample.size // 100


def test_samplers_are_not_constants():
    graph = _graph()
    const = constant_tensors(graph)
    assert not {t for n in graph.nodes if n.op.startswith("_random_") for t in n.outputs} & const


def test_the_check_draws_the_means():
    graph, changed = without_dropout(_graph())
    assert set(changed) == {"eps", "u"}
    ops = {n.name: (n.op, dict(n.attrs)) for n in graph.nodes}
    assert ops["eps"] == ("_random_uniform_like", {"low": 1.0, "high": 1.0})
    assert ops["u"] == ("_random_uniform", {"low": 1.0, "high": 1.0, "shape": (64, 32)})
    assert at_mean("Dropout", graph.nodes[0].attrs) is None


SAMPLERS = sorted(op for op in registry.load_builtin_operators() if at_mean(op, Attrs.of()) is not None)


def test_every_described_sampler_is_listed():
    assert len(SAMPLERS) == 14 and all(op.startswith("_random_") for op in SAMPLERS)


@pytest.mark.parametrize("op", SAMPLERS)
def test_the_stated_mean_is_the_mean_of_mxnets_draws(op):
    """The mean each description states (what --check draws) against 200,000 of MXNet's draws, within 5 standard
    errors, on the attributes of the op's first Case."""
    case = registry.load_builtin_operators()[op].cases[0]
    attrs = case.parsed_attrs()
    _, fixed = at_mean(op, attrs)
    n = 200_000
    if op.endswith("_like"):
        (draws,) = run_op(op, attrs, [np.zeros(n, np.float32)])
    else:
        (draws,) = run_op(op, Attrs.of(**{**dict(attrs), "shape": (n,)}), [])
    assert abs(draws.mean() - fixed["low"]) < 5 * draws.std() / np.sqrt(n) + 1e-6
    assert fixed["low"] == fixed["high"]
