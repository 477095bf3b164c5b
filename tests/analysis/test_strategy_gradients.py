"""Every strategy MXNet's kernel runs, held to MXNet's *backward*: the kernel's gradient on every worker's pieces,
from that worker's piece of the gradient arriving at the output, sums to the unpartitioned kernel's gradient.

The forward is held to MXNet by tests/analysis/test_strategies.py; a description states the forward only, so
an op whose backward is not the derivative of what it computes piece by piece would pass there and train wrong:
a loss head that divides by an extent of the whole tensor (tests/operators/test_loss_gradients.py found two),
an op with a hand-written gradient. Generic over the registry: every case, every strategy at k = 2, 3 and 4
that exchanges no statistics and MXNet's kernel runs, on every op MXNet can differentiate.

A worker's pieces: its call's inputs (a halo's gradient is dropped: it lies outside the tensor; an input passed
as zeros on workers past the first is not read there), and its outputs as the runtime keeps them (a crop or a
kept box receives the gradient of that box only; a scaled output, the gradient scaled). A partial sum
receives the whole gradient on every worker (its reduction's adjoint; a partial maximum or minimum where it is
the result, a partial product times the others'); an output computed whole by every worker
receives it on the first only (one copy is read); a loss head's, computed whole, runs on the first only."""
import subprocess
import sys

import numpy as np
import pytest

import mxnet as mx

from tofu import registry
from tofu.analysis.shard import combine, run_shard, shard_inputs
from tofu.analysis.views import kernel_call
from tofu.analysis.strategies import PartialSum, Replicate, strategies
from tofu.graph.ir import LOSS_OPS
from tofu.graph.single_op import infer_op_shapes, op_symbol
from tofu.tdl.describe import describe

from tests.analysis.test_strategies import _strategy
from tests.operators.native_kernels import native_bug
from tests.operators.test_conformance import random_inputs, run_op

SPECS = registry.load_builtin_operators()
CRASHES = {("gather_nd", 1): "negative indices: MXNet's backward (a scatter-add) aborts the process, whole or not"}
"""Cases whose unpartitioned backward kills the process in MXNet 1.9.1 (held to it below, in a child process)."""
NO_GRADIENT = {("_contrib_ModulatedDeformableConvolution", 0), ("_contrib_ModulatedDeformableConvolution", 2),
               ("_grad_add", 0), ("_grad_add", 1), ("_image_resize", 0), ("_image_resize", 1), ("_image_resize", 2),
               ("_npi_copysign_scalar", 0), ("_npi_copysign_scalar", 1), ("_npi_rcopysign_scalar", 0),
               ("_npi_rcopysign_scalar", 1), ("_npi_solve", 2), ("adam_update", 0), ("adam_update", 1),
               ("argmax_channel", 0), ("argmax_channel", 1), ("sort", 0), ("khatri_rao", 0), ("khatri_rao", 1), ("khatri_rao", 2), ("sgd_mom_update", 0),
               ("sgd_mom_update", 1), ("sgd_update", 0), ("sgd_update", 1)}
"""Cases MXNet 1.9.1 cannot differentiate on the CPU, unpartitioned (no gradient, a GPU-only backward, a
broadcast its backward refuses): no model that trains them reaches a plan (held to it below)."""
WRONG_IN_MXNET = {("_npi_matmul", 2)}
"""Cases where MXNet's unpartitioned gradient is wrong and its pieces' right (held to numpy below): a (2, 1, 3, 4)
@ b (3, 4, 2), the gradient of a summed over the broadcast dimension."""


def _float_inputs(case):
    """The inputs that carry a gradient: not integer-valued (indices, labels, lengths)."""
    return [i for i in range(len(case.shapes)) if case.int_range(i) is None]


