"""Partitioned training runs with their measurements: a :class:`RunReport` from a graph, a plan and values.

Input: a Graph, its :class:`~tofu.search.plan.Plan`, the partitioned graph, initial values and a batch.
Output: the losses of N SGD-momentum steps, the step times, the bytes of every ``_CrossDeviceCopy`` of the
bound training graph (forward and backward) beside the plan's prediction, and, with ``check``, the largest
differences from the same steps on one device, each step of one device taken from the partitioned run's state
(outputs and gradients of the first step, every step's loss and parameter update).
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from tofu.errors import DivergedError
from tofu.graph.ir import Graph, Role
from tofu.rewrite.apply_plan import PartitionedGraph
from tofu.runtime.checkpoint import CheckpointPolicy, TrainingState, save_training_state, trainer_state
from tofu.runtime.data import loss
from tofu.runtime.train import Trainer, whole_graph
from tofu.search.plan import Plan


@dataclass(frozen=True)
class Check:
    """Largest differences between the partitioned run and one device. Each step of one device starts from the
    partitioned run's state (parameters, auxiliary states, momentum), so a difference is that step's own, not
    one compounded over the steps before (float32 rounding that carries an activation across a ReLU kink
    parts two free trajectories by up to 1e-2 after ten steps; docs/runtime.md, "The check"). A relative
    difference is relative to the largest magnitude of its kind on one device."""

    output: float                 # first step's outputs, absolute
    gradient: float               # first step's parameter gradients, relative
    loss: float                   # losses of every step, absolute
    parameters: float             # every step's parameter update, relative to the largest update
    reference_losses: tuple[float, ...]
    output_rel: float = 0.0       # first step's outputs, relative
    loss_rel: float = 0.0         # losses of every step, relative
    dropout_off: tuple[str, ...] = ()    # Dropout ops run at p = 0 on both sides (their masks cannot match)

    @property
    def max_abs_diff(self) -> float:
        return max(self.output, self.loss)

    def exceeded(self, rtol: float) -> tuple[str, ...]:
        """What differs by more than ``rtol`` (relative), as ``name rel > rtol``; empty when the check passes.
        A NaN difference exceeds any tolerance."""
        rel = {"outputs": self.output_rel, "gradients": self.gradient, "losses": self.loss_rel,
               "parameter updates": self.parameters}
        return tuple(f"{name} {v:.3g} > {rtol:g}" for name, v in rel.items() if not v <= rtol)


@dataclass(frozen=True)
class RunReport:
    model: str
    workers: int
    algo: str
    losses: tuple[float, ...]
    step_seconds: tuple[float, ...]
    bind_seconds: float
    measured_forward_bytes: int
    measured_backward_bytes: int
    copies: int
    predicted_comm_bytes: float
    predicted_per_device_bytes: dict
    check: Check | None = None
    per_device_peak_bytes: tuple[int, ...] | None = None
    final_values: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def measured_comm_bytes(self) -> int:
        return self.measured_forward_bytes + self.measured_backward_bytes

    @property
    def median_step_seconds(self) -> float:
        return statistics.median(self.step_seconds) if self.step_seconds else float("nan")

    def to_json(self) -> dict:
        doc = {"model": self.model, "workers": self.workers, "algo": self.algo, "steps": len(self.losses),
               "losses": list(self.losses), "step_seconds": list(self.step_seconds),
               "median_step_seconds": self.median_step_seconds, "bind_seconds": self.bind_seconds,
               "measured_comm_bytes": self.measured_comm_bytes, "measured_forward_bytes": self.measured_forward_bytes,
               "measured_backward_bytes": self.measured_backward_bytes, "cross_device_copies": self.copies,
               "predicted_comm_bytes": self.predicted_comm_bytes,
               "predicted_per_device_bytes": self.predicted_per_device_bytes,
               "per_device_peak_bytes": list(self.per_device_peak_bytes) if self.per_device_peak_bytes else None}
        if self.check is not None:
            c = self.check
            doc.update({"max_abs_diff": c.max_abs_diff, "output_max_abs_diff": c.output,
                        "output_max_rel_diff": c.output_rel, "gradient_max_rel_diff": c.gradient,
                        "loss_max_abs_diff": c.loss, "loss_max_rel_diff": c.loss_rel,
                        "parameter_max_rel_diff": c.parameters, "reference_losses": list(c.reference_losses),
                        "check_dropout_off": list(c.dropout_off)})
        return doc


def max_rel_diff(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> float:
    """max |a - b| over every element of every tensor, relative to the largest |b| of them all (a tensor whose
    values are all small, a BatchNorm shift, is not held to a tighter absolute bound than the others)."""
    scale = max((float(np.abs(ref).max()) for ref in b.values() if ref.size), default=0.0) or 1.0
    # a parameter the partitioned graph never reads (BatchNorm's gamma under fix_gamma) has no gradient there
    with np.errstate(invalid="ignore", over="ignore"):     # a diverged value's inf - inf is NaN, as it should be
        return max((_largest(a[n] - ref) if n in a else _largest(ref) for n, ref in b.items()), default=0.0) / scale


def _state(graph: Graph, trainer: Trainer, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every variable's whole value now: the partitioned run's parameters and auxiliary states over ``values``
    (auxiliary states that a statistics exchange does not read, BatchNorm's moving statistics, keep theirs)."""
    return {**values, **trainer.parameters((Role.PARAM, Role.AUX))}


