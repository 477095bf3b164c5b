"""Hardware profiles of the performance model: what one device computes and how devices are linked.

Input: nothing (datasheet constants and published measurements, :mod:`tofu.sim.published`). Output:
:class:`Profile` values (the ``cpu`` profile is built by :mod:`tofu.sim.calibrate`; :func:`tofu.sim.profile`
looks any of them up by name). This module is data: it imports nothing of the simulator above it.

A device times a kernel by its op class's curve (:class:`ClassCurve`, :mod:`tofu.sim.kernels`); it has
``peak_flops`` (FP32),
``mem_bandwidth`` and ``memory_bytes``. The interconnect is a hierarchy of :class:`Level` values, innermost
first: a level groups ``size`` consecutive devices into one *domain*, and each domain reaches the other domains
of its parent over one uplink of ``bandwidth`` bytes/s per direction (full duplex). Devices 0..n-1 are numbered
so that the domains are runs of consecutive ids, as the plan numbers its workers (the first cut's groups vary
slowest, see :func:`tofu.analysis.compose.coordinates`), so a plan's first cut separates the largest domains.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from tofu.sim.flops import OpClass

GB = 1e9
GiB = 2 ** 30


@dataclass(frozen=True)
class Level:
    """One level of the interconnect: domains of ``size`` devices, each with an uplink of ``bandwidth`` bytes/s
    per direction to the rest of the next level's domain. ``shared``: the level's domains all use one link (a
    memory bus), so its bandwidth is divided among them instead of multiplied."""

    name: str
    size: int
    bandwidth: float
    shared: bool = False

    def __post_init__(self):
        if self.size < 1 or self.bandwidth <= 0:
            raise ValueError(f"level {self.name}: size {self.size} and bandwidth {self.bandwidth} must be positive")


class Direction(enum.Enum):
    UP = "up"            # leaving a domain through its uplink
    DOWN = "down"        # entering a domain through its uplink
    SHARED = "shared"    # a shared level's one link (both directions, every domain)


@dataclass(frozen=True)
class Link:
    """One direction of one domain's uplink at the level named ``level`` (a shared level: its one link)."""

    level: str
    domain: int
    direction: Direction

    def __str__(self) -> str:
        return f"{self.level}{self.domain}.{self.direction.value}"


@dataclass(frozen=True)
class ClassRate:
    """What one op class reaches on a device at every size: the roofline of a profile without kernel curves
(:func:`tofu.sim.kernels.from_rates`; profiles built by hand in tests, and the ``cpu`` calibration's rates).

    Attributes:
        compute: fraction of ``peak_flops`` its kernels reach.
        memory: fraction of ``mem_bandwidth`` its kernels reach.
        launch: fixed seconds per kernel call (engine push, kernel launch, MKL setup).
    """

    compute: float
    memory: float
    launch: float

    def __post_init__(self):
        if self.compute <= 0 or self.memory <= 0 or self.launch < 0:
            raise ValueError(f"class rate {self}: efficiencies must be positive, launch non-negative")


@dataclass(frozen=True)
class ClassCurve:
    """How fast one op class's kernels run on a device as a function of their work (:mod:`tofu.sim.kernels` has
    the form and its math).

    Attributes:
        peak: R, the rate large kernels reach: FLOP/s for a contraction (GEMM, convolution), bytes/s otherwise.
        w_half: h, the work (FLOPs, or bytes) at which a kernel reaches half of ``peak``; 0: no fall.
        alpha: a, how steeply the rate falls below ``w_half`` (r ~ R (w / h)^a), 0 < a <= 1.
        launch: L, fixed seconds per kernel call beside its work.
        other: the rate of the roofline's other side: bytes/s a contraction's kernels stream, FLOP/s the others'
            compute (inf: that side never bounds).
        source: where the numbers come from, in one line (docs/sim.md's parameter table shows it).
        grain_half: s, the grain (a convolution's output pixels per image) at which the class's kernels run at half
            the rate the curve gives their work; 0: the rate does not depend on the grain.
        grain_alpha: b, how steeply the rate falls below ``grain_half`` (q(g) = g^b / (g^b + s^b)).
    """

    peak: float
    w_half: float
    alpha: float
    launch: float
    other: float = math.inf
    source: str = ""
    grain_half: float = 0.0
    grain_alpha: float = 1.0

    def __post_init__(self):
        if not (self.peak > 0 and self.w_half >= 0 and 0 < self.alpha <= 1 and self.launch >= 0 and self.other > 0
                and self.grain_half >= 0 and self.grain_alpha > 0):
            raise ValueError(f"class curve {self}: peak and other must be positive, w_half, launch and grain_half "
                             f"non-negative, alpha in (0, 1], grain_alpha positive")


