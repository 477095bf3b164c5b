"""The ``cpu`` profile: this machine's numbers, measured with MXNet per op class and cached.

Input: nothing (or a cache file). Output: a :class:`~tofu.sim.hardware.Profile` named ``cpu``.

Peaks (medians of repeated measurements): ``peak_flops`` is ``mx.nd.dot`` of two n x n float32 matrices
(2 n^3 / t); ``mem_bandwidth`` a large array copied on cpu(0) (2 x bytes / t). Per op class
(:class:`~tofu.sim.flops.OpClass`, derived from each op's TDL description), the **calibration set**
``CALIBRATION_CASES`` binds one MXNet operator per case, times forward + backward calls (inputs with gradients,
median) and fits, by least squares on the relative error,

    t_i - c = n_i L + x_i / R

c the executor call's fixed cost, n_i the kernel calls of the case (forward, and backward when an input has a
gradient), x_i the work the model charges the class for (FLOPs for GEMM and convolution, bytes for the
others: forward plus :func:`tofu.sim.flops.backward_work`), L the class's launch cost and R its achieved rate
(a negative L is clamped to 0 and R refitted). The efficiency is R over the peak (compute for contractions,
memory otherwise; the other efficiency is 1, so the roofline's other side is the peak). The calibration shapes
are chosen apart from the validation set of ``experiments/run_cpu_validation.py`` (the tests check that they
are disjoint).

The copy between contexts: an executor whose ``identity`` on cpu(1) reads an ``identity`` of x on cpu(0) (as
the rewriter sends a piece), forward and backward (one ``_CrossDeviceCopy`` each way), at several sizes, less
the two identities' fitted cost: the fit gives
``copy_launch_seconds`` and the bandwidth of the one shared interconnect level. ``step_seconds``: an executor
call of one tiny op; ``update_launch_seconds``: one imperative ``sgd_mom_update`` on a tiny array.

**The per-task cost** ``task_seconds`` (what one op costs inside a large bound multi-context graph beyond its
kernel curve, which a one-operator executor does not show): the **calibration graph** :func:`glue_net` (a
residual stack of ``depth`` tiny FullyConnected + tanh layers, none of the validation models), at the depths
``TASK_DEPTHS``, partitioned on ``TASK_WORKERS`` CPU contexts by the plans ``TASK_PLANS`` and trained as ``tofu
run`` trains (:class:`tofu.runtime.train.Trainer`'s step, the cases round-robin for about ``TASK_SECONDS`` each,
median). Each case's measured step t less the engine's iteration s on the profile without the per-task cost,
fitted by least squares over the cases,

    t - s = c + n p        (p >= 0)

n the program's compute tasks and copies (updates left out: ``update_launch_seconds`` is measured on the
imperative call the runtime makes), gives p = ``task_seconds``. The copy's latency is fitted in the same least
squares (:func:`fit_task_and_copy_seconds`: t - s = c + n p + m (L - L0), m the copies, L0 the two-op executor's
latency above): a lone copy between two ops is not what a copy costs among hundreds of ops (measured v7: the two-op
fit gave 13-15 us per copy while the graphs' residuals fell from 2-4 us per task at k = 2 to 0.3-0.9 us at k = 4,
where copies are a larger share of the tasks, so a per-task fit with the copy fixed gave p = 0 to 7 us).
**The bulked per-task cost**
``bulk_task_seconds``: the same fit on the same graph at the depths ``BULK_DEPTHS`` bound to one context (plan
``tofu`` on 1 worker, timed in the same round-robin), where MXNet's executor runs every op inside a bulk segment,
one engine op for up to 15 ops (:func:`tofu.sim.engine.bulks`); the engine charges it to every op of a one-device
program. A multi-context graph bulks only its segments that lie on one context and pushes the rest one by one,
each waking its context's worker; ``task_seconds`` is fitted on such graphs as they come.

**Kernel curves** (what the engine times kernels with, :mod:`tofu.sim.kernels`): per class, the **sweep**
``SWEEP_CASES`` binds one operator family at 13 sizes from tiny to large work (4 to 6 decades of FLOPs or bytes),
each timed as above over about ``SWEEP_SECONDS`` of calls, in ``SWEEP_ROUNDS`` rounds over all classes, each
case beside its own measurement of the executor call c (a case's time and its c: the medians over the rounds, so
that a burst of other work on a shared machine spoils one round, not the fit). The sizes alternate between the
fit and the held-out set (the smallest and the largest are fitted, so every held-out size lies between fitted
ones). The **grain sweep** ``GRAIN_CASES`` adds convolutions of about equal work on 1 to 20 output pixels per
image (:mod:`tofu.sim.kernels`, "The grain"), measured in the same rounds and split the same way.
:func:`~tofu.sim.kernels.fit_grain` fits the class's (R, h, a, L) and its grain's (s, b) (s = 0, none, when that
fits better: every class but convolution has no grain) by constrained least squares through the fit sizes (each case's kernel calls with their own works, forward and backward; the calibration cases
above, measured at another moment with another c, are left out); the held-out sizes are then predicted by
:func:`~tofu.sim.kernels.curve_seconds` (the other roofline side included) plus their c, and their errors
recorded (:class:`CurveFit`). ``python -m tofu.sim.calibrate [--recalibrate]`` prints them (about three minutes).

**Kernels measured apart** (the profile's ``KernelModel.ops``, which time a task of that op instead of its
class's curve): per op of ``OP_SWEEPS`` (the sweeps' families above, and LayerNorm, softmax and gelu on (n, 64)),
every case is also timed forward alone beside a forward-alone executor call c_f, in the same rounds;
:func:`_op_curve_fits` fits the op's forward curve F through t_f - c_f = F(forward work) and its backward curve
(named as MXNet names the backward node, ``_backward_Convolution``) through t - c - F(forward work) =
B(backward work), the sweep's alternate sizes held out. The update (``sgd_mom_update``, what the runtime calls per
parameter) is swept over ``UPDATE_ELEMENTS``, each call on the next of parameters of ``PARAMETER_POOL_BYTES`` in
all (out of the caches, as in a step), and fitted with its launch (:func:`_update_curve`). Since v11 every sweep
case reads its parameters out of the caches too: its calls rotate over executors holding copies of its parameters
and sharing everything else (:func:`executors`, ``PARAMETER_POOL_BYTES``).

``concurrency`` is 1: the CPU contexts share the cores, and measured (``experiments/run_context_concurrency.py``,
docs/sim.md) two contexts run only 1.2-1.4 chains of MXNet's native GEMM or convolution at once and none of tiny
ops, so the devices' times add up. The memory capacity is the machine's physical memory. The cache records ``VERSION``; a cache of
another version, host or core count is measured again.
"""
from __future__ import annotations

