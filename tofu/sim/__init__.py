"""``tofu.sim``: a performance model of one training iteration of a partitioned graph on a named machine.

``hardware`` (profiles: ``k80x8``, ``v100x8``, ``cpu``), ``flops`` (an op's work from its TDL description),
``model`` (per-call roofline time, per-step communication over the interconnect, the iteration), ``calibrate``
(the ``cpu`` profile, measured with MXNet), ``baselines`` (the paper's Ideal, SmallBatch, Swap, OpPlacement and
Tofu in the same model), ``cluster`` (several machines, data parallel through parameter servers). See docs/sim.md.
"""
from tofu.sim.cluster import ClusterEstimate, simulate_cluster
from tofu.sim.hardware import K80X8, V100X8, ClassRate, Level, Profile, profile
from tofu.sim.model import IterationEstimate, Overlap, simulate

__all__ = ["K80X8", "V100X8", "ClassRate", "ClusterEstimate", "IterationEstimate", "Level", "Overlap", "Profile",
           "profile", "simulate", "simulate_cluster"]
