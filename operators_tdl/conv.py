"""TDL descriptions of the convolution family: Convolution, Deconvolution (1-D, 2-D and 3-D, channels first),
and FlowNet's Correlation of two feature maps, im2col (a convolution's patches as columns), the deformable
convolutions (DCNv1, and DCNv2 with its mask). Not described: col2im, whose flattened patch positions the
interval analysis bounds only loosely where a read is masked out.

One spatial rank-generic form: output position ``x`` of a dimension reads input position
``x*stride + dx*dilate - pad`` (:func:`window_index`, shared with pooling) through ``.at(..., fill=0.0)``, so
zero padding is a fill value and every access stays affine in the index variables. Deconvolution (the
transposed form) reads ``(y + pad - dy*dilate) // stride`` where that division is exact, else zero.
"""
from __future__ import annotations

import numpy as np

from operators_tdl.shape import unravel
from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)

_SPATIAL_NAMES = {1: ("x",), 2: ("y", "x"), 3: ("z", "y", "x")}
_LAYOUTS = {1: "NCW", 2: "NCHW", 3: "NCDHW"}


def spatial_params(op: str, data: TensorVar, layout: str | None, *tuples: tuple[int, ...]) -> int:
    """The number of spatial dimensions of a channels-first ``data``; checks layout and tuple lengths."""
    nd = data.ndim - 2
    if nd not in _LAYOUTS:
        raise TDLError(f"{op}: data of rank {data.ndim} (shape {data.shape}); only 1-D..3-D are described")
    if layout not in (None, _LAYOUTS[nd]):
        raise TDLError(f"{op}: layout {layout} is not described, only {_LAYOUTS[nd]}")
    for t in tuples:
        if len(t) not in (0, nd):
            raise TDLError(f"{op}: attribute {t} does not have one entry per spatial dimension ({nd})")
    return nd


def per_dim(values: tuple[int, ...], nd: int, default: int) -> tuple[int, ...]:
    """MXNet's per-dimension attribute, where an empty tuple means ``default`` everywhere."""
    return values if values else (default,) * nd


def window_names(nd: int) -> list[str]:
    """Names of the window (kernel offset) variables: dx, or dy, dx, ..."""
    return [f"d{n}" for n in _SPATIAL_NAMES[nd]]


def window_index(xs: Sequence[Var], ds: Sequence[Var], stride: Sequence[int], dilate: Sequence[int],
                 pad: Sequence[int]) -> tuple[IndexExpr, ...]:
    """The input position ``x*stride + dx*dilate - pad`` of each spatial dimension."""
    return tuple(x * s + d * r - p for x, d, s, r, p in zip(xs, ds, stride, dilate, pad))


@dataclass(frozen=True)
class ConvolutionAttrs:
    kernel: tuple[int, ...]
    num_filter: int
    stride: tuple[int, ...] = ()
    dilate: tuple[int, ...] = ()
    pad: tuple[int, ...] = ()
    num_group: int = 1
    no_bias: bool = False
    layout: str | None = None


