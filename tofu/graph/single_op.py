"""One MXNet operator on its own: a one-node symbol, its output shapes, and its forward run on numpy arrays.

Used to ask MXNet (the authority on shapes and values) about a single operator: how many outputs a node
shows, what a description's output shapes are, and what the real kernel computes (the reference of the TDL
conformance and strategy tests); and to infer the shapes of a whole graph at import.

Shape inference runs in a child process (:class:`ShapeProbe`): MXNet's C++ shape functions divide by
attributes (``num_group``) and index arrays by JSON fields without checking, so a bad attribute candidate or
a malformed graph raises SIGFPE or SIGSEGV. In the child such a crash costs one answer, reported as MXNet
rejecting the request, and the next request forks a fresh child.
"""
from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import os
import signal
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import mxnet as mx
import numpy as np

from tofu.errors import GraphImportError, InputShapeError, TofuError
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


def json_op_function(op: str) -> Callable[..., mx.sym.Symbol]:
    """A symbol function for an operator that has none for legacy symbols (the numpy interface's _npi_tanh,
    _np_reshape, ...: their functions take numpy symbols only): the op node is read from JSON (:func:`op_symbol`),
    its variables bound to the inputs, and the attributes of the enclosing ``AttrScope`` (a device group) set on
    it, as a symbol function does."""
    def build(*args, name: str, **attrs):
        template = op_symbol(op, {k: str(v) for k, v in attrs.items()}, len(args))
        sym = template(name=name, **{f"in{i}": a for i, a in enumerate(args)})
        scope = mx.attribute.AttrScope._current.value.get(None)
        if scope:
            sym._set_attr(**scope)
        return sym
    return build


def num_visible_outputs(op: str, attrs: Attrs | Mapping[str, str], arity: int) -> int:
    return len(op_symbol(op, attrs, arity).list_outputs())


def infer_op_shapes(op: str, attrs: Attrs | Mapping[str, str], input_shapes: Sequence[Shape]) -> list[Shape]:
    """MXNet's shapes of every visible output of ``op`` applied to inputs of ``input_shapes`` (cached).

    Raises:
        InputShapeError: MXNet rejects the attributes or shapes, or its shape inference crashed on them.
    """
    raw = attrs.to_mxnet() if isinstance(attrs, Attrs) else dict(attrs)
    answer = _infer(op, tuple(sorted(raw.items())), tuple(tuple(int(d) for d in s) for s in input_shapes))
    if isinstance(answer, str):
        raise InputShapeError(answer)
    return list(answer)


@lru_cache(maxsize=16384)
def _infer(op: str, items: tuple, input_shapes: tuple) -> tuple[Shape, ...] | str:
    """The output shapes, or why there are none (rejections are answers too, cached like shapes)."""
    try:
        return _PROBE.ask("op", op, items, input_shapes)
    except ProbeCrash as e:
        return f"{op}: MXNet's shape inference crashed ({e}) on input shapes {list(input_shapes)} with {dict(items)}"
    except TofuError as e:
        return str(e)


@dataclass(frozen=True)
class GraphShapes:
    """MXNet's view of every internal entry of a graph: its name, shape and dtype name, in MXNet's order."""

    names: tuple[str, ...]
    shapes: tuple[Shape, ...]
    dtypes: tuple[str, ...]


def infer_graph_shapes(symbol: mx.sym.Symbol, shapes: Mapping[str, Shape], dtype: str) -> GraphShapes:
    """The shapes and dtypes of every internal entry of ``symbol`` given its inputs' shapes and dtype (an input that
    declares its own type keeps it).

    Raises:
        InputShapeError: MXNet cannot infer them, leaves some unknown, or crashed trying.
    """
    given = ", ".join(f"{k}={','.join(map(str, v))}" for k, v in shapes.items()) or "no shapes"
    request = {k: tuple(int(d) for d in v) for k, v in shapes.items()}
    try:
        return _PROBE.ask("graph", symbol.tojson(), request, dtype)
    except ProbeCrash as e:
        raise InputShapeError(f"MXNet's shape inference crashed ({e}) on the graph with {given}; "
                              "an attribute of some node is out of range") from None
    except TofuError as e:
        raise InputShapeError(f"MXNet cannot infer shapes from {given}: {e}") from None


class ProbeCrash(Exception):
    """The probe's process died answering (the message names the signal)."""


