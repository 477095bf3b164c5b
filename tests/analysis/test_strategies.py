"""Derived partition strategies, checked over the whole registry against independent references.

* MXNet's own kernel, run on every worker's pieces with the derived attributes, reassembles the
  unpartitioned kernel's output, for every strategy the kernel can run; every other one must be refused by
  ``runnable`` and so kept out of plans (experiments/analysis_report.py lists them). Strategies that exchange
  statistics are run by their op's expansion, not by the kernel alone: tests/analysis/test_exchange.py
  compares those with MXNet.
* Every strategy is sound: each worker's part, computed by the reference interpreter from inputs that are
  NaN outside the worker's regions, is finite and equals the full output's part (or, combined, the output).
* Regions equal brute-force enumeration of the elements the description touches (affine accesses), or
  contain it (otherwise).

Each test is parametrised over the strategies the analysis derives for every registered case at k = 2, 3 and 4
(3: pieces with uneven borders), collected at import (a case whose shapes no split divides k ways has none, and
contributes no test).
"""
import numpy as np
import pytest

from tofu import registry
from tofu.analysis.shard import combine, run_shard, shard_call
from tofu.analysis.strategies import (PartialSum, Replicate, computed_tensors, reduction_root, strategies,
                                      worker_ranges)
from tofu.analysis.views import expands_partials, runnable
from tofu.errors import AnalysisError
from tofu.graph.attrs import Attrs
from tofu.graph.single_op import infer_op_shapes
from tofu.tdl.describe import describe
from tofu.tdl.expr import FULL, Affine, Computed, IndexExpr, Uses, Var
from tofu.tdl.interpret import _Evaluator, evaluate

from tests.operators.native_kernels import check_under_mkldnn, native_bug
from tests.operators.test_conformance import random_inputs, run_op

SPECS = registry.load_builtin_operators()
CASES = [(op, i, case) for op, spec in sorted(SPECS.items()) for i, case in enumerate(spec.cases)]


def _describe(op, case):
    attrs = case.parsed_attrs()
    return attrs, describe(op, attrs, case.shapes, infer_op_shapes(op, attrs, case.shapes))


def _collect():
    """(op, case index, case, k, strategy index, strategy) of every derived strategy."""
    found = []
    for op, i, case in CASES:
        _, desc = _describe(op, case)
        for k in (2, 3, 4):
            found += [(op, i, case, k, j, s) for j, s in enumerate(strategies(desc, k))]
    return found


def _params(found):
    return [pytest.param(op, i, case, k, j, id=f"{op}-{i}-k{k}-{j}-{s.kind}-{s.var}")
            for op, i, case, k, j, s in found]


STRATEGIES = _collect()
# MXNet's kernel alone runs the strategies that exchange no statistics; a kernel wrong without MKLDNN is checked
# in a child process with MKLDNN on, one (case, k) at a time
KERNEL = [c for c in STRATEGIES if not c[5].exchanges and not native_bug(c[0], c[2].parsed_attrs())]
NATIVE_BUG = sorted({(op, i, k) for op, i, case, k, _, s in STRATEGIES
                     if not s.exchanges and native_bug(op, case.parsed_attrs())})


def test_every_operator_has_strategies_to_check():
    """The parametrisations of this file are not empty (pytest would skip an empty one): every registered
    operator has, in some case, a strategy, and one that exchanges no statistics."""
    assert STRATEGIES and KERNEL and NATIVE_BUG and READING
    assert {op for op, *_ in STRATEGIES} == set(SPECS)
    assert {op for op, *_ in KERNEL} | {op for op, _, _ in NATIVE_BUG} == set(SPECS)


def _strategy(op, case, k, j):
    attrs, desc = _describe(op, case)
    found = strategies(desc, k)
    assert len(found) > j, f"{op}: {len(found)} strategies at k = {k}, fewer than collected"
    return attrs, desc, found[j]


