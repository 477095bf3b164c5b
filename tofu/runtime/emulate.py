"""Op-by-op emulation of one cut of a plan on k MXNet contexts.

Input: a Graph, one :class:`~tofu.search.recursive.CutStep` (the strategy chosen for every op), input arrays.
Output: every tensor's value, assembled from the workers' pieces.

Every op runs as the cut says: each worker gathers its input regions from the assembled tensors, runs MXNet's
kernel on them with the shard's attributes on its own context ``cpu(w)`` (or ``gpu(w)``), and the pieces
are concatenated or reduced. Ops whose strategy exchanges statistics run their declared expansion with the
statistics all-reduced; merged element-wise ops run on the slices of their tensors. This checks a plan's
numbers kernel by kernel before the rewriter turns it into one partitioned symbol (which will also measure the
bytes MXNet copies). The forward pass only; ops run in training mode (BatchNorm's batch statistics).
"""
from __future__ import annotations

from collections.abc import Mapping

import mxnet as mx
import numpy as np

from tofu import registry
from tofu.analysis.shard import combine, run_shard, shard_call
from tofu.analysis.strategies import PartitionStrategy, Replicate
from tofu.graph.ir import Graph, Node
from tofu.graph.single_op import run_op
from tofu.search.recursive import CutStep
from tofu.tdl.describe import describe, typed_attrs


def emulate_cut(graph: Graph, step: CutStep, inputs: Mapping[str, np.ndarray],
                contexts: list[mx.Context] | None = None) -> dict[int, np.ndarray]:
    """Runs the forward graph with every op partitioned as ``step`` chose; returns tensor id -> value.

    Args:
        graph: the forward graph.
        step: a cut of ``graph`` as it is (the first step of a plan).
        inputs: every variable's value by name (data, labels, parameters, auxiliary states).
        contexts: one MXNet context per worker (default cpu(0) .. cpu(k-1)).
    """
    k = step.factor
    contexts = contexts or [mx.cpu(w) for w in range(k)]
    values = {t.id: np.asarray(inputs[t.name], dtype=np.float32) for t in graph.tensors if t.producer is None}
    for node in graph.nodes:
        s = step.strategies[node.id]
        args = [values[t] for t in node.inputs]
        if s is None:
            outs = _elementwise(node, args, step.tensor_dims[node.outputs[0]], k, contexts)
        elif s.exchanges:
            outs = _expansion(graph, node, s, args, k)
        else:
            desc = describe(node.op, node.attrs, [a.shape for a in args], [graph.tensors[t].shape for t in node.outputs])
            pieces = []
            for w in range(k):
                call = shard_call(node.op, node.attrs, s, w, desc)
                pieces.append(run_shard(call, s, w, lambda a, xs, c=contexts[w]: run_op(node.op, a, xs, True, c),
                                        args))
            outs = [pieces[0][o] if isinstance(s.outputs[o], Replicate) else combine(s, o, [p[o] for p in pieces])
                    for o in range(len(node.outputs))]
        for t, v in zip(node.outputs, outs):
            values[t] = v
    return values


def _elementwise(node: Node, args, d: int | None, k: int, contexts) -> list[np.ndarray]:
    if d is None:
        return run_op(node.op, node.attrs, args, True, contexts[0])
    parts = [run_op(node.op, node.attrs, [piece], True, contexts[w])[0]
             for w, piece in enumerate(np.array_split(args[0], k, axis=d))]
    return [np.concatenate(parts, axis=d)]


def _expansion(graph: Graph, node: Node, s: PartitionStrategy, args, k: int) -> list[np.ndarray]:
    """The op's declared expansion over the workers' pieces, statistics all-reduced (add_n, or max)."""
    feed, pieces, shapes = {}, [], []
    for w in range(k):
        ws, wshapes = [], []
        for i, region in enumerate(s.input_regions[w]):
            name = f"w{w}_in{i}"
            feed[name] = args[i][region.slices()]
            ws.append(mx.sym.var(name))
            wshapes.append(region.shape)
        pieces.append(ws)
        shapes.append(wshapes)
    desc = describe(node.op, node.attrs, [a.shape for a in args], [graph.tensors[t].shape for t in node.outputs])
    outs = registry.expansion(node.op)(pieces, shapes, typed_attrs(type(desc.attrs), node.attrs, node.op),
                                       _allreduce)
    n_out = len(node.outputs)
    group = mx.sym.Group([o for worker in outs for o in worker[:n_out]])
    exe = group.bind(mx.cpu(), {n: mx.nd.array(v) for n, v in feed.items()}, grad_req="null")
    got = [o.asnumpy() for o in exe.forward(is_train=True)]
    per_worker = [got[n_out * w:n_out * (w + 1)] for w in range(k)]
    return [per_worker[0][o] if isinstance(s.outputs[o], Replicate) else combine(s, o, [p[o] for p in per_worker])
            for o in range(n_out)]


def _allreduce(parts, reducer: str = "sum"):
    """One symbol per worker, each the ``reducer`` ("sum" or "max") of every worker's partial statistic."""
    if reducer == "sum":
        combined = mx.sym.add_n(*parts)
    elif reducer == "max":
        combined = mx.sym.max(mx.sym.stack(*parts, axis=0), axis=0)
    else:
        raise ValueError(f"unknown all-reduce '{reducer}'")
    return [combined] * len(parts)


def reference_forward(graph_symbol: mx.sym.Symbol, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The unpartitioned forward pass on one context, in training mode (for comparison)."""
    args = {n: mx.nd.array(inputs[n]) for n in graph_symbol.list_arguments()}
    aux = {n: mx.nd.array(inputs[n]) for n in graph_symbol.list_auxiliary_states()}
    exe = graph_symbol.bind(mx.cpu(), args, aux_states=aux, grad_req="null")
    return [o.asnumpy() for o in exe.forward(is_train=True)]
