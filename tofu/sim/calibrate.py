"""The ``cpu`` profile: this machine's numbers, measured with MXNet and cached.

Input: nothing (or a cache file). Output: a :class:`~tofu.sim.hardware.Profile` named ``cpu`` whose every
number is a median of short repeated measurements:

* ``peak_flops``: ``mx.nd.dot`` of two n x n float32 matrices, 2 n^3 / t (so contractions run at efficiency 1:
  the peak *is* what MXNet's GEMM reaches on these cores);
* ``mem_bandwidth``: a large array copied on cpu(0), 2 x bytes / t (read and write);
* the interconnect: one level of single contexts on a shared bus whose bandwidth is a copy from cpu(0) to
  cpu(1) (bytes / t; the contexts share one memory, so the copies of all of them share it);
* ``launch_seconds``: one engine op inside a bound executor, from chains of 1 and n tiny ops:
  (t_n - t_1) / 2 (n - 1) for forward + backward, with ``relu`` and ``BatchNorm`` (the mean of the two) for
  the element-wise class and ``FullyConnected`` for ``contraction_launch_seconds`` (an MKL call costs tens of
  microseconds where MXNet's engine runs a chain of element-wise ops in bulk for well under one);
* ``step_seconds``: the fixed cost of one executor forward + backward call beyond its ops (a one-op graph's
  time less its ops');
* ``update_launch_seconds``: one imperative ``sgd_mom_update`` on a tiny array (the runtime updates each
  parameter piece with one such call).

``concurrency`` is 1: the CPU contexts share the cores and each kernel already uses all of them. The memory
capacity is the machine's physical memory (``os.sysconf``).
"""
from __future__ import annotations

import json
import logging
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tofu.sim.hardware import Efficiency, Level, Profile

log = logging.getLogger(__name__)

DEFAULT_CACHE = Path("results/sim/cpu_profile.json")


@dataclass(frozen=True)
class Calibration:
    """The measured numbers (seconds, bytes/s, FLOP/s), and where: ``host`` and ``cores``."""

    gemm_flops: float
    copy_bandwidth: float
    cross_context_bandwidth: float
    op_seconds: float
    contraction_op_seconds: float
    call_seconds: float
    update_seconds: float
    memory_bytes: float
    host: str
    cores: int
    repeats: int

    def profile(self) -> Profile:
        return Profile(
            name="cpu", devices=64, peak_flops=self.gemm_flops, mem_bandwidth=self.copy_bandwidth,
            memory_bytes=self.memory_bytes,
            levels=(Level("context", 1, self.cross_context_bandwidth, shared=True),),
            host_bandwidth=self.copy_bandwidth, launch_seconds=self.op_seconds,
            efficiency=Efficiency(contraction=1.0, other=1.0, memory=1.0), concurrency=1,
            source=f"measured on {self.host} ({self.cores} cores) by tofu.sim.calibrate",
            step_seconds=self.call_seconds, update_launch_seconds=self.update_seconds,
            contraction_launch_seconds=self.contraction_op_seconds)


def _median_seconds(fn, repeats: int) -> float:
    fn()                                   # warm-up (allocation, first-call setup)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(repeats: int = 5, gemm_n: int = 1024, copy_mb: int = 64, chain: int = 20) -> Calibration:
    """Runs the microbenchmarks (a few seconds on 2 cores)."""
    import mxnet as mx

    a = mx.nd.random.uniform(shape=(gemm_n, gemm_n), ctx=mx.cpu(0))
    b = mx.nd.random.uniform(shape=(gemm_n, gemm_n), ctx=mx.cpu(0))
    t_gemm = _median_seconds(lambda: mx.nd.dot(a, b).wait_to_read(), repeats)

    n = copy_mb * 2 ** 20 // 4
    src = mx.nd.ones((n,), ctx=mx.cpu(0))
    dst0, dst1 = mx.nd.zeros((n,), ctx=mx.cpu(0)), mx.nd.zeros((n,), ctx=mx.cpu(1))
    t_copy = _median_seconds(lambda: (src.copyto(dst0), dst0.wait_to_read()), repeats)
    t_cross = _median_seconds(lambda: (src.copyto(dst1), dst1.wait_to_read()), repeats)

    def per_op(layer, shape) -> tuple[float, float]:
        t1, tn = (_bind_and_time(_chain(layer, n), shape, repeats) for n in (1, chain))
        return max(0.0, (tn - t1) / (2 * (chain - 1))), t1

    relu, t_single = per_op(lambda y, i: mx.sym.relu(y), (1, 8))
    bn, _ = per_op(lambda y, i: mx.sym.BatchNorm(y, name=f"bn{i}"), (1, 2, 4, 4))
    fc, _ = per_op(lambda y, i: mx.sym.FullyConnected(y, num_hidden=8, name=f"fc{i}"), (1, 8))
    op = (relu + bn) / 2
    call = max(0.0, t_single - 2 * 3 * relu)        # relu, sum, make_loss: forward and backward each

    w, g, m = (mx.nd.ones((8,)) for _ in range(3))
    calls = 200

    def updates():
        for _ in range(calls):
            mx.nd.sgd_mom_update(w, g, m, lr=0.01, momentum=0.9, out=w)
        w.wait_to_read()
    update = _median_seconds(updates, repeats) / calls

    memory = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return Calibration(2 * gemm_n ** 3 / t_gemm, 2 * n * 4 / t_copy, n * 4 / t_cross, op, fc, call, update, memory,
                       platform.node(), os.cpu_count() or 1, repeats)


def _chain(layer, n: int):
    import mxnet as mx

    y = mx.sym.var("x")
    for i in range(n):
        y = layer(y, i)
    return mx.sym.make_loss(mx.sym.sum(y))


def _bind_and_time(sym, shape, repeats: int) -> float:
    import mxnet as mx

    exe = sym.simple_bind(ctx=mx.cpu(0), x=shape, grad_req="write")

    def run():
        exe.forward(is_train=True)
        exe.backward()
        exe.grad_dict["x"].wait_to_read()
    return _median_seconds(run, repeats * 20)


def calibration(path: Path | None = DEFAULT_CACHE, recalibrate: bool = False) -> Calibration:
    """The cached calibration of this host, measured (and cached at ``path``) when absent, stale or asked."""
    if path is not None and path.exists() and not recalibrate:
        try:
            cal = Calibration(**json.loads(path.read_text()))
            if cal.host == platform.node() and cal.cores == (os.cpu_count() or 1):
                return cal
        except (TypeError, ValueError, json.JSONDecodeError):
            log.warning("ignoring unreadable calibration cache %s", path)
    cal = measure()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(cal), indent=1))
    return cal


def cpu_profile(path: Path | None = DEFAULT_CACHE, recalibrate: bool = False) -> Profile:
    """The ``cpu`` profile of this machine (see the module docstring)."""
    return calibration(path, recalibrate).profile()
