"""The ``tofu`` command line (DESIGN.md, section 3).

``tofu inspect MODEL`` summarises a model; ``tofu plan MODEL --workers K [--machines M]`` partitions it (one of M
machines, with the kvstore's inter-machine bytes); ``tofu run`` trains it partitioned (under ``tofu launch``, as one
machine of a hybrid run); ``tofu launch --machines M --workers K -- tofu run ...`` starts MXNet's dist kvstore
processes (loopback or ``--hostfile`` over ssh) and summarises the machines' results; ``tofu ops`` lists the TDL-described operators (``--json``: with
the partition strategies of each op's first Case, ``--op NAME``: one op's strategies and their symbolic
regions, on its Case ``--case N`` and for ``--workers K``, ``--model MODEL``: the ops of a model's graph).

Every user mistake (unknown model or op, bad file, impossible option) prints one line ``tofu: error: ...``
on stderr and exits with status 2.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import re
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tofu.errors import CheckFailedError, TofuError, UnsupportedOperatorError
from tofu.graph import Role
from tofu.runtime import DEFAULT_RTOL

if TYPE_CHECKING:       # the analysis stages are imported when a command needs them (`tofu ops` stays fast)
    from tofu.analysis.strategies import Analysis, Placement, Region, SymbolicStrategy
    from tofu.graph.attrs import Attrs
    from tofu.tdl.describe import Case, OpDescription, OpSpec

# what matplotlib's Agg, PDF, PS and SVG backends write (a figure's suffix is checked before any work)
FIGURE_FORMATS = ("png", "pdf", "svg", "svgz", "eps", "ps", "jpg", "jpeg", "tif", "tiff", "webp")
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str) -> int:
    """``12GB`` (10^9), ``12GiB`` (2^30), ``500MB``, ``1024`` -> bytes."""
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"bad memory size '{text}' (examples: 12GB, 16GiB, 500MB)")
    return int(float(m[1]) * _UNITS[(m[2] or "B").lower()])


def _gb(n: float) -> str:
    """Bytes in the largest decimal unit that keeps the number >= 1 (12.35 GB, 310.9 KB)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):      # one line, status 2 (argparse's own usage dump is not one line)
        raise TofuError(message)


def _model_args(p: argparse.ArgumentParser, positional: bool = True) -> None:
    """The model and its options; ``positional=False`` makes the model an optional ``--model``."""
    help_ = ("zoo name (wresnet-{50,101,152}-{4,6,8,10}, rnn-{6,8,10}-{4k,6k,8k}, gpt-{124m,350m,774m,1.5b,2.7b,"
             "6.7b}, wresnet-tiny, rnn-tiny, gpt-tiny, mlp) or a symbol JSON file")
    if positional:
        p.add_argument("model", help=help_)
    else:
        p.add_argument("--model", help=help_ + ": list the ops of its graph")
    p.add_argument("--batch", type=int, help="batch size (default: the model family's, see docs/models.md)")
    p.add_argument("--seq-len", type=int, help="RNN unrolled timesteps (default 20), GPT tokens (default 1024)")
    p.add_argument("--vocab", type=int, help="RNN vocabulary (default 10000), GPT vocabulary (default 50304)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D1,D2,...",
                   help="input shape of a symbol file (repeat per input)")


def _graph(args, with_loss: bool = False):
    from tofu.api import load_graph
    from tofu.graph import parse_shape

    _input_path(args.model, "model file")
    from tofu.models import ModelOptions

    parsed = [parse_shape(s) for s in args.shape]
    names = [n for n, _ in parsed]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise TofuError(f"--shape gives '{twice[0]}' more than once")
    shapes = dict(parsed)
    return load_graph(args.model, ModelOptions(batch=args.batch, seq_len=args.seq_len, vocab=args.vocab), shapes,
                      with_loss)


def cmd_inspect(args) -> int:
    graph = _graph(args)
    from tofu.graph.memory import estimate_training_memory

    mem = estimate_training_memory(graph)
    fits = mem.total <= args.device_memory
    counts = graph.op_counts()
    if args.json:
        print(_dumps({"model": graph.name, "ops": len(graph.nodes), "op_counts": counts,
                          "param_count": sum(t.size for t in graph.by_role(Role.PARAM)),
                          "param_bytes": graph.param_bytes, "memory_bytes": mem.as_dict(),
                          "device_memory_bytes": args.device_memory, "fits": fits}))
        return 0
    print(f"model {graph.name}: {len(graph.nodes)} ops, {len(graph.tensors)} tensors")
    print("ops by type: " + ", ".join(f"{op} {n}" for op, n in counts.items()))
    nparams = sum(t.size for t in graph.by_role(Role.PARAM))
    print(f"parameters: {nparams:,} ({_gb(graph.param_bytes)})")
    print("training memory on one device (estimate):")
    for k, v in mem.as_dict().items():
        print(f"  {k:<12} {_gb(v):>12}")
    print(f"fits {_gb(args.device_memory)}: {'yes' if fits else 'no'}")
    return 0


def cmd_ops(args) -> int:
    from tofu import registry

    specs = registry.load_builtin_operators()
    if args.model and args.op:
        raise TofuError("give --op or --model, not both")
    if not args.model and (args.shape or args.batch is not None):
        raise TofuError("--batch and --shape apply to --model")
    if not args.op and (args.case is not None or args.workers is not None):
        raise TofuError("--case and --workers apply to --op")
    if args.model:
        return _ops_of_model(args)
    if args.op:
        if args.op not in specs:
            raise UnsupportedOperatorError(args.op, known=specs)
        spec, case, workers = specs[args.op], args.case or 0, _KERNEL_K if args.workers is None else args.workers
        if spec.cases and not 0 <= case < len(spec.cases):
            raise TofuError(f"--case {case}: {args.op} has {len(spec.cases)} cases, numbered 0 to "
                            f"{len(spec.cases) - 1}")
        if workers < 1:
            raise TofuError(f"--workers {workers}: the number of workers must be a positive integer")
        if args.json:
            print(_dumps(_op_json(args.op, spec, with_strategies=True, case=case, workers=workers)))
        else:
            print(_op_text(args.op, spec, case, workers))
        return 0
    rows = [_op_json(name, spec, with_strategies=args.json) for name, spec in sorted(specs.items())]
    if args.json:
        print(_dumps({"ops": rows}))
        return 0
    for r in rows:
        print(f"{r['name']:<22} ({', '.join(r['inputs'])}) -> {', '.join(r['outputs'])}   {r['doc']}")
    print(f"{len(rows)} operators described")
    return 0


