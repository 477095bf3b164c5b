"""Stage 4 of the pipeline: a plan turned into one partitioned MXNet symbol (see ``apply_plan``)."""
from tofu.rewrite.apply_plan import HeadPiece, PartitionedGraph, ShardVar, apply_plan, gather_values, shard_values
from tofu.errors import RewriteError

__all__ = ["HeadPiece", "PartitionedGraph", "RewriteError", "ShardVar", "apply_plan", "gather_values",
           "shard_values"]
