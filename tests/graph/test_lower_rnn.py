"""MXNet's fused RNN op unrolled at import (tofu/graph/lower_rnn.py): the unrolled graph, bound in MXNet, equals
the numpy reference; the reference equals MXNet's own oneDNN kernel (in a child process with oneDNN on); Gluon's
recurrent layers, exported, train partitioned equal to one device."""
import json
import os
import subprocess
import sys
from pathlib import Path

import mxnet as mx
import numpy as np
import pytest

from tofu import cli
from tofu.api import load_graph
from tofu.errors import GraphImportError
from tofu.graph.lower_rnn import forward, lower_rnn
from tofu.graph.mxnet_import import _entry_shapes, import_symbol

ROOT = Path(__file__).resolve().parents[2]
# (mode, layers, bidirectional, state_outputs, T, N, I, H)
CASES = [("lstm", 1, False, False, 5, 3, 4, 6), ("gru", 2, True, True, 4, 2, 3, 5),
         ("rnn_tanh", 2, False, True, 3, 4, 2, 3), ("lstm", 2, True, True, 3, 2, 4, 4),
         ("rnn_relu", 1, False, False, 3, 2, 2, 3), ("gru", 1, False, False, 1, 2, 3, 4)]
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def _inputs(case, seed=0):
    mode, L, bi, _, T, N, I, H = case
    D, G = 2 if bi else 1, GATES[mode]
    size = sum(G * H * ((I if layer == 0 else D * H) + H + 2) for layer in range(L) for _ in range(D))
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal((T, N, I)), rng.standard_normal(size) * 0.4, rng.standard_normal((L * D, N, H))]
    if mode == "lstm":
        values.append(rng.standard_normal((L * D, N, H)))
    return [v.astype(np.float32) for v in values]


def _fused(case):
    mode, L, bi, states, *_, H = case
    names = ["data", "params", "state"] + (["cell"] if mode == "lstm" else [])
    return mx.sym.RNN(*[mx.sym.Variable(n) for n in names], state_size=H, num_layers=L, mode=mode,
                      bidirectional=bi, state_outputs=states, name="rnn"), names