def _op_json(name: str, spec: OpSpec, with_strategies: bool, case: int = 0, workers: int | None = None) -> dict:
    """One op of ``tofu ops --json``; its strategies are those of its Case number ``case`` (default the first),
    checked for ``workers`` (default 2)."""
    attrs = {f.name: (None if f.default is dataclasses.MISSING else _jsonable(f.default))
             for f in dataclasses.fields(spec.attrs_type)}
    row = {"name": name, "inputs": list(spec.inputs), "outputs": list(spec.outputs), "attrs": attrs,
           "source": spec.source, "doc": spec.doc.splitlines()[0] if spec.doc else ""}
    if not with_strategies:
        return row
    example = _example(name, spec, case, _KERNEL_K if workers is None else workers)
    if example is None:
        return {**row, "example": None, "strategies": [], "unsplittable": []}
    return {**row, "example": example.as_json(), "strategies": [_strategy_json(example, s) for s in example.strategies],
            "unsplittable": [{"var": u.var, "reason": u.reason} for u in example.analysis.unsplittable]}


_KERNEL_K = 2         # the default worker count for which `tofu ops` checks that MXNet's kernel runs each shard


@dataclasses.dataclass(frozen=True)
class _Example:
    """One Case of an op (number ``index``), described and analysed, with each strategy's kernel check for
    ``workers`` workers."""

    op: str
    index: int
    case: Case
    attrs: Attrs
    desc: OpDescription
    analysis: Analysis
    workers: int = _KERNEL_K

    @property
    def strategies(self) -> tuple[SymbolicStrategy, ...]:
        return self.analysis.strategies

    def as_json(self) -> dict:
        return {"case": self.index, "workers": self.workers,
                "shapes": {t.name: list(t.shape) for t in self.desc.inputs},
                "attrs": {k: _jsonable(v) for k, v in self.case.attrs.items()},
                "output_shapes": {o.name: list(o.shape) for o in self.desc.outputs}}

    def kernel_reason(self, s: SymbolicStrategy) -> str | None:
        """None when MXNet's kernel runs every worker's shard of ``s`` for ``workers`` workers, else why not."""
        from tofu.analysis.shard import shard_call
        from tofu.analysis.strategies import instantiate

        inst = instantiate(self.desc, s, self.workers)
        if inst is None:
            return (f"the example's extent {s.split_extent} of '{s.var}' is not a multiple of {self.workers} "
                    f"workers")
        try:
            for w in range(self.workers):
                shard_call(self.op, self.attrs, inst, w, self.desc)
        except TofuError as e:
            return str(e)
        return None


def _example(name: str, spec: OpSpec, index: int = 0, workers: int = _KERNEL_K) -> _Example | None:
    """Case ``index`` of ``spec`` analysed, its kernel checks for ``workers`` workers; None without cases."""
    from tofu.analysis.strategies import analyse
    from tofu.graph.single_op import infer_op_shapes
    from tofu.tdl.describe import describe

    if not spec.cases:
        return None
    case = spec.cases[index]
    attrs = case.parsed_attrs()
    desc = describe(name, attrs, case.shapes, infer_op_shapes(name, attrs, case.shapes))
    return _Example(name, index, case, attrs, desc, analyse(desc), workers)


def _placement_json(p: Placement) -> dict:
    from tofu.analysis.strategies import PartialSum, SplitDim

    if isinstance(p, SplitDim):
        return {"split_dim": p.dim}
    if isinstance(p, PartialSum):
        return {"partial": p.reducer}
    return {"replicate": True}


def _strategy_json(example: _Example, s: SymbolicStrategy) -> dict:
    from tofu import registry

    reason = example.kernel_reason(s)
    names = [t.name for t in example.desc.inputs]
    entry = {"var": s.var, "kind": s.kind, "outputs": [_placement_json(p) for p in s.outputs],
             "regions": [None if box is None else [str(iv) for iv in box] for box in s.regions],
             "once_inputs": [names[i] for i in s.once_inputs],
             "exchanges": [{"tensor": x.tensor, "reducer": x.reducer, "var": x.var} for x in s.exchanges],
             "expansion": bool(s.exchanges) and registry.expansion(example.op) is not None,
             "kernel_executable": reason is None}
    if reason is not None:
        entry["kernel_reason"] = reason
    return entry


