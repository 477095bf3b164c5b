"""A layer whose outputs are partly never read (a slice keeps 4 of its 16 features): a plan that splits those
features leaves some devices' weight pieces unread, so the partitioned symbol has no variable for them. They used to
be dropped from the gathered parameters and gradients: ``--check`` crashed comparing a (8, 12) gradient with one
device's (16, 12), and ``--save`` wrote a truncated weight. The trainer now holds them, unchanged, as one device's SGD
leaves rows whose gradient is zero."""
import json

import mxnet as mx
import numpy as np
import pytest

from tests.test_cli import run
from tofu.api import load_graph
from tofu.runtime.data import read_params
from tofu.search.algorithms import plan_graph


@pytest.fixture
def sliced(tmp_path):
    h = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=16, name="fc1")
    h = mx.sym.slice_axis(h, axis=1, begin=0, end=4)
    out = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(h, num_hidden=3, name="fc2"), name="softmax")
    path = tmp_path / "sliced-symbol.json"
    out.save(str(path))
    return path


@pytest.mark.parametrize("workers", [2, 4])
def test_unread_weight_pieces_train_check_and_save_whole(capsys, tmp_path, sliced, workers):
    plan = plan_graph(load_graph(str(sliced), shapes={"data": (8, 12)}, with_loss=True), workers, "tofu")
    assert dict(plan.steps[0].tensor_dims)["fc1_output"] == 1, "the plan no longer splits fc1's features: the " \
        "test checks nothing"
    rng = np.random.default_rng(0)
    start = {"fc1_weight": rng.standard_normal((16, 12)), "fc1_bias": rng.standard_normal(16),
             "fc2_weight": rng.standard_normal((3, 4)), "fc2_bias": rng.standard_normal(3)}
    mx.nd.save(str(tmp_path / "start.params"), {f"arg:{k}": mx.nd.array(v) for k, v in start.items()})
    saved = tmp_path / "trained.params"
    rc, out, err = run(capsys, "run", str(sliced), "--shape", "data=8,12", "--workers", str(workers), "--steps", "2",
                       "--check", "--json", "--load", str(tmp_path / "start.params"), "--save", str(saved))
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["check_passed"] and doc["gradient_max_rel_diff"] < 1e-4
    params = {k.split(":", 1)[1]: v.asnumpy() for k, v in read_params(saved).items()}
    assert params["fc1_weight"].shape == (16, 12) and params["fc1_bias"].shape == (16,)
    # the rows the slice reads are trained; the others, whose gradient is zero, are the loaded ones
    assert not np.allclose(params["fc1_weight"][:4], start["fc1_weight"][:4])
    np.testing.assert_array_equal(params["fc1_weight"][4:], start["fc1_weight"][4:].astype(np.float32))
    np.testing.assert_array_equal(params["fc1_bias"][4:], start["fc1_bias"][4:].astype(np.float32))
