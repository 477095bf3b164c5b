"""Measured per-device memory of a partitioned training step: MXNet's profiler, in a fresh process.

Input: a :class:`~tofu.rewrite.PartitionedGraph`. Output: each device's peak bytes in use over one training
step as ``tofu run`` takes it (:class:`~tofu.runtime.train.Trainer`: bind, its parameter replicas and flat
buffers, forward, backward, exchange, update), from the profiler's ``Device Storage`` counters.
MXNet's profiler supports at most 4 CPU contexts (MXNET.md): with more, no measurement is made. It labels
cpu(2) ``cpu pinned`` and cpu(3) ``cpu shared``; the counters are matched to devices by their index.

The profiler is process-global, so the step runs in a child process (``python -m tofu.runtime.memory``, the
request as JSON on stdin, the peaks as JSON on stdout), like :mod:`tofu.graph.memory_profile`.

Device 0 of CPU contexts holds every context's temporary space: MXNet 1.9.1 allocates the CPU temporary-space
pool (``MXNET_CPU_TEMP_COPY`` buffers, default 4) on cpu(0) for all CPU contexts, and no variable or bind
option places it per context (``src/resource.cc:90-132``; GPUs get one pool each). So it cannot be put where
the work is; :func:`estimated_device_peaks` counts it on device 0 instead, as the plan's ``device0_temp``.
"""
from __future__ import annotations

import json
import re
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from tofu.errors import TofuError
from tofu.graph.memory_profile import run_in_child
from tofu.graph.ir import Role

MAX_PROFILED_DEVICES = 4
_COUNTER = re.compile(r"^Memory: cpu/(\d+)$")
_LABELLED = {"Memory: cpu pinned/": 2, "Memory: cpu shared/": 3}   # how MXNet 1.9.1 names cpu(2) and cpu(3)


class DeviceMemoryError(TofuError):
    """The measuring process failed, or its trace holds no memory counter of some device."""


def measure_device_peaks(pg, timeout: float = 300.0, one_context: bool = False,
                         replicas: bool = True) -> tuple[int, ...] | None:
    """Peak bytes on each of ``pg``'s devices over one training step, or None beyond the profiler's 4 devices;
    ``one_context``: every device group bound to cpu(0), one peak (the graph's own structure, without the split
    over contexts, without replicas); ``replicas``: as ``tofu run`` binds the graph, its parameter replicas too.

    Raises:
        DeviceMemoryError: the measuring process failed.
    """
    if pg.workers > MAX_PROFILED_DEVICES and not one_context:
        return None
    aux = set(pg.symbol.list_auxiliary_states())
    request = {"symbol": pg.symbol.tojson(), "workers": pg.workers,
               "shapes": {v.name: list(v.shape) for v in pg.variables},
               "params": [v.name for v in pg.variables if v.role is Role.PARAM and v.name not in aux],
               "devices": {v.name: v.device for v in pg.variables}, "one_context": one_context,
               "replicas": replicas,
               "variables": [[v.name, v.tensor, v.device, [list(b) for b in v.box], v.role.name]
                             for v in pg.variables],
               "heads": [[h.tensor, h.device, [list(b) for b in h.box], h.output] for h in pg.heads]}
    return tuple(run_in_child(__name__, request, {}, timeout, DeviceMemoryError)["peak_bytes"])


def estimated_device_peaks(per_device_bytes: Mapping[str, int], workers: int,
                           replicas: bool = True) -> tuple[int, ...]:
    """The plan's estimate of each CPU context's peak, to set beside :func:`measure_device_peaks`: device 0
    holds its ``total`` plus ``device0_temp`` (the other contexts' temporary space, which MXNet allocates on
    cpu(0)), every other device its ``total`` less its own ``workspace`` (held on cpu(0)); with ``replicas``
    (the runtime's parameter replicas, as ``tofu run`` binds them) each its ``replicas`` more."""
    total, workspace = per_device_bytes["total"], per_device_bytes.get("workspace", 0)
    total += per_device_bytes.get("replicas", 0) if replicas else 0
    extra = per_device_bytes.get("device0_temp", 0)
    if workers == 1:
        return (total,)
    return (total + extra,) + (total - workspace,) * (workers - 1)


def peaks_from_trace(trace: dict, workers: int) -> list[int]:
    peaks = [None] * workers
    for e in trace.get("traceEvents", ()):
        if e.get("cat") != "Device Storage":
            continue
        name = e.get("name", "")
        m = _COUNTER.match(name)
        d = int(m[1]) if m else _LABELLED.get(name)
        if d is not None and d < workers:
            value = e["args"][e["name"]]
            peaks[d] = value if peaks[d] is None else max(peaks[d], value)
    missing = [d for d, p in enumerate(peaks) if p is None]
    if missing:
        raise DeviceMemoryError(f"the profiler recorded no memory of device(s) {missing}")
    return peaks


def _worker() -> None:
    import mxnet as mx

    from tofu.runtime.train import Trainer

    request = json.loads(sys.stdin.read())
    symbol = mx.sym.load_json(request["symbol"])
    k = request["workers"]
    shapes = {n: tuple(s) for n, s in request["shapes"].items()}
    params = set(request["params"])
    aux = set(symbol.list_auxiliary_states())
    grad_req = {n: "write" if n in params else "null" for n in shapes if n not in aux}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.json"
        mx.profiler.set_config(profile_memory=True, profile_symbolic=True, aggregate_stats=True, filename=str(path))
        mx.profiler.set_state("run")
        if request.get("one_context"):         # the graph as the rewriter built it, every group on cpu(0)
            k = 1
            ctxs = [mx.cpu(0)] * request["workers"]
            exe = symbol.simple_bind(ctxs[0], group2ctx={f"dev{i}": c for i, c in enumerate(ctxs)},
                                     grad_req=grad_req, **shapes)
            moms = {n: mx.nd.zeros(exe.arg_dict[n].shape, ctx=exe.arg_dict[n].context) for n in params}
            exe.forward(is_train=True)
            exe.backward()
            for n in params:
                mx.nd.sgd_mom_update(exe.arg_dict[n], exe.grad_dict[n], moms[n], lr=0.01, momentum=0.9,
                                     out=exe.arg_dict[n])
        else:                                   # what ``tofu run`` binds and steps (its parameter replicas too)
            trainer = Trainer(*_partitioned(symbol, request), "cpu", lr=0.01, momentum=0.9,
                              replicas=request["replicas"])
            trainer.step()
        mx.nd.waitall()
        mx.profiler.set_state("stop")
        mx.profiler.dump()
        peaks = peaks_from_trace(json.loads(path.read_text()), k)
    print(json.dumps({"peak_bytes": peaks}))


def _partitioned(symbol, request) -> tuple:
    """The :class:`~tofu.rewrite.PartitionedGraph` of a request, and zeros for its whole tensors."""
    from tofu.rewrite.apply_plan import HeadPiece, PartitionedGraph, ShardVar

    variables = tuple(ShardVar(n, t, d, tuple(tuple(b) for b in box), Role[r])
                      for n, t, d, box, r in request["variables"])
    heads = tuple(HeadPiece(t, d, tuple(tuple(b) for b in box), o) for t, d, box, o in request["heads"])
    ends: dict[str, list[int]] = {}
    for v in variables:
        ends[v.tensor] = [max(e, hi) for e, (_, hi) in zip(ends.get(v.tensor, [0] * len(v.box)), v.box)]
    zeros = {t: np.zeros(e, np.float32) for t, e in ends.items()}
    return PartitionedGraph(symbol, request["workers"], variables, heads), zeros


if __name__ == "__main__":
    _worker()
