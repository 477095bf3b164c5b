"""TDL descriptions of the range family: tensors whose values are their own index.

``_arange`` (``mx.sym.arange``; ``_npi_arange``, the numpy interface's, without ``repeat``): the value is an
affine function of the (repeated) position, so a split of the output needs no input and no exchange; models use it
for positions and causal masks. ``_linspace`` and
``_eye`` (``_npi_eye``) likewise; ``_contrib_arange_like`` takes its extents from an input's shape.
"""
from __future__ import annotations

from operators_tdl.shape import _ravel
from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)


@dataclass(frozen=True)
class ArangeAttrs:
    start: float
    stop: float | None = None
    step: float = 1.0
    repeat: int = 1
    infer_range: bool = False
    dtype: str = "float32"


@tdl_op("_arange", inputs=(), attrs=ArangeAttrs, cases=[
    Case(shapes=(), attrs={"start": 0, "stop": 5}),
    Case(shapes=(), attrs={"start": 2.5, "stop": 9, "step": 1.5, "repeat": 2}),
    Case(shapes=(), attrs={"start": 4, "stop": -2, "step": -2}),
])
def arange(attrs: ArangeAttrs):
    """out[i] = start + (i // repeat) * step  (no inputs; MXNet sizes out from start, stop, step, repeat)."""
    if attrs.repeat < 1:
        raise TDLError(f"_arange: repeat {attrs.repeat} must be positive")
    return lambda i: IndexValue(i // attrs.repeat) * attrs.step + attrs.start


@tdl_op("_npi_arange", inputs=(), attrs=ArangeAttrs, cases=[
    Case(shapes=(), attrs={"start": 0, "stop": 6}),
    Case(shapes=(), attrs={"start": 2.5, "stop": 8.5, "step": 1.5}),
])
def np_arange(attrs: ArangeAttrs):
    """out[i] = start + i * step  (no inputs; MXNet's numpy interface takes no ``repeat`` but 1)."""
    return arange(attrs)


@dataclass(frozen=True)
class LinspaceAttrs:
    start: float
    stop: float
    num: int
    endpoint: bool = True
    dtype: str = "float32"


@tdl_op("_linspace", inputs=(), attrs=LinspaceAttrs, cases=[
    Case(shapes=(), attrs={"start": 0, "stop": 1, "num": 5}),
    Case(shapes=(), attrs={"start": -2, "stop": 4, "num": 6, "endpoint": False}),
])
def linspace(attrs: LinspaceAttrs):
    """out[i] = start + i * (stop - start) / (num - 1), or / num without the endpoint (no inputs)."""
    if attrs.num < 1:
        raise TDLError(f"_linspace: num {attrs.num} must be positive")
    steps = attrs.num - 1 if attrs.endpoint and attrs.num > 1 else attrs.num
    return lambda i: IndexValue(i) * ((attrs.stop - attrs.start) / steps) + attrs.start


@dataclass(frozen=True)
class EyeAttrs:
    N: int
    M: int | None = 0               # None: the numpy interface's N x N
    k: int = 0
    dtype: str = "float32"


@tdl_op("_eye", inputs=(), attrs=EyeAttrs, aliases=("_npi_eye",), cases=[
    Case(shapes=(), attrs={"N": 4}),
    Case(shapes=(), attrs={"N": 3, "M": 5, "k": 1}),
    Case(shapes=(), attrs={"N": 5, "M": 4, "k": -2}),
])
def eye(attrs: EyeAttrs):
    """out[i, j] = 1 where j - i = k, else 0: an N x M (M = 0: N x N) matrix with ones on diagonal k."""
    return lambda i, j: where(eq(IndexValue(j - i), attrs.k), 1.0, 0.0)


@dataclass(frozen=True)
class ArangeLikeAttrs:
    start: float = 0.0
    step: float = 1.0
    repeat: int = 1
    axis: int | None = None


@tdl_op("_contrib_arange_like", inputs=("data",), attrs=ArangeLikeAttrs, cases=[
    Case(shapes=((2, 3),)),
    Case(shapes=((2, 5, 3),), attrs={"axis": 1, "start": 1.5, "step": 2}),
    Case(shapes=((4, 2),), attrs={"repeat": 2, "step": -1}),
    Case(shapes=((3, 4),), attrs={"axis": -1}),
])
def arange_like(data: TensorVar, attrs: ArangeLikeAttrs):
    """out[o] = start + (p // repeat) * step, p the row-major position of o in data (out shaped like data), or
    out[i] likewise along data's ``axis`` (out of that extent); only data's shape matters: its elements are
    declared read (``uses``) for their positions."""
    if attrs.repeat < 1:
        raise TDLError(f"_contrib_arange_like: repeat {attrs.repeat} must be positive")
    if attrs.axis is None:
        return lambda *o: uses(IndexValue(_ravel(o, data.shape) // attrs.repeat) * attrs.step + attrs.start,
                               data[o])
    if not -data.ndim <= attrs.axis < data.ndim:
        raise TDLError(f"_contrib_arange_like: axis {attrs.axis} is out of range for rank {data.ndim}")
    axis = attrs.axis % data.ndim
    return lambda i: uses(IndexValue(i // attrs.repeat) * attrs.step + attrs.start,
                          data[tuple(i if d == axis else 0 for d in range(data.ndim))])
