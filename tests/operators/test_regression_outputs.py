"""The regression loss heads (LinearRegressionOutput, MAERegressionOutput, LogisticRegressionOutput): MXNet's
backward divides each sample's gradient by the sample's element count, so the descriptions split the batch only;
the heads train partitioned equal to one device; a label of another shape is refused by name."""
import mxnet as mx
import pytest

from tofu import cli
from tofu.analysis.strategies import strategies
from tofu.errors import TDLError
from tofu.graph.attrs import Attrs
from tofu.tdl.describe import describe

HEADS = ("LinearRegressionOutput", "MAERegressionOutput", "LogisticRegressionOutput")


@pytest.mark.parametrize("op", HEADS)
def test_only_the_batch_splits(op):
    desc = describe(op, Attrs.parse({}), ((4, 6), (4, 6)), ((4, 6),))
    found = strategies(desc, 2)
    assert found, op
    assert {s.var for s in found} == {"i0"}, [s.var for s in found]


@pytest.mark.parametrize("op", HEADS)
def test_a_label_of_another_shape_is_refused_by_name(op):
    with pytest.raises(TDLError, match=r"label of shape \(4, 3, 2\) for data \(4, 6\)"):
        describe(op, Attrs.parse({}), ((4, 6), (4, 3, 2)), ((4, 6),))


def test_the_heads_train_partitioned_equal_to_one_device(tmp_path, capsys):
    """Three heads on one network (a sample of several elements, of one element read with a (batch,) label, and a
    sigmoid): MXNet's gradients of the partitioned graph against one device's, at 2 and 4 workers."""
    s = mx.sym
    h = s.tanh(s.FullyConnected(s.var("data"), num_hidden=6, name="h"))
    heads = s.Group([s.LinearRegressionOutput(s.FullyConnected(h, num_hidden=3, name="a"), name="lin",
                                              grad_scale=2.0),
                     s.MAERegressionOutput(s.FullyConnected(h, num_hidden=1, name="b"), s.var("m_label"), name="mae"),
                     s.LogisticRegressionOutput(s.FullyConnected(h, num_hidden=2, name="c"), name="log")])
    heads.save(str(tmp_path / "heads.json"))
    for workers in (2, 4):
        rc = cli.main(["run", str(tmp_path / "heads.json"), "--shape", "data=8,5", "--shape", "lin_label=8,3",
                       "--shape", "m_label=8", "--shape", "log_label=8,2", "--workers", str(workers), "--check",
                       "--steps", "2"])
        out, err = capsys.readouterr()
        assert rc == 0, err
        assert ": passed (rtol" in out, out


@pytest.mark.parametrize("op", HEADS)
def test_why_a_sample_is_not_split(op):
    """MXNet's own backward on half of each sample's elements is twice the whole op's on them: the count it
    divides by is the piece's, so a split of a sample would scale the gradient (the reason for the row read)."""
    import numpy as np
    rng = np.random.default_rng(0)
    x, label = rng.standard_normal((4, 6)), rng.standard_normal((4, 6))

    def grad(xs, ls):
        data = mx.nd.array(xs)
        data.attach_grad()
        with mx.autograd.record():
            out = getattr(mx.nd, op)(data, mx.nd.array(ls))
        out.backward()
        return data.grad.asnumpy()

    whole, half = grad(x, label), grad(x[:, :3], label[:, :3])
    np.testing.assert_allclose(half, 2 * whole[:, :3], rtol=1e-5)
