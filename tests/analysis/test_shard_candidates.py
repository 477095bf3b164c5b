"""Attribute rewrites that let MXNet's kernel run a shard, beyond the registered Cases: every worker's kernel
output, run with the attributes ``shard_call`` finds, must equal MXNet's unpartitioned output cropped to the
worker's output region.

* an offset equal to the number of inputs (an image crop's ``x = 1``) may become 0, the piece starting where
  the crop does;
* Crop like a second input (``num_args=2``) split spatially drops that input and sets ``h_w`` to the piece's
  extents;
* an image resize's ``size`` is (width, height), the reverse of its (N)HWC output's extents;
* squeeze without ``axis`` pins the full input's unit axes once a worker's batch is 1.
"""
import numpy as np
import pytest

from tofu.analysis.shard import _windows, run_shard, shard_call
from tofu.analysis.strategies import SplitDim, strategies
from tofu.graph.attrs import Attrs
from tofu.graph.single_op import infer_op_shapes, run_op
from tofu.tdl.describe import describe


def _split_outputs_run(op, attrs, shapes, k):
    """Every output-splitting strategy at ``k`` workers, with each worker's kernel call; checks each worker's
    output against MXNet's whole output cropped to the worker's region."""
    attrs = Attrs.of(**attrs)
    desc = describe(op, attrs, shapes, infer_op_shapes(op, attrs, shapes))
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    (expected,) = run_op(op, attrs, inputs)
    checked = []
    for s in strategies(desc, k):
        if not isinstance(s.outputs[0], SplitDim):
            continue
        calls = [shard_call(op, attrs, s, w, desc) for w in range(k)]
        for w, call in enumerate(calls):
            (got,) = run_shard(call, s, w, lambda a, xs: run_op(op, a, xs), inputs)
            np.testing.assert_allclose(got, expected[s.output_regions[w][0].slices()], rtol=1e-5, atol=1e-6,
                                       err_msg=f"{s} worker {w}")
        checked.append((s, calls))
    return checked


@pytest.mark.parametrize("shape,attrs,k", [
    ((5, 6, 3), {"x": 1, "y": 1, "width": 4, "height": 4}, 2),
    ((5, 6, 3), {"x": 1, "y": 1, "width": 4, "height": 4}, 4),
    ((2, 6, 5, 1), {"x": 1, "y": 2, "width": 4, "height": 2}, 2),
])
def test_image_crop_runs_every_split_at_offset_zero(shape, attrs, k):
    checked = _split_outputs_run("_image_crop", attrs, (shape,), k)
    assert {s.outputs[0].dim for s, _ in checked} >= {len(shape) - 3, len(shape) - 2}   # rows and columns
    for _, calls in checked:
        assert all(c.attrs["x"] == c.attrs["y"] == 0 for c in calls)


@pytest.mark.parametrize("shapes,attrs,k", [
    (((1, 2, 8, 8), (1, 1, 4, 6)), {"num_args": 2, "offset": (1, 2)}, 2),
    (((1, 2, 8, 8), (1, 1, 4, 6)), {"num_args": 2, "offset": (1, 2)}, 4),
    (((2, 2, 9, 7), (1, 3, 4, 2)), {"num_args": 2, "center_crop": True}, 2),
])
def test_crop_like_split_spatially_sets_h_w_to_the_piece(shapes, attrs, k):
    checked = _split_outputs_run("Crop", attrs, shapes, k)
    spatial = [(s, calls) for s, calls in checked if s.outputs[0].dim >= 2]
    assert spatial
    for s, calls in spatial:
        for w, c in enumerate(calls):
            assert c.inputs == (0,) and c.attrs["num_args"] == 1
            assert c.attrs["h_w"] == s.output_regions[w][0].shape[2:]


@pytest.mark.parametrize("shape,size,k", [((6, 4, 3), (8, 12), 2), ((2, 4, 6, 1), (3, 8), 2),
                                          ((2, 4, 6, 1), (3, 8), 4)])
def test_image_resize_split_spatially_resizes_the_piece(shape, size, k):
    checked = _split_outputs_run("_image_resize", {"size": size, "interp": 1}, (shape,), k)
    rows, cols = len(shape) - 3, len(shape) - 2
    assert {rows} <= {s.outputs[0].dim for s, _ in checked}
    for s, calls in checked:
        if s.outputs[0].dim in (rows, cols):
            for c in calls:      # (width, height) of the kernel's output on the piece
                (out,) = infer_op_shapes("_image_resize", c.attrs, c.input_shapes())
                assert c.attrs["size"] == (out[cols], out[rows])


@pytest.mark.parametrize("shape,k", [((2, 1, 3, 1), 2), ((4, 1, 3), 4), ((2, 3, 1), 2)])
def test_squeeze_keeps_the_batch_axis_of_one(shape, k):
    checked = _split_outputs_run("squeeze", {}, (shape,), k)
    assert checked
    units = tuple(d for d, n in enumerate(shape) if n == 1)
    for s, calls in checked:
        if s.outputs[0].dim == 0:
            assert all(c.attrs["axis"] == units for c in calls)


@pytest.mark.parametrize("value,full,shard,expected", [
    ((12, 8), (8, 12, 4), (4, 12, 4), [(12, 4)]),       # HWC: size is (width, height)
    ((9, 4), (2, 4, 9, 4), (2, 2, 9, 4), [(9, 2)]),     # NHWC: the run skips the channels
    ((4, 6), (2, 3, 4, 6), (2, 3, 2, 6), [(2, 6)]),     # trailing, in order
    ((4, 4), (2, 4, 4, 4), (2, 4, 2, 4), [(2, 4), (4, 2)]),   # several runs: the trailing one first
    ((3, 5), (2, 4, 6), (2, 4, 3), []),
])
def test_windows_match_runs_in_order_or_reversed(value, full, shard, expected):
    assert _windows(value, full, shard) == expected
