"""A copy whose gradient is MXNet's zero sends nothing back (FOUND_BUGS "softmax-class-split-bytes", fixed).

MXNet's gradient pass gives an input MXNet's zero (a ``zeros_like`` node, no backward) where the op's gradient
for it is zero (``one_hot``'s index, ``BlockGrad``), passes zeros back through most ops and drops them from sums:
a piece read on another device only through such a path has no backward copy. The counts (the plan's,
:func:`tofu.search.copies.copied_bytes`; the symbol's program; tests/oracle.py) follow the rule of
:func:`tofu.graph.gradients.gives_gradient`. Here: its tables against MXNet's own gradient pass for every described
op, what each expansion differentiates (:func:`tofu.graph.gradients.expansion_gradients`) against MXNet's, and the
counts against the copies MXNet's bound executor makes (:func:`tofu.runtime.train.measure_copies`) on two graphs
other than the fuzz's smallest case (tests/test_fuzz.py) where MXNet prunes such a copy: a label (a parameter,
its shape not given) read by SoftmaxOutput's expansion through ``one_hot``, and rows of an activation that
``reverse`` reads on the other device for a ``BlockGrad``.

And what MXNet runs of a loss split along its classes and computed whole over later cuts (FOUND_BUGS
"loss-replica-exchange-bytes", fixed): one copy of each piece, so one group's statistics exchange, and only the
holders of its input that those copies read (the counts against MXNet's copies on the fuzz's case and two
other graphs).
"""
import re

import mxnet as mx
import numpy as np
import pytest

from tests.oracle import _running, count, plan_tables
from tofu import registry
from tofu.api import partitioned
from tofu.graph import import_symbol
from tofu.graph import gradients
from tofu.graph.gradients import expansion_gradients, gives_gradient
from tofu.graph.single_op import op_symbol
from tofu.runtime.train import Trainer, measure_copies
from tofu.search.algorithms import plan_graph
from tofu.sim.program import Phase, TaskKind, program_from_plan, \
    program_from_symbol
from tofu.tdl.describe import typed_attrs

SPECS = registry.load_builtin_operators()
_ZERO = ("zeros_like", "_zeros")            # MXNet's zero gradients (``MakeZeroGradNodes``, ``AggregateGradient``)


def _gradient_ops(heads, shapes: dict, args: list[str]) -> list[str | None]:
    """The op of the gradient MXNet's bound executor of ``heads`` gives each of ``args``, one bound at a time
    (MXNet copies a gradient entry handed to two arguments; None: a node without a name, which MXNet's zeros
    never are)."""
    found = []
    for a in args:
        exe = mx.sym.Group(heads).simple_bind(mx.cpu(), grad_req={b: "write" if b == a else "null" for b in args},
                                             **shapes)
        text = exe.debug_str()
        ops = {name: op for op, name in re.findall(r"Op:(\S+), Name=(\S+)", text)}
        found.append(ops.get(re.findall(r"output\[\d+\]=(\S*)\(\d+\)", text)[-1]))
    return found


def _mxnet_gives(outs, shapes: dict, args: list[str]) -> tuple[list[bool], list[bool]]:
    """Per argument: whether MXNet gives it a gradient that is not its zero when one reaches ``outs`` (each into
    a loss), and when only zeros do (each stopped by BlockGrad)."""
    losses = [mx.sym.MakeLoss(mx.sym.sum(mx.sym.cast(o, "float32"))) for o in outs]
    through = _gradient_ops(losses, shapes, args)
    on_zeros = _gradient_ops([mx.sym.BlockGrad(o) for o in outs], shapes, args)
    return [g not in _ZERO for g in through], [g not in _ZERO for g in on_zeros]


READS_NOTHING = ("_arange", "_ones", "_zeros")
"""Ops without inputs: no gradient to give."""
NOT_DIFFERENTIABLE = tuple(sorted(gradients.NOT_DIFFERENTIABLE))
"""Ops MXNet 1.9.1 cannot differentiate on their first case: no gradient path MXNet runs can go through them (the
planner refuses a graph that needs one, tofu.graph.gradients.undifferentiable; held to MXNet below)."""


def _first_case(op):
    case = SPECS[op].cases[0]
    sym = op_symbol(op, case.parsed_attrs(), len(case.shapes))
    return sym, {f"in{i}": s for i, s in enumerate(case.shapes)}