def _op_text(name: str, spec: OpSpec, case: int = 0, workers: int = _KERNEL_K) -> str:
    """``tofu ops --op NAME``: the description and its strategies with their symbolic regions, on Case number
    ``case``, each instantiated and kernel-checked for ``workers`` workers."""
    from tofu import registry
    from tofu.analysis.strategies import PartialSum, SplitDim, instantiate

    lines = [f"{name}   ({spec.source})"]
    lines += ["    " + ln for ln in (spec.doc or "(no docstring)").splitlines()]
    lines.append(f"inputs: {', '.join(spec.inputs)}    outputs: {', '.join(spec.outputs)}")
    example = _example(name, spec, case, workers)
    if example is None:
        lines.append("no Case: no example to analyse")
        return "\n".join(lines)
    desc = example.desc
    shapes = ", ".join(f"{t.name} {t.shape}" for t in desc.inputs)
    attrs = ", ".join(f"{k}={v}" for k, v in example.case.attrs.items())
    outs = ", ".join(f"{o.name} {o.shape}" for o in desc.outputs)
    which = "first Case" if case == 0 else f"Case {case}; cases 0..{len(spec.cases) - 1}"
    lines.append(f"example ({which}): {shapes}{f'; {attrs}' if attrs else ''} -> {outs}")
    for o in desc.outputs:
        lines.append(f"  {o.name}[{', '.join(v.name for v in o.vars)}]")
    lines.append("strategies (a split variable v ranges over [v.lo, v.hi] on each worker; regions per input "
                 "dimension):")
    width = max((len(t.name) for t in desc.inputs), default=0)
    for s in example.strategies:
        where = ", ".join(f"{o.name} split on dim {p.dim}" if isinstance(p, SplitDim) else
                          f"partial {o.name}s combined with {p.reducer}" if isinstance(p, PartialSum) else
                          f"{o.name} whole" for o, p in zip(desc.outputs, s.outputs))
        lines.append(f"  {s.kind}:{s.var}  ({where}; extent {s.split_extent})")
        for i, (t, box, fill) in enumerate(zip(desc.inputs, s.regions, s.fills)):
            notes = []
            if fill is not None and box is not None:
                notes.append(f"fill {fill} outside the tensor")
            if i in s.once_inputs:
                notes.append("counted once: worker 0 reads it, the others read zeros")
            region = "not read" if box is None else " x ".join(map(str, box))
            lines.append(f"      {t.name:<{width}}  {region}" + (f"   ({'; '.join(notes)})" if notes else ""))
        for x in s.exchanges:
            lines.append(f"      exchanges partial '{x.tensor}' ({x.reducer} over {x.var}) between workers")
        inst = instantiate(desc, s, workers)
        if inst is not None:
            for w, regions in enumerate(inst.input_regions):
                parts = [f"{t.name}{_slices(r)}" for t, r in zip(desc.inputs, regions)
                         if r is not None and r.shape != t.shape]
                lines.append(f"      worker {w} of {workers}: {', '.join(parts) or 'whole inputs'}")
        reason = example.kernel_reason(s)
        lines.append(f"      MXNet kernel, {workers} workers: {'yes' if reason is None else 'no: ' + reason}")
        if s.exchanges and registry.expansion(name) is not None:
            lines.append(f"      runs by {name}'s expansion into MXNet operators, the statistics all-reduced")
    unsplittable = example.analysis.unsplittable
    lines.append("unsplittable: " + ("; ".join(f"{u.var}: {u.reason}" for u in unsplittable) or "none"))
    return "\n".join(lines)


def _slices(region: Region) -> str:
    """``[0:2, 0:3, 3:9 pad 1 after]``: the region as slices, with the halo past the tensor's ends."""
    dims = []
    for (a, b), (p, q) in zip(region.bounds, region.pad):
        pad = (f" pad {p} before" if p else "") + (f" pad {q} after" if q else "")
        dims.append(f"{a}:{b + 1}{pad}")
    return "[" + ", ".join(dims) + "]"


def _ops_of_model(args) -> int:
    """``tofu ops --model M``: each distinct op of M's graph, its count and one representative node's strategies."""
    from tofu.analysis.strategies import analyse
    from tofu.tdl.describe import describe

    graph = _graph(args)
    rows = []
    for op, count in graph.op_counts().items():
        node = next(n for n in graph.nodes if n.op == op)
        desc = describe(op, node.attrs, [graph.tensor(t).shape for t in node.inputs],
                        [graph.tensor(t).shape for t in node.outputs], node=node.name)
        found = analyse(desc).strategies
        rows.append({"name": op, "count": count, "node": node.name, "strategies": len(found),
                     "vars": [s.var if s.kind == "output" else f"{s.var}({s.outputs[0].reducer})" for s in found]})
    if args.json:
        print(_dumps({"model": graph.name, "ops": rows}))
        return 0
    print(f"model {graph.name}: {len(graph.nodes)} ops, {len(rows)} distinct")
    print(f"{'op':<22}{'count':>6}  {'strategies':>10}  representative node: split variables")
    for r in rows:
        print(f"{r['name']:<22}{r['count']:>6}  {r['strategies']:>10}  {r['node']}: {' '.join(r['vars']) or '-'}")
    return 0


_DIM_LETTERS = {1: "C", 2: "NC", 3: "NTC", 4: "NCHW", 5: "NCDHW"}


def _dim_name(shape: tuple[int, ...], d: int | None) -> str:
    if d is None:
        return "-"
    letters = _DIM_LETTERS.get(len(shape))
    return letters[d] if letters else str(d)


def cmd_plan(args) -> int:
    from tofu.search.algorithms import plan_graph, replay
    from tofu.search.plan import Plan

    if args.out:
        _output_path(args.out, "plan")
    if args.figure:
        _output_path(args.figure, "figure", FIGURE_FORMATS)
    _input_path(args.load, "plan")
    global_batch = None
    if args.machines is not None:
        global_batch = _split_batch(args, args.machines)
    graph = _graph(args, with_loss=True)      # the graph `tofu run` trains, so that its plans replay there
    if args.load:
        if args.algo != "tofu" or args.out:
            raise TofuError("--load shows a saved plan: --algo and --out do not apply to it")
        plan = Plan.load(args.load, graph)
        if args.workers is not None and plan.workers != args.workers:
            raise TofuError(f"plan '{args.load}' is for {plan.workers} workers, not {args.workers}")
        plan = replay(graph, plan)        # the file's numbers are recomputed, not trusted
    else:
        plan = plan_graph(graph, 8 if args.workers is None else args.workers, args.algo)
        if args.out:
            plan.save(args.out)
    if args.figure:
        from tofu.figures import draw, plan_columns

        draw([plan_columns(plan.to_json())], args.figure_tensors, args.figure,
             f"{plan.model}, {plan.workers} workers")
    inter = None
    if global_batch is not None:
        from tofu.runtime.distributed import inter_machine_bytes

        inter = inter_machine_bytes(graph, plan, _graph(argparse.Namespace(**{**vars(args), "batch": global_batch}), True),
                                    args.machines)
    if args.json:
        doc = plan.to_json()
        if not args.steps:
            for step in doc["steps"]:          # the per-tensor tables are in --out files; keep stdout short
                step.pop("tensor_dims")
                step.pop("ops")
        if inter is not None:
            doc.update({"machines": args.machines, "global_batch": global_batch, "machine_batch": args.batch,
                        "intra_machine_bytes": plan.comm_bytes, "inter_machine_pushed_bytes": inter,
                        "inter_machine_pulled_bytes": inter, "inter_machine_bytes": 2 * inter})
        print(_dumps(doc))
        return 0
    print(_plan_text(graph, plan))
    if inter is not None:
        print(f"{args.machines} machines, global batch {global_batch} ({args.batch} per machine): per iteration, "
              f"intra-machine {_gb(plan.comm_bytes)} on each machine (the plan's), inter-machine {_gb(2 * inter)} "
              f"per machine through the kvstore ({_gb(inter)} of gradient shards and statistics pushed, {_gb(inter)} "
              f"pulled)")
    return 0


