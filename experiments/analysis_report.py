"""Completeness report of the partition analysis: every registered operator, every Case, k workers.

    python experiments/analysis_report.py [--k 2] [--out results/analysis_report.csv] [--op NAME ...]

For each strategy that ``tofu.analysis.strategies`` derives it records whether MXNet's kernel can run every
worker's shard (``tofu.analysis.shard.shard_call``; else the reason), and compares each worker's derived
input regions with a brute-force enumeration of the elements the description reads (:class:`Touched`,
written here, independently of the analysis). A region larger than the brute-force box is a *miss* (the
analysis asks for more than is needed); a smaller one would be *unsound*. Reductions the analysis offers no
strategy for (inside ``compute`` tensors, or not at the top level of the output) are listed as nested
reductions, with the strategies under which workers exchange their partial statistics (``Exchange``); a
strategy that exchanges statistics runs by the op's expansion (``tdl_expansion``) where it declares one.

Output: a Markdown table on stdout (one row per op and case), the not-kernel-executable strategies with
their reasons, the misses, a summary line, and a CSV with one row per (op, case, strategy).
"""
from __future__ import annotations

import argparse
import csv
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tofu import registry
from tofu.analysis.shard import shard_call
from tofu.analysis.views import expands_partials
from tofu.analysis.strategies import (PartialSum, PartitionStrategy, Region, Replicate, SplitDim, SymbolicStrategy,
                                      analyse, instantiate, reduction_root, worker_ranges)
from tofu.errors import TofuError, UnsupportedOperatorError
from tofu.graph.single_op import infer_op_shapes
from tofu.tdl.describe import OpDescription, describe
from tofu.tdl.expr import (FULL, Access, Affine, Binary, Compare, Computed, Const, FloorDiv, IndexExpr, IndexValue,
                           Mod, OpaqueCall, Reduce, Select, Unary, Uses, ValueExpr, Var, children)

COLUMNS = ("op", "case", "case_shapes", "case_attrs", "k", "var", "kind", "outputs", "split_extent", "applicable",
           "kernel_executable", "kernel_reason", "exchanges", "exchange_elements", "expansion", "once_inputs",
           "exact_inputs", "miss_inputs", "miss_detail", "unsound_inputs", "unsplittable", "nested_reductions")

# --------------------------------------------------------------------------------------- brute force

_UNARY = {"neg": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "abs": np.abs,
          "square": np.square, "sign": np.sign}
_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
           "maximum": np.maximum, "minimum": np.minimum, "pow": np.power}
_COMPARE = {"gt": np.greater, "ge": np.greater_equal, "lt": np.less, "le": np.less_equal, "eq": np.equal,
            "ne": np.not_equal}
_REDUCE = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}


