"""Stage 2 of the pipeline: partition analysis of TDL descriptions (PAPER.md, "Partition analysis").

``interval`` (symbolic interval arithmetic) -> ``strategies`` (an op's partition strategies and regions) ->
``shard`` and ``equivalence`` (running a worker's shard with MXNet's own kernel, proven right).
"""
from tofu.analysis.interval import Interval, bound
from tofu.analysis.strategies import (Analysis, PartialSum, PartitionStrategy, Region, Replicate, SplitDim,
                                      SymbolicStrategy, Unsplittable, analyse, instantiate, strategies)

__all__ = ["Analysis", "Interval", "PartialSum", "PartitionStrategy", "Region", "Replicate", "SplitDim",
           "SymbolicStrategy", "Unsplittable", "analyse", "bound", "instantiate", "strategies"]
