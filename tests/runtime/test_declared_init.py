"""A variable's declared initializer (``mx.sym.var(name, init=...)``, ``__init__`` in the symbol file;
``mx.rnn.LSTMCell`` declares its forget bias so) gives its initial value, as MXNet's ``Module.init_params`` does.
tofu used to draw every parameter by its own rule, so a scale declared 0.5 started uniform around 0 and an LSTM's
forget bias at 0. The reference is MXNet's own initialization: equal values for the constant initializers, the
same spread for the random ones (the numbers differ: another generator)."""
import mxnet as mx
import numpy as np
import pytest

from tests.test_cli import run
from tofu.api import load_graph
from tofu.runtime.data import InitializerError, initial_values

DECLARED = {       # variable -> (shape, initializer)
    "scale": ((1, 8, 1, 1), mx.init.Constant(0.5)),
    "shift": ((1, 8, 1, 1), mx.init.Zero()),
    "gain": ((8,), mx.init.One()),
    "lstm_bias": ((32,), mx.init.LSTMBias(forget_bias=2.0)),
    "up_w": ((8, 1, 3, 5), mx.init.Bilinear()),
    "xavier_w": ((256, 8, 3, 3), mx.init.Xavier(rnd_type="uniform", factor_type="avg", magnitude=3)),
    "gauss_w": ((256, 72), mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2)),
    "msra_w": ((128, 72), mx.init.MSRAPrelu(slope=0.1)),
    "uniform_w": ((64, 64), mx.init.Uniform(0.3)),
    "normal_w": ((64, 64), mx.init.Normal(0.2)),
}


def _symbol(extra=None):
    v = {n: mx.sym.var(n, shape=shape, init=init) for n, (shape, init) in DECLARED.items()}
    x = mx.sym.Convolution(mx.sym.var("data"), v["xavier_w"], num_filter=256, kernel=(3, 3), pad=(1, 1),
                           no_bias=True, name="c")
    x = mx.sym.slice_axis(x, axis=1, begin=0, end=8)
    x = mx.sym.broadcast_add(mx.sym.broadcast_mul(x, v["scale"]), v["shift"])
    x = mx.sym.Convolution(x, v["up_w"], kernel=(3, 5), pad=(1, 2), num_filter=8, num_group=8, no_bias=True,
                           name="up")
    x = mx.sym.flatten(mx.sym.relu(x))                                          # (B, 8 * 3 * 3) = (B, 72)
    x = mx.sym.FullyConnected(x, v["gauss_w"], no_bias=True, num_hidden=256, name="g")
    x = mx.sym.FullyConnected(x, mx.sym.var("g2_weight"), no_bias=True, num_hidden=72, name="g2")
    x = mx.sym.FullyConnected(x, v["msra_w"], no_bias=True, num_hidden=128, name="m")
    x = mx.sym.FullyConnected(mx.sym.slice_axis(x, axis=1, begin=0, end=64), v["uniform_w"], no_bias=True,
                              num_hidden=64, name="u")
    x = mx.sym.FullyConnected(x, v["normal_w"], no_bias=True, num_hidden=64, name="n")
    x = mx.sym.FullyConnected(x, mx.sym.var("l_weight"), v["lstm_bias"], num_hidden=32, name="l")
    x = mx.sym.broadcast_mul(mx.sym.slice_axis(x, axis=1, begin=0, end=8), mx.sym.reshape(v["gain"], (1, 8)))
    if extra is not None:
        x = mx.sym.broadcast_add(x, extra)
    return mx.sym.SoftmaxOutput(x, mx.sym.var("softmax_label"), name="softmax")


def _mxnet_values(symbol):
    mod = mx.mod.Module(symbol, data_names=["data"], label_names=["softmax_label"], context=mx.cpu())
    mod.bind([("data", (2, 8, 3, 3))], [("softmax_label", (2,))])
    mx.random.seed(0)
    mod.init_params(mx.init.Uniform(0.01))
    return {k: v.asnumpy() for k, v in mod.get_params()[0].items()}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    path = tmp_path_factory.mktemp("init") / "declared-symbol.json"
    _symbol().save(str(path))
    graph = load_graph(str(path), shapes={"data": (2, 8, 3, 3)}, with_loss=True)
    return initial_values(graph), _mxnet_values(_symbol())


