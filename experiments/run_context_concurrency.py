"""How many of this machine's CPU contexts compute at once (issue 21: the ``cpu`` profile's ``concurrency``).

    python experiments/run_context_concurrency.py [--kinds gemm,conv,conv-weights,elementwise,tiny-ops]
                                                  [--contexts 1,2,3,4] [--seconds 2] [--modes round-robin,alone]
                                                  [--tag concurrency]
                                                  [--out-dir results/sim]

For each kind of kernel, one symbol holds c independent chains of it, chain i on context cpu(i) (``ctx_group``),
bound once per c in ``--contexts``. Mode ``round-robin``: the bound executors' forward passes are timed one call
of each in turn, for about ``--seconds`` per kind, so that the other jobs of a shared machine slow every c alike
and each call finds the caches holding another executor's data (as in a training step, where every op follows
others); mode ``alone``: each executor called again and again by itself (its data stays in the caches).
``effective`` = c x t(1) / t(c): how many chains ran at once (1: the contexts take turns; c: all at once). The
kinds: ``gemm`` (FullyConnected 768 x 768 on 768 rows, compute-bound), ``conv`` (3x3, 64 channels, 32 x 32
pixels, batch 16: compute-bound), ``conv-weights`` (3x3, 512 channels on 4 x 4 pixels, batch 4: the weights,
9.4 MB a layer, outweigh the work, as in resnet18's last stage), ``elementwise`` (an add of two 16M-float
arrays: memory-bound), ``tiny-ops`` (200 additions of 64 floats: the engine's per-op cost). Each chain is
``DEPTH`` ops deep (``tiny-ops``: 200). MXNet runs each context's ops on its own worker thread; with
``OMP_NUM_THREADS=1`` (the Makefile's) each kernel uses one core. ``kernels``: MXNet's native CPU kernels, as tofu
runs them (importing tofu sets ``MXNET_MKLDNN_ENABLED=0`` unless the environment says otherwise), or ``oneDNN``
when the command runs with ``MXNET_MKLDNN_ENABLED=1``; the OpenBLAS thread count is named when
``OPENBLAS_NUM_THREADS`` sets it (MXNet's native GEMM and convolution call OpenBLAS, whose own threads
``OMP_NUM_THREADS=1`` does not bound). One CSV row per (kind, mode, c); a JSON sidecar with the
command and the core count. Progress on stderr.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from experiments.common import RowWriter, rerun_source, write_sidecar  # noqa: E402
from experiments.run_cpu_validation import measure_round_robin  # noqa: E402

COLUMNS = ("kind", "kernels", "mode", "contexts", "seconds", "steps", "per_chain_seconds", "effective", "cores", "omp_threads")
DEPTH = 4
KINDS = ("gemm", "conv", "conv-weights", "elementwise", "tiny-ops")
MODES = ("round-robin", "alone")


def chain(kind: str, i: int):
    """Context i's chain of ``kind``: (its output symbol, its inputs' shapes)."""
    import mxnet as mx

    x = mx.sym.var(f"x{i}")
    if kind == "gemm":
        y, shapes = x, {f"x{i}": (768, 768)}
        for j in range(DEPTH):
            y = mx.sym.FullyConnected(y, num_hidden=768, name=f"fc{i}_{j}")
    elif kind in ("conv", "conv-weights"):
        channels, pixels, batch = (64, 32, 16) if kind == "conv" else (512, 4, 4)
        y, shapes = x, {f"x{i}": (batch, channels, pixels, pixels)}
        for j in range(DEPTH):
            y = mx.sym.Convolution(y, num_filter=channels, kernel=(3, 3), pad=(1, 1), name=f"conv{i}_{j}")
    elif kind == "elementwise":
        b = mx.sym.var(f"b{i}")
        y, shapes = x, {f"x{i}": (1 << 24,), f"b{i}": (1 << 24,)}
        for j in range(DEPTH):
            y = mx.sym.elemwise_add(y, b, name=f"add{i}_{j}")
    elif kind == "tiny-ops":
        y, shapes = x, {f"x{i}": (64,)}
        for j in range(200):
            y = mx.sym.elemwise_add(y, x, name=f"add{i}_{j}")
    else:
        raise ValueError(f"unknown kind '{kind}' (one of {', '.join(KINDS)})")
    return y, shapes


def bind(kind: str, contexts: int):
    """The executor of ``contexts`` independent chains of ``kind``, chain i on cpu(i), inputs set to small
    values; returns a callable that runs one forward pass, waited for, and returns its seconds."""
    import mxnet as mx

    from tofu.runtime.train import quiet

    outs, shapes = [], {}
    for i in range(contexts):
        with mx.AttrScope(ctx_group=f"dev{i}"):
            y, s = chain(kind, i)
        outs.append(y)
        shapes.update(s)
    group2ctx = {f"dev{i}": mx.cpu(i) for i in range(contexts)} if contexts > 1 else None
    with quiet():                                     # MXNet logs a line at every bind
        ex = mx.sym.Group(outs).simple_bind(ctx=mx.cpu(0), group2ctx=group2ctx, grad_req="null", **shapes)
    for a in ex.arg_arrays:
        a[:] = 0.01

    def step() -> float:
        start = time.perf_counter()
        ex.forward(is_train=False)
        mx.nd.waitall()
        return time.perf_counter() - start
    for _ in range(3):
        step()
    return step


def kind_rows(kind: str, contexts: list[int], seconds: float, mode: str) -> list[dict]:
    steps = [bind(kind, c) for c in contexts]
    if mode == "round-robin":
        times = measure_round_robin(steps, seconds, min_steps=10, max_steps=1000)
    else:                           # each executor alone, call after call: its data stays in the caches
        times = [measure_round_robin([s], seconds / len(steps), min_steps=10, max_steps=1000)[0] for s in steps]
    medians = [statistics.median(ts) for ts in times]
    one = medians[contexts.index(1)] if 1 in contexts else None
    cores = os.cpu_count() or 1
    omp = os.environ.get("OMP_NUM_THREADS", "")
    kernels = "oneDNN" if os.environ.get("MXNET_MKLDNN_ENABLED") == "1" else "native"
    if os.environ.get("OPENBLAS_NUM_THREADS"):
        kernels += f", OpenBLAS {os.environ['OPENBLAS_NUM_THREADS']} thread(s)"
    return [{"kind": kind, "kernels": kernels, "mode": mode, "contexts": c, "seconds": m, "steps": len(ts), "per_chain_seconds": m / c,
             "effective": "" if one is None else c * one / m, "cores": cores, "omp_threads": omp}
            for c, m, ts in zip(contexts, medians, times)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--contexts", default="1,2,3,4")
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--modes", default="round-robin,alone")
    p.add_argument("--tag", default="concurrency")
    p.add_argument("--out-dir", type=Path, default=Path("results/sim"))
    args = p.parse_args(argv)
    kinds = args.kinds.split(",")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        p.error(f"unknown kind '{unknown[0]}' (one of {', '.join(KINDS)})")
    try:
        contexts = sorted({int(c) for c in args.contexts.split(",")})
    except ValueError:
        p.error(f"--contexts '{args.contexts}': comma-separated integers")
    if contexts[0] < 1:
        p.error("--contexts: each at least 1")
    modes = args.modes.split(",")
    if any(m not in MODES for m in modes):
        p.error(f"--modes '{args.modes}': from {', '.join(MODES)}")
    path = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(path, COLUMNS)
    started = time.perf_counter()
    for kind, mode in ((k, m) for k in kinds for m in modes):
        for row in kind_rows(kind, contexts, args.seconds, mode):
            writer.write(row)
            eff = row["effective"]
            print(f"{kind:>12} {mode:>11} on {row['contexts']} contexts: {row['seconds'] * 1e3:9.3f} ms"
                  + ("" if eff == "" else f"  ({eff:.2f} chains at once)"), file=sys.stderr, flush=True)
    writer.close()
    write_sidecar(path, vars(args), seconds=time.perf_counter() - started, load=os.getloadavg()[0],
                  cores=os.cpu_count(), **rerun_source())
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
