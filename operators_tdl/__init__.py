"""TDL descriptions of MXNet operators, one module per operator family: semantics only.

No partition rule, device name or cost appears here; ``tofu.analysis`` derives strategies from these
descriptions. To add an operator, add a ``@tdl_op`` function to the family's module (or a new module listed
in FAMILIES); every module imports the DSL with ``from tofu.tdl.lang import *``; see docs/tdl.md.
"""

FAMILIES = ("elementwise", "reduce", "optimizer", "matmul", "conv", "pooling", "norm", "softmax", "shape",
            "embedding", "linalg", "sequence", "ranges", "resize", "scatter", "random")
