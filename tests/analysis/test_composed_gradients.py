"""Two cuts composed, as the rewriter runs them, over the whole registry: every worker's call of
:func:`tofu.analysis.compose.compose` for 2 x 2 and 3 x 2 workers (every strategy at the first cut, then every
strategy of the first group's view at the second) run by MXNet's kernel gives the unpartitioned output, forward, and the
unpartitioned gradient of every input, backward (tests/rewrite/test_compose.py does this for a convolution,
forward; tests/analysis/test_strategy_gradients.py one cut of every op).

Each call as the rewriter builds it: its pieces padded with their fill where they pass the tensor's ends, an
input passed as zeros (a term counted on one worker only) not read, its kernel's outputs cut to the box it keeps
and scaled; the outputs placed by box, a partial output reduced over the calls of its box (the gradient of a
reduction: the whole for a sum, where it is the result for a maximum or minimum, the others' product for a
product), an element computed by several calls read from the first (the runtime's holder); a loss head's call
whose every element an earlier call computed is not run (MXNet prunes it: it would inject its gradient again). Chains run by an op's expansion (statistics exchanged) are tests/analysis/test_exchange*.py's."""
import numpy as np
import pytest

import mxnet as mx

from tofu import registry
from tofu.analysis.compose import OpChoice, compose
from tofu.analysis.strategies import strategies
from tofu.analysis.views import NodeView, next_view
from tofu.errors import AnalysisError, TofuError
from tofu.graph.ir import LOSS_OPS
from tofu.graph.single_op import infer_op_shapes, op_symbol

from tests.analysis.test_strategy_gradients import CRASHES, NO_GRADIENT, WRONG_IN_MXNET, _float_inputs, \
    _gradients
from tests.operators.native_kernels import native_bug
from tests.operators.test_conformance import random_inputs

SPECS = registry.load_builtin_operators()
_REDUCE = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


def _view(op, case):
    attrs = case.parsed_attrs()
    outs = infer_op_shapes(op, attrs, case.shapes)
    n = len(case.shapes)
    return NodeView(op, attrs, tuple(case.shapes), tuple(outs), tuple(range(n)), tuple(range(n, n + len(outs))))


def _chains():
    found = []
    for op, spec in sorted(SPECS.items()):
        if op.startswith("_random_") or op == "Dropout":
            continue
        for i, case in enumerate(spec.cases):
            attrs = case.parsed_attrs()
            if native_bug(op, attrs) or not _float_inputs(case) or (op, i) in {*CRASHES, *NO_GRADIENT, *WRONG_IN_MXNET}:
                continue
            view = _view(op, case)
            for f1, f2 in FACTORS:
                for a, s1 in enumerate(strategies(view.describe(), f1)):
                    if s1.exchanges or s1.var.endswith("*"):
                        continue
                    try:
                        second = strategies(next_view(view, s1, f1).describe(), f2)
                    except TofuError:
                        continue            # no kernel runs the first cut, or its shard has no description
                    found += [(op, i, (f1, f2), a, b) for b, s2 in enumerate(second) if not s2.exchanges]
    return found


FACTORS = ((2, 2), (3, 2))
CHAINS = _chains()


def test_the_chains_checked_are_many():
    assert len(CHAINS) >= 1000
    assert len({op for op, *_ in CHAINS}) >= 150


def _pieces(call, inputs):
    out = []
    for p in call.inputs:
        piece = np.full([b - a for a, b in p.box], p.fill, dtype=inputs[p.input].dtype)
        inner = tuple(slice(da - a, db - a) for (a, _), (da, db) in zip(p.box, p.data))
        piece[inner] = inputs[p.input][tuple(slice(a, b) for a, b in p.data)]
        out.append(np.zeros_like(piece) if p.zeroed else piece)
    return out


def _forward(op, attrs, arrays):
    sym = op_symbol(op, attrs, len(arrays))
    aux = set(sym.list_auxiliary_states())
    exe = sym.bind(mx.cpu(), {f"in{i}": mx.nd.array(a, dtype=a.dtype) for i, a in enumerate(arrays)
                              if f"in{i}" not in aux},
                   aux_states={n: mx.nd.array(arrays[int(n[2:])]) for n in aux}, grad_req="null")
    return [o.asnumpy() for o in exe.forward(is_train=True)]


def _kept(call, outs):
    if call.keep is not None:
        outs = [o[tuple(slice(a, b) for a, b in box)] for o, box in zip(outs, call.keep)]
    return [o * np.float32(call.scale) for o in outs]


@pytest.mark.parametrize("op,i,factors,a,b", CHAINS,
                         ids=[f"{op}-{i}-{f1}x{f2}-{a}-{b}" for op, i, (f1, f2), a, b in CHAINS])
