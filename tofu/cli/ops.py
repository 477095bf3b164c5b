"""``tofu ops``: the TDL-described operators (``--json``: with the partition strategies of each op's first Case;
``--op NAME``: one op's strategies and their symbolic regions, on its Case ``--case N`` and for ``--workers K``;
``--model MODEL``: the ops of a model's graph)."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tofu.cli.common import dumps, jsonable, model_args, model_graph
from tofu.errors import TofuError, UnsupportedOperatorError

if TYPE_CHECKING:       # the analysis stages are imported when a command needs them (`tofu ops` stays fast)
    from tofu.analysis.strategies import Analysis, Placement, Region, SymbolicStrategy
    from tofu.graph.attrs import Attrs
    from tofu.tdl.describe import Case, OpDescription, OpSpec

_KERNEL_K = 2         # the default worker count for which `tofu ops` checks that MXNet's kernel runs each shard

def add_parser(sub) -> None:
    p = sub.add_parser("ops", help="every operator with a TDL description, and its partition strategies")
    p.add_argument("--json", action="store_true",
                   help="one JSON object on stdout, with each op's strategies on its first Case")
    p.add_argument("--op", metavar="NAME", help="one operator: its description and strategies")
    p.add_argument("name", nargs="?", metavar="OP", help="the same as --op OP")
    p.add_argument("--case", type=int, metavar="N", help="with --op: analyse its Case number N (default 0)")
    p.add_argument("--workers", type=int, metavar="K",
                   help=f"with --op: show and kernel-check each strategy for K workers (default {_KERNEL_K})")
    model_args(p, positional=False)
    p.set_defaults(run=run)


def run(args) -> int:
    from tofu import registry

    specs = registry.load_builtin_operators()
    if args.name is not None:
        if args.op is not None and args.op != args.name:
            raise TofuError(f"two operators named: '{args.name}' and --op {args.op}")
        args.op = args.name
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
            print(dumps(_op_json(args.op, spec, with_strategies=True, case=case, workers=workers)))
        else:
            print(_op_text(args.op, spec, case, workers))
        return 0
    rows = [_op_json(name, spec, with_strategies=args.json) for name, spec in sorted(specs.items())]
    if args.json:
        print(dumps({"ops": rows}))
        return 0
    for r in rows:
        print(f"{r['name']:<22} ({', '.join(r['inputs'])}) -> {', '.join(r['outputs'])}   {r['doc']}")
    print(f"{len(rows)} operators described")
    return 0


def _op_json(name: str, spec: OpSpec, with_strategies: bool, case: int = 0, workers: int | None = None) -> dict:
    """One op of ``tofu ops --json``; its strategies are those of its Case number ``case`` (default the first),
    checked for ``workers`` (default 2)."""
    attrs = {f.name: (None if f.default is dataclasses.MISSING else jsonable(f.default))
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
                "attrs": {k: jsonable(v) for k, v in self.case.attrs.items()},
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
    reason = example.kernel_reason(s)
    names = [t.name for t in example.desc.inputs]
    entry = {"var": s.var, "kind": s.kind, "outputs": [_placement_json(p) for p in s.outputs],
             "regions": [None if box is None else [str(iv) for iv in box] for box in s.regions],
             "once_inputs": [names[i] for i in s.once_inputs],
             "exchanges": [{"tensor": x.tensor, "reducer": x.reducer, "var": x.var} for x in s.exchanges],
             "expansion": _expands(example, s, reason is None),
             "kernel_executable": reason is None}
    if reason is not None:
        entry["kernel_reason"] = reason
    return entry


def _expands(example: _Example, s: SymbolicStrategy, kernel_runs: bool) -> bool:
    """Whether the op's expansion runs ``s``: a split that exchanges statistics, or a reduction split the kernel
    cannot run and the expansion declares it does (``partials``)."""
    from tofu import registry
    from tofu.analysis.views import expands_partials

    if s.exchanges:
        return registry.expansion(example.op) is not None
    return s.kind == "reduce" and not kernel_runs and expands_partials(example.op, example.desc)


def _op_text(name: str, spec: OpSpec, case: int = 0, workers: int = _KERNEL_K) -> str:
    """``tofu ops --op NAME``: the description and its strategies with their symbolic regions, on Case number
    ``case``, each instantiated and kernel-checked for ``workers`` workers."""
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
        if _expands(example, s, reason is None):
            lines.append(f"      runs by {name}'s expansion into MXNet operators, " +
                         ("the statistics all-reduced" if s.exchanges else "each worker's partial output from its "
                                                                          "pieces"))
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

    graph = model_graph(args)
    rows = []
    for op, count in graph.op_counts().items():
        node = next(n for n in graph.nodes if n.op == op)
        desc = describe(op, node.attrs, [graph.tensor(t).shape for t in node.inputs],
                        [graph.tensor(t).shape for t in node.outputs], node=node.name)
        found = analyse(desc).strategies
        rows.append({"name": op, "count": count, "node": node.name, "strategies": len(found),
                     "vars": [s.var if s.kind == "output" else f"{s.var}({s.outputs[0].reducer})" for s in found]})
    if args.json:
        print(dumps({"model": graph.name, "ops": rows}))
        return 0
    print(f"model {graph.name}: {len(graph.nodes)} ops, {len(rows)} distinct")
    print(f"{'op':<22}{'count':>6}  {'strategies':>10}  representative node: split variables")
    for r in rows:
        print(f"{r['name']:<22}{r['count']:>6}  {r['strategies']:>10}  {r['node']}: {' '.join(r['vars']) or '-'}")
    return 0
