"""TDL descriptions of the resizing and padding family: UpSampling (nearest), Pad (constant, edge, reflect).

Each output element reads input elements at indices that are affine in the output's, or floor divisions of
them: nearest upsampling by ``s`` reads ``y // s``; padding reads ``y - before``, with the border rule of its
mode written as selections on the index (constant: the fill value outside the tensor).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tofu.errors import TDLError
from tofu.tdl.describe import Case, tdl_op
from tofu.tdl.expr import IndexExpr, IndexValue, TensorVar, ValueExpr, ge, lt, where


@dataclass(frozen=True)
class UpSamplingAttrs:
    scale: int
    sample_type: str = "nearest"
    num_args: int = 1


@tdl_op("UpSampling", inputs=("*data",), attrs=UpSamplingAttrs, cases=[
    Case(shapes=((2, 3, 2, 3),), attrs={"scale": 2, "sample_type": "nearest", "num_args": 1}),
    Case(shapes=((1, 2, 3, 2),), attrs={"scale": 3, "sample_type": "nearest", "num_args": 1}),
])
def up_sampling(data: Sequence[TensorVar], attrs: UpSamplingAttrs) -> Callable:
    """out[n, c, y, x] = data[n, c, y // scale, x // scale]  (nearest, one input)."""
    if attrs.sample_type != "nearest" or len(data) != 1:
        raise TDLError(f"UpSampling: only nearest sampling of one input is described, got "
                       f"sample_type={attrs.sample_type} with {len(data)} inputs")
    (x,) = data
    if x.ndim != 4:
        raise TDLError(f"UpSampling: data of rank {x.ndim}; MXNet upsamples NCHW")
    s = attrs.scale
    return lambda n, c, y, w: x[n, c, y // s, w // s]


@dataclass(frozen=True)
class PadAttrs:
    pad_width: tuple[int, ...]
    mode: str = "constant"          # MXNet requires it
    constant_value: float = 0.0


@tdl_op("Pad", inputs=("data",), attrs=PadAttrs, cases=[
    Case(shapes=((2, 3, 4, 4),), attrs={"pad_width": (0, 0, 0, 0, 1, 1, 2, 2), "mode": "constant",
                                        "constant_value": 1.5}),
    Case(shapes=((2, 2, 4, 3),), attrs={"pad_width": (0, 0, 0, 0, 2, 0, 1, 2), "mode": "edge"}),
    Case(shapes=((2, 2, 4, 4),), attrs={"pad_width": (0, 0, 0, 0, 1, 1, 2, 1), "mode": "reflect"}),
    Case(shapes=((1, 2, 2, 3, 2),), attrs={"pad_width": (0, 0, 0, 0, 1, 1, 0, 1, 1, 0), "mode": "constant"}),
])
def pad(data: TensorVar, attrs: PadAttrs) -> Callable:
    """out[n, c, y..] = data[n, c, src(y - before)..]: constant reads ``constant_value`` outside the tensor;
    edge repeats the border element (src = clip); reflect mirrors about it (src = -i before, 2(H - 1) - i
    after)."""
    widths = attrs.pad_width
    if data.ndim not in (4, 5) or len(widths) != 2 * data.ndim or any(widths[:4]):
        raise TDLError(f"Pad: pad_width {widths} for data {data.shape}: MXNet pads 4-D or 5-D data along its "
                       f"spatial dims only")
    before = widths[4::2]
    if attrs.mode == "constant":
        return lambda n, c, *y: data.at((n, c, *(i - b for i, b in zip(y, before))), fill=attrs.constant_value)
    if attrs.mode not in ("edge", "reflect"):
        raise TDLError(f"Pad: mode '{attrs.mode}' is not described (constant, edge, reflect)")
    extents = data.shape[2:]

    def sources(i: IndexExpr, b: int, n: int) -> tuple[IndexExpr, IndexExpr, IndexExpr]:
        """The input index before, inside and after the tensor's extent ``n``."""
        if attrs.mode == "edge":
            return 0 * i, i - b, 0 * i + (n - 1)
        return b - i, i - b, 2 * (n - 1) + b - i

    def read(y, chosen: tuple[IndexExpr, ...]) -> ValueExpr:
        d = len(chosen)
        if d == len(y) - 2:
            return data.at((y[0], y[1], *chosen), fill=0.0)
        i, b, n = y[2 + d], before[d], extents[d]
        lo, mid, hi = sources(i, b, n)
        return where(lt(IndexValue(i), b), read(y, (*chosen, lo)),
                     where(ge(IndexValue(i), b + n), read(y, (*chosen, hi)), read(y, (*chosen, mid))))
    return lambda *y: read(y, ())