@dataclass(frozen=True)
class KernelModel:
    """Per :class:`~tofu.sim.flops.OpClass`, its :class:`ClassCurve` (every class, once); and ``ops``: the curves
    of particular kernels measured apart, each named by the MXNet op it times (``Convolution``; its backward
    ``_backward_Convolution``), which time that op's tasks instead of its class's curve (a kernel that departs
    from its class: a forward convolution on one output pixel runs at a third of its backward's rate, LayerNorm's
    backward at a tenth of BatchNorm's per byte)."""

    curves: tuple[tuple[OpClass, ClassCurve], ...]
    ops: tuple[tuple[str, ClassCurve], ...] = ()

    def __post_init__(self):
        classes = [c for c, _ in self.curves]
        if sorted(classes, key=lambda c: c.value) != sorted(OpClass, key=lambda c: c.value):
            raise ValueError(f"a kernel model needs one curve per op class, got {[c.value for c in classes]}")
        names = [n for n, _ in self.ops]
        if len(set(names)) != len(names):
            raise ValueError(f"a kernel model names each op's curve once, got {names}")

    def own(self, op: str | None) -> ClassCurve | None:
        """The curve measured for ``op``'s kernels, None when the model has none."""
        return next((k for name, k in self.ops if name == op), None) if op is not None else None

    def curve(self, op_class: OpClass, op: str | None = None) -> ClassCurve:
        """The curve of ``op``'s kernels when the model has one, else its class's."""
        own = self.own(op)
        return own if own is not None else next(k for c, k in self.curves if c is op_class)


