"""TDL descriptions of the range family: input-less tensors whose values are their own index.

``_arange`` (``mx.sym.arange``): the value is an affine function of the (repeated) position, so a split of
the output needs no input and no exchange; models use it for positions and causal masks.
"""
from __future__ import annotations

from tofu.tdl.lang import *  # noqa: F403  (the DSL: tofu.tdl.lang.__all__)


@dataclass(frozen=True)
class ArangeAttrs:
    start: float
    stop: float | None = None
    step: float = 1.0
    repeat: int = 1
    infer_range: bool = False
    dtype: str = "float32"


@tdl_op("_arange", inputs=(), attrs=ArangeAttrs, cases=[
    Case(shapes=(), attrs={"start": 0, "stop": 5}),
    Case(shapes=(), attrs={"start": 2.5, "stop": 9, "step": 1.5, "repeat": 2}),
    Case(shapes=(), attrs={"start": 4, "stop": -2, "step": -2}),
])
def arange(attrs: ArangeAttrs):
    """out[i] = start + (i // repeat) * step  (no inputs; MXNet sizes out from start, stop, step, repeat)."""
    if attrs.repeat < 1:
        raise TDLError(f"_arange: repeat {attrs.repeat} must be positive")
    return lambda i: IndexValue(i // attrs.repeat) * attrs.step + attrs.start
