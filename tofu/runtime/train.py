"""Stage 5 of the pipeline: a partitioned graph bound on k devices, trained, and measured.

Input: a :class:`~tofu.rewrite.PartitionedGraph` (or the unpartitioned model, as one device), the whole
values of its variables. Output: a :class:`Trainer` that runs training steps (forward, MXNet's derived
backward, SGD with momentum on each device's own shards) and reports the bytes of every ``_CrossDeviceCopy``
the bound executor runs (:func:`measure_copies`).

The executor is bound with ``group2ctx`` mapping ``dev{i}`` to ``cpu(i)`` (or ``gpu(i)``). Data and labels get
no gradient; parameters ``write``; auxiliary states are MXNet's. Every argument is float32 (MXNet's default), or
float64 with ``dtype=np.float64`` on a symbol made float64 by :func:`float64_symbol` (``--check``'s second
opinion, tofu.runtime.run). MXNet's log lines printed while binding and running (``MXNET_SUBGRAPH_BACKEND=NONE
is detected`` at every bind) are kept from the terminal (:func:`tofu.graph.mxnet_log.quiet`).
"""
from __future__ import annotations

import faulthandler
import functools
import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import mxnet as mx
import numpy as np
from mxnet.ndarray.ndarray import _DTYPE_MX_TO_NP

from tofu.errors import BindError
from tofu.graph.ir import Graph, Role
from tofu.graph.mxnet_log import quiet
from tofu.graph.single_op import first_line
from tofu.rewrite.apply_plan import HeadPiece, PartitionedGraph, ShardVar, gather_values, shard_values
from tofu.runtime.replicas import Exchange, Shard, replicate

# A crash inside MXNet (a segfault in a kernel or a bind) while quiet() holds stderr would die unseen: Python's
# fault handler writes to a copy of the real stderr, says which signal killed the process, then passes the signal
# on to MXNet's own handler (whose message goes wherever stderr points then)
_CRASH_LOG = os.fdopen(os.dup(2), "w")
faulthandler.enable(file=_CRASH_LOG)


def contexts(workers: int, kind: str = "cpu") -> list[mx.Context]:
    return [mx.gpu(i) if kind == "gpu" else mx.cpu(i) for i in range(workers)]


def whole_graph(graph: Graph, symbol: mx.sym.Symbol) -> PartitionedGraph:
    """The unpartitioned model as a one-device :class:`PartitionedGraph` (variables under their own names)."""
    variables = tuple(ShardVar(t.name, t.name, 0, tuple((0, n) for n in t.shape), t.role)
                      for t in graph.tensors if t.producer is None)
    heads = tuple(HeadPiece(graph.tensors[t].name, 0, tuple((0, n) for n in graph.tensors[t].shape), i)
                  for i, t in enumerate(graph.heads))
    return PartitionedGraph(symbol, 1, variables, heads)


def float64_symbol(symbol: mx.sym.Symbol) -> mx.sym.Symbol:
    """``symbol`` with every float32 it names made float64: the ``dtype`` of the ops that create or type a value
    by a parameter, given (the zero shards of a bias that the rewrite adds, Cast) or left at MXNet's default
    float32 (one_hot, which the softmax loss's gradient reads, Embedding's weight, arange), and the type its
    variables declare (``__dtype__``). Bound with every argument float64 (``Trainer(..., dtype=np.float64)``), the
    whole computation runs in float64; an op without a float64 kernel makes the bind or the first pass raise."""
    doc = json.loads(symbol.tojson())
    for node in doc["nodes"]:
        attrs = node.setdefault("attrs", {})
        if attrs.get("dtype", _float32_by_default(node["op"])) == "float32":
            attrs["dtype"] = "float64"
        if attrs.get("__dtype__") == "0":         # a variable's declared type, as mshadow's flag: 0 float32, 1 float64
            attrs["__dtype__"] = "1"
    return mx.sym.load_json(json.dumps(doc))


_INTEGER_FLAGS = frozenset(mx.sym.var("v", dtype=t).attr("__dtype__")
                           for t in ("uint8", "int8", "int32", "int64"))
"""mshadow's type flags of the integer types, as a variable's ``__dtype__`` attribute writes them."""