@pytest.mark.parametrize("op", sorted(set(SPECS) - set(READS_NOTHING) - set(NOT_DIFFERENTIABLE)))
def test_the_gradient_rule_is_mxnets(op):
    """ZERO_GRADIENT_OPS, ZERO_GRADIENT_INPUTS and RUNS_ON_ZEROS say what MXNet's gradient pass does with the
    op, on its first TDL case."""
    sym, shapes = _first_case(op)
    args = sym.list_arguments()
    through, on_zeros = _mxnet_gives([sym[k] for k in range(len(sym.list_outputs()))], shapes, args)
    attrs = SPECS[op].cases[0].parsed_attrs()
    for name, a, b in zip(args, through, on_zeros):
        position = int(name[2:])
        assert (a, b) == (gives_gradient(op, True, position, attrs), gives_gradient(op, False, position, attrs)), name


@pytest.mark.parametrize("op,case", [(op, c) for op in sorted(gradients.ZERO_GRADIENT_ATTRS) for c in SPECS[op].cases])
def test_the_gradient_rule_that_reads_attributes_is_mxnets_on_every_case(op, case):
    """topk gives data a gradient through its values, none through their positions or its mask: every case."""
    sym = op_symbol(op, case.parsed_attrs(), len(case.shapes))
    shapes = {f"in{i}": s for i, s in enumerate(case.shapes)}
    args = sym.list_arguments()
    through, on_zeros = _mxnet_gives([sym[k] for k in range(len(sym.list_outputs()))], shapes, args)
    attrs = case.parsed_attrs()
    got = [(gives_gradient(op, True, int(n[2:]), attrs), gives_gradient(op, False, int(n[2:]), attrs)) for n in args]
    assert list(zip(through, on_zeros)) == got
    assert any(c.attrs.get("ret_typ") == "value" for c in SPECS[op].cases) and \
        any(c.attrs.get("ret_typ", "indices") != "value" for c in SPECS[op].cases)


@pytest.mark.parametrize("op", READS_NOTHING + NOT_DIFFERENTIABLE)
def test_the_ops_left_out_of_the_rule_check_are_what_they_say(op):
    """Each op left out above reads nothing, or MXNet's gradient pass refuses it: a new op that MXNet cannot
    differentiate fails the check above until it is named here, and a named one that MXNet learns to
    differentiate fails here."""
    assert op in SPECS
    sym, shapes = _first_case(op)
    args = sym.list_arguments()
    if op in READS_NOTHING:
        assert not args
        return
    with pytest.raises((mx.base.MXNetError, RuntimeError)):
        _mxnet_gives([sym[k] for k in range(len(sym.list_outputs()))], shapes, args)


EXPANDED = [(op, i) for op in sorted(SPECS) if registry.expansion(op) is not None
            for i, case in enumerate(SPECS[op].cases)
            if registry.expansion(op).runs(typed_attrs(SPECS[op].attrs_type, case.parsed_attrs(), op), case.shapes)]


@pytest.mark.parametrize("op,i", EXPANDED, ids=[f"{op}-{i}" for op, i in EXPANDED])
@pytest.mark.parametrize("shifted", [False, True])
def test_expansions_differentiate_what_mxnet_does(op, i, shifted):
    """An expansion's symbol on one worker's pieces (``shifted``: the last axis starting at 2, SoftmaxOutput's
    label then shifted by ``_minus_scalar``), bound by MXNet: each input gets a gradient that is not MXNet's
    zero where :func:`expansion_gradients` says, whether a gradient or only zeros reach its outputs."""
    case = SPECS[op].cases[i]
    attrs = case.parsed_attrs()
    origins = tuple((0,) * (len(s) - 1) + (2 * shifted,) if s else () for s in case.shapes)
    names = [f"in{j}" for j in range(len(case.shapes))]
    with mx.name.NameManager():
        outs = registry.expansion(op)([[mx.sym.var(n) for n in names]], [list(case.shapes)],
                                      typed_attrs(SPECS[op].attrs_type, attrs, op),
                                      lambda parts, reducer="sum": [mx.sym.add_n(*parts)], [list(origins)])
    outs = [o for out in outs for o in out]
    args = [a for a in mx.sym.Group(outs).list_arguments() if a in names]
    shapes = {n: s for n, s in zip(names, case.shapes) if n in args}
    through, on_zeros = _mxnet_gives(outs, shapes, args)
    for name, a, b in zip(args, through, on_zeros):
        j = names.index(name)
        assert a == expansion_gradients(op, attrs, case.shapes, origins, True)[j], name
        assert b == expansion_gradients(op, attrs, case.shapes, origins, False)[j], name


def _counted_and_measured(symbol, shapes: dict, k: int, algo: str):
    """The plan's bytes, the symbol's program's, the oracle's (``shared``) and MXNet's copies, measured."""
    graph = import_symbol(symbol, shapes, name="pruned")
    plan = plan_graph(graph, k, algo)
    program = program_from_symbol(graph, plan)
    predicted = (plan.comm_bytes, sum(t.nbytes for t in program.tasks if t.kind is TaskKind.COPY),
                 count(graph, plan).shared)
    rng = np.random.default_rng(0)
    values = {t.name: rng.random(t.shape).astype(np.float32) for t in graph.tensors if t.producer is None}
    values["softmax_label"] = rng.integers(0, 2, values["softmax_label"].shape).astype(np.float32)
    routed = Trainer(partitioned(graph, plan), values, replicas=False)       # the rewriter's symbol as MXNet binds it
    return graph, plan, predicted, measure_copies(routed.executor)


