"""Bilinear resizing beyond the registered Cases: every output-shape mode and both corner conventions against
MXNet's kernel and a loop-based reference written from the definition, bilinear UpSampling at several scales,
the settings the descriptions refuse, and a spatial split that runs with the output extent following the piece.
"""
from fractions import Fraction

import numpy as np
import pytest

from tofu.analysis.shard import shard_call
from tofu.analysis.strategies import strategies
from tofu.errors import TDLError
from tofu.graph.single_op import infer_op_shapes
from tofu.tdl.describe import Case, describe
from tofu.tdl.interpret import evaluate

from tests.operators.test_conformance import check_conformance, random_inputs

RESIZE = "_contrib_BilinearResize2D"


def resize_reference(x, out_hw, align_corners):
    """out[n, c, y, x]: bilinear interpolation, one output element at a time, at the source position
    y (H - 1) / (OH - 1) (aligned corners) or (y + 1/2) H / OH - 1/2 (half-pixel centres) clipped to
    [0, H - 1]; a kept extent copies, a single output reads position 0."""
    def source(o, n_in, n_out):
        if n_in == n_out or n_out == 1:
            return Fraction(o if n_in == n_out else 0)
        if align_corners:
            return Fraction(o * (n_in - 1), n_out - 1)
        return min(max(Fraction(2 * o + 1, 2) * Fraction(n_in, n_out) - Fraction(1, 2), Fraction(0)),
                   Fraction(n_in - 1))

    n, c, h, w = x.shape
    out = np.zeros((n, c, *out_hw))
    for y in range(out_hw[0]):
        for z in range(out_hw[1]):
            sy, sz = source(y, h, out_hw[0]), source(z, w, out_hw[1])
            y0, z0 = int(sy), int(sz)
            fy, fz = float(sy - y0), float(sz - z0)
            y1, z1 = min(y0 + 1, h - 1), min(z0 + 1, w - 1)
            out[:, :, y, z] = ((1 - fy) * ((1 - fz) * x[:, :, y0, z0] + fz * x[:, :, y0, z1])
                               + fy * ((1 - fz) * x[:, :, y1, z0] + fz * x[:, :, y1, z1]))
    return out


RESIZE_CASES = [
    Case(shapes=((2, 3, 3, 5),), attrs={"height": 8, "width": 4, "align_corners": align})
    for align in (True, False)] + [
    Case(shapes=((1, 2, 4, 6),), attrs={"height": 1, "width": 6, "align_corners": align})
    for align in (True, False)] + [
    Case(shapes=((1, 2, 7, 5),), attrs={"height": 3, "width": 9, "align_corners": False}),
    Case(shapes=((1, 2, 4, 6),), attrs={"scale_height": 1.3, "scale_width": 1.7, "align_corners": False}),
] + [
    Case(shapes=((1, 2, 5, 6),), attrs={"mode": mode, "scale_height": 2.0, "scale_width": 0.5,
                                        "align_corners": align})
    for mode in ("odd_scale", "to_even_down", "to_even_up", "to_odd_down", "to_odd_up") for align in (True, False)]


@pytest.mark.parametrize("case", RESIZE_CASES, ids=str)
def test_resize_matches_mxnet_and_reference(case):
    check_conformance(RESIZE, case)
    attrs = case.parsed_attrs()
    (x,) = random_inputs(case)
    (out_shape,) = infer_op_shapes(RESIZE, attrs, case.shapes)
    (got,) = evaluate(describe(RESIZE, attrs, case.shapes, [out_shape]), [x])
    want = resize_reference(x.astype(np.float64), out_shape[2:], case.attrs.get("align_corners", True))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("scale", [1, 2, 3, 4])
def test_bilinear_upsampling_matches_mxnet(scale):
    taps = 2 * scale - scale % 2
    check_conformance("UpSampling", Case(shapes=((1, 3, 3, 2), (3, 1, taps, taps)),
                                         attrs={"scale": scale, "sample_type": "bilinear", "num_filter": 3,
                                                "num_args": 1}))


