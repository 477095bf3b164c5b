"""tofu-mx: automatic partitioning of MXNet training graphs across devices (Tofu, EuroSys 2019).

Pipeline (DESIGN.md): tofu.graph -> tofu.analysis -> tofu.search -> tofu.rewrite -> tofu.runtime; beside it
tofu.tdl (the operator description language) and tofu.models (the model zoo).
"""
import os as _os

# MXNet reads these at bind time; set once here so every entry point (CLI, tests, scripts) agrees.
# The MKLDNN subgraph backend adds spurious cross-device copies and breaks explicit backward binds.
_os.environ.setdefault("MXNET_SUBGRAPH_BACKEND", "NONE")
_os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")
# MKLDNN's slice of a blocked-layout tensor followed by a cross-device copy kills the process (SIGFPE,
# reproduced with a Convolution whose channel slice feeds another device): partitioned graphs run MXNet's
# native CPU kernels. Read once, at the first operator MXNet runs. Their fallback notices are silenced.
_os.environ.setdefault("MXNET_MKLDNN_ENABLED", "0")
_os.environ.setdefault("MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "0")
# Past 8 gradients of one entry MXNet sums them in place, and across devices that sum comes out wrong (an
# activation read by its own device and sliced for 8 others at k = 8 lost most of its gradient): sum out of place.
_os.environ.setdefault("MXNET_EXEC_INPLACE_GRAD_SUM_CAP", "1000000")

# Common-expression elimination merges identical ops that the rewriter placed on different devices (two devices'
# identical slices of one piece), so MXNet copies less than the plan says (48 B on Gluon's resnet18_v2 at k = 2,
# 24 B on gpt-tiny at k = 8) and runs one device's op for another: each device computes its own ops.
_os.environ.setdefault("MXNET_ELIMINATE_COMMON_EXPR", "0")

__version__ = "0.1.0"
