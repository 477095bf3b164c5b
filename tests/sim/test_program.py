"""The program of one iteration against independent references: the plan-only construction against the one read
from the partitioned symbol; the symbol's program against what MXNet's bound executor runs (its graph's nodes
and the bytes of every ``_CrossDeviceCopy`` it executes); a data-parallel split's kernel work against the one-device program's;
and the program's own invariants (topological ids, every read on the reader's device, one copy per tensor and
destination, one update per parameter shard after its gradient)."""
import re
from collections import Counter

import numpy as np
import pytest

from tofu.api import load_graph, partitioned
from tofu.graph.ir import Role
from tofu.models import ModelOptions
from tofu.search.algorithms import plan_graph
from tofu.sim.glue import dataflow_from_plan
from tofu.sim.program import (Origin, Phase, TaskKind, TensorKind, build_program, dataflow_from_symbol,
                              program_from_plan)

CASES = [(m, k) for m in ("mlp", "rnn-tiny", "wresnet-tiny", "gpt-tiny") for k in (2, 4)]
_graphs: dict = {}


def _graph(model, **options):
    key = (model, tuple(sorted(options.items())))
    if key not in _graphs:
        _graphs[key] = load_graph(model, ModelOptions(batch=24, **options))
    return _graphs[key]


def _compared(program):
    """What the two constructions must agree on: compute tasks per (device, phase, class, bytes), copies per
    (source, destination, phase, bytes); an op run by its expansion, and what touches it, left out."""
    kept = [t for t in program.tasks if t.origin is not Origin.EXPANSION]
    return (Counter((t.device, t.phase, t.op_class, round(t.nbytes)) for t in kept if t.kind is not TaskKind.COPY),
            Counter((t.src, t.dst, t.phase, round(t.nbytes)) for t in kept if t.kind is TaskKind.COPY))


@pytest.mark.parametrize("algo", ["tofu", "data-parallel"])
@pytest.mark.parametrize("model,k", CASES)
def test_the_plan_builds_the_program_the_symbol_has(model, k, algo):
    graph = _graph(model)
    plan = plan_graph(graph, k, algo)
    from_plan = program_from_plan(graph, plan)
    from_symbol = build_program(dataflow_from_symbol(graph, partitioned(graph, plan)), graph, k)
    assert _compared(from_plan) == _compared(from_symbol)
    kernel_flops = [sum(t.flops for t in p.tasks if t.origin is Origin.KERNEL) for p in (from_plan, from_symbol)]
    assert kernel_flops[0] == pytest.approx(kernel_flops[1], rel=1e-12)
    expansions = [sum(t.origin is Origin.EXPANSION for t in p.tasks) for p in (from_plan, from_symbol)]
    if model == "wresnet-tiny":      # BatchNorm split along the batch: one kernel call against its expansion
        assert 0 < expansions[0] < expansions[1]
    else:
        assert expansions == [0, 0]


def _executor(graph, k, plan=None):
    from tofu.runtime.train import Trainer

    pg = partitioned(graph, plan or plan_graph(graph, k, "tofu"))
    values = {t.name: np.random.default_rng(0).random(t.shape).astype(np.float32)
              for t in graph.tensors if t.producer is None}
    return pg, Trainer(pg, values, replicas=False)      # the rewriter's symbol as MXNet binds it


BOUND = [("mlp", 2, {}), ("rnn-tiny", 2, {}), ("wresnet-tiny", 2, {}), ("gpt-tiny", 2, {}),
         ("rnn-2-16", 2, {"seq_len": 10})]


@pytest.mark.parametrize("model,k,options", BOUND, ids=[f"{m}-{k}" for m, k, _ in BOUND])
def test_the_symbols_program_has_the_copies_mxnet_runs(model, k, options):
    graph = _graph(model, **options)
    pg, trainer = _executor(graph, k)
    program = build_program(dataflow_from_symbol(graph, pg), graph, k)
    mine = Counter((t.phase is Phase.BACKWARD, int(t.nbytes)) for t in program.tasks if t.kind is TaskKind.COPY)
    measured = Counter((c.backward, c.nbytes) for c in trainer.copies())
    assert mine == measured


