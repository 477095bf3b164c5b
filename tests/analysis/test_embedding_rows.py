"""Embedding split along its table's rows (Megatron-LM's vocabulary-parallel embedding, issue 22).

The description writes the lookup as a one-hot contraction over the rows v, so a split of v is a
partition-n-reduce the analysis derives; MXNet's kernel cannot run it (it clips an index the piece lacks to the
piece's edge, where the partial needs a zero row), so the op's expansion does (``tdl_expansion(partials=True)``).
Composed over one and two steps, alone and after a split of the batch or the features, every worker's expansion
run on its pieces and their origins sums to MXNet's unpartitioned Embedding, forward and in the table's gradient,
on indices that are fractional, negative and past the table's end (MXNet truncates, then clips).
"""
import mxnet as mx
import numpy as np
import pytest

from tofu import registry
from tofu.analysis.compose import ChoiceKind, OpChoice, compose
from tofu.analysis.views import NodeView
from tofu.graph.attrs import Attrs
from tofu.sim.flops import OpClass, op_work
from tofu.tdl.describe import describe, typed_attrs

registry.load_builtin_operators()
V, E = 12, 8
DATA = (4, 6)
ATTRS = Attrs.of(input_dim=V, output_dim=E)
ROWS = OpChoice(ChoiceKind.REDUCE, "v")
TYPED = type(describe("Embedding", ATTRS, [DATA, (V, E)], [DATA + (E,)]).attrs)


def _reference(data, weight, head):
    """MXNet's Embedding: its output and the table's gradient under ``head``."""
    sym = mx.sym.Embedding(mx.sym.var("data"), mx.sym.var("weight"), input_dim=V, output_dim=E)
    grad = mx.nd.zeros(weight.shape)
    exe = sym.bind(mx.cpu(), {"data": mx.nd.array(data), "weight": mx.nd.array(weight)},
                   args_grad={"weight": grad}, grad_req={"data": "null", "weight": "write"})
    out = exe.forward(is_train=True)[0].asnumpy()
    exe.backward([mx.nd.array(head)])
    return out, grad.asnumpy()


def _partitioned(calls, data, weight, head):
    """Every worker's expansion on its pieces, summed into the output; the table's gradient of
    sum_w <out_w, head[box_w]> (= <out, head>: each output element's partials are summed once)."""
    expand = registry.expansion("Embedding")
    w_sym = mx.sym.var("weight")
    full = np.zeros(DATA + (E,), dtype=np.float32)
    losses, outs = [], []
    for c in calls:
        w = c.inputs[1]
        pieces = [mx.sym.var(f"data{c.worker}"), mx.sym.slice(w_sym, begin=tuple(a for a, _ in w.box),
                                                              end=tuple(b for _, b in w.box))]
        shapes = [tuple(b - a for a, b in p.box) for p in c.inputs]
        origins = [tuple(a for a, _ in p.box) for p in c.inputs]
        attrs = typed_attrs(TYPED, c.attrs, "Embedding")
        (out,), = expand([pieces], [shapes], attrs, lambda *a, **k: pytest.fail("a row split exchanged"), [origins])
        box = tuple(slice(a, b) for a, b in c.outputs[0].box)
        outs.append((box, out))
        losses.append(mx.sym.sum(out * mx.sym.var(f"head{c.worker}")))
    feed = {"weight": mx.nd.array(weight)}
    for c, (box, _) in zip(calls, outs):
        d = c.inputs[0].box
        feed[f"data{c.worker}"] = mx.nd.array(data[tuple(slice(a, b) for a, b in d)])
        feed[f"head{c.worker}"] = mx.nd.array(head[box])
    group = mx.sym.Group([o for _, o in outs] + [mx.sym.add_n(*losses)])
    grad = mx.nd.zeros(weight.shape)
    exe = group.bind(mx.cpu(), {n: feed[n] for n in group.list_arguments()}, args_grad={"weight": grad},
                     grad_req={n: ("write" if n == "weight" else "null") for n in group.list_arguments()})
    values = exe.forward(is_train=True)
    exe.backward([mx.nd.zeros(v.shape) for v in values[:-1]] + [mx.nd.ones((1,))])
    for (box, _), v in zip(outs, values):
        full[box] += v.asnumpy()
    return full, grad.asnumpy()


PLANS = [((ROWS,), (2,)), ((ROWS,), (3,)), ((ROWS,), (4,)), ((ROWS, ROWS), (2, 2)),
         ((OpChoice(ChoiceKind.OUTPUT, "o0"), ROWS), (2, 2)), ((OpChoice(ChoiceKind.OUTPUT, "o2"), ROWS), (2, 2)),
         ((ROWS, ROWS, ROWS), (2, 3, 2))]


@pytest.mark.parametrize("choices,factors", PLANS, ids=lambda x: "-".join(map(str, x)))
def test_row_split_sums_to_mxnets_lookup(choices, factors):
    rng = np.random.default_rng(3)
    data = rng.uniform(-2.5, V + 3.5, DATA).astype(np.float32)      # fractional, negative, past the end
    data[0, :3] = [0.0, V - 1, 5.0]
    weight = rng.standard_normal((V, E)).astype(np.float32)
    head = rng.standard_normal(DATA + (E,)).astype(np.float32)
    view = NodeView("Embedding", ATTRS, (DATA, (V, E)), (DATA + (E,),), (0, 1), (2,))
    calls = compose(view, choices, factors)
    rows = [j for j, ch in enumerate(choices) if ch == ROWS]
    assert all(c.expanded == tuple(rows) and not c.exchange_steps and c.outputs[0].partial == tuple(rows)
               for c in calls)
    expected, expected_grad = _reference(data, weight, head)
    got, grad = _partitioned(calls, data, weight, head)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-5, atol=1e-5)


def test_the_lookup_costs_one_term_not_the_vocabulary():
    """The one-hot contraction is counted as the lookup it is: no arithmetic, a data movement (before it was
    written so, Embedding was a data-dependent access; the sum over 50304 rows would be 2 x 50304 x |out|)."""
    desc = describe("Embedding", Attrs.of(input_dim=50304, output_dim=768), [(8, 1024), (50304, 768)],
                    [(8, 1024, 768)])
    work = op_work(desc)
    assert work.flops == 0.0 and work.op_class is OpClass.DATA_MOVEMENT
    assert work.bytes == 4 * (8 * 1024 + 50304 * 768 + 8 * 1024 * 768)


def test_an_expansion_of_partials_must_read_the_origins():
    """A worker's partial depends on where its pieces lie (Embedding shifts the indices by its rows' start): an
    expansion declared with partials=True but no ``origins`` parameter is refused at registration."""
    from tofu.errors import TDLError
    from tofu.tdl.describe import tdl_expansion

    with pytest.raises(TDLError, match="partials=True needs the origins"):
        @tdl_expansion("_tofu_test_no_origins", partials=True)
        def blind(pieces, shapes, attrs, allreduce):
            return pieces
    assert registry.expansion("_tofu_test_no_origins") is None