def _close(got, expected, msg):
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * (1 + np.abs(expected).max()), err_msg=msg)


def _kernel_calls(op, attrs, s, desc):
    try:
        return [shard_call(op, attrs, s, w, desc) for w in range(s.k)]
    except AnalysisError:
        return None


@pytest.mark.parametrize("op,i,case,k,j", _params(KERNEL))
def test_kernel_shards_reassemble_mxnet_output(op, i, case, k, j):
    attrs, desc, s = _strategy(op, case, k, j)
    _check_kernel_shards(op, case, attrs, desc, s, random_inputs(case, seed=1))


@pytest.mark.parametrize("op,i,k", NATIVE_BUG, ids=[f"{op}-{i}-k{k}" for op, i, k in NATIVE_BUG])
def test_kernel_shards_reassemble_mkldnn_output(op, i, k):
    check_under_mkldnn("strategies", op, i, k)


def check_kernel_shards(op, case, k):
    """Every strategy of the case that exchanges no statistics (tests.operators.native_kernels runs this)."""
    attrs, desc = _describe(op, case)
    inputs = random_inputs(case, seed=1)
    checked = [s for s in strategies(desc, k) if not s.exchanges]
    assert checked, f"{op}: no strategy at k = {k}"
    for s in checked:
        _check_kernel_shards(op, case, attrs, desc, s, inputs)


def _check_kernel_shards(op, case, attrs, desc, s, inputs):
    """The kernel's pieces reassemble its unpartitioned output; a strategy it cannot run is kept out of plans."""
    calls = _kernel_calls(op, attrs, s, desc)
    if calls is None and expands_partials(op, desc) and s.kind == "reduce":
        assert runnable(op, attrs, desc, s), f"{s}: the op's expansion runs it, yet plans may not use it"
        _check_expanded_shards(op, case, attrs, desc, s, inputs)
        return
    if calls is None:
        assert not runnable(op, attrs, desc, s), f"{s}: MXNet's kernel cannot run it, yet plans may use it"
        return
    expected = run_op(op, attrs, inputs, train=case.train)
    pieces = [run_shard(c, s, w, lambda a, xs: run_op(op, a, xs, train=case.train), inputs)
              for w, c in enumerate(calls)]
    for o, e in enumerate(expected):
        if isinstance(s.outputs[o], Replicate):
            for p in pieces:
                _close(p[o], e, str(s))
        else:
            _close(combine(s, o, [p[o] for p in pieces]), e, str(s))


def _check_expanded_shards(op, case, attrs, desc, s, inputs):
    """A reduction split the kernel cannot run, run by the op's expansion (``partials``) on every worker's
    regions from their origins: the partial outputs reduce to MXNet's unpartitioned output."""
    import mxnet as mx

    expected = run_op(op, attrs, inputs, train=case.train)
    regions = s.input_regions
    pieces = [[mx.sym.var(f"w{w}_{i}") for i in range(len(inputs))] for w in range(s.k)]
    shapes = [[r.shape if r is not None else x.shape for r, x in zip(regions[w], inputs)] for w in range(s.k)]
    origins = [[tuple(lo for lo, _ in r.bounds) if r is not None else (0,) * x.ndim
                for r, x in zip(regions[w], inputs)] for w in range(s.k)]
    assert not any(any(map(any, r.pad)) for w in range(s.k) for r in regions[w] if r is not None), s

    def no_exchange(parts, reducer="sum"):
        raise AssertionError(f"{s}: a reduction split run by the expansion exchanged a statistic")

    outs = registry.expansion(op)(pieces, shapes, desc.attrs, no_exchange, origins)
    feed = {f"w{w}_{i}": mx.nd.array(x[r.slices()] if r is not None else x)
            for w in range(s.k) for i, (r, x) in enumerate(zip(regions[w], inputs))}
    got = []
    for w in range(s.k):
        group = mx.sym.Group(outs[w])
        exe = group.bind(mx.cpu(), {n: feed[n] for n in group.list_arguments()})
        got.append([o.asnumpy() for o in exe.forward()])
    for o, e in enumerate(expected):
        _close(combine(s, o, [g[o] for g in got]), e, str(s))