class Touched:
    """The bounding box of the in-bounds elements of every input that a part of an operator may read.

    A part is given by inclusive ranges of some index variables (``restrict``); every other variable takes
    its whole range. Enumeration is exhaustive over the index grid and independent of the input values: a
    data-dependent subscript may read any element of its dimension, a ``:`` slice reads all of it, and a
    selection reads both branches unless its condition depends on indices only, in which case each point
    reads the branch it takes, and declared reads (``uses``) count. Intermediate tensors are enumerated at
    exactly the elements that are read.
    """

    def __init__(self, restrict: Mapping[Var, tuple[int, int]]):
        self.restrict = restrict
        self.boxes: dict[int, list[tuple[int, int]]] = {}     # id(input) -> per-dim (lo, hi)
        self._done: dict[int, set[tuple[int, ...]]] = {}      # id(computed) -> elements already enumerated

    def output(self, vars_: Sequence[Var], shape: Sequence[int], body: ValueExpr) -> None:
        ranges = [self.restrict.get(v, (0, n - 1)) for v, n in zip(vars_, shape)]
        nd = len(ranges)
        env = {v: _axis(d, b - a + 1, nd) + a for d, (v, (a, b)) in enumerate(zip(vars_, ranges))}
        self.value(body, env, nd, np.ones((1,) * nd, dtype=bool))

    # each method returns the value on the grid when it does not depend on the inputs' values, else None
    def value(self, e: ValueExpr, env: dict, nd: int, live: np.ndarray) -> np.ndarray | None:
        if isinstance(e, Const):
            return np.full((1,) * nd, e.value)
        if isinstance(e, IndexValue):
            return self.index(e.index, env, nd).astype(np.float64)
        if isinstance(e, Select):
            cond = self.value(e.cond, env, nd, live)
            if cond is None:
                then, other = self.value(e.then, env, nd, live), self.value(e.other, env, nd, live)
            else:
                then = self.value(e.then, env, nd, live & (cond != 0))
                other = self.value(e.other, env, nd, live & (cond == 0))
            return None if cond is None or then is None or other is None else np.where(cond != 0, then, other)
        if isinstance(e, Access):
            self.access(e, env, nd, live)
            return None
        if isinstance(e, Reduce):
            ranges = [self.restrict.get(v, (0, n - 1)) for v, n in zip(e.vars, e.extents)]
            inner = nd + len(ranges)
            env2 = {v: _lift(a, inner) for v, a in env.items()}
            env2.update({v: _axis(nd + d, b - a + 1, inner) + a for d, (v, (a, b)) in enumerate(zip(e.vars, ranges))})
            body = self.value(e.body, env2, inner, _lift(live, inner))
            if body is None:
                return None
            shape = np.broadcast_shapes(body.shape, (1,) * nd + tuple(b - a + 1 for a, b in ranges))
            return _REDUCE[e.kind](np.broadcast_to(body, shape), axis=tuple(range(nd, inner)), keepdims=False)
        if isinstance(e, OpaqueCall):
            for a in e.args:
                self.access(a, env, nd, live)
            return None
        if isinstance(e, Uses):
            for r in e.reads:
                self.access(r, env, nd, live)
            return self.value(e.value, env, nd, live)
        known = [self.value(c, env, nd, live) for c in children(e)]
        if any(k is None for k in known):
            return None
        with np.errstate(all="ignore"):
            if isinstance(e, Unary) and e.fn in _UNARY:
                return _UNARY[e.fn](known[0])
            if isinstance(e, Binary) and e.fn in _BINARY:
                return _BINARY[e.fn](*known)
            if isinstance(e, Compare):
                return _COMPARE[e.fn](*known).astype(np.float64)
        return None

    def index(self, e: IndexExpr, env: dict, nd: int) -> np.ndarray:
        if isinstance(e, Var):
            return env[e]
        if isinstance(e, Affine):
            out = np.full((1,) * nd, e.const, dtype=np.int64)
            for atom, c in e.terms:
                out = out + c * self.index(atom, env, nd)
            return out
        if isinstance(e, FloorDiv):
            return np.floor_divide(self.index(e.arg, env, nd), e.k)
        if isinstance(e, Mod):
            return np.mod(self.index(e.arg, env, nd), e.k)
        raise TypeError(f"no index evaluation for {e!r}")

    def access(self, acc: Access, env: dict, nd: int, live: np.ndarray) -> None:
        shape = acc.tensor.shape
        subs: list[np.ndarray | None] = []      # None: any element of the dimension
        for d, s in enumerate(acc.index):
            if s is FULL:
                subs.append(None)
            elif isinstance(s, ValueExpr):
                v = self.value(s, env, nd, live)
                subs.append(None if v is None else np.clip(np.rint(v).astype(np.int64), 0, shape[d] - 1))
            else:
                subs.append(_lift(self.index(s, env, nd), nd))
        known = [(d, s) for d, s in enumerate(subs) if s is not None]
        grids = np.broadcast_arrays(live, *(s for _, s in known))
        mask = grids[0].copy()
        for (d, _), g in zip(known, grids[1:]):
            mask &= (g >= 0) & (g < shape[d])
        if not mask.any():
            return
        coords = {d: g[mask] for (d, _), g in zip(known, grids[1:])}
        if isinstance(acc.tensor, Computed):
            self._computed(acc.tensor, coords)
            return
        box = [(int(coords[d].min()), int(coords[d].max())) if d in coords else (0, n - 1) for d, n in enumerate(shape)]
        old = self.boxes.get(id(acc.tensor))
        self.boxes[id(acc.tensor)] = box if old is None else [(min(a, c), max(b, e))
                                                             for (a, b), (c, e) in zip(old, box)]

    def _computed(self, t: Computed, coords: dict[int, np.ndarray]) -> None:
        """Enumerates ``t``'s body at exactly the elements read (a dimension without coords: all of it)."""
        dims = sorted(coords)
        rows = np.unique(np.stack([coords[d] for d in dims], axis=1), axis=0) if dims else np.zeros((1, 0), np.int64)
        points = []
        for row in rows:
            fixed = dict(zip(dims, row))
            points.extend(_expand([fixed.get(d) for d in range(len(t.shape))], t.shape))
        done = self._done.setdefault(id(t), set())
        new = sorted(set(points) - done)
        if not new:
            return
        done.update(new)
        pts = np.array(new, dtype=np.int64).reshape(len(new), len(t.shape))
        env = {v: pts[:, d] for d, v in enumerate(t.vars)}
        self.value(t.body, env, 1, np.ones((1,), dtype=bool))