@pytest.mark.parametrize("name", ["scale", "shift", "gain", "lstm_bias", "up_w"])
def test_constant_initializers_give_mxnets_values(pair, name):
    ours, theirs = pair
    assert ours[name].shape == DECLARED[name][0]
    np.testing.assert_array_equal(ours[name], theirs[name])


@pytest.mark.parametrize("name", ["xavier_w", "gauss_w", "msra_w", "uniform_w", "normal_w"])
def test_random_initializers_draw_mxnets_distribution(pair, name):
    ours, theirs = pair
    assert ours[name].shape == theirs[name].shape == DECLARED[name][0]
    assert abs(ours[name].mean()) < 0.1 * theirs[name].std()
    assert ours[name].std() == pytest.approx(theirs[name].std(), rel=0.08)
    assert np.abs(ours[name]).max() <= 1.2 * np.abs(theirs[name]).max()
    assert not np.array_equal(ours[name], theirs[name])         # our generator, not a copy of MXNet's numbers


def test_an_lstm_cell_starts_with_its_forget_bias():
    graph = load_graph("rnn-tiny")
    biases = [t for t in graph.tensors if t.name.endswith("i2h_bias")]
    assert biases, "rnn-tiny has no i2h_bias: the test checks nothing"
    values = initial_values(graph)
    for t in biases:
        n = t.shape[0] // 4
        np.testing.assert_array_equal(values[t.name][n:2 * n], 1.0)
        assert not values[t.name][:n].any() and not values[t.name][2 * n:].any()


@pytest.mark.parametrize("init,want", [("ones", 1.0), ("Zero", 0.0), ('["constant", {"value": 3}]', 3.0)])
def test_a_bare_initializer_name_as_gluons_export_writes_it(tmp_path, init, want):
    odd = mx.sym.var("odd", shape=(1, 8), attr={"__init__": init})
    path = tmp_path / "bare-symbol.json"
    _symbol(odd).save(str(path))
    values = initial_values(load_graph(str(path), shapes={"data": (2, 8, 3, 3)}, with_loss=True))
    np.testing.assert_array_equal(values["odd"], np.full((1, 8), want, np.float32))
    np.testing.assert_array_equal(values["odd"], _mxnet_values(_symbol(odd))["odd"])


@pytest.mark.parametrize("init,message", [
    ('["orthogonal", {"scale": 1.414}]', "declares the initializer 'orthogonal', which tofu does not draw"),
    ("[not json", "is not one MXNet wrote"),
    # Gluon's export names a constant parameter's own initializer as it registered it (its value is in the .params)
    ("Constant_odd_140737", "declares the initializer 'Constant_odd_140737' (a Gluon constant: its value is in"),
])
def test_an_initializer_tofu_does_not_draw_is_a_one_line_error_unless_loaded(capsys, tmp_path, init, message):
    odd = mx.sym.var("odd", shape=(1, 8), attr={"__init__": init})
    path = tmp_path / "odd-symbol.json"
    _symbol(odd).save(str(path))
    graph = load_graph(str(path), shapes={"data": (2, 8, 3, 3)}, with_loss=True)
    with pytest.raises(InitializerError, match=message.replace("(", r"\(")):
        initial_values(graph)
    rc, out, err = run(capsys, "run", str(path), "--shape", "data=2,8,3,3", "--workers", "2", "--steps", "1")
    assert rc == 2 and err.count("\n") == 1 and "'odd'" in err, err
    if init.startswith(("[not", "Constant_")):
        return          # MXNet cannot initialize it either (Gluon registered the constant's in its own process)
    # with its values loaded (MXNet's own initialization), the model runs
    mx.nd.save(str(tmp_path / "start.params"),
               {f"arg:{k}": mx.nd.array(v) for k, v in _mxnet_values(_symbol(odd)).items()})
    rc, out, err = run(capsys, "run", str(path), "--shape", "data=2,8,3,3", "--workers", "2", "--steps", "1",
                       "--load", str(tmp_path / "start.params"), "--check", "--json")
    assert rc == 0, err