@pytest.mark.parametrize("k", [2, 4])
def test_a_label_read_through_one_hot_is_not_sent_back(k):
    """FullyConnected -> SoftmaxOutput at batch 1, the label computed from a parameter (rounded: a tensor held by
    one worker, read by every other; a label variable itself is an input that every device is fed): the expansion
    splits the classes and reads the label through one_hot alone, so MXNet copies it forward and prunes its
    backward copy, as every count says."""
    x = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=4, name="fc")
    label = mx.sym.round(mx.sym.var("softmax_label"), name="rounded")
    graph, plan, predicted, copies = _counted_and_measured(mx.sym.SoftmaxOutput(x, label, name="softmax"),
                                                           {"data": (1, 4)}, k, "tofu")
    assert graph.tensors[graph.nodes[0].inputs[0]].role.name == "DATA"
    assert next(t for t in graph.tensors if t.name == "softmax_label").role.name == "PARAM"
    assert [c.backward for c in copies if c.name.startswith("softmax_label")] == [False] * (k - 1)
    assert predicted == (sum(c.nbytes for c in copies),) * 3
    replayed = program_from_plan(graph, plan)       # the plan's program (no statistics exchange): the same backward
    assert sum(t.nbytes for t in replayed.tasks if t.kind is TaskKind.COPY and t.phase is Phase.BACKWARD) == \
        sum(c.nbytes for c in copies if c.backward)


def test_rows_read_for_a_blockgrad_are_not_sent_back():
    """h = FullyConnected(data); FullyConnected(h + BlockGrad(reverse(h, axis=0))) -> SoftmaxOutput, rows split
    over 2 workers: each reverses the other's rows, read whole from it; BlockGrad gives them MXNet's zero, which
    reverse passes back, so those rows cross forward only (the plan and the oracle charged their backward)."""
    h = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=4, name="f1")
    x = mx.sym.FullyConnected(h + mx.sym.BlockGrad(mx.sym.reverse(h, axis=0)), num_hidden=4, name="fc")
    _, _, predicted, copies = _counted_and_measured(mx.sym.SoftmaxOutput(x, name="softmax"), {"data": (4, 4)}, 2,
                                                    "allrow-greedy")
    rows = [c for c in copies if c.name.startswith("f1_output")]
    assert sum(c.nbytes for c in rows if not c.backward) > sum(c.nbytes for c in rows if c.backward)
    assert predicted == (sum(c.nbytes for c in copies),) * 3


@pytest.mark.parametrize("hidden, batch", [(None, 1), (6, 1), (None, 3)])
def test_a_loss_run_once_per_piece_exchanges_and_reads_only_there(hidden, batch):
    """[FullyConnected -> tanh ->] FullyConnected(4) -> SoftmaxOutput on 8 workers, the label given (data): the
    plan splits the classes at the first cut and computes the softmax whole over the later ones, so MXNet runs
    one copy of each piece (the graph output needs no other). Only that copies' group exchanges the softmax's
    statistics (the plan charged every group's exchange: 224 B predicted, 176 measured, the fuzz's case of
    FOUND_BUGS "loss-replica-exchange-bytes"), and the FullyConnected's partial sums are reduced only to the
    holders those copies read from, by the calls that feed them (tests/oracle.py converted to every holder
    and ran every call: 256 B)."""
    x = mx.sym.var("data")
    if hidden:
        x = mx.sym.Activation(mx.sym.FullyConnected(x, num_hidden=hidden, name="f1"), act_type="tanh")
    x = mx.sym.FullyConnected(x, num_hidden=4, name="fc")
    graph, plan, predicted, copies = _counted_and_measured(mx.sym.SoftmaxOutput(x, name="softmax"),
                                                           {"data": (batch, 8), "softmax_label": (batch,)}, 8,
                                                           "tofu")
    assert predicted == (sum(c.nbytes for c in copies),) * 3
    factors, _, dims, choices = plan_tables(graph, plan)
    softmax = next(n for n in graph.nodes if n.op == "SoftmaxOutput")
    calls, running = _running(graph, softmax, choices[softmax.id], factors, set())
    assert calls[0].expansion and len(running) < len(calls)        # the case: a split loss run once per piece
    ends = {int(d) for c in copies if c.name.startswith("stat_") for d in re.findall(r"dev(\d+)", c.name)}
    assert ends and ends <= {c.worker for c in running}
