"""What two plans split in one block of a model, tensor by tensor: the CSV that experiments/table_plan.py draws.

    python experiments/run_plan_splits.py [--model gpt-350m] [--batch 8] [--workers 8] [--block 5]
                                          [--out docs/results/plans/gpt-350m-block5.csv]

For each tensor of block ``--block`` named in :data:`TENSORS` (``block5_q_weight`` as ``q_weight``): its shape, the
dimension the ``tofu`` plan splits it along at each of its cuts (space-separated, ``-`` where it is held whole)
and the ``megatron`` plan's. A JSON sidecar with the arguments and versions.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import RowWriter, rerun_source, write_sidecar  # noqa: E402

TENSORS = ("ln1_output", "q_weight", "q_output", "q_front_output", "probs_output", "context_merge_output",
           "proj_weight", "proj_output", "attn_add_output", "ln2_output", "fc1_weight", "fc1_output", "fc2_weight",
           "fc2_output", "mlp_add_output")
COLUMNS = ("tensor", "shape", "tofu_cuts", "megatron_cuts")


def cuts(plan) -> dict[str, str]:
    """Per tensor name: the dimension split at each cut of ``plan``, space-separated (``-``: held whole)."""
    per = [dict(step.tensor_dims) for step in plan.steps]
    return {name: " ".join("-" if s[name] is None else str(s[name]) for s in per) for name in per[0]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt-350m")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--block", type=int, default=5)
    p.add_argument("--out", type=Path, default=Path("results/plans/gpt-350m-block5.csv"))
    args = p.parse_args(argv)

    from tofu.api import load_graph
    from tofu.errors import TofuError
    from tofu.models import ModelOptions
    from tofu.search.algorithms import plan_graph

    try:
        graph = load_graph(args.model, ModelOptions(batch=args.batch))
        plans = {algo: cuts(plan_graph(graph, args.workers, algo)) for algo in ("tofu", "megatron")}
    except TofuError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    shapes = {t.name: t.shape for t in graph.tensors}
    writer = RowWriter(args.out, COLUMNS)
    for role in TENSORS:
        name = f"block{args.block}_{role}"
        if name not in shapes:
            print(f"error: {args.model} has no tensor '{name}'", file=sys.stderr)
            return 2
        writer.write({"tensor": role, "shape": " ".join(map(str, shapes[name])),
                      "tofu_cuts": plans["tofu"][name], "megatron_cuts": plans["megatron"][name]})
    writer.close()
    write_sidecar(args.out, vars(args), **rerun_source())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