@tdl_op("Convolution", inputs=("data", "weight", "bias?"), attrs=ConvolutionAttrs, cases=[
    Case(shapes=((2, 3, 9), (4, 3, 3), (4,)), attrs={"kernel": (3,), "num_filter": 4}),
    Case(shapes=((2, 3, 10), (4, 3, 3), (4,)),
         attrs={"kernel": (3,), "num_filter": 4, "stride": (2,), "pad": (2,), "dilate": (2,)}),
    Case(shapes=((2, 3, 6, 5), (4, 3, 3, 3), (4,)),
         attrs={"kernel": (3, 3), "num_filter": 4, "stride": (2, 2), "pad": (1, 1)}),
    Case(shapes=((1, 4, 5, 6), (6, 2, 3, 2)),
         attrs={"kernel": (3, 2), "num_filter": 6, "num_group": 2, "no_bias": True, "pad": (1, 0)}),
    # even extents everywhere, so that every split (input channels with a bias, taps, width) applies
    Case(shapes=((2, 4, 8), (6, 4, 4), (6,)), attrs={"kernel": (4,), "num_filter": 6, "pad": (2,)}),
    Case(shapes=((2, 4, 4, 4), (6, 4, 2, 2), (6,)),
         attrs={"kernel": (2, 2), "num_filter": 6, "stride": (2, 2), "dilate": (1, 1), "pad": (0, 0)}),
])
def convolution(data: TensorVar, weight: TensorVar, bias: TensorVar | None, attrs: ConvolutionAttrs):
    """out[b, co, x..] = sum_{ci, dx..} data[b, g*Cg + ci, x*stride + dx*dilate - pad] * weight[co, ci, dx..]
    + bias[co], zero-padded, with group g = co // (num_filter/num_group)  (MXNet NC(D)(H)W, weight O(I/g)..)."""
    nd = spatial_params("Convolution", data, attrs.layout, attrs.kernel, attrs.stride, attrs.dilate, attrs.pad)
    stride, dilate, pad = (per_dim(attrs.stride, nd, 1), per_dim(attrs.dilate, nd, 1), per_dim(attrs.pad, nd, 0))
    in_per_group, out_per_group = data.shape[1] // attrs.num_group, attrs.num_filter // attrs.num_group
    # the input channel read for output channel co; without groups it is the reduction variable itself
    channel = (lambda co, ci: ci) if attrs.num_group == 1 else \
        (lambda co, ci: (co // out_per_group) * in_per_group + ci)
    with_bias = bias is not None and not attrs.no_bias

    def out(b, co, *xs):
        total = Sum(nary(["ci", *window_names(nd)], lambda v: (
            data.at((b, channel(co, v[0]), *window_index(xs, v[1:], stride, dilate, pad)), fill=0.0)
            * weight[(co, v[0], *v[1:])])))
        return total + bias[co] if with_bias else total
    return out


@dataclass(frozen=True)
class DeconvolutionAttrs:
    kernel: tuple[int, ...]
    num_filter: int
    stride: tuple[int, ...] = ()
    dilate: tuple[int, ...] = ()
    pad: tuple[int, ...] = ()
    adj: tuple[int, ...] = ()
    target_shape: tuple[int, ...] = ()
    num_group: int = 1
    no_bias: bool = True
    layout: str | None = None


@tdl_op("Deconvolution", inputs=("data", "weight", "bias?"), attrs=DeconvolutionAttrs, cases=[
    Case(shapes=((2, 3, 5), (3, 4, 3)), attrs={"kernel": (3,), "num_filter": 4}),
    Case(shapes=((1, 2, 3, 4), (2, 3, 3, 3), (3,)),
         attrs={"kernel": (3, 3), "num_filter": 3, "stride": (2, 2), "pad": (1, 1), "adj": (1, 0),
                "no_bias": False}),
    Case(shapes=((1, 4, 5), (4, 1, 2)),
         attrs={"kernel": (2,), "num_filter": 2, "num_group": 2, "dilate": (2,), "stride": (2,)}),
])
def deconvolution(data: TensorVar, weight: TensorVar, bias: TensorVar | None, attrs: DeconvolutionAttrs):
    """out[b, co, y..] = sum_{ci, dy..} data[b, ci, (y + pad - dy*dilate) / stride] * weight[ci, co', dy..]
    + bias[co], where the division is exact and in range (MXNet: the gradient of Convolution; weight I(O/g)..)."""
    nd = spatial_params("Deconvolution", data, attrs.layout, attrs.kernel, attrs.stride, attrs.dilate,
                        attrs.pad)
    stride, dilate = per_dim(attrs.stride, nd, 1), per_dim(attrs.dilate, nd, 1)
    if attrs.target_shape:
        raise TDLError("Deconvolution: target_shape is not described; give pad and adj instead")
    pad = per_dim(attrs.pad, nd, 0)
    in_per_group, out_per_group = data.shape[1] // attrs.num_group, attrs.num_filter // attrs.num_group
    with_bias = bias is not None and not attrs.no_bias

    def out(b, co, *ys):
        group, co_in_group = (0, co) if attrs.num_group == 1 else (co // out_per_group, co % out_per_group)

        def term(v):
            ci, ds = v[0], v[1:]
            offsets = [y + p - d * r for y, d, p, r in zip(ys, ds, pad, dilate)]
            value = data.at((b, group * in_per_group + ci, *(o // s for o, s in zip(offsets, stride))), fill=0.0)
            for o, s in zip(offsets, stride):   # positions between the strided inputs receive nothing
                if s > 1:
                    value = where(eq(IndexValue(o % s), 0), value, 0.0)
            return value * weight[(group * in_per_group + ci, co_in_group, *ds)]

        total = Sum(nary(["ci", *window_names(nd)], term), extents=(in_per_group, *weight.shape[2:]))
        return total + bias[co] if with_bias else total
    return out


@dataclass(frozen=True)
class CorrelationAttrs:
    kernel_size: int = 1
    max_displacement: int = 1
    stride1: int = 1
    stride2: int = 1
    pad_size: int = 0
    is_multiply: bool = True


@tdl_op("Correlation", inputs=("data1", "data2"), attrs=CorrelationAttrs, cases=[
    Case(shapes=((2, 3, 5, 6), (2, 3, 5, 6)), attrs={"max_displacement": 1, "pad_size": 1}),
    Case(shapes=((1, 2, 7, 6), (1, 2, 7, 6)),
         attrs={"kernel_size": 3, "max_displacement": 2, "stride1": 2, "stride2": 2, "pad_size": 3}),
    Case(shapes=((2, 4, 6, 6), (2, 4, 6, 6)), attrs={"max_displacement": 2, "pad_size": 2, "is_multiply": False}),
])
def correlation(data1: TensorVar, data2: TensorVar, attrs: CorrelationAttrs) -> Callable:
    """FlowNet's correlation of two feature maps: out[n, t, y, x] = sum_{c, dy, dx} f(data1[n, c, y1 + dy,
    x1 + dx], data2[n, c, y1 + dy + oy(t), x1 + dx + ox(t)]) / (k^2 C), zero-padded by ``pad_size``, with
    (y1, x1) = (y, x) stride1 + max_displacement - pad_size, the displacement t = (oy / stride2 + R) G + ox /
    stride2 + R on a G x G grid (R = max_displacement // stride2, G = 2R + 1), f the product (is_multiply) or the
    absolute difference, k = kernel_size."""
    k, s1, s2 = attrs.kernel_size, attrs.stride1, attrs.stride2
    if k % 2 == 0:
        raise TDLError(f"Correlation: an even kernel_size ({k}) is not described")
    radius = attrs.max_displacement // s2
    grid = 2 * radius + 1
    first = attrs.max_displacement - attrs.pad_size       # where window (0, 0) of output (0, 0) starts
    scale = 1.0 / (k * k * data1.shape[1])

    def out(n: Var, t: Var, y: Var, x: Var) -> ValueExpr:
        def term(v: tuple[Var, ...]) -> ValueExpr:
            c, dy, dx = v
            yy, xx = y * s1 + first + dy, x * s1 + first + dx
            a = data1.at((n, c, yy, xx), fill=0.0)
            b = data2.at((n, c, yy + (t // grid) * s2 - radius * s2, xx + (t % grid) * s2 - radius * s2),
                         fill=0.0)
            return a * b if attrs.is_multiply else abs_(a - b)
        return Sum(nary(["c", "dy", "dx"], term), extents=(data1.shape[1], k, k)) * scale
    return out


@dataclass(frozen=True)
class Im2colAttrs:
    kernel: tuple[int, ...]
    stride: tuple[int, ...] = ()
    dilate: tuple[int, ...] = ()
    pad: tuple[int, ...] = ()


@tdl_op("im2col", inputs=("data",), attrs=Im2colAttrs, cases=[
    Case(shapes=((2, 3, 5, 4),), attrs={"kernel": (2, 2)}),
    Case(shapes=((1, 2, 6, 7),), attrs={"kernel": (3, 2), "stride": (2, 1), "dilate": (1, 2), "pad": (1, 1)}),
    Case(shapes=((2, 4, 4, 4),), attrs={"kernel": (3, 3), "pad": (1, 1)}),
])
def im2col(data: TensorVar, attrs: Im2colAttrs) -> Callable:
    """out[n, c K + k, l] = data[n, c, x*stride + dx*dilate - pad] (zero-padded), k the row-major number of the
    kernel position dx.. (K of them) and l of the output position x.. (a convolution's patches as columns; 2-D
    only: MXNet's kernel fails on 1-D data and on some 3-D shapes, (1, 2, 4, 5, 4) with kernel (2, 3, 2))."""
    nd = spatial_params("im2col", data, None, attrs.kernel, attrs.stride, attrs.dilate, attrs.pad)
    if nd != 2:
        raise TDLError(f"im2col: {nd}-D data is not described, only 2-D (MXNet's kernel fails on 1-D data and on "
                       f"some 3-D shapes)")
    stride, dilate, pad = (per_dim(attrs.stride, nd, 1), per_dim(attrs.dilate, nd, 1), per_dim(attrs.pad, nd, 0))
    kernel = tuple(attrs.kernel)
    outs = tuple((n + 2 * p - r * (k - 1) - 1) // s + 1
                 for n, k, s, r, p in zip(data.shape[2:], kernel, stride, dilate, pad))

    def out(n: Var, j: Var, l: Var) -> ValueExpr:
        c, *ds = unravel(j, (data.shape[1], *kernel))
        return data.at((n, c, *window_index(unravel(l, outs), ds, stride, dilate, pad)), fill=0.0)
    return out


@dataclass(frozen=True)
class DeformableConvolutionAttrs(ConvolutionAttrs):
    num_deformable_group: int = 1


def _deformable_taps(kernel: tuple[int, int], dilate: tuple[int, int], modulated: bool = False) -> Callable:
    """Every kernel tap of one output position sampled bilinearly (MXNet 1.9.1's deformable im2col) from a
    channel ``image`` (..., H, W) at the window's unmoved corner (``top``, ``left``: (...) each), moved by the
    tap's offset: ``offset`` (..., G 2 kh kw) holds (dy, dx) per tap, row-major, for each of G deformable groups,
    ``group`` (...) says whose are the channel's. DCNv1 (``modulated`` False): 0 unless 0 <= y < H and 0 <= x <
    W, a sample in the last row or column reading that row or column alone. DCNv2 (``modulated``): 0 unless -1 <
    y < H and -1 < x < W, a corner outside the image reading 0, and each tap times its ``mask`` (..., G kh kw)
    value. Returns (..., kh, kw)."""
    kh, kw = kernel

    def run(image: np.ndarray, offset: np.ndarray, group: np.ndarray, top: np.ndarray, left: np.ndarray,
            mask: np.ndarray | None = None) -> np.ndarray:
        h, w = image.shape[-2:]
        shapes = [image.shape[:-2], offset.shape[:-1], group.shape, top.shape, left.shape]
        lead = np.broadcast_shapes(*shapes, *([mask.shape[:-1]] if mask is not None else []))
        image = np.broadcast_to(image.astype(np.float64), lead + (h, w)).reshape(*lead, h * w)
        group = np.broadcast_to(group, lead).astype(np.int64)[..., None, None]

        def own(v: np.ndarray, per_tap: int) -> np.ndarray:      # the channel's deformable group's block
            v = np.broadcast_to(v.astype(np.float64), lead + v.shape[-1:]).reshape(*lead, -1, per_tap * kh * kw)
            return np.take_along_axis(v, group, axis=-2)[..., 0, :]

        offset = own(offset, 2).reshape(*lead, kh, kw, 2)
        top = np.broadcast_to(top.astype(np.float64), lead)[..., None, None]
        left = np.broadcast_to(left.astype(np.float64), lead)[..., None, None]
        y = top + np.arange(kh)[:, None] * dilate[0] + offset[..., 0]
        x = left + np.arange(kw)[None, :] * dilate[1] + offset[..., 1]

        def at(yy: np.ndarray, xx: np.ndarray) -> np.ndarray:
            inside = (yy >= 0) & (yy <= h - 1) & (xx >= 0) & (xx <= w - 1)
            flat = (np.clip(yy, 0, h - 1) * w + np.clip(xx, 0, w - 1)).astype(np.int64).reshape(*lead, kh * kw)
            return np.where(inside, np.take_along_axis(image, flat, axis=-1).reshape(y.shape), 0.0)

        if modulated:
            sampled = (y > -1) & (x > -1) & (y < h) & (x < w)
            y0, x0 = np.floor(y), np.floor(x)
            y1, x1, ly, lx = y0 + 1, x0 + 1, y - y0, x - x0
        else:
            sampled = (y >= 0) & (x >= 0) & (y < h) & (x < w)

            def corners(v: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
                low = np.clip(np.floor(v), 0, n - 1)
                last = low >= n - 1
                return low, np.where(last, low, low + 1), np.where(last, 0.0, np.clip(v, 0, n - 1) - low)

            (y0, y1, ly), (x0, x1, lx) = corners(y, h), corners(x, w)
        out = ((1 - ly) * (1 - lx) * at(y0, x0) + (1 - ly) * lx * at(y0, x1) + ly * (1 - lx) * at(y1, x0)
               + ly * lx * at(y1, x1))
        out = np.where(sampled, out, 0.0)
        if mask is not None:
            out = out * own(mask, 1).reshape(*lead, kh, kw)
        return out.astype(np.float32)
    return run


@tdl_op("_contrib_DeformableConvolution", inputs=("data", "offset", "weight", "bias?"),
        attrs=DeformableConvolutionAttrs, cases=[
    Case(shapes=((2, 3, 5, 5), (2, 18, 5, 5), (4, 3, 3, 3), (4,)),
         attrs={"kernel": (3, 3), "num_filter": 4, "pad": (1, 1)}),
    Case(shapes=((1, 4, 6, 7), (1, 16, 3, 7), (4, 2, 2, 2)),
         attrs={"kernel": (2, 2), "num_filter": 4, "stride": (2, 1), "dilate": (1, 2), "pad": (0, 1),
                "num_group": 2, "num_deformable_group": 2, "no_bias": True}),
    # output rows and columns that divide by 2 and 4: their splits must be found unrunnable on the kernel
    Case(shapes=((2, 2, 4, 4), (2, 18, 4, 4), (2, 2, 3, 3), (2,)), attrs={"kernel": (3, 3), "num_filter": 2,
                                                                       "pad": (1, 1)}),
])
def deformable_convolution(data: TensorVar, offset: TensorVar, weight: TensorVar, bias: TensorVar | None,
                           attrs: DeformableConvolutionAttrs) -> Callable:
    """A deformable convolution (2-D): out[b, co, y, x] = sum_{ci, dy, dx} weight[co, ci, dy, dx] * data[b, g Cg
    + ci] sampled bilinearly at (y stride - pad + dy dilate, x stride - pad + dx dilate) + offset[b, 2 (tap) +
    {0, 1} of deformable group, y, x] + bias[co]. Where a tap samples is a value of ``offset``: an ``Opaque``
    function of a whole channel of the image, so the image's rows and columns never split; the batch and the
    output channels do, and the input channels as partial sums. The output positions split too, but not on
    MXNet's kernel, which places a shard's first row at the image's (the proof refuses them)."""
    return _deformable("_contrib_DeformableConvolution", data, offset, None, weight, bias, attrs)


def _deformable(op: str, data: TensorVar, offset: TensorVar, mask: TensorVar | None, weight: TensorVar,
                bias: TensorVar | None, attrs) -> Callable:
    """The deformable convolutions' description: DCNv1, or DCNv2 (each tap also times ``mask``)."""
    nd = spatial_params(op, data, attrs.layout, attrs.kernel, attrs.stride, attrs.dilate, attrs.pad)
    if nd != 2:
        raise TDLError(f"{op}: {nd}-D data is not described, only 2-D")
    stride, dilate, pad = (per_dim(attrs.stride, nd, 1), per_dim(attrs.dilate, nd, 1), per_dim(attrs.pad, nd, 0))
    kernel = tuple(attrs.kernel)
    in_per_group, out_per_group = data.shape[1] // attrs.num_group, attrs.num_filter // attrs.num_group
    per_deformable = data.shape[1] // attrs.num_deformable_group
    outs = offset.shape[2:]
    # each output position's unmoved window corner, (y stride - pad, x stride - pad): indices, as tensors (a
    # shard's kernel places its own rows from 0, so the proof keeps splits of the positions off MXNet's kernel)
    top = compute("top", (outs[0],), lambda y: IndexValue(y * stride[0] - pad[0]))
    left = compute("left", (outs[1],), lambda x: IndexValue(x * stride[1] - pad[1]))
    group_of = compute("deformable_group", (data.shape[1],), lambda c: IndexValue(c // per_deformable))
    sample = Opaque("deformable_taps" if mask is None else "modulated_taps",
                    _deformable_taps(kernel, dilate, modulated=mask is not None))
    with_bias = bias is not None and not attrs.no_bias

    def out(b: Var, co: Var, y: Var, x: Var) -> ValueExpr:
        group = (co // out_per_group) * in_per_group if attrs.num_group > 1 else 0

        def term(v: tuple[Var, ...]) -> ValueExpr:
            ci, dy, dx = v
            channel = group + ci
            args = [data[b, channel, :, :], offset[b, :, y, x], group_of[channel], top[y], left[x]]
            if mask is not None:
                args.append(mask[b, :, y, x])
            return sample(*args)[dy, dx] * weight[co, ci, dy, dx]

        total = Sum(nary(["ci", "dy", "dx"], term), extents=(in_per_group, *kernel))
        return total + bias[co] if with_bias else total
    return out


@dataclass(frozen=True)
class ModulatedDeformableConvolutionAttrs(DeformableConvolutionAttrs):
    im2col_step: int = 64           # how many images MXNet's kernel unfolds at once: not the result


@tdl_op("_contrib_ModulatedDeformableConvolution", inputs=("data", "offset", "mask", "weight", "bias?"),
        attrs=ModulatedDeformableConvolutionAttrs, cases=[
    Case(shapes=((2, 3, 5, 5), (2, 18, 5, 5), (2, 9, 5, 5), (4, 3, 3, 3), (4,)),
         attrs={"kernel": (3, 3), "num_filter": 4, "pad": (1, 1)}),
    Case(shapes=((1, 4, 6, 7), (1, 16, 3, 7), (1, 8, 3, 7), (4, 2, 2, 2)),
         attrs={"kernel": (2, 2), "num_filter": 4, "stride": (2, 1), "dilate": (1, 2), "pad": (0, 1),
                "num_group": 2, "num_deformable_group": 2, "no_bias": True}),
    Case(shapes=((2, 2, 4, 4), (2, 18, 4, 4), (2, 9, 4, 4), (2, 2, 3, 3), (2,)),
         attrs={"kernel": (3, 3), "num_filter": 2, "pad": (1, 1)}),
])
def modulated_deformable_convolution(data: TensorVar, offset: TensorVar, mask: TensorVar, weight: TensorVar,
                                     bias: TensorVar | None, attrs: ModulatedDeformableConvolutionAttrs) -> Callable:
    """DCNv2: the deformable convolution whose every tap is also weighted by mask[b, tap of deformable group, y,
    x], and sampled as MXNet's modulated im2col samples (0 unless -1 < y < H and -1 < x < W, a corner outside
    the image reading 0). Splits as _contrib_DeformableConvolution. (MXNet 1.9.1 implements its backward on GPUs
    only: on CPU contexts it is planned and its forward run, not trained.)"""
    return _deformable("_contrib_ModulatedDeformableConvolution", data, offset, mask, weight, bias, attrs)
