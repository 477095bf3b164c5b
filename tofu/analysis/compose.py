"""Every worker's kernel call under a whole plan: the steps of a recursive partition composed per op.

Input: an op (its :class:`~tofu.analysis.views.NodeView`), the plan's choice for it at every step, and the
steps' widths f_1 .. f_m. Output: for each of the k = f_1 ... f_m workers a :class:`WorkerCall`: the
attributes MXNet's kernel runs with, the box of every input it reads and the box of every output it produces,
in the coordinates of the whole tensors, and over which steps an output is a partial sum.

Worker w has coordinates (c_1, .., c_m), c_j in [0, f_j), w = sum_j c_j prod_{i>j} f_i (the first step's
groups are the slowest-varying). Step j applies the chosen strategy to the op as worker w's group sees it
after steps 1..j-1 (its own view: border workers of a halo split differ from the others) and takes part c_j:

    input box   B_j = B_{j-1} restricted to the region R_{c_j}(s_j) of the view's input (shifted by its origin)
    output box  O_j = O_{j-1} restricted to P_{c_j}(s_j) (a split output), or O_{j-1} (partial, replicated)
    partial     S_j = S_{j-1} + {j} when s_j's output is a partial sum

A step whose strategy exchanges statistics (BatchNorm on a batch split) is run by the op's expansion: the
worker then runs the expansion on its final pieces, the statistics combined over the workers that differ
from it only at such steps. So is a split of a reduction whose shards MXNet's kernel cannot run but the op's
expansion can (``partials``: Embedding split along its table's rows): its output is partial as any
partition-n-reduce's, nothing is exchanged. An op computed whole at step j (the fallback ``var*``, or a kernel
that crops) stops there: every worker of the group computes the view's whole output, later steps do not narrow it. A
kernel that computes more than the worker's part (``ShardCall.keep``: a halo split run on the region with its
halo, a reshape of a longer piece) stops there too, keeping its part (``WorkerCall.keep``); a kernel whose
output is the partial of a mean times a factor (``ShardCall.scale``) multiplies the worker's ``scale``.
Boxes may extend past a tensor's ends: those elements are the access's fill value (a convolution's padding).
"""
from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from tofu.analysis.strategies import PartialSum, PartitionStrategy, SplitDim, signature_strategies
from tofu.analysis.views import NodeView, expands_partials, kernel_call
from tofu.errors import AnalysisError
from tofu.tdl.describe import describe

Box = tuple[tuple[int, int], ...]        # per dimension [lo, hi) in the whole tensor's coordinates


class ChoiceKind(enum.Enum):
    OUTPUT = "output"      # split an output index variable: results concatenate
    REDUCE = "reduce"      # split a reduction variable: partial outputs are reduced (partition-n-reduce)
    WHOLE = "whole"        # an output split computed whole on every worker, each keeping its part (``var*``)
    FOLLOW = "follow"      # a merged element-wise op: it follows its tensors' split (``dim``; None: replicated)


@dataclass(frozen=True)
class OpChoice:
    """What a plan makes one op do at one step."""

    kind: ChoiceKind
    var: str | None = None       # OUTPUT, REDUCE, WHOLE: the split index variable
    dim: int | None = None       # FOLLOW: the split dimension of the op's tensors

    def __str__(self) -> str:
        if self.kind is ChoiceKind.FOLLOW:
            return "replicate" if self.dim is None else f"dim{self.dim}"
        return f"{self.var}*" if self.kind is ChoiceKind.WHOLE else str(self.var)

    def to_json(self) -> dict:
        return {"kind": self.kind.value, "var": self.var, "dim": self.dim}

    @staticmethod
    def from_json(doc) -> "OpChoice":
        kind = ChoiceKind(doc["kind"])
        var, dim = doc.get("var"), doc.get("dim")
        if kind is ChoiceKind.FOLLOW:
            if var is not None or not (dim is None or (isinstance(dim, int) and not isinstance(dim, bool))):
                raise ValueError(f"an element-wise choice takes an integer 'dim' or null, got {doc}")
        elif not isinstance(var, str) or not var or dim is not None:
            raise ValueError(f"a {kind.value} choice takes a variable name and no 'dim', got {doc}")
        return OpChoice(kind, var, dim)

    @staticmethod
    def of(strategy: PartitionStrategy | None, follow_dim: int | None = None) -> "OpChoice":
        """The choice a search made: a strategy (``var*`` when computed whole), or None for a merged op."""
        if strategy is None:
            return OpChoice(ChoiceKind.FOLLOW, dim=follow_dim)
        if strategy.var.endswith("*"):
            return OpChoice(ChoiceKind.WHOLE, strategy.var[:-1])
        return OpChoice(ChoiceKind(strategy.kind), strategy.var)