def _expand(fixed: list, shape: Sequence[int]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for f, n in zip(fixed, shape):
        out = [p + (int(f),) for p in out] if f is not None else [p + (i,) for p in out for i in range(n)]
    return out


def _axis(k: int, n: int, ndim: int) -> np.ndarray:
    shape = [1] * ndim
    shape[k] = n
    return np.arange(n, dtype=np.int64).reshape(shape)


def _lift(a: np.ndarray, ndim: int) -> np.ndarray:
    return a.reshape(a.shape + (1,) * (ndim - a.ndim)) if a.ndim < ndim else a


# ------------------------------------------------------------------------------------------ the report

@dataclass(frozen=True)
class InputCheck:
    """One input of one strategy, over all workers: derived regions against the brute-force boxes."""

    name: str
    verdict: str            # "exact" | "miss" | "unsound"
    detail: str


@dataclass(frozen=True)
class StrategyRow:
    op: str
    case: int
    case_text: str
    strategy: SymbolicStrategy
    instance: PartitionStrategy | None        # None: the split extent is not a multiple of k
    kernel_reason: str | None                 # None: MXNet's kernel runs every worker's shard
    inputs: tuple[InputCheck, ...]
    expansion: bool = False                   # the op's expansion runs it (statistics exchanged, or ``partials``)

    @property
    def kernel_executable(self) -> bool:
        return self.instance is not None and self.kernel_reason is None

    @property
    def runnable(self) -> bool:
        """By MXNet's kernel on each shard, or by the op's expansion (statistics exchanged, or a reduction split
        the kernel cannot run, ``partials``)."""
        return self.kernel_executable or (self.instance is not None and self.expansion)

    def with_verdict(self, verdict: str) -> tuple[InputCheck, ...]:
        return tuple(c for c in self.inputs if c.verdict == verdict)


@dataclass(frozen=True)
class CaseReport:
    op: str
    case: int
    case_text: str
    rows: tuple[StrategyRow, ...]
    unsplittable: tuple[str, ...]             # "var: reason"
    nested: tuple[NestedReduction, ...]       # reductions without a strategy of their own


def compare_regions(desc: OpDescription, s: PartitionStrategy) -> tuple[InputCheck, ...]:
    """Per input, the derived regions of all workers against the brute-force boxes."""
    found: list[list[tuple[int, Region | None, list | None]]] = [[] for _ in desc.inputs]
    for w in range(s.k):
        touched = Touched(worker_ranges(desc, s, w))
        for out in desc.outputs:
            touched.output(out.vars, out.shape, out.body)
        for i, t in enumerate(desc.inputs):
            found[i].append((w, s.input_regions[w][i], touched.boxes.get(id(t))))
    checks = []
    for t, per_worker in zip(desc.inputs, found):
        verdict, notes = "exact", []
        for w, region, brute in per_worker:
            v = _verdict(region, brute)
            if v != "exact":
                notes.append(f"w{w}: derived {_fmt_box(region.bounds if region else None)}, "
                             f"needed {_fmt_box(brute)}")
                verdict = "unsound" if "unsound" in (v, verdict) else "miss"
        checks.append(InputCheck(t.name, verdict, "; ".join(notes)))
    return tuple(checks)


def _verdict(region: Region | None, brute: list | None) -> str:
    if brute is None:
        return "exact" if region is None else "miss"
    if region is None:
        return "unsound"
    derived = list(region.bounds)
    if derived == brute:
        return "exact"
    inside = all(a <= c and e <= b for (a, b), (c, e) in zip(derived, brute))
    return "miss" if inside else "unsound"


def _fmt_box(box) -> str:
    return "nothing" if box is None else "x".join(f"[{a},{b}]" for a, b in box)


@dataclass(frozen=True)
class NestedReduction:
    """A reduction that no strategy splits, and the strategies (split variables) that exchange its partials."""

    kind: str
    vars: tuple[str, ...]
    where: str              # "'mean'" (an intermediate tensor), "output 'output'", or "top level"
    exchanged_by: tuple[str, ...]

    def __str__(self) -> str:
        text = f"{self.kind}({', '.join(self.vars)}) in {self.where}"
        return text + (f" [exchanged under {' '.join(self.exchanged_by)}]" if self.exchanged_by else "")


def nested_reductions(desc: OpDescription, strategies: Sequence[SymbolicStrategy]) -> tuple[NestedReduction, ...]:
    """Reductions that no strategy splits: inside intermediate tensors, below the top of an output, or
    top-level variables the analysis does not offer; with the strategies that exchange their partials."""
    offered = {s.var for s in strategies if s.kind == "reduce"}
    root = reduction_root(desc.outputs[0].body) if len(desc.outputs) == 1 else None
    found: dict[tuple, NestedReduction] = {}
    seen: set[int] = set()

    def walk(e: ValueExpr, where: str, owner: Computed | None) -> None:
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, Reduce):
                names = tuple(v.name for v in x.vars)
                if root is not None and x is root[0]:
                    names = tuple(n for n in names if n not in offered)
                    where_x = "top level (not offered)"
                else:
                    where_x = where
                owner_root = reduction_root(owner.body) if owner is not None else None
                exchanged = tuple(s.var for s in strategies if owner_root is not None and x is owner_root[0]
                                  and any(ex.tensor == owner.name for ex in s.exchanges))
                if names:
                    found.setdefault((x.kind, names, where_x), NestedReduction(x.kind, names, where_x, exchanged))
            if isinstance(x, Access) and isinstance(x.tensor, Computed) and id(x.tensor) not in seen:
                seen.add(id(x.tensor))
                walk(x.tensor.body, f"'{x.tensor.name}'", x.tensor)
            stack.extend(children(x))

    for out in desc.outputs:
        walk(out.body, f"output '{out.name}' (below the top)", None)
    return tuple(found.values())


