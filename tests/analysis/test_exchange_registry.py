"""Every strategy that exchanges statistics, over the whole registry: the op's expansion, run on every worker's
pieces with the statistics all-reduced, equals MXNet's fused kernel forward (every output) and in the gradient of
every input (tests/analysis/test_exchange.py holds hand-picked cases; this one every case of every op with an
expansion, at k = 2, 3 and 4, so that a new attribute or case of those ops is covered by adding it)."""
import mxnet as mx
import numpy as np
import pytest

from tofu import registry
from tofu.analysis.shard import combine
from tofu.analysis.strategies import Region, Replicate, strategies
from tofu.graph.single_op import infer_op_shapes, op_symbol
from tofu.tdl.describe import describe, typed_attrs

from tests.analysis.test_strategies import _strategy
from tests.operators.test_conformance import random_inputs

SPECS = registry.load_builtin_operators()


def _collect():
    found = []
    for op, spec in sorted(SPECS.items()):
        expansion = registry.expansion(op)
        if expansion is None:
            continue
        for i, case in enumerate(spec.cases):
            attrs = case.parsed_attrs()
            desc = describe(op, attrs, case.shapes, infer_op_shapes(op, attrs, case.shapes))
            for k in (2, 3, 4):
                found += [(op, i, k, j) for j, s in enumerate(strategies(desc, k))
                          if s.exchanges and expansion.runs(desc.attrs, tuple(t.shape for t in desc.inputs))]
    return found


STRATEGIES = _collect()


def test_every_op_with_an_expansion_has_exchanges_checked():
    assert len(STRATEGIES) >= 30
    ops = {op for op in SPECS if registry.expansion(op) is not None and not registry.expansion(op).partials}
    assert ops <= {op for op, *_ in STRATEGIES}, ops - {op for op, *_ in STRATEGIES}


def _allreduce(parts, reducer="sum"):
    combined = mx.sym.add_n(*parts) if reducer == "sum" else mx.sym.max(mx.sym.stack(*parts, axis=0), axis=0)
    return [combined] * len(parts)


def _run(sym, values, heads, aux_names):
    """Outputs and the gradient of every argument of ``sym`` (``values`` by name, aux states among them)."""
    args = {n: mx.nd.array(v) for n, v in values.items() if n not in aux_names}
    grads = {n: mx.nd.zeros(v.shape) for n, v in args.items()}
    # an expansion's kernels may keep statistics of their own (BatchNorm's affine step): they stay zero
    _, _, aux_shapes = sym.infer_shape(**{n: v.shape for n, v in args.items() if n in sym.list_arguments()})
    aux = {n: mx.nd.array(values[n]) if n in values else mx.nd.zeros(shape)
           for n, shape in zip(sym.list_auxiliary_states(), aux_shapes)}
    exe = sym.bind(mx.cpu(), args, args_grad=grads, aux_states=aux)
    outs = [o.asnumpy() for o in exe.forward(is_train=True)]
    exe.backward([mx.nd.array(h) for h in heads])
    return outs, {n: g.asnumpy() for n, g in grads.items()}


@pytest.mark.parametrize("op,i,k,j", STRATEGIES, ids=[f"{op}-{i}-k{k}-{j}" for op, i, k, j in STRATEGIES])
def test_the_expansion_equals_mxnet_s_kernel(op, i, k, j):
    case = SPECS[op].cases[i]
    attrs, desc, s = _strategy(op, case, k, j)
    inputs = [np.asarray(x, dtype=np.float32) for x in random_inputs(case, seed=4)]
    rng = np.random.default_rng(5)
    out_shapes = [o.shape for o in desc.outputs]
    heads = [rng.standard_normal(shape).astype(np.float32) for shape in out_shapes]
    fused = op_symbol(op, attrs, len(inputs))
    aux_positions = {int(n[2:]) for n in fused.list_auxiliary_states()}
    expected, expected_grads = _run(fused, {f"in{p}": x for p, x in enumerate(inputs)}, heads,
                                    {f"in{p}" for p in aux_positions})

    pieces, shapes, origins, values, where = [], [], [], {}, {}
    for w in range(k):
        ws = []
        for p, (x, region) in enumerate(zip(inputs, s.input_regions[w])):
            if region is None:      # not read (BatchNorm's gamma under fix_gamma): passed whole
                region = Region(tuple((0, n - 1) for n in x.shape), tuple((0, 0) for _ in x.shape))
            assert not any(map(any, region.pad)), (s, w, p)
            name = f"in{p}_w{w}"
            values[name], where[name] = x[region.slices()], (p, region)
            ws.append(mx.sym.var(name))
        pieces.append(ws)
        shapes.append([where[v.name][1].shape for v in ws])
        origins.append([tuple(lo for lo, _ in where[v.name][1].bounds) for v in ws])
    outs = registry.expansion(op)(pieces, shapes, typed_attrs(type(desc.attrs), attrs, op), _allreduce, origins)
    group = mx.sym.Group([o for worker in outs for o in worker[:len(out_shapes)]])
    aux_names = set(group.list_auxiliary_states())
    assert {n for n in aux_names if n in values} <= {n for n in values if where[n][0] in aux_positions}
    piece_heads = []
    for w in range(k):
        for o, placement in enumerate(s.outputs):
            replicated = isinstance(placement, Replicate)
            h = heads[o] if replicated else heads[o][s.output_regions[w][o].slices()]
            piece_heads.append(h if not replicated or w == 0 else np.zeros_like(h))
    got, grads = _run(group, values, piece_heads, aux_names)
    n = len(out_shapes)
    for o in range(n):
        parts = [got[n * w + o] for w in range(k)]
        if isinstance(s.outputs[o], Replicate):
            for part in parts:
                np.testing.assert_allclose(part, expected[o], rtol=1e-4, atol=1e-5, err_msg=f"{s}: output {o}")
        else:
            np.testing.assert_allclose(combine(s, o, parts), expected[o], rtol=1e-4, atol=1e-5,
                                       err_msg=f"{s}: output {o}")
    for p, x in enumerate(inputs):
        if p in aux_positions:
            continue
        g = np.zeros(x.shape)
        for name, (q, region) in where.items():
            if q == p and name in grads:
                g[region.slices()] += grads[name]
        np.testing.assert_allclose(g, expected_grads[f"in{p}"], rtol=1e-3, atol=1e-4 * (1 + np.abs(g).max()),
                                   err_msg=f"{s}: gradient of input {p}")