@dataclass(frozen=True)
class InputPiece:
    """What one worker's call reads of one input of the op."""

    input: int                   # position among the op's inputs
    box: Box                     # the piece, in the tensor's coordinates (may extend past its ends)
    data: Box                    # the part of ``box`` read from the tensor; the rest is ``fill``
    fill: float                  # the access's fill value (0 unless the description says otherwise)
    zeroed: bool = False         # passed as zeros (a term partition-n-reduce counts on one worker only)
    read: bool = True            # the description reads it (an expansion is passed unread inputs too)


@dataclass(frozen=True)
class OutputPiece:
    """What one worker's call produces of one output of the op."""

    box: Box
    partial: tuple[int, ...] = ()      # steps over whose workers the output is reduced
    reducer: str | None = None         # "sum", "max", ... when ``partial``


@dataclass(frozen=True)
class WorkerCall:
    """One worker's run of one op: MXNet's kernel (or the op's expansion) on its pieces."""

    worker: int
    attrs: object
    inputs: tuple[InputPiece, ...]      # in the kernel's argument order
    outputs: tuple[OutputPiece, ...]    # one per output of the op
    exchange_steps: tuple[int, ...] = ()   # steps run by the expansion (statistics combined across them)
    # the kernel computes more than the worker's part (a halo split computed on the region with its halo, a
    # reshape of a longer piece): per output, the box of the kernel's output that is kept ([lo, hi) relative to
    # the kernel's output); None: the kernel's output is the worker's part
    keep: tuple[Box, ...] | None = None
    scale: float = 1.0                  # the kernel's outputs times this (the partial of a mean)
    expanded: tuple[int, ...] = ()      # reduction splits the kernel cannot run, run by the expansion

    @property
    def expansion(self) -> bool:
        return bool(self.exchange_steps or self.expanded)


def coordinates(worker: int, factors: Sequence[int]) -> tuple[int, ...]:
    """Worker ``worker``'s coordinate at each step (the first step's varies slowest).

    >>> coordinates(5, (2, 2, 2))
    (1, 0, 1)
    """
    coords = []
    for f in reversed(factors):
        coords.append(worker % f)
        worker //= f
    return tuple(reversed(coords))


def held_box(shape: Sequence[int], dims: Sequence[int | None], factors: Sequence[int], worker: int) -> Box:
    """The box of a tensor that ``worker`` holds: at step j the group's box is cut f_j ways along ``dims[j]``
    (None: kept whole, every member holds it)."""
    box = [[0, n] for n in shape]
    for d, f, c in zip(dims, factors, coordinates(worker, factors)):
        if d is None:
            continue
        lo, hi = box[d]
        step = (hi - lo) // f
        box[d] = [lo + c * step, lo + (c + 1) * step]
    return tuple((lo, hi) for lo, hi in box)


