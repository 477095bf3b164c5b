"""Bad model files and shapes end in one line ``tofu: error: ...`` and status 2, never a traceback or a signal
(issue 10, item 2): files that are not UTF-8, dangling node or output indices (checked before MXNet reads
them: it follows them without bounds checks), cycles, extents MXNet 1.9.1 cannot index.

The CLI runs in-process: with the checks, nothing here reaches MXNet in a form that can crash it.
"""
import json

import mxnet as mx
import pytest

from tofu import cli
from tofu.errors import GraphImportError, InputShapeError
from tofu.graph import import_symbol, load_symbol_file, parse_shape


def mlp_document() -> dict:
    """data -> fc1 -> relu -> fc2 -> softmax, as MXNet writes it (nodes in topological order)."""
    x = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=4, name="fc1")
    x = mx.sym.FullyConnected(mx.sym.Activation(x, act_type="relu", name="relu"), num_hidden=2, name="fc2")
    return json.loads(mx.sym.SoftmaxOutput(x, name="softmax").tojson())


def node_index(doc: dict, name: str) -> int:
    return next(i for i, n in enumerate(doc["nodes"]) if n["name"] == name)


def plan(capsys, path, shape="data=2,3"):
    rc = cli.main(["plan", str(path), "--shape", shape, "--workers", "2"])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(rc, out, err, *words):
    assert rc == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tofu: error: "), err
    for w in words:
        assert w in lines[0], lines[0]


def write(tmp_path, doc: dict | str | bytes, name="model-symbol.json"):
    path = tmp_path / name
    if isinstance(doc, bytes):
        path.write_bytes(doc)
    else:
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_the_unmodified_document_plans(tmp_path, capsys):
    """The reference for every corruption below: the same file, untouched, plans."""
    rc, out, err = plan(capsys, write(tmp_path, mlp_document()))
    assert rc == 0, err


def test_a_file_that_is_not_utf8(tmp_path, capsys):
    text = json.dumps(mlp_document()).replace('"fc1"', '"fc\xe91"').encode("latin-1")
    assert_one_line_error(*plan(capsys, write(tmp_path, text)), "not UTF-8", "model-symbol.json")


@pytest.mark.parametrize("output", [1, 3, 7, -1])
def test_an_input_naming_an_output_its_producer_lacks(tmp_path, capsys, output):
    doc = mlp_document()
    relu = doc["nodes"][node_index(doc, "relu")]
    relu["inputs"][0][1] = output            # fc1 has one output
    assert_one_line_error(*plan(capsys, write(tmp_path, doc)), "node 'relu'", f"output {output} of node 'fc1'",
                          "1 visible output")


def test_a_head_naming_an_output_its_producer_lacks(tmp_path, capsys):
    doc = mlp_document()
    doc["heads"] = [[len(doc["nodes"]) - 1, 2, 0]]
    assert_one_line_error(*plan(capsys, write(tmp_path, doc)), "a head", "output 2 of node 'softmax'")


@pytest.mark.parametrize("target", ["itself", "later", "missing"])
def test_an_input_naming_a_node_that_is_not_earlier(tmp_path, capsys, target):
    """A cycle (MXNet writes nodes in topological order, so any back edge is a forward index) or a node that
    does not exist."""
    doc = mlp_document()
    j = node_index(doc, "relu")
    doc["nodes"][j]["inputs"][0][0] = {"itself": j, "later": j + 1, "missing": 99}[target]
    assert_one_line_error(*plan(capsys, write(tmp_path, doc)), "node 'relu'", "not an earlier node")


@pytest.mark.parametrize("inputs", [[[0]], [["0", 0, 0]], [[0, 0, 0, 0]], "x"])
def test_malformed_input_entries(tmp_path, capsys, inputs):
    doc = mlp_document()
    doc["nodes"][node_index(doc, "fc1")]["inputs"] = inputs
    assert_one_line_error(*plan(capsys, write(tmp_path, doc)), "fc1")


@pytest.mark.parametrize("shape", ["data=2147483648,3", "data=2,99999999999"])
def test_an_extent_over_2_31(tmp_path, capsys, shape):
    assert_one_line_error(*plan(capsys, write(tmp_path, mlp_document()), shape), "2^31-1", "'data'")


def test_a_flattened_extent_over_2_31(tmp_path, capsys):
    """Each extent fits, the flattened one does not: MXNet's 32-bit shapes wrap it to 0; the line says so."""
    path = tmp_path / "fc-symbol.json"
    mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=4, name="fc").save(str(path))
    assert_one_line_error(*plan(capsys, path, "data=2,65536,65536"), "fc_weight", "over 2^31-1 elements")


def test_parse_shape_and_import_symbol_raise_typed_errors():
    with pytest.raises(InputShapeError, match="2\\^31-1"):
        parse_shape("data=4294967296")
    x = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2)
    with pytest.raises(InputShapeError, match="2\\^31-1"):
        import_symbol(x, {"data": (2**31, 1)})
    assert parse_shape(f"data={2**31 - 1},1") == ("data", (2**31 - 1, 1))


def test_load_symbol_file_raises_graph_import_error(tmp_path):
    with pytest.raises(GraphImportError, match="not UTF-8"):
        load_symbol_file(write(tmp_path, b"\xff\xfe{}"))
    with pytest.raises(GraphImportError, match="nested too deeply"):
        load_symbol_file(write(tmp_path, "[" * 100000 + "]" * 100000))