@pytest.mark.parametrize("model,k,options", BOUND, ids=[f"{m}-{k}" for m, k, _ in BOUND])
def test_with_replicas_the_program_has_the_copies_tofu_run_makes(model, k, options):
    """As ``tofu run`` binds the graph (its parameter replicas, tofu.runtime.replicas): the program's copies are
    the executor's and the exchange's, as ``Trainer.copies()`` measures them; one update per device."""
    from tofu.runtime.train import Trainer

    graph = _graph(model, **options)
    plan = plan_graph(graph, k, "data-parallel" if model == "mlp" else "tofu")
    pg = partitioned(graph, plan)
    values = {t.name: np.random.default_rng(0).random(t.shape).astype(np.float32)
              for t in graph.tensors if t.producer is None}
    trainer = Trainer(pg, values)
    assert trainer.replicas, "no replica: nothing is tested"
    program = build_program(dataflow_from_symbol(graph, pg), graph, k, replicas=True)
    mine = Counter((t.phase is Phase.BACKWARD, int(t.nbytes)) for t in program.tasks if t.kind is TaskKind.COPY)
    assert mine == Counter((c.backward, c.nbytes) for c in trainer.copies())
    updates = [t for t in program.tasks if t.kind is TaskKind.UPDATE]
    assert sorted(t.device for t in updates) == sorted(d for d, _ in trainer.exchange.flats[0])
    replayed = program_from_plan(graph, plan, replicas=True)
    assert Counter((t.phase is Phase.BACKWARD, int(t.nbytes)) for t in replayed.tasks
                   if t.kind is TaskKind.COPY and t.origin is not Origin.EXPANSION) == \
        Counter((t.phase is Phase.BACKWARD, int(t.nbytes)) for t in program.tasks
                if t.kind is TaskKind.COPY and t.origin is not Origin.EXPANSION)


_SAME_OP = {"identity": "_copy", "ElementWiseSum": "add_n"}       # MXNet's registered names of the aliases


@pytest.mark.parametrize("model,k,options", BOUND, ids=[f"{m}-{k}" for m, k, _ in BOUND])
def test_the_symbols_program_runs_the_nodes_of_mxnets_training_graph(model, k, options):
    """The bound executor's graph (forward, MXNet's gradient, without its copies) has the program's compute
    tasks: the same ops, and on each device the same forward ops. Only MXNet's zero fill of max pooling's
    hidden output's gradient (``_zeros_without_dtype``) is not in the program."""
    graph = _graph(model, **options)
    pg, trainer = _executor(graph, k)
    program = build_program(dataflow_from_symbol(graph, pg), graph, k)
    ops, forward = Counter(), Counter()
    for block in trainer.executor.debug_str().split("--------------------"):
        found = re.search(r"Op:(\S+), Name=(\S*)", block)
        if not found or found.group(1) in ("_CrossDeviceCopy", "_zeros_without_dtype"):
            continue
        ops[found.group(1)] += 1
        group = re.search(r"__ctx_group__=dev(\d+)", block)
        if group and "backward" not in found.group(2) and not found.group(1).startswith("_backward"):
            forward[(int(group.group(1)), found.group(1))] += 1
    compute = [t for t in program.tasks if t.kind is TaskKind.COMPUTE]
    assert Counter(_SAME_OP.get(t.op, t.op) for t in compute) == ops
    assert Counter((t.device, t.op) for t in compute if t.phase is Phase.FORWARD) == forward