def test_two_composed_cuts_give_mxnet_s_output_and_gradient(op, i, factors, a, b):
    case = SPECS[op].cases[i]
    view = _view(op, case)
    s1 = strategies(view.describe(), factors[0])[a]
    s2 = strategies(next_view(view, s1, factors[0]).describe(), factors[1])[b]
    try:
        calls = compose(view, [OpChoice.of(s1), OpChoice.of(s2)], factors)
    except AnalysisError:
        return          # no kernel runs a worker's shard: the search's runnability check keeps it out of plans
    if any(c.expansion for c in calls):
        return          # an expansion's reduction split (Embedding's rows): tests/analysis/test_embedding_rows.py
    attrs = case.parsed_attrs()
    inputs = [np.asarray(x) for x in random_inputs(case, seed=6)]
    inputs = [x.astype(np.float32) if x.dtype == np.float64 else x for x in inputs]
    if "ctc" in op.lower() and attrs.get("blank_label", "first") == "first":
        inputs[1][:, 0] = np.maximum(inputs[1][:, 0], 1)      # see test_strategy_gradients
    expected = _forward(op, attrs, inputs)
    rng = np.random.default_rng(7)
    heads = [rng.standard_normal(e.shape).astype(np.float32) for e in expected]
    whole = _gradients(op, attrs, inputs, heads, _float_inputs(case), case.train)
    assert whole is not None

    loss = op in LOSS_OPS
    outs = [_kept(c, _forward(op, c.attrs, _pieces(c, inputs))) for c in calls]
    by_box = [{} for _ in expected]            # per output: box -> the calls that compute it
    for c, o in zip(calls, outs):
        for n, piece in enumerate(c.outputs):
            by_box[n].setdefault(piece.box, []).append((c, o[n], piece))
    reduced = []
    for n, boxes in enumerate(by_box):
        got = np.full(expected[n].shape, np.nan, dtype=np.float64)
        done = {}
        for box, members in boxes.items():
            region = tuple(slice(lo, hi) for lo, hi in box)
            parts = [m[1] for m in members]
            value = _REDUCE[members[0][2].reducer].reduce(np.stack(parts), axis=0) if members[0][2].partial \
                else parts[0]
            got[region] = value
            done[box] = value
        reduced.append(done)
        np.testing.assert_allclose(got, expected[n], rtol=1e-4, atol=1e-5 * (1 + np.abs(expected[n]).max()),
                                   err_msg=f"{op} case {i}: {s1} then {s2}, output {n}")

    grads = {p: np.zeros(inputs[p].shape) for p in whole}
    covered = [np.zeros(e.shape, dtype=bool) for e in expected]     # read from an earlier call already
    for w, (c, o) in enumerate(zip(calls, outs)):
        kernel_heads, read = [], False
        for n, piece in enumerate(c.outputs):
            region = tuple(slice(lo, hi) for lo, hi in piece.box)
            h = heads[n][region]
            if piece.partial:
                mine, result = o[n], reduced[n][piece.box]
                others = [m[1] for m in by_box[n][piece.box] if m[0] is not c]
                h = h * {"sum": 1.0, "max": mine == result, "min": mine == result,
                         "prod": np.prod(others, axis=0) if others else 1.0}[piece.reducer]
                read = True
            else:       # each element is read from one call, the first that computes it (the runtime's holder)
                fresh = ~covered[n][region]
                covered[n][region] = True
                h = h * fresh
                read |= bool(fresh.any())
            full = np.zeros(_kernel_shape(op, c, inputs, n), dtype=np.float32)
            at = tuple(slice(lo, hi) for lo, hi in c.keep[n]) if c.keep is not None else ...
            full[at] = h
            kernel_heads.append(full * np.float32(c.scale))
        if loss and not read:
            continue            # a loss head's copy that nothing reads: MXNet does not run it (it would inject)
        wanted = [q for q, p in enumerate(c.inputs) if p.input in whole and not p.zeroed and p.read]
        g = _gradients(op, c.attrs, _pieces(c, inputs), kernel_heads, wanted, case.train)
        assert g is not None, f"{op} case {i}: worker {w}'s call has no gradient"
        for q, grad in g.items():
            p = c.inputs[q]
            inner = tuple(slice(da - pa, db - pa) for (pa, _), (da, db) in zip(p.box, p.data))
            grads[p.input][tuple(slice(da, db) for da, db in p.data)] += grad[inner]
    for p, expected_grad in whole.items():
        np.testing.assert_allclose(grads[p], expected_grad, rtol=1e-4,
                                   atol=1e-5 * (1 + np.abs(expected_grad).max()),
                                   err_msg=f"{op} case {i}: {s1} then {s2}, gradient of input {p}")


def _kernel_shape(op, call, inputs, n):
    return tuple(infer_op_shapes(op, call.attrs, tuple(tuple(b - a for a, b in p.box) for p in call.inputs))[n])
