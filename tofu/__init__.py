"""tofu-mx: automatic partitioning of MXNet training graphs across devices (Tofu, EuroSys 2019).

Pipeline (DESIGN.md): tofu.graph -> tofu.analysis -> tofu.search -> tofu.rewrite -> tofu.runtime; beside it
tofu.tdl (the operator description language) and tofu.models (the model zoo).
"""
import os as _os

# MXNet reads these at bind time; set once here so every entry point (CLI, tests, scripts) agrees.
# The MKLDNN subgraph backend adds spurious cross-device copies and breaks explicit backward binds.
_os.environ.setdefault("MXNET_SUBGRAPH_BACKEND", "NONE")
_os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")

__version__ = "0.1.0"