import itertools
import json
import logging
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from tofu.graph.attrs import Attrs
from tofu.sim.flops import OpClass, OpWork
from tofu.sim.hardware import ClassCurve, ClassRate, KernelModel, Level, Profile
from tofu.sim.kernels import curve_seconds, fit_grain, fit_rate

log = logging.getLogger(__name__)

DEFAULT_CACHE = Path("results/sim/cpu_profile.json")
VERSION = 11
RATE_BOUND = 4.0        # a class's fitted rate is at most this x the machine's peak (cache-resident ops may beat it)
_COMMAND = "python -m tofu.sim.calibrate --recalibrate"

__all__ = ["CALIBRATION_CASES", "GRAIN_CASES", "SWEEP_CASES", "Calibration", "ClassFit", "CurveFit", "OpCase", "calibration",
           "TaskPoint", "cpu_profile", "fit_rate", "fit_task_seconds", "glue_net", "measure", "measure_op"]

Shape = tuple[int, ...]


@dataclass(frozen=True)
class OpCase:
    """One MXNet operator call: its inputs (name -> shape, in the operator's argument order; ``aux`` names the
    auxiliary states among them) and its attributes as MXNet takes them."""

    name: str
    op: str
    inputs: tuple[tuple[str, Shape], ...]
    attrs: dict = field(default_factory=dict)
    aux: tuple[str, ...] = ()

    @property
    def grads(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.inputs if n not in self.aux)


def _dims(shape: Shape) -> str:
    return "x".join(map(str, shape))