def _lowered(symbol, shapes):
    doc = json.loads(symbol.tojson())
    arg, out, _ = symbol.get_internals().infer_shape(**shapes)
    return mx.sym.load_json(json.dumps(lower_rnn(doc, _entry_shapes(doc, out))))


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-L{c[1]}{'-bi' if c[2] else ''}-T{c[4]}" for c in CASES])
def test_unrolled_graph_equals_the_reference(case):
    symbol, names = _fused(case)
    values = _inputs(case)
    lowered = _lowered(symbol, {n: v.shape for n, v in zip(names, values)})
    assert "RNN" not in {n["op"] for n in json.loads(lowered.tojson())["nodes"]}
    ex = lowered.bind(mx.cpu(), {n: mx.nd.array(v) for n, v in zip(names, values)}, grad_req="null")
    got = [o.asnumpy() for o in ex.forward()]
    mode, L, bi, states = case[:4]
    want = [w for w in forward(mode, L, bi, *[v.astype(np.float64) for v in values]) if w is not None]
    assert len(got) == (len(want) if states else 1)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_the_reference_equals_mxnets_onednn_kernel(tmp_path):
    """MXNet's native CPU kernels of RNN are the reason for the unrolling, so its oneDNN ones are the witness."""
    script = f"""
import numpy as np, mxnet as mx
from tests.graph.test_lower_rnn import CASES, _inputs
for case in CASES:
    mode, L, bi, states, *_, H = case
    out = mx.nd.RNN(*[mx.nd.array(v) for v in _inputs(case)], state_size=H, num_layers=L, mode=mode,
                    bidirectional=bi, state_outputs=True)
    np.save(f"{tmp_path}/{{CASES.index(case)}}.npy", np.concatenate([o.asnumpy().ravel() for o in out]))
"""
    env = dict(os.environ, MXNET_MKLDNN_ENABLED="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for i, case in enumerate(CASES):
        want = [w for w in forward(*case[:3], *[v.astype(np.float64) for v in _inputs(case)]) if w is not None]
        np.testing.assert_allclose(np.load(tmp_path / f"{i}.npy"), np.concatenate([w.ravel() for w in want]),
                                   rtol=1e-4, atol=1e-5)


def _gluon_net(tmp_path, layer):
    from mxnet import gluon

    class Net(gluon.HybridBlock):
        def __init__(self):
            super().__init__()
            self.emb = gluon.nn.Embedding(30, 8)
            self.rnn = layer
            self.out = gluon.nn.Dense(5, flatten=True)

        def hybrid_forward(self, F, x):
            return self.out(self.rnn(self.emb(x)))

    # the symbol Gluon's export writes, built without running the fused kernel (wrong or aborting without oneDNN)
    net = Net()
    net(mx.sym.var("data")).save(str(tmp_path / "net-symbol.json"))
    return str(tmp_path / "net-symbol.json")


LAYERS = {"gru": lambda rnn: rnn.GRU(8, num_layers=2, layout="NTC", bidirectional=True),
          "lstm": lambda rnn: rnn.LSTM(8, num_layers=1, layout="NTC"),
          "rnn": lambda rnn: rnn.RNN(8, num_layers=2, layout="NTC", activation="relu"),
          "lstm+gru": lambda rnn: _sequence(rnn.LSTM(8, layout="NTC"), rnn.GRU(8, layout="NTC"))}


def _sequence(*layers):
    from mxnet import gluon
    block = gluon.nn.HybridSequential()
    block.add(*layers)
    return block


@pytest.mark.parametrize("kind", sorted(LAYERS))
def test_gluon_layers_read_their_weights_and_tie_their_steps(tmp_path, kind):
    from mxnet.gluon import rnn
    path = _gluon_net(tmp_path, LAYERS[kind](rnn))
    graph = load_graph(path, shapes={"data": (4, 6)})
    ops = {n.op for n in graph.nodes}
    assert not ops & {"RNN", "_rnn_param_concat", "slice"}, ops     # Gluon's own weights, not cut from a vector
    readers = {graph.tensors[t].name for n in graph.nodes if n.op == "FullyConnected" for t in n.inputs}
    assert any(p.endswith("l0_i2h_weight") for p in readers), readers
    steps = [n for n in graph.nodes if n.op == "FullyConnected" and n.step is not None]
    assert {n.step for n in steps} == set(range(6))
    assert len({n.layer for n in steps}) == {"gru": 4, "lstm": 1, "rnn": 2, "lstm+gru": 2}[kind]


@pytest.mark.parametrize("kind,workers", [("gru", 2), ("lstm", 4), ("rnn", 2), ("lstm+gru", 2)])
def test_gluon_layers_train_partitioned_equal_to_one_device(tmp_path, capsys, kind, workers):
    from mxnet.gluon import rnn
    path = _gluon_net(tmp_path, LAYERS[kind](rnn))
    rc = cli.main(["run", path, "--shape", "data=4,6", "--input", "data=int:0:29", "--workers", str(workers),
                   "--check", "--steps", "2"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "check against one device" in out and ": passed (rtol" in out, out


def test_refused_settings_name_themselves():
    data, params, state = (mx.sym.Variable(n) for n in ("data", "params", "state"))
    shapes = {"data": (3, 2, 2), "params": (3 * 3 * (2 + 3 + 2) + 3 * 3 * (3 + 3 + 2),), "state": (2, 2, 3)}
    for attrs, what, changed in (({"projection_size": 2}, "projection_size", {"state": (2, 2, 2), "params": (120,)}),
                                 ({"p": 1.0}, "dropout p = 1.0", {})):
        symbol = mx.sym.RNN(data, params, state, state_size=3, num_layers=2, mode="gru", **attrs)
        with pytest.raises(GraphImportError, match=what):
            import_symbol(symbol, {**shapes, **changed})


@pytest.mark.parametrize("case", [c for c in CASES if c[1] > 1][:2], ids=lambda c: f"{c[0]}-L{c[1]}")
def test_dropout_between_layers_drops_each_output_but_the_last_layers(case):
    """The fused op with p > 0 drops every element of each layer's output but the last's, at each time step, in
    training only: unrolled, a Dropout of p on each of those step outputs; in inference, the reference."""
    mode, L, bi, states, T, N, I, H = case
    symbol, names = _fused(case)
    symbol = mx.sym.RNN(*[mx.sym.Variable(n) for n in names], state_size=H, num_layers=L, mode=mode,
                        bidirectional=bi, state_outputs=states, p=0.4, name="rnn")
    values = _inputs(case)
    lowered = _lowered(symbol, {n: v.shape for n, v in zip(names, values)})
    drops = [n for n in json.loads(lowered.tojson())["nodes"] if n["op"] == "Dropout"]
    assert len(drops) == T * (L - 1) and {float(n["attrs"]["p"]) for n in drops} == {0.4}
    ex = lowered.bind(mx.cpu(), {n: mx.nd.array(v) for n, v in zip(names, values)}, grad_req="null")
    ref = forward(mode, L, bi, *[v.astype(np.float64) for v in values])
    np.testing.assert_allclose(ex.forward(is_train=False)[0].asnumpy(), ref[0], rtol=1e-4, atol=1e-5)
    mx.random.seed(0)
    trained = ex.forward(is_train=True)[0].asnumpy()
    assert not np.allclose(trained, ref[0], rtol=1e-4, atol=1e-5)      # the masks drop something


def test_a_gluon_lstm_with_dropout_trains_partitioned(tmp_path, capsys):
    """Gluon's LSTM(num_layers=2, dropout=0.5), exported: refused before; partitioned, it equals one device under
    ``--check`` (which runs both with Dropout off)."""
    from mxnet.gluon import rnn
    path = _gluon_net(tmp_path, rnn.LSTM(8, num_layers=2, layout="NTC", dropout=0.5))
    assert sum(n.op == "Dropout" for n in load_graph(path, shapes={"data": (4, 6)}).nodes) == 6
    rc = cli.main(["run", path, "--shape", "data=4,6", "--input", "data=int:0:29", "--workers", "2", "--check",
                   "--steps", "2"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert ": passed (rtol" in out, out


def test_a_flat_parameter_vector_trains_partitioned(tmp_path, capsys):
    """Parameters that are one vector (not Gluon's joined weights) are sliced; their shape is kept for MXNet."""
    names = ("data", "rnn_parameters", "rnn_state", "rnn_state_cell")
    out = mx.sym.RNN(*[mx.sym.Variable(n) for n in names], state_size=8, num_layers=2, mode="lstm",
                     bidirectional=True, name="rnn")
    mx.sym.FullyConnected(mx.sym.SequenceLast(out), num_hidden=5, name="fc").save(str(tmp_path / "flat.json"))
    rc = cli.main(["run", str(tmp_path / "flat.json"), "--shape", "data=6,8,4", "--shape", "rnn_state=4,8,8",
                   "--shape", "rnn_state_cell=4,8,8", "--workers", "2", "--check", "--steps", "2"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert ": passed (rtol" in out, out


@pytest.mark.parametrize("case", CASES[:4], ids=[f"{c[0]}-L{c[1]}{'-bi' if c[2] else ''}" for c in CASES[:4]])
def test_states_given_by_variables_are_inferred_as_mxnet_infers_them(case):
    """Initial states that are variables (not Gluon's zeros) keep the shapes MXNet infers from the fused op, which
    the unrolled graph's row slices cannot infer backwards; they import with only the data's shape given (they
    were left unknown, a refusal naming the data), and are parameters of that shape."""
    symbol, names = _fused(case)
    mode, L, bi, _, T, N, I, H = case
    graph = import_symbol(mx.sym.MakeLoss(mx.sym.sum(symbol[0])), {"data": (T, N, I)})
    for name in names[2:]:
        assert graph.tensor(name).shape == (L * (2 if bi else 1), N, H)
        assert graph.tensor(name).role.name == "PARAM"


def test_states_left_to_inference_train_partitioned(tmp_path, capsys):
    names = ("data", "rnn_parameters", "rnn_state", "rnn_state_cell")
    out = mx.sym.RNN(*[mx.sym.Variable(n) for n in names], state_size=6, num_layers=1, mode="lstm",
                     bidirectional=True, name="rnn")
    mx.sym.FullyConnected(mx.sym.SequenceLast(out), num_hidden=3, name="fc").save(str(tmp_path / "states.json"))
    rc = cli.main(["run", str(tmp_path / "states.json"), "--shape", "data=5,4,3", "--workers", "2", "--check",
                   "--steps", "2"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert ": passed (rtol" in out, out


def test_a_state_made_by_another_rnn_node():
    """Two fused nodes, the second starting from the first's last states: both unrolled, as chained in numpy."""
    data, p1, p2, h0 = (mx.sym.Variable(n) for n in ("data", "p1", "p2", "h0"))
    first = mx.sym.RNN(data, p1, h0, state_size=4, num_layers=1, mode="gru", state_outputs=True, name="first")
    second = mx.sym.RNN(first[0], p2, first[1], state_size=4, num_layers=1, mode="gru", name="second")
    rng = np.random.default_rng(1)
    values = {"data": rng.standard_normal((3, 2, 5)), "p1": rng.standard_normal(3 * 4 * (5 + 4 + 2)) * 0.4,
              "p2": rng.standard_normal(3 * 4 * (4 + 4 + 2)) * 0.4, "h0": rng.standard_normal((1, 2, 4))}
    lowered = _lowered(second, {k: v.shape for k, v in values.items()})
    got = lowered.bind(mx.cpu(), {k: mx.nd.array(v) for k, v in values.items()}, grad_req="null").forward()[0]
    out, hy, _ = forward("gru", 1, False, values["data"], values["p1"], values["h0"])
    want = forward("gru", 1, False, out, values["p2"], hy)[0]
    np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-4, atol=1e-5)