def _exchanged(desc, s):
    """(intermediate tensor, its aligned reduction variable, reducer) of each exchange, in order."""
    comps = computed_tensors(desc)
    out = []
    for x in s.exchanges:
        t = comps[x.tensor]
        out.append((t, next(v for v in reduction_root(t.body)[0].vars if v.name == x.var), x.reducer))
    return out


def _masked(inputs, s, w, ints):
    out = []
    for i, (x, region) in enumerate(zip(inputs, s.input_regions[w])):
        m = np.full(x.shape, np.nan)
        if region is not None:
            m[region.slices()] = x[region.slices()]
        if w > 0 and i in s.once_inputs:
            m = np.where(np.isnan(m), np.nan, 0.0)
        if i in ints and region is None:
            m = np.zeros(x.shape)       # an unread index input: any valid value
        out.append(m)
    return out


@pytest.mark.parametrize("op,i,case,k,j", _params(STRATEGIES))
def test_every_strategy_computes_from_its_regions(op, i, case, k, j):
    attrs, desc, s = _strategy(op, case, k, j)
    inputs = random_inputs(case, seed=2)
    full = evaluate(desc, inputs)
    ints = dict(case.ints)
    masked = [_masked(inputs, s, w, ints) for w in range(k)]
    given = {}       # exchanged statistics: every worker's partial, combined, known to all
    for t, _, reducer in _exchanged(desc, s):
        partial = [_worker_evaluator(desc, masked[w], worker_ranges(desc, s, w), given)
                   .tensor(t.vars, t.shape, t.body) for w in range(k)]
        given[id(t)] = REDUCERS[reducer].reduce(np.stack(partial), axis=0)
    parts = [tuple(_worker_evaluator(desc, masked[w], worker_ranges(desc, s, w), given)
                   .tensor(o.vars, o.shape, o.body) for o in desc.outputs) for w in range(k)]
    for o, expected in enumerate(full):
        got = [p[o] for p in parts]
        for w, g in enumerate(got):
            # NaN marks a read outside the regions; an infinity is a fill's (a partial maximum whose part of a
            # window lies in the padding, -inf, as a 3-way split of a 3-row window makes it)
            assert not np.isnan(g).any() or np.isnan(expected).any(), f"{s}: worker {w} reads outside its regions"
        placement = s.outputs[o]
        if isinstance(placement, Replicate):
            for g in got:
                _close(g, expected, str(s))
        elif isinstance(placement, PartialSum):
            _close(combine(s, o, got), expected, str(s))
        else:
            for w, g in enumerate(got):
                _close(g, expected[s.output_regions[w][o].slices()], f"{s} worker {w}")


REDUCERS = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


def _worker_evaluator(desc, inputs, restrict, given):
    arrays = {id(t): np.asarray(x, dtype=np.float64) for t, x in zip(desc.inputs, inputs)}
    arrays.update(given)
    return _Evaluator(desc.op, arrays, restrict)


