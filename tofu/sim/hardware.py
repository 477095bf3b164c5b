"""Hardware profiles of the performance model: what one device computes and how devices are linked.

Input: nothing (datasheet constants) or a calibration (:mod:`tofu.sim.calibrate` for this CPU). Output:
:class:`Profile` values, looked up by name with :func:`profile`.

A device runs an op in the roofline time of :mod:`tofu.sim.model`; it has ``peak_flops`` (FP32),
``mem_bandwidth`` and ``memory_bytes``. The interconnect is a hierarchy of :class:`Level` values, innermost
first: a level groups ``size`` consecutive devices into one *domain*, and each domain reaches the other domains
of its parent over one uplink of ``bandwidth`` bytes/s per direction (full duplex). Devices 0..n-1 are numbered
so that the domains are runs of consecutive ids, as the plan numbers its workers (the first cut's groups vary
slowest, see :func:`tofu.analysis.compose.coordinates`), so a plan's first cut separates the largest domains.
"""
from __future__ import annotations

import enum
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
    """What one op class reaches on a device (:mod:`tofu.sim.model`).

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


def uniform_rates(compute: float, memory: float, launch: float) -> tuple[tuple[OpClass, ClassRate], ...]:
    """The same rate for every op class (the GPU profiles' stated assumption)."""
    return tuple((c, ClassRate(compute, memory, launch)) for c in OpClass)


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
        launch_seconds: fixed cost of one kernel (or one engine op) of a class that ``classes`` lacks.
        classes: per :class:`~tofu.sim.flops.OpClass`, the fractions of the peaks it reaches and its launch cost.
        concurrency: how many devices compute at the same time (GPUs: all; CPU contexts share the cores, and
            each kernel already uses all of them: 1).
        source: where the numbers come from, in one line.
        step_seconds: fixed cost of one iteration beyond its kernels (the executor's forward and backward calls).
        update_launch_seconds: fixed cost of one parameter update call (None: ``launch_seconds``; the runtime
            issues updates one by one, outside the bound graph).
        copy_launch_seconds: fixed cost of one copy between devices (MXNet's ``_CrossDeviceCopy``), beside its
            bytes over the interconnect (None: ``launch_seconds``).
        host_sharing: how many devices share one link to host memory: when every device swaps at once, each
            gets ``host_bandwidth / host_sharing`` per direction (:mod:`tofu.sim.baselines`, Swap).
        host_memory_bytes: the machine's host memory (0: not modelled), what swapped-out tensors may fill.
        copy_engines: how many copies between devices one device runs at once beside its compute
            (:mod:`tofu.sim.engine`; a copy runs on its source's); 0: copies run on the source's compute stream
            (MXNet runs a CPU context's copies in that context's compute workers).
    """

    name: str
    devices: int
    peak_flops: float
    mem_bandwidth: float
    memory_bytes: float
    levels: tuple[Level, ...]
    host_bandwidth: float
    launch_seconds: float
    classes: tuple[tuple[OpClass, ClassRate], ...]
    concurrency: int
    source: str
    step_seconds: float = 0.0
    update_launch_seconds: float | None = None
    copy_launch_seconds: float | None = None
    host_sharing: int = 1
    host_memory_bytes: float = 0.0
    copy_engines: int = 0

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
    launch_seconds=10e-6,                   # ours: a CUDA kernel launch plus MXNet's engine push, order 10 us
    # ours, stated and not fitted: cuBLAS/cuDNN FP32 on Kepler reach about 60% of peak on large GEMM-like ops;
    # ECC on (EC2's default) leaves about 75% of GDDR5's peak bandwidth to a streaming kernel. The same for every
    # op class: no per-class number is measured for these GPUs (the paper's kernels are large).
    classes=uniform_rates(compute=0.6, memory=0.75, launch=10e-6),
    concurrency=8,
    # MXNet 1.9.1 runs a GPU-to-GPU copy on its source's copy workers, MXNET_GPU_COPY_NTHREADS of them, default 2
    # (src/ndarray/ndarray.cc CopyFromTo, src/engine/threaded_engine_perdevice.cc; docs faq/env_var.md)
    copy_engines=2,
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
    launch_seconds=5e-6,                     # ours: order of a CUDA kernel launch
    classes=uniform_rates(compute=0.7, memory=0.8, launch=5e-6),     # ours, stated and not fitted
    concurrency=8,
    copy_engines=2,                          # MXNet's MXNET_GPU_COPY_NTHREADS default, as k80x8
    source="NVIDIA Tesla V100 datasheet (SXM2), DGX-1 V100 whitepaper (hybrid cube-mesh NVLink)")

GPU_PROFILES = {p.name: p for p in (K80X8, V100X8)}
NAMES = (*GPU_PROFILES, "cpu")


def profile(name: str) -> Profile:
    """The profile called ``name``: ``k80x8``, ``v100x8`` or ``cpu`` (this machine, measured and cached).

    Raises:
        ValueError: an unknown name.
    """
    if name in GPU_PROFILES:
        return GPU_PROFILES[name]
    if name == "cpu":
        from tofu.sim.calibrate import cpu_profile     # measures with MXNet; only this profile needs it
        return cpu_profile()
    raise ValueError(f"unknown hardware profile '{name}'; known: {', '.join(NAMES)}")
