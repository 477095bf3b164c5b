"""TDL descriptions of the pooling family: Pooling (max, avg, sum; 1-D..3-D, channels first), and the
region-of-interest pooling of detection heads, ROIPooling, _contrib_ROIAlign and R-FCN's _contrib_PSROIPooling.

A pooled value is a reduction over the window, read at ``x*stride + dx - pad`` (:func:`~operators_tdl.conv.
window_index`) through ``.at``: padding reads ``NEG_INF`` for max pooling and 0 for sums. The divisor of average
pooling is the number of window positions MXNet counts, an index function (no tensor is read for it).
"""
from __future__ import annotations

import math

import numpy as np

from operators_tdl.conv import per_dim, spatial_params, window_index, window_names
from tofu.tdl.interpret import round_half_away
from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)


@dataclass(frozen=True)
class PoolingAttrs:
    kernel: tuple[int, ...] = ()
    pool_type: str = "max"
    stride: tuple[int, ...] = ()
    pad: tuple[int, ...] = ()
    global_pool: bool = False
    pooling_convention: str = "valid"
    count_include_pad: bool | None = None     # None: MXNet's default, True
    layout: str | None = None
    p_value: int | None = None                # lp pooling's p


@tdl_op("Pooling", inputs=("data",), attrs=PoolingAttrs, cases=[
    Case(shapes=((2, 3, 6, 5),), attrs={"kernel": (2, 2), "stride": (2, 2), "pool_type": "max"}),
    Case(shapes=((1, 2, 6, 6),), attrs={"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "pool_type": "max",
                                        "pooling_convention": "full"}),
    Case(shapes=((2, 2, 5, 6),), attrs={"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "pool_type": "avg"}),
    Case(shapes=((1, 2, 6, 6),), attrs={"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "pool_type": "avg",
                                        "pooling_convention": "full"}),
    Case(shapes=((1, 2, 6, 7),), attrs={"kernel": (3, 2), "stride": (2, 2), "pad": (1, 1), "pool_type": "avg",
                                        "pooling_convention": "full", "count_include_pad": False}),
    Case(shapes=((2, 3, 9),), attrs={"kernel": (3,), "stride": (2,), "pad": (1,), "pool_type": "sum"}),
    Case(shapes=((2, 3, 4, 5),), attrs={"kernel": (1, 1), "pool_type": "avg", "global_pool": True}),
    Case(shapes=((2, 3, 4, 5),), attrs={"kernel": (2, 2), "pool_type": "max", "global_pool": True}),
    Case(shapes=((2, 2, 6, 6),), attrs={"kernel": (2, 2), "stride": (2, 2), "pool_type": "lp", "p_value": 2}),
    Case(shapes=((2, 2, 5, 6),), attrs={"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "pool_type": "lp",
                                        "p_value": 1}),
])
def pooling(data: TensorVar, attrs: PoolingAttrs):
    """out[b, c, x..] = max / sum / mean over dx.. of data[b, c, x*stride + dx - pad] (padding excluded from the
    max; the mean divides by the window size, clipped to the padded input, or by the in-input count when
    count_include_pad=False); lp: (sum of data^p)^(1/p), p = 1 or 2  (MXNet NC(D)(H)W; global_pool: the window
    is the whole input)."""
    nd = spatial_params("Pooling", data, attrs.layout, attrs.stride, attrs.pad)
    if attrs.pool_type not in ("max", "avg", "sum", "lp"):
        raise TDLError(f"Pooling: pool_type '{attrs.pool_type}' is not described (max, avg, sum, lp are)")
    if attrs.pool_type == "lp" and attrs.p_value not in (1, 2):
        raise TDLError(f"Pooling: lp pooling with p_value {attrs.p_value} is not described (1 and 2 are)")
    if attrs.pooling_convention not in ("valid", "full"):
        raise TDLError(f"Pooling: pooling_convention '{attrs.pooling_convention}' is not described")
    if attrs.global_pool:
        kernel, stride, pad = data.shape[2:], (1,) * nd, (0,) * nd
    else:
        if len(attrs.kernel) != nd:
            raise TDLError(f"Pooling: kernel {attrs.kernel} needs one entry per spatial dimension ({nd})")
        kernel, stride, pad = attrs.kernel, per_dim(attrs.stride, nd, 1), per_dim(attrs.pad, nd, 0)
    fill, reduce = (NEG_INF, Max) if attrs.pool_type == "max" else (0.0, Sum)
    include_pad = attrs.count_include_pad is not False
    power = square if attrs.pool_type == "lp" and attrs.p_value == 2 else (lambda v: v)

    def out(b, c, *xs):
        pooled = reduce(nary(window_names(nd), lambda ds: power(data.at(
            (b, c, *window_index(xs, ds, stride, (1,) * nd, pad)), fill=fill))), extents=kernel)
        if attrs.pool_type == "lp" and attrs.p_value == 2:
            return sqrt(pooled)
        if attrs.pool_type != "avg":
            return pooled
        if include_pad and attrs.pooling_convention == "valid":   # every window lies inside the padded input
            return pooled / float(math.prod(kernel))
        return pooled / _window_count(xs, data.shape[2:], kernel, stride, pad, include_pad)
    return out


def _window_count(xs: tuple[Var, ...], size: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...],
                  pad: tuple[int, ...], include_pad: bool) -> ValueExpr:
    """How many positions of the window at ``xs`` MXNet averages over: those inside the padded input
    [-pad, size + pad) (count_include_pad; only 'full' windows can stick out), else inside [0, size). A 'full'
    window can lie wholly in the padding: MXNet's average there is 0, so the count is at least 1."""
    count: ValueExpr | float = 1.0
    for x, n, k, s, p in zip(xs, size, kernel, stride, pad):
        lo, hi = (-p, n + p) if include_pad else (0, n)
        count = count * Sum(lambda d: ge(IndexValue(x * s + d - p), lo) * lt(IndexValue(x * s + d - p), hi),
                            extents=(k,))
    return maximum(count, 1.0)


# ------------------------------------------------------------------------------------------- regions of interest
# A detection head pools each region of interest (a row of ``rois``: batch index, x1, y1, x2, y2 in the image's
# coordinates) into a fixed grid, per channel. Which image and which pixels a region reads are values of rois,
# not indices: an ``Opaque`` function of a whole channel of every image and one region, so the regions, the
# channels and the pooled grid split, the images' batch and pixels do not.

@dataclass(frozen=True)
class ROIPoolingAttrs:
    pooled_size: tuple[int, int]
    spatial_scale: float


def _regions(fn: Callable) -> Callable:
    """Applies ``fn(images (B, H, W), roi (5,)) -> (ph, pw)`` at every point of the broadcast leading axes of a
    channel of the images (..., B, H, W) and the regions (..., 5)."""
    def run(images: np.ndarray, rois: np.ndarray) -> np.ndarray:
        lead = np.broadcast_shapes(images.shape[:-3], rois.shape[:-1])
        images = np.broadcast_to(images, lead + images.shape[-3:]).reshape(-1, *images.shape[-3:])
        rois = np.broadcast_to(rois, lead + rois.shape[-1:]).reshape(-1, rois.shape[-1])
        out = np.stack([fn(i.astype(np.float64), r.astype(np.float64)) for i, r in zip(images, rois)])
        return out.reshape(*lead, *out.shape[1:]).astype(np.float32)
    return run


def _roi_max(pooled: tuple[int, int], scale: float) -> Callable:
    """MXNet's ROIPooling of one channel: the region's corners scaled and rounded, its (at least 1 x 1) box cut
    into ph x pw bins (floor of each bin's start, ceil of its end, clipped to the image), the maximum of each;
    an empty bin gives 0."""
    ph, pw = pooled

    def fn(images: np.ndarray, roi: np.ndarray) -> np.ndarray:
        image = images[int(roi[0])]
        h, w = image.shape
        x1, y1, x2, y2 = (round_half_away(v * scale) for v in roi[1:])
        bin_h, bin_w = max(y2 - y1 + 1, 1) / ph, max(x2 - x1 + 1, 1) / pw
        out = np.zeros((ph, pw))
        for i in range(ph):
            h0, h1 = (int(min(max(v + y1, 0), h)) for v in (np.floor(i * bin_h), np.ceil((i + 1) * bin_h)))
            for j in range(pw):
                w0, w1 = (int(min(max(v + x1, 0), w)) for v in (np.floor(j * bin_w), np.ceil((j + 1) * bin_w)))
                if h1 > h0 and w1 > w0:
                    out[i, j] = image[h0:h1, w0:w1].max()
        return out
    return fn


@tdl_op("ROIPooling", inputs=("data", "rois"), attrs=ROIPoolingAttrs, cases=[
    # rois uniform in [0, 6): a batch index of 0..5 (truncated), corners anywhere in a 6 x 6 image
    Case(shapes=((6, 2, 6, 6), (4, 5)), uniform=((1, 0.0, 6.0),), attrs={"pooled_size": (2, 2), "spatial_scale": 1.0}),
    Case(shapes=((7, 4, 5, 7), (6, 5)), uniform=((1, 0.0, 7.0),), attrs={"pooled_size": (3, 2), "spatial_scale": 0.75}),
])
def roi_pooling(data: TensorVar, rois: TensorVar, attrs: ROIPoolingAttrs) -> Callable:
    """out[r, c, i, j] = max of data[rois[r, 0], c] over bin (i, j) of region r (corners rois[r, 1:] x
    spatial_scale, rounded), 0 for an empty bin."""
    pool = Opaque("roi_max", _regions(_roi_max(tuple(attrs.pooled_size), attrs.spatial_scale)))
    return lambda r, c, i, j: pool(data[:, c, :, :], rois[r, :])[i, j]


@dataclass(frozen=True)
class ROIAlignAttrs:
    pooled_size: tuple[int, int]
    spatial_scale: float
    sample_ratio: int = -1
    position_sensitive: bool = False
    aligned: bool = False


def _bilinear_at(image: np.ndarray, y: float, x: float) -> float:
    """ROIAlign's sample of ``image`` at (y, x): 0 beyond a pixel outside the image, clamped at its edges."""
    h, w = image.shape
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return 0.0
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    if y0 >= h - 1:
        y0 = y1 = h - 1
        y = float(y0)
    else:
        y1 = y0 + 1
    if x0 >= w - 1:
        x0 = x1 = w - 1
        x = float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    return ((1 - ly) * (1 - lx) * image[y0, x0] + (1 - ly) * lx * image[y0, x1] + ly * (1 - lx) * image[y1, x0]
            + ly * lx * image[y1, x1])


def _roi_align(pooled: tuple[int, int], scale: float, ratio: int, aligned: bool) -> Callable:
    """MXNet's ROIAlign of one channel: the region's corners scaled (less half a pixel when ``aligned``; else at
    least 1 x 1), cut into ph x pw bins, each the mean of a grid of bilinear samples (``ratio`` per axis, or
    ceil of the bin's size when ``ratio`` <= 0); a negative batch index gives 0."""
    ph, pw = pooled
    shift = 0.5 if aligned else 0.0

    def fn(images: np.ndarray, roi: np.ndarray) -> np.ndarray:
        out = np.zeros((ph, pw))
        if roi[0] < 0:
            return out
        image = images[int(roi[0])]
        x1, y1, x2, y2 = (v * scale - shift for v in roi[1:])
        rh, rw = y2 - y1, x2 - x1
        if not aligned:
            rh, rw = max(rh, 1.0), max(rw, 1.0)
        bin_h, bin_w = rh / ph, rw / pw
        gh = ratio if ratio > 0 else int(np.ceil(rh / ph))
        gw = ratio if ratio > 0 else int(np.ceil(rw / pw))
        count = max(gh * gw, 1)
        for i in range(ph):
            for j in range(pw):
                total = 0.0
                for a in range(gh):
                    y = y1 + i * bin_h + (a + 0.5) * bin_h / gh
                    for b in range(gw):
                        total += _bilinear_at(image, y, x1 + j * bin_w + (b + 0.5) * bin_w / gw)
                out[i, j] = total / count
        return out
    return fn


@tdl_op("_contrib_ROIAlign", inputs=("data", "rois"), attrs=ROIAlignAttrs, cases=[
    Case(shapes=((6, 2, 6, 6), (4, 5)), uniform=((1, 0.0, 6.0),), attrs={"pooled_size": (2, 2), "spatial_scale": 1.0}),
    Case(shapes=((7, 4, 5, 7), (6, 5)), uniform=((1, 0.0, 7.0),),
         attrs={"pooled_size": (3, 2), "spatial_scale": 0.75, "sample_ratio": 2}),
    # aligned=True: MXNet aborts the process on a region with x2 < x1, which a uniform draw gives, so it is
    # checked on well-formed regions in tests/operators/test_roi.py
])
def roi_align(data: TensorVar, rois: TensorVar, attrs: ROIAlignAttrs) -> Callable:
    """out[r, c, i, j] = the mean of bilinear samples of data[rois[r, 0], c] on a grid in bin (i, j) of region r
    (corners rois[r, 1:] x spatial_scale); 0 for a region whose batch index is negative (MXNet 1.9.1's CPU kernel
    writes that zero into another region's output and leaves the region's own unset: tests/operators/test_roi.py).
    position_sensitive (each bin its own channel group) is not described."""
    if attrs.position_sensitive:
        raise TDLError("_contrib_ROIAlign: position_sensitive (each bin reads its own group of channels) is not "
                       "described")
    pool = Opaque("roi_align", _regions(_roi_align(tuple(attrs.pooled_size), attrs.spatial_scale,
                                                   attrs.sample_ratio, attrs.aligned)))
    return lambda r, c, i, j: pool(data[:, c, :, :], rois[r, :])[i, j]


@dataclass(frozen=True)
class PSROIPoolingAttrs:
    spatial_scale: float
    output_dim: int
    pooled_size: int
    group_size: int = 0             # 0: pooled_size


def _roi_mean(pooled: int, scale: float) -> Callable:
    """R-FCN's position-sensitive pooling of one channel (MXNet's PSROIPooling): the region's corners rounded,
    then scaled (its far corner one pixel on), at least 0.1 x 0.1, cut into pooled x pooled bins (floor of a
    bin's start, ceil of its end, clipped to the image), the mean of each; an empty bin gives 0."""
    def fn(images: np.ndarray, roi: np.ndarray) -> np.ndarray:
        image = images[int(roi[0])]
        h, w = image.shape
        x1, y1 = round_half_away(roi[1]) * scale, round_half_away(roi[2]) * scale
        x2, y2 = (round_half_away(roi[3]) + 1.0) * scale, (round_half_away(roi[4]) + 1.0) * scale
        bin_h, bin_w = max(y2 - y1, 0.1) / pooled, max(x2 - x1, 0.1) / pooled
        out = np.zeros((pooled, pooled))
        for i in range(pooled):
            h0, h1 = (int(min(max(v, 0), h)) for v in (np.floor(i * bin_h + y1), np.ceil((i + 1) * bin_h + y1)))
            for j in range(pooled):
                w0, w1 = (int(min(max(v, 0), w)) for v in (np.floor(j * bin_w + x1), np.ceil((j + 1) * bin_w + x1)))
                if h1 > h0 and w1 > w0:
                    out[i, j] = image[h0:h1, w0:w1].mean()
        return out
    return fn


@tdl_op("_contrib_PSROIPooling", inputs=("data", "rois"), attrs=PSROIPoolingAttrs, cases=[
    Case(shapes=((6, 8, 6, 6), (4, 5)), uniform=((1, 0.0, 6.0),),
         attrs={"spatial_scale": 1.0, "output_dim": 2, "pooled_size": 2}),
    Case(shapes=((7, 18, 5, 7), (6, 5)), uniform=((1, 0.0, 7.0),),
         attrs={"spatial_scale": 0.75, "output_dim": 2, "pooled_size": 3}),
    Case(shapes=((4, 16, 6, 6), (4, 5)), uniform=((1, 0.0, 4.0),),
         attrs={"spatial_scale": 1.0, "output_dim": 4, "pooled_size": 4, "group_size": 2}),
])
def ps_roi_pooling(data: TensorVar, rois: TensorVar, attrs: PSROIPoolingAttrs) -> Callable:
    """out[r, c, i, j] = the mean of data[rois[r, 0], (c G + gi) G + gj] over bin (i, j) of region r, with the
    group of the bin gi = i G // P, gj = j G // P (G = group_size, P = pooled_size): each bin reads its own
    channel, an index affine in (c, i, j), so the output channels split as the data's channels do."""
    pooled = attrs.pooled_size
    group = attrs.group_size or pooled
    pool = Opaque("roi_mean", _regions(_roi_mean(pooled, attrs.spatial_scale)))

    def out(r: Var, c: Var, i: Var, j: Var) -> ValueExpr:
        gi, gj = (i, j) if group == pooled else ((i * group) // pooled, (j * group) // pooled)
        return pool(data[:, (c * group + gi) * group + gj, :, :], rois[r, :])[i, j]
    return out
