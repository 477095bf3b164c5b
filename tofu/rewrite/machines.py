"""Statistics averaged over machines: synchronised BatchNorm for hybrid training (Tofu inside each machine, data
parallel across machines).

When every machine trains the same partitioned graph on its share of the global batch, an op whose batch split
exchanges statistics (BatchNorm in training mode) must see the statistics of the global batch, not of its
machine's rows. Its expansion (the op's ``tdl_expansion``) sums each statistic over the devices that split it
within the machine; :func:`machine_mean` then replaces every such sum S_m by the mean over the M machines,

    mean_m S_m = (sum_m S_m) / M,

so the expansion's division by its machine's count n of reduced elements gives the global statistic
(sum_m S_m) / (M n), every machine holding an equal share of the rows. The op is linear and the same on every
machine, so its gradient is the same mean of the machines' incoming gradients: dL/dS_m = (1/M) sum_m' dL/dY_m'
for the global loss L = sum_m L_m.

In the graph it is one ``Custom`` op (``op_type`` :data:`OP_TYPE`) per device and statistic, named by a key that
is the same on every machine; the runtime supplies the reduction (:func:`join_machines`: MXNet's dist kvstore,
push then pull of the key). The op holds no state but the key.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import mxnet as mx

OP_TYPE = "tofu_machine_mean"

# (reducer, machines): reducer(key, array) is the sum of the array over the machines; set by the runtime that
# joined them
_JOINED: list[tuple[Callable, int] | None] = [None]


def join_machines(reducer: Callable | None, machines: int = 1) -> None:
    """The function that sums an array over the ``machines`` (None: none joined; the op then fails to run)."""
    _JOINED[0] = (reducer, machines) if reducer is not None else None


@dataclass(frozen=True)
class MachineStat:
    """One statistic averaged over the machines: its kvstore key (the forward pass's; the backward pass uses
    :func:`backward_key`), its shape on the device, and whether MXNet runs its backward pass (its input depends
    on a parameter through ops that pass gradients)."""

    key: str
    shape: tuple[int, ...]
    backward: bool

    @property
    def nbytes(self) -> int:
        return 4 * math.prod(self.shape)         # float32, as every statistic of the expansions


def backward_key(key: str) -> str:
    return f"{key}:grad"


def machine_mean(symbol, key: str):
    """``symbol``'s mean over the machines (forward), the machines' gradients averaged likewise (backward)."""
    return mx.sym.Custom(symbol, op_type=OP_TYPE, key=key, name=key)


class _MachineMean(mx.operator.CustomOp):
    def __init__(self, key: str):
        super().__init__()
        self.key = key

    def _mean(self, key: str, x):
        if _JOINED[0] is None:
            raise RuntimeError(f"statistic '{self.key}' is averaged over machines, but no machines are joined")
        reducer, machines = _JOINED[0]
        return reducer(key, x) / machines

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], self._mean(self.key, in_data[0]))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], self._mean(backward_key(self.key), out_grad[0]))


@mx.operator.register(OP_TYPE)
class _MachineMeanProp(mx.operator.CustomOpProp):
    def __init__(self, key: str, **placement):       # MXNet passes the node's other attributes (__ctx_group__)
        super().__init__(need_top_grad=True)
        self.key = key

    def list_arguments(self):
        return ["data"]

    def list_outputs(self):
        return ["output"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def declare_backward_dependency(self, out_grad, in_data, out_data):
        return [out_grad[0]]

    def create_operator(self, ctx, shapes, dtypes):
        return _MachineMean(self.key)