class _Recorder(_Evaluator):
    """The interpreter, recording the bounding box of the in-bounds elements each access reads; intermediate
    tensors are evaluated only over the part that is read."""

    def __init__(self, op, arrays, restrict, boxes, exact):
        super().__init__(op, arrays, restrict)
        self.boxes, self.exact = boxes, exact

    def gather(self, acc, env, dims, extra=0):
        nd = len(dims) + extra
        idx, affine, sliced = [], True, 0
        for d, sub in enumerate(acc.index):
            n = acc.tensor.shape[d]
            if not (isinstance(sub, Var) or (isinstance(sub, Affine) and sub.linear() is not None)):
                affine = False          # a slice, a data-dependent index, // or %
            if sub is FULL:             # the k-th sliced dimension is trailing axis len(dims) + k, as in gather
                at = len(dims) + sliced
                idx.append(np.arange(n).reshape([1] * at + [n] + [1] * (nd - at - 1)))
                sliced += 1
            elif isinstance(sub, IndexExpr):
                i = self.index(sub, env, dims)
                idx.append(i.reshape(i.shape + (1,) * extra))
            else:
                idx.append(None)     # data-dependent: whole dimension
                affine = False
        grids = np.broadcast_arrays(*[i for i in idx if i is not None]) if any(i is not None for i in idx) else []
        mask = np.ones(grids[0].shape if grids else (1,), dtype=bool)
        it = iter(grids)
        full = [next(it) if i is not None else None for i in idx]
        for d, g in enumerate(full):
            if g is not None:
                mask &= (g >= 0) & (g < acc.tensor.shape[d])
        box = []
        for d, g in enumerate(full):
            n = acc.tensor.shape[d]
            if g is None:
                box.append((0, n - 1))
            elif mask.any():
                box.append((int(g[mask].min()), int(g[mask].max())))
        if isinstance(acc.tensor, Computed):
            if mask.any():
                self._compute_part(acc.tensor, box)
        elif mask.any():
            key = id(acc.tensor)
            old = self.boxes.get(key)
            self.boxes[key] = box if old is None else [(min(a, c), max(b, e)) for (a, b), (c, e) in zip(old, box)]
            self.exact[key] = self.exact.get(key, True) and affine and not self.inside_computed
        return super().gather(acc, env, dims, extra)

    inside_computed = False

    def value(self, e, env, dims):
        if isinstance(e, Uses):         # reads declared for their positions (zeros_like): record them too
            for read in e.reads:
                self.value(read, env, dims)
        return super().value(e, env, dims)

    def _compute_part(self, t, box):
        key = (id(t), tuple(box))
        if key in getattr(self, "_done", set()):
            return
        self._done = getattr(self, "_done", set()) | {key}
        sub = _Recorder(self.op, self.arrays, {**self.restrict, **dict(zip(t.vars, box))}, self.boxes, self.exact)
        sub.inside_computed = True
        part = sub.tensor(t.vars, t.shape, t.body)
        arr = np.full(t.shape, np.nan)
        arr[tuple(slice(a, b + 1) for a, b in box)] = part
        prev = self.arrays.get(id(t))
        self.arrays[id(t)] = arr if prev is None else np.where(np.isnan(arr), prev, arr)

    def source(self, t):
        if isinstance(t, Computed):
            return self.arrays.get(id(t), np.full(t.shape, np.nan))
        return super().source(t)


# the strategies of ops with inputs (a fill op such as _zeros or _arange has no input region to compare)
READING = [c for c in STRATEGIES if c[2].shapes]


@pytest.mark.parametrize("op,i,case,k,j", _params(READING))
def test_regions_equal_brute_force(op, i, case, k, j):
    attrs, desc, s = _strategy(op, case, k, j)
    inputs = [x.astype(np.float64) for x in random_inputs(case, seed=3)]
    compared = 0
    for w in range(k):
        boxes, exact = {}, {}
        arrays = {id(t): x for t, x in zip(desc.inputs, inputs)}
        rec = _Recorder(op, arrays, worker_ranges(desc, s, w), boxes, exact)
        for out in desc.outputs:
            rec.tensor(out.vars, out.shape, out.body)
        for t, region in zip(desc.inputs, s.input_regions[w]):
            brute = boxes.get(id(t))
            if brute is None:
                continue     # never read in bounds (the derived region may still name a halo)
            assert region is not None, f"{s} worker {w}: '{t.name}' is read but has no region"
            derived = region.bounds
            if exact.get(id(t)):
                assert list(derived) == brute, f"{s} worker {w} '{t.name}': derived {derived}, brute {brute}"
            else:
                assert all(a <= c and e <= b for (a, b), (c, e) in zip(derived, brute)), \
                    f"{s} worker {w} '{t.name}': derived {derived} does not contain {brute}"
            compared += 1
    assert compared, f"{s}: no input region compared"


