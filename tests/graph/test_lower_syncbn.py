"""MXNet's cross-device BatchNorm imported as BatchNorm (tofu/graph/lower_syncbn.py): the two kernels agree on one
device (the premise); Gluon's SyncBatchNorm exported for 4 devices (whose kernel would wait at its barrier for
them) trains partitioned equal to one device; a graph showing its variance is refused by name."""
import json

import mxnet as mx
import numpy as np
import pytest

from tofu import cli
from tofu.api import load_graph
from tofu.errors import GraphImportError

from tests.test_cli import assert_one_line_error


def _step(sym, values, head):
    ex = sym.simple_bind(mx.cpu(), **{k: v.shape for k, v in values.items() if k not in sym.list_auxiliary_states()})
    for k, v in values.items():
        (ex.aux_dict if k in ex.aux_dict else ex.arg_dict)[k][:] = v
    ex.forward(is_train=True)
    ex.backward(mx.nd.array(head))
    return [ex.outputs[0].asnumpy(), *(ex.grad_dict[k].asnumpy() for k in ("x", "g", "b")),
            *(ex.aux_dict[k].asnumpy() for k in ("mm", "mv"))]


@pytest.mark.parametrize("fix_gamma", [False, True])
def test_sync_batchnorm_on_one_device_is_batchnorm(fix_gamma):
    rng = np.random.default_rng(1)
    values = {"x": rng.standard_normal((4, 3, 2, 5)), "g": rng.uniform(0.5, 2.0, 3), "b": rng.standard_normal(3),
              "mm": rng.standard_normal(3), "mv": rng.uniform(0.5, 2.0, 3)}
    head = rng.standard_normal((4, 3, 2, 5))
    x, g, b, mm, mv = (mx.sym.var(k) for k in values)
    common = dict(fix_gamma=fix_gamma, eps=1e-4, momentum=0.7)
    sync = _step(mx.sym.contrib.SyncBatchNorm(x, g, b, mm, mv, ndev=1, key="bn", **common), values, head)
    plain = _step(mx.sym.BatchNorm(x, g, b, mm, mv, **common), values, head)
    assert not np.allclose(sync[4], values["mm"])                # the moving statistics moved
    for s, p in zip(sync, plain):
        np.testing.assert_allclose(s, p, rtol=1e-4, atol=1e-5)


def _gluon_net(path, **options):
    from mxnet.gluon import nn
    from mxnet.gluon.contrib.nn import SyncBatchNorm

    net = nn.HybridSequential()
    net.add(nn.Conv2D(4, 3, padding=1), SyncBatchNorm(num_devices=4, **options), nn.Activation("relu"), nn.Dense(3))
    net.initialize()
    net(mx.sym.var("data")).save(str(path))
    return str(path)


@pytest.mark.parametrize("algo", ["tofu", "data-parallel"])
def test_gluons_sync_batchnorm_for_four_devices_trains_partitioned(tmp_path, capsys, algo):
    path = _gluon_net(tmp_path / "net.json")
    assert "_contrib_SyncBatchNorm" in {n["op"] for n in json.load(open(path))["nodes"]}
    ops = {n.op for n in load_graph(path, shapes={"data": (8, 3, 6, 6)}).nodes}
    assert "BatchNorm" in ops and "_contrib_SyncBatchNorm" not in ops
    rc = cli.main(["run", path, "--shape", "data=8,3,6,6", "--workers", "4", "--algo", algo, "--check",
                   "--steps", "2", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["check_passed"] and doc["gradient_max_rel_diff"] < 1e-4


def test_a_sync_batchnorm_showing_its_variance_is_refused(tmp_path, capsys):
    x = mx.sym.var("data")
    bn = mx.sym.contrib.SyncBatchNorm(x, mx.sym.var("g"), mx.sym.var("b"), mx.sym.var("mm"), mx.sym.var("mv"),
                                      ndev=2, key="bn", output_mean_var=True, name="sbn")
    mx.sym.Group([bn[0], bn[2]]).save(str(tmp_path / "net.json"))
    with pytest.raises(GraphImportError, match="'sbn' .* \\(output_mean_var\\)"):
        load_graph(str(tmp_path / "net.json"), shapes={"data": (4, 3, 2)})
    rc = cli.main(["plan", str(tmp_path / "net.json"), "--shape", "data=4,3,2", "--workers", "2"])
    assert_one_line_error(rc, *capsys.readouterr(), "sbn", "output_mean_var")
