"""TDL descriptions of the scatter family: operators that write into a tensor at indices read from an input
(``_contrib_index_copy``).

A scatter is described from the output's side, as every TDL description is: for each output element, a
reduction over the scattered positions finds the position whose index equals the element's own (the *writer*),
and the element reads that position's update, or the old value where no position writes it. The scatter
indices are read whole by every worker, and so is the update's scattered dimension (a data-dependent access);
every other dimension partitions. docs/tdl.md ("Scatter: writing into a tensor") explains the idiom.
"""
from __future__ import annotations

from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)


@tdl_op("_contrib_index_copy", inputs=("old_tensor", "index_vector", "new_tensor"), cases=[
    Case(shapes=((5, 3), (2,), (2, 3)), ints=((1, 5),), unique=(1,)),
    Case(shapes=((6, 2, 3), (6,), (6, 2, 3)), ints=((1, 6),), unique=(1,)),      # a permutation of the rows
    Case(shapes=((4,), (3,), (3,)), ints=((1, 4),), unique=(1,)),
])
def index_copy(old_tensor: TensorVar, index_vector: TensorVar, new_tensor: TensorVar, attrs: NoAttrs) -> Callable:
    """out[i, x..] = new_tensor[p, x..] if trunc(index_vector[p]) == i (the last such p), else old_tensor[i, x..]
    (rows of old_tensor replaced by new_tensor's; an index outside [0, n - 1] makes MXNet write out of bounds)."""
    n = old_tensor.shape[0]

    def out(i: Var, *x: Var) -> ValueExpr:
        writes_i = lambda p: eq(trunc(index_vector.at(p, valid=(0, n - 1))), IndexValue(i))
        writer = Max(lambda p: where(writes_i(p), IndexValue(p), -1.0))      # the last p writing row i, or -1
        return where(ge(writer, 0.0), new_tensor[(writer, *x)], old_tensor[(i, *x)])
    return out