def _split_batch(args, machines: int) -> int:
    """Sets ``args.batch`` to one machine's share of the global batch (``args.batch``, or the model's default)
    and returns the global batch.

    Raises:
        TofuError: not a zoo model, fewer than one machine, or a batch that does not divide by ``machines``.
    """
    from pathlib import Path

    from tofu.api import model_batch
    from tofu.models import ModelOptions

    if machines < 1:
        raise TofuError(f"--machines must be at least 1, got {machines}")
    if args.model.endswith(".json") or Path(args.model).is_file():
        raise TofuError(f"'{args.model}' is a symbol file: several machines train zoo models only (their batch "
                        f"is split by rows)")
    global_batch = model_batch(args.model, ModelOptions(batch=args.batch, seq_len=args.seq_len, vocab=args.vocab))
    if global_batch % machines:
        raise TofuError(f"the global batch {global_batch} is not divisible by {machines} machines")
    args.batch = global_batch // machines
    return global_batch


def cmd_run(args) -> int:
    """``tofu run``: partitioned training steps on K contexts, measured; ``--check`` beside one device."""
    from tofu.api import load_plan, partitioned, reference_symbol
    from tofu.runtime.data import initial_values, load_checkpoint, save_checkpoint, synthetic_batch
    from tofu.runtime.run import train

    if os.environ.get("DMLC_ROLE") == "worker":      # started by `tofu launch`: one machine of a hybrid run
        return _run_machine(args)
    _check_run_args(args)
    if args.workers is None:
        args.workers = 4
    graph = _graph(args, with_loss=True)
    dropout_off: tuple[str, ...] = ()
    if args.check:                       # the two sides cannot draw the same masks: compare without them
        from tofu.graph.deterministic import without_dropout

        graph, dropout_off = without_dropout(graph)
    _check_contexts(args.workers, args.ctx)
    policy = _checkpoint_policy(args)
    start = _resumed(args, graph)
    plan = load_plan(graph, args.workers, args.algo or "tofu", args.plan)
    pg = partitioned(graph, plan)
    values = load_checkpoint(args.load, graph) if args.load else initial_values(graph, args.seed)
    batch = synthetic_batch(graph, args.seed + 1)
    terminal = not args.json

    def progress(step, loss, seconds, ref):
        if terminal:
            extra = f"  one device {ref:.6f}" if ref is not None else ""
            print(f"step {step}/{args.steps}  loss {loss:.6f}  {seconds * 1e3:8.1f} ms{extra}", flush=True)
        if step == args.fail_at_step:
            os.kill(os.getpid(), signal.SIGKILL)

    if terminal:
        factors = "x".join(str(s.factor) for s in plan.steps) or "1"
        print(f"{graph.name}: {len(graph.nodes)} ops on {args.workers} {args.ctx} contexts, plan {plan.algo} "
              f"({factors}); partitioned graph: {len(pg.variables)} shard variables", flush=True)
    import mxnet as mx

    from tofu.graph.single_op import first_line

    try:
        report = train(graph, plan, pg, values, batch, args.steps,
                       reference_symbol(graph) if args.check else None, args.ctx, args.lr, args.momentum,
                       progress, start=start, checkpoint=policy, dropout_off=dropout_off)
    except mx.base.MXNetError as e:      # a kernel or bind MXNet refuses at run time: one line, not its trace
        raise TofuError(f"MXNet cannot run the partitioned graph: {first_line(e)}") from None
    if args.memory and args.ctx == "cpu":
        from tofu.runtime.memory import MAX_PROFILED_DEVICES, measure_device_peaks

        peaks = measure_device_peaks(pg)
        if peaks is None and terminal:
            print(f"per-device memory is measured up to {MAX_PROFILED_DEVICES} CPU contexts (MXNet's profiler)")
        report = dataclasses.replace(report, per_device_peak_bytes=peaks)
    if args.save:
        save_checkpoint(args.save, graph, report.final_values, plan)
    failed = report.check.exceeded(args.rtol) if report.check is not None else ()
    if args.json:
        doc = report.to_json()
        if report.check is not None:
            doc.update({"rtol": args.rtol, "check_passed": not failed})
        print(_dumps(doc))
        _check_passed(failed, args.rtol)
        return 0
    print(f"cross-device copies per iteration: {report.copies}, {_gb(report.measured_comm_bytes)} "
          f"(forward {_gb(report.measured_forward_bytes)}, backward {_gb(report.measured_backward_bytes)}); "
          f"the plan predicted {_gb(report.predicted_comm_bytes)}")
    mem = report.predicted_per_device_bytes
    print(f"per-device memory (plan's model): {_gb(mem.get('total', 0))}; median step "
          f"{report.median_step_seconds * 1e3:.1f} ms, bind {report.bind_seconds:.2f} s")
    if report.per_device_peak_bytes:
        print("per-device peak memory (MXNet's profiler): " + ", ".join(_gb(p) for p in report.per_device_peak_bytes))
    if report.check is not None:
        c = report.check
        if c.dropout_off:
            print(f"check with Dropout off on both sides ({len(c.dropout_off)} ops at p = 0: their masks are drawn "
                  f"per device and cannot match one device's)")
        print(f"check against one device (each step from the same state): outputs max |diff| {c.output:.3g} "
              f"(rel {c.output_rel:.3g}), gradients max rel diff {c.gradient:.3g}, losses max |diff| {c.loss:.3g} "
              f"(rel {c.loss_rel:.3g}), parameter updates max rel diff {c.parameters:.3g}: "
              f"{'FAILED' if failed else 'passed'} (rtol {args.rtol:g})")
    if args.save:
        print(f"saved {args.save} (whole tensors, MXNet .params) and its plan beside it")
    if policy is not None:
        print(f"checkpoint {policy.path} every {policy.every} steps (parameters, momentum and step)")
    _check_passed(failed, args.rtol)
    return 0


