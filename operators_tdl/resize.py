"""TDL descriptions of the resizing and padding family: UpSampling (nearest, bilinear), BilinearResize2D, Pad
(constant, edge, reflect); and the spatial transformer's GridGenerator, BilinearSampler and SpatialTransformer.

Each output element reads input elements at indices that are affine in the output's, or floor divisions of
them: nearest upsampling by ``s`` reads ``y // s``; bilinear upsampling is MXNet's depthwise Deconvolution
(reads ``(y + pad - dy) / s`` where exact); bilinear resizing reads the two rows ``floor(src)`` and
``ceil(src)`` around a source position ``src = num(y) / den`` that is a fraction affine in ``y``, weighted by
``num(y) % den``; padding reads ``y - before``, with the border rule of its mode written as selections on the
index (constant: the fill value outside the tensor).
"""
from __future__ import annotations

import math

import numpy as np

from operators_tdl.conv import DeconvolutionAttrs, deconvolution
from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)


@dataclass(frozen=True)
class UpSamplingAttrs:
    scale: int
    sample_type: str = "nearest"
    num_args: int = 1
    num_filter: int = 0             # bilinear: the deconvolution's filters (and groups), one per channel


@tdl_op("UpSampling", inputs=("*data",), attrs=UpSamplingAttrs, cases=[
    Case(shapes=((2, 3, 2, 3),), attrs={"scale": 2, "sample_type": "nearest", "num_args": 1}),
    Case(shapes=((1, 2, 3, 2),), attrs={"scale": 3, "sample_type": "nearest", "num_args": 1}),
    # bilinear: data and the (C, 1, K, K) weight; channels and output extents divisible by 2 and 4 workers
    Case(shapes=((2, 4, 4, 6), (4, 1, 4, 4)),
         attrs={"scale": 2, "sample_type": "bilinear", "num_filter": 4, "num_args": 1}),
    Case(shapes=((1, 4, 4, 4), (4, 1, 5, 5)),
         attrs={"scale": 3, "sample_type": "bilinear", "num_filter": 4, "num_args": 2}),
])
def up_sampling(data: Sequence[TensorVar], attrs: UpSamplingAttrs) -> Callable:
    """out[n, c, y, x] = data[n, c, y // s, x // s] (nearest, one input); bilinear: sum_{dy, dx} data[n, c,
    (y + p - dy) / s, (x + p - dx) / s] * weight[c, 0, dy, dx] where both divisions are exact and in range,
    K = 2s - s % 2 taps, p = ceil((s - 1) / 2)  (MXNet: Deconvolution, stride s, num_group = num_filter = C)."""
    s = attrs.scale
    if attrs.sample_type == "bilinear":
        if len(data) != 2:
            raise TDLError(f"UpSampling: bilinear sampling reads data and weight, got {len(data)} inputs")
        x, weight = data
        if x.ndim != 4 or attrs.num_filter != x.shape[1]:
            raise TDLError(f"UpSampling: bilinear sampling of data {x.shape} with num_filter={attrs.num_filter}; "
                           f"MXNet upsamples NCHW with one filter per channel")
        taps, pad = 2 * s - s % 2, math.ceil((s - 1) / 2)
        return deconvolution(x, weight, None, DeconvolutionAttrs(
            kernel=(taps, taps), num_filter=attrs.num_filter, stride=(s, s), pad=(pad, pad),
            num_group=attrs.num_filter, no_bias=True))
    if attrs.sample_type != "nearest" or len(data) != 1:
        raise TDLError(f"UpSampling: only nearest sampling of one input and bilinear sampling are described, got "
                       f"sample_type={attrs.sample_type} with {len(data)} inputs")
    (x,) = data
    if x.ndim != 4:
        raise TDLError(f"UpSampling: data of rank {x.ndim}; MXNet upsamples NCHW")
    return lambda n, c, y, w: x[n, c, y // s, w // s]


@dataclass(frozen=True)
class BilinearResize2DAttrs:
    mode: str = "size"              # height, width and the scales only set the output shape (MXNet infers it)
    align_corners: bool = True


# the modes whose output shape MXNet derives from data alone; "like" reads a second input's shape
_RESIZE_MODES = ("size", "odd_scale", "to_even_down", "to_even_up", "to_odd_down", "to_odd_up")


def _source(y: Var, n_in: int, n_out: int, align_corners: bool, single_at_zero: bool = True
            ) -> tuple[IndexExpr, int]:
    """The source position of output index ``y`` as a reduced fraction ``(num, den)``: ``num / den`` is
    ``y (n_in - 1) / (n_out - 1)`` with aligned corners, else ``(y + 1/2) n_in / n_out - 1/2``; it is ``y``
    when the extent is kept and 0 when the output has one element (MXNet's ratio 0; OpenCV, without
    ``single_at_zero``, keeps the half-pixel centre)."""
    if n_in == n_out:
        return y, 1
    if n_out == 1 and (single_at_zero or align_corners):
        return y * 0, 1
    coeff, const, den = (n_in - 1, 0, n_out - 1) if align_corners else (2 * n_in, n_in - n_out, 2 * n_out)
    g = math.gcd(coeff, const, den)
    return y * (coeff // g) + const // g, den // g


def _taps(y: Var, n_in: int, n_out: int, align_corners: bool, single_at_zero: bool = True
          ) -> list[tuple[IndexExpr, ValueExpr | None]]:
    """The input indices one output index reads along one axis, with their weights (None: weight 1):
    ``floor(src)`` and ``ceil(src)``, weighted ``1 - f`` and ``f`` for the fraction ``f`` of ``src``, where
    ``src`` is clipped to ``[0, n_in - 1]`` (a read past the tensor then weighs 0)."""
    num, den = _source(y, n_in, n_out, align_corners, single_at_zero)
    if den == 1:
        return [(num, None)]
    frac = IndexValue(num % den) / float(den)
    if not align_corners and n_in < n_out:       # upsampling reaches past both borders: src is clipped
        frac = where(lt(IndexValue(num), 0), 1.0, where(ge(IndexValue(num), (n_in - 1) * den), 0.0, frac))
    return [(num // den, 1.0 - frac), ((num + den - 1) // den, frac)]


def _bilinear(read: Callable[[IndexExpr, IndexExpr], ValueExpr], y: Var, x: Var, in_hw: tuple[int, int],
              out_hw: tuple[int, int], align_corners: bool, single_at_zero: bool = True) -> ValueExpr:
    """sum_{a, b} wy_a(y) wx_b(x) read(iy_a(y), ix_b(x)) over the taps of ``y`` (rows) and ``x`` (columns):
    ``read(row, column)`` reads the input at those spatial indices, so the layout stays with the caller."""
    total = None
    for iy, wy in _taps(y, in_hw[0], out_hw[0], align_corners, single_at_zero):
        for ix, wx in _taps(x, in_hw[1], out_hw[1], align_corners, single_at_zero):
            term = read(iy, ix)
            for weight in (wy, wx):
                term = term if weight is None else weight * term
            total = term if total is None else total + term
    return total


@tdl_op("_contrib_BilinearResize2D", inputs=("data", "like?"), attrs=BilinearResize2DAttrs, cases=[
    # aligned corners: rows up by 3 (src = y / 3), columns down by 2 (src = 2 x, one tap)
    Case(shapes=((1, 4, 6, 7),), attrs={"height": 16, "width": 4}),
    # half-pixel centres, up by 2: src = (2 y - 1) / 4 is clipped at both borders
    Case(shapes=((1, 4, 4, 6),), attrs={"height": 8, "width": 12, "align_corners": False}),
    # half-pixel centres, down by 2: src = 2 y + 1/2
    Case(shapes=((2, 4, 16, 16),), attrs={"height": 8, "width": 8, "align_corners": False}),
    # a mode that derives the output shape: odd extents (5 - 1) * 2 + 1
    Case(shapes=((1, 4, 5, 5),), attrs={"mode": "odd_scale", "scale_height": 2.0, "scale_width": 2.0}),
])
def bilinear_resize_2d(data: TensorVar, like: TensorVar | None, attrs: BilinearResize2DAttrs, *,
                       out_shapes: Sequence[tuple[int, ...]]) -> Callable:
    """out[n, c, y, x] = sum_{a, b} wy_a(y) wx_b(x) data[n, c, iy_a(y), ix_b(x)]: the source position
    src = num(y) / den (affine num: y (H - 1) / (OH - 1) with aligned corners, else (y + 1/2) H / OH - 1/2,
    clipped to [0, H - 1]) reads iy = floor(src), ceil(src) with weights 1 - f, f, f = (num % den) / den."""
    if attrs.mode not in _RESIZE_MODES or like is not None:
        raise TDLError(f"_contrib_BilinearResize2D: mode '{attrs.mode}' is not described ({', '.join(_RESIZE_MODES)})")
    if data.ndim != 4:
        raise TDLError(f"_contrib_BilinearResize2D: data of rank {data.ndim}; MXNet resizes NCHW")
    in_hw, out_hw = data.shape[2:], out_shapes[0][2:]
    return lambda n, c, y, x: _bilinear(lambda iy, ix: data.at((n, c, iy, ix), fill=0.0), y, x, in_hw, out_hw,
                                        attrs.align_corners)


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


@dataclass(frozen=True)
class CropAttrs:
    num_args: int
    offset: tuple[int, ...] = (0, 0)
    h_w: tuple[int, ...] = (0, 0)   # with one input; with two, the second input's spatial shape (MXNet infers it)
    center_crop: bool = False


@tdl_op("Crop", inputs=("*data",), attrs=CropAttrs, cases=[
    Case(shapes=((2, 4, 7, 8),), attrs={"num_args": 1, "h_w": (4, 6), "offset": (1, 2)}),
    # centred: the offset is floor((H - h) / 2) = 1 rows, floor((W - w) / 2) = 1 columns
    Case(shapes=((2, 4, 7, 9),), attrs={"num_args": 1, "h_w": (4, 6), "center_crop": True}),
    # the second input only gives the output's height and width
    Case(shapes=((1, 4, 9, 8), (1, 1, 4, 4)), attrs={"num_args": 2, "offset": (3, 2)}),
    Case(shapes=((2, 4, 8, 9), (1, 2, 4, 4)), attrs={"num_args": 2, "center_crop": True}),
])
def crop(data: Sequence[TensorVar], attrs: CropAttrs, *, out_shapes: Sequence[tuple[int, ...]]) -> Callable:
    """out[n, c, y, x] = data[n, c, y + oy, x + ox] for the output's (h, w) (``h_w``, or the second input's
    spatial shape, whose values are never read): (oy, ox) = ``offset``, or floor((H - h) / 2),
    floor((W - w) / 2) with ``center_crop``  (MXNet's legacy Crop, NCHW)."""
    if not 1 <= len(data) <= 2 or data[0].ndim != 4:
        raise TDLError(f"Crop: crops NCHW data, optionally like a second input; got {len(data)} inputs of shapes "
                       f"{tuple(d.shape for d in data)}")
    x = data[0]
    (_, _, height, width), (_, _, out_height, out_width) = x.shape, out_shapes[0]
    if attrs.center_crop:
        oy, ox = (height - out_height) // 2, (width - out_width) // 2
    elif len(attrs.offset) == 2:
        oy, ox = attrs.offset
    else:
        raise TDLError(f"Crop: offset {attrs.offset} needs two entries (rows, columns)")
    return lambda n, c, y, w: x[n, c, y + oy, w + ox]


@dataclass(frozen=True)
class AdaptiveAvgPooling2DAttrs:
    output_size: tuple[int, ...] = ()   # (OH, OW), one entry for both, none for 1 x 1 (MXNet infers the shape)


def _adaptive_window(y: Var, n_in: int, n_out: int) -> tuple[IndexExpr, IndexExpr, int]:
    """The input window of output index ``y`` along one axis: its start floor(y N / n), its length
    ceil((y + 1) N / n) - floor(y N / n) as an index expression (the fraction N / n reduced, so that equal
    rates give equal expressions), and the longest length over all ``y``."""
    g = math.gcd(n_in, n_out)
    num, den = n_in // g, n_out // g
    start, end = (y * num) // den, ((y + 1) * num + den - 1) // den
    longest = max(-(-(i + 1) * n_in // n_out) - i * n_in // n_out for i in range(n_out))
    return start, end - start, longest


@tdl_op("_contrib_AdaptiveAvgPooling2D", inputs=("data",), attrs=AdaptiveAvgPooling2DAttrs, cases=[
    # windows of 2 x 2 rows and 3 x 3 columns, disjoint
    Case(shapes=((2, 4, 8, 12),), attrs={"output_size": (4, 4)}),
    # uneven: rows 7 -> 3 overlap ([0, 3), [2, 5), [4, 7)), columns 6 -> 4 too ([0, 2), [1, 3), [3, 5), [4, 6))
    Case(shapes=((1, 4, 7, 6),), attrs={"output_size": (3, 4)}),
    # one entry for both, upsampling rows 4 -> 5 (windows of one or two rows)
    Case(shapes=((2, 2, 4, 10),), attrs={"output_size": (5,)}),
    Case(shapes=((2, 4, 5, 3),), attrs={}),
])
def adaptive_avg_pooling_2d(data: TensorVar, attrs: AdaptiveAvgPooling2DAttrs, *,
                            out_shapes: Sequence[tuple[int, ...]]) -> Callable:
    """out[n, c, y, x] = sum_{dy < ly(y), dx < lx(x)} data[n, c, sy(y) + dy, sx(x) + dx] / (ly(y) lx(x)):
    the window of output row y is [sy, sy + ly) = [floor(y H / OH), ceil((y + 1) H / OH)), and likewise for
    columns. The sum runs over the longest window, the taps past the row's own window selected away."""
    if data.ndim != 4:
        raise TDLError(f"_contrib_AdaptiveAvgPooling2D: data of rank {data.ndim}; MXNet pools NCHW")
    (_, _, height, width), (_, _, out_height, out_width) = data.shape, out_shapes[0]

    def out(n: Var, c: Var, y: Var, x: Var) -> ValueExpr:
        sy, ly, ky = _adaptive_window(y, height, out_height)
        sx, lx, kx = _adaptive_window(x, width, out_width)
        pooled = Sum(lambda dy, dx: lt(IndexValue(dy - ly), 0) * lt(IndexValue(dx - lx), 0)
                     * data.at((n, c, sy + dy, sx + dx), fill=0.0), extents=(ky, kx))
        return pooled / (IndexValue(ly) * IndexValue(lx))
    return out


@dataclass(frozen=True)
class ImageResizeAttrs:
    interp: int = 1                 # size and keep_ratio only set the output shape (MXNet infers it)


@tdl_op("_image_resize", inputs=("data",), attrs=ImageResizeAttrs, cases=[
    # size is (width, height): HWC up by 2 in both axes, src = (2 y - 1) / 4 clipped at both borders
    Case(shapes=((4, 6, 4),), attrs={"size": (12, 8), "interp": 1}),
    # NHWC, rows down by 2 (src = 2 y + 1/2), columns from 5 to 9
    Case(shapes=((2, 8, 5, 4),), attrs={"size": (9, 4), "interp": 1}),
    # one output row keeps the half-pixel centre (src = 3/2), unlike _contrib_BilinearResize2D
    Case(shapes=((1, 4, 6, 2),), attrs={"size": (3, 1)}),
])
def image_resize(data: TensorVar, attrs: ImageResizeAttrs, *, out_shapes: Sequence[tuple[int, ...]]) -> Callable:
    """out[(n,) y, x, c] = sum_{a, b} wy_a(y) wx_b(x) data[(n,) iy_a(y), ix_b(x), c]: OpenCV's bilinear
    resizing (interp=1) of (N)HWC data at half-pixel centres, src = (y + 1/2) H / OH - 1/2 clipped to
    [0, H - 1], reading floor(src), ceil(src) with weights 1 - f, f, f = (num % den) / den."""
    if attrs.interp != 1:
        raise TDLError(f"_image_resize: interp={attrs.interp} is not described (1, bilinear, is: OpenCV's "
                       f"nearest, cubic and area rules are not)")
    if data.ndim not in (3, 4):
        raise TDLError(f"_image_resize: data of rank {data.ndim}; MXNet resizes HWC or NHWC")
    in_hw, out_hw = data.shape[-3:-1], out_shapes[0][-3:-1]

    def out(*o: Var) -> ValueExpr:
        *batch, y, x, c = o
        return _bilinear(lambda iy, ix: data.at((*batch, iy, ix, c), fill=0.0), y, x, in_hw, out_hw, False,
                         single_at_zero=False)
    return out


@dataclass(frozen=True)
class ImageCropAttrs:
    x: int
    y: int
    width: int
    height: int


@tdl_op("_image_crop", inputs=("data",), attrs=ImageCropAttrs, cases=[
    Case(shapes=((6, 7, 3),), attrs={"x": 1, "y": 2, "width": 4, "height": 2}),   # MXNet: 1 or 3 channels
    Case(shapes=((2, 5, 6, 1),), attrs={"x": 2, "y": 1, "width": 4, "height": 4}),
])
def image_crop(data: TensorVar, attrs: ImageCropAttrs) -> Callable:
    """out[(n,) i, j, c] = data[(n,) i + y, j + x, c] for i < height, j < width  ((N)HWC)."""
    if data.ndim not in (3, 4):
        raise TDLError(f"_image_crop: data of rank {data.ndim}; MXNet crops HWC or NHWC")

    def out(*o: Var) -> ValueExpr:
        *batch, i, j, c = o
        return data[(*batch, i + attrs.y, j + attrs.x, c)]
    return out


# ------------------------------------------------------------------------------------------------------------
# Spatial transformer networks: a sampling grid, from an affine transform or a flow field, and the bilinear
# sampling of the input at it. The grid's coordinates are normalized to [-1, 1] (the first row x over the width,
# the second y over the height); a sample reads the four pixels around its position, zero outside the image.

@dataclass(frozen=True)
class GridGeneratorAttrs:
    transform_type: str
    target_shape: tuple[int, ...] = (0, 0)


def _normalizer(n: int, op: str) -> float:
    if n < 2:
        raise TDLError(f"{op}: an axis of {n} pixel has no normalized coordinate (MXNet divides by n - 1 = 0)")
    return 2.0 / (n - 1)


@tdl_op("GridGenerator", inputs=("data",), attrs=GridGeneratorAttrs, cases=[
    Case(shapes=((2, 6),), attrs={"transform_type": "affine", "target_shape": (4, 6)}),
    Case(shapes=((2, 2, 4, 6),), attrs={"transform_type": "warp"}),
])
def grid_generator(data: TensorVar, attrs: GridGeneratorAttrs):
    """affine: out[n, k, y, x] = data[n, 3 k] X(x) + data[n, 3 k + 1] Y(y) + data[n, 3 k + 2], with X(x) = 2 x /
    (W - 1) - 1 and Y(y) = 2 y / (H - 1) - 1 over the target shape (H, W); warp: out[n, 0, y, x] = (data[n, 0, y,
    x] + x) 2 / (W - 1) - 1 and out[n, 1, y, x] = (data[n, 1, y, x] + y) 2 / (H - 1) - 1 (a flow in pixels)."""
    if attrs.transform_type == "affine":
        h, w = attrs.target_shape
        sx, sy = _normalizer(w, "GridGenerator"), _normalizer(h, "GridGenerator")
        return lambda n, k, y, x: (data[n, 3 * k] * (IndexValue(x) * sx - 1.0)
                                   + data[n, 3 * k + 1] * (IndexValue(y) * sy - 1.0) + data[n, 3 * k + 2])
    if attrs.transform_type == "warp":
        h, w = data.shape[2:]
        sx, sy = _normalizer(w, "GridGenerator"), _normalizer(h, "GridGenerator")
        return lambda n, k, y, x: where(eq(IndexValue(k), 0.0), (data[n, k, y, x] + IndexValue(x)) * sx,
                                        (data[n, k, y, x] + IndexValue(y)) * sy) - 1.0
    raise TDLError(f"GridGenerator: transform_type '{attrs.transform_type}' is neither 'affine' nor 'warp'")


def _sample_bilinear(image: np.ndarray, at: np.ndarray) -> np.ndarray:
    """``image`` (..., H, W) sampled at ``at`` (..., 2), normalized (x, y) positions: the four pixels around each
    weighted by their distance, those outside the image read as zero. Returns (..., 1)."""
    h, w = image.shape[-2:]
    x = (at[..., 0].astype(np.float64) + 1.0) * (w - 1) / 2.0
    y = (at[..., 1].astype(np.float64) + 1.0) * (h - 1) / 2.0
    lead = np.broadcast_shapes(image.shape[:-2], x.shape)
    x, y = np.broadcast_to(x, lead), np.broadcast_to(y, lead)
    x0, y0 = np.floor(x), np.floor(y)
    image = np.broadcast_to(image, lead + (h, w))
    out = np.zeros(lead)
    for dy in (0, 1):
        for dx in (0, 1):
            yy, xx = y0 + dy, x0 + dx
            weight = (1 - np.abs(y - yy)) * (1 - np.abs(x - xx))
            inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            flat = np.take_along_axis(image.reshape(*image.shape[:-2], h * w),
                                      (np.clip(yy, 0, h - 1) * w + np.clip(xx, 0, w - 1)).astype(np.int64)[..., None],
                                      axis=-1)[..., 0]
            out += np.where(inside, weight * flat, 0.0)
    return out[..., None].astype(np.float32)


@dataclass(frozen=True)
class BilinearSamplerAttrs:
    cudnn_off: bool = False


@tdl_op("BilinearSampler", inputs=("data", "grid"), attrs=BilinearSamplerAttrs, cases=[
    Case(shapes=((2, 2, 4, 5), (2, 2, 4, 6)), uniform=((1, -1.2, 1.2),)),
    Case(shapes=((4, 1, 3, 3), (4, 2, 2, 2)), uniform=((1, -1.0, 1.0),)),
])
def bilinear_sampler(data: TensorVar, grid: TensorVar, attrs: BilinearSamplerAttrs):
    """out[n, c, i, j] = data[n, c] sampled bilinearly at (grid[n, 0, i, j], grid[n, 1, i, j]), normalized
    coordinates (-1: the first pixel, 1: the last), zero outside the image: a data-dependent read of the whole
    image, so the image's axes never split; the batch, the channels and the output's pixels do."""
    sample = Opaque("bilinear_sample", _sample_bilinear)
    return lambda n, c, i, j: sample(data[n, c, :, :], grid[n, :, i, j])[0]


@dataclass(frozen=True)
class SpatialTransformerAttrs:
    transform_type: str
    sampler_type: str
    target_shape: tuple[int, ...] = (0, 0)
    cudnn_off: bool = False


def _transform(shape: tuple[int, int]) -> Callable:
    """The affine grid of :func:`grid_generator` for ``loc`` (..., 6) over ``shape``, sampled from the image."""
    h, w = shape
    xs, ys = np.meshgrid(np.linspace(-1.0, 1.0, w), np.linspace(-1.0, 1.0, h))

    def run(image: np.ndarray, loc: np.ndarray) -> np.ndarray:
        loc = loc.astype(np.float64)[..., None, None, :]
        at = np.stack([loc[..., 0] * xs + loc[..., 1] * ys + loc[..., 2],
                       loc[..., 3] * xs + loc[..., 4] * ys + loc[..., 5]], axis=-1)
        return _sample_bilinear(image[..., None, None, :, :], at)[..., 0]
    return run


@tdl_op("SpatialTransformer", inputs=("data", "loc"), attrs=SpatialTransformerAttrs, cases=[
    Case(shapes=((2, 2, 5, 4), (2, 6)), attrs={"target_shape": (3, 4), "transform_type": "affine",
                                           "sampler_type": "bilinear"}),
    Case(shapes=((4, 3, 4, 4), (4, 6)), attrs={"target_shape": (4, 2), "transform_type": "affine",
                                           "sampler_type": "bilinear"}),
])
def spatial_transformer(data: TensorVar, loc: TensorVar, attrs: SpatialTransformerAttrs):
    """out[n, c, i, j] = data[n, c] sampled bilinearly at the affine grid of loc[n] (GridGenerator's) over the
    target shape: the image and the target's pixels read and made whole; the batch and the channels split."""
    if attrs.transform_type != "affine" or attrs.sampler_type != "bilinear":
        raise TDLError(f"SpatialTransformer: only transform_type 'affine' with sampler_type 'bilinear' is described "
                       f"(got '{attrs.transform_type}', '{attrs.sampler_type}')")
    for n in attrs.target_shape:
        _normalizer(n, "SpatialTransformer")
    sample = Opaque("spatial_transform", _transform(tuple(attrs.target_shape)))
    return lambda n, c, i, j: sample(data[n, c, :, :], loc[n, :])[i, j]