@pytest.mark.parametrize("op,attrs,shapes,message", [
    (RESIZE, {"mode": "like"}, [(1, 2, 3, 3), (1, 2, 5, 5)], "mode 'like' is not described"),
    ("UpSampling", {"scale": 2, "sample_type": "bilinear", "num_filter": 2}, [(1, 4, 3, 3), (4, 1, 4, 4)],
     "one filter per channel"),
    ("UpSampling", {"scale": 2, "sample_type": "bilinear", "num_filter": 4}, [(1, 4, 3, 3)],
     "reads data and weight"),
])
def test_refused_settings_name_what_is_unsupported(op, attrs, shapes, message):
    with pytest.raises(TDLError, match=message):
        describe(op, Case(shapes=tuple(shapes), attrs=attrs).parsed_attrs(), shapes, [(1, 4, 6, 6)])


def test_resize_split_on_height_runs_with_the_height_of_the_piece():
    """Rows up by 3 with aligned corners: each worker resizes its rows (a halo row included) to
    (rows - 1) * 3 + 1 outputs and keeps its part."""
    case = Case(shapes=((1, 2, 6, 4),), attrs={"height": 16, "width": 4})
    attrs = case.parsed_attrs()
    desc = describe(RESIZE, attrs, case.shapes, infer_op_shapes(RESIZE, attrs, case.shapes))
    (split,) = [s for s in strategies(desc, 2) if s.kind == "output" and s.outputs[0].dim == 2]
    for worker in range(2):
        call = shard_call(RESIZE, attrs, split, worker, desc)
        rows = call.regions[0].shape[2]
        assert call.keep is not None and call.attrs["height"] == (rows - 1) * 3 + 1