def kernel_reason(op: str, attrs, s: PartitionStrategy, desc: OpDescription) -> str | None:
    """None when MXNet's kernel can run every worker's shard, else why not."""
    try:
        for w in range(s.k):
            shard_call(op, attrs, s, w, desc)
    except TofuError as e:
        return str(e)
    return None


def report_case(op: str, index: int, case, k: int) -> CaseReport:
    attrs = case.parsed_attrs()
    desc = describe(op, attrs, case.shapes, infer_op_shapes(op, attrs, case.shapes))
    analysis = analyse(desc)
    expansion = registry.expansion(op)
    rows = []
    for sym in analysis.strategies:
        inst = instantiate(desc, sym, k)
        if inst is None:
            rows.append(StrategyRow(op, index, str(case), sym, None, None, ()))
            continue
        reason = kernel_reason(op, attrs, inst, desc)
        expands = expansion is not None and bool(sym.exchanges) or (
            sym.kind == "reduce" and reason is not None and expands_partials(op, desc))
        rows.append(StrategyRow(op, index, str(case), sym, inst, reason, compare_regions(desc, inst), expands))
    return CaseReport(op, index, str(case), tuple(rows), tuple(f"{u.var}: {u.reason}" for u in analysis.unsplittable),
                      nested_reductions(desc, analysis.strategies))


def build_report(k: int, ops: Sequence[str] = ()) -> list[CaseReport]:
    specs = registry.load_builtin_operators()
    names = sorted(ops) if ops else sorted(specs)
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise UnsupportedOperatorError(unknown[0], known=specs)
    return [report_case(op, i, case, k) for op in names for i, case in enumerate(specs[op].cases)]


# --------------------------------------------------------------------------------------------- output

def _placement(p) -> str:
    if isinstance(p, SplitDim):
        return f"split:{p.dim}"
    if isinstance(p, PartialSum):
        return f"partial:{p.reducer}"
    assert isinstance(p, Replicate)
    return "replicate"


def _label(s: SymbolicStrategy) -> str:
    return s.var if s.kind == "output" else f"{s.var}({s.outputs[0].reducer})"


def csv_rows(reports: Sequence[CaseReport], k: int) -> list[dict]:
    out = []
    for r in reports:
        spec = registry.REGISTRY[r.op].cases[r.case]
        common = {"op": r.op, "case": r.case, "case_shapes": repr(spec.shapes), "case_attrs": repr(dict(spec.attrs)),
                  "k": k, "unsplittable": "; ".join(r.unsplittable), "nested_reductions": "; ".join(map(str, r.nested))}
        if not r.rows:
            out.append({**common, "kind": "none"})
        for row in r.rows:
            s = row.strategy
            out.append({**common, "var": s.var, "kind": s.kind, "outputs": " ".join(map(_placement, s.outputs)),
                        "split_extent": s.split_extent, "applicable": row.instance is not None,
                        "kernel_executable": row.kernel_executable if row.instance is not None else "",
                        "kernel_reason": row.kernel_reason or "",
                        "exchanges": " ".join(f"{x.tensor}:{x.reducer}({x.var})" for x in s.exchanges),
                        "exchange_elements": " ".join(map(str, row.instance.exchange_elements))
                        if row.instance is not None else "",
                        "expansion": row.expansion,
                        "once_inputs": " ".join(str(i) for i in s.once_inputs),
                        "exact_inputs": " ".join(c.name for c in row.with_verdict("exact")),
                        "miss_inputs": " ".join(c.name for c in row.with_verdict("miss")),
                        "miss_detail": " | ".join(f"{c.name}: {c.detail}" for c in row.with_verdict("miss")),
                        "unsound_inputs": " ".join(c.name for c in row.with_verdict("unsound"))})
    return out


