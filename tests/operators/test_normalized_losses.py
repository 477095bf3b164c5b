"""SoftmaxOutput and MakeLoss with normalization 'batch' or 'valid': MXNet's backward divides the gradient by the
batch, or by the labels (elements) that count in the whole tensor, so a shard would divide by its own piece's
count. Before, both planned a batch split (SoftmaxOutput) and trained with k times the gradient at k workers
(`tofu run --check` failed with a relative difference of k - 1; without --check it trained wrong), or were
refused (MakeLoss). Now data is read whole: nothing splits, the loss is computed whole on one worker, and the
model trains equal to one device."""
import mxnet as mx
import numpy as np
import pytest

from tofu import cli
from tofu.analysis.strategies import strategies
from tofu.errors import TDLError
from tofu.graph.attrs import Attrs
from tofu.search.cost import signature_strategies
from tofu.tdl.describe import describe


def _grad(op, x, label=None, **attrs):
    """MXNet's own gradient of ``op`` with respect to its data (its label fed as is)."""
    data = mx.nd.array(x)
    data.attach_grad()
    with mx.autograd.record():
        out = getattr(mx.nd, op)(data, mx.nd.array(label), **attrs) if label is not None \
            else getattr(mx.nd, op)(data, **attrs)
    out.backward()
    return data.grad.asnumpy()


@pytest.mark.parametrize("normalization", ["batch", "valid"])
def test_why_a_batch_split_changes_mxnet_s_gradient(normalization):
    """Half the batch through MXNet's SoftmaxOutput gets twice the whole op's gradient on those rows (valid: with
    every label valid, the count is the rows'), which a split of the batch would train with."""
    rng = np.random.default_rng(0)
    x, label = rng.standard_normal((4, 5)), rng.integers(0, 5, 4).astype(np.float32)
    whole = _grad("SoftmaxOutput", x, label, normalization=normalization)
    half = _grad("SoftmaxOutput", x[:2], label[:2], normalization=normalization)
    np.testing.assert_allclose(half, 2 * whole[:2], rtol=1e-5)
    null_whole = _grad("SoftmaxOutput", x, label)
    np.testing.assert_allclose(_grad("SoftmaxOutput", x[:2], label[:2]), null_whole[:2], rtol=1e-6)


@pytest.mark.parametrize("attrs, shapes", [
    ({"normalization": "batch"}, ((8, 5), (8,))),
    ({"normalization": "valid", "use_ignore": "True"}, ((8, 5), (8,))),
    ({"normalization": "valid", "multi_output": "True"}, ((4, 3, 6), (4, 6))),
    ({"normalization": "batch", "multi_output": "True"}, ((4, 3, 6), (4, 6))),
])
def test_a_normalized_softmax_output_has_no_split(attrs, shapes):
    desc = describe("SoftmaxOutput", Attrs.parse(attrs), shapes, (shapes[0],))
    assert strategies(desc, 2) == ()
    # the same op without normalization splits its batch
    plain = {k: v for k, v in attrs.items() if k != "normalization"}
    assert strategies(describe("SoftmaxOutput", Attrs.parse(plain), shapes, (shapes[0],)), 2)
    assert signature_strategies("SoftmaxOutput", Attrs.parse(attrs), shapes, (shapes[0],), 2) == ()


@pytest.mark.parametrize("normalization", ["batch", "valid"])
def test_a_normalized_make_loss_has_no_split(normalization):
    desc = describe("MakeLoss", Attrs.parse({"normalization": normalization}), ((8, 4),), ((8, 4),))
    assert strategies(desc, 2) == ()


def test_an_unknown_make_loss_normalization_is_refused_by_name():
    with pytest.raises(TDLError, match="unknown normalization 'mean'"):
        describe("MakeLoss", Attrs.parse({"normalization": "mean"}), ((8, 4),), ((8, 4),))


def _models(tmp_path):
    s = mx.sym
    data, label = s.var("data"), s.var("softmax_label")
    conv = s.Convolution(data, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv")
    fc = s.FullyConnected(data, num_hidden=5, name="fc")
    models = {
        "seg-valid": (s.SoftmaxOutput(conv, label, multi_output=True, use_ignore=True, ignore_label=0,
                                      normalization="valid", name="softmax"),
                      ["data=8,3,6,6", "softmax_label=8,6,6"]),
        "fc-batch": (s.SoftmaxOutput(fc, label, normalization="batch", grad_scale=2.0, name="softmax"),
                     ["data=8,12", "softmax_label=8"]),
        "makeloss-valid": (s.MakeLoss(s.relu(fc) - 0.1, normalization="valid", valid_thresh=0.05, name="loss"),
                           ["data=8,12"]),
        "makeloss-batch": (s.MakeLoss(s.square(fc), normalization="batch", name="loss"), ["data=8,12"]),
    }
    out = {}
    for name, (sym, shapes) in models.items():
        sym.save(str(tmp_path / f"{name}.json"))
        out[name] = (tmp_path / f"{name}.json", shapes)
    return out


@pytest.mark.parametrize("workers", [2, 4])
def test_normalized_losses_train_equal_to_one_device(tmp_path, capsys, workers):
    """`tofu run --check`: outputs, gradients and updates against one device's, and the bytes MXNet copies
    against the plan's (all four models failed the check or were refused before)."""
    models = _models(tmp_path)
    assert len(models) == 4
    for name, (path, shapes) in models.items():
        args = ["run", str(path), "--workers", str(workers), "--check", "--steps", "2"]
        for shape in shapes:
            args += ["--shape", shape]
        rc = cli.main(args)
        out, err = capsys.readouterr()
        assert rc == 0, (name, err)
        assert ": passed (rtol" in out, (name, out)
        copies = next(line for line in out.splitlines() if line.startswith("cross-device copies"))
        measured, predicted = copies.split(", ")[1].split(" (")[0], copies.rsplit("predicted ", 1)[1]
        assert measured == predicted, (name, copies)

