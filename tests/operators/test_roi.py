"""ROIAlign with aligned=True (half-pixel corners, no 1 x 1 minimum) on well-formed regions (x1 < x2, y1 < y2):
MXNet aborts the process on any other, which the generic cases' uniform draws would give. The description
against MXNet's kernel; and a region whose batch index is negative, which the description pools to zeros, as
MXNet's kernel means to (MXNet 1.9.1's CPU kernel writes that zero into another region's output and leaves the
region's own unset, a bug of its own: the other regions are compared with its run without that region)."""
import mxnet as mx
import numpy as np
import pytest

from tofu.graph.attrs import Attrs
from tofu.tdl.describe import describe
from tofu.tdl.interpret import evaluate


@pytest.mark.parametrize("ratio", [-1, 2])
def test_aligned_roi_align_is_mxnets(ratio):
    rng = np.random.default_rng(3)
    data = rng.standard_normal((3, 2, 7, 9)).astype(np.float32)
    corners = rng.uniform(0.0, 8.0, size=(5, 2, 2))
    low, high = corners.min(1), corners.max(1) + 0.5                  # (x, y) of each region's corners
    rois = np.concatenate([rng.integers(0, 3, size=(5, 1)), low, high], axis=1).astype(np.float32)
    rois[4, 0] = -1.0                                                  # no image: zeros
    attrs = {"pooled_size": (2, 3), "spatial_scale": 0.8, "sample_ratio": ratio, "aligned": True}
    kernel = lambda r: mx.nd.contrib.ROIAlign(mx.nd.array(data), mx.nd.array(r), **attrs).asnumpy()
    want = kernel(rois[:4])
    desc = describe("_contrib_ROIAlign", Attrs.of(**attrs), (data.shape, rois.shape), ((5,) + want.shape[1:],))
    (got,) = evaluate(desc, [data, rois])
    assert np.abs(want).min() > 0
    np.testing.assert_allclose(got[:4], want, rtol=1e-4, atol=1e-5)
    assert not got[4].any()
