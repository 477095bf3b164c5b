"""CTCLoss's second output is its hidden gradient (what MXNet's backward returns for the activations), which the
conformance tests, comparing visible outputs only, never read. Checked here against MXNet's autograd of the
summed loss, with both blank conventions, repeated labels (the skip rule) and padded label rows."""
import mxnet as mx
import numpy as np
import pytest

from operators_tdl.sequence import _ctc


@pytest.mark.parametrize("blank", ["first", "last"])
def test_the_ctc_gradient_is_mxnets_autograd_of_the_summed_loss(blank):
    rng = np.random.default_rng(7)
    steps, n_seq, classes = 9, 4, 5
    x = rng.standard_normal((steps, n_seq, classes)).astype(np.float32)
    pad = 0 if blank == "first" else -1
    lo, hi = (1, classes - 1) if blank == "first" else (0, classes - 2)
    labels = rng.integers(lo, hi + 1, size=(n_seq, 4)).astype(np.float32)
    labels[0, 1] = labels[0, 0]              # a repeated label: the blank between them is obligatory
    labels[1, 3] = pad                       # padded rows
    labels[2, 2:] = pad
    data = mx.nd.array(x)
    data.attach_grad()
    with mx.autograd.record():
        loss = mx.nd.CTCLoss(data, mx.nd.array(labels), blank_label=blank)
    loss.backward()
    ours_loss, ours_grad = _ctc(x.transpose(1, 0, 2), labels, blank == "first")
    np.testing.assert_allclose(ours_loss, loss.asnumpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours_grad.transpose(1, 0, 2), data.grad.asnumpy(), rtol=1e-4, atol=1e-5)
