"""``tofu.sim``: one training iteration of a partitioned graph, simulated as MXNet's engine runs it, on a named
machine; and the paper's systems on the same engine. See docs/sim.md.

Data flows one way, each layer reading only those below it:

    hardware, published      profiles (data): devices, links, kernel curves; the published measurements
    flops, kernels, calibrate   the kernel model: an op's work from TDL, its time from its class's curve, the
                             ``cpu`` profile fitted to kernels measured here
    program, glue            the iteration's tasks (forward, backward, gradient sums, copies, updates), from the
                             partitioned MXNet symbol or from the plan alone
    engine, swap, trace      the discrete-event simulation, the LRU swapper, timelines
    systems, cluster         Ideal, SmallBatch, Swap, OpPlacement and Tofu; several machines
    (experiments/)           the paper's evaluation
"""
from tofu.sim.hardware import GPU_PROFILES, K80X8, NAMES, V100X8, Level, Profile


def profile(name: str) -> Profile:
    """The profile called ``name``: ``k80x8``, ``v100x8`` (datasheets and published measurements) or ``cpu`` (this
    machine, measured with MXNet by :mod:`tofu.sim.calibrate` and cached).

    Raises:
        ValueError: an unknown name.
    """
    if name in GPU_PROFILES:
        return GPU_PROFILES[name]
    if name == "cpu":
        from tofu.sim.calibrate import cpu_profile     # measures with MXNet; only this profile needs it
        return cpu_profile()
    raise ValueError(f"unknown hardware profile '{name}'; known: {', '.join(NAMES)}")


__all__ = ["GPU_PROFILES", "K80X8", "NAMES", "V100X8", "Level", "Profile", "profile"]