@pytest.mark.parametrize("stride,dilate,pad,hw", [((1, 1), (1, 1), (1, 1), 16), ((2, 2), (1, 1), (1, 1), 16),
                                                  ((1, 2), (2, 1), (2, 1), 16), ((2, 1), (2, 2), (0, 2), 20)])
@pytest.mark.parametrize("k", [2, 4])
def test_convolution_split_on_height_and_width_with_halos(stride, dilate, pad, hw, k):
    attrs = Attrs.of(kernel=(3, 3), stride=stride, dilate=dilate, pad=pad, num_filter=4)
    shapes = [(2, 3, hw, hw), (4, 3, 3, 3), (4,)]
    out_shapes = infer_op_shapes("Convolution", attrs, shapes)
    assert all(n % k == 0 for n in out_shapes[0][2:])
    desc = describe("Convolution", attrs, shapes, out_shapes)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    expected = run_op("Convolution", attrs, inputs)[0]
    spatial = [s for s in strategies(desc, k) if s.kind == "output" and s.outputs[0].dim >= 2]
    assert {s.outputs[0].dim for s in spatial} == {2, 3}
    for s in spatial:
        calls = [shard_call("Convolution", attrs, s, w, desc) for w in range(k)]
        assert any(any(p != (0, 0) for p in r.pad) for c in calls for r in c.regions), "no halo at the border"
        pieces = [run_shard(c, s, w, lambda a, xs: run_op("Convolution", a, xs), inputs)[0]
                  for w, c in enumerate(calls)]
        _close(combine(s, 0, pieces), expected, str(s))


# The strategies MXNet's kernel must be able to run for the zoo's operators (a regression guard).
KERNEL_SPLITS = [
    ("FullyConnected", Attrs.of(num_hidden=8), [(4, 6), (8, 6), (8,)], {"b", "h", "k"}),
    ("Convolution", Attrs.of(kernel=(3, 3), pad=(1, 1), num_filter=4, no_bias=True),
     [(2, 4, 8, 8), (4, 4, 3, 3)], {"b", "co", "xs0", "xs1", "ci"}),
    ("Pooling", Attrs.of(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max"), [(2, 2, 8, 8)],
     {"b", "c", "xs0", "xs1"}),
    ("BatchNorm", Attrs.of(fix_gamma=False), [(2, 4, 3, 3), (4,), (4,), (4,), (4,)], {"i1"}),
    ("SoftmaxOutput", Attrs(), [(4, 6), (4,)], {"i0"}),
    ("Embedding", Attrs.of(input_dim=10, output_dim=4), [(4, 3), (10, 4)], {"o0", "o2"}),
    ("Activation", Attrs.of(act_type="relu"), [(4, 6)], {"i0", "i1"}),
    ("elemwise_add", Attrs(), [(4, 6), (4, 6)], {"i0", "i1"}),
    ("SliceChannel", Attrs.of(num_outputs=4, axis=1), [(4, 8)], {"o0"}),
    ("Concat", Attrs.of(num_args=2, dim=1), [(4, 2), (4, 6)], {"o0", "o1"}),
]


@pytest.mark.parametrize("op,attrs,shapes,names", KERNEL_SPLITS, ids=[c[0] for c in KERNEL_SPLITS])
def test_zoo_operators_have_kernel_executable_strategies(op, attrs, shapes, names):
    desc = describe(op, attrs, shapes, infer_op_shapes(op, attrs, shapes))
    runnable = {s.var for s in strategies(desc, 2) if _kernel_calls(op, attrs, s, desc) is not None}
    assert names <= runnable, f"{op}: kernel cannot run {sorted(names - runnable)}"
