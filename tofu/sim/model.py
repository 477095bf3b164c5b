"""The performance model: one training iteration (forward + backward + update) of a partitioned graph.

Input: a :class:`~tofu.graph.ir.Graph`, a :class:`~tofu.search.plan.Plan` for it, a
:class:`~tofu.sim.hardware.Profile`. Output: an :class:`IterationEstimate`.

**Compute.** Every worker runs every op on its shard: the kernel call that
:func:`tofu.analysis.compose.compose` gives (the call the rewriter emits), whose pieces' shapes describe the op
again (:func:`tofu.sim.flops.op_work`). One call takes the roofline time

    t(call) = max(F / (e_c P), B / (e_m W)) + L

F its FLOPs, B its bytes, P and W the device's peak FLOP/s and memory bandwidth, e_c and e_m the compute and
memory efficiencies of the op's class (:class:`~tofu.sim.flops.OpClass`: GEMM, convolution, normalization,
pooling, element-wise, data movement), L the class's per-kernel launch cost. The backward of a call
(ours, kept simple): when some input has a gradient, F_bwd = F * max(1, a), a the number of inputs with a
gradient that the op's contraction reads (each needs a contraction of the forward's size: dX = dY W^T and
dW = X^T dY for a matrix product; one element-wise pass otherwise), and B_bwd = 2 B (reads the output's
gradient and the forward's tensors, writes the inputs' gradients). The update (SGD with momentum, what
:mod:`tofu.runtime` runs) reads weight, gradient and history and writes weight and history: 5 x 4 bytes and
4 FLOPs per element of each parameter piece a device holds (a replicated piece once, on its first holder),
one call per piece at the profile's update launch cost.
Given the partitioned graph's glue (:mod:`tofu.sim.glue`: slices, concats, add_n, identities on each device,
and the copies between devices), each glue op is costed like a call of its class (backward: twice its bytes)
and each copy adds the profile's copy launch cost (its bytes stay in the communication term below).
A device's compute C_w is the sum over its calls; devices run in parallel up to ``concurrency``:

    C = max(max_w C_w, sum_w C_w / concurrency) + the profile's fixed per-iteration cost

**Communication.** Step j of the plan cuts each group of S_j = f_j ... f_m workers f_j ways and moves d_j bytes
over all its groups (``plan.steps[j].cost_bytes``, forward and backward). Ours: the bytes are spread evenly over
the workers, and the traffic of step j runs between the f_j subgroups of one group, all-to-all. A domain of
``size`` s < S_j of an interconnect level sends through its uplink the fraction of its share that leaves it,

    share = d_j s / k,  leave = 1 if s <= S_{j+1} else (f_j - s / S_{j+1}) / (f_j - 1)
    T_j = max over levels with s < S_j of  share * leave / bandwidth   (a shared level: d_j * leave / bandwidth)

(full duplex: the traffic in each direction is symmetric, so one direction's time is the step's). The
recursion's workers are numbered so that the first cut separates the largest domains: on ``k80x8`` the first
of three 2-way cuts crosses the root complex, the second a quad's PCIe switch, the third stays on one board.
Steps run one after another: T = sum_j T_j.

**Overlap** (:class:`Overlap`): NONE (the default, conservative: iteration = C + T) or FULL (the engine hides
the smaller behind the larger: iteration = max(C, T)). Memory: ``plan.per_device_bytes['total']`` against the
profile's capacity.
"""
from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

from tofu.analysis.compose import compose, held_box
from tofu.analysis.views import NodeView
from tofu.errors import TofuError
from tofu.graph.ir import Graph, Role
from tofu.search.plan import Plan
from tofu.sim.flops import (UPDATE_BYTES_PER_ELEMENT, UPDATE_FLOPS_PER_ELEMENT, OpClass, OpWork,  # noqa: F401
                             backward_work, batch_size, op_call_work)
from tofu.sim.glue import Glue
from tofu.sim.hardware import Profile
from tofu.tdl.describe import describe


class Overlap(enum.Enum):
    NONE = "none"        # iteration = compute + communication
    FULL = "full"        # iteration = max(compute, communication)