def compose(view: NodeView, choices: Sequence[OpChoice], factors: Sequence[int]) -> tuple[WorkerCall, ...]:
    """Every worker's call of the op seen as ``view`` (its whole shapes) under ``choices`` (one per step).

    Workers whose first j coordinates agree share the state after step j: each state is advanced once, as a
    walk of the tree of coordinates (f_1 + f_1 f_2 + .. states, not m k), and a group that stops (computed
    whole, a crop, a kept part) makes its call once for all its workers. A failing step names the group's
    lowest worker, which is the lowest failing one: the walk meets groups in the workers' order.

    Raises:
        AnalysisError: a choice names no strategy of the op at that step, or the op's kernel (or expansion)
            cannot run a worker's shard.
    """
    k = math.prod(factors)
    steps = min(len(choices), len(factors))
    calls: list[WorkerCall | None] = [None] * k
    memo = _Steps()

    def walk(group: _Group, j: int, first: int, size: int) -> None:
        if group.stopped or j == steps:
            call = calls[first] = group.call(first)
            for w in range(first + 1, first + size):
                calls[w] = dataclasses.replace(call, worker=w)
            return
        f = factors[j]
        size //= f
        for c in range(f):
            member = group if c == f - 1 else group.copy()     # the last member takes the parent's state
            member.advance(j, choices[j], f, c, first + c * size, memo)
            walk(member, j + 1, first + c * size, size)

    walk(_Group(view), 0, 0, k)
    return tuple(calls)


def whole_call(view: NodeView) -> WorkerCall:
    """The op run unpartitioned (no cut: worker 0 of one), as a device that needs all of a constant runs it."""
    return compose(view, (), ())[0]


def whole_box(shape: Sequence[int]) -> Box:
    """The box of a whole tensor of ``shape``."""
    return _box((0,) * len(shape), shape)


