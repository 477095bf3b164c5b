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



def test_why_multi_output_splits_only_the_batch():
    """MXNet's multi_output SoftmaxOutput divides each sample's gradient by its extent d1 x ... x dm even under
    normalization 'null': half the spatial extent gets twice the whole op's gradient there; half the batch the
    same gradient."""
    rng = np.random.default_rng(0)
    for shape in ((2, 3, 4, 8), (2, 3, 6)):
        x = rng.standard_normal(shape)
        label = rng.integers(0, 3, (shape[0], *shape[2:])).astype(np.float32)
        whole = _grad("SoftmaxOutput", x, label, multi_output=True)
        half = _grad("SoftmaxOutput", x[:, :, :shape[2] // 2], label[:, :shape[2] // 2], multi_output=True)
        np.testing.assert_allclose(half, 2 * whole[:, :, :shape[2] // 2], rtol=1e-5)
        np.testing.assert_allclose(_grad("SoftmaxOutput", x[:1], label[:1], multi_output=True), whole[:1],
                                   rtol=1e-5)


@pytest.mark.parametrize("label", [(2, 32), (2, 4, 8), (2, 1, 4, 8)])
def test_multi_output_with_each_label_shape_splits_the_batch_alone(label):
    """The three label shapes MXNet's shape inference accepts for data (n, c, h, w): (n, h*w), its default (refused
    before: the description read a label of rank 3), (n, h, w) and (n, 1, h, w); h and w split before."""
    shapes = ((2, 3, 4, 8), label)
    found = strategies(describe("SoftmaxOutput", Attrs.parse({"multi_output": "True"}), shapes, (shapes[0],)), 2)
    assert [s.var for s in found] == ["i0"]
    assert mx.sym.SoftmaxOutput(mx.sym.var("d"), mx.sym.var("l"), multi_output=True).infer_shape(
        d=shapes[0], l=label)[0] == [shapes[0], label]


@pytest.mark.parametrize("label", [None, "softmax_label=1,4,8", "softmax_label=1,1,4,8"])
def test_a_segmentation_head_trains_equal_to_one_device(tmp_path, capsys, label):
    """Batch 1 over 4 workers: the plan splits the convolution, never the head's spatial axes (which trained with
    the gradient 4 times one device's, `--check` failing by 3; with MXNet's default label shape the model was
    refused); `--check` passes and the bytes MXNet copies are the plan's."""
    s = mx.sym
    conv = s.Convolution(s.var("data"), num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv")
    s.SoftmaxOutput(conv, s.var("softmax_label"), multi_output=True, name="softmax").save(str(tmp_path / "seg.json"))
    args = ["run", str(tmp_path / "seg.json"), "--shape", "data=1,3,4,8", "--workers", "4", "--check", "--steps", "2"]
    rc = cli.main(args + (["--shape", label] if label else []))
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert ": passed (rtol" in out, out
    copies = next(line for line in out.splitlines() if line.startswith("cross-device copies"))
    assert copies.split(", ")[1].split(" (")[0] == copies.rsplit("predicted ", 1)[1], copies
