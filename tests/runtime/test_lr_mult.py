"""A parameter's learning-rate multiplier (``mx.sym.var(name, lr_mult=...)``, ``__lr_mult__`` in the symbol file)
scales its update, as MXNet's optimizers do: 0 freezes a layer (fine-tuning). The trainer used to update every
parameter at the same rate, frozen ones included, and ``--check`` passed (its one-device reference ignored the
multiplier too). The reference here is MXNet's own ``Module`` with its SGD optimizer, from the same values on the
same batch."""
import mxnet as mx
import numpy as np
import pytest

from tests.test_cli import run
from tofu.api import load_graph, partitioned
from tofu.errors import GraphImportError
from tofu.runtime.data import initial_values, synthetic_batch
from tofu.runtime.train import Trainer
from tofu.search.algorithms import plan_graph

LR, MOMENTUM, STEPS = 0.05, 0.9, 3
MULTS = {"fc1_weight": 0.0, "fc1_bias": 0.0, "fc2_weight": 0.5, "fc3_weight": 2.0}   # the rest: 1


def _symbol():
    def var(name):
        return mx.sym.var(name, lr_mult=MULTS[name]) if name in MULTS else mx.sym.var(name)
    h = mx.sym.var("data")
    for i, width in enumerate((16, 16, 4), 1):
        h = mx.sym.FullyConnected(h, var(f"fc{i}_weight"), var(f"fc{i}_bias"), num_hidden=width, name=f"fc{i}")
        if i < 3:
            h = mx.sym.Activation(h, act_type="tanh")
    return mx.sym.SoftmaxOutput(h, mx.sym.var("softmax_label"), name="softmax")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("lr_mult") / "scaled-symbol.json"
    _symbol().save(str(path))
    graph = load_graph(str(path), shapes={"data": (8, 12), "softmax_label": (8,)}, with_loss=True)
    return path, graph, initial_values(graph), synthetic_batch(graph)


def _module(values, batch):
    """The parameters after STEPS steps of MXNet's Module (its SGD: rate times the variable's lr_mult)."""
    mod = mx.mod.Module(_symbol(), data_names=["data"], label_names=["softmax_label"], context=mx.cpu())
    mod.bind([("data", batch["data"].shape)], [("softmax_label", batch["softmax_label"].shape)])
    mod.init_params(arg_params={k: mx.nd.array(v) for k, v in values.items()}, aux_params={})
    mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": LR, "momentum": MOMENTUM,
                                                           "rescale_grad": 1.0, "wd": 0.0})
    data = mx.io.DataBatch([mx.nd.array(batch["data"])], [mx.nd.array(batch["softmax_label"])])
    for _ in range(STEPS):
        mod.forward_backward(data)
        mod.update()
    return {k: v.asnumpy() for k, v in mod.get_params()[0].items()}


@pytest.mark.parametrize("workers,algo,replicas", [(1, "tofu", True), (2, "tofu", True), (4, "tofu", True),
                                                   (4, "data-parallel", True), (4, "tofu", False)])
def test_updates_scaled_by_lr_mult_as_mxnet_module(model, workers, algo, replicas):
    """Through the replicas' exchange (flat buffers per device), and without it (each shard on its own)."""
    _, graph, values, batch = model
    assert {t.name: t.lr_mult for t in graph.tensors if t.name in MULTS} == MULTS
    plan = plan_graph(graph, workers, algo)
    trainer = Trainer(partitioned(graph, plan), {**values, **batch}, lr=LR, momentum=MOMENTUM, replicas=replicas)
    assert len(trainer.exchange.weights) == (len(trainer.params) if replicas else 0)
    for _ in range(STEPS):
        trainer.step()
    got, want = trainer.parameters(), _module(values, batch)
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    # the frozen layer stays as loaded; the others moved
    for name in ("fc1_weight", "fc1_bias"):
        np.testing.assert_array_equal(got[name], values[name].astype(np.float32))
    assert all(not np.allclose(got[n], values[n]) for n in ("fc2_weight", "fc3_weight", "fc3_bias"))


def test_the_exported_reference_keeps_the_multipliers(model):
    _, graph, _, _ = model
    from tofu.api import reference_symbol
    declared = reference_symbol(graph).attr_dict()
    assert {n: float(declared[n]["__lr_mult__"]) for n in MULTS} == MULTS
    assert "__lr_mult__" not in declared.get("fc2_bias", {})


def test_a_multiplier_that_is_not_a_number_is_a_one_line_error(capsys, tmp_path):
    bad = mx.sym.FullyConnected(mx.sym.var("data"), mx.sym.var("w", attr={"__lr_mult__": "fast"}), num_hidden=3,
                                no_bias=True, name="fc")
    path = tmp_path / "bad-symbol.json"
    mx.sym.SoftmaxOutput(bad, name="softmax").save(str(path))
    with pytest.raises(GraphImportError, match="parameter 'w': __lr_mult__ 'fast' is not a finite number"):
        load_graph(str(path), shapes={"data": (4, 5)}, with_loss=True)
    rc, _, err = run(capsys, "plan", str(path), "--shape", "data=4,5", "--workers", "2")
    assert rc == 2 and err.count("\n") == 1 and "__lr_mult__ 'fast'" in err