def _check_passed(failed: Sequence[str], rtol: float) -> None:
    """Raises CheckFailedError (exit status 1) naming what exceeded ``rtol``, if anything did."""
    if failed:
        raise CheckFailedError(f"--check failed: {', '.join(failed)} (the partitioned run differs from one "
                               f"device; --rtol sets the tolerance, default {DEFAULT_RTOL:g})")


def _check_run_args(args) -> None:
    """The checks of ``tofu run``'s options that need no model."""
    if args.steps < 0:
        raise TofuError(f"--steps must be >= 0, got {args.steps}")
    if not 0 <= args.seed < 2**32 - 1:          # numpy's and MXNet's seeds; the batch is drawn with seed + 1
        raise TofuError(f"--seed must be in [0, 2^32 - 2], got {args.seed}")
    if not args.lr > 0:
        raise TofuError(f"--lr must be positive, got {args.lr:g}")
    if not 0 <= args.momentum < 1:
        raise TofuError(f"--momentum must be in [0, 1), got {args.momentum:g}")
    if not args.rtol > 0:
        raise TofuError(f"--rtol must be positive, got {args.rtol:g}")
    if args.plan and args.algo:
        raise TofuError("give --algo or --plan, not both")
    if args.resume and args.load:
        raise TofuError("give --load (parameters) or --resume (a checkpoint: parameters, momentum, step), not both")
    if (args.checkpoint is None) != (args.checkpoint_every is None):
        raise TofuError("--checkpoint PATH and --checkpoint-every N go together")
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise TofuError(f"--checkpoint-every must be at least 1, got {args.checkpoint_every}")
    for path, what in ((args.plan, "plan"), (args.load, "checkpoint"), (args.resume, "checkpoint")):
        _input_path(path, what)
    if args.save:
        from tofu.runtime.data import plan_path

        _output_path(args.save, "checkpoint")
        _output_path(str(plan_path(args.save)), "the plan beside --save")
    if args.checkpoint:
        _output_path(args.checkpoint, "checkpoint")
    if args.save and args.checkpoint and os.path.abspath(args.save) == os.path.abspath(args.checkpoint):
        raise TofuError(f"--save and --checkpoint name the same file '{args.save}': one would overwrite the other")
    if args.fail_at_step is not None and not 1 <= args.fail_at_step <= args.steps:
        raise TofuError(f"--fail-at-step must be a step of this run (1 to {args.steps}), got {args.fail_at_step}")


def _checkpoint_policy(args):
    """``--checkpoint`` and ``--checkpoint-every`` as a policy (None without them), the path made absolute."""
    from pathlib import Path

    from tofu.runtime.checkpoint import CheckpointPolicy

    if args.checkpoint is None:
        return None
    path = Path(args.checkpoint).absolute()
    if not path.parent.is_dir():
        raise TofuError(f"cannot write checkpoint '{args.checkpoint}': no directory '{path.parent}'")
    return CheckpointPolicy(path, args.checkpoint_every)


def _resumed(args, graph):
    """The training state of ``--resume`` (None without it), checked against the model and ``--steps``."""
    if not args.resume:
        return None
    from tofu.runtime.checkpoint import load_training_state

    state = load_training_state(args.resume, graph)
    if state.step >= args.steps:
        raise TofuError(f"checkpoint '{args.resume}' is at step {state.step}: --steps {args.steps} leaves nothing "
                        f"to run (--steps is the number of the last step)")
    return state


def _run_machine(args) -> int:
    """``tofu run`` as one machine of ``tofu launch`` (its environment names the kvstore and ``TOFU_LAUNCH_DIR``,
    where it writes ``machine{m}.json`` and ``machine{m}.params``). A failure exits at once (``os._exit``): MXNet's
    shutdown would wait at ps-lite's final barrier for machines that wait for this one's gradients."""
    import traceback

    from tofu.models import ModelOptions
    from tofu.runtime.dist_worker import MachineOptions, run_machine

    try:
        out_dir = os.environ.get("TOFU_LAUNCH_DIR")
        if not out_dir:
            raise TofuError("started as a kvstore worker (DMLC_ROLE=worker) without TOFU_LAUNCH_DIR: start it "
                            "with `tofu launch`")
        _check_run_args(args)
        options = MachineOptions(args.steps, args.lr, args.momentum, args.seed, args.ctx, _checkpoint_policy(args),
                                 args.resume, args.load, args.save, args.fail_at_step)
        report = run_machine(args.model, ModelOptions(batch=args.batch, seq_len=args.seq_len, vocab=args.vocab),
                             args.workers or 4, out_dir, algo=args.algo or "tofu", plan_path=args.plan,
                             progress=_machine_progress, options=options)
    except TofuError as e:
        print(f"tofu: error: {e}", file=sys.stderr)
        _abandon(2)
    except BaseException:           # the traceback goes to this machine's log
        traceback.print_exc()
        _abandon(1)
    print(_dumps(report.to_json()), flush=True)
    return 0


def _machine_progress(machine: int, step: int, loss: float) -> None:
    print(f"machine {machine} step {step} loss {loss:.6f}", flush=True)


