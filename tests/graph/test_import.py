"""Graph import: the IR agrees with MXNet's own shape inference entry by entry, for every zoo model."""
import json

import mxnet as mx
import numpy as np
import pytest

from tofu.errors import GraphImportError, InputShapeError
from tofu.graph import Role, import_symbol, load_symbol_file, parse_shape
from tofu.models import ModelOptions, build_model, model_names


@pytest.mark.parametrize("name", model_names())
def test_ir_shapes_equal_mxnet_infer_shape(name):
    model = build_model(name)
    graph = import_symbol(model.symbol, model.shapes(), name=name)
    internals = model.symbol.get_internals()
    _, expected, _ = internals.infer_shape(**model.shapes())
    names = internals.list_outputs()
    assert [t.name for t in graph.tensors] == names
    assert [t.shape for t in graph.tensors] == [tuple(s) for s in expected]
    # every node's inputs are tensors that exist before it (topological order)
    produced = {t.id for t in graph.tensors if t.producer is None}
    for node in graph.nodes:
        assert set(node.inputs) <= produced
        produced |= set(node.outputs)
    assert graph.param_bytes == 4 * sum(
        int(mx.nd.zeros(s).size) for n, s in zip(model.symbol.list_arguments(),
                                                 model.symbol.infer_shape(**model.shapes())[0])
        if n not in model.shapes())


def test_multi_output_ops_and_fan_out():
    x = mx.sym.var("data")
    fc = mx.sym.FullyConnected(x, num_hidden=4, name="fc")
    bn = mx.sym.BatchNorm(fc, name="bn", output_mean_var=True)
    parts = mx.sym.split(bn[0], num_outputs=2, axis=1, name="sp")
    y = parts[0] * parts[1] + parts[0]                # parts[0] fans out to two consumers
    out = mx.sym.SoftmaxOutput(mx.sym.broadcast_add(y, mx.sym.reshape(bn[1], (1, 4)).slice_axis(1, 0, 2)),
                               name="softmax")
    g = import_symbol(out, {"data": (3, 5), "softmax_label": (3,)})
    bn_node = next(n for n in g.nodes if n.op == "BatchNorm")
    assert [g.tensor(t).shape for t in bn_node.outputs] == [(3, 4), (4,), (4,)]
    split = next(n for n in g.nodes if n.op == "SliceChannel")
    assert len(split.outputs) == 2 and split.attrs["num_outputs"] == 2 and split.attrs["axis"] == 1
    assert len(g.consumers(split.outputs[0])) == 2
    assert g.tensor("bn_moving_mean").role is Role.AUX
    assert g.tensor("fc_weight").role is Role.PARAM
    assert g.tensor("softmax_label").role is Role.LABEL
    assert g.tensor("data").role is Role.DATA


def test_bn_hidden_outputs_are_not_tensors():
    bn = mx.sym.BatchNorm(mx.sym.var("data"), name="bn")
    g = import_symbol(bn, {"data": (2, 3, 4, 4)})
    assert len(g.nodes[0].outputs) == 1


def test_rnn_ops_carry_layer_and_step():
    model = build_model("rnn-tiny")
    g = import_symbol(model.symbol, model.shapes())
    cell_ops = [n for n in g.nodes if n.layer and n.layer.startswith("lstm_l")]
    steps = {(n.layer, n.step) for n in cell_ops}
    assert steps == {(f"lstm_l{l}", t) for l in range(2) for t in range(4)}
    fcs = [n for n in cell_ops if n.op == "FullyConnected"]
    # each step of each layer has its i2h and h2h matmul
    assert len(fcs) == 2 * 4 * 2


def test_rnn_step_from_mxnet_names_without_attributes():
    cell = mx.rnn.LSTMCell(8, prefix="lstm_l0_")
    outs, _ = cell.unroll(3, mx.sym.var("data"), layout="NTC", merge_outputs=True)
    g = import_symbol(outs, {"data": (2, 3, 4)})
    i2h = sorted((n.step, n.layer) for n in g.nodes if n.name.endswith("_i2h"))
    assert i2h == [(0, "lstm_l0"), (1, "lstm_l0"), (2, "lstm_l0")]