class _Group:
    """The state of a group of workers after its first steps: its view of the op and, per view input, (op input
    position, origin of the view's coordinates in the tensor's, the window of the tensor's data in them
    (elsewhere: fill, the halo a kernel's padding or a padded region provides), zeroed); per output its origin
    and the steps that leave it partial (and their reducer); the steps run by the expansion."""

    __slots__ = ("view", "ins", "out_origin", "partial", "reducer", "exchanges", "expanded", "fills", "keep",
                 "scale", "unread", "stopped")

    def __init__(self, view: NodeView):
        self.view = view
        self.ins = [(p, (0,) * len(s), _box((0,) * len(s), s), False) for p, s in enumerate(view.in_shapes)]
        self.out_origin = [(0,) * len(s) for s in view.out_shapes]
        self.partial = [[] for _ in view.out_shapes]
        self.reducer = [None] * len(view.out_shapes)
        self.exchanges, self.expanded, self.fills = [], [], {}
        self.keep, self.scale, self.unread, self.stopped = None, 1.0, set(), False

    def copy(self) -> "_Group":
        g = _Group.__new__(_Group)      # past __init__: every slot is copied below
        g.view, g.ins, g.out_origin = self.view, self.ins, list(self.out_origin)
        g.partial, g.reducer = [list(p) for p in self.partial], list(self.reducer)
        g.exchanges, g.expanded, g.fills = list(self.exchanges), list(self.expanded), dict(self.fills)
        g.keep, g.scale, g.unread, g.stopped = self.keep, self.scale, set(self.unread), self.stopped
        return g

    def advance(self, j: int, choice: OpChoice, f: int, c: int, w: int, memo: "_Steps | None" = None) -> None:
        """Takes part c of step j's choice (f parts); ``w``: the lowest worker of the part, named in errors;
        ``memo``: what the step does to the group's view (:class:`_Steps`), shared by the groups of one walk."""
        step = (memo or _Steps()).step(self.view, j, choice, f, c)
        kind = step[0]
        if kind == "same":
            return
        if kind == "whole":
            self.stopped = True         # every worker of the group computes the whole output of this view
            return
        if kind == "follow":
            _, view, d, offset, cuts, out_cuts = step
            ins = []
            for (p, origin, window, zeroed), (cut, bounds) in zip(self.ins, cuts):
                if cut:
                    origin = tuple([x + offset if i == d else x for i, x in enumerate(origin)])
                ins.append((p, origin, _narrow(window, origin, bounds), zeroed))
            self.ins, self.view = ins, view
            self.out_origin = [tuple([x + offset if i == d else x for i, x in enumerate(origin)]) if cut else origin
                               for origin, cut in zip(self.out_origin, out_cuts)]
            return
        s = step[1]
        for p, fill in zip((q[0] for q in self.ins), s.fills):
            if fill is not None:
                self.fills[p] = fill
        if kind == "exchange":
            _, _, expand, view, reads, out_lows = step
            new_ins = []
            for (p, origin, window, zeroed), (unread, lows, bounds, once) in zip(self.ins, reads):
                zeroed = zeroed or once     # a term one worker counts
                if unread:
                    new_ins.append((p, origin, window, zeroed))
                    self.unread.add(p)
                    continue
                new_ins.append((p, tuple([o + lo for o, lo in zip(origin, lows)]), _narrow(window, origin, bounds),
                                zeroed))
            self.ins = new_ins
            self.out_origin = [tuple([o + lo for o, lo in zip(origin, lows)])
                               for origin, lows in zip(self.out_origin, out_lows)]
            self.view = view
            if expand:
                for o, placement in enumerate(s.outputs):
                    if isinstance(placement, PartialSum):
                        _partial(view.op, o, placement, j, self.partial, self.reducer)
                self.expanded.append(j)
            else:
                self.exchanges.append(j)
            return
        _, _, call, view, reads, keep, shifts = step
        if self.exchanges and (s.kind == "reduce"):
            raise AnalysisError(f"{view.op}: a reduction split after a statistics exchange cannot be composed")
        if call is None:
            raise AnalysisError(f"MXNet's kernel cannot run worker {c}'s shard of {s} (worker {w} of the plan)")
        if (self.exchanges or self.expanded) and len(call.inputs) != len(self.ins):
            raise AnalysisError(f"{view.op}: a kernel split dropping inputs after a step run by the expansion "
                                f"cannot be composed")
        ins = self.ins
        new_ins = []
        for i, lows, bounds, zero in reads:
            p, origin, window, zeroed = ins[i]
            new_ins.append((p, tuple([o + lo for o, lo in zip(origin, lows)]), _narrow(window, origin, bounds),
                            zeroed or zero))
        self.ins = new_ins
        self.scale *= call.scale
        self.view = view
        if call.crop:
            self.stopped = True
            return
        if keep is not None:
            # the kernel computes more than the worker's part: it keeps its part, and later steps do not
            # narrow the call (as a crop): every worker of the group runs it
            self.keep = keep
            self.stopped = True
        for o, (placement, shift) in enumerate(zip(s.outputs, shifts)):
            if shift is not None:
                d, lo = shift
                self.out_origin[o] = tuple([x + (lo if i == d else 0) for i, x in enumerate(self.out_origin[o])])
            elif isinstance(placement, PartialSum):
                _partial(view.op, o, placement, j, self.partial, self.reducer)

    def call(self, w: int) -> WorkerCall:
        """Worker ``w``'s call when the group's steps are done."""
        pieces = []
        for (p, origin, window, zeroed), shape in zip(self.ins, self.view.in_shapes):
            box = tuple([(o, o + n) for o, n in zip(origin, shape)])
            data = []
            for (a, b), (c, d) in zip(box, window):       # the box within the window (empty at its low end)
                lo, hi = (a if a > c else c), (b if b < d else d)
                data.append((lo, hi if hi > lo else lo))
            pieces.append(InputPiece(p, box, tuple(data), self.fills.get(p, 0.0), zeroed, p not in self.unread))
        outs = tuple(OutputPiece(_box(origin, shape), tuple(self.partial[o]), self.reducer[o])
                     for o, (origin, shape) in enumerate(zip(self.out_origin, self.view.out_shapes)))
        return WorkerCall(w, self.view.attrs, tuple(pieces), outs, tuple(self.exchanges), self.keep, self.scale,
                          tuple(self.expanded))