@dataclass(frozen=True)
class CallTime:
    """One kernel call, forward and backward."""

    forward: float
    backward: float

    @property
    def total(self) -> float:
        return self.forward + self.backward


@dataclass(frozen=True)
class IterationEstimate:
    """The model's answer for one training iteration.

    Attributes:
        seconds: the iteration (compute and communication combined by ``overlap``).
        compute_seconds: C of the module docstring.
        comm_seconds: T, the sum of ``step_comm_seconds``.
        device_compute_seconds: C_w per device.
        step_comm_seconds: T_j per recursion step.
        flops: FLOPs of all devices, forward + backward + update.
        per_device_bytes: one device's memory under the plan.
        capacity_bytes: one device's memory in the profile.
        oom: ``per_device_bytes > capacity_bytes``.
        samples_per_second: ``batch / seconds``.
    """

    profile: str
    model: str
    algo: str
    workers: int
    batch: int
    overlap: Overlap
    seconds: float
    compute_seconds: float
    comm_seconds: float
    device_compute_seconds: tuple[float, ...]
    step_comm_seconds: tuple[float, ...]
    flops: float
    per_device_bytes: int
    capacity_bytes: float
    oom: bool
    samples_per_second: float


def roofline_seconds(work: OpWork, flops: float, nbytes: float, profile: Profile,
                     launch: float | None = None) -> float:
    """max(F / (e_c P), B / (e_m W)) + L for ``flops`` and ``nbytes`` of an op of ``work``'s class (e_c, e_m, L:
    the profile's for the class; L: ``launch`` when given)."""
    r = profile.rate(work.op_class)
    if launch is None:
        launch = r.launch
    return max(flops / (r.compute * profile.peak_flops), nbytes / (r.memory * profile.mem_bandwidth)) + launch


def call_time(work: OpWork, grads: Sequence[str], profile: Profile) -> CallTime:
    """Forward and backward time of one call (see the module docstring)."""
    fwd = roofline_seconds(work, work.flops, work.bytes, profile)
    bf, bb = backward_work(work, grads)
    bwd = roofline_seconds(work, bf, bb, profile) if bf or bb else 0.0
    return CallTime(fwd, bwd)


def _size(box) -> tuple[int, ...]:
    return tuple(b - a for a, b in box)


def update_seconds(elements: int, itemsize: int, profile: Profile) -> float:
    """The SGD-momentum update of one parameter piece of ``elements`` elements: one call at the profile's update
    launch cost (see the module docstring)."""
    update = OpWork(UPDATE_FLOPS_PER_ELEMENT * elements, UPDATE_BYTES_PER_ELEMENT * elements * itemsize,
                    OpClass.ELEMENTWISE, frozenset())
    return roofline_seconds(update, update.flops, update.bytes, profile, profile.update_launch)