class ShapeProbe:
    """A long-lived child process that answers shape-inference requests over a pipe.

    The child is forked on first use (it shares the loaded MXNet, so it starts in milliseconds) and again
    after it dies; a request that kills it raises :class:`ProbeCrash`. A process forked from the owner gets
    its own child.
    """

    def __init__(self, timeout_s: float = 300.0):
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._owner = -1
        self._proc = None
        self._conn = None

    def ask(self, kind: str, *args):
        """The answer of handler ``kind`` to ``args``, computed in the child.

        Raises:
            TofuError: the handler refused (MXNet rejected the request), with MXNet's reason.
            ProbeCrash: the child died (or hung past the timeout) on this request.
        """
        with self._lock:
            conn = self._connection()
            try:
                conn.send((kind, args))
                if not conn.poll(self._timeout_s):
                    self._stop(kill=True)
                    raise ProbeCrash(f"no answer within {self._timeout_s:.0f} s")
                status, value = conn.recv()
            except (EOFError, OSError):
                raise ProbeCrash(self._stop(kill=False)) from None
        if status == "ok":
            return value
        raise TofuError(value)

    def _connection(self):
        if self._proc is None or self._owner != os.getpid():
            ctx = multiprocessing.get_context("fork")
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(child, parent), name="tofu-shape-probe", daemon=True)
            proc.start()
            child.close()
            self._proc, self._conn, self._owner = proc, parent, os.getpid()
        return self._conn

    def _stop(self, kill: bool) -> str:
        """Closes the pipe and reaps the child; returns how it ended (``SIGFPE``, ``exit status 1``)."""
        proc, self._proc = self._proc, None
        self._conn.close()
        if kill:
            proc.kill()
        proc.join(5)
        code = proc.exitcode
        if code is not None and code < 0:
            try:
                return signal.Signals(-code).name
            except ValueError:
                return f"signal {-code}"
        return f"exit status {code}"


def _serve(conn, parent_end) -> None:
    """The child's loop: one answer per request until the parent closes the pipe (or dies)."""
    parent_end.close()                                # else the pipe never reports the parent's end
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # Ctrl-C is the parent's to handle
    while True:
        try:
            kind, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply = ("ok", _HANDLERS[kind](*args))
        except TofuError as e:
            reply = ("error", str(e))
        except Exception as e:      # MXNet also raises bare Exception (a tensor over 2^31 elements)
            reply = ("error", first_line(e))
        conn.send(reply)


def _op_shapes_here(op: str, items: tuple, input_shapes: tuple) -> tuple[Shape, ...]:
    sym = op_symbol(op, dict(items), len(input_shapes))
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


def _graph_shapes_here(text: str, shapes: dict, dtype: str) -> GraphShapes:
    internals = mx.sym.load_json(text).get_internals()
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")   # MXNet prints and warns about partial inference; the caller raises
        _, out_shapes, _ = internals.infer_shape(**shapes)
        if out_shapes is None:      # not all inferred: which are, so that the caller names only the others
            _, out_shapes, _ = internals.infer_shape_partial(**shapes)
        declared = {n for n, a in internals.attr_dict().items() if "__dtype__" in a}
        # an input declared with a type keeps it (int32 lengths, indices): the others get ``dtype``
        _, out_types, _ = internals.infer_type(**{k: dtype for k in shapes if k not in declared})
    names = tuple(internals.list_outputs())
    found = tuple(tuple(s) if s is not None else None for s in out_shapes or [None] * len(names))
    if out_types is None or any(t is None for t in out_types):
        # an input given no shape has no type either: the caller names the unknown shapes, the cause
        if all(s and 0 not in s for s in found):
            raise InputShapeError(f"MXNet cannot infer every element type from inputs of type {dtype}")
        out_types = out_types or [None] * len(names)
    return GraphShapes(names, found, tuple(np.dtype(t).name if t is not None else None for t in out_types))


_HANDLERS = {"op": _op_shapes_here, "graph": _graph_shapes_here}
_PROBE = ShapeProbe()


def run_op(op: str, attrs: Attrs | Mapping[str, str], inputs: Sequence[np.ndarray],
           train: bool = False, ctx: mx.Context | None = None) -> list[np.ndarray]:
    """Runs MXNet's forward kernel of ``op`` on float32 copies of ``inputs`` (on ``ctx``, cpu by default); an
    integer array stays integer (an int32-only input: softmax's lengths)."""
    ctx = ctx or mx.cpu()
    sym = op_symbol(op, attrs, len(inputs))
    values = {f"in{i}": mx.nd.array(np.asarray(a), ctx=ctx, dtype=_dtype(np.asarray(a)))
              for i, a in enumerate(inputs)}
    aux_names = sym.list_auxiliary_states()
    args = {k: v for k, v in values.items() if k not in aux_names}
    aux = {k: values[k] for k in aux_names}
    exe = sym.bind(ctx, args=args, aux_states=aux, grad_req="null")
    return [o.asnumpy() for o in exe.forward(is_train=train)]


def _dtype(a: np.ndarray) -> str:
    return str(a.dtype) if np.issubdtype(a.dtype, np.integer) else "float32"


def first_line(e: Exception) -> str:
    """The informative line of an MXNet error (they carry C++ stack traces)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip() and not ln.startswith("Stack trace")]
    for ln in lines:
        if "Error" in ln or "Check failed" in ln:
            return ln[:300]
    return (lines[0] if lines else type(e).__name__)[:300]
