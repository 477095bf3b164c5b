"""A model declared in float64 (``mx.sym.var('data', dtype='float64')``, its parameters inferred float64): the glue
the rewrite adds is made in the tensor's type. The zero shard of a bias that a split of the reduced dimension adds
on the other devices used to be float32 whatever the model, so MXNet refused to bind every plan that splits a
FullyConnected's inputs ("Incompatible attr ... expected float64, got float32"); a fill that pads a gathered region
was float32 too."""
import json

import mxnet as mx
import numpy as np
import pytest

from tests.test_cli import run
from tofu.rewrite.comm import Fabric, Held


def _model(path):
    x = mx.sym.Convolution(mx.sym.var("data", dtype="float64"), kernel=(3, 3), pad=(1, 1), num_filter=8, name="c1")
    x = mx.sym.Pooling(mx.sym.relu(x), kernel=(2, 2), stride=(2, 2), pool_type="max", name="p1")
    x = mx.sym.FullyConnected(mx.sym.flatten(x), num_hidden=5, name="fc")
    mx.sym.SoftmaxOutput(x, mx.sym.var("softmax_label", dtype="float64"), name="softmax").save(str(path))


@pytest.mark.parametrize("workers,algo", [(2, "tofu"), (4, "tofu"), (4, "spartan")])
def test_a_float64_model_trains_partitioned_equal_to_one_device(capsys, tmp_path, workers, algo):
    path = tmp_path / "f64-symbol.json"
    _model(path)
    rc, out, err = run(capsys, "run", str(path), "--shape", "data=8,3,8,8", "--workers", str(workers), "--algo", algo,
                       "--steps", "2", "--check", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["check_passed"] and doc["gradient_max_rel_diff"] < 1e-9    # float64 on both sides
    assert doc["measured_comm_bytes"] == doc["predicted_comm_bytes"]


@pytest.mark.parametrize("dtype", ["float64", "int32", "float32"])
def test_a_padded_gather_is_made_in_the_tensors_type(dtype):
    """Rows 1..3 of a (4, 3) box held, the box gathered whole: row 0 is a fill of the tensor's type."""
    piece = mx.sym.var("piece", shape=(3, 3), dtype=dtype)
    fabric = Fabric(lambda a, b: abs(a - b), {"t": dtype} if dtype != "float32" else {})
    out = fabric.gather("t", [Held(0, ((1, 4), (0, 3)), (), piece)], ((0, 4), (0, 3)), 0, data=((1, 4), (0, 3)),
                        fill=7)
    value = np.arange(9).reshape(3, 3).astype(dtype)
    got = out.eval(ctx=mx.cpu(), piece=mx.nd.array(value, dtype=dtype))[0]
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got.asnumpy(), np.concatenate([np.full((1, 3), 7, dtype=dtype), value]))
