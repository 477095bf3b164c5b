"""Two models whose op's backward is not what its pieces' forward suggests, trained partitioned against one device
(`tofu run --check`, measured bytes = the plan's): FlowNet's Correlation at 3 and 6 workers (a border worker's
data2 clipped where its data1 was not: MXNet's kernel indexed it with data1's extents, the process aborted at 3
workers and trained 8% off at 6), and SoftmaxActivation over (batch, rows, classes) at batch 1 (its backward sums
over the rows: a split of the rows trained 89-106% off)."""
import mxnet as mx
import pytest

from tofu import cli


def _correlation(path):
    s = mx.sym
    a = s.Convolution(s.var("data"), num_filter=3, kernel=(1, 1), name="ca")
    b = s.Convolution(s.var("data"), num_filter=3, kernel=(1, 1), name="cb")
    corr = s.Correlation(a, b, max_displacement=1, pad_size=1, name="corr")
    s.SoftmaxOutput(s.FullyConnected(corr, num_hidden=4, name="fc"), s.var("softmax_label"),
                    name="softmax").save(path)
    return ["--shape", "data=2,3,5,6"]


def _softmax_activation(path):
    s = mx.sym
    act = s.SoftmaxActivation(s.FullyConnected(s.var("data"), num_hidden=4, flatten=False, name="fc"), name="sact")
    s.MakeLoss(s.sum(s.square(act - 0.3) * s.var("w")), name="loss").save(path)
    return ["--shape", "data=1,6,5"]


@pytest.mark.parametrize("build,workers", [(_correlation, 3), (_correlation, 6), (_softmax_activation, 2),
                                           (_softmax_activation, 3)], ids=["corr-3", "corr-6", "sact-2", "sact-3"])
@pytest.mark.parametrize("algo", ["tofu", "spartan"])
def test_trains_equal_to_one_device(tmp_path, capsys, build, workers, algo):
    path = str(tmp_path / "model.json")
    shapes = build(path)
    rc = cli.main(["run", path, *shapes, "--workers", str(workers), "--algo", algo, "--steps", "2", "--check"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert ": passed (rtol" in out, out
    copies = next(line for line in out.splitlines() if line.startswith("cross-device copies"))
    assert copies.split(", ")[1].split(" (")[0] == copies.rsplit("predicted ", 1)[1], copies