class _Steps:
    """What each step does to a view, worked out once per (view, step, part) for every group of one walk whose
    view it is (:func:`_step`); the views it makes are interned by value, so that groups whose views are equal
    share one, and its steps."""

    def __init__(self):
        self._done: dict[tuple, tuple] = {}
        self._views: dict[NodeView, NodeView] = {}

    def step(self, view: NodeView, j: int, choice: OpChoice, f: int, c: int) -> tuple:
        key = (id(view), j, c)              # every view met is kept alive here: ids are not reused
        hit = self._done.get(key)
        if hit is None or hit[0] is not view:
            hit = self._done[key] = (view, _step(view, choice, f, c, self._views))
        return hit[1]


def _step(view: NodeView, choice: OpChoice, f: int, c: int, views: dict) -> tuple:
    """Part c of ``choice`` (f parts) for any group whose view is ``view``: ("same",), ("whole",), ("follow",
    view, d, offset, per input (cut, bounds), per output cut), ("exchange", s, expand, view, per input (unread,
    lows, bounds, zeroed), per output lows) or ("kernel", s, call, view, per call input (input, lows, bounds,
    zeroed), keep, per output (dim, lo) of a split). Views are interned in ``views``.

    Raises:
        AnalysisError: the choice names no strategy of the view, or a step the expansion runs cannot be composed
            (what also depends on the group is checked in :meth:`_Group.advance`).
    """
    def interned(v: NodeView) -> NodeView:
        return views.setdefault(v, v)

    if choice.kind is ChoiceKind.FOLLOW:
        d = choice.dim
        if d is None:
            return ("same",)
        _check_follow(view, d, f, c)
        out_shape = view.out_shapes[0]
        step = out_shape[d] // f

        def cut(shape):
            return tuple(step if i == d else n for i, n in enumerate(shape)) if tuple(shape) == tuple(out_shape) \
                else shape
        ins = tuple(cut(shape) for shape in view.in_shapes)
        outs = tuple(cut(shape) for shape in view.out_shapes)
        new = interned(NodeView(view.op, view.attrs, ins, outs, view.inputs, view.outputs))
        return ("follow", new, d, c * step,
                tuple((a != b, tuple((0, n - 1) for n in a)) for a, b in zip(ins, view.in_shapes)),
                tuple(a != b for a, b in zip(outs, view.out_shapes)))
    if choice.kind is ChoiceKind.WHOLE:
        return ("whole",)
    s = _strategy(view, choice, f)
    desc = view.describe()
    call = None if s.exchanges else kernel_call(view.op, view.attrs, desc, s, c)
    expand = call is None and not s.exchanges and s.kind == "reduce" and expands_partials(view.op, desc)
    if s.exchanges or expand:
        if s.exchanges and any(isinstance(o, PartialSum) for o in s.outputs):
            raise AnalysisError(f"{view.op}: a statistics exchange with a partial output cannot be composed")
        reads, shapes = [], []
        for i, (r, shape) in enumerate(zip(s.input_regions[c], view.in_shapes)):
            once = bool(expand and c > 0 and i in s.once_inputs)
            if r is None:
                reads.append((True, None, None, once))
                shapes.append(shape)
                continue
            if any(map(any, r.pad)):
                raise AnalysisError(f"{view.op}: a step run by the expansion reading a halo cannot be composed")
            reads.append((False, tuple(lo for lo, _ in r.bounds), r.bounds, once))
            shapes.append(r.shape)
        new = interned(NodeView(view.op, view.attrs, tuple(shapes), tuple(r.shape for r in s.output_regions[c]),
                                view.inputs, view.outputs))
        return ("exchange", s, expand, new, tuple(reads),
                tuple(tuple(lo for lo, _ in r.bounds) for r in s.output_regions[c]))
    if call is None:
        return ("kernel", s, None, view, (), None, ())
    reads = tuple((i, tuple(lo - (pad[0] if call.padded else 0) for (lo, _), pad in zip(r.bounds, r.pad)), r.bounds,
                   i in call.zeroed) for i, r in zip(call.inputs, call.regions))
    inputs = tuple(view.inputs[i] for i in call.inputs)
    if call.crop:
        new = NodeView(view.op, call.attrs, call.input_shapes(), view.out_shapes, inputs, view.outputs)
        return ("kernel", s, call, interned(new), reads, None, (None,) * len(s.outputs))
    keep = tuple(_box(tuple(lo for lo, _ in r.bounds), r.shape) for r in call.keep) if call.keep is not None else None
    shifts = tuple((p.dim, s.output_regions[c][o].bounds[p.dim][0]) if isinstance(p, SplitDim) else None
                   for o, p in enumerate(s.outputs))
    new = NodeView(view.op, call.attrs, call.input_shapes(), tuple(r.shape for r in s.output_regions[c]), inputs,
                   view.outputs)
    return ("kernel", s, call, interned(new), reads, keep, shifts)