def device_compute(graph: Graph, plan: Plan, profile: Profile) -> tuple[tuple[float, ...], float]:
    """Per device, the seconds of its calls (forward, backward, update); and the FLOPs of all devices."""
    factors = tuple(s.factor for s in plan.steps)
    k = math.prod(factors)
    choices = [dict(s.op_choices) for s in plan.steps]
    dims = [dict(s.tensor_dims) for s in plan.steps]
    grads = graph.with_gradient
    seconds = [0.0] * k
    flops = 0.0
    for node in graph.nodes:
        view = NodeView.of(graph, node)
        item = graph.tensors[node.outputs[0]].nbytes // max(1, graph.tensors[node.outputs[0]].size)
        try:
            calls = compose(view, tuple(c[node.name] for c in choices), factors)
        except TofuError as e:
            raise TofuError(f"node {node.name!r} ({node.op}): {e}") from e
        desc = describe(node.op, node.attrs, view.in_shapes, view.out_shapes)
        names = [t.name for t in desc.inputs]
        with_grad = [n for n, t in zip(names, node.inputs) if t in grads]
        for call in calls:
            ins = tuple(_size(p.box) for p in call.inputs)
            outs = tuple(_size(o.box) for o in call.outputs)
            work = op_call_work(node.op, call.attrs, ins, outs, item)
            t = call_time(work, with_grad, profile)
            seconds[call.worker] += t.total
            flops += work.flops + backward_work(work, with_grad)[0]
    for t in graph.tensors:                 # the update of each parameter piece, on its first holder
        if t.role is not Role.PARAM:
            continue
        seen = set()
        for w in range(k):
            box = held_box(t.shape, tuple(d[t.name] for d in dims), factors, w)
            if box in seen:
                continue
            seen.add(box)
            n = math.prod(_size(box))
            seconds[w] += update_seconds(n, t.nbytes // max(1, t.size), profile)
            flops += UPDATE_FLOPS_PER_ELEMENT * n
    return tuple(seconds), flops


def step_comm_seconds(plan: Plan, profile: Profile) -> tuple[float, ...]:
    """T_j for every step of ``plan`` on ``profile``'s interconnect (see the module docstring).

    Raises:
        ValueError: the plan has more workers than the profile has devices.
    """
    factors = [s.factor for s in plan.steps]
    k = math.prod(factors)
    if k > profile.devices:
        raise ValueError(f"the plan has {k} workers, profile {profile.name} has {profile.devices} devices")
    out = []
    for j, step in enumerate(plan.steps):
        group = math.prod(factors[j:])              # S_j
        sub = group // step.factor                   # S_{j+1}
        t = 0.0
        for level in profile.levels:
            if level.size >= group or step.cost_bytes == 0:
                continue
            leave = 1.0 if level.size <= sub else (step.factor - level.size / sub) / (step.factor - 1)
            share = step.cost_bytes if level.shared else step.cost_bytes * level.size / k
            t = max(t, share * leave / level.bandwidth)
        out.append(t)
    return tuple(out)


def glue_seconds(glue: Glue, workers: int, profile: Profile) -> tuple[float, ...]:
    """Per device, the seconds of the partitioned graph's glue: every glue call's roofline time of its class
    (backward: twice the bytes, when it has one), and every copy's launch cost on its destination (and its
    backward's on its source); the copies' bytes are the plan's step bytes, timed in the communication."""
    seconds = [0.0] * workers
    for c in glue.calls:
        seconds[c.device] += roofline_seconds(c.work, c.work.flops, c.work.bytes, profile)
        if c.backward:
            seconds[c.device] += roofline_seconds(c.work, c.work.flops, 2 * c.work.bytes, profile)
    for c in glue.copies:
        seconds[c.dst] += profile.copy_launch
        if c.backward:
            seconds[c.src] += profile.copy_launch
    return tuple(seconds)


def simulate(graph: Graph, plan: Plan, profile: Profile, overlap: Overlap = Overlap.NONE,
             batch: int | None = None, glue: Glue | None = None) -> IterationEstimate:
    """One training iteration of ``graph`` partitioned by ``plan`` on ``profile``.

    Args:
        graph: the model, at the batch the plan was made for.
        plan: its plan (``plan.workers`` devices of the profile are used).
        profile: the hardware.
        overlap: how compute and communication combine.
        batch: samples per iteration (default: :func:`batch_size`).
        glue: the partitioned graph's glue (:func:`tofu.sim.glue.count_glue`), added to each device's compute;
            None: kernels only.

    Raises:
        ValueError: the plan needs more devices than the profile has.
    """
    comm = step_comm_seconds(plan, profile)
    devices, flops = device_compute(graph, plan, profile)
    if glue is not None:
        devices = tuple(d + g for d, g in zip(devices, glue_seconds(glue, len(devices), profile)))
    compute = max(max(devices), sum(devices) / profile.concurrency) + profile.step_seconds
    total_comm = sum(comm)
    seconds = compute + total_comm if overlap is Overlap.NONE else max(compute, total_comm)
    memory = int(dict(plan.per_device_bytes)["total"])
    b = batch if batch is not None else batch_size(graph)
    return IterationEstimate(profile.name, graph.name, plan.algo, plan.workers, b, overlap, seconds, compute,
                             total_comm, devices, comm, flops, memory, profile.memory_bytes,
                             memory > profile.memory_bytes, b / seconds)