def test_gradient_sums_follow_mxnets_in_place_cap():
    """Past the cap MXNet sums an entry's gradient by a chain of ``_grad_add`` (then an ``identity``), each
    contribution's writer waiting for the sum so far; tofu's runtime raises the cap, so one ``add_n`` sums all."""
    graph = _graph("rnn-2-16", seq_len=10)
    flow = dataflow_from_plan(graph, plan_graph(graph, 2, "tofu"))
    out_of_place, chained = build_program(flow, graph, 2, sum_cap=10 ** 6), build_program(flow, graph, 2, sum_cap=8)
    ops = Counter(t.op for t in chained.tasks)
    sums = Counter(t.op for t in out_of_place.tasks)["ElementWiseSum"]
    assert ops["_grad_add"] > 0 and "_grad_add" not in Counter(t.op for t in out_of_place.tasks)
    assert ops["ElementWiseSum"] + ops["_grad_add"] > sums
    for t in chained.tasks:
        if t.op == "_grad_add":                  # the writer of the contribution waited for the sum so far
            acc, g = (chained.tensors[r].producer for r in t.reads)
            assert acc in chained.tasks[g].deps


@pytest.mark.parametrize("model,k", [("mlp", 2), ("mlp", 4), ("rnn-tiny", 4)])
def test_a_data_parallel_split_gives_each_device_a_kth_of_the_kernels_work(model, k):
    """Under the data-parallel plan (batch 24, divisible by k) every device's forward kernels do exactly 1/k of the
    one-device program's FLOPs and bytes of batch-proportional work: checked on the total FLOPs, which for
    these models (every op's work linear in the batch) must split exactly."""
    graph = _graph(model)
    whole = program_from_plan(graph, plan_graph(graph, 1, "tofu"))
    split = program_from_plan(graph, plan_graph(graph, k, "data-parallel"))

    def forward_flops(program, device):
        return sum(t.flops for t in program.tasks
                   if t.origin is Origin.KERNEL and t.phase is Phase.FORWARD and t.device == device)

    total = forward_flops(whole, 0)
    assert total > 0
    assert [forward_flops(split, d) for d in range(k)] == pytest.approx([total / k] * k, rel=1e-12)


@pytest.mark.parametrize("model,k", CASES)
def test_program_invariants(model, k):
    graph = _graph(model)
    plan = plan_graph(graph, k, "tofu")
    program = program_from_plan(graph, plan)
    tensors = program.tensors
    copies = set()
    for t in program.tasks:
        assert all(d < t.id for d in t.deps)                          # ids are a topological order
        assert {tensors[r].producer for r in t.reads if tensors[r].producer is not None} <= set(t.deps)
        if t.kind is TaskKind.COPY:
            (r,) = t.reads
            assert tensors[r].device == t.src != t.dst == tensors[t.writes[0]].device
            assert t.nbytes == tensors[r].nbytes
            assert (r, t.dst) not in copies
            copies.add((r, t.dst))
        else:
            assert all(tensors[r].device == t.device for r in t.reads)   # every read is local
            assert 0 <= t.device < k
    params = [x for x in tensors if x.kind is TensorKind.PARAM]
    updates = [t for t in program.tasks if t.kind is TaskKind.UPDATE]
    assert sorted(u.writes[0] for u in updates) == [x.id for x in params]
    if model == "mlp":      # every parameter shard variable of the symbol (the runtime updates each)
        assert len(params) == sum(v.role is Role.PARAM for v in partitioned(graph, plan).variables)
    for u in updates:
        gradient = [r for r in u.reads if tensors[r].kind is TensorKind.GRADIENT]
        assert len(gradient) == 1 and tensors[gradient[0]].producer in u.deps
        assert tensors[u.writes[0]].device == u.device
    backward = [t for t in program.tasks if t.phase is Phase.BACKWARD and t.kind is TaskKind.COMPUTE]
    assert min(t.id for t in backward) > max(t.id for t in program.tasks if t.phase is Phase.FORWARD
                                           and t.kind is TaskKind.COMPUTE)