def _partial(op: str, o: int, placement: PartialSum, j: int, partial: list[list[int]],
             reducer: list[str | None]) -> None:
    """Records that step j leaves output o partial, reduced by ``placement.reducer``.

    Raises:
        AnalysisError: an earlier step left it partial under another reducer.
    """
    if reducer[o] not in (None, placement.reducer):
        raise AnalysisError(f"{op}: partial outputs reduced by both {reducer[o]} and {placement.reducer}")
    partial[o].append(j)
    reducer[o] = placement.reducer


def _check_follow(view: NodeView, d: int | None, f: int, c: int) -> None:
    """That a merged element-wise op may follow a split along ``d``: an output split of that dimension reads
    exactly the worker's box and MXNet's kernel runs it unchanged (same attributes, nothing kept or scaled).

    Raises:
        AnalysisError: no such proven split (a plan edited by hand, or one whose op is not element-wise at
            this step's shapes).
    """
    if d is not None and not _follows(view.op, view.attrs, view.in_shapes, view.out_shapes, d, f, c):
        raise AnalysisError(f"{view.op} at shape {list(view.out_shapes[0])} follows a split of dimension {d} over "
                            f"{f} workers that the analysis did not prove runnable")


@lru_cache(maxsize=16384)
def _follows(op, attrs, ins, outs, d: int, f: int, c: int) -> bool:
    """:func:`_check_follow`'s answer for part c (cached: the views of a signature's groups repeat)."""
    for s in _by_choice(op, attrs, ins, outs, f).values():
        if s.kind != "output" or s.exchanges or s.outputs[0] != SplitDim(d):
            continue
        same = all(r[0] is not None and r[0].bounds == o[0].bounds and r[0].pad == o[0].pad
                   for r, o in zip(s.input_regions, s.output_regions))
        call = kernel_call(op, attrs, describe(op, attrs, ins, outs), s, c) if same else None
        if call is not None and call.attrs == attrs and call.keep is None and not call.crop and call.scale == 1.0:
            return True
    return False


def _strategy(view: NodeView, choice: OpChoice, f: int) -> PartitionStrategy:
    found = _by_choice(view.op, view.attrs, view.in_shapes, view.out_shapes, f).get((choice.var, choice.kind.value))
    if found is None:
        raise AnalysisError(f"{view.op} at input shapes {list(view.in_shapes)} has no {choice.kind.value} split "
                            f"of '{choice.var}' over {f} workers")
    return found


@lru_cache(maxsize=16384)
def _by_choice(op, attrs, ins, outs, f: int) -> dict:
    """An op signature's strategies for f workers by (variable, kind) (every worker and step asks again)."""
    return {(s.var, s.kind): s for s in signature_strategies(op, attrs, ins, outs, f)}


def _narrow(window: Box, origin: Sequence[int], bounds) -> Box:
    """``window`` restricted to the region ``bounds`` (inclusive, in the view's coordinates at ``origin``)."""
    return tuple([(a if a > o + lo else o + lo, b if b < o + hi + 1 else o + hi + 1)
                  for (a, b), o, (lo, hi) in zip(window, origin, bounds)])


def _box(origin: Sequence[int], shape: Sequence[int]) -> Box:
    return tuple((o, o + n) for o, n in zip(origin, shape))
