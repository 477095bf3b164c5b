"""Which parameters a loss's gradient reaches (tofu.graph.gradients.trained_parameters), against MXNet's own
backward pass on one device: exactly those whose gradient is not all zeros. ``tofu run`` says so when none is
(a loss behind BlockGrad trained nothing, silently)."""
import mxnet as mx
import numpy as np
import pytest

from tests.test_cli import run
from tofu.api import load_graph, reference_symbol
from tofu.graph.gradients import trained_parameters
from tofu.graph.ir import Role
from tofu.graph.mxnet_import import import_symbol
from tofu.runtime.data import initial_values, synthetic_batch


def _partly_stopped():
    """Two branches: one reaches the loss through a rounding (no gradient), one through tanh."""
    s = mx.sym
    x = s.var("data")
    cut = s.round(s.FullyConnected(x, num_hidden=4, name="cut"))
    kept = s.tanh(s.FullyConnected(x, num_hidden=4, name="kept"))
    return import_symbol(s.MakeLoss(s.sum(cut * kept), name="loss"), {"data": (6, 3)})


def _stopped():
    s = mx.sym
    return import_symbol(s.MakeLoss(s.sum(s.BlockGrad(s.FullyConnected(s.var("data"), num_hidden=4, name="fc")))),
                         {"data": (6, 3)})


GRAPHS = {"partly-stopped": _partly_stopped, "stopped": _stopped, "mlp": lambda: load_graph("mlp", with_loss=True),
          "rnn-tiny": lambda: load_graph("rnn-tiny", with_loss=True),
          "gpt-tiny": lambda: load_graph("gpt-tiny", with_loss=True)}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_the_trained_parameters_are_those_mxnet_gives_a_gradient(name):
    graph = GRAPHS[name]()
    sym = reference_symbol(graph)
    values = {**initial_values(graph, 3), **synthetic_batch(graph, 4)}
    params = {t.name for t in graph.by_role(Role.PARAM)}
    exe = sym.simple_bind(mx.cpu(), grad_req={n: "write" if n in params else "null" for n in sym.list_arguments()},
                          **{t.name: t.shape for t in graph.tensors if t.producer is None and t.role is not Role.AUX})
    for n, a in exe.arg_dict.items():
        a[:] = values[n]
    exe.forward(is_train=True)
    exe.backward()
    nonzero = {n for n in params if np.any(exe.grad_dict[n].asnumpy() != 0)}
    assert {graph.tensors[t].name for t in trained_parameters(graph)} == nonzero
    assert nonzero or name == "stopped"


def test_run_says_when_no_parameter_trains(capsys, tmp_path):
    s = mx.sym
    s.MakeLoss(s.sum(s.BlockGrad(s.FullyConnected(s.var("data"), num_hidden=4, name="fc"))), name="loss").save(
        str(tmp_path / "m.json"))
    rc, out, err = run(capsys, "run", str(tmp_path / "m.json"), "--shape", "data=6,3", "--workers", "2",
                       "--steps", "1")
    assert rc == 0 and "no parameter gets a gradient from the loss" in err
    rc, out, err = run(capsys, "run", "mlp", "--workers", "2", "--steps", "1")
    assert rc == 0 and "note" not in err
