"""BatchNorm's statistics exchange computes one device's function exactly; what ``--check`` sees beside one device
on BatchNorm networks is float32 rounding (docs/runtime.md, the zoo-check table).

Gluon's inceptionv3 (299 px, batch 8, random weights) partitioned by ``tofu`` differs from one device by 0.102
(k = 2) and 0.093 (k = 4) of the largest gradient in float32, beyond the default tolerance. Bound in float64 on
both sides, the same partitioned symbol and the same one-device symbol agree to 1.5e-12 (gradients, k = 2 and 4)
and 5e-13 (outputs), and the float32 partitioned run is *closer* to the float64 gradient (0.029, 0.028) than
MXNet's own float32 one-device run is (0.099): the difference is not the expansion's. That network's float32
gradient is ill-conditioned at its random initialization: float32 rounding grows through its 94
convolution-BatchNorm-ReLU layers from a relative 2e-5 at the stem to 2.5e-3 at the last block, carrying 3798 ReLU
inputs across their kink; one device in float64 moves its gradient by 1.6% when the data moves by a relative
1e-7 (4.1% at 1e-6), one device in float32 by 3.1%.

These tests hold the expansion to the float64 standard on a small network with BatchNorm after a convolution,
after a ReLU (fix_gamma) and after a Concat, its data centred and offset by 1000 (where the affine form a x + c
rounds |mean| / std times more than the fused kernel's (x - mean) a): partitioned equals one device to 1e-12 in
float64 (6e-16 measured), under a data-parallel plan (every statistic exchanged) and tofu's. A variance divided by
n - 1 instead of n in the exchange fails them (7e-4 to 9e-4, which float32's --check at 5e-2 would pass).
``tofu run --check`` now asks float64 itself where float32 exceeds --rtol (tests/runtime/test_check_f64.py).
"""
import dataclasses
import json
import re

import mxnet as mx
import numpy as np
import pytest

from tofu.api import load_graph, partitioned, reference_symbol
from tofu.graph.ir import Role
from tofu.runtime import DEFAULT_RTOL
from tofu.runtime.data import initial_values, synthetic_batch
from tofu.runtime.run import max_rel_diff
from tofu.runtime.train import Trainer, whole_graph
from tofu.search.algorithms import plan_graph

EXACT = 1e-12       # float64 on both sides: rounding 1e-16, far below any kink or partitioning error


def _bn_net(path) -> str:
    """Convolution -> BatchNorm -> ReLU -> BatchNorm (fix_gamma, after a ReLU) -> Convolution -> ReLU, a Concat of
    the two ReLUs -> BatchNorm (after a Concat) -> ReLU -> global pooling -> FullyConnected -> SoftmaxOutput."""
    s = mx.sym
    r1 = s.relu(s.BatchNorm(s.Convolution(s.var("data"), kernel=(3, 3), pad=(1, 1), num_filter=8, name="c1"),
                            fix_gamma=False, eps=1e-3, name="bn1"), name="r1")
    r2 = s.relu(s.Convolution(s.BatchNorm(r1, eps=1e-5, name="bn2"), kernel=(3, 3), pad=(1, 1), num_filter=8,
                              name="c2"), name="r2")
    h = s.relu(s.BatchNorm(s.concat(r1, r2, dim=1, name="cat"), fix_gamma=False, eps=1e-3, name="bn3"), name="r3")
    h = s.Pooling(h, kernel=(1, 1), global_pool=True, pool_type="avg", name="pool")
    s.SoftmaxOutput(s.FullyConnected(s.flatten(h), num_hidden=10, name="fc"), s.var("softmax_label"),
                    name="softmax").save(str(path))
    return str(path)


def _gradients(pg, values, dtype):
    """The first step's parameter gradients of ``pg`` (whole tensors) with every argument bound as ``dtype``."""
    bind = mx.sym.Symbol.simple_bind
    symbol = pg.symbol
    if dtype != np.float32:     # the constants the rewrite adds (zero shards of a bias) carry their dtype; made
        # float64 here by a rewrite of the JSON of its own, not by tofu.runtime.train.float64_symbol; one_hot (the
        # class-split softmax's expansion reads its label through it) is float32 unless told otherwise
        doc = json.loads(re.sub(r'("dtype": )"float32"', r'\1"float64"', symbol.tojson()))
        for node in doc["nodes"]:
            if node["op"] == "one_hot":
                node.setdefault("attrs", {}).setdefault("dtype", "float64")
        symbol = mx.sym.load_json(json.dumps(doc))

    def typed(self, ctx, *args, **kwargs):
        return bind(self, ctx, *args, type_dict={n: dtype for n in self.list_arguments()}, **kwargs)

    mx.sym.Symbol.simple_bind = typed
    try:
        trainer = Trainer(dataclasses.replace(pg, symbol=symbol), values, replicas=False)
    finally:
        mx.sym.Symbol.simple_bind = bind
    trainer.forward_backward()
    shards = {v.name: trainer.executor.grad_dict[v.name].asnumpy() for v in trainer.params}
    assert all(g.dtype == dtype for g in shards.values())
    ends = {}                       # assembled here in ``dtype``, apart from gather_values (test_check_f64's reference)
    for v in trainer.params:
        ends[v.tensor] = np.maximum(ends.get(v.tensor, 0), [b for _, b in v.box])
    whole = {t: np.zeros(tuple(e), dtype) for t, e in ends.items()}
    for v in trainer.params:
        whole[v.tensor][tuple(slice(a, b) for a, b in v.box)] = shards[v.name]
    return whole


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return load_graph(_bn_net(tmp_path_factory.mktemp("bn") / "bn.json"),
                      shapes={"data": (8, 3, 6, 6)})


@pytest.mark.parametrize("offset", [0.0, 1000.0])
@pytest.mark.parametrize("algo", ["data-parallel", "tofu"])
def test_batch_norm_exchange_is_one_device_in_float64(graph, algo, offset):
    batch = synthetic_batch(graph, 1)
    batch["data"] = batch["data"] + np.float32(offset)
    values = {**initial_values(graph, 0), **batch}
    pg = partitioned(graph, plan_graph(graph, 2, algo))
    if algo == "data-parallel":       # the batch split: every BatchNorm exchanges its statistics
        assert sum("_bn_affine" in a for a in pg.symbol.list_auxiliary_states()) == 3 * 2 * 2
    one = whole_graph(graph, reference_symbol(graph))
    exact = _gradients(one, values, np.float64)
    params = {t.name for t in graph.tensors if t.producer is None and t.role is Role.PARAM}
    assert set(exact) == params
    got = _gradients(pg, values, np.float64)
    got = {n: got.get(n, np.zeros_like(g)) for n, g in exact.items()}      # bn2's gamma: fix_gamma, never read
    assert max_rel_diff(got, exact) <= EXACT
    # in float32 both sides round; neither is the exact gradient, and they stay within --check's tolerance here
    assert max_rel_diff(_gradients(pg, values, np.float32), exact) <= DEFAULT_RTOL
    assert max_rel_diff(_gradients(one, values, np.float32), exact) <= DEFAULT_RTOL
