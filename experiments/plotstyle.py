"""One table of the plan finders: order, label and colour in every figure (no free strings in plots)."""
from __future__ import annotations

import enum


class Algo(enum.Enum):
    TOFU = ("tofu", "Tofu (best of recursion and one cut)", "#1b7837")
    TOFU_RECURSIVE = ("tofu-recursive", "Tofu recursion alone", "#2e9e4f")
    DP_FLAT = ("dp-flat", "flat DP (one k-way cut)", "#5aae61")
    ILP = ("ilp", "recursive ILP", "#a6dba0")
    ICML18 = ("icml18", "ICML18 (batch/channel)", "#762a83")
    EQUALCHOP = ("equalchop", "EqualChop", "#9970ab")
    SPARTAN = ("spartan", "Spartan", "#c2a5cf")
    ALLROW = ("allrow-greedy", "AllRow-Greedy", "#e08214")
    DATA_PARALLEL = ("data-parallel", "data parallel", "#b35806")

    def __init__(self, key: str, label: str, color: str):
        self.key, self.label, self.color = key, label, color

    @classmethod
    def of(cls, key: str) -> "Algo":
        for a in cls:
            if a.key == key:
                return a
        raise KeyError(key)


class SystemStyle(enum.Enum):
    """The systems of the throughput comparison (:class:`tofu.sim.systems.System`): order, label, colour."""

    IDEAL = ("ideal", "Ideal", "#bdbdbd")
    SMALL_BATCH = ("smallbatch", "SmallBatch", "#4393c3")
    SWAP = ("swap", "Swap", "#f4a582")
    OP_PLACEMENT = ("opplacement", "OpPlacement", "#b2abd2")
    TOFU = ("tofu", "Tofu", "#1b7837")

    def __init__(self, key: str, label: str, color: str):
        self.key, self.label, self.color = key, label, color

    @classmethod
    def of(cls, key: str) -> "SystemStyle":
        for s in cls:
            if s.key == key:
                return s
        raise KeyError(key)


def save(fig, out, dpi: int = 120) -> None:
    """Writes ``fig`` to ``out`` (its folder made if missing) and says so."""
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    print(f"wrote {out}")