def _abandon(status: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


_TOFU_RUN = ("tofu", "run")


def _remote_run_args(command: Sequence[str] | None):
    """The ``tofu run ...`` after ``--``, parsed by ``tofu run``'s own parser."""
    if command is None:
        raise TofuError("missing `--`: give the training command after it, e.g. `tofu launch --machines 2 "
                        "--workers 2 -- tofu run mlp --steps 10`")
    words = list(command)
    if words[:2] == list(_TOFU_RUN):
        words = words[2:]
    elif len(words) >= 4 and os.path.basename(words[0]).startswith("python") and words[1:4] == ["-m", *_TOFU_RUN]:
        words = words[4:]
    else:
        raise TofuError(f"after `--` comes `tofu run MODEL ...`, not `{' '.join(command) or '(nothing)'}`")
    try:
        return build_parser().parse_args(["run", *words])
    except TofuError as e:
        raise TofuError(f"in `tofu run` after `--`: {e}") from None


def _worker_command(run, workers: int, batch: int, plan: str) -> list[str]:
    """The argv every machine runs: ``python -m tofu run`` with the launch's K, global batch and plan, and every
    path absolute."""
    def path(p):
        return os.path.abspath(p)

    argv = [sys.executable, "-m", "tofu", "run", run.model, "--workers", str(workers), "--batch", str(batch),
            "--plan", path(plan), "--ctx", run.ctx, "--steps", str(run.steps), "--lr", repr(run.lr),
            "--momentum", repr(run.momentum), "--seed", str(run.seed)]
    for flag, value in (("--seq-len", run.seq_len), ("--vocab", run.vocab),
                        ("--checkpoint-every", run.checkpoint_every), ("--fail-at-step", run.fail_at_step)):
        if value is not None:
            argv += [flag, str(value)]
    for flag, value in (("--checkpoint", run.checkpoint), ("--resume", run.resume), ("--load", run.load),
                        ("--save", run.save)):
        if value is not None:
            argv += [flag, path(value)]
    return argv


def cmd_launch(args) -> int:
    """``tofu launch``: plans one machine, starts the kvstore's scheduler, servers and M machines (loopback or
    ``--hostfile``), and summarises their results (``--check``: beside one device on the global batch)."""
    import tempfile
    from pathlib import Path

    from tofu.api import load_graph, load_plan
    from tofu.models import ModelOptions
    from tofu.runtime import launch

    for flag, value in (("--machines", args.machines), ("--workers", args.workers), ("--servers", args.servers)):
        if value < 1:
            raise TofuError(f"{flag} must be at least 1, got {value}")
    if args.timeout <= 0:
        raise TofuError(f"--timeout must be positive, got {args.timeout:g}")
    run = _remote_run_args(args.remote)
    _check_run_args(run)
    if run.workers is not None and run.workers != args.workers:
        raise TofuError(f"`tofu run --workers {run.workers}` disagrees with `tofu launch --workers {args.workers}`")
    if run.memory:
        raise TofuError("--memory measures one process's devices; it does not apply under `tofu launch`")
    if run.shape:
        raise TofuError("--shape: several machines train zoo models only (their batch is split by rows)")
    _input_path(args.hostfile, "hostfile")
    hosts = launch.read_hostfile(args.hostfile) if args.hostfile else None
    if hosts is not None and len(hosts) < args.machines:
        raise TofuError(f"hostfile '{args.hostfile}' lists {len(hosts)} hosts; {args.machines} machines need "
                        f"{args.machines} (one machine per host)")
    global_batch = _split_batch(run, args.machines)
    options = ModelOptions(batch=global_batch, seq_len=run.seq_len, vocab=run.vocab)
    whole = load_graph(run.model, options)
    if hosts is None:                                    # a remote host's GPUs cannot be counted from here
        _check_contexts(args.workers, run.ctx)
    _checkpoint_policy(run)
    start = _resumed(run, whole)
    if run.load:
        from tofu.runtime.data import load_checkpoint

        load_checkpoint(run.load, whole)
    graph = _graph(run, with_loss=True)                  # one machine's share of the batch
    plan = load_plan(graph, args.workers, run.algo or "tofu", run.plan)
    log_dir = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="tofu-launch-"))
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TofuError(f"cannot create the log directory '{log_dir}': {e.strerror}") from None
    log_dir = log_dir.absolute()
    for stale in log_dir.glob("machine*.*"):            # a result is never mistaken for this run's
        stale.unlink()
    plan_file = log_dir / "plan.json"
    plan.save(plan_file)
    command = _worker_command(run, args.workers, global_batch, str(plan_file))
    env = {"TOFU_LAUNCH_DIR": str(log_dir)}
    terminal = not run.json
    if terminal:
        where = f"hosts of {args.hostfile}" if hosts else "loopback"
        print(f"tofu launch: {graph.name}, {args.machines} machines x {args.workers} {run.ctx} contexts, "
              f"{args.servers} server{'s' * (args.servers > 1)} ({where}); global batch {global_batch} "
              f"({run.batch} per machine); plan {plan.algo} ({'x'.join(str(t.factor) for t in plan.steps) or '1'}); "
              f"logs in {log_dir}", flush=True)

    def stop(signum, frame):        # the launcher killed: every process goes with it (supervise's cleanup)
        raise launch.LaunchError(f"tofu launch was stopped by {signal.Signals(signum).name}; every process it "
                                 f"started has been stopped (logs: {log_dir})")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        if hosts:
            launched = launch.launch_hosts(command, args.machines, args.servers, hosts, log_dir=log_dir,
                                           port=args.port, timeout_s=args.timeout, env=env)
        else:
            launched = launch.launch_local(command, args.machines, args.servers, log_dir=log_dir,
                                           timeout_s=args.timeout, env=env)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return _launch_summary(run, args, whole, start, log_dir, launched.seconds, terminal)


