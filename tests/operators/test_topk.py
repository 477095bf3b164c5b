"""topk beyond its registered Cases: a k-max layer trains partitioned equal to one device with the plan's bytes
measured, with its values alone and with its values and positions (``ret_typ='both'``, whose positions get no
gradient), and what the description leaves out (the flattened tensor) is refused by name; its indices and mask
forms are described (a mixture of experts' gate, tests/runtime/test_new_user_ops.py)."""
import json

import mxnet as mx
import pytest

from tests.test_cli import run
from tofu.errors import TDLError
from tofu.graph.attrs import Attrs
from tofu.tdl.describe import describe


@pytest.mark.parametrize("attrs,says", [({"k": "2", "ret_typ": "value", "axis": "None"}, "axis None"),
                                        ({"k": "2", "ret_typ": "values"}, "ret_typ 'values'")])
def test_what_is_not_described_is_refused_by_name(attrs, says):
    with pytest.raises(TDLError, match=says):
        describe("topk", Attrs.parse(attrs), ((4, 6),), ((4, 2),))


@pytest.mark.parametrize("both", [False, True])
def test_a_k_max_layer_trains_partitioned(capsys, tmp_path, both):
    """The two largest of each row of features: the batch splits, the sorted axis stays whole; MXNet's own
    gradient (scattered to the chosen positions) against one device's, and the copies measured against the plan.
    With ``both``, the positions are read too, as features: MXNet gives them no gradient, and neither may the
    partitioned run (nor may the count send one back)."""
    s = mx.sym
    h = s.FullyConnected(s.var("data"), num_hidden=6, flatten=False, name="f")
    if both:
        values, positions = s.topk(h, k=2, ret_typ="both", axis=-1)
        top = s.concat(values, positions * 0.25, dim=-1)
    else:
        top = s.topk(h, k=2, ret_typ="value", axis=-1)
    s.SoftmaxOutput(s.FullyConnected(s.Flatten(top), num_hidden=4, name="o"), name="softmax").save(
        str(tmp_path / "kmax.json"))
    for workers in (2, 4):
        rc, out, err = run(capsys, "run", str(tmp_path / "kmax.json"), "--shape", "data=8,6,10", "--workers",
                           str(workers), "--steps", "2", "--check", "--json")
        assert rc == 0, err
        doc = json.loads(out)
        assert doc["gradient_max_rel_diff"] < 1e-4 and doc["parameter_max_rel_diff"] < 1e-4, doc
        assert doc["measured_comm_bytes"] == doc["predicted_comm_bytes"] > 0, doc