def crop_reference(x, out_hw, offset, center):
    """x[:, :, oy:oy + h, ox:ox + w], the offset centred as floor((H - h) / 2) when asked."""
    h, w = out_hw
    oy, ox = ((x.shape[2] - h) // 2, (x.shape[3] - w) // 2) if center else offset
    return x[:, :, oy:oy + h, ox:ox + w]


@pytest.mark.parametrize("shape,hw,center", [((1, 2, 7, 8), (3, 4), True), ((1, 2, 7, 8), (4, 5), True),
                                             ((1, 2, 7, 8), (2, 2), True), ((1, 2, 6, 5), (3, 4), False)])
def test_crop_matches_mxnet_and_reference(shape, hw, center):
    case = Case(shapes=(shape,), attrs={"num_args": 1, "h_w": hw, "center_crop": center, "offset": (2, 1)})
    check_conformance("Crop", case)
    (x,) = random_inputs(case)
    (got,) = evaluate(describe("Crop", case.parsed_attrs(), case.shapes, [shape[:2] + hw]), [x])
    np.testing.assert_array_equal(got, crop_reference(x, hw, (2, 1), center))


def adaptive_reference(x, out_hw):
    """out[.., i, j]: the mean of rows [floor(i H / OH), ceil((i + 1) H / OH)) and likewise for columns."""
    def window(i, n, m):
        return slice(i * n // m, -(-(i + 1) * n // m))
    out = np.zeros(x.shape[:2] + tuple(out_hw))
    for i in range(out_hw[0]):
        for j in range(out_hw[1]):
            out[:, :, i, j] = x[:, :, window(i, x.shape[2], out_hw[0]), window(j, x.shape[3], out_hw[1])].mean(
                axis=(2, 3))
    return out


@pytest.mark.parametrize("shape,size", [((1, 2, 7, 5), (3, 3)), ((1, 2, 10, 3), (4, 5)), ((2, 1, 5, 9), (5, 2)),
                                        ((1, 2, 6, 6), (6,)), ((1, 2, 3, 4), (1, 1))])
def test_adaptive_avg_pooling_matches_mxnet_and_reference(shape, size):
    op = "_contrib_AdaptiveAvgPooling2D"
    case = Case(shapes=(shape,), attrs={"output_size": size})
    check_conformance(op, case)
    (x,) = random_inputs(case)
    out_hw = size * 2 if len(size) == 1 else size
    (got,) = evaluate(describe(op, case.parsed_attrs(), case.shapes, [shape[:2] + out_hw]), [x])
    np.testing.assert_allclose(got, adaptive_reference(x.astype(np.float64), out_hw), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape,size", [((3, 5, 2), (8, 6)), ((1, 7, 4, 3), (3, 2)), ((5, 1, 3), (1, 4)),
                                        ((6, 6, 1), (4, 9))])
def test_image_resize_is_half_pixel_bilinear(shape, size):
    """OpenCV's bilinear resizing of float images: the half-pixel reference of _contrib_BilinearResize2D,
    except that a single output row or column reads the half-pixel centre, not row 0."""
    case = Case(shapes=(shape,), attrs={"size": size, "interp": 1})
    check_conformance("_image_resize", case)
    (x,) = random_inputs(case)
    (out_shape,) = infer_op_shapes("_image_resize", case.parsed_attrs(), case.shapes)
    (got,) = evaluate(describe("_image_resize", case.parsed_attrs(), case.shapes, [out_shape]), [x])
    nchw = np.moveaxis(x.reshape((-1,) + shape[-3:]).astype(np.float64), 3, 1)
    if size[1] > 1 and size[0] > 1:
        want = np.moveaxis(resize_reference(nchw, (size[1], size[0]), False), 1, 3).reshape(out_shape)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op,attrs,shapes,message", [
    ("Crop", {"num_args": 1, "h_w": (2, 2)}, [(2, 3, 4)], "crops NCHW data"),
    ("Crop", {"num_args": 1, "h_w": (2, 2), "offset": (1,)}, [(1, 2, 4, 4)], "needs two entries"),
    ("_contrib_AdaptiveAvgPooling2D", {"output_size": (2, 2)}, [(2, 3, 4)], "MXNet pools NCHW"),
    ("_image_resize", {"size": (4, 4), "interp": 2}, [(3, 3, 3)], "interp=2 is not described"),
    ("_image_resize", {"size": (4, 4)}, [(3, 3)], "MXNet resizes HWC or NHWC"),
    ("_image_crop", {"x": 0, "y": 0, "width": 2, "height": 2}, [(3, 3)], "MXNet crops HWC or NHWC"),
])
def test_refused_crop_and_pooling_settings(op, attrs, shapes, message):
    with pytest.raises(TDLError, match=message):
        describe(op, Case(shapes=tuple(shapes), attrs=attrs).parsed_attrs(), shapes, [(1, 2, 2, 2)])


@pytest.mark.parametrize("op,attrs,shape,dim", [
    ("Crop", {"num_args": 1, "h_w": (4, 6), "center_crop": True}, (1, 2, 7, 9), 2),
    ("_contrib_AdaptiveAvgPooling2D", {"output_size": (4, 4)}, (1, 2, 8, 6), 2),
])
def test_spatial_split_takes_the_output_size_of_the_piece(op, attrs, shape, dim):
    """The size attribute (h_w, output_size) equals the output's trailing extents: a worker's kernel takes
    its piece's."""
    case = Case(shapes=(shape,), attrs=attrs)
    parsed = case.parsed_attrs()
    desc = describe(op, parsed, case.shapes, infer_op_shapes(op, parsed, case.shapes))
    (split,) = [s for s in strategies(desc, 2) if s.kind == "output" and s.outputs[0].dim == dim]
    for worker in range(2):
        call = shard_call(op, parsed, split, worker, desc)
        size = call.attrs["h_w" if op == "Crop" else "output_size"]
        assert size[0] == 2 and call.keep is None