def _launch_summary(run, args, whole, start, log_dir, seconds: float, terminal: bool) -> int:
    """Each machine's steps, kvstore bytes and time, and with ``--check`` the comparison with one device."""
    import statistics

    from tofu.runtime.data import initial_values, load_checkpoint, synthetic_batch
    from tofu.runtime.distributed import check_against_one_device, collect_results

    report = collect_results(log_dir, whole, args.machines, seconds)
    check = None
    if run.check:
        values = start.values if start else (load_checkpoint(run.load, whole) if run.load
                                             else initial_values(whole, run.seed))
        check = check_against_one_device(whole, report, values, start.momentum if start else None,
                                         synthetic_batch(whole, run.seed + 1), run.lr, run.momentum)
    if not terminal:
        doc = {"model": whole.name, "machines": args.machines, "workers": args.workers, "servers": args.servers,
               "global_batch": report.machines[0].global_batch, "algo": report.machines[0].algo,
               "log_dir": str(log_dir), "seconds": seconds, "losses": list(report.losses),
               "first_step": report.machines[0].resumed_step + 1,
               "measured_kvstore_bytes": report.measured_bytes, "predicted_kvstore_bytes": report.predicted_bytes,
               "replica_max_abs_diff": report.replica_max_abs_diff,
               "machine_reports": [m.to_json() for m in report.machines]}
        if check is not None:
            doc.update({"max_abs_diff": check.loss, "loss_max_abs_diff": check.loss,
                        "parameter_max_rel_diff": check.parameters, "reference_losses": list(check.reference_losses)})
        print(_dumps(doc))
        return 0
    for m in report.machines:
        first = m.resumed_step + 1
        span = f"steps {first}-{first + len(m.losses) - 1}" if m.losses else "no steps"
        losses = f", loss on its rows {m.losses[0]:.6f} -> {m.losses[-1]:.6f}" if m.losses else ""
        pushed = statistics.median(m.pushed_bytes) if m.pushed_bytes else 0
        pulled = statistics.median(m.pulled_bytes) if m.pulled_bytes else 0
        step = statistics.median(m.step_seconds) * 1e3 if m.step_seconds else float("nan")
        print(f"machine {m.machine}: {span}{losses}; kvstore {_gb(pushed)} pushed + {_gb(pulled)} pulled per "
              f"step (predicted {_gb(2 * m.predicted_bytes)}); median step {step:.1f} ms, "
              f"{sum(m.step_seconds):.2f} s in steps")
    print(f"replicas after training: max |diff| {report.replica_max_abs_diff:.3g} between machines; "
          f"the run took {seconds:.1f} s")
    if check is not None:
        print(f"check against one device on the global batch: losses max |diff| {check.loss:.3g}, parameters "
              f"after the last step max rel diff {check.parameters:.3g}")
    if run.checkpoint:
        print(f"checkpoint {os.path.abspath(run.checkpoint)} every {run.checkpoint_every} steps (by machine 0)")
    if run.save:
        print(f"saved {os.path.abspath(run.save)} (whole tensors, MXNet .params) by machine 0")
    return 0


def _check_contexts(workers: int, ctx: str) -> None:
    if workers < 1:
        raise TofuError(f"--workers must be at least 1, got {workers}")
    if ctx == "gpu":
        import mxnet as mx

        have = mx.context.num_gpus()
        if workers > have:
            raise TofuError(f"{workers} workers need {workers} GPUs; this machine has {have}")


def _plan_text(graph, plan) -> str:
    """The paper's plan figure as text: per layer, the split of its first op and of its output per step."""
    factors = "x".join(str(s.factor) for s in plan.steps) or "1"
    lines = [f"{plan.model}: {plan.workers} workers, {plan.algo} ({factors}), searched in "
             f"{plan.search_seconds:.2f} s"]
    c = dict(plan.coarsening)
    if c:
        lines.append(f"coarsened: {c['ops']} ops -> {c['op_groups']} op groups ({c['merged_elementwise']} "
                     f"element-wise merged), {c['tensors']} tensors -> {c['tensor_groups']} tensor groups")
    splits = [dict(s.op_splits) for s in plan.steps]
    dims = [dict(s.tensor_dims) for s in plan.steps]
    seen, rows = set(), []
    for node in graph.nodes:
        layer = node.layer or node.name
        if layer in seen or (splits and splits[0][node.name].startswith(("dim", "replicate"))):
            continue
        seen.add(layer)
        out = graph.tensors[node.outputs[0]]
        rows.append((layer, node.name, " ".join(sp[node.name] for sp in splits),
                     " ".join(_dim_name(out.shape, dm[out.name]) for dm in dims)))
    if rows:
        w = [max(len(r[i]) for r in rows + [("layer", "first op", "op split", "output split")]) for i in range(4)]
        lines.append(f"{'layer':<{w[0]}}  {'first op':<{w[1]}}  {'op split':<{w[2]}}  output split (per step)")
        lines += [f"{a:<{w[0]}}  {b:<{w[1]}}  {c_:<{w[2]}}  {d}" for a, b, c_, d in rows]
    for j, s in enumerate(plan.steps, 1):
        lines.append(f"step {j}: {s.factor}-way cut in {s.groups} group(s): {_gb(s.cost_bytes)}")
    lines.append(f"communication per iteration: {_gb(plan.comm_bytes)}")
    mem = dict(plan.per_device_bytes)
    lines.append("per-device memory: " + ", ".join(f"{k} {_gb(v)}" for k, v in mem.items()))
    return "\n".join(lines)


def _dumps(doc) -> str:
    """One JSON document: a float that is not finite (a diverged loss) becomes null, never a bare NaN."""
    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v
    return json.dumps(clean(doc), allow_nan=False)


def _output_path(text: str, what: str, formats: Sequence[str] = ()) -> str:
    """A path to write ``what`` to, checked before any work: not a directory, in a directory that exists and can
    be written, with one of ``formats``' suffixes when given.

    Raises:
        TofuError: naming the path and what is wrong with it.
    """
    from pathlib import Path

    path = Path(text)
    if text.endswith(("/", os.sep)) or path.is_dir():
        raise TofuError(f"cannot write {what} '{text}': it is a directory (give a file name)")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise TofuError(f"cannot write {what} '{text}': no directory '{parent}'")
    if not os.access(parent, os.W_OK):
        raise TofuError(f"cannot write {what} '{text}': directory '{parent}' is not writable")
    if path.exists() and not path.is_file():
        raise TofuError(f"cannot write {what} '{text}': it exists and is not a regular file")
    if formats and path.suffix.lower().lstrip(".") not in formats:
        raise TofuError(f"cannot write {what} '{text}': unknown format '{path.suffix or '(none)'}' "
                        f"(one of {', '.join('.' + f for f in formats)})")
    return text


def _input_path(text: str | None, what: str) -> None:
    """That an existing ``text`` is a regular file (a named pipe would block the read forever; a directory
    would fail later); a missing one is left to the reader, which names it."""
    if text is not None and os.path.exists(text) and not os.path.isfile(text):
        raise TofuError(f"{what} '{text}' is not a regular file")