def markdown(reports: Sequence[CaseReport], k: int) -> str:
    head = ["op", "case", f"splittable (k={k})", "kernel-executable", "by expansion",
            f"extent not a multiple of {k}", "unsplittable", "misses", "nested reductions (statistics exchange)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in reports:
        applicable = [row for row in r.rows if row.instance is not None]
        misses = [f"{_label(row.strategy)}: {', '.join(c.name for c in row.with_verdict('miss'))}"
                  for row in applicable if row.with_verdict("miss")]
        cells = [f"`{r.op}`", f"{r.case}: `{r.case_text}`",
                 " ".join(_label(row.strategy) for row in applicable) or "-",
                 " ".join(_label(row.strategy) for row in applicable if row.kernel_executable) or "-",
                 " ".join(_label(row.strategy) for row in applicable if row.runnable and not row.kernel_executable)
                 or "-",
                 " ".join(f"{_label(row.strategy)}[{row.strategy.split_extent}]"
                          for row in r.rows if row.instance is None) or "-",
                 "; ".join(r.unsplittable) or "-", "; ".join(misses) or "-",
                 "; ".join(map(str, r.nested)) or "-"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    not_exec = [(r, row) for r in reports for row in r.rows if row.instance is not None and row.kernel_reason]
    if not_exec:
        lines += ["", f"### Not kernel-executable (k={k})", ""]
        lines += [f"- `{r.op}` case {r.case} `{_label(row.strategy)}`"
                  f"{' (runs by expansion)' if row.runnable else ''}: {row.kernel_reason}" for r, row in not_exec]
    detail = [(r, row, c) for r in reports for row in r.rows for c in row.inputs if c.verdict != "exact"]
    if detail:
        lines += ["", f"### Regions larger than needed (k={k})", ""]
        lines += [f"- `{r.op}` case {r.case} `{_label(row.strategy)}` {c.verdict} on `{c.name}`: {c.detail}"
                  for r, row, c in detail]
    return "\n".join(lines)


def summary(reports: Sequence[CaseReport], k: int) -> str:
    rows = [row for r in reports for row in r.rows if row.instance is not None]
    misses = sum(len(row.with_verdict("miss")) for row in rows)
    unsound = sum(len(row.with_verdict("unsound")) for row in rows)
    nested = sum(1 for r in reports if r.nested)
    exchanging = [row for row in rows if row.strategy.exchanges]
    return (f"ops {len({r.op for r in reports})}, cases {len(reports)}, strategies {len(rows)} (k={k}), "
            f"kernel-executable {sum(row.kernel_executable for row in rows)}, "
            f"exchanging statistics {len(exchanging)} ({sum(row.expansion for row in exchanging)} by expansion), "
            f"reduction splits by expansion {sum(row.expansion and not row.strategy.exchanges for row in rows)}, "
            f"not runnable {sum(not row.runnable for row in rows)}, "
            f"misses {misses} (inputs; in {sum(1 for row in rows if row.with_verdict('miss'))} strategies), "
            f"unsound {unsound}, cases with nested reductions {nested}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=2, help="number of workers (default 2)")
    parser.add_argument("--out", type=Path, default=Path("results/analysis_report.csv"))
    parser.add_argument("--op", action="append", default=[], help="only this operator (repeatable)")
    args = parser.parse_args(argv)
    if args.k < 2:
        parser.error(f"--k must be at least 2, got {args.k}")
    warnings.filterwarnings("ignore", message="Cannot decide shape")   # MXNet, on rejected shard attributes
    try:
        reports = build_report(args.k, args.op)
    except TofuError as e:
        print(f"analysis_report: error: {e}", file=sys.stderr)
        return 2
    print(markdown(reports, args.k))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(csv_rows(reports, args.k))
    print()
    print(summary(reports, args.k))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
