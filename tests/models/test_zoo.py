"""Tests of tofu.models: shapes, parameter counts against hand formulas, training steps, graph attributes."""
import json
import math
import os

for _key, _value in (("MXNET_SUBGRAPH_BACKEND", "NONE"), ("MXNET_SUBGRAPH_VERBOSE", "0"), ("OMP_NUM_THREADS", "1")):
    os.environ.setdefault(_key, _value)

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from tofu.errors import TofuError, UnknownModelError  # noqa: E402
from tofu.models import (GPT_MODELS, PAPER_EXTRA_MODELS, PAPER_MODELS, SMALL_MODELS, ModelOptions,  # noqa: E402
                         build_model, model_names)


def param_count(model) -> int:
    """Sum of argument sizes except the inputs, from MXNet's shape inference."""
    args, _, _ = model.symbol.infer_shape(**model.shapes())
    names = model.symbol.list_arguments()
    return sum(math.prod(shape) for name, shape in zip(names, args) if name not in model.shapes())


def wresnet_params_by_hand(units, widen, base=64, classes=1000, channels=3) -> int:
    """Conv (no bias), BatchNorm (gamma, beta) and FC parameters of a bottleneck ResNet whose every convolution
    has ``widen`` times the channels (the paper's Wide ResNet)."""
    conv_bn = lambda cin, cout, k: k * k * cin * cout + 2 * cout  # noqa: E731
    total = conv_bn(channels, base * widen, 7)
    cin = base * widen
    for stage, n in enumerate(units):
        inner = base * 2 ** stage * widen
        out = 4 * inner
        for unit in range(n):
            total += conv_bn(cin, inner, 1) + conv_bn(inner, inner, 3) + conv_bn(inner, out, 1)
            if unit == 0:  # every stage's first unit changes the width, so it has a projection shortcut
                total += conv_bn(cin, out, 1)
            cin = out
    return total + cin * classes + classes


def test_names():
    assert len(PAPER_MODELS) == 21 and len(set(PAPER_MODELS)) == 21
    assert PAPER_MODELS[0] == "wresnet-50-4" and PAPER_MODELS[-1] == "rnn-10-8k"
    assert PAPER_EXTRA_MODELS == ("rnn-4-8k",)
    assert model_names() == PAPER_MODELS + PAPER_EXTRA_MODELS + GPT_MODELS + SMALL_MODELS + ("gpt-tiny",)


def test_every_model_infers_all_shapes():
    for name in model_names():
        model = build_model(name)
        args, outs, aux = model.symbol.get_internals().infer_shape(**model.shapes())
        assert all(shape and all(d > 0 for d in shape) for shape in args + outs + aux), name
        assert model.symbol.list_outputs() == ["softmax_output"]
        assert [n for n, _ in model.input_shapes] == ["data", "softmax_label"]
        assert model.symbol.list_arguments()[0] == "data"


def test_hand_formula_matches_published_resnet_counts():
    assert wresnet_params_by_hand((3, 4, 6, 3), 1) == 25_557_032    # torchvision resnet50
    assert wresnet_params_by_hand((3, 4, 23, 3), 1) == 44_549_160   # torchvision resnet101
    assert wresnet_params_by_hand((3, 8, 36, 3), 1) == 60_192_808   # torchvision resnet152


@pytest.mark.parametrize("depth,units", [(50, (3, 4, 6, 3)), (101, (3, 4, 23, 3)), (152, (3, 8, 36, 3))])
@pytest.mark.parametrize("widen", [1, 2, 4, 6, 8, 10])
def test_wresnet_param_count(depth, units, widen):
    model = build_model(f"wresnet-{depth}-{widen}", ModelOptions(batch=2))
    assert param_count(model) == wresnet_params_by_hand(units, widen)
    assert model.shapes() == {"data": (2, 3, 224, 224), "softmax_label": (2,)}


def _param_shapes(name):
    symbol = build_model(name).symbol
    return dict(zip(symbol.list_arguments(), symbol.infer_shape(data=(1, 3, 224, 224))[0]))


@pytest.mark.parametrize("depth", [50, 152])
@pytest.mark.parametrize("widen", [4, 10])
def test_wresnet_widen_multiplies_every_channel(depth, widen):
    """The paper's convention, against ResNet (widen 1, checked above against torchvision's counts): every
    parameter keeps its name, and every channel dimension is ``widen`` times ResNet's, except the image's 3
    input channels of the stem and the 1000 classes of the head."""
    resnet, wide = _param_shapes(f"wresnet-{depth}-1"), _param_shapes(f"wresnet-{depth}-{widen}")
    assert wide.keys() == resnet.keys()
    for name, shape in resnet.items():
        if name in ("data", "softmax_label"):
            continue
        if name == "stem_conv_weight":
            expected = (shape[0] * widen, 3, 7, 7)
        elif name == "head_fc_weight":
            expected = (1000, shape[1] * widen)
        elif name == "head_fc_bias":
            expected = shape
        elif name.endswith("_weight"):  # convolution (out, in, kh, kw)
            expected = (shape[0] * widen, shape[1] * widen, *shape[2:])
        else:                           # BatchNorm gamma and beta
            expected = (shape[0] * widen,)
        assert wide[name] == expected, name
    assert wide["stage4_unit1_conv3_weight"] == (2048 * widen, 512 * widen, 1, 1)


@pytest.mark.parametrize("name,layers,hidden", [(f"rnn-{n}-{h}k", n, h * 1024) for n in (6, 8, 10) for h in (4, 6, 8)]
                         + [("rnn-4-8k", 4, 8192), ("rnn-2-64", 2, 64)])
