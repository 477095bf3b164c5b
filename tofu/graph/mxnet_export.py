"""The IR back to MXNet: :class:`~tofu.graph.ir.Graph` -> the unpartitioned forward Symbol.

Input: a Graph. Output: an ``mx.sym.Symbol`` with one node per op (its parsed attributes written back as
MXNet's strings) and one variable per tensor without a producer, under the tensors' own names (a type other
than float32 and a learning-rate multiplier other than 1 declared on it); its outputs are the graph's heads.
What one device runs, as the reference of a partitioned run.
"""
from __future__ import annotations

import json

import mxnet as mx

from tofu.graph.ir import Graph


def export_symbol(graph: Graph) -> mx.sym.Symbol:
    nodes, entry = [], {}
    for t in graph.tensors:
        if t.producer is None:
            entry[t.id] = (len(nodes), 0)
            nodes.append({"op": "null", "name": t.name, "inputs": [], **_declared(t.dtype, t.lr_mult)})
    arg_nodes = list(range(len(nodes)))
    for node in graph.nodes:
        index = len(nodes)
        nodes.append({"op": node.op, "name": node.name, "attrs": node.attrs.to_mxnet(),
                      "inputs": [[*entry[t], 0] for t in node.inputs]})
        for t in node.outputs:
            entry[t] = (index, graph.tensors[t].output_index)
    doc = {"nodes": nodes, "arg_nodes": arg_nodes, "heads": [[*entry[t], 0] for t in graph.heads],
           "attrs": {"mxnet_version": ["int", 10901]}}
    return mx.sym.load_json(json.dumps(doc))


def _declared(dtype: str, lr_mult: float) -> dict:
    """A variable's declared type (``__dtype__``, as mshadow's type flag) unless float32, MXNet's default, and its
    learning-rate multiplier (``__lr_mult__``) unless 1."""
    attrs = {} if dtype == "float32" else {"__dtype__": mx.sym.var("v", dtype=dtype).attr("__dtype__")}
    if lr_mult != 1.0:
        attrs["__lr_mult__"] = repr(lr_mult)
    return {"attrs": attrs} if attrs else {}