def _largest(x: np.ndarray) -> float:
    """max |x| (NaN if any element is NaN: a NaN difference must not pass as 0)."""
    return float(np.abs(x).max()) if x.size else 0.0


def train(graph: Graph, plan: Plan, pg: PartitionedGraph, values: Mapping[str, np.ndarray],
          batch: Mapping[str, np.ndarray], steps: int, reference_symbol=None, ctx: str = "cpu",
          lr: float = 0.05, momentum: float = 0.9,
          progress: Callable[[int, float, float, float | None], None] | None = None, *,
          start: TrainingState | None = None, checkpoint: CheckpointPolicy | None = None,
          dropout_off: tuple[str, ...] = ()) -> RunReport:
    """Training steps of ``pg`` on ``batch`` up to step number ``steps``; with ``reference_symbol`` (the
    unpartitioned model) the same steps on one device beside it, compared.

    ``progress(step, loss, seconds, reference_loss)`` is called after every step. ``start`` (a resumed
    checkpoint) replaces ``values`` with its parameters and momentum and skips the steps it has done;
    ``checkpoint`` saves the state every ``checkpoint.every`` steps (step numbers counted from the start).
    ``dropout_off``: the Dropout ops the caller set to p = 0 for the comparison (reported in the check).

    Raises:
        DivergedError: a step's loss is not finite (on either side), naming the step.
    """
    done = 0
    if start is not None:
        values, done = start.values, start.step
    values = {**values, **batch}
    trainer = Trainer(pg, values, ctx, lr, momentum)
    reference = Trainer(whole_graph(graph, reference_symbol), values, "cpu", lr, momentum) \
        if reference_symbol is not None else None
    if start is not None:
        for t in (trainer, reference):
            if t is not None:
                t.load_momentum(start.momentum)
    # one forward and backward pass (no update) measures the copies, then gives the first step's outputs and
    # gradients; one device makes the same pass, so both runs' auxiliary states move alike
    copies = trainer.copies()
    out_diff = out_rel = grad_diff = 0.0
    if reference is not None:
        got, want = trainer.outputs(), reference.forward_backward()
        with np.errstate(invalid="ignore", over="ignore"):
            out_diff = max(_largest(got[n] - want[n]) for n in want)
        out_rel = max_rel_diff(got, want)
        grad_diff = max_rel_diff(trainer.gradients(), reference.gradients())
    losses, ref_losses = [], []
    update_diff = 0.0
    state = _state(graph, trainer, values) if reference is not None else None
    for i in range(done + 1, steps + 1):
        if reference is not None:      # one device steps from the partitioned run's state: no drift compounds
            reference.load(state)
            reference.load_momentum(trainer.momentum_values())
        outs = trainer.step()
        losses.append(loss(graph, outs, batch))
        if not math.isfinite(losses[-1]):
            raise DivergedError(i, losses[-1])
        ref = None
        if reference is not None:
            ref = loss(graph, reference.step(), batch)
            if not math.isfinite(ref):
                raise DivergedError(i, ref, "the one-device run of --check")
            ref_losses.append(ref)
            before, state = state, _state(graph, trainer, values)
            ref_after = reference.parameters()
            update_diff = max(update_diff, max_rel_diff({n: state[n] - before[n] for n in ref_after},
                                                        {n: v - before[n] for n, v in ref_after.items()}))
        if checkpoint is not None and checkpoint.due(i):
            save_training_state(checkpoint.path, graph, trainer_state(graph, values, trainer, i), plan)
        if progress:
            progress(i, losses[-1], trainer.step_seconds[-1], ref)
    check = None
    final = _state(graph, trainer, values)
    final = {t.name: final[t.name] for t in graph.tensors if t.producer is None and t.role in (Role.PARAM, Role.AUX)}
    if reference is not None:
        loss_diff = max((abs(a - b) for a, b in zip(losses, ref_losses)), default=0.0)
        check = Check(out_diff, grad_diff, loss_diff, update_diff, tuple(ref_losses), out_rel,
                      loss_diff / (max(map(abs, ref_losses), default=0.0) or 1.0), dropout_off)
    return RunReport(graph.name, pg.workers, plan.algo, tuple(losses), tuple(trainer.step_seconds),
                     trainer.bind_seconds, sum(c.nbytes for c in copies if not c.backward),
                     sum(c.nbytes for c in copies if c.backward), len(copies), plan.comm_bytes,
                     dict(plan.per_device_bytes), check, None, final)