def _finite(text: str) -> float:
    """An option's float: finite, or a one-line error (``--lr nan`` would train to NaN)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"'{text}' is not a finite number")
    return value


def _jsonable(v):
    return list(v) if isinstance(v, tuple) else v


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tofu", description="Automatic partitioning of MXNet training graphs (Tofu).")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress on stderr")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("inspect", help="ops, parameter bytes and training-memory estimate of a model")
    _model_args(p)
    p.add_argument("--device-memory", type=parse_bytes, default=parse_bytes("12GiB"),
                   help="device memory to compare with (default 12GiB)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(run=cmd_inspect)

    p = sub.add_parser("ops", help="every operator with a TDL description, and its partition strategies")
    p.add_argument("--json", action="store_true",
                   help="one JSON object on stdout, with each op's strategies on its first Case")
    p.add_argument("--op", metavar="NAME", help="one operator: its description and strategies")
    p.add_argument("--case", type=int, metavar="N", help="with --op: analyse its Case number N (default 0)")
    p.add_argument("--workers", type=int, metavar="K",
                   help=f"with --op: show and kernel-check each strategy for K workers (default {_KERNEL_K})")
    _model_args(p, positional=False)
    p.set_defaults(run=cmd_ops)

    from tofu.search.algorithms import ALGORITHMS
    p = sub.add_parser("plan", help="partition a model over K workers (the plan: per step, per tensor and op)")
    _model_args(p)
    p.add_argument("--workers", type=int, help="number of devices K (default 8; with --load, checked)")
    p.add_argument("--machines", type=int, metavar="M",
                   help="plan one of M machines: its K devices on --batch / M rows; reports the kvstore's "
                        "inter-machine bytes beside the plan's intra-machine bytes")
    p.add_argument("--algo", choices=sorted(ALGORITHMS), default="tofu", help="plan finder (default tofu)")
    p.add_argument("--out", metavar="PLAN.json", help="save the plan")
    p.add_argument("--load", metavar="PLAN.json", help="show a saved plan (checked against the model)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--steps", action="store_true", help="with --json: include every tensor's and op's split")
    p.add_argument("--figure", metavar="PLAN.png", help="draw each chosen tensor's split at every cut")
    p.add_argument("--figure-tensors", metavar="REGEX", default="",
                   help="with --figure: the tensors to draw (default every tensor, at most 150)")
    p.set_defaults(run=cmd_plan)

    p = sub.add_parser("run", help="train a model partitioned over K devices, measured (--check: against one)")
    _model_args(p)
    p.add_argument("--workers", type=int, help="number of devices K (default 4; under `tofu launch`, its K)")
    p.add_argument("--algo", choices=sorted(ALGORITHMS), help="plan finder (default tofu)")
    p.add_argument("--plan", metavar="PLAN.json", help="run a saved plan (checked against the model)")
    p.add_argument("--ctx", choices=("cpu", "gpu"), default="cpu", help="device kind (default cpu)")
    p.add_argument("--steps", type=int, default=10, help="training steps (default 10)")
    p.add_argument("--lr", type=_finite, default=0.05, help="SGD learning rate (default 0.05)")
    p.add_argument("--momentum", type=_finite, default=0.9, help="SGD momentum, in [0, 1) (default 0.9)")
    p.add_argument("--seed", type=int, default=0, help="seed of the initial values and the batch (0 to 2^32 - 2)")
    p.add_argument("--check", action="store_true",
                   help="run one device beside it and compare (Dropout off on both sides); exit 1 beyond --rtol")
    p.add_argument("--rtol", type=_finite, default=DEFAULT_RTOL,
                   help=f"with --check: the largest relative difference of outputs, gradients, losses and "
                        f"parameters that passes (default {DEFAULT_RTOL:g})")
    p.add_argument("--memory", action="store_true",
                   help="measure each device's peak memory over one step with MXNet's profiler (up to 4 CPU contexts)")
    p.add_argument("--save", metavar="CKPT.params", help="save the trained parameters (whole tensors)")
    p.add_argument("--load", metavar="CKPT.params", help="start from saved parameters")
    p.add_argument("--checkpoint", metavar="CKPT.params",
                   help="write parameters, momentum and step here (atomically) every --checkpoint-every steps")
    p.add_argument("--checkpoint-every", type=int, metavar="N", help="with --checkpoint: every N steps")
    p.add_argument("--resume", metavar="CKPT.params",
                   help="continue from a --checkpoint file (its parameters, momentum and step) up to --steps")
    p.add_argument("--fail-at-step", type=int, metavar="N",
                   help="for testing only: after step N the process (under launch: the last machine) kills itself")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(run=cmd_run)

    p = sub.add_parser("launch", help="hybrid training on M machines: `tofu launch --machines M --workers K -- "
                                      "tofu run MODEL ...`")
    p.add_argument("--machines", type=int, required=True, help="machines M (kvstore workers), each on its share")
    p.add_argument("--workers", type=int, required=True, help="devices K per machine")
    p.add_argument("--servers", type=int, default=1, help="kvstore servers S (default 1)")
    p.add_argument("--hostfile", metavar="FILE",
                   help="start the processes over ssh on these hosts (docs/distributed.md); default: loopback")
    p.add_argument("--port", type=int, default=9091, help="with --hostfile: the scheduler's port (default 9091)")
    p.add_argument("--log-dir", metavar="DIR",
                   help="per-process logs, the plan and each machine's results (default: a new temporary directory)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                   help="the whole run's limit, start-up included (default 600)")
    p.set_defaults(run=cmd_launch)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parse(list(sys.argv[1:] if argv is None else argv))
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                            format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
        return args.run(args)
    except TofuError as e:
        print(f"tofu: error: {e}", file=sys.stderr)
        return e.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:             # `tofu ops | head`: the reader has gone, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _parse(argv: list[str]) -> argparse.Namespace:
    """The command line; for ``tofu launch``, what follows the first ``--`` is its training command
    (``args.remote``, None without ``--``)."""
    if "--" in argv:
        cut = argv.index("--")
        args = build_parser().parse_args(argv[:cut])
        if args.command == "launch":
            args.remote = argv[cut + 1:]
            return args
    if "launch" in argv and "run" in argv[argv.index("launch"):]:
        _remote_run_args(None)          # `tofu launch ... tofu run ...` without the `--`
    args = build_parser().parse_args(argv)
    args.remote = None
    return args


if __name__ == "__main__":
    sys.exit(main())
