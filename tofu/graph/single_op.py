"""One MXNet operator on its own: a one-node symbol, its output shapes, and its forward run on numpy arrays.

Used to ask MXNet (the authority on shapes and values) about a single operator: how many outputs a node
shows, what a description's output shapes are, and what the real kernel computes (the reference of the TDL
conformance and strategy tests).
"""
from __future__ import annotations

import contextlib
import io
import json
import warnings
from functools import lru_cache
from collections.abc import Mapping, Sequence

import mxnet as mx
import numpy as np

from tofu.errors import GraphImportError, InputShapeError
from tofu.graph.attrs import Attrs

Shape = tuple[int, ...]


def op_symbol(op: str, attrs: Attrs | Mapping[str, str], arity: int) -> mx.sym.Symbol:
    """A symbol with one ``op`` node whose inputs are variables ``in0 .. in{arity-1}`` (cached)."""
    raw = attrs.to_mxnet() if isinstance(attrs, Attrs) else dict(attrs)
    return _op_symbol(op, tuple(sorted(raw.items())), arity)


@lru_cache(maxsize=4096)
def _op_symbol(op: str, items: tuple, arity: int) -> mx.sym.Symbol:
    raw = dict(items)
    doc = {"nodes": [{"op": "null", "name": f"in{i}", "inputs": []} for i in range(arity)]
           + [{"op": op, "name": "op", "attrs": raw, "inputs": [[i, 0, 0] for i in range(arity)]}],
           "arg_nodes": list(range(arity)), "heads": [[arity, 0, 0]],
           "attrs": {"mxnet_version": ["int", 10901]}}
    try:
        sym = mx.sym.load_json(json.dumps(doc))
    except mx.base.MXNetError as e:
        raise GraphImportError(f"MXNet rejects operator '{op}' with {raw}: {first_line(e)}") from None
    n_out = len(sym.get_internals().list_outputs()) - arity
    return mx.sym.Group([sym.get_internals()[arity + k] for k in range(n_out)]) if n_out > 1 else sym


def num_visible_outputs(op: str, attrs: Attrs | Mapping[str, str], arity: int) -> int:
    return len(op_symbol(op, attrs, arity).list_outputs())


def infer_op_shapes(op: str, attrs: Attrs | Mapping[str, str], input_shapes: Sequence[Shape]) -> list[Shape]:
    """MXNet's shapes of every visible output of ``op`` applied to inputs of ``input_shapes`` (cached)."""
    raw = attrs.to_mxnet() if isinstance(attrs, Attrs) else dict(attrs)
    return list(_infer(op, tuple(sorted(raw.items())), tuple(tuple(int(d) for d in s) for s in input_shapes)))


@lru_cache(maxsize=16384)
def _infer(op: str, items: tuple, input_shapes: tuple) -> tuple[Shape, ...]:
    attrs = dict(items)
    sym = op_symbol(op, attrs, len(input_shapes))
    shapes = {f"in{i}": tuple(s) for i, s in enumerate(input_shapes)}
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, out, _ = sym.infer_shape(**shapes)
    except mx.base.MXNetError as e:
        raise InputShapeError(f"{op}: MXNet rejects input shapes {list(input_shapes)}: {first_line(e)}") from None
    if out is None or any(s is None for s in out):
        raise InputShapeError(f"{op}: MXNet cannot infer the output shapes from {list(input_shapes)}")
    return tuple(tuple(s) for s in out)


def run_op(op: str, attrs: Attrs | Mapping[str, str], inputs: Sequence[np.ndarray],
           train: bool = False, ctx: mx.Context | None = None) -> list[np.ndarray]:
    """Runs MXNet's forward kernel of ``op`` on float32 copies of ``inputs`` (on ``ctx``, cpu by default)."""
    ctx = ctx or mx.cpu()
    sym = op_symbol(op, attrs, len(inputs))
    values = {f"in{i}": mx.nd.array(np.asarray(a), ctx=ctx, dtype="float32") for i, a in enumerate(inputs)}
    aux_names = sym.list_auxiliary_states()
    args = {k: v for k, v in values.items() if k not in aux_names}
    aux = {k: values[k] for k in aux_names}
    exe = sym.bind(ctx, args=args, aux_states=aux, grad_req="null")
    return [o.asnumpy() for o in exe.forward(is_train=train)]


def first_line(e: Exception) -> str:
    """The informative line of an MXNet error (they carry C++ stack traces)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip() and not ln.startswith("Stack trace")]
    for ln in lines:
        if "Error" in ln or "Check failed" in ln:
            return ln[:300]
    return (lines[0] if lines else type(e).__name__)[:300]
