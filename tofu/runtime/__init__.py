"""Stage 5 of the pipeline: partitioned graphs bound on k devices, trained and measured (``train``, ``run``),
their memory (``memory``), and the values they train with and save (``data``)."""

# ``tofu run --check``'s default tolerance: the largest relative difference from one device (outputs, gradients,
# losses, parameter updates) that passes. Above the largest difference a ReLU or max-pooling kink made here (3.1e-2,
# one step's update of wresnet-tiny at k = 2), below the smallest that a partitioning bug made (0.2); smooth models
# agree to 1e-5 (docs/runtime.md, "The check")
DEFAULT_RTOL = 5e-2
