"""Running one worker's shard with MXNet's own kernel: its input pieces and the attributes that change.

Input: an operator (name, attributes), a :class:`~tofu.analysis.strategies.PartitionStrategy` and a worker.
Output: a :class:`ShardCall`: for every input, the region to read and whether to materialise its padding
(halo past the tensor's border, filled with the access's fill value), and the attributes for the shard.

Nothing here is written per operator. The attributes are found by asking MXNet's shape inference which
rewrite of the original attributes makes the kernel produce exactly the shard's output shapes from the
shard's input shapes, trying in order of fewest changes:

* an integer attribute equal to the full extent of an output dimension that the shard shrinks takes the
  shard's extent (``num_hidden``, ``num_filter``, ``output_dim``; also one that equals the input count), or 0
  (an offset such as ``begin`` or an image crop's ``x``: the piece starts where the read does; also when the
  offset equals the input count);
* ``num_args``, MXNet's count of a variadic op's inputs, takes the number of inputs the shard reads;
* an integer attribute that counts groups of an extent the shard shrinks shrinks with it (``num_group`` 2 -> 1
  when a group-aligned channel split halves the channels), and a negative one (a position counted from the
  end) may become None (the piece already ends where the slice does);
* under a split reduction, a tuple entry equal to its extent takes the worker's share (a pooling window);
* a tuple attribute equal to the full output shape takes the shard's (``shape`` of ``_zeros``; Reshape's
  target with MXNet's codes 0 and -1 keeps the codes and takes the shard's explicit extents), one equal to
  an input's trailing extents takes the shard's (a convolution's ``kernel`` under a kernel-tap split), so does
  one equal to a run of an output's consecutive extents, in order or reversed (Crop's ``h_w``,
  AdaptiveAvgPooling2D's ``output_size``; an image resize's ``size``, (width, height) of (N)HWC), and one of
  non-negative amounts may become all zeros (the padding a materialised halo now provides);
* an attribute the original leaves at its default may be set: a tuple of extents to the output's trailing
  extents when the shard drops an input (Crop's ``h_w``, which its second input gave), and one whose default
  None the kernel resolves from the input's shape to the full input's unit axes, once the piece has unit
  axes the full input lacks (squeeze's ``axis`` on a worker's batch of one).

Two ways of running go beyond "the kernel's output is the worker's part", both proven like the rest:

* ``scale``: a partition-n-reduce of ``R / c`` whose kernel divides by the shard's own count (a mean, global
  average pooling) runs as the shard's mean times ``c_shard / c_full`` (the proof compares R alone);
* ``keep``: the kernel computes more than the worker's part along the split dimension, and the worker keeps
  its part: a halo split run on the region with its halo (LRN across channels: the kernel's border channels
  see a cut window and are dropped), a reshape of the longer piece a flattened split reads, a resize of the
  piece at the full operator's rate (bilinear resizing: the output extent follows the piece). The proof covers
  the kept part only, at each possible start in the kernel's output. The worker reads its regions as before.

A candidate the description cannot instantiate at the shard's shapes (a group count of 0) is dropped before
MXNet sees it, and MXNet's answers come from a child process (:mod:`tofu.graph.single_op`), so no candidate
can crash the planner. A candidate whose shapes fit is accepted only when the description instantiated at
the shard's shapes and attributes provably computes the worker's part (:mod:`tofu.analysis.equivalence`);
the strategy tests then check the numbers against MXNet's unpartitioned kernel.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from tofu.analysis.equivalence import kernel_scale
from tofu.analysis.strategies import PartialSum, PartitionStrategy, Region, Replicate, SplitDim
from tofu.errors import AnalysisError, TofuError
from tofu.graph.attrs import Attrs, AttrValue
from tofu.graph.single_op import infer_op_shapes
from tofu.tdl.describe import OpDescription, describe
from tofu.tdl.expr import Access

Shape = tuple[int, ...]


@dataclass(frozen=True)
class ShardCall:
    """One worker's kernel call: which inputs (by position) it reads, from which regions, and its attributes.

    ``padded``: read each region including its halo (filled with the input's fill value).
    ``zeroed``: inputs passed as zeros (terms that partition-n-reduce counts on worker 0 only).
    """

    inputs: tuple[int, ...]
    regions: tuple[Region, ...]
    padded: bool
    zeroed: tuple[int, ...]
    attrs: Attrs
    crop: bool = False            # the kernel computes the whole output; keep this worker's box
    scale: float = 1.0            # the kernel's output times this is the worker's part (a partial of a mean)
    # the kernel computes more than the worker's part along the split (a window cut by the piece's edge, a
    # reshape of a longer piece): per output, the box of the kernel's output that is the worker's part
    keep: tuple[Region, ...] | None = None

    def input_shapes(self) -> tuple[Shape, ...]:
        return tuple(r.padded_shape if self.padded else r.shape for r in self.regions)


def shard_call(op: str, attrs: Attrs, strategy: PartitionStrategy, worker: int,
               full: OpDescription | None = None, prefer: Attrs | None = None) -> ShardCall:
    """How ``worker`` runs MXNet's kernel of ``op`` under ``strategy``.

    Inputs the description never reads (BatchNorm's moving statistics in training) are either dropped (with
    ``num_args``-like attributes following) or passed whole, as the kernel's signature demands. When the
    regions are whole along the split (a fallback region), the kernel computes the whole output and the
    worker keeps its box (``crop``).

    Raises:
        AnalysisError: no rewrite of the attributes makes MXNet's kernel produce the shard's shapes.
    """
    if full is None:
        full = describe(op, attrs, strategy.input_shapes, _full_output_shapes(strategy))
    rejected: list[str] = []
    unset = _unset_attributes(attrs, full)
    regions = strategy.input_regions[worker]
    wanted = tuple(r.shape for r in strategy.output_regions[worker])
    full_out = tuple(_full_output_shapes(strategy))
    zeroed = tuple(strategy.once_inputs) if worker > 0 else ()
    has_halo = any(r is not None and any(p != (0, 0) for p in r.pad) for r in regions)
    whole = tuple(Region(tuple((0, n - 1) for n in shape), tuple((0, 0) for _ in shape))
                  for shape in strategy.input_shapes)
    layouts = [tuple(i for i, r in enumerate(regions) if r is not None)]
    if len(layouts[0]) < len(regions):
        layouts.append(tuple(range(len(regions))))
    attempts = [(padded, present, False, wanted, regions) for padded in ((False, True) if has_halo else (False,))
                for present in layouts]              # the kernel's own padding first
    if has_halo:      # the halo past the tensor's far end materialised in part (the kernel's own border rule
        for trimmed in _trimmed(regions):          # decides the rest: a 'full' pooling window's count)
            attempts += [(True, present, False, wanted, trimmed) for present in layouts]
    if full_out != wanted and all(r is None or (r.shape == shape and not any(map(any, r.pad)))
                                  for r, shape in zip(regions, strategy.input_shapes)):
        attempts.append((False, tuple(range(len(regions))), True, full_out, regions))   # whole inputs: crop
    for padded, present, crop, target, regions in attempts:
        used = tuple(regions[i] if regions[i] is not None else whole[i] for i in present)
        shapes = tuple(r.padded_shape if padded else r.shape for r in used)
        pieces = _pieces(strategy, present, used, padded)
        share = (strategy.split_extent, strategy.split_extent // strategy.k) if strategy.kind == "reduce" else None
        tried = (attrs,) if crop else _candidates(attrs, target, full_out, len(regions), len(present), padded, pieces,
                                                  share, unset)
        if prefer is not None and not crop:     # another worker's rewrite usually fits this one too
            tried = itertools.chain((prefer,), tried)
        for candidate in tried:
            if candidate != attrs and not _describable(op, candidate, shapes, target):
                continue                    # MXNet never sees attributes the description itself rejects
            try:
                got = infer_op_shapes(op, candidate, shapes)
            except TofuError:
                continue
            if tuple(got[:len(target)]) != target:
                continue
            call = ShardCall(present, used, padded, zeroed, candidate, crop)
            reason, scale = _verify(op, attrs, full, strategy, worker, call, got)
            if reason is None:
                return call if scale == 1.0 else dataclasses.replace(call, scale=scale)
            rejected.append(reason)
    if strategy.kind == "output":     # only the inputs the worker reads: it reads its regions, nothing more
        for padded in ((True, False) if has_halo else (False,)):
            for present in layouts[:1]:
                call = _kept_call(op, attrs, full, strategy, worker, present, padded, zeroed, whole, rejected,
                                  unset)
                if call is not None:
                    return call
    why = f": {rejected[0]}" if rejected else ": no attributes give the shard's shapes"
    raise AnalysisError(f"MXNet's kernel cannot run worker {worker}'s shard of {strategy}{why}")


def _trimmed(regions: Sequence[Region | None], limit: int = 16):
    """The regions with less of their halo past the tensor's far end, per dimension, least trimmed first."""
    ends = [max((r.pad[d][1] for r in regions if r is not None and d < len(r.pad)), default=0)
            for d in range(max((len(r.pad) for r in regions if r is not None), default=0))]
    for cut in itertools.islice(_cuts_by_total(ends), limit):
        yield tuple(None if r is None else Region(r.bounds, tuple((a, max(0, b - t)) for (a, b), t in zip(r.pad, cut)))
                    for r in regions)


def _cuts_by_total(ends: Sequence[int], start: int = 1):
    """Every tuple ``c`` with ``0 <= c[d] <= ends[d]`` and ``sum(c) >= start``, by increasing sum, each sum in
    lexicographic order (as ``sorted(product(...), key=sum)`` orders them, without enumerating the product)."""
    def fixed(dims: Sequence[int], total: int):
        if not dims:
            if total == 0:
                yield ()
            return
        rest = sum(dims[1:])
        for first in range(max(0, total - rest), min(dims[0], total) + 1):
            for tail in fixed(dims[1:], total - first):
                yield (first,) + tail
    for total in range(start, sum(ends) + 1):
        yield from fixed(ends, total)


_MAX_STARTS = 64       # positions tried for the worker's part inside a larger kernel output


def _kept_call(op: str, attrs: Attrs, full: OpDescription, strategy: PartitionStrategy, worker: int,
               present: tuple[int, ...], padded: bool, zeroed: tuple[int, ...], whole, rejected: list[str],
               unset: Mapping[str, AttrValue]) -> ShardCall | None:
    """The kernel on the worker's input regions (halos included) computing *more* than the worker's part
    along the split dimension; the worker keeps its part (``keep``). The output dimension the strategy splits
    may be longer than the worker's share, every other dimension must be the worker's. Where in the kernel's
    output the worker's part starts is found by the proof: each start (at most ``_MAX_STARTS``) is tried, and
    only the kept part must equal the full operator's (the rest, a window cut by the piece's edge, is dropped).
    """
    regions = strategy.input_regions[worker]
    used = tuple(regions[i] if regions[i] is not None else whole[i] for i in present)
    shapes = tuple(r.padded_shape if padded else r.shape for r in used)
    wanted = tuple(r.shape for r in strategy.output_regions[worker])
    full_out = tuple(_full_output_shapes(strategy))
    pieces = _pieces(strategy, present, used, padded)
    dims = [p.dim if isinstance(p, SplitDim) else None for p in strategy.outputs]
    guesses = [wanted]
    for sh in shapes:       # an output as large as the piece (a reshape of it): the split extent follows the size
        size = math.prod(sh)
        guess = []
        for w, d in zip(wanted, dims):
            rest = math.prod(n for i, n in enumerate(w) if i != d)
            guess.append(w if d is None or rest == 0 or size % rest else
                         tuple(size // rest if i == d else n for i, n in enumerate(w)))
        if tuple(guess) not in guesses:
            guesses.append(tuple(guess))
    for guess in _resampled(wanted, full_out, dims, pieces):
        if guess not in guesses:
            guesses.append(guess)
    seen: set = set()
    tried = itertools.chain(((attrs, wanted),), *(((c, g) for c in _candidates(attrs, g, full_out, len(regions),
                                                                               len(present), padded, pieces,
                                                                               unset=unset))
                                                  for g in guesses))
    for candidate, guess in tried:
        if candidate in seen:
            continue
        seen.add(candidate)
        if candidate != attrs and not _describable(op, candidate, shapes, guess):
            continue
        try:
            got = tuple(tuple(g) for g in infer_op_shapes(op, candidate, shapes))[:len(wanted)]
        except TofuError:
            continue
        if len(got) < len(wanted) or got == wanted:
            continue
        spare = None
        for g, w, d in zip(got, wanted, dims):
            if len(g) != len(w) or any(a != b for i, (a, b) in enumerate(zip(g, w)) if i != d):
                spare = None
                break
            extra = 0 if d is None else g[d] - w[d]
            if extra < 0 or (spare is not None and extra != spare):
                spare = None
                break
            spare = extra
        if not spare or _permutes(full) and math.prod(shapes[0]) != math.prod(got[0]):
            continue
        try:
            shard = describe(op, candidate, shapes, got)
        except TofuError:
            continue
        for start in range(min(spare, _MAX_STARTS - 1) + 1):
            keep = tuple(Region(tuple((start, start + n - 1) if i == d else (0, n - 1) for i, n in enumerate(w)),
                                tuple((0, 0) for _ in w)) for w, d in zip(wanted, dims))
            reason, scale = kernel_scale(full, shard, strategy, worker, present, padded,
                                         keep=tuple(start if d is not None else None for d in dims))
            if reason is None and scale == 1.0:
                return ShardCall(present, used, padded, zeroed, candidate, keep=keep)
            if reason is not None and not rejected:
                rejected.append(reason)
    return None


def _resampled(wanted: Sequence[Shape], full_out: Sequence[Shape], dims: Sequence[int | None],
               pieces: Sequence[Piece]):
    """Outputs that resample the piece at the full operator's rate (a bilinear resize): along the split
    dimension, a piece of ``n`` of an input dimension's ``N`` elements gives ``n F / N`` outputs (``F`` the full
    output extent), or ``(n - 1)(F - 1) / (N - 1) + 1`` with aligned corners, where integral and longer than
    the worker's part."""
    for p in pieces:
        for big, n in zip(p.full, p.shape):
            if n == big:
                continue
            rates = [lambda f: Fraction(n * f, big)] + ([lambda f: Fraction((n - 1) * (f - 1), big - 1) + 1]
                                                        if big > 1 else [])
            for rate in rates:
                extents = [None if d is None else rate(f[d]) for f, d in zip(full_out, dims)]
                if all(e is None or e.denominator == 1 and e > w[d] for e, w, d in zip(extents, wanted, dims)):
                    yield tuple(w if e is None else tuple(int(e) if i == d else m for i, m in enumerate(w))
                                for e, w, d in zip(extents, wanted, dims))


def _describable(op: str, candidate: Attrs, input_shapes: Sequence[Shape], output_shapes: Sequence[Shape]) -> bool:
    """Whether the description instantiates with ``candidate`` at the shard's shapes.

    A candidate that fails here could not be proven anyway (:func:`_verify` describes it too), and it is
    what crashes MXNet's shape functions: a group count of 0 divides the channels in the description as in
    MXNet's C++ (SIGFPE), but the description raises instead.
    """
    try:
        describe(op, candidate, input_shapes, output_shapes)
    except TofuError:
        return False
    return True


def _verify(op: str, attrs: Attrs, full: OpDescription, strategy: PartitionStrategy, worker: int, call: ShardCall,
            out_shapes) -> tuple[str | None, float]:
    """(None, scale) when the kernel provably computes the worker's part, its output times ``scale``
    (see :mod:`tofu.analysis.equivalence`); else (the reason, 1.0)."""
    if call.crop:
        whole = all(r.shape == t.shape and r.pad == tuple((0, 0) for _ in r.pad) for r, t in
                    zip(call.regions, (full.inputs[i] for i in call.inputs)))
        ok = whole and call.attrs == attrs and len(call.inputs) == len(full.inputs)
        return (None if ok else "cropping needs the whole inputs and the original attributes"), 1.0
    if _permutes(full) and math.prod(call.input_shapes()[0]) != math.prod(out_shapes[0]):
        return "the kernel would reorder a different number of elements (MXNet's shape inference allows it)", 1.0
    try:
        shard = describe(op, call.attrs, call.input_shapes(), out_shapes)
    except TofuError as e:
        return f"the shard's attributes are not describable: {e}", 1.0
    return kernel_scale(full, shard, strategy, worker, call.inputs, call.padded)


def _permutes(desc: OpDescription) -> bool:
    """Whether the operator moves every element of its one input to one place of its one output (a reshape,
    a transpose): the kernel then requires as many elements out as in, a check MXNet's shape inference of
    Reshape skips (``shape=(2, 6)`` on 16 elements is inferred, and fails when run)."""
    return (len(desc.inputs) == 1 and len(desc.outputs) == 1 and isinstance(desc.outputs[0].body, Access)
            and desc.outputs[0].body.tensor is desc.inputs[0]
            and math.prod(desc.inputs[0].shape) == math.prod(desc.outputs[0].shape))


@dataclass(frozen=True)
class Piece:
    """One input as a shard reads it: the full tensor's shape and the piece's (its halo included if padded)."""

    full: Shape
    shape: Shape


def _pieces(strategy: PartitionStrategy, present: Sequence[int], used: Sequence[Region], padded: bool
            ) -> list[Piece]:
    return [Piece(tuple(strategy.input_shapes[i]), r.padded_shape if padded else r.shape)
            for i, r in zip(present, used)]


def _unset_attributes(attrs: Attrs, full: OpDescription) -> dict[str, AttrValue]:
    """The attributes the description declares that ``attrs`` leaves at their defaults, with those defaults."""
    if not dataclasses.is_dataclass(full.attrs):
        return {}
    return {f.name: getattr(full.attrs, f.name) for f in dataclasses.fields(full.attrs) if f.name not in attrs}


def _windows(value: tuple, full: Shape, shard: Shape) -> list[tuple]:
    """The shard's extents where ``value`` equals a run of consecutive extents of ``full``, in order or reversed
    (an image's ``size``, (width, height), against (N)HWC extents), the trailing run first."""
    n = len(value)
    found = []
    for i in reversed(range(len(full) - n + 1)):
        run, piece = tuple(full[i:i + n]), tuple(shard[i:i + n])
        for alt in ((piece,) if value == run else ()) + ((piece[::-1],) if value == run[::-1] else ()):
            if alt != value and alt not in found:
                found.append(alt)
    return found


def _candidates(attrs: Attrs, wanted: Sequence[Shape], full_shapes: Sequence[Shape], n_inputs: int,
                n_present: int, padded: bool, inputs: Sequence[Piece] = (),
                share: tuple[int, int] | None = None, unset: Mapping[str, AttrValue] | None = None):
    """Attribute sets to try, fewest changes first. ``inputs``: each input read; ``share``: (extent, worker's
    share) of a split reduction variable; ``unset``: the declared attributes ``attrs`` leaves at their
    defaults (candidates may set them)."""
    options: list[list[tuple[str, AttrValue]]] = []
    shrunk = [(a, b) for fs, ws in [*zip(full_shapes, wanted), *((p.full, p.shape) for p in inputs)]
              for a, b in zip(fs, ws) if a != b]
    for name, value in attrs.items():
        alts: list[AttrValue] = []
        if isinstance(value, int) and not isinstance(value, bool):
            if name == "num_args":
                if value == n_inputs and n_present != n_inputs:
                    alts.append(n_present)  # an input count follows the inputs
            else:                           # an output extent (num_filter), also one that equals the input count
                for fs, ws in zip(full_shapes, wanted):          # (4 filters of data, offset, weight and bias)
                    for a, b in zip(fs, ws):
                        if a != b and value == a and b not in alts:
                            alts.append(b)
            for a, b in shrunk:             # a count of groups of an extent the shard shrinks (num_group)
                if 1 < value < a and value * b % a == 0 and 0 < value * b // a < value and value * b // a not in alts:
                    alts.append(value * b // a)
            if value != 0 and 0 not in alts:
                alts.append(0)              # an offset into the sliced input (begin, a crop's x or y, also when it
                                            # equals the input count): the piece starts where the read does
            if value < 0:
                alts.append(None)           # a position counted from the end: the piece ends where the slice does
        elif isinstance(value, tuple) and value and all(isinstance(v, int) for v in value):
            for fs, ws in zip(full_shapes, wanted):
                if value == tuple(fs) and tuple(ws) != tuple(fs):
                    alts.append(tuple(ws))
                elif len(value) == len(fs) and tuple(ws) != tuple(fs) and \
                        all(v == a or v <= 0 for v, a in zip(value, fs)) and any(v > 0 for v in value):
                    # a target shape with MXNet's codes (0 keeps an input extent, -1 infers one, -2..-4
                    # regroup): its explicit extents take the shard's
                    alts.append(tuple(b if v > 0 else v for v, b in zip(value, ws)))
            for fs, ws in zip(full_shapes, wanted):   # a run of an output's extents (a crop's or a pooling's size)
                if len(fs) > len(value):
                    alts += [w for w in _windows(value, fs, ws) if w not in alts]
            n = len(value)
            for p in inputs:                  # an input's trailing extents (a convolution's kernel)
                if len(p.full) >= n and value == p.full[-n:] and p.shape[-n:] != value and p.shape[-n:] not in alts:
                    alts.append(p.shape[-n:])
            if share is not None:             # a window as long as the split reduction: the worker's share of it
                for d, v in enumerate(value):
                    alt = tuple(share[1] if i == d else u for i, u in enumerate(value))
                    if v == share[0] and share[1] != v and alt not in alts:
                        alts.append(alt)
            if any(value) and all(v >= 0 for v in value):
                alts.append(tuple(0 for _ in value))   # padding the halo now provides, or offsets
        options.append([(name, a) for a in alts])
    for name, default in (unset or {}).items():
        alts = []
        if n_present < n_inputs and isinstance(default, tuple) and default and \
                all(isinstance(v, int) and not isinstance(v, bool) for v in default):
            # a size the dropped input gave (Crop's h_w like its second input): the output's trailing extents
            alts += [tuple(ws[-len(default):]) for ws in wanted[:1] if len(ws) > len(default)]
        if default is None:
            # a default the kernel resolves from the input's shape (squeeze's unit axes): the full input's
            # value, where the piece has unit axes the full input does not
            for p in inputs[:1]:
                units = tuple(d for d, a in enumerate(p.full) if a == 1)
                if units and any(b == 1 != a for a, b in zip(p.full, p.shape)):
                    alts.append(units)
        options.append([(name, a) for a in alts])
    changeable = [o for o in options if o]
    yielded = 0
    for r in range(len(changeable) + 1):
        for subset in itertools.combinations(changeable, r):
            for choice in itertools.product(*subset):
                values = dict(attrs.items())
                values.update(dict(choice))
                yield Attrs.of(**values)
                yielded += 1
                if yielded > 256:
                    return


def _full_output_shapes(strategy: PartitionStrategy) -> list[Shape]:
    """The unpartitioned output shapes: the hull of all workers' output regions."""
    shapes = []
    for o in range(len(strategy.output_regions[0])):
        regions = [w[o] for w in strategy.output_regions]
        shapes.append(tuple(max(r.bounds[d][1] for r in regions) + 1 for d in range(len(regions[0].bounds))))
    return shapes


def take_region(array: np.ndarray, region: Region, padded: bool, fill: float | None) -> np.ndarray:
    """The part of ``array`` in ``region``; with ``padded``, its halo filled with ``fill`` around it."""
    piece = array[region.slices()]
    if padded and any(p != (0, 0) for p in region.pad):
        piece = np.pad(piece, region.pad, constant_values=0.0 if fill is None else fill)
    return piece


def run_shard(call: ShardCall, strategy: PartitionStrategy, worker: int, kernel, inputs: Sequence[np.ndarray]):
    """``kernel(attrs, arrays)`` on one worker's pieces, cropped to the worker's output boxes if needed."""
    outs = kernel(call.attrs, shard_inputs(call, inputs, strategy.fills))
    if call.scale != 1.0:
        outs = [o * np.asarray(call.scale, dtype=o.dtype) for o in outs]
    if call.crop:
        outs = [o[r.slices()] for o, r in zip(outs, strategy.output_regions[worker])]
    if call.keep is not None:
        outs = [o[r.slices()] for o, r in zip(outs, call.keep)]
    return outs


def shard_inputs(call: ShardCall, inputs: Sequence[np.ndarray], fills: Sequence[float | None]) -> list[np.ndarray]:
    """The arrays one worker passes to the kernel."""
    out = []
    for i, region in zip(call.inputs, call.regions):
        piece = take_region(inputs[i], region, call.padded, fills[i])
        out.append(np.zeros_like(piece) if i in call.zeroed else piece)
    return out


_REDUCERS = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


def combine(strategy: PartitionStrategy, output: int, pieces: Sequence[np.ndarray]) -> np.ndarray:
    """The full output ``output`` from every worker's piece: placed by region, or reduced."""
    placement = strategy.outputs[output]
    if isinstance(placement, PartialSum):
        return _REDUCERS[placement.reducer].reduce(np.stack(pieces), axis=0)
    if isinstance(placement, Replicate):
        return pieces[0]
    shape = _full_output_shapes(strategy)[output]
    full = np.empty(shape, dtype=pieces[0].dtype)
    for w, piece in enumerate(pieces):
        full[strategy.output_regions[w][output].slices()] = piece
    return full