def test_rnn_param_count(name, layers, hidden):
    options = ModelOptions(batch=8, seq_len=3, vocab=1000)
    model = build_model(name, options)
    H, V = hidden, options.vocab
    assert param_count(model) == V * H + layers * (4 * H * (H + H) + 2 * 4 * H) + H * V + V
    assert model.shapes() == {"data": (8, 3), "softmax_label": (8, 3)}


def test_default_options():
    assert build_model("wresnet-152-10").batch == 32
    rnn = build_model("rnn-10-8k")
    assert rnn.shapes() == {"data": (128, 20), "softmax_label": (128, 20)}
    assert rnn.symbol.infer_shape(**rnn.shapes())[1] == [(128 * 20, 10000)]
    assert build_model("mlp").shapes() == {"data": (16, 32), "softmax_label": (16,)}


@pytest.mark.parametrize("name", ["wresnet-7-4", "wresnet-50-3", "rnn-x", "rnn-0-4k", "foo", "wresnet", ""])
def test_unknown_name(name):
    with pytest.raises(UnknownModelError, match="unknown model"):
        build_model(name)


@pytest.mark.parametrize("options", [dict(batch=0), dict(batch=-3), dict(seq_len=0), dict(vocab=0)])
def test_bad_options(options):
    with pytest.raises(TofuError):
        build_model("rnn-tiny", ModelOptions(**options))


@pytest.mark.parametrize("name", SMALL_MODELS)
def test_small_model_trains(name):
    model = build_model(name)
    inputs = model.shapes()
    grad_req = {n: "null" if n in inputs else "write" for n in model.symbol.list_arguments()}
    exe = model.symbol.simple_bind(mx.cpu(), grad_req=grad_req, **inputs)
    rng = np.random.default_rng(0)
    classes = model.symbol.infer_shape(**inputs)[1][0][1]
    for arg_name, array in exe.arg_dict.items():
        if arg_name == "data":
            tokens = model.family == "rnn"
            array[:] = rng.integers(0, 20, array.shape) if tokens else rng.standard_normal(array.shape)
        elif arg_name == "softmax_label":
            array[:] = rng.integers(0, classes, array.shape)
        elif arg_name.endswith("gamma"):
            array[:] = 1.0
        else:
            array[:] = 0.1 * rng.standard_normal(array.shape)
    out = exe.forward(is_train=True)[0].asnumpy()
    exe.backward()
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)
    for arg_name, grad in exe.grad_dict.items():
        if grad is not None:
            grad = grad.asnumpy()
            assert np.isfinite(grad).all(), arg_name
            assert np.abs(grad).sum() > 0, arg_name


def _op_nodes(symbol):
    return [n for n in json.loads(symbol.tojson())["nodes"] if n["op"] != "null"]


def test_wresnet_ops_carry_layer():
    nodes = _op_nodes(build_model("wresnet-tiny").symbol)
    layers = {n["attrs"]["__tofu_layer__"] for n in nodes}  # KeyError if an op lacks it
    assert layers == {"stem", "head"} | {f"stage{s}_unit1" for s in (1, 2, 3, 4)}
    assert len({n["name"] for n in nodes}) == len(nodes)


def test_rnn_cell_ops_carry_step():
    layers, hidden, steps = 2, 16, 4
    # Independent reference: the ops one LSTMCell call creates, counted on a fresh cell.
    cell = mx.rnn.LSTMCell(hidden, prefix="ref_")
    out, _ = cell(mx.sym.var("x"), [mx.sym.var("h"), mx.sym.var("c")])
    per_call = len(_op_nodes(out))
    nodes = _op_nodes(build_model("rnn-tiny").symbol)
    stepped = [n for n in nodes if "__tofu_step__" in n.get("attrs", {})]
    assert all(n["attrs"]["__tofu_layer__"] in ("embed", "head") for n in nodes if n not in stepped)
    begin_states = 2 * layers  # h and c zeros of each layer, tagged with step 0
    assert len(stepped) == layers * steps * per_call + begin_states
    for layer in range(layers):
        for step in range(steps):
            mine = [n for n in stepped if n["attrs"]["__tofu_layer__"] == f"lstm_l{layer}"
                    and n["attrs"]["__tofu_step__"] == str(step)]
            assert len(mine) == per_call + (2 if step == 0 else 0)
            assert all(n["name"].startswith(f"lstm_l{layer}_") for n in mine)
    assert len({n["name"] for n in nodes}) == len(nodes)


def test_builds_are_deterministic():
    assert build_model("rnn-tiny").symbol.tojson() == build_model("rnn-tiny").symbol.tojson()
    assert build_model("wresnet-tiny").symbol.tojson() == build_model("wresnet-tiny").symbol.tojson()


def test_rnn_output_rows_are_sequence_major():
    """Row b * seq_len + t of the output depends on sequence b's tokens up to step t only."""
    model = build_model("rnn-tiny")
    batch, steps = model.shapes()["data"]
    exe = model.symbol.simple_bind(mx.cpu(), grad_req="null", **model.shapes())
    rng = np.random.default_rng(1)
    for arg_name, array in exe.arg_dict.items():
        array[:] = rng.integers(0, 20, array.shape) if arg_name == "data" else rng.standard_normal(array.shape)
    tokens = exe.arg_dict["data"].asnumpy()
    before = exe.forward()[0].asnumpy()
    b, t = 2, 1
    tokens[b, t] = (tokens[b, t] + 1) % 20
    exe.arg_dict["data"][:] = tokens
    changed = np.abs(exe.forward()[0].asnumpy() - before).max(axis=1) > 0
    expected = np.zeros(batch * steps, dtype=bool)
    expected[b * steps + t:(b + 1) * steps] = True
    np.testing.assert_array_equal(changed, expected)
