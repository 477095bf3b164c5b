"""``make demo``: plan the paper's largest models for 8 devices, then run a partitioned model on CPU contexts.

    python -m tofu.demo [--workers 8] [--models wresnet-152-10,rnn-10-8k] [--run wresnet-tiny] [--run-workers 4]
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from tofu.errors import TofuError


def _gb(n: float) -> str:
    return f"{n / 2**30:6.2f} GiB"


def plan_models(models: list[str], workers: int) -> None:
    from tofu.api import load_graph
    from tofu.graph.memory import estimate_training_memory
    from tofu.search.algorithms import plan_graph

    gpu = 12 * 2**30
    for name in models:
        graph = load_graph(name)
        one = estimate_training_memory(graph).total
        print(f"\n== {name}: {len(graph.nodes)} ops, {graph.param_bytes / 2**30:.2f} GiB of weights; "
              f"one device needs {_gb(one)} -> {'fits' if one <= gpu else 'does NOT fit'} a 12 GiB GPU")
        for algo in ("tofu", "data-parallel"):
            plan = plan_graph(graph, workers, algo)
            per = dict(plan.per_device_bytes)["total"]
            print(f"   {algo:<14} {workers} workers: {plan.comm_bytes / 1e9:8.2f} GB moved per iteration, "
                  f"{_gb(per)} per device ({'fits' if per <= gpu else 'does not fit'}), "
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


def run_partitioned(name: str, workers: int) -> float:
    from tofu.graph import Role, import_symbol
    from tofu.models import build_model
    from tofu.runtime.emulate import emulate_cut, reference_forward
    from tofu.search.recursive import search

    model = build_model(name)
    graph = import_symbol(model.symbol, model.shapes(), name)
    rng = np.random.default_rng(0)
    inputs = {}
    for t in graph.tensors:
        if t.producer is None:
            integer = t.role is Role.LABEL or (t.role is Role.DATA and name.startswith("rnn"))
            inputs[t.name] = (rng.integers(0, 10, t.shape) if integer else rng.standard_normal(t.shape) * 0.5
                              ).astype(np.float32)
            if t.role is Role.AUX and "var" in t.name:
                inputs[t.name] = np.ones(t.shape, np.float32)
    (step,) = search(graph, (workers,))
    start = time.perf_counter()
    values = emulate_cut(graph, step, inputs)
    seconds = time.perf_counter() - start
    diff = float(np.abs(values[graph.heads[0]] - reference_forward(model.symbol, inputs)[0]).max())
    kinds = sorted(set(step.op_vars))
    print(f"\n== {name}: forward pass with every op split {workers} ways on cpu(0..{workers - 1}) "
          f"({len(graph.nodes)} ops; splits used: {', '.join(kinds)}) in {seconds:.2f} s")
    print(f"   max |partitioned - single device| = {diff:.3g}")
    return diff


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--models", default="wresnet-152-10,rnn-10-8k")
    p.add_argument("--run", default="wresnet-tiny")
    p.add_argument("--run-workers", type=int, default=4)
    args = p.parse_args(argv)
    try:
        plan_models(args.models.split(","), args.workers)
        diff = run_partitioned(args.run, args.run_workers)
    except TofuError as e:
        print(f"tofu: error: {e}", file=sys.stderr)
        return 2
    return 0 if diff < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
