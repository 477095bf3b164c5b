"""``make demo``'s planning part: the paper's two largest models at the batches the paper trains them at with Tofu
(issue 24, item 11: it planned wresnet-152-10 at the zoo's default batch and printed that Tofu's plan did not fit)."""
import re



from tofu.api import load_graph
from tofu.graph.memory import estimate_training_memory
from tofu.models import ModelOptions
from tofu.models.paper import TOFU_BATCHES
from tofu.demo import GPU_MEMORY, plan_models


def test_the_largest_models_fit_at_the_papers_batch_where_one_device_does_not(capsys):
    plan_models(["wresnet-152-10", "rnn-10-8k"], 8)
    out = capsys.readouterr().out
    for name in ("wresnet-152-10", "rnn-10-8k"):
        batch = max(TOFU_BATCHES[name])
        block = out[out.index(f"== {name}"):]
        assert block.startswith(f"== {name} at batch {batch} (the paper's for Tofu on 8 GPUs)")
        one = estimate_training_memory(load_graph(name, ModelOptions(batch=batch))).total
        assert one > GPU_MEMORY and "does NOT fit" in block.splitlines()[0]
        tofu_line = next(ln for ln in block.splitlines() if ln.strip().startswith("tofu "))
        per_device = float(re.search(r"([0-9.]+) GiB per device", tofu_line)[1]) * 2**30
        assert per_device <= GPU_MEMORY and "(fits)" in tofu_line
