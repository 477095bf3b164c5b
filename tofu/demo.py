"""``make demo``: plan the paper's largest models for 8 devices, then train a partitioned model on CPU contexts
beside one device (its check).

    python -m tofu.demo [--workers 8] [--models wresnet-152-10,rnn-10-8k] [--run wresnet-tiny] [--run-workers 4]
                        [--steps 5] [--batch 8]
"""
from __future__ import annotations

import argparse
import sys


from tofu.errors import TofuError


GPU_MEMORY = 12 * 2**30      # one K80 die (the paper's GPU): 12 GiB, NVIDIA's K80 datasheet


def _gb(n: float) -> str:
    return f"{n / 2**30:6.2f} GiB"


def plan_models(models: list[str], workers: int, memory: int = GPU_MEMORY) -> None:
    """Plans each model at the batch the paper trains it at with Tofu on 8 GPUs (the largest in
    ``TOFU_BATCHES``; the family's default where the paper names none): memory on one device beside each plan's
    per device, against a ``memory``-byte GPU (the paper's K80 die, 12 GiB) less the reserve for the CUDA context
    and library workspace (:data:`tofu.search.plan.DEVICE_RESERVE_BYTES`)."""
    from tofu.api import load_graph
    from tofu.graph.memory import estimate_training_memory
    from tofu.models import ModelOptions
    from tofu.models.paper import TOFU_BATCHES
    from tofu.search.algorithms import plan_graph
    from tofu.search.plan import DEVICE_RESERVE_BYTES

    usable = memory - DEVICE_RESERVE_BYTES

    for name in models:
        batch = max(TOFU_BATCHES[name]) if name in TOFU_BATCHES else None
        graph = load_graph(name, ModelOptions(batch=batch))
        one = estimate_training_memory(graph).total
        shown = f"batch {batch} (the paper's for Tofu on 8 GPUs)" if batch else "the family's default batch"
        print(f"\n== {name} at {shown}: {len(graph.nodes)} ops, {graph.param_bytes / 2**30:.2f} GiB of weights; "
              f"one device needs {_gb(one)} -> {'fits' if one <= usable else 'does NOT fit'} a "
              f"{memory / 2**30:.0f} GiB GPU ({DEVICE_RESERVE_BYTES / 2**30:.1f} GiB kept for the CUDA context)")
        for algo in ("tofu", "data-parallel"):
            plan = plan_graph(graph, workers, algo)
            per = dict(plan.per_device_bytes)["total"]
            print(f"   {algo:<14} {workers} workers: {plan.comm_bytes / 1e9:8.2f} GB moved per iteration, "
                  f"{_gb(per)} per device ({'fits' if per <= usable else 'does not fit'}), "
                  f"searched in {plan.search_seconds:.2f} s")
            if algo == "tofu":
                layers = {}
                for node, var in zip(graph.nodes, zip(*(s.op_splits for s in plan.steps))):
                    layer = node.layer or node.name
                    if layer not in layers and not var[0][1].startswith("dim"):
                        layers[layer] = " ".join(v for _, v in var)
                shown = list(layers.items())
                for layer, splits in shown[:3] + ([("...", "")] if len(shown) > 6 else []) + shown[-3:]:
                    print(f"      {layer:<16} {splits}")


def run_partitioned(name: str, workers: int, steps: int, batch: int) -> float:
    """Trains ``name`` partitioned over cpu(0..workers-1) beside one device; returns the largest difference."""
    from tofu.api import load_graph, partitioned, reference_symbol
    from tofu.models import ModelOptions
    from tofu.runtime.data import initial_values, synthetic_batch
    from tofu.runtime.run import train
    from tofu.search.algorithms import plan_graph

    graph = load_graph(name, ModelOptions(batch=batch))
    plan = plan_graph(graph, workers, "tofu")
    pg = partitioned(graph, plan)
    factors = "x".join(str(s.factor) for s in plan.steps)
    print(f"\n== {name}: training partitioned over cpu(0..{workers - 1}) ({factors} cuts, {len(graph.nodes)} ops -> "
          f"one MXNet graph with {len(pg.variables)} shard variables), one device beside it")

    def progress(step, loss, seconds, ref):
        print(f"   step {step:>2}  loss {loss:.6f} (one device {ref:.6f})  {seconds * 1e3:6.1f} ms")

    report = train(graph, plan, pg, initial_values(graph), synthetic_batch(graph), steps, reference_symbol(graph),
                   lr=0.002, progress=progress)
    c = report.check
    print(f"   cross-device copies per iteration: {report.copies}, {report.measured_comm_bytes / 1e3:.1f} KB measured "
          f"(forward {report.measured_forward_bytes / 1e3:.1f} KB, backward {report.measured_backward_bytes / 1e3:.1f} "
          f"KB); the plan predicted {report.predicted_comm_bytes / 1e3:.1f} KB")
    print(f"   against one device: outputs {c.output:.2g}, gradients {c.gradient:.2g} (relative), losses {c.loss:.2g}, "
          f"parameter updates {c.parameters:.2g} (relative; each step from the same state)")
    return max(c.output, c.gradient, c.loss, c.parameters)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--models", default="wresnet-152-10,rnn-10-8k")
    p.add_argument("--run", default="wresnet-tiny")
    p.add_argument("--run-workers", type=int, default=4)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=8, help="batch of the trained model")
    args = p.parse_args(argv)
    try:
        plan_models(args.models.split(","), args.workers)
        diff = run_partitioned(args.run, args.run_workers, args.steps, args.batch)
    except TofuError as e:
        print(f"tofu: error: {e}", file=sys.stderr)
        return 2
    if diff > 1e-4:
        print(f"tofu: partitioned training differs from one device by {diff:.3g}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
