"""Partitioned training runs with their measurements: a :class:`RunReport` from a graph, a plan and values.

Input: a Graph, its :class:`~tofu.search.plan.Plan`, the partitioned graph, initial values and a batch.
Output: the losses of N SGD-momentum steps, the step times, the bytes of every ``_CrossDeviceCopy`` of the
bound training graph (forward and backward) beside the plan's prediction, and, with ``check``, the largest
differences from the same steps on one device, each step of one device taken from the partitioned run's state
(outputs and gradients of the first step, every step's loss and parameter update). A step whose float32
comparison exceeds the tolerance is run again on both sides in float64 from the same state and batch
(:class:`Float64Check`): float32 rounding shrinks there, a partitioning error does not.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from tofu.errors import BindError, DivergedError
from tofu.graph.ir import Graph, Role
from tofu.rewrite.apply_plan import PartitionedGraph
from tofu.runtime import DEFAULT_RTOL, FLOAT64_SCALE, float64_rtol
from tofu.runtime.checkpoint import CheckpointPolicy, TrainingState, save_training_state, trainer_state
from tofu.runtime.data import loss
from tofu.runtime.train import Trainer, float64_symbol, whole_graph
from tofu.search.plan import Plan


_KINDS = ("outputs", "gradients", "losses", "parameter updates")


def _exceeded(rel: Mapping[str, float], tol: float) -> tuple[str, ...]:
    """``name rel > tol`` for each relative difference beyond ``tol`` (a NaN difference exceeds any tolerance)."""
    return tuple(f"{name} {v:.3g} > {tol:.3g}" for name, v in rel.items() if not v <= tol)


def _largest_of(values) -> float:
    """The largest of ``values``, NaN if any is NaN."""
    values = list(values)
    return float("nan") if any(math.isnan(v) for v in values) else max(values, default=0.0)


@dataclass(frozen=True)
class Float64Check:
    """The second opinion of a check whose float32 comparison exceeded its tolerance: the steps it exceeded at, each
    run again by the partitioned symbol and the one-device symbol bound in float64 (every argument, and the
    constants the symbols create, :func:`~tofu.runtime.train.float64_symbol`) from the state and batch before
    that step, the same values on both sides. Largest relative differences over those steps, as :class:`Check`'s
    (outputs and gradients relative to the largest on one device, the loss to one device's, the update to the
    largest update). ``error``: why float64 could not be run (an op without a float64 kernel); its numbers are
    then NaN."""

    steps: tuple[int, ...]
    output_rel: float = float("nan")
    gradient: float = float("nan")
    loss_rel: float = float("nan")
    parameters: float = float("nan")
    error: str = ""

    @property
    def max_rel_diff(self) -> float:
        return _largest_of((self.output_rel, self.gradient, self.loss_rel, self.parameters))

    def exceeded(self, tol: float) -> tuple[str, ...]:
        """What differs by more than ``tol`` in float64; ``float64 could not be run: why`` if it could not."""
        if self.error:
            return (f"float64 could not be run: {self.error}",)
        return _exceeded(dict(zip(_KINDS, (self.output_rel, self.gradient, self.loss_rel, self.parameters))), tol)

    def to_json(self, tol: float) -> dict:
        return {"steps": list(self.steps), "ran": not self.error, "error": self.error or None, "rtol": tol,
                "max_rel_diff": None if self.error else self.max_rel_diff, "output_max_rel_diff": self.output_rel,
                "gradient_max_rel_diff": self.gradient, "loss_max_rel_diff": self.loss_rel,
                "parameter_max_rel_diff": self.parameters, "passed": not self.exceeded(tol)}


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
    float64: Float64Check | None = None  # the second opinion, where float32 exceeded ``rtol``
    rtol: float = DEFAULT_RTOL           # the float32 tolerance the run was checked at (float64's follows from it)

    @property
    def max_abs_diff(self) -> float:
        return max(self.output, self.loss)

    @property
    def max_rel_diff(self) -> float:
        """The largest of the four relative differences in float32 (NaN if any is)."""
        return _largest_of((self.output_rel, self.gradient, self.loss_rel, self.parameters))

    def exceeded(self, rtol: float) -> tuple[str, ...]:
        """What differs by more than ``rtol`` (relative) in float32, as ``name rel > rtol``; empty when float32
        alone passes. A NaN difference exceeds any tolerance."""
        rel = {"outputs": self.output_rel, "gradients": self.gradient, "losses": self.loss_rel,
               "parameter updates": self.parameters}
        return tuple(f"{name} {v:.3g} > {rtol:g}" for name, v in rel.items() if not v <= rtol)

    def failures(self, rtol: float | None = None) -> tuple[str, ...]:
        """Why the check fails; empty when it passes: float32 within ``rtol`` (default: the run's), or float64
        within :func:`~tofu.runtime.float64_rtol` of it at every step where float32 exceeded the run's
        tolerance. Otherwise what exceeded in float32, then ``float64: ...`` (what exceeded there, or why
        float64 could not be run, or that it was not run)."""
        rtol = self.rtol if rtol is None else rtol
        failed = self.exceeded(rtol)
        if not failed:
            return ()
        if self.float64 is None:
            return failed + ("float64 not run",)
        second = self.float64.exceeded(float64_rtol(rtol))
        if not second:
            return ()
        return failed + (second[0] if self.float64.error else "float64: " + ", ".join(second),)

    def verdict(self, rtol: float | None = None) -> str:
        """One line: whether float32 passed, and if not, what float64 said (both numbers)."""
        rtol = self.rtol if rtol is None else rtol
        if not self.exceeded(rtol):
            return f"float32 agrees to {self.max_rel_diff:.3g} (rtol {rtol:g})"
        first = f"float32 differs by {self.max_rel_diff:.3g} (> rtol {rtol:g})"
        f64, tol = self.float64, float64_rtol(rtol)
        if f64 is None:
            return f"{first}; float64 not run"
        if f64.error:
            return f"{first}, float64 could not be run ({f64.error}): the difference stands"
        again = f"{tol:.2g} = rtol x {FLOAT64_SCALE:g}, step{'s' if len(f64.steps) > 1 else ''} " \
                f"{', '.join(map(str, f64.steps))} again in float64"
        if not f64.exceeded(tol):
            return (f"{first}, float64 agrees to {f64.max_rel_diff:.3g} (<= {again}): float32 rounding, not the "
                    f"partition")
        return f"{first}, float64 differs by {f64.max_rel_diff:.3g} too (> {again}): not float32 rounding alone"


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
                        "check_dropout_off": list(c.dropout_off), "check_float32_max_rel_diff": c.max_rel_diff,
                        "check_float64_max_rel_diff": None if c.float64 is None or c.float64.error
                        else c.float64.max_rel_diff,
                        "check_float64": None if c.float64 is None else c.float64.to_json(float64_rtol(c.rtol)),
                        "check_float64_rtol": float64_rtol(c.rtol),
                        "check_passed_by": ("float32" if not c.exceeded(c.rtol) else
                                            "float64" if not c.failures() else None)})
        return doc


def max_rel_diff(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> float:
    """max |a - b| over every element of every tensor, relative to the largest |b| of them all (a tensor whose
    values are all small, a BatchNorm shift, is not held to a tighter absolute bound than the others)."""
    scale = max((float(np.abs(ref).max()) for ref in b.values() if ref.size), default=0.0) or 1.0
    # a parameter the partitioned graph never reads (BatchNorm's gamma under fix_gamma) has no gradient there
    with np.errstate(invalid="ignore", over="ignore"):     # a diverged value's inf - inf is NaN, as it should be
        return max((_largest(a[n] - ref) if n in a else _largest(ref) for n, ref in b.items()), default=0.0) / scale


def _state(graph: Graph, trainer: Trainer, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every variable's whole value now: the partitioned run's parameters and auxiliary states (BatchNorm's moving
    statistics, updated by a statistics exchange as by the kernel) over ``values``."""
    return {**values, **trainer.parameters((Role.PARAM, Role.AUX))}


def _largest(x: np.ndarray) -> float:
    """max |x| (NaN if any element is NaN: a NaN difference must not pass as 0)."""
    return float(np.abs(x).max()) if x.size else 0.0


class _Float64Rerun:
    """Steps of a check run again in float64 (:class:`Float64Check`): the partitioned symbol and the one-device
    symbol, each made float64 and bound at the first step that needs them (kept for the next), loaded with the
    same state, momentum and batch, then one forward and backward pass and one update on each side, compared."""

    def __init__(self, graph: Graph, pg: PartitionedGraph, reference_symbol, batch: Mapping[str, np.ndarray],
                 ctx: str, lr: float, momentum: float):
        self.graph, self.pg, self.reference_symbol, self.batch = graph, pg, reference_symbol, batch
        self.ctx, self.lr, self.momentum = ctx, lr, momentum
        self.steps: list[int] = []
        self.diffs = dict.fromkeys(_KINDS, 0.0)
        self.error = ""
        self._pair: tuple[Trainer, Trainer] | None = None

    def step(self, number: int, state: Mapping[str, np.ndarray], momentum: Mapping[str, np.ndarray]) -> None:
        """Step ``number`` again in float64 from ``state`` (every variable's whole value) and ``momentum``."""
        import mxnet as mx

        from tofu.graph.single_op import first_line

        if self.error or number in self.steps:
            return
        self.steps.append(number)
        try:
            self._step(state, momentum)
        except BindError as e:                            # an op without float64, at the bind
            self.error = e.reason
            self._pair = None
        except mx.base.MXNetError as e:                    # or at the first pass
            self.error = first_line(e)
            self._pair = None

    def _step(self, state: Mapping[str, np.ndarray], momentum: Mapping[str, np.ndarray]) -> None:
        if self._pair is None:
            self._pair = (Trainer(dataclasses.replace(self.pg, symbol=float64_symbol(self.pg.symbol)), state,
                                  self.ctx, self.lr, self.momentum, np.float64),
                          Trainer(whole_graph(self.graph, float64_symbol(self.reference_symbol)), state, "cpu",
                                  self.lr, self.momentum, np.float64))
        outs, grads, after = [], [], []
        for t in self._pair:
            t.load(state)
            for m in t.moms.values():        # a parameter ``momentum`` lacks starts from none, not a former step's
                m[:] = 0
            t.load_momentum(momentum)
            outs.append(t.forward_backward())
            grads.append(t.gradients())
            t.update()
            after.append(t.parameters((Role.PARAM, Role.AUX)))      # the moving statistics too
        before = {n: np.asarray(state[n], np.float64) for n in after[1]}
        losses = [loss(self.graph, o, self.batch) for o in outs]
        diffs = {"outputs": max_rel_diff(*outs), "gradients": max_rel_diff(*grads),
                 "losses": abs(losses[0] - losses[1]) / (abs(losses[1]) or 1.0),
                 "parameter updates": max_rel_diff({n: after[0].get(n, before[n]) - before[n] for n in before},
                                                   {n: v - before[n] for n, v in after[1].items()})}
        self.diffs = {k: _largest_of((self.diffs[k], v)) for k, v in diffs.items()}

    def result(self) -> Float64Check | None:
        if not self.steps:
            return None
        if self.error:
            return Float64Check(tuple(self.steps), error=self.error)
        return Float64Check(tuple(self.steps), *(self.diffs[k] for k in _KINDS))


def train(graph: Graph, plan: Plan, pg: PartitionedGraph, values: Mapping[str, np.ndarray],
          batch: Mapping[str, np.ndarray], steps: int, reference_symbol=None, ctx: str = "cpu",
          lr: float = 0.05, momentum: float = 0.9,
          progress: Callable[[int, float, float, float | None], None] | None = None, *,
          start: TrainingState | None = None, checkpoint: CheckpointPolicy | None = None,
          dropout_off: tuple[str, ...] = (), rtol: float = DEFAULT_RTOL, replicas: bool = True) -> RunReport:
    """Training steps of ``pg`` on ``batch`` up to step number ``steps``; with ``reference_symbol`` (the
    unpartitioned model) the same steps on one device beside it, compared; a step whose float32 comparison
    exceeds ``rtol`` (the first step's outputs or gradients, a step's loss or parameter update) is run again on
    both sides in float64 from the same state (:class:`Float64Check`, ``report.check.float64``).

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
    trainer = Trainer(pg, values, ctx, lr, momentum, replicas=replicas)
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
    rerun = _Float64Rerun(graph, pg, reference_symbol, batch, ctx, lr, momentum) if reference is not None else None
    if reference is not None and not (out_rel <= rtol and grad_diff <= rtol):
        rerun.step(done + 1, state, trainer.momentum_values())      # the first step's outputs and gradients
    for i in range(done + 1, steps + 1):
        moms = None
        if reference is not None:      # one device steps from the partitioned run's state: no drift compounds
            moms = trainer.momentum_values()
            reference.load(state)
            reference.load_momentum(moms)
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
            ref_after = reference.parameters((Role.PARAM, Role.AUX))      # the moving statistics too
            step_update = max_rel_diff({n: state[n] - before[n] for n in ref_after},
                                       {n: v - before[n] for n, v in ref_after.items()})
            update_diff = _largest_of((update_diff, step_update))
            # this step's loss against the largest so far: never below what the final comparison divides by
            step_loss = abs(losses[-1] - ref) / (max(map(abs, ref_losses)) or 1.0)
            if not (step_update <= rtol and step_loss <= rtol):
                rerun.step(i, before, moms)
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
                      loss_diff / (max(map(abs, ref_losses), default=0.0) or 1.0), dropout_off, rerun.result(),
                      rtol)
        rerun = None                   # its float64 executors go before the report is used
    return RunReport(graph.name, pg.workers, plan.algo, tuple(losses), tuple(trainer.step_seconds),
                     trainer.bind_seconds, sum(c.nbytes for c in copies if not c.backward),
                     sum(c.nbytes for c in copies if c.backward), len(copies), plan.comm_bytes,
                     dict(plan.per_device_bytes), check, None, final)
