"""BatchNorm's moving statistics under a statistics exchange (the batch split): updated from the whole batch's
mean and biased variance, as one device's kernel updates them from its batch's (MXNet does it in the backward
pass). Before, the expansion left them at their initial values, so a checkpoint of a partitioned run held moving
means 0 and variances 1, silently (`--check` compared parameters only)."""
import mxnet as mx
import numpy as np
import pytest

from tofu import cli
from tofu.api import load_graph, partitioned
from tofu.graph.ir import Role
from tofu.runtime.data import initial_values, synthetic_batch
from tofu.runtime.train import Trainer
from tofu.search.algorithms import plan_graph

MOMENTUM = 0.8


def _graph(tmp_path):
    s = mx.sym
    conv = s.Convolution(s.var("data"), num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv")
    bn = s.BatchNorm(conv, name="bn", fix_gamma=False, momentum=MOMENTUM)
    s.make_loss(s.sum(s.square(bn)), name="loss").save(str(tmp_path / "bn.json"))
    return load_graph(str(tmp_path / "bn.json"), shapes={"data": (8, 3, 4, 4)}), conv


@pytest.mark.parametrize("workers", [2, 4])
def test_one_step_moves_them_as_numpy_says(tmp_path, workers):
    graph, conv = _graph(tmp_path)
    values = {**initial_values(graph, 0), **synthetic_batch(graph, 0)}
    plan = plan_graph(graph, workers, "data-parallel")         # the batch split: BatchNorm by its expansion
    trainer = Trainer(partitioned(graph, plan), values)
    assert any("stat_" in c.name for c in trainer.copies())   # the statistics are exchanged (one pass, counted)
    trainer.step()
    got = trainer.parameters((Role.PARAM, Role.AUX))
    # the expected batch statistics: the convolution's output, by MXNet on one device, at the initial weights
    ex = conv.simple_bind(mx.cpu(), data=values["data"].shape)
    for name in ("data", "conv_weight", "conv_bias"):
        ex.arg_dict[name][:] = values[name]
    y = ex.forward()[0].asnumpy()
    mean, var = y.mean(axis=(0, 2, 3)), y.var(axis=(0, 2, 3))
    # two passes moved them: the copy measurement's forward and backward, then the step's
    for _ in range(2):
        values["bn_moving_mean"] = MOMENTUM * values["bn_moving_mean"] + (1 - MOMENTUM) * mean
        values["bn_moving_var"] = MOMENTUM * values["bn_moving_var"] + (1 - MOMENTUM) * var
    np.testing.assert_allclose(got["bn_moving_mean"], values["bn_moving_mean"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got["bn_moving_var"], values["bn_moving_var"], rtol=1e-4, atol=1e-6)


def test_a_checkpoint_of_a_partitioned_run_holds_them(tmp_path, capsys):
    """wresnet-tiny at 2 workers, its BatchNorms split by the batch: --check (which compares the moving statistics'
    updates with one device's now) passes, and the saved file's moving statistics left their initial 0 and 1."""
    path = tmp_path / "w.params"
    assert cli.main(["run", "wresnet-tiny", "--workers", "2", "--steps", "2", "--check", "--save", str(path)]) == 0
    assert ": passed (rtol" in capsys.readouterr().out
    saved = mx.nd.load(str(path))
    means = [v.asnumpy() for k, v in saved.items() if k.endswith("_moving_mean")]
    variances = [v.asnumpy() for k, v in saved.items() if k.endswith("_moving_var")]
    assert len(means) == len(variances) >= 10
    assert all(np.abs(m).max() > 0 for m in means) and all(np.abs(v - 1).max() > 0 for v in variances)


def test_a_state_named_like_another_op_s_argument_is_refused(tmp_path, capsys):
    """One name for BatchNorm's moving mean and another BatchNorm's gamma: MXNet binds one variable, updated in place
    as the state and read as the argument; a partitioned graph cannot bind that, so it is refused by name (exit 2)."""
    s = mx.sym
    first = s.BatchNorm(s.var("data"), s.var("g1"), s.var("b1"), s.var("m1"), s.var("v1"), name="bn1", fix_gamma=False)
    second = s.BatchNorm(first, s.var("g2"), s.var("b2"), s.var("g1"), s.var("v2"), name="bn2", fix_gamma=False)
    s.make_loss(s.sum(second), name="loss").save(str(tmp_path / "m.json"))
    for command in ("plan", "run"):
        assert cli.main([command, str(tmp_path / "m.json"), "--shape", "data=4,3", "--workers", "2"]) == 2
        err = capsys.readouterr().err
        assert "variable 'g1' is both an op's auxiliary state" in err and len(err.strip().splitlines()) == 1
