"""Stage 5 of the pipeline: partitioned graphs bound on k devices, trained and measured (``train``, ``run``),
their memory (``memory``), and the values they train with and save (``data``)."""

# ``tofu run --check``'s default tolerance: the largest relative difference from one device (outputs, gradients,
# losses, parameter updates) that passes. Above the largest difference a ReLU or max-pooling kink made here (3.1e-2,
# one step's update of wresnet-tiny at k = 2), below the smallest that a partitioning bug made (0.2); smooth models
# agree to 1e-5 (docs/runtime.md, "The check")
DEFAULT_RTOL = 5e-2

# ``--check``'s second opinion (tofu.runtime.run): a step whose float32 comparison exceeds --rtol is run again on both
# sides in float64, from the same state and batch, and judged at --rtol x FLOAT64_SCALE (1e-9 at the default 5e-2).
# float64's unit roundoff is 2^-29 = 1.9e-9 of float32's: rounding that a network amplifies smoothly shrinks by that
# ratio (measured 1.4e-9 to 1.7e-9: mlp, the BatchNorm network of tests/runtime/test_bn_check.py), and the scale is
# about ten times it, so such rounding passes in float64 whatever --rtol float32 missed by up to a factor of ten.
# Rounding that carries a ReLU input across its kink in one run and not in the other (Gluon's inceptionv3: float32
# differs by 0.10 after thousands of such crossings) does not scale at all: it mostly does not happen in float64,
# where that network's partitioned run agrees with one device to 1.5e-12. A partitioning error is as large in either
# format: a BatchNorm variance divided by n - 1 differs by 7e-4 to 9e-4 in float64, 1e5 times the default's 1e-9
# (docs/runtime.md, "The check")
FLOAT64_SCALE = 2e-8


def float64_rtol(rtol: float) -> float:
    """The float64 tolerance of ``--check``'s second opinion beside the float32 tolerance ``rtol``."""
    return rtol * FLOAT64_SCALE