def _gradients(op, attrs, inputs, heads, wanted, train):
    """MXNet's gradient of ``op`` (at ``attrs``) with respect to the inputs ``wanted``, the gradients ``heads``
    arriving at its outputs; None when MXNet has no gradient for it."""
    sym = op_symbol(op, attrs, len(inputs))
    aux = set(sym.list_auxiliary_states())
    args = {f"in{i}": mx.nd.array(a, dtype=a.dtype) for i, a in enumerate(inputs) if f"in{i}" not in aux}
    grads = {f"in{i}": mx.nd.zeros(inputs[i].shape) for i in wanted if f"in{i}" in args}
    try:
        exe = sym.bind(mx.cpu(), args, args_grad=grads, grad_req={n: "write" if n in grads else "null" for n in args},
                       aux_states={n: mx.nd.array(inputs[int(n[2:])]) for n in aux})
        exe.forward(is_train=True)
        exe.backward([mx.nd.array(h) for h in heads])
        return {int(n[2:]): g.asnumpy().astype(np.float64) for n, g in grads.items()}
    except mx.base.MXNetError:
        return None


def _collect():
    found = []
    for op, spec in sorted(SPECS.items()):
        if op.startswith("_random_") or op in ("Dropout",):
            continue                        # draws: no two runs alike (their gradient is not a function)
        for i, case in enumerate(spec.cases):
            attrs = case.parsed_attrs()
            if native_bug(op, attrs) or not _float_inputs(case) or (op, i) in CRASHES:
                continue
            desc = describe(op, attrs, case.shapes, infer_op_shapes(op, attrs, case.shapes))
            for k in (2, 3, 4):
                found += [(op, i, k, j) for j, s in enumerate(strategies(desc, k)) if not s.exchanges]
    return found


STRATEGIES = _collect()


@pytest.mark.parametrize("op,i", sorted(CRASHES))
def test_what_is_left_out_crashes_mxnet_itself(op, i):
    script = ("import numpy as np\n"
              "from tests.analysis.test_strategy_gradients import SPECS, _gradients, random_inputs\n"
              "from tofu.graph.single_op import infer_op_shapes\n"
              f"case = SPECS[{op!r}].cases[{i}]\n"
              "outs = infer_op_shapes({op!r}, case.parsed_attrs(), case.shapes)\n"
              f"_gradients({op!r}, case.parsed_attrs(), random_inputs(case, seed=2), "
              "[np.ones(s, np.float32) for s in outs], [0], False)\n").replace("{op!r}", repr(op))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert done.returncode < 0 or done.returncode > 1, done.stderr[-300:]


@pytest.mark.parametrize("op,i", sorted(NO_GRADIENT))
def test_what_has_no_gradient_has_none_in_mxnet(op, i):
    case = SPECS[op].cases[i]
    attrs = case.parsed_attrs()
    heads = [np.ones(shape, np.float32) for shape in infer_op_shapes(op, attrs, case.shapes)]
    assert _gradients(op, attrs, random_inputs(case, seed=2), heads, _float_inputs(case), case.train) is None


def test_mxnet_s_own_broadcast_matmul_gradient_is_wrong():
    """_npi_matmul's gradient of its first operand, broadcast along a dimension of extent 1, against numpy: the
    unpartitioned one is wrong, the two halves of the batch split are right (a `tofu run --check` of such a model
    would fail against MXNet's single device, wrong there)."""
    (op, i), = WRONG_IN_MXNET
    case = SPECS[op].cases[i]
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(shape).astype(np.float32) for shape in case.shapes)
    heads = rng.standard_normal((a.shape[0], b.shape[0], a.shape[2], b.shape[2])).astype(np.float32)
    expected = np.einsum("ijmn,jkn->imk", heads, b)[:, None]          # out[i, j] = a[i, 0] @ b[j]
    whole = _gradients(op, case.parsed_attrs(), [a, b], [heads], [0], False)[0]
    halves = [_gradients(op, case.parsed_attrs(), [a[h:h + 1], b], [heads[h:h + 1]], [0], False)[0] for h in (0, 1)]
    assert np.abs(whole - expected).max() > 0.1
    np.testing.assert_allclose(np.concatenate(halves), expected, rtol=1e-4, atol=1e-5)


def test_the_strategies_checked_are_many():
    assert len(STRATEGIES) >= 500
    assert len({op for op, *_ in STRATEGIES}) >= 150


