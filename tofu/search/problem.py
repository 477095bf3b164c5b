"""The one-cut problem: the narrow interface between the cost model and every solver.

A cut splits every tensor group over ``k`` workers along one of its candidate dimensions and runs every op
group with one of its strategies. Its cost is separable per (op group, tensor group):

    cost(x, y) = sum_g [ const[g][y_g] + sum_{(t, table) in terms[g]} table[y_g][x_t] ]

with ``x_t`` the choice (index into ``tensors[t].choices``) of tensor group t and ``y_g`` the strategy index
of op group g. Solvers (exact DP, brute force, ILP, the paper's baselines) read only this module's types.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tofu.errors import SearchError


@dataclass(frozen=True)
class TensorGroup:
    """Tensors that share one partition (a tensor and its gradient; tied timesteps; element-wise chains).

    ``choices`` are dimensions (None: replicated, when no dimension divides by k, and last for a parameter's
    group when the problem offers parameters whole: ``cost.build_cut``'s ``whole_params``); ``nbytes`` is the
    group's total size, ``names`` its members."""

    id: int
    name: str
    choices: tuple[int | None, ...]
    nbytes: int
    names: tuple[str, ...]
    shape: tuple[int, ...]


@dataclass(frozen=True)
class OpGroup:
    """Ops that share one strategy (tied timesteps of an RNN layer). ``strategies`` name the split index
    variables; ``produces[s]`` the (tensor group, dimension) each output gets under strategy s (None for a
    partial or replicated output); ``terms`` the cost tables per touched tensor group."""

    id: int
    name: str
    strategies: tuple[str, ...]
    kinds: tuple[str, ...]                                  # "output" | "reduce" per strategy
    const: tuple[float, ...]                                # per strategy
    terms: tuple[tuple[int, tuple[tuple[float, ...], ...]], ...]   # (tensor group, table[strategy][choice])
    produces: tuple[tuple[tuple[int, int | None], ...], ...]
    order: int                                              # topological position of its first op

    def tensors(self) -> tuple[int, ...]:
        return tuple(t for t, _ in self.terms)


@dataclass(frozen=True)
class CutProblem:
    k: int
    tensors: tuple[TensorGroup, ...]
    ops: tuple[OpGroup, ...]                                # in topological order of their first op

    def cost(self, x: Sequence[int], y: Sequence[int]) -> float:
        """The cost of an assignment (choice index per tensor group, strategy index per op group)."""
        return sum(self.op_cost(g, y[g.id], x) for g in self.ops)

    @staticmethod
    def op_cost(g: OpGroup, s: int, x: Sequence[int] | Mapping[int, int]) -> float:
        return g.const[s] + sum(table[s][x[t]] for t, table in g.terms)

    def check(self, x: Sequence[int], y: Sequence[int]) -> None:
        if len(x) != len(self.tensors) or len(y) != len(self.ops):
            raise SearchError("assignment does not match the problem")


@dataclass(frozen=True)
class CutSolution:
    """Choice index per tensor group and strategy index per op group, with the cut's cost."""

    x: tuple[int, ...]
    y: tuple[int, ...]
    cost: float