@dataclass(frozen=True)
class Profile:
    """A machine of ``devices`` identical devices.

    Attributes:
        name: the profile's name (``k80x8``).
        devices: how many devices the machine has (a plan may use fewer).
        peak_flops: one device's peak FP32 FLOP/s.
        mem_bandwidth: one device's memory bandwidth, bytes/s.
        memory_bytes: one device's memory capacity.
        levels: the interconnect, innermost level first (see the module docstring).
        host_bandwidth: bytes/s per direction between one device and host memory (what swapping uses).
        launch_seconds: fixed cost of one engine op: a copy's per-transfer latency unless
            ``copy_launch_seconds`` says otherwise, an update's unless ``update_launch_seconds`` does, and a kernel's
            of a class that ``classes`` lacks (a profile without ``kernels``).
        concurrency: how many devices compute at the same time (GPUs: all; CPU contexts share the cores, and
            two of them barely compute at once with MXNet's native kernels, measured: 1).
        source: where the numbers come from, in one line.
        step_seconds: fixed cost of one iteration beyond its kernels (the executor's forward and backward calls).
        update_launch_seconds: fixed cost of one parameter update call (None: ``launch_seconds``; the runtime
            issues updates one by one, outside the bound graph).
        copy_launch_seconds: fixed cost of one copy between devices (MXNet's ``_CrossDeviceCopy``), beside its
            bytes over the interconnect (None: ``launch_seconds``).
        host_sharing: how many devices share one link to host memory: when every device swaps at once, each
            gets ``host_bandwidth / host_sharing`` per direction (Swap, :mod:`tofu.sim.swap`).
        host_memory_bytes: the machine's host memory (0: not modelled), what swapped-out tensors may fill.
        copy_engines: how many copies between devices one device runs at once beside its compute
            (:mod:`tofu.sim.engine`; a copy runs on its source's); 0: copies run on the source's compute stream
            (MXNet runs a CPU context's copies in that context's compute workers).
        kernels: per op class, the size-dependent kernel-time curves of :mod:`tofu.sim.kernels` (what the engine
            times a kernel with); None: the roofline of ``classes`` (constant efficiencies, no fall for small work).
        classes: per :class:`~tofu.sim.flops.OpClass`, the fractions of the peaks it reaches and its launch cost
            (used only without ``kernels``).
        task_seconds: fixed cost of every op the engine runs (kernel, update, copy) beyond its kernel curve and
            latency: what one operator costs inside a large bound graph (executor and engine bookkeeping) that a
            one-operator calibration does not see; 0: not modelled.
        bulk_task_seconds: what an op costs instead of ``task_seconds`` when MXNet's executor runs it inside a bulk
            segment, one engine op for up to 15 ops of one context (``MXNET_EXEC_BULK_EXEC_TRAIN``, on by default):
            every op of a program on one device without copies (:func:`tofu.sim.engine.bulks`); None:
            ``task_seconds``.
    """

    name: str
    devices: int
    peak_flops: float
    mem_bandwidth: float
    memory_bytes: float
    levels: tuple[Level, ...]
    host_bandwidth: float
    launch_seconds: float
    concurrency: int
    source: str
    step_seconds: float = 0.0
    update_launch_seconds: float | None = None
    copy_launch_seconds: float | None = None
    host_sharing: int = 1
    host_memory_bytes: float = 0.0
    copy_engines: int = 0
    kernels: KernelModel | None = None
    classes: tuple[tuple[OpClass, ClassRate], ...] = ()
    task_seconds: float = 0.0
    bulk_task_seconds: float | None = None

    def rate(self, op_class: OpClass) -> ClassRate:
        """The class's rates (a class the profile lacks: efficiencies 1, ``launch_seconds``)."""
        for c, r in self.classes:
            if c is op_class:
                return r
        return ClassRate(1.0, 1.0, self.launch_seconds)

    @property
    def copy_launch(self) -> float:
        return self.launch_seconds if self.copy_launch_seconds is None else self.copy_launch_seconds

    @property
    def update_launch(self) -> float:
        return self.launch_seconds if self.update_launch_seconds is None else self.update_launch_seconds

    @property
    def host_share(self) -> float:
        """Bytes/s per direction one device gets to host memory while every device uses its link."""
        return self.host_bandwidth / self.host_sharing

    def link_bandwidth(self, a: int, b: int) -> float:
        """Bytes/s per direction of a transfer from device ``a`` to device ``b`` alone on the interconnect: the
        slowest uplink it crosses (every level whose domains separate the two); inf when ``a == b``."""
        crossed = [lv.bandwidth for lv in self.levels if a // lv.size != b // lv.size]
        return min(crossed) if crossed else float("inf")

    def route(self, a: int, b: int) -> tuple[Link, ...]:
        """The links a copy from device ``a`` to device ``b`` crosses: the uplink of every domain it leaves and
        of every domain it enters, innermost level first (a shared level: its one link); none when ``a == b``."""
        out = []
        for lv in self.levels:
            x, y = a // lv.size, b // lv.size
            if x == y:
                continue
            if lv.shared:
                out.append(Link(lv.name, 0, Direction.SHARED))
            else:
                out += [Link(lv.name, x, Direction.UP), Link(lv.name, y, Direction.DOWN)]
        return tuple(out)

    def __post_init__(self):
        if self.task_seconds < 0:
            raise ValueError(f"profile {self.name}: task_seconds {self.task_seconds} must not be negative")
        if self.bulk_task_seconds is not None and self.bulk_task_seconds < 0:
            raise ValueError(f"profile {self.name}: bulk_task_seconds {self.bulk_task_seconds} must not be negative")
        if self.copy_engines < 0:
            raise ValueError(f"profile {self.name}: copy_engines {self.copy_engines} must not be negative")
        if self.host_sharing < 1 or self.host_memory_bytes < 0:
            raise ValueError(f"profile {self.name}: host_sharing {self.host_sharing} must be positive and "
                             f"host_memory_bytes {self.host_memory_bytes} non-negative")
        sizes = [lv.size for lv in self.levels]
        if sizes != sorted(sizes) or len(set(sizes)) != len(sizes):
            raise ValueError(f"profile {self.name}: level sizes {sizes} must increase")
        for inner, outer in zip(sizes, sizes[1:]):
            if outer % inner:
                raise ValueError(f"profile {self.name}: level size {outer} is not a multiple of {inner}")


def _model(gemm: ClassCurve, convolution: ClassCurve, memory: ClassCurve) -> KernelModel:
    """GEMM and convolution curves, and one curve for every memory-bound class."""
    own = {OpClass.GEMM: gemm, OpClass.CONVOLUTION: convolution}
    return KernelModel(tuple((c, own.get(c, memory)) for c in OpClass))


# The kernel curves (tofu.sim.kernels) of one K80 die, derived from published measurements by
# tofu.sim.published.k80_curves (rounded to 3 digits; tests/sim/test_kernels.py re-derives them).
K80_KERNELS = _model(
    # cuBLAS 7.0 SGEMM on a Tesla K40 (clBLAS doc/performance/cuBLAS_7.0/Tesla_K40/sgemm.csv, n = 32..5760),
    # fitted (R 3.40 TFLOP/s, h 1.96e8, a 0.43, L 16.8 us), R and h scaled to a K80 die by its 13 of the K40's 15
    # SMX (same Kepler SMX, same 875 MHz boost); the memory side at the memory classes' rate
    gemm=ClassCurve(2.94e12, 1.7e8, 0.43, 1.68e-05, 1.8e11, "K40 cuBLAS 7.0 SGEMM (clBLAS perf data) x 13/15 SMX"),
    # R fitted so that one die's simulated ResNet-50 training iteration matches MXNet's published K80 throughput
    # (docs/faq/perf.md, batch 1..32); h = R tau, a and L: the GEMM's (assumed)
    convolution=ClassCurve(1.68e12, 9.71e7, 0.43, 1.68e-05, 1.8e11,
                           "fitted to MXNet's K80 ResNet-50 training table; h, a, L as GEMM (assumed)"),
    # assumed: 0.75 x the die's 240 GB/s (ECC on; no published streaming measurement of a K80 die was found);
    # h = R tau with the GEMM's tau = h / R, a and L the GEMM's
    memory=ClassCurve(1.8e11, 1.04e7, 0.43, 1.68e-05, 2.94e12,
                      "assumed: 0.75 x datasheet bandwidth (ECC); h, a, L as GEMM"))

# One V100's, derived from Baidu DeepBench's V100 FP32 training results by tofu.sim.published.v100_curves.
V100_KERNELS = _model(
    # every DeepBench GEMM (160): (R, h, a, L) and the streaming rate of the memory side fitted together
    gemm=ClassCurve(1.38e13, 5.69e7, 0.515, 1.01e-05, 6.27e11, "DeepBench V100 FP32 GEMM (160 kernels)"),
    # every DeepBench convolution kernel (272: forward, backward data, backward filter); cuDNN's Winograd and
    # FFT algorithms make the rate in direct-convolution FLOPs exceed the 15.7 TFLOP/s peak
    convolution=ClassCurve(4.2e13, 5.61e9, 0.422, 2.48e-05, 6.27e11, "DeepBench V100 FP32 convolution (272 kernels)"),
    # the GEMMs' streaming rate (assumed to stand for element-wise kernels); h = R tau, a and L the GEMM's
    memory=ClassCurve(6.27e11, 2.59e6, 0.515, 1.01e-05, 1.38e13,
                      "DeepBench V100 GEMM streaming rate (assumed for these classes); h, a, L as GEMM"))

K80X8 = Profile(
    name="k80x8", devices=8,
    # One GK210 die (one p2 "GPU"): 2496 CUDA cores x 2 FLOP (FMA) x 875 MHz boost = 4.37 TFLOP/s, which is half
    # the board's 8.73 TFLOP/s (NVIDIA Tesla K80 datasheet, "Peak single precision, GPU Boost"); half the board's
    # 480 GB/s GDDR5 bandwidth and half its 24 GB memory (same datasheet).
    peak_flops=4.37e12, mem_bandwidth=240 * GB, memory_bytes=12 * GB,
    # The p2.8xlarge's PCIe tree as we assume it (ours: the paper gives only the two bandwidths): the two dies of
    # one K80 board sit behind the board's PCIe switch (a "pair"); two boards share one PCIe switch (a "quad");
    # the two quads meet at the CPU's root complex. Peer-to-peer inside a switch runs at the paper's 21 GB/s
    # (PAPER.md, section 7); a transfer between the quads crosses the root and is bounded by the paper's
    # CPU-GPU 10 GB/s on each quad's one uplink (ours: the root complex forwards peer traffic no faster than host
    # traffic). So a plan's first cut of 8 crosses the root, the second stays in a quad, the third in a pair.
    levels=(Level("die", 1, 21 * GB), Level("pair", 2, 21 * GB), Level("quad", 4, 10 * GB)),
    host_bandwidth=10 * GB,                 # PAPER.md: CPU-GPU 10 GB/s
    # ours, the same tree as above: the four dies of a quad reach the root, and host memory, over their switch's
    # one uplink, so while all eight swap each gets a quarter of it; PAPER.md: 488 GB host memory.
    host_sharing=4, host_memory_bytes=488 * GB,
    launch_seconds=10e-6,                   # ours: a copy's latency, a CUDA launch plus MXNet's engine push
    concurrency=8,
    # MXNet 1.9.1 runs a GPU-to-GPU copy on its source's copy workers, MXNET_GPU_COPY_NTHREADS of them, default 2
    # (src/ndarray/ndarray.cc CopyFromTo, src/engine/threaded_engine_perdevice.cc; docs faq/env_var.md)
    copy_engines=2,
    kernels=K80_KERNELS,                    # what the engine times kernels with
    source="NVIDIA Tesla K80 datasheet (per GK210 die); Tofu paper section 7 (21 GB/s P2P, 10 GB/s CPU-GPU)")

V100X8 = Profile(
    name="v100x8", devices=8,
    # Tesla V100 SXM2 (NVIDIA V100 datasheet): 15.7 TFLOP/s FP32, 900 GB/s HBM2, 16 GB (the p3.16xlarge's).
    peak_flops=15.7e12, mem_bandwidth=900 * GB, memory_bytes=16 * GB,
    # NVLink 2.0: six links of 25 GB/s per direction per GPU (datasheet: 300 GB/s total, both directions). The
    # DGX-1 / p3.16xlarge hybrid cube-mesh (NVIDIA DGX-1 V100 whitepaper) joins each quad of GPUs all-to-all
    # and each GPU to one GPU of the other quad. Ours: inside a quad a GPU reaches its 3 peers over at least
    # one link each, we count 2 links (50 GB/s) per GPU as the bandwidth it sends to its quad under an even
    # all-to-all; across quads each GPU has one link (25 GB/s) to the other quad.
    levels=(Level("gpu", 1, 50 * GB), Level("quad", 4, 4 * 25 * GB)),
    host_bandwidth=16 * GB,                  # PCIe 3.0 x16: 15.75 GB/s per direction (PCIe 3.0 specification)
    # DGX-1 V100 whitepaper: each PCIe switch joins two GPUs to a CPU, so two GPUs share one x16 uplink to host
    # memory; the p3.16xlarge has 488 GiB of host memory (AWS instance page).
    host_sharing=2, host_memory_bytes=488 * GiB,
    launch_seconds=5e-6,                     # ours: a copy's latency, order of a CUDA launch
    concurrency=8,
    copy_engines=2,                          # MXNet's MXNET_GPU_COPY_NTHREADS default, as k80x8
    kernels=V100_KERNELS,
    source="NVIDIA Tesla V100 datasheet (SXM2), DGX-1 V100 whitepaper (hybrid cube-mesh NVLink)")

GPU_PROFILES = {p.name: p for p in (K80X8, V100X8)}
NAMES = (*GPU_PROFILES, "cpu")


# ---------------------------------------------------------------------------------------------------------
# Host memory in the topology (issue 21, item 3: Swap's transfers to and from host memory on the engine).

HOST_LEVEL = "host"
"""The name of the host level: the links between groups of devices and host memory."""


@dataclass(frozen=True)
class HostPath:
    """How a profile's devices reach host memory, beside :attr:`Profile.host_bandwidth` and
    :attr:`Profile.host_sharing`: every ``host_sharing`` consecutive devices share one link to host memory of
    ``host_bandwidth`` bytes/s per direction (the host level); a transfer to or from host memory also crosses the
    uplinks of the device's domains at the interconnect levels named in ``through`` (the PCIe tree below that
    link), and each device runs ``engines`` such transfers at once per direction."""

    through: tuple[str, ...]
    engines: int
    source: str


HOST_PATHS = {
    # What is known of the p2.8xlarge: 8 GK210 dies on 4 K80 boards, two dies behind each board's PCIe switch
    # (NVIDIA Tesla K80 datasheet), CPU-GPU 10 GB/s (PAPER.md, section 7). Assumed (ours, as K80X8's levels and
    # host_sharing): a host transfer leaves the die over its own link and its board's switch uplink (levels
    # "die" and "pair", 21 GB/s), then the quad's one uplink to the root complex, where host memory is: that
    # uplink is the host level, 10 GB/s per direction shared by the quad's 4 dies (host_sharing=4); host memory
    # and the root complex beyond it are not a bottleneck. A GK210 die has two DMA copy engines (CUDA's
    # asyncEngineCount 2 on Kepler Tesla parts): one transfer per direction at once.
    "k80x8": HostPath(through=("die", "pair"), engines=1,
                      source="PAPER.md (CPU-GPU 10 GB/s); the PCIe tree below the root assumed (docs/sim.md)"),
    # Host traffic crosses PCIe, not NVLink (the profile's levels): only the host level, a PCIe switch per GPU
    # pair (DGX-1 V100 whitepaper, host_sharing=2) at 16 GB/s. One transfer per direction at once: ours.
    "v100x8": HostPath(through=(), engines=1, source="DGX-1 V100 whitepaper (a PCIe switch per GPU pair)"),
}


@dataclass(frozen=True)
class HostedProfile(Profile):
    """A profile with host memory in its topology, for programs that copy to and from host memory (Swap).

    Devices ``0 .. gpus - 1`` are the profile's; device ``gpus + d`` is device ``d``'s host memory, an endpoint
    that computes nothing: a copy from ``d`` to ``gpus + d`` moves a block out to host memory on ``d``'s copy
    engines, one from ``gpus + d`` to ``d`` moves it in on the endpoint's (so each direction has its own
    ``copy_engines``, :attr:`HostPath.engines`). Its ``levels`` are the profile's and the host level, whose size
    (every device and endpoint: ``2 gpus``) only keeps the nesting of levels valid: :meth:`route` gives the host
    links, one per ``host_sharing`` devices.
    """

    gpus: int = 0
    through: tuple[str, ...] = ()

    def host(self, device: int) -> int:
        """The endpoint of ``device``'s host memory."""
        return self.gpus + device

    def route(self, a: int, b: int) -> tuple[Link, ...]:
        """:meth:`Profile.route` between devices; to host memory, the uplinks of the device's domains at the
        ``through`` levels, then its group's host link (from host memory: the same links, the other way)."""
        if a < self.gpus and b < self.gpus:
            return super().route(a, b)
        if (a < self.gpus) == (b < self.gpus):
            raise ValueError(f"profile {self.name}: no route between host endpoints {a} and {b}")
        device, direction = (a, Direction.UP) if a < self.gpus else (b, Direction.DOWN)
        links = [Link(lv.name, 0, Direction.SHARED) if lv.shared else Link(lv.name, device // lv.size, direction)
                 for lv in self.levels if lv.name in self.through]
        links.append(Link(HOST_LEVEL, device // self.host_sharing, direction))
        return tuple(links) if direction is Direction.UP else tuple(reversed(links))


def with_host(base: Profile) -> HostedProfile:
    """``base`` with host memory in its topology (:class:`HostedProfile`, :data:`HOST_PATHS`).

    Raises:
        ValueError: ``base`` has no known host path (the ``cpu`` profile), or its devices do not divide into
            groups of ``host_sharing``.
    """
    path = HOST_PATHS.get(base.name)
    if path is None:
        raise ValueError(f"profile {base.name} has no host path; known: {', '.join(HOST_PATHS)}")
    if base.devices % base.host_sharing:
        raise ValueError(f"profile {base.name}: {base.devices} devices do not divide into host links of "
                         f"{base.host_sharing}")
    import dataclasses

    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(Profile)}
    fields.update(devices=2 * base.devices, copy_engines=path.engines,
                  levels=base.levels + (Level(HOST_LEVEL, 2 * base.devices, base.host_bandwidth),))
    return HostedProfile(**fields, gpus=base.devices, through=path.through)


# ---------------------------------------------------------------------------------------------------------
# Where every number of the GPU profiles comes from, per profile and Profile field (the kernel curves carry
# their own, ClassCurve.source): docs/sim.md's parameter table (experiments/table_sim.py) is written from these
# and the profile objects. "assumed" marks a number no publication gives.

_CPU_MEASURED = "measured here: `python -m tofu.sim.calibrate --recalibrate` (tofu.sim.calibrate)"
PARAMETER_SOURCES: dict[str, dict[str, str]] = {
    "k80x8": {
        "devices": "PAPER.md, section 7: p2.8xlarge, 8 GPUs (4 K80 boards of 2 GK210 dies)",
        "peak_flops": "NVIDIA Tesla K80 datasheet: 8.73 TFLOP/s FP32 at boost per board, halved per die",
        "mem_bandwidth": "NVIDIA Tesla K80 datasheet: 480 GB/s per board, halved per die",
        "memory_bytes": "NVIDIA Tesla K80 datasheet: 24 GB per board, halved per die; PAPER.md",
        "levels": "P2P 21 GB/s and CPU-GPU 10 GB/s: PAPER.md, section 7; the tree (pairs, quads, root): assumed",
        "host_bandwidth": "PAPER.md, section 7: CPU-GPU 10 GB/s",
        "host_sharing": "assumed: a quad's 4 dies share its switch's uplink (the levels' tree)",
        "host_memory_bytes": "PAPER.md, section 7: 488 GB host memory",
        "launch_seconds": "assumed: a CUDA launch plus MXNet's engine push (kernels have their curves' launch)",
        "concurrency": "every GPU computes at once",
        "step_seconds": "not modelled (0)",
        "update_launch_seconds": "none: the elementwise curve's launch",
        "copy_launch_seconds": "assumed: the launch cost (per-transfer latency)",
        "copy_engines": "MXNet 1.9.1 MXNET_GPU_COPY_NTHREADS default 2 (docs faq/env_var.md)",
        "task_seconds": "not modelled (0): the kernel curves' launch L is fitted to published kernel times",
        "bulk_task_seconds": "none: task_seconds (not modelled)",
    },
    "v100x8": {
        "devices": "AWS p3.16xlarge: 8 V100 (the paper's second machine type)",
        "peak_flops": "NVIDIA Tesla V100 (SXM2) datasheet: 15.7 TFLOP/s FP32",
        "mem_bandwidth": "NVIDIA Tesla V100 (SXM2) datasheet: 900 GB/s HBM2",
        "memory_bytes": "NVIDIA Tesla V100 (SXM2) datasheet: 16 GB",
        "levels": "NVLink 25 GB/s per link and direction (datasheet), hybrid cube-mesh (DGX-1 V100 whitepaper); "
                  "2 links per GPU inside a quad: assumed",
        "host_bandwidth": "PCIe 3.0 x16 specification: 15.75 GB/s per direction",
        "host_sharing": "DGX-1 V100 whitepaper: a PCIe switch per GPU pair",
        "host_memory_bytes": "AWS p3.16xlarge: 488 GiB",
        "launch_seconds": "assumed: order of a CUDA kernel launch (kernels have their curves' launch)",
        "concurrency": "every GPU computes at once",
        "step_seconds": "not modelled (0)",
        "update_launch_seconds": "none: the elementwise curve's launch",
        "copy_launch_seconds": "assumed: the launch cost (per-transfer latency)",
        "copy_engines": "MXNet 1.9.1 MXNET_GPU_COPY_NTHREADS default 2 (docs faq/env_var.md)",
        "task_seconds": "not modelled (0): the kernel curves' launch L is fitted to published kernel times",
        "bulk_task_seconds": "none: task_seconds (not modelled)",
    },
    "cpu": {
        "devices": "CPU contexts cpu(0..63) of this machine (a plan may use any number)",
        "memory_bytes": "this machine's physical memory (os.sysconf)",
        "concurrency": "measured here: two contexts run 1.2-1.4 chains of MXNet's native GEMM or convolution at once "
                       "and none of tiny ops (experiments/run_context_concurrency.py, docs/sim.md): 1",
        "host_sharing": "not modelled (1)", "host_memory_bytes": "not modelled (0)",
        "copy_engines": "MXNet runs a CPU context's copies in its compute workers: 0",
        **{k: _CPU_MEASURED for k in ("peak_flops", "mem_bandwidth", "levels", "host_bandwidth", "launch_seconds",
                                      "classes", "step_seconds", "update_launch_seconds", "copy_launch_seconds")},
        "task_seconds": "measured here on a calibration graph (tofu.sim.calibrate.glue_net, not a validation model), "
                        "trained on 2 and 4 contexts: `python -m tofu.sim.calibrate --recalibrate`",
        "bulk_task_seconds": "measured here on the same calibration graph trained on one context, where MXNet's "
                             "executor bulks every op: `python -m tofu.sim.calibrate --recalibrate`",
    },
}