@pytest.mark.parametrize("op,i,k,j", STRATEGIES, ids=[f"{op}-{i}-k{k}-{j}" for op, i, k, j in STRATEGIES])
def test_kernel_shards_backward_sums_to_mxnet_s(op, i, k, j):
    case = SPECS[op].cases[i]
    attrs, desc, s = _strategy(op, case, k, j)
    calls = [kernel_call(op, attrs, desc, s, w) for w in range(k)]
    if any(c is None for c in calls):
        return              # MXNet's kernel cannot run it: plans never use it (tests/analysis/test_strategies.py)
    inputs = [np.asarray(x) for x in random_inputs(case, seed=2)]
    inputs = [x.astype(np.float32) if x.dtype == np.float64 else x for x in inputs]
    if "ctc" in op.lower() and attrs.get("blank_label", "first") == "first":
        # a row whose first label is the padding 0 is an empty label sequence, and MXNet's CTC kernel returns
        # garbage for a batch whose every row is empty (its longest label has length 0), partitioned or not
        inputs[1][:, 0] = np.maximum(inputs[1][:, 0], 1)
    rng = np.random.default_rng(3)
    outs = [o.shape for o in desc.outputs]
    heads = [rng.standard_normal(shape).astype(np.float32) for shape in outs]
    wanted = _float_inputs(case)
    whole = _gradients(op, attrs, inputs, heads, wanted, case.train)
    if whole is None:
        assert (op, i) in NO_GRADIENT, f"{op} case {i}: MXNet gives no gradient, and NO_GRADIENT does not say so"
        return
    if (op, i) in WRONG_IN_MXNET:
        return              # test_mxnet_s_own_broadcast_matmul_gradient_is_wrong
    got = {p: np.zeros(inputs[p].shape) for p in whole}
    parts = [run_shard(c, s, w, lambda a, xs: run_op(op, a, xs, train=case.train), inputs)
             for w, c in enumerate(calls)] if any(isinstance(o, PartialSum) and o.reducer != "sum"
                                                  for o in s.outputs) else None
    for w, call in enumerate(calls):
        if w and op in LOSS_OPS and all(isinstance(o, Replicate) for o in s.outputs):
            continue
        pieces = [x.astype(inputs[p].dtype) for p, x in zip(call.inputs, shard_inputs(call, inputs, s.fills))]
        shard_heads = []
        kernel_outs = infer_op_shapes(op, call.attrs, tuple(x.shape for x in pieces))
        for o, placement in enumerate(s.outputs):
            if isinstance(placement, Replicate):
                h = heads[o] if w == 0 else np.zeros_like(heads[o])
            elif isinstance(placement, PartialSum) and placement.reducer == "sum":
                h = heads[o]
            elif isinstance(placement, PartialSum):       # the reduction's adjoint at this worker's part
                mine, others = parts[w][o], [p[o] for v, p in enumerate(parts) if v != w]
                h = heads[o] * (np.prod(others, axis=0) if placement.reducer == "prod"
                                else mine == combine(s, o, [p[o] for p in parts]))
            else:
                h = heads[o][s.output_regions[w][o].slices()]
            box = s.output_regions[w][o] if call.crop else call.keep[o] if call.keep is not None else None
            if box is not None:
                full = np.zeros(kernel_outs[o], dtype=np.float32)
                full[box.slices()] = h
                h = full
            shard_heads.append(h * np.float32(call.scale))
        wanted_here = [q for q, p in enumerate(call.inputs) if p in whole and not (w and p in call.zeroed)]
        g = _gradients(op, call.attrs, pieces, shard_heads, wanted_here, case.train)
        assert g is not None, f"{s}: MXNet differentiates the op but not worker {w}'s call"
        for q, grad in g.items():
            p, region = call.inputs[q], call.regions[q]
            if call.padded:
                grad = grad[tuple(slice(a, a + n) for (a, _), n in zip(region.pad, region.shape))]
            got[p][region.slices()] += grad
    for p, expected in whole.items():
        np.testing.assert_allclose(got[p], expected, rtol=1e-4, atol=1e-5 * (1 + np.abs(expected).max()),
                                   err_msg=f"{op} case {i}: {s}, gradient of input {p}")
