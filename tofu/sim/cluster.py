"""Several machines: Tofu inside each machine, data parallel across machines through parameter servers
(issue 13; the runtime is :mod:`tofu.runtime.distributed`, MXNet's ``dist_sync`` kvstore).

Input: one machine's simulated iteration (a :class:`~tofu.sim.engine.Execution` of its partitioned graph, e.g.
the ``execution`` of :func:`tofu.sim.systems.tofu`'s estimate) and its batch, the graph's parameter bytes, a
machine count and a network. Output: a :class:`ClusterEstimate`.

The model (ours, stated). Every machine trains the same partitioned graph on its own batch b (weak scaling:
the global batch is M b). After the backward pass each machine pushes every device's gradient shards once and
pulls the summed shards once: P bytes each way, P the model's parameter bytes
(:func:`tofu.runtime.distributed.predicted_kvstore_bytes`: the shards of all devices add up to the parameters).
One server per machine, keys spread evenly over the M servers (MXNet's default launch: a server beside each
worker), so of a machine's push and pull the fraction (M - 1) / M crosses the network, and its server sends and
receives as much for the other machines. Per direction its network interface carries

    N = 2 P (M - 1) / M,   T_net = N / B_net

B_net the interface's bandwidth per direction (Ethernet: 25, 100, 400 Gbit/s; full duplex). The shards also
cross the machine's host links, P each way over k / ``host_sharing`` uplinks: T_host = P host_sharing /
(k host_bandwidth). Pushes stream key by key, so the two overlap: T_inter = max(T_net, T_host) for M > 1, and 0
for one machine (no kvstore). Not modelled: the servers' summation on the CPU, per-message latency, the
network's switches (full bisection bandwidth). The machine's iteration T is the engine's (its kernels, its copies
over the PCIe tree, their overlap); the exchange is not simulated by the engine but added to it. :class:`Overlap`
NONE: iteration = T + T_inter (the exchange after the iteration, a lower bound on throughput); FULL:
max(T, T_inter) (pushes hidden behind the iteration, an upper bound).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from tofu.sim.engine import Execution
from tofu.sim.hardware import Profile

GBIT = 1e9 / 8
"""Bytes/s of one Gbit/s."""

ETHERNET_GBITS = (25, 100, 400)
"""Inter-machine bandwidths of the scaling study: 25 Gbit/s (the paper's era), 100 and 400 Gbit/s."""


class Overlap(enum.Enum):
    """How the inter-machine exchange combines with a machine's iteration (module docstring)."""

    NONE = "none"      # after the iteration
    FULL = "full"      # hidden behind it


@dataclass(frozen=True)
class ClusterEstimate:
    """One iteration on ``machines`` machines: every machine's iteration, plus the inter-machine exchange.

    Attributes:
        machine: one machine's simulated iteration (its kernels, intra-machine copies, memory).
        batch: one machine's batch (b).
        network_bandwidth: bytes/s per direction of one machine's network interface.
        inter_bytes: bytes one machine's interface carries per direction per iteration (N).
        inter_seconds: T_inter.
        seconds: the iteration.
        samples_per_second: M b / seconds.
    """

    machine: Execution
    batch: int
    machines: int
    network_bandwidth: float
    overlap: Overlap
    kvstore_bytes: int
    inter_bytes: float
    inter_seconds: float
    seconds: float
    samples_per_second: float


def inter_machine_seconds(kvstore_bytes: int, machines: int, network_bandwidth: float,
                          profile: Profile) -> tuple[float, float]:
    """(N, T_inter) of the module docstring for a machine pushing and pulling ``kvstore_bytes``.

    Raises:
        ValueError: fewer than one machine, or a non-positive bandwidth.
    """
    if machines < 1 or network_bandwidth <= 0:
        raise ValueError(f"{machines} machines at {network_bandwidth} B/s: need at least one and a bandwidth")
    if machines == 1:
        return 0.0, 0.0
    network = 2 * kvstore_bytes * (machines - 1) / machines
    host = kvstore_bytes * profile.host_sharing / (profile.devices * profile.host_bandwidth)
    return network, max(network / network_bandwidth, host)


def simulate_cluster(machine: Execution, batch: int, kvstore_bytes: int, machines: int, network_bandwidth: float,
                     profile: Profile, overlap: Overlap = Overlap.NONE) -> ClusterEstimate:
    """``machines`` copies of ``machine`` (an iteration at ``batch`` samples) exchanging ``kvstore_bytes`` per
    iteration (see the module docstring).

    Raises:
        ValueError: a batch below 1, fewer than one machine, or a non-positive bandwidth.
    """
    if batch < 1:
        raise ValueError(f"a machine's batch must be at least 1, got {batch}")
    nbytes, inter = inter_machine_seconds(kvstore_bytes, machines, network_bandwidth, profile)
    seconds = machine.seconds + inter if overlap is Overlap.NONE else max(machine.seconds, inter)
    return ClusterEstimate(machine, batch, machines, network_bandwidth, overlap, kvstore_bytes, nbytes, inter,
                           seconds, machines * batch / seconds)
