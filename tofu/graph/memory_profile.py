"""Measured training memory: MXNet Symbol + input shapes -> peak bytes in use on cpu(0) over one training step.

The reference that :mod:`tofu.graph.memory` is checked against. One training step is: ``simple_bind`` on
``cpu(0)`` (``grad_req='write'`` for parameters, ``'null'`` for data and label), one momentum buffer per
parameter, ``forward(is_train=True)``, ``backward()`` and one ``sgd_mom_update`` per parameter. MXNet's
profiler (``profile_memory=True``, started before the bind, see MXNET.md) records every storage allocation
and release as a ``Device Storage`` counter event named ``Memory: cpu/0`` whose value is the bytes in use;
the result is the largest value of that counter.

The profiler is process-global and fragile, so the step runs in a fresh Python process
(``python -m tofu.graph.memory_profile``, symbol and shapes as JSON on stdin, the peak as JSON on stdout).
MKLDNN is switched off there by default (``MXNET_MKLDNN_ENABLED=0``): its weight-layout reorders are a CPU
artefact that no GPU run has, and the plain operators request their temporary space through MXNet's
resource manager, where the profiler sees it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import mxnet as mx

from tofu.errors import TofuError

Shape = tuple[int, ...]

COUNTER_CATEGORY = "Device Storage"
COUNTER_NAME = "Memory: cpu/0"
OPTIMIZERS = ("sgd", "sgd_mom")


class MemoryProfileError(TofuError):
    """The measuring process failed or its profiler trace holds no memory counter."""


def measure_peak_bytes(symbol: mx.sym.Symbol, shapes: Mapping[str, Shape], optimizer: str = "sgd_mom",
                       mkldnn: bool = False, timeout: float = 120.0) -> int:
    """Runs one training step of ``symbol`` in a fresh process and returns its peak memory on cpu(0).

    Args:
        symbol: the loss symbol of a forward graph.
        shapes: shape of every data and label input (the arguments that get no gradient).
        optimizer: ``"sgd_mom"`` (one momentum buffer per parameter, updated after backward) or ``"sgd"``.
        mkldnn: leave MKLDNN on in the measuring process.
        timeout: seconds before the measuring process is killed.

    Returns:
        The peak of the profiler's ``Memory: cpu/0`` counter, in bytes.

    Raises:
        ValueError: if the optimizer is not one of :data:`OPTIMIZERS`.
        MemoryProfileError: if the measuring process fails, times out or reports no counter.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    request = {"symbol": symbol.tojson(), "shapes": {k: list(v) for k, v in shapes.items()},
               "optimizer": optimizer}
    env = {"MXNET_SUBGRAPH_BACKEND": "NONE", "MXNET_MKLDNN_ENABLED": "1" if mkldnn else "0"}
    return int(run_in_child(__name__, request, env, timeout, MemoryProfileError)["peak_bytes"])


def run_in_child(module: str, request: Mapping, env: Mapping[str, str], timeout: float,
                 error: type[TofuError]) -> dict:
    """Runs ``python -m module`` with ``request`` as JSON on stdin and returns the JSON of its last stdout
    line (MXNet's profiler is process-global, so each measurement gets a fresh process).

    Raises:
        error: the child timed out, failed, or printed nothing.
    """
    env = dict(os.environ, MXNET_SUBGRAPH_VERBOSE="0", MXNET_STORAGE_FALLBACK_LOG_VERBOSE="0", **env)
    env.setdefault("OMP_NUM_THREADS", "1")
    package_root = str(Path(__file__).resolve().parents[2])   # the child imports the module by name
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    try:
        done = subprocess.run([sys.executable, "-m", module], input=json.dumps(request), env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise error(f"memory measurement took longer than {timeout:g} s") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise error(f"memory measurement failed (exit {done.returncode}): {tail}")
    return json.loads(lines[-1])


def peak_from_trace(trace: Mapping, counter: str = COUNTER_NAME) -> int:
    """The largest value of one ``Device Storage`` counter in a dumped chrome-trace document.

    Raises:
        MemoryProfileError: if the trace has no event of that counter.
    """
    values = [e["args"][counter] for e in trace.get("traceEvents", ())
              if e.get("cat") == COUNTER_CATEGORY and e.get("name") == counter]
    if not values:
        raise MemoryProfileError(f"profiler trace has no '{counter}' counter")
    return max(values)


def _train_step(symbol: mx.sym.Symbol, shapes: Mapping[str, Shape], optimizer: str) -> None:
    """One training step on cpu(0): bind, momentum buffers, forward, backward, update."""
    ctx = mx.cpu(0)
    grad_req = {a: "null" if a in shapes else "write" for a in symbol.list_arguments()}
    executor = symbol.simple_bind(ctx, grad_req=grad_req, **shapes)
    params = [a for a, req in grad_req.items() if req == "write"]
    momentum = ({a: mx.nd.zeros(executor.arg_dict[a].shape, ctx=ctx) for a in params}
                if optimizer == "sgd_mom" else {})
    executor.forward(is_train=True)
    executor.backward()
    for a in params:
        weight, grad = executor.arg_dict[a], executor.grad_dict[a]
        if a in momentum:
            mx.nd.sgd_mom_update(weight, grad, momentum[a], lr=0.01, momentum=0.9, out=weight)
        else:
            mx.nd.sgd_update(weight, grad, lr=0.01, out=weight)
    mx.nd.waitall()


def _worker() -> None:
    """Entry point of the measuring process: JSON request on stdin, ``{"peak_bytes": N}`` on stdout."""
    request = json.loads(sys.stdin.read())
    symbol = mx.sym.load_json(request["symbol"])
    shapes = {k: tuple(v) for k, v in request["shapes"].items()}
    with tempfile.TemporaryDirectory() as tmp:
        trace_path = Path(tmp) / "profile.json"
        mx.profiler.set_config(profile_memory=True, profile_symbolic=True, aggregate_stats=True,
                               filename=str(trace_path))
        mx.profiler.set_state("run")
        _train_step(symbol, shapes, request["optimizer"])
        mx.profiler.set_state("stop")
        mx.profiler.dump()
        peak = peak_from_trace(json.loads(trace_path.read_text()))
    print(json.dumps({"peak_bytes": peak}))


if __name__ == "__main__":
    _worker()
