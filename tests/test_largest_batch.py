"""Smoke test of experiments/run_largest_batch.py --quick: the batches it tries halve from the Ideal batch, the
answer is the first that fits, and every plan's per-device memory is at least an even share of the single
device's estimate (no plan holds less than 1/k of the weights and activations)."""
import csv
import json
import os

for _key, _value in (("MXNET_SUBGRAPH_BACKEND", "NONE"), ("OMP_NUM_THREADS", "1")):
    os.environ.setdefault(_key, _value)

import pytest  # noqa: E402

from experiments import run_largest_batch  # noqa: E402
from tofu.api import load_graph  # noqa: E402
from tofu.graph.memory import estimate_training_memory  # noqa: E402
from tofu.models import ModelOptions  # noqa: E402


def test_quick_run_halves_until_the_plan_fits(tmp_path, capsys):
    assert run_largest_batch.main(["--quick", "--tag", "smoke", "--out-dir", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "smoke.csv").open()))
    assert {r["model"] for r in rows} == set(run_largest_batch.QUICK_MODELS)
    starts = {"mlp": 16, "wresnet-tiny": 128, "rnn-tiny": 512}
    for model, start in starts.items():
        mine = [r for r in rows if r["model"] == model]
        assert [int(r["batch"]) for r in mine] == [start // 2**i for i in range(len(mine))]
        assert [r["fits"] for r in mine] == ["False"] * (len(mine) - 1) + ["True"]
        for r in mine:
            assert r["status"] == "ok"
            assert (int(r["per_device_total_bytes"]) <= int(r["device_bytes"])) == (r["fits"] == "True")
            single = estimate_training_memory(load_graph(model, ModelOptions(batch=int(r["batch"])))).total
            assert int(r["per_device_total_bytes"]) >= single / 2 * 0.99
    assert len([r for r in rows if r["model"] == "wresnet-tiny"]) > 1   # the 1 MiB device makes it search
    sidecar = json.loads((tmp_path / "smoke.json").read_text())
    assert sidecar["args"]["quick"] is True and sidecar["device_bytes"] == 2**20
    assert "wresnet-tiny: largest batch" in capsys.readouterr().out


@pytest.mark.parametrize("model,batch", [("wresnet-152-10", 8), ("rnn-10-8k", 128)])
def test_paper_batches_are_the_largest_that_fit_8_devices(model, batch):
    """The paper trains these at 8 and 128 on 8 x 12 GB; Tofu's plan fits that batch and not twice it."""
    def fits(b):
        return run_largest_batch.try_batch(model, b, 8, "tofu")["per_device_total_bytes"] <= 12 * 2**30

    assert fits(batch) and not fits(2 * batch)