@functools.lru_cache(maxsize=None)
def _float32_by_default(op: str) -> str | None:
    """``"float32"`` if MXNet's operator ``op`` has a ``dtype`` parameter whose default is float32, else None."""
    from mxnet.operator import get_operator_arguments

    if op == "null":
        return None
    try:
        args = get_operator_arguments(op)
    except mx.base.MXNetError:           # not a registered operator: nothing to default
        return None
    return next(("float32" for name, kind in zip(args.names, args.types)
                 if name == "dtype" and kind.replace('"', "'").endswith("default='float32'")), None)


@dataclass(frozen=True)
class Copy:
    """One ``_CrossDeviceCopy`` of the bound executor."""

    name: str
    shape: tuple[int, ...]
    nbytes: int
    backward: bool


class Trainer:
    """Training steps of a (partitioned) graph: SGD with momentum, each device updating its own shards (a
    parameter's rate scaled by the ``__lr_mult__`` its variable declares, as MXNet's optimizers do).

    ``dtype``: the type every argument of the symbol is bound as, and its momentum's (float32, or float64 for a
    symbol from :func:`float64_symbol`); values given in another type are converted as they are loaded.
    ``replicas``: a parameter shard read whole on another device is bound there as a replica, kept equal by an
    exchange after the backward pass (:mod:`tofu.runtime.replicas`: the same bytes, fewer engine ops); False binds
    the rewriter's symbol as it is (each such read an ``identity`` and MXNet's copies, forward and back)."""

    def __init__(self, pg: PartitionedGraph, values: Mapping[str, np.ndarray], ctx: str = "cpu",
                 lr: float = 0.05, momentum: float = 0.9, dtype=np.float32, replicas: bool = True):
        self.pg, self.lr, self.momentum, self.dtype = pg, lr, momentum, np.dtype(dtype)
        self.contexts = contexts(pg.workers, ctx)
        attrs = pg.symbol.attr_dict()
        declared = {n: a["__dtype__"] for n, a in attrs.items() if "__dtype__" in a}
        integer = {n for n, flag in declared.items() if flag in _INTEGER_FLAGS}     # int32 lengths: kept
        params = [v for v in pg.variables if v.role is Role.PARAM]
        symbol, self.replicas = replicate(pg.symbol, {v.name: v.device for v in params if v.name not in integer}) \
            if replicas and pg.workers > 1 else (pg.symbol, ())
        arguments, aux = set(symbol.list_arguments()), set(symbol.list_auxiliary_states())
        replicated = {r.of for r in self.replicas}
        self.params = [v for v in params if v.name in arguments or v.name in replicated]

        def dtype_of(name: str) -> np.dtype:    # as simple_bind types it: given, else declared, else float32
            if self.dtype != np.float32:
                return self.dtype
            return np.dtype(_DTYPE_MX_TO_NP[int(declared[name])]) if name in declared else np.dtype(np.float32)
        self.lr_mult = {v.name: float(attrs.get(v.name, {}).get("__lr_mult__", 1.0)) for v in self.params}
        self.exchange = Exchange([Shard(v.name, v.device, v.shape, dtype_of(v.name), self.lr_mult[v.name])
                                  for v in self.params if replicas and v.name not in integer], self.replicas,
                                 arguments, self.contexts)
        grad_req = {v.name: "write" if v.role is Role.PARAM else "null" for v in pg.variables if v.name in arguments}
        grad_req.update({r.name: "write" if r.gradient else "null" for r in self.replicas})
        group2ctx = {f"dev{i}": c for i, c in enumerate(self.contexts)}
        if pg.workers == 1:             # one device: no groups to place (group2ctx on a symbol without context
            group2ctx = None            # groups makes MXNet segfault binding gather_nd)
        types = {} if self.dtype == np.float32 else \
            {"type_dict": {n: self.dtype for n in arguments if n not in integer}}
        shapes = {n: s for n, s in pg.shapes().items() if n in arguments or n in aux}
        shapes.update({r.name: self.exchange.weights[r.of].shape for r in self.replicas})
        start = time.perf_counter()
        try:
            with quiet():
                self.executor = symbol.simple_bind(ctx=self.contexts[0], group2ctx=group2ctx, grad_req=grad_req,
                                                   shared_buffer=self.exchange.buffers(arguments), **types,
                                                   **shapes)
        except (mx.base.MXNetError, RuntimeError) as e:     # simple_bind raises RuntimeError from MXNet's error
            cause = e if isinstance(e, mx.base.MXNetError) else e.__context__
            if not isinstance(cause, mx.base.MXNetError):
                raise
            raise BindError(f"the graph on {pg.workers} context(s) in {self.dtype.name}", first_line(cause)) from None
        self.bind_seconds = time.perf_counter() - start
        self._weights = {v.name: self.exchange.weights[v.name] if v.name in self.exchange else
                         self.executor.arg_dict[v.name] for v in self.params}
        self._grads = {v.name: self.exchange.grads[v.name] if v.name in self.exchange else
                       self.executor.grad_dict[v.name] for v in self.params}
        self.moms = {v.name: self.exchange.moms[v.name] if v.name in self.exchange else
                     mx.nd.zeros(v.shape, ctx=self.contexts[v.device], dtype=self.dtype) for v in self.params}
        self._unread = {v.name: np.zeros(v.shape, dtype=self.dtype) for v in pg.unread}    # held here, unchanged
        self.load(values)
        self.step_seconds: list[float] = []

    def load(self, values: Mapping[str, np.ndarray]) -> None:
        """Sets every variable (parameters, auxiliary states, data, labels) from the whole tensors, and the
        auxiliary states the partitioned graph adds (an expansion's constant statistics) to zero."""
        arrays = {**self.executor.arg_dict, **self.executor.aux_dict, **self._weights}
        shards = shard_values(self.pg, values)
        for name, value in shards.items():
            arrays[name][:] = value
        for v in self.pg.unread:
            if v.tensor in values:
                self._unread[v.name][:] = values[v.tensor][tuple(slice(a, b) for a, b in v.box)]
        for name, array in self.executor.aux_dict.items():
            if name not in shards:
                array[:] = 0
        self.exchange.broadcast()

    def feed(self, batch: Mapping[str, np.ndarray]) -> None:
        """Sets the data and labels (whole tensors by name) on every device."""
        for v in self.pg.variables:
            if v.tensor in batch:
                self.executor.arg_dict[v.name][:] = batch[v.tensor][tuple(slice(a, b) for a, b in v.box)]

    def forward_backward(self) -> dict[str, np.ndarray]:
        """One forward and backward pass; returns the graph outputs, assembled."""
        with quiet():
            outs = self.executor.forward(is_train=True)
            self.executor.backward()
            self.exchange.reduce()
            return self._assemble([o.asnumpy() for o in outs])

    def outputs(self) -> dict[str, np.ndarray]:
        """The graph outputs of the last forward pass, assembled."""
        return self._assemble([o.asnumpy() for o in self.executor.outputs])

    def step(self, batch: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """One training step (forward, backward, update); returns the graph outputs before the update."""
        if batch:
            self.feed(batch)
        start = time.perf_counter()
        with quiet():
            outs = self.executor.forward(is_train=True)
            self.executor.backward()
            self.exchange.reduce()
            self._update()
            mx.nd.waitall()
            self.step_seconds.append(time.perf_counter() - start)
            return self._assemble([o.asnumpy() for o in outs])

    def update(self) -> None:
        """The SGD-momentum update of every parameter from the gradients of the last :meth:`forward_backward`
        (with it, one :meth:`step`, untimed)."""
        with quiet():
            self._update()

    def _update(self, rescale_grad: float = 1.0) -> None:
        """Every shard updated on its device, then copied to its replicas."""
        self.exchange.update(self.lr, self.momentum, rescale_grad)
        for v in self.params:
            if v.name not in self.exchange:
                w = self._weights[v.name]
                mx.nd.sgd_mom_update(w, self._grads[v.name], self.moms[v.name], lr=self.lr * self.lr_mult[v.name],
                                     momentum=self.momentum, rescale_grad=rescale_grad, out=w)
        self.exchange.broadcast()

    def _assemble(self, outs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        full: dict[str, np.ndarray] = {}
        for h in self.pg.heads:
            end = tuple(b for _, b in h.box)
            if h.tensor not in full:
                shape = tuple(max(b for p in self.pg.heads if p.tensor == h.tensor for _, b in [p.box[d]])
                              for d in range(len(end)))
                full[h.tensor] = np.zeros(shape, dtype=outs[h.output].dtype)
            full[h.tensor][tuple(slice(a, b) for a, b in h.box)] = outs[h.output]
        return full

    def gradients(self) -> dict[str, np.ndarray]:
        """The whole gradient of every parameter, from its shards (zero where no op reads a piece)."""
        return self._gather({**{v.name: self._grads[v.name].asnumpy() for v in self.params},
                             **{n: np.zeros_like(a) for n, a in self._unread.items()}})

    def parameters(self, roles: tuple[Role, ...] = (Role.PARAM,)) -> dict[str, np.ndarray]:
        """The whole value of every parameter (and with ``roles``, auxiliary state the graph reads), from its
        shards."""
        arrays = {**self.executor.arg_dict, **self.executor.aux_dict, **self._weights}
        unread = self._unread if Role.PARAM in roles else {}
        return self._gather({**{v.name: arrays[v.name].asnumpy() for v in self.pg.variables if v.role in roles},
                             **unread})

    def momentum_values(self) -> dict[str, np.ndarray]:
        """The SGD momentum of every parameter the graph updates, whole, from its shards (zero where no op reads a
        piece)."""
        return self._gather({**{name: mom.asnumpy() for name, mom in self.moms.items()},
                             **{n: np.zeros_like(a) for n, a in self._unread.items()}})

    def load_momentum(self, momentum: Mapping[str, np.ndarray]) -> None:
        """Sets the SGD momentum of the parameters ``momentum`` names from whole tensors (a resumed run's optimizer
        state, or a partitioned run's for one device; a parameter the partitioned graph never reads, BatchNorm's
        gamma under fix_gamma, has none there and keeps its own)."""
        for v in self.params:
            if v.tensor in momentum:
                self.moms[v.name][:] = momentum[v.tensor][tuple(slice(a, b) for a, b in v.box)]

    def _gather(self, shards: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return gather_values(self.pg, shards)

    def copies(self) -> tuple[Copy, ...]:
        """Every cross-device copy of one iteration: the bound executor's in one forward and backward pass (see
        :func:`measure_copies`), then the replicas' exchange (:mod:`tofu.runtime.replicas`: each gradient sent
        back and summed, each shard's weights sent to its replicas; no update between, so the weights stay)."""
        found = measure_copies(self.executor)
        with quiet():
            self.exchange.reduce()
            self.exchange.broadcast()
        return found + tuple(Copy(s.name, s.shape, s.nbytes, s.backward) for s in self.exchange.sent)


# --------------------------------------------------------------------------------------- copy counting

_COPY_OUTPUT = re.compile(r"_\d+_copy_output$")     # how MXNet names the outputs of the copies it inserts


def measure_copies(executor) -> tuple[Copy, ...]:
    """Runs one forward (training mode) and backward pass of ``executor`` and returns every
    ``_CrossDeviceCopy`` it executed, with the bytes of the array it produced, in execution order.

    MXNet names the copies it inserts ``{entry}_{index}_copy``; its monitor callback reports every op's output
    array as it is computed, so the sizes are those of the arrays that crossed, not inferred from names.
    """
    import ctypes

    seen: list[tuple[str, tuple[int, ...], int]] = []

    def record(name, handle):
        name = name.decode() if isinstance(name, bytes) else name
        if _COPY_OUTPUT.search(name):
            array = mx.nd.NDArray(ctypes.cast(handle, mx.base.NDArrayHandle), writable=False)
            seen.append((name[:-len("_output")], tuple(array.shape), array.size * np.dtype(array.dtype).itemsize))

    executor.set_monitor_callback(record, monitor_all=False)
    try:
        with quiet():
            executor.forward(is_train=True)
            mx.nd.waitall()
            forward = len(seen)
            executor.backward()
            mx.nd.waitall()
    finally:
        executor.set_monitor_callback(lambda name, handle: None, monitor_all=False)
    return tuple(Copy(n, shape, nbytes, i >= forward) for i, (n, shape, nbytes) in enumerate(seen))