def test_attrs_are_parsed_into_values():
    model = build_model("wresnet-tiny")
    g = import_symbol(model.symbol, model.shapes())
    conv = next(n for n in g.nodes if n.op == "Convolution")
    assert isinstance(conv.attrs["kernel"], tuple) and all(isinstance(k, int) for k in conv.attrs["kernel"])
    assert isinstance(conv.attrs["num_filter"], int)
    assert conv.attrs["no_bias"] is True


def test_symbol_file_round_trip(tmp_path):
    model = build_model("mlp", ModelOptions(batch=2))
    path = tmp_path / "mlp.json"
    model.symbol.save(str(path))
    g = import_symbol(load_symbol_file(path), model.shapes())
    assert g.op_counts() == import_symbol(model.symbol, model.shapes()).op_counts()


def test_a_symbol_file_without_its_version_loads_without_mxnets_log(tmp_path):
    """A symbol file with no ``mxnet_version`` (written by hand, or by an old MXNet) is upgraded as MXNet loads
    it, and MXNet logged two lines of its own ("Loading symbol saved by previous version v0.8.0") on every
    command: they are kept from the terminal, and the file reads as the one with its version."""
    import json
    import os
    import subprocess
    import sys

    model = build_model("mlp", ModelOptions(batch=2))
    doc = json.loads(model.symbol.tojson())
    del doc["attrs"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    g = import_symbol(load_symbol_file(path), model.shapes())
    assert [(t.name, t.shape) for t in g.tensors] == \
        [(t.name, t.shape) for t in import_symbol(model.symbol, model.shapes()).tensors]
    shapes = [f"--shape={n}={','.join(map(str, s))}" for n, s in model.shapes().items()]
    done = subprocess.run([sys.executable, "-m", "tofu", "plan", str(path), *shapes, "--workers", "2"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    assert "previous version" not in done.stderr and "../src/" not in done.stderr, done.stderr


def test_a_symbol_file_of_mxnet_0_8_with_its_parameters_under_param_loads(tmp_path):
    """MXNet 0.8 wrote an operator's parameters under 'param' (its loader upgrades them into 'attrs'): the file was
    refused ("MXNet rejects operator 'FullyConnected' with {}"), since the check before loading read 'attrs' and
    'attr' only; it now reads as the file MXNet writes today, shapes and attributes alike."""
    import json

    model = build_model("mlp", ModelOptions(batch=2))
    doc = json.loads(model.symbol.tojson())
    del doc["attrs"]
    for node in doc["nodes"]:
        if "attrs" in node:
            node["param"] = node.pop("attrs")
    path = tmp_path / "v08.json"
    path.write_text(json.dumps(doc))
    g, today = import_symbol(load_symbol_file(path), model.shapes()), import_symbol(model.symbol, model.shapes())
    assert [(t.name, t.shape) for t in g.tensors] == [(t.name, t.shape) for t in today.tensors]
    assert [(n.op, dict(n.attrs)) for n in g.nodes] == [(n.op, dict(n.attrs)) for n in today.nodes]


@pytest.mark.parametrize("text,message", [
    ("{not json", "not valid JSON"),
    ('{"a": 1}', "not an MXNet symbol file"),
    ('{"nodes": [{"op": "NoSuchOp", "name": "x", "inputs": []}], "arg_nodes": [], "heads": [[0, 0, 0]]}',
     "MXNet cannot load"),
])
def test_bad_symbol_files(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(GraphImportError, match=message):
        load_symbol_file(path)


def test_missing_and_wrong_shapes():
    model = build_model("mlp")
    with pytest.raises(InputShapeError, match="no input named"):
        import_symbol(model.symbol, {"dat": (2, 32)})
    # the label alone leaves the data's type unknown too: the shape to give is named (MXNet's type error was)
    with pytest.raises(InputShapeError, match=r"\(softmax_label=2\) leave unknown: data \(a variable: give its shape\), "
                                              r"fc1_weight"):
        import_symbol(model.symbol, {"softmax_label": (2,)})
    with pytest.raises(InputShapeError, match="cannot infer"):
        import_symbol(model.symbol, {"data": (2, 32), "softmax_label": (3, 7)})


def test_a_shape_left_unknown_names_the_variable_to_give():
    """A variable nothing infers (read through a squeeze, which infers no shape backwards) is named, and only
    it and what depends on it: MXNet's full inference gives no shape at all then, its partial one the others."""
    data, extra = mx.sym.Variable("data"), mx.sym.Variable("extra")
    out = mx.sym.FullyConnected(data, num_hidden=4, name="fc") + mx.sym.squeeze(extra, axis=0)
    with pytest.raises(InputShapeError, match=r"leave unknown: extra \(a variable: give its shape\)$"):
        import_symbol(mx.sym.MakeLoss(mx.sym.sum(out)), {"data": (2, 3)})
    graph = import_symbol(mx.sym.MakeLoss(mx.sym.sum(out)), {"data": (2, 3), "extra": (1, 2, 4)})
    assert graph.tensor("extra").shape == (1, 2, 4)


@pytest.mark.parametrize("text", ["data", "data=", "data=1,x", "data=0,3", "=1,2"])
def test_parse_shape_rejects(text):
    with pytest.raises(InputShapeError):
        parse_shape(text)


def test_parse_shape():
    assert parse_shape("data=1,3,224,224") == ("data", (1, 3, 224, 224))


def test_a_declared_input_type_is_kept():
    """An input the symbol declares int32 (softmax's lengths) stays int32, with what it flows into, as MXNet's
    infer_type has it; the others get the import's float32. Before, every input given a shape was typed float32,
    and MXNet's masked softmax refused the float lengths at run time."""
    x, valid = mx.sym.var("data"), mx.sym.var("valid", dtype="int32")
    length = mx.sym.broadcast_axis(mx.sym.reshape(valid, shape=(3, 1)), axis=1, size=2, name="length")
    out = mx.sym.softmax(mx.sym.FullyConnected(x, num_hidden=6, name="fc"), name="att")
    out = mx.sym.softmax(mx.sym.reshape(out, shape=(3, 5, 2)), length, use_length=True, axis=1, name="masked")
    g = import_symbol(mx.sym.MakeLoss(mx.sym.sum(out), name="loss"), {"data": (5, 4), "valid": (3,)})
    names, types = out.get_internals().list_outputs(), out.get_internals().infer_type(data="float32")[1]
    expected = {n: np.dtype(t).name for n, t in zip(names, types)}
    got = {t.name: t.dtype for t in g.tensors if t.name in expected}
    assert got["valid"] == got["length_output"] == "int32" and got["data"] == "float32"
    assert got == {n: expected[n] for n in got}


def test_declared_shapes_are_named_not_taken(tmp_path, capsys):
    """``mx.sym.var(name, shape=...)`` declares a shape, which MXNet's inference uses as a hint. tofu names the
    declared shapes when it asks for --shape but does not take them as inputs' shapes: a variable given a shape is
    an input, and a declared weight would silently stay untrained (tried: 4 parameters of 28 trained). Given
    --shape for the data alone, the declared weight is inferred a parameter; a malformed declaration is one line."""
    from tofu import cli
    from tofu.api import load_graph
    from tofu.graph.ir import Role
    from tofu.graph.mxnet_import import declared_shapes

    s = mx.sym
    fc = s.FullyConnected(s.var("data", shape=(8, 6)), weight=s.var("fc_weight", shape=(4, 6)), num_hidden=4,
                          name="fc")
    s.SoftmaxOutput(fc, s.var("softmax_label"), name="softmax").save(str(tmp_path / "declared.json"))
    fc = s.FullyConnected(s.var("data", shape=(0, 6)), num_hidden=4, name="fc")
    s.SoftmaxOutput(fc, s.var("softmax_label"), name="softmax").save(str(tmp_path / "partial.json"))
    assert declared_shapes(mx.sym.load(str(tmp_path / "declared.json"))) == {"data": (8, 6), "fc_weight": (4, 6)}
    assert declared_shapes(mx.sym.load(str(tmp_path / "partial.json"))) == {}
    assert cli.main(["plan", str(tmp_path / "declared.json"), "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert "give its input shapes with --shape" in err and "declare data=8,6, fc_weight=4,6" in err, err
    assert cli.main(["plan", str(tmp_path / "partial.json"), "--workers", "2"]) == 2
    assert "its variables declare" not in capsys.readouterr().err
    roles = {t.name: t.role for t in load_graph(str(tmp_path / "declared.json"), shapes={"data": (8, 6)}).tensors}
    assert roles["fc_weight"] is Role.PARAM and roles["data"] is Role.DATA
    doc = json.loads((tmp_path / "declared.json").read_text())
    doc["nodes"][0]["attrs"]["__shape__"] = "(8, six)"
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    assert cli.main(["plan", str(tmp_path / "bad.json"), "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert "variable 'data' declares the shape '(8, six)'" in err and len(err.strip().splitlines()) == 1


def test_a_shape_given_for_a_parameter_is_refused(tmp_path, capsys):
    """--shape for a variable an op reads as its weight made it an input, fed with each batch and never trained
    (4 of 28 parameters trained, exit status 0): now a one-line error naming it and its reader; given the data's
    shape alone the weight is a parameter."""
    from tofu import cli

    s = mx.sym
    fc = s.FullyConnected(s.var("data"), weight=s.var("w"), num_hidden=4, name="fc")
    bn = s.BatchNorm(fc, gamma=s.var("g"), name="bn")
    s.SoftmaxOutput(bn, s.var("softmax_label"), name="softmax").save(str(tmp_path / "m.json"))
    for extra, message in ((["--shape", "w=4,6"], "'w', which 'fc' (FullyConnected) reads as its weight"),
                           (["--shape", "g=4"], "'g', which 'bn' (BatchNorm) reads as its gamma")):
        assert cli.main(["plan", str(tmp_path / "m.json"), "--shape", "data=8,6", *extra, "--workers", "2"]) == 2
        err = capsys.readouterr().err
        assert message in err and "never trained" in err and len(err.strip().splitlines()) == 1, err
    assert cli.main(["inspect", str(tmp_path / "m.json"), "--shape", "data=8,6"]) == 0
    assert "parameters: 36 " in capsys.readouterr().out       # w 24, fc_bias 4, g 4, bn_beta 4


def test_a_loss_reads_its_label_from_an_input_not_a_parameter():
    """A loss's target named neither *label nor given a shape (MXNet infers it) was taken for a parameter:
    initialised, held by the plan as weights, the printed loss the mean of the output. Now every variable a loss
    reads after its first input, directly or through a reshape, is a label."""
    s = mx.sym
    h = s.FullyConnected(s.var("data"), num_hidden=4, name="fc")
    heads = s.Group([s.LinearRegressionOutput(s.slice_axis(h, axis=1, begin=0, end=1), s.var("target"), name="reg"),
                     s.SoftmaxOutput(h, s.reshape(s.var("classes"), shape=(-1,)), name="cls")])
    g = import_symbol(heads, {"data": (6, 3), "classes": (2, 3)})
    roles = {t.name: (t.role, t.shape) for t in g.tensors if t.producer is None}
    assert roles["target"] == (Role.LABEL, (6,)) and roles["classes"] == (Role.LABEL, (2, 3))
    assert roles["fc_weight"][0] is Role.PARAM and roles["data"][0] is Role.DATA