def conv(n, c, hw, f, k, stride=1) -> OpCase:
    return OpCase(f"Convolution {n}x{c}x{hw}x{hw} f{f} k{k}" + (f" s{stride}" if stride > 1 else ""), "Convolution",
                  (("data", (n, c, hw, hw)), ("weight", (f, c, k, k)), ("bias", (f,))),
                  {"num_filter": f, "kernel": (k, k), "pad": (k // 2, k // 2), "stride": (stride, stride)})


def fc(n, k, m) -> OpCase:
    return OpCase(f"FullyConnected {n}x{k} -> {m}", "FullyConnected",
                  (("data", (n, k)), ("weight", (m, k)), ("bias", (m,))), {"num_hidden": m})


def batch_dot(b, n, k, m) -> OpCase:
    return OpCase(f"batch_dot {b}x{n}x{k} {b}x{k}x{m}", "batch_dot", (("lhs", (b, n, k)), ("rhs", (b, k, m))))


def batchnorm(shape) -> OpCase:
    c = shape[1]
    return OpCase(f"BatchNorm {_dims(shape)}", "BatchNorm",
                  (("data", shape), ("gamma", (c,)), ("beta", (c,)), ("moving_mean", (c,)), ("moving_var", (c,))),
                  {}, ("moving_mean", "moving_var"))


def layernorm(shape) -> OpCase:
    return OpCase(f"LayerNorm {_dims(shape)}", "LayerNorm",
                  (("data", shape), ("gamma", (shape[-1],)), ("beta", (shape[-1],))))


def activation(shape, act="relu") -> OpCase:
    return OpCase(f"Activation {act} {_dims(shape)}", "Activation", (("data", shape),), {"act_type": act})


def softmax(shape) -> OpCase:
    return OpCase(f"softmax {_dims(shape)}", "softmax", (("data", shape),), {"axis": -1})


def gelu(shape) -> OpCase:
    return OpCase(f"LeakyReLU gelu {_dims(shape)}", "LeakyReLU", (("data", shape),), {"act_type": "gelu"})


def binary(op, shape) -> OpCase:
    return OpCase(f"{op} {_dims(shape)}", op, (("lhs", shape), ("rhs", shape)))


def pooling(shape, kind="max", k=2) -> OpCase:
    return OpCase(f"Pooling {kind} {k}x{k} {_dims(shape)}", "Pooling", (("data", shape),),
                  {"kernel": (k, k), "stride": (k, k), "pool_type": kind})


def slice_case(shape, axis=0) -> OpCase:
    end = tuple(e // 2 if d == axis else e for d, e in enumerate(shape))
    return OpCase(f"slice half {_dims(shape)} axis {axis}", "slice", (("data", shape),),
                  {"begin": tuple(0 for _ in shape), "end": end})


def concat(shape, dim=0) -> OpCase:
    return OpCase(f"Concat 2x {_dims(shape)} dim {dim}", "Concat", (("a", shape), ("b", shape)),
                  {"dim": dim, "num_args": 2})


def identity(shape) -> OpCase:
    return OpCase(f"identity {_dims(shape)}", "identity", (("data", shape),))


def add_n(shape, n=2) -> OpCase:
    return OpCase(f"add_n {n}x {_dims(shape)}", "add_n", tuple((f"x{i}", shape) for i in range(n)), {"num_args": n})


# The calibration set: per class, shapes from tiny to the size of the evaluated CPU models' ops, none of them a
# validation case (experiments/run_cpu_validation.py).
CALIBRATION_CASES: dict[OpClass, tuple[OpCase, ...]] = {
    OpClass.GEMM: (fc(32, 512, 512), fc(128, 1024, 512), fc(16, 2048, 2048), fc(512, 256, 1024), fc(24, 64, 64),
                   batch_dot(8, 64, 64, 64), batch_dot(16, 128, 64, 128)),
    OpClass.CONVOLUTION: (conv(8, 32, 16, 16, 32, 3), conv(16, 16, 32, 32, 3), conv(4, 64, 28, 128, 1),
                          conv(8, 128, 8, 128, 3), conv(24, 16, 8, 16, 3), conv(8, 32, 16, 64, 3, stride=2)),
    OpClass.ELEMENTWISE: (activation((8, 32, 32, 32)), activation((128, 512)), activation((64, 1024), "tanh"),
                          binary("elemwise_add", (32, 1024)), binary("elemwise_add", (8, 64, 16, 16)),
                          binary("elemwise_mul", (16, 32, 16, 16)), activation((24, 64)),
                          activation((32, 32, 32, 32)), binary("elemwise_add", (8, 128, 32, 32))),
    OpClass.NORMALIZATION: (batchnorm((8, 32, 16, 16)), batchnorm((16, 64, 8, 8)), batchnorm((24, 16, 8, 8)),
                            layernorm((64, 512)), layernorm((32, 128, 64))),
    OpClass.POOLING: (pooling((8, 32, 16, 16)), pooling((16, 64, 16, 16)), pooling((8, 128, 8, 8), "avg"),
                      pooling((24, 16, 8, 8))),
    OpClass.DATA_MOVEMENT: (slice_case((64, 1024)), slice_case((16, 64, 16, 16), 1), concat((32, 512)),
                            concat((8, 32, 16, 16), 1), identity((64, 1024)), identity((8, 32, 16, 16)),
                            slice_case((24, 64), 1)),
}
COPY_ELEMENTS = (256, 16384, 262144, 1048576)

# The kernel-curve sweep: per class one operator family at 13 sizes, smallest work first; even positions are
# fitted, odd ones held out. None is a calibration case or a validation case of experiments/run_cpu_validation.py
# (the tests check it).
_ROWS = (1, 2, 5, 10, 32, 100, 316, 1000, 3162, 10000, 31623, 60000, 100000)
_BATCHES = (1, 2, 4, 8, 20, 50, 130, 320, 800, 2000, 5000, 8000, 12800)
SWEEP_CASES: dict[OpClass, tuple[OpCase, ...]] = {
    OpClass.GEMM: tuple(fc(n, n, n) for n in (2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 640, 768, 1024)),
    OpClass.CONVOLUTION: tuple(conv(b, c, hw, c, 3) for b, c, hw in (
        (1, 2, 4), (1, 4, 4), (1, 4, 8), (1, 8, 8), (2, 8, 8), (2, 8, 16), (4, 16, 16), (4, 16, 32), (8, 32, 16),
        (8, 32, 32), (12, 64, 16), (12, 64, 32), (16, 64, 32))),
    OpClass.ELEMENTWISE: tuple(activation((n, 64)) for n in _ROWS),
    OpClass.NORMALIZATION: tuple(batchnorm((n, 16, 8, 8)) for n in _BATCHES),
    OpClass.POOLING: tuple(pooling((n, 16, 8, 8)) for n in _BATCHES),
    OpClass.DATA_MOVEMENT: tuple(slice_case((2 * n, 64)) for n in _ROWS),
}

# The grain sweep: convolutions of about the same work (2e7 to 6e7 FLOPs, beyond the work curve's bend) on 1 to 20
# output pixels per image, then small ones (4e4 to 2.4e6 FLOPs, below the bend) on 1 to 9 pixels, where the two
# limits meet; fitted and held out alternately like the sweep. None is a calibration or validation case.
GRAIN_CASES: dict[OpClass, tuple[OpCase, ...]] = {
    OpClass.CONVOLUTION: tuple(conv(b, c, hw, c, 3) for b, c, hw in (
        (12, 384, 1), (6, 320, 2), (4, 240, 3), (3, 192, 4), (3, 160, 5), (2, 144, 6), (2, 112, 8), (2, 96, 10),
        (1, 96, 12), (1, 64, 16), (1, 48, 20),
        (4, 24, 1), (2, 64, 1), (2, 32, 3), (4, 96, 1), (6, 48, 2), (8, 128, 1))),
}

_OP_ROWS = (1, 4, 16, 64, 256, 1000, 4000, 16000, 60000)
OP_SWEEPS: dict[str, tuple[tuple[OpCase, ...], ...]] = {
    "Convolution": (SWEEP_CASES[OpClass.CONVOLUTION], GRAIN_CASES[OpClass.CONVOLUTION]),
    "FullyConnected": (SWEEP_CASES[OpClass.GEMM],),
    "BatchNorm": (SWEEP_CASES[OpClass.NORMALIZATION],),
    "Pooling": (SWEEP_CASES[OpClass.POOLING],),
    "Activation": (SWEEP_CASES[OpClass.ELEMENTWISE],),
    "slice": (SWEEP_CASES[OpClass.DATA_MOVEMENT],),
    "LayerNorm": (tuple(layernorm((n, 64)) for n in _OP_ROWS),),
    "softmax": (tuple(softmax((n, 64)) for n in _OP_ROWS),),
    "LeakyReLU": (tuple(gelu((n, 64)) for n in _OP_ROWS),),
}
"""The op sweeps: per MXNet op whose kernels are timed apart from their class's curve, cases of that op (the
class sweeps' families above, reused, and three ops whose kernels depart most from their class: LayerNorm,
softmax, LeakyReLU measured on its gelu), each timed forward alone and forward + backward; alternately fitted and
held out as in the class sweeps (the convolution's work sweep and grain sweep each so). None is a calibration or
validation case (the tests check it)."""


@dataclass(frozen=True)
class TaskPoint:
    """One case of the per-task fit: the calibration graph's depth, the workers and plan, the program's compute
    tasks and copies (``tasks``), the measured median step and the engine's iteration without the per-task cost."""

    depth: int
    workers: int
    plan: str
    tasks: int
    measured_seconds: float
    simulated_seconds: float
    copies: int = 0


@dataclass(frozen=True)
class ClassFit:
    """One class's fit: rate R (FLOP/s or bytes/s, ``bound``: ``compute`` or ``memory``), launch L, the cases."""

    bound: str
    rate: float
    launch: float
    cases: int
    median_abs_relative_error: float


@dataclass(frozen=True)
class CurveFit:
    """One class's kernel curve (:mod:`tofu.sim.kernels`): R (FLOP/s or bytes/s, ``bound``), h, a, L; how many
    cases it was fitted on and its median |relative error| there; the held-out sizes' median and worst |error|
    and the case of the worst."""

    bound: str
    peak: float
    w_half: float
    alpha: float
    launch: float
    fit_cases: int
    fit_median_error: float
    heldout_cases: int
    heldout_median_error: float
    heldout_worst_error: float
    heldout_worst_case: str
    heldout: tuple[tuple[str, float], ...] = ()       # every held-out case and its (signed) relative error
    grain_half: float = 0.0                            # s and b of the grain factor (s = 0: none)
    grain_alpha: float = 1.0


@dataclass(frozen=True)
class Calibration:
    """The measured numbers (seconds, bytes/s, FLOP/s), per-class fits, and where: ``host`` and ``cores``."""

    gemm_flops: float
    copy_bandwidth: float
    cross_context_bandwidth: float
    copy_launch_seconds: float
    call_seconds: float
    update_seconds: float
    classes: dict[str, ClassFit]
    memory_bytes: float
    host: str
    cores: int
    repeats: int
    curves: dict[str, CurveFit] = field(default_factory=dict)
    task_seconds: float = 0.0
    task_points: tuple[TaskPoint, ...] = ()
    bulk_task_seconds: float | None = None
    op_curves: dict[str, CurveFit] = field(default_factory=dict)
    version: int = VERSION

    def rates(self) -> tuple[tuple[OpClass, ClassRate], ...]:
        out = []
        for c in OpClass:
            f = self.classes[c.value]
            if f.bound == "compute":
                out.append((c, ClassRate(f.rate / self.gemm_flops, 1.0, f.launch)))
            else:
                out.append((c, ClassRate(1.0, f.rate / self.copy_bandwidth, f.launch)))
        return tuple(out)

    def kernels(self) -> KernelModel | None:
        """The fitted curves (the other roofline side at the measured peaks: the copy bandwidth for contractions,
        the GEMM FLOP/s for the others); None without curves (a calibration made before them)."""
        if set(self.curves) != {c.value for c in OpClass}:
            return None
        out = []
        for c in OpClass:
            f = self.curves[c.value]
            other = self.copy_bandwidth if c.contraction else self.gemm_flops
            out.append((c, ClassCurve(f.peak, f.w_half, f.alpha, f.launch, other,
                                      f"measured here: {f.fit_cases} cases ({_COMMAND})", f.grain_half,
                                      f.grain_alpha)))
        ops = tuple((name, ClassCurve(f.peak, f.w_half, f.alpha, f.launch,
                                      self.copy_bandwidth if f.bound == "compute" else self.gemm_flops,
                                      f"measured here: {f.fit_cases} cases of {name} ({_COMMAND})", f.grain_half,
                                      f.grain_alpha))
                    for name, f in self.op_curves.items())
        return KernelModel(tuple(out), ops)

    def profile(self) -> Profile:
        elementwise = self.classes[OpClass.ELEMENTWISE.value].launch
        return Profile(
            name="cpu", devices=64, peak_flops=self.gemm_flops, mem_bandwidth=self.copy_bandwidth,
            memory_bytes=self.memory_bytes,
            levels=(Level("context", 1, self.cross_context_bandwidth, shared=True),),
            host_bandwidth=self.copy_bandwidth, launch_seconds=elementwise, classes=self.rates(), concurrency=1,
            source=f"measured on {self.host} ({self.cores} cores) by tofu.sim.calibrate v{self.version}",
            step_seconds=self.call_seconds, update_launch_seconds=self.update_seconds,
            copy_launch_seconds=self.copy_launch_seconds, kernels=self.kernels(), task_seconds=self.task_seconds,
            bulk_task_seconds=self.bulk_task_seconds)

    @classmethod
    def from_json(cls, doc: dict) -> Calibration:
        doc = dict(doc)
        doc["classes"] = {k: ClassFit(**v) for k, v in doc["classes"].items()}
        doc["curves"] = {k: CurveFit(**{**v, "heldout": tuple(tuple(h) for h in v.get("heldout", ()))})
                         for k, v in doc.get("curves", {}).items()}
        doc["op_curves"] = {k: CurveFit(**{**v, "heldout": tuple(tuple(h) for h in v.get("heldout", ()))})
                            for k, v in doc.get("op_curves", {}).items()}
        doc["task_points"] = tuple(TaskPoint(**p) for p in doc.get("task_points", ()))
        return cls(**doc)


def _median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()                                   # warm-up (allocation, first-call setup)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


PARAMETERS = frozenset({"weight", "bias", "gamma", "beta"})
"""The inputs of a case that are a model's parameters (what a training step last touched an iteration ago)."""
PARAMETER_POOL_BYTES = 256 * 2 ** 20
PARAMETER_POOL_MAX = 16
"""A sweep case rotates over copies of its parameters of about ``PARAMETER_POOL_BYTES`` in all (at most
``PARAMETER_POOL_MAX``), one executor each sharing everything else (inputs, gradients, internal memory): a step
reads its parameters from memory and its activations as just written. Measured here: a 3 x 3 convolution of 512
channels on 1 x 1 pixels (9.4 MB of weights) forward 8.7 ms called again and again, 10.8 ms rotating, 10.3 ms in
resnet18_v1's training step; a 2 x 8 x 8 x 8 one 22 and 24 us."""


def measure_op(case: OpCase, repeats: int, forward_only: bool = False,
               cold_parameters: bool = False) -> tuple[float, tuple[Shape, ...]]:
    """Median seconds of one forward + backward executor call of the case's operator (``forward_only``: one
    training forward call alone; ``cold_parameters``: each call on the next copy of its parameters, see
    ``PARAMETER_POOL_BYTES``), and its output shapes."""
    import mxnet as mx

    exes = executors(case, cold_parameters)
    heads = [mx.nd.ones(o.shape) for o in exes[0].outputs]
    calls = itertools.count()

    def run():
        e = exes[next(calls) % len(exes)]
        e.forward(is_train=True)
        if forward_only:
            for o in e.outputs:
                o.wait_to_read()
            return
        e.backward(heads)
        for g in e.grad_arrays:
            if g is not None:
                g.wait_to_read()
    return _median_seconds(run, repeats), tuple(tuple(o.shape) for o in exes[0].outputs)


def executors(case: OpCase, cold_parameters: bool = False) -> list:
    """The case's operator bound on cpu(0), its inputs random in [0.5, 1.5); with ``cold_parameters`` and
    parameters (``PARAMETERS``), as many executors as hold copies of them of about ``PARAMETER_POOL_BYTES`` (at most
    ``PARAMETER_POOL_MAX``), each with its own parameters and the first's other inputs, gradients, auxiliary
    states and internal memory."""
    import mxnet as mx

    from tofu.runtime.train import quiet

    args = {n: mx.sym.var(n) for n, _ in case.inputs}
    fn = getattr(mx.sym, case.op)
    variadic = case.op in ("add_n", "Concat")         # inputs by position, not by name
    sym = fn(*args.values(), **case.attrs, name="op") if variadic else fn(**args, **case.attrs, name="op")
    grad_req = {n: ("null" if n in case.aux else "write") for n in sym.list_arguments()}
    with quiet():                                     # MXNet logs a line at every bind
        exe = sym.simple_bind(ctx=mx.cpu(0), grad_req=grad_req, **dict(case.inputs))
    for arr in [*exe.arg_dict.values(), *exe.aux_dict.values()]:
        arr[:] = mx.nd.random.uniform(0.5, 1.5, shape=arr.shape)
    out = [exe]
    params = [n for n, _ in case.inputs if n in PARAMETERS and n not in case.aux]
    if cold_parameters and params:
        nbytes = 4 * sum(math.prod(shape) for n, shape in case.inputs if n in params)
        for _ in range(min(PARAMETER_POOL_MAX, math.ceil(PARAMETER_POOL_BYTES / nbytes)) - 1):
            own = {n: mx.nd.random.uniform(0.5, 1.5, shape=exe.arg_dict[n].shape) for n in params}
            with quiet():
                out.append(sym.bind(mx.cpu(0), {**exe.arg_dict, **own}, args_grad=exe.grad_dict,
                                    grad_req=grad_req, aux_states=exe.aux_dict, shared_exec=exe))
    return out


SWEEP_ROUNDS = 3
"""How many times the whole sweep is measured; a case's time is the median over the rounds."""
SWEEP_SECONDS = 0.02
"""A sweep case is timed over about this many seconds of calls, at least 5 and at most 400 of them: many calls
of a tiny op resist the other jobs of a shared machine, few calls of a large one keep the sweep short."""


def _measure_long_enough(case: OpCase, repeats: int, forward_only: bool = False) -> tuple[float, tuple[Shape, ...]]:
    """:func:`measure_op` with cold parameters and as many calls as take about ``SWEEP_SECONDS`` (between 5 and
    400; a first measurement of ``max(3, repeats // 5)`` calls estimates one call)."""
    t, _ = measure_op(case, max(3, repeats // 5), forward_only)
    return measure_op(case, min(400, max(5, math.ceil(SWEEP_SECONDS / max(t, 1e-7)))), forward_only,
                      cold_parameters=True)


def case_work(case: OpCase, out_shapes: Sequence[Shape]) -> OpWork:
    """The forward work the model charges for one call of the case (an op without a TDL description, such as
    ``identity``: data movement of its inputs and outputs)."""
    from tofu.sim.flops import op_call_work

    ins = [s for _, s in case.inputs]
    if case.op == "identity":
        elements = sum(math.prod(s) for s in [*ins, *out_shapes])
        return OpWork(0.0, 4.0 * elements, OpClass.DATA_MOVEMENT, frozenset())
    return op_call_work(case.op, Attrs.parse({k: str(v) for k, v in case.attrs.items()}), ins, out_shapes)


def _class_fit(op_class: OpClass, measured: Sequence[tuple[OpCase, float, OpWork]], call: float,
               peak: float) -> ClassFit:
    """The class's rate and launch, the rate at most ``RATE_BOUND`` x ``peak`` (the machine's GEMM FLOP/s or
    copy bandwidth): noisy points may otherwise fit a rate without bound."""
    from tofu.sim.flops import backward_work

    compute = op_class.contraction
    points = []
    for case, t, work in measured:
        bf, bb = backward_work(work, case.grads)
        x = work.flops + bf if compute else work.bytes + bb
        points.append((t, call, 1 + (bf > 0 or bb > 0), x))
    rate, launch = fit_rate(points, max_rate=RATE_BOUND * peak)
    errors = [abs((c + n * launch + x / rate) / t - 1) for t, c, n, x in points]
    return ClassFit("compute" if compute else "memory", rate, launch, len(points), statistics.median(errors))


def _calls(case: OpCase, work: OpWork) -> list[tuple[float, float, float]]:
    """(FLOPs, bytes, grain) of each kernel call of one case: the forward, and the backward when an input has a
    gradient (:func:`tofu.sim.flops.backward_work`; the forward's grain)."""
    from tofu.sim.flops import backward_work

    bf, bb = backward_work(work, case.grads)
    return [(work.flops, work.bytes, work.grain)] + ([(bf, bb, work.grain)] if bf or bb else [])


def _errors(fitted, heldout, error, name=lambda m: m[0].name) -> tuple[float, list[tuple[str, float]]]:
    """The median |error| on ``fitted`` and the signed errors on ``heldout`` (``error``, ``name``: a case's)."""
    return statistics.median(abs(error(m)) for m in fitted), [(name(m), error(m)) for m in heldout]


def _curve(fit, compute: bool, peaks: tuple[float, float]) -> ClassCurve:
    """A fit as a curve, its other roofline side the peak (GEMM FLOP/s, copy bandwidth) of the other kind."""
    other = peaks[1] if compute else peaks[0]
    return ClassCurve(fit.peak, fit.w_half, fit.alpha, fit.launch, other, "", fit.grain_half, fit.grain_alpha)


def _as_fit(fit, compute: bool, fitted: int, fit_error: float, signed: list[tuple[str, float]]) -> CurveFit:
    """A fit with its errors: the median on its ``fitted`` cases, and per held-out case its signed error."""
    held = [(abs(e), name) for name, e in signed]
    worst = max(held) if held else (0.0, "")
    return CurveFit("compute" if compute else "memory", fit.peak, fit.w_half, fit.alpha, fit.launch, fitted,
                    fit_error, len(held), statistics.median(e for e, _ in held) if held else 0.0, worst[0], worst[1],
                    tuple(signed), fit.grain_half, fit.grain_alpha)


def _curve_fit(op_class: OpClass, fitted: Sequence[tuple[OpCase, float, OpWork, float]],
               heldout: Sequence[tuple[OpCase, float, OpWork, float]], peaks: tuple[float, float]) -> CurveFit:
    """The class's curve through ``fitted`` (each case: its measured seconds, its work, the executor call's fixed
    cost measured beside it), R at most ``RATE_BOUND`` x the machine's peak, and its errors on ``heldout``.
    ``peaks``: the GEMM FLOP/s and the copy bandwidth (the other roofline side in the held-out prediction)."""
    compute = op_class.contraction
    points = [(t, call, tuple((f if compute else b, g) for f, b, g in _calls(case, work)))
              for case, t, work, call in fitted]
    fit = fit_grain(points, max_rate=RATE_BOUND * (peaks[0] if compute else peaks[1]))
    curve = _curve(fit, compute, peaks)

    def error(m) -> float:
        case, t, work, call = m
        return (call + sum(curve_seconds(curve, op_class, f, b, grain=g) for f, b, g in _calls(case, work))) / t - 1.0

    return _as_fit(fit, compute, len(fitted), *_errors(fitted, heldout, error))


Measured = tuple[OpCase, float, OpWork, float, float, float]
"""A sweep case: the case, its forward + backward seconds, its work, the executor call's fixed cost measured
beside it, its forward-alone seconds and that call's fixed cost."""


def _op_curve_fits(fitted: Sequence[Measured], heldout: Sequence[Measured],
                   peaks: tuple[float, float]) -> tuple[CurveFit, CurveFit | None]:
    """One op's forward curve F and backward curve B (None when no case has a backward kernel): F through the
    forward-alone times, t_f - c_f = F(forward work); B through the forward + backward times less F's forward,
    t - c - F(forward work) = B(backward work) (:func:`tofu.sim.flops.backward_work`; the calls keep the
    forward's grain). Held out: F on t_f, F + B on t."""
    from tofu.sim.flops import backward_work

    op_class = fitted[0][2].op_class
    compute = op_class.contraction
    max_rate = RATE_BOUND * (peaks[0] if compute else peaks[1])

    def fwd(work: OpWork) -> float:
        return work.flops if compute else work.bytes

    def bwd(case: OpCase, work: OpWork) -> float:
        bf, bb = backward_work(work, case.grads)
        return bf if compute else bb

    f_fit = fit_grain([(tf, cf, ((fwd(w), w.grain),)) for _, _, w, _, tf, cf in fitted], max_rate=max_rate)
    f_curve = _curve(f_fit, compute, peaks)

    def forward_seconds(work: OpWork) -> float:
        return curve_seconds(f_curve, op_class, work.flops, work.bytes, grain=work.grain)

    f_error, f_held = _errors(fitted, heldout, lambda m: (m[5] + forward_seconds(m[2])) / m[4] - 1.0)
    forward = _as_fit(f_fit, compute, len(fitted), f_error, f_held)
    with_backward = [m for m in fitted if bwd(m[0], m[2]) > 0]
    if not with_backward:
        return forward, None
    b_fit = fit_grain([(t, c + forward_seconds(w), ((bwd(case, w), w.grain),))
                       for case, t, w, c, _, _ in with_backward], max_rate=max_rate)
    b_curve = _curve(b_fit, compute, peaks)

    def error(m: Measured) -> float:
        case, t, work, c = m[:4]
        bf, bb = backward_work(work, case.grads)
        return (c + forward_seconds(work) + curve_seconds(b_curve, op_class, bf, bb, grain=work.grain)) / t - 1.0

    b_error, b_held = _errors(with_backward, [m for m in heldout if bwd(m[0], m[2]) > 0], error)
    return forward, _as_fit(b_fit, compute, len(with_backward), b_error, b_held)


UPDATE_ELEMENTS = (1024, 4096, 16384, 65536, 262144, 1048576, 2359296, 4194304, 8388608)
"""The update sweep: parameter sizes (elements) of one ``sgd_mom_update`` call, alternately fitted and held out."""


def _update_seconds(elements: int, repeats: int, calls: int, rotate: bool = False) -> float:
    """Median seconds of one imperative ``sgd_mom_update`` on ``elements`` (float32), as the runtime calls it
    (``rotate``: over parameters, gradients and momenta of ``PARAMETER_POOL_BYTES`` in all, each call the next
    one's, so that an update finds its arrays out of the caches, as in a step: measured here, one parameter of 1 M
    elements updated again and again streams 19 GB/s, 8 M elements or every parameter in turn 12-13 GB/s)."""
    import mxnet as mx

    pool = min(2048, max(1, math.ceil(PARAMETER_POOL_BYTES / (12 * elements)))) if rotate else 1
    params = [tuple(mx.nd.ones((elements,)) for _ in range(3)) for _ in range(pool)]

    def updates():
        for i in range(calls):
            w, g, m = params[i % pool]
            mx.nd.sgd_mom_update(w, g, m, lr=0.01, momentum=0.9, out=w)
        mx.nd.waitall()
    return _median_seconds(updates, max(5, repeats // 3)) / calls


def _update_curve(repeats: int, peaks: tuple[float, float]) -> CurveFit:
    """The update kernel's curve through imperative ``sgd_mom_update`` calls at ``UPDATE_ELEMENTS`` (bytes:
    :data:`tofu.sim.flops.UPDATE_BYTES_PER_ELEMENT` x 4 per element), each timed over about ``SWEEP_SECONDS``
    (medians of ``SWEEP_ROUNDS``), with its launch: the engine times an update by this curve alone (not by
    ``update_launch_seconds``, measured on 8 elements again and again)."""
    from tofu.sim.flops import UPDATE_BYTES_PER_ELEMENT
    from tofu.sim.kernels import fit_curve

    points = []
    for n in UPDATE_ELEMENTS:
        one = _update_seconds(n, 3, 3)
        calls = min(200, max(3, math.ceil(SWEEP_SECONDS / max(one, 1e-7))))
        t = statistics.median(_update_seconds(n, repeats, calls, rotate=True) for _ in range(SWEEP_ROUNDS))
        points.append((f"sgd_mom_update {n}", t, UPDATE_BYTES_PER_ELEMENT * 4.0 * n))
    fitted, heldout = points[0::2], points[1::2]
    fit = fit_curve([(t, 0.0, (b,)) for _, t, b in fitted], max_rate=RATE_BOUND * peaks[1])
    curve = _curve(fit, False, peaks)

    def error(point) -> float:
        return curve_seconds(curve, OpClass.ELEMENTWISE, 0.0, point[2]) / point[1] - 1.0

    fit_error, signed = _errors(fitted, heldout, error, name=lambda p: p[0])
    return _as_fit(fit, False, len(fitted), fit_error, signed)


def _copy_fit(repeats: int, identity_rate: ClassFit, call: float, local: float) -> tuple[float, float]:
    """(bandwidth, launch) of one copy between cpu(0) and cpu(1) inside an executor (see the module docstring)."""
    import mxnet as mx

    from tofu.runtime.train import quiet

    points = []
    for n in COPY_ELEMENTS:
        with mx.AttrScope(ctx_group="dev0"):       # as the rewriter sends a piece: identity on the holder
            sent = mx.sym.identity(mx.sym.var("x"), name="sent")
        with mx.AttrScope(ctx_group="dev1"):
            y = mx.sym.identity(sent, name="y")
        with quiet():
            exe = y.simple_bind(ctx=mx.cpu(0), group2ctx={"dev0": mx.cpu(0), "dev1": mx.cpu(1)}, x=(n,),
                                grad_req="write")
        head = mx.nd.ones((n,), ctx=mx.cpu(1))

        def run():
            exe.forward(is_train=True)
            exe.backward([head])
            exe.grad_dict["x"].wait_to_read()
        t = _median_seconds(run, repeats)
        ident = 2 * 2 * (identity_rate.launch + 2 * 4 * n * 1.5 / identity_rate.rate)   # 2 identities, 2B + 4B
        points.append((t, call + ident, 2, 2 * 4 * n))
    return fit_rate(points, max_rate=local)          # no faster than a copy inside one context


def _call_seconds(repeats: int, forward_only: bool = False) -> float:
    """The executor call's fixed cost: a forward + backward call (``forward_only``: a training forward call) of a
    one-element-row relu (median of 3 runs)."""
    tiny = OpCase("relu 1x8", "Activation", (("data", (1, 8)),), {"act_type": "relu"})
    return statistics.median(measure_op(tiny, repeats * 4, forward_only)[0] for _ in range(3))


TASK_DEPTHS = (4, 16, 32)
TASK_WORKERS = (2, 4)
TASK_PLANS = ("tofu", "data-parallel")
TASK_SECONDS = 1.0
BULK_DEPTHS = (16, 32, 64, 128)
"""The per-task fits' cases (see the module docstring: ``TASK_DEPTHS`` on ``TASK_WORKERS`` contexts by
``TASK_PLANS``, ``BULK_DEPTHS`` on one context) and about how long each is timed."""


def glue_net(depth: int, batch: int = 8, width: int = 16):
    """The calibration graph of the per-task cost: ``depth`` residual layers h + tanh(FullyConnected(h)) of
    ``width`` units between an input and an output FullyConnected, a softmax loss over 4 classes; a Graph named
    ``calibration-glue-<depth>`` (not one of the validation models)."""
    import mxnet as mx

    from tofu.graph.mxnet_import import import_symbol

    h = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=width, name="fc_in")
    for i in range(depth):
        y = mx.sym.Activation(mx.sym.FullyConnected(h, num_hidden=width, name=f"fc{i}"), act_type="tanh",
                              name=f"act{i}")
        h = mx.sym.elemwise_add(h, y, name=f"res{i}")
    loss = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(h, num_hidden=4, name="fc_out"), mx.sym.var("softmax_label"),
                                name="softmax")
    return import_symbol(loss, {"data": (batch, width), "softmax_label": (batch,)}, name=f"calibration-glue-{depth}")


def fit_task_and_copy_seconds(points: Sequence[TaskPoint], copy_launch: float) -> tuple[float, float]:
    """(p, L) of ``t - s = c + n p + m (L - L0)`` by bounded least squares over ``points`` (p >= 0, L >= 0): the
    per-task cost and the copy's latency fitted together on the multi-context graphs, s simulated with the copy
    latency L0 = ``copy_launch`` measured on a two-op executor and m the program's copies. On the ``cpu`` profile
    (one compute slot, copies on the compute streams) the engine's iteration is the sum of its tasks' times, so
    s is linear in p and L. A copy inside a large graph costs what the fit says, not what a lone copy costs."""
    import numpy as np
    from scipy.optimize import lsq_linear

    a = np.array([[1.0, p.tasks, p.copies] for p in points])
    y = np.array([p.measured_seconds - p.simulated_seconds for p in points])
    fit = lsq_linear(a, y, bounds=([-np.inf, 0.0, -copy_launch], [np.inf, np.inf, np.inf]))
    return float(fit.x[1]), copy_launch + float(fit.x[2])


def fit_task_seconds(points: Sequence[TaskPoint]) -> float:
    """p of ``t - s = c + n p`` by least squares over ``points`` (clamped at 0); :func:`measure` fits the
    multi-context points for ``task_seconds``, the one-context points for ``bulk_task_seconds``."""
    import numpy as np

    a = np.array([[1.0, p.tasks] for p in points])
    y = np.array([p.measured_seconds - p.simulated_seconds for p in points])
    (_, slope), *_ = np.linalg.lstsq(a, y, rcond=None)
    return max(0.0, float(slope))


def _task_points(profile: Profile) -> tuple[TaskPoint, ...]:
    """The per-task fits' cases measured (see the module docstring); ``profile`` without the per-task costs."""
    from tofu.api import partitioned
    from tofu.runtime.data import initial_values, synthetic_batch
    from tofu.runtime.train import Trainer
    from tofu.search.algorithms import plan_graph
    from tofu.sim.engine import simulate_iteration
    from tofu.sim.program import TaskKind

    cases = []
    configs = [(d, w, name) for d in TASK_DEPTHS for w in TASK_WORKERS for name in TASK_PLANS]
    configs += [(d, 1, "tofu") for d in BULK_DEPTHS]
    for depth in sorted({d for d, _, _ in configs}):
        graph = glue_net(depth)
        values = {**initial_values(graph), **synthetic_batch(graph)}
        for _, workers, plan_name in (c for c in configs if c[0] == depth):
            plan = plan_graph(graph, workers, plan_name)
            trainer = Trainer(partitioned(graph, plan), values, "cpu", lr=1e-3,
                              replicas=False)       # the graph the program models: routes, no replicas
            for _ in range(3):                          # warm-up
                trainer.step()
            run = simulate_iteration(graph, plan, profile, from_symbol=True)
            tasks = sum(t.kind is not TaskKind.UPDATE for t in run.program.tasks)
            copies = sum(t.kind is TaskKind.COPY for t in run.program.tasks)
            cases.append(((depth, workers, plan_name, tasks, run.seconds, copies), trainer))
    start, rounds = time.perf_counter(), 0
    while rounds < 10 or time.perf_counter() - start < TASK_SECONDS * len(cases):   # round-robin: alike load
        for _, trainer in cases:
            trainer.step()
        rounds += 1
    return tuple(TaskPoint(d, w, name, n, statistics.median(trainer.step_seconds[3:]), s, m)
                 for (d, w, name, n, s, m), trainer in cases)


def _progress(message: str) -> None:
    """One progress line on stderr (a calibration takes minutes)."""
    print(f"tofu.sim.calibrate: {message}", file=sys.stderr, flush=True)


def measure(repeats: int = 15) -> Calibration:
    """Runs the microbenchmarks (about three minutes on 2 cores at 15 repeats), a progress line on stderr
    per stage."""
    import mxnet as mx

    from tofu.sim.program import backward_op

    _progress("peaks and the calibration set")

    gemm_n = 1024
    a = mx.nd.random.uniform(shape=(gemm_n, gemm_n), ctx=mx.cpu(0))
    b = mx.nd.random.uniform(shape=(gemm_n, gemm_n), ctx=mx.cpu(0))
    t_gemm = _median_seconds(lambda: mx.nd.dot(a, b).wait_to_read(), max(5, repeats // 3))

    n = 64 * 2 ** 20 // 4
    src, dst = mx.nd.ones((n,), ctx=mx.cpu(0)), mx.nd.zeros((n,), ctx=mx.cpu(0))
    t_copy = _median_seconds(lambda: (src.copyto(dst), dst.wait_to_read()), max(5, repeats // 3))
    gemm_flops, copy_bandwidth = 2 * gemm_n ** 3 / t_gemm, 2 * n * 4 / t_copy

    calls, fits, curves = [], {}, {}
    for op_class, cases in CALIBRATION_CASES.items():
        call = _call_seconds(repeats)          # measured beside each class: the shared machine drifts
        calls.append(call)
        measured = []
        for case in cases:
            t, outs = measure_op(case, repeats)
            measured.append((case, t, case_work(case, outs)))
        peak = gemm_flops if op_class.contraction else copy_bandwidth
        fits[op_class.value] = _class_fit(op_class, measured, call, peak)
    # Rounds over every class, each case beside its own executor call: a burst of other work on the shared
    # machine spoils one round's measurements of a case, not its median.
    # Each case timed forward + backward and forward alone, each beside its own executor call's fixed cost.
    rounds: dict[str, list[tuple[float, float, float, float]]] = {}
    outs: dict[str, tuple[Shape, ...]] = {}
    cases_by_name = {c.name: c for sweep in (SWEEP_CASES, GRAIN_CASES) for cases in sweep.values() for c in cases}
    cases_by_name.update((c.name, c) for families in OP_SWEEPS.values() for cases in families for c in cases)
    for r in range(SWEEP_ROUNDS):
        _progress(f"sweep round {r + 1} of {SWEEP_ROUNDS} ({len(cases_by_name)} cases, forward + backward and "
                  f"forward alone)")
        for name, case in cases_by_name.items():
            call = _call_seconds(repeats)
            t, outs[name] = _measure_long_enough(case, repeats)
            call_f = _call_seconds(repeats, forward_only=True)
            t_f, _ = _measure_long_enough(case, repeats, forward_only=True)
            rounds.setdefault(name, []).append((t, call, t_f, call_f))

    def swept(cases: Sequence[OpCase]) -> tuple[list[Measured], list[Measured]]:
        """A family's cases measured (medians over the rounds), the even positions fitted, the odd held out."""
        out = []
        for case in cases:
            t, call, t_f, call_f = (statistics.median(r[k] for r in rounds[case.name]) for k in range(4))
            out.append((case, t, case_work(case, outs[case.name]), call, t_f, call_f))
        return out[0::2], out[1::2]

    peaks = (gemm_flops, copy_bandwidth)
    for op_class in SWEEP_CASES:
        fitted, heldout = [], []
        for sweep in (SWEEP_CASES, GRAIN_CASES):
            if op_class in sweep:
                f, h = swept(sweep[op_class])
                fitted += [m[:4] for m in f]
                heldout += [m[:4] for m in h]
        curves[op_class.value] = _curve_fit(op_class, fitted, heldout, peaks)
        log.info("%s: %s", op_class.value, curves[op_class.value])
    op_curves: dict[str, CurveFit] = {}
    for op, families in OP_SWEEPS.items():
        fitted, heldout = [], []
        for cases in families:
            f, h = swept(cases)
            fitted += f
            heldout += h
        forward, backward = _op_curve_fits(fitted, heldout, peaks)
        op_curves[op] = forward
        if backward is not None:
            op_curves[backward_op(op)] = backward
    _progress("copies between contexts, updates")
    cross_bw, copy_launch = _copy_fit(repeats, fits[OpClass.DATA_MOVEMENT.value], _call_seconds(repeats),
                                      copy_bandwidth)
    call = statistics.median(calls)

    update = _update_seconds(8, repeats, 200)
    op_curves["sgd_mom_update"] = _update_curve(repeats, peaks)

    memory = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    cal = Calibration(gemm_flops, copy_bandwidth, cross_bw, copy_launch, call, update, fits,
                      memory, platform.node(), os.cpu_count() or 1, repeats, curves, op_curves=op_curves)
    _progress(f"the calibration graph's steps ({len(TASK_DEPTHS) * len(TASK_WORKERS) * len(TASK_PLANS) + len(BULK_DEPTHS)} "
              f"cases)")
    points = _task_points(cal.profile())
    task, launch = fit_task_and_copy_seconds([p for p in points if p.workers > 1], copy_launch)
    return replace(cal, task_seconds=task, copy_launch_seconds=launch,
                   bulk_task_seconds=fit_task_seconds([p for p in points if p.workers == 1]), task_points=points)


def calibration(path: Path | None = DEFAULT_CACHE, recalibrate: bool = False, repeats: int = 15) -> Calibration:
    """The cached calibration of this host, measured (and cached at ``path``) when absent, stale, of another
    ``VERSION``, or asked."""
    if path is not None and path.exists() and not recalibrate:
        try:
            doc = json.loads(path.read_text())
            if doc.get("version") == VERSION:
                cal = Calibration.from_json(doc)
                if cal.host == platform.node() and cal.cores == (os.cpu_count() or 1):
                    return cal
        except (TypeError, ValueError, KeyError, json.JSONDecodeError):
            log.warning("ignoring unreadable calibration cache %s", path)
    _progress(f"measuring this machine's cpu profile (about three minutes)"
              f"{f', cached in {path}' if path is not None else ''}")
    cal = measure(repeats)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(cal), indent=1))
    return cal


def cpu_profile(path: Path | None = DEFAULT_CACHE, recalibrate: bool = False) -> Profile:
    """The ``cpu`` profile of this machine (see the module docstring)."""
    return calibration(path, recalibrate).profile()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tofu.sim.calibrate [--recalibrate] [--cache PATH]``: the ``cpu`` profile's kernel curves and
    their held-out errors (measured when the cache is absent or stale, or asked)."""
    import argparse

    p = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    p.add_argument("--recalibrate", action="store_true", help="measure again even when the cache is current")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="the cache file")
    args = p.parse_args(argv)
    start = time.perf_counter()
    cal = calibration(args.cache, args.recalibrate)
    print(f"cpu profile of {cal.host} ({cal.cores} cores), {time.perf_counter() - start:.1f} s; GEMM "
          f"{cal.gemm_flops / 1e9:.1f} GFLOP/s, copy {cal.copy_bandwidth / 1e9:.1f} GB/s, executor call "
          f"{cal.call_seconds * 1e6:.0f} us, per task {cal.task_seconds * 1e6:.2f} us, bulked (one context) "
          f"{(cal.bulk_task_seconds or 0.0) * 1e6:.2f} us ({len(cal.task_points)} cases of the calibration graph)")
    print("class / op               R                h         a     L (us)   s     b    fit: cases |err|  held out: "
          "cases median worst")
    for title, fits in (("all classes", cal.curves), ("all ops", cal.op_curves)):
        errors = []
        for name, f in fits.items():
            unit = "FLOP/s" if f.bound == "compute" else "B/s"
            print(f"{name[:24]:24s} {f.peak:9.3g} {unit:6s} {f.w_half:9.3g} {f.alpha:5.2f} {f.launch * 1e6:8.1f}"
                  f" {f.grain_half:5.1f} {f.grain_alpha:4.2f}"
                  f"  {f.fit_cases:5d} {f.fit_median_error:5.1%}  {f.heldout_cases:5d} {f.heldout_median_error:6.1%}"
                  f" {f.heldout_worst_error:6.1%} ({f.heldout_worst_case})")
            errors += [abs(e) for _, e in f.heldout]
        if errors:
            print(f"{title}: {len(errors)} held-out sizes, median |error| {statistics.median(errors):.1%}, "
                  f"worst {max(errors):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
