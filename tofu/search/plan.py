"""The search's output: a :class:`Plan`, a JSON-serializable value that the rewriter can replay alone.

For every step of the recursion: the cut's width, how many identical worker groups it runs in, its cost for
one group, each tensor's split dimension and each op's choice (an :class:`~tofu.analysis.compose.OpChoice`:
the kind of split and its index variable, or the dimension a merged element-wise op follows); then the total
communication, the search time and each device's memory under the plan. Every worker's kernel call follows
from these alone (:func:`tofu.analysis.compose.compose`), which is what the rewriter replays.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tofu.analysis.compose import OpChoice
from tofu.errors import PlanError
from tofu.graph.ir import Graph, Role
from tofu.graph.memory import MemoryEstimate, estimate_training_memory

PLAN_VERSION = 2

DEVICE_RESERVE_BYTES = 2**29
"""Memory a GPU keeps for what the plan's estimate does not count, 0.5 GiB by default: the CUDA context and
the handles and workspaces of the libraries MXNet loads (cuBLAS, cuDNN; cuDNN may pick a convolution algorithm
with a larger workspace than the estimate's im2col of one image), and the kernel launches. Reasoning, not a
measurement here (the machines of this project run no pre-Hopper GPU that MXNet 1.9.1 supports): MXNet's own
GPU memory pool keeps ``MXNET_GPU_MEM_POOL_RESERVE`` = 5% of the device free "for things other than the GPU
array, such as kernel launch or cudnn handle space" (docs/faq/env_var.md of MXNet; 0.6 GiB of a 12 GiB K80
die, the paper's GPU), of which the pool may still allocate when it has nothing cached to release; a CUDA
context with cuBLAS and cuDNN loaded commonly takes 0.3-0.5 GiB on Kepler and later GPUs. docs/search.md,
"Constants and memory"."""


def fits(per_device_bytes: Mapping[str, int], device_bytes: int, reserve: int = DEVICE_RESERVE_BYTES,
         replicas: bool = False) -> bool:
    """Whether a plan's worst device (its ``total``: the rewriter's graph, ``tofu run --no-replicas``) fits a
    device of ``device_bytes`` less ``reserve``; with ``replicas``, its ``total`` and ``replicas`` (what the
    runtime's parameter replicas hold beyond it, ``tofu run``'s default)."""
    extra = per_device_bytes.get("replicas", 0) if replicas else 0
    return per_device_bytes["total"] + extra <= device_bytes - reserve


@dataclass(frozen=True)
class PlanStep:
    factor: int                                   # workers per group this step splits into
    groups: int                                   # identical groups the step runs in (F_j)
    cost_bytes: float                             # d_j: bytes the step adds over all its groups (copies.py)
    tensor_dims: tuple[tuple[str, int | None], ...]   # tensor name -> split dimension (None: replicated)
    op_choices: tuple[tuple[str, OpChoice], ...]      # node name -> what the op does at this step

    @property
    def op_splits(self) -> tuple[tuple[str, str], ...]:
        """node name -> the choice in short (the split variable, ``var*``, ``dim1``, ``replicate``)."""
        return tuple((n, str(c)) for n, c in self.op_choices)


@dataclass(frozen=True)
class Plan:
    model: str
    workers: int
    algo: str
    steps: tuple[PlanStep, ...]
    comm_bytes: float                             # sum_j d_j: what MXNet copies per training iteration
    search_seconds: float
    per_device_bytes: tuple[tuple[str, int], ...]  # memory category -> bytes on one device
    coarsening: tuple[tuple[str, int], ...]
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()   # tensor name -> shape the plan was made for

    def to_json(self) -> dict:
        return {"version": PLAN_VERSION, "model": self.model, "workers": self.workers, "algo": self.algo,
                "comm_bytes": self.comm_bytes, "search_seconds": self.search_seconds,
                "per_device_bytes": dict(self.per_device_bytes), "coarsening": dict(self.coarsening),
                "shapes": {n: list(shape) for n, shape in self.shapes},
                "steps": [{"factor": s.factor, "groups": s.groups, "cost_bytes": s.cost_bytes,
                           "tensor_dims": dict(s.tensor_dims),
                           "ops": {n: c.to_json() for n, c in s.op_choices}}
                          for s in self.steps]}

    def save(self, path: str | Path) -> None:
        """Writes the plan as JSON.

        Raises:
            PlanError: the path cannot be written (a missing directory, a directory, no permission).
        """
        path = Path(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")     # atomic: a temporary file, then a rename
        try:
            tmp.write_text(json.dumps(self.to_json(), indent=1))
            os.replace(tmp, path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise PlanError(f"cannot write plan '{path}': {e.strerror or e}") from None

    @staticmethod
    def from_json(doc: Mapping) -> "Plan":
        try:
            if doc.get("version") != PLAN_VERSION:
                raise PlanError(f"plan version {doc.get('version')!r} is not {PLAN_VERSION}")
            if any(isinstance(s, Mapping) and "tensor_dims" not in s and "ops" not in s for s in doc["steps"]):
                raise PlanError("the plan has no per-tensor splits (`tofu plan --json` without --steps prints a "
                                "summary): save plans with `tofu plan MODEL --workers K --out PLAN.json`")
            steps = tuple(PlanStep(_integer(s["factor"]), _integer(s["groups"]), float(s["cost_bytes"]),
                                   tuple((k, None if v is None else _integer(v)) for k, v in s["tensor_dims"].items()),
                                   tuple((k, OpChoice.from_json(v)) for k, v in s["ops"].items()))
                          for s in doc["steps"])
            plan = Plan(str(doc["model"]), _integer(doc["workers"]), str(doc["algo"]), steps,
                        float(doc["comm_bytes"]), float(doc["search_seconds"]),
                        tuple((k, int(v)) for k, v in doc["per_device_bytes"].items()),
                        tuple((k, int(v)) for k, v in doc.get("coarsening", {}).items()),
                        tuple((k, tuple(_integer(d) for d in v)) for k, v in doc["shapes"].items()))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise PlanError(f"malformed plan: {type(e).__name__}: {e}") from None
        if any(s.factor < 2 or s.groups < 1 for s in plan.steps):
            raise PlanError("malformed plan: every step cuts 2 or more ways, in 1 or more groups")
        if math.prod(s.factor for s in plan.steps) != plan.workers:
            raise PlanError(f"plan's cuts multiply to {math.prod(s.factor for s in plan.steps)}, "
                            f"not its {plan.workers} workers")
        return plan

    @staticmethod
    def load(path: str | Path, graph: Graph | None = None) -> "Plan":
        """Reads a plan; with ``graph``, checks that it was made for that graph (names of tensors and ops).

        Raises:
            PlanError: unreadable, malformed, or made for another model.
        """
        try:
            doc = json.loads(Path(path).read_text())
        except OSError as e:
            raise PlanError(f"cannot read plan '{path}': {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise PlanError(f"plan '{path}' is not valid JSON: {e.msg} at line {e.lineno}") from None
        except UnicodeDecodeError as e:
            raise PlanError(f"plan '{path}' is not UTF-8 text (byte {e.start}): not a plan file") from None
        if not isinstance(doc, dict):
            raise PlanError(f"plan '{path}' is not a JSON object")
        plan = Plan.from_json(doc)
        if graph is not None:
            plan.check(graph)
        return plan

    def check(self, graph: Graph) -> None:
        """That the plan was made for ``graph``: its model, tensors, ops and shapes, and that every split
        dimension exists and divides at its step.

        Raises:
            PlanError: naming the first mismatch.
        """
        if self.model != graph.name:
            raise PlanError(f"the plan is for model '{self.model}', not '{graph.name}'")
        names = {t.name for t in graph.tensors}
        ops = {n.name for n in graph.nodes}
        for s in self.steps:
            if set(dict(s.tensor_dims)) != names or set(dict(s.op_choices)) != ops:
                raise PlanError(f"the plan's tensors and ops do not match model '{graph.name}' "
                                f"(was it made with other options, e.g. batch size?)")
        planned = dict(self.shapes)
        for t in graph.tensors:
            if planned.get(t.name) != t.shape:
                raise PlanError(f"the plan was made for tensor '{t.name}' of shape {planned.get(t.name)}, the model's "
                                f"is {t.shape} (other options, e.g. batch size?)")
            shape = list(t.shape)
            for j, s in enumerate(self.steps, 1):
                d = dict(s.tensor_dims)[t.name]
                if d is None:
                    continue
                if not 0 <= d < len(shape) or shape[d] % s.factor:
                    raise PlanError(f"step {j} splits tensor '{t.name}' of shape {tuple(shape)} along dimension {d} "
                                    f"{s.factor} ways: impossible")
                shape[d] //= s.factor


def _integer(v) -> int:
    """A JSON integer (``2``, not ``2.5``, ``"2"`` or ``true``: a tampered plan is refused, not rounded)."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{v!r} is not an integer")
    return v


def per_device_memory(graph: Graph, final_shapes: Sequence[tuple[int, ...]], owned: Sequence[float],
                      estimate: MemoryEstimate | None = None, fetched: float | Sequence[float] = 0.0,
                      transient: int = 0, workers: int | None = None,
                      replicas: Sequence[float] = ()) -> dict[str, int]:
    """The worst device's training memory under a plan: every category of the single-device estimate scaled by
    the fraction of its tensors' bytes that one device holds at the end of the recursion (every device holds
    a box of the same size of a split tensor; of the parameters, the pieces it owns, ``owned``: per device the
    fraction of the parameters' elements, :func:`tofu.search.owners.owned_fractions`), plus
    ``fetched``: the remote regions a device receives for its ops' inputs and keeps until the backward pass
    (all alive when the forward pass ends, where activations peak; each region once, however many ops there
    read it: :func:`tofu.search.copies.copies_and_kept`), and ``transient``: the largest partial sum or
    unconverted output piece the first device computes (one at a time). ``total`` is the sum of these.

    With ``fetched`` and ``owned`` per device, the categories are those of the worst device (its parameters, their
    gradients and optimizer state, and what it receives). With one number for ``fetched`` (the most any device
    receives), the categories of the device that owns the most plus it: above the worst device when that is not
    the one that receives the most.
    ``workspace`` is the device's own temporary space: the largest request of any op at the shard shapes
    (its ops share one buffer; an im2col buffer of one image does not shrink when the batch is split).

    ``total`` is what each device holds where every device has its own memory (GPUs), with the graph bound as
    the rewriter builds it. ``replicas``, not in ``total``: the most that the runtime's parameter replicas hold on
    a device beyond that (per device, :func:`tofu.search.copies.copies_and_kept`; ``tofu run`` binds them unless
    told ``--no-replicas``). ``device0_temp``, not in ``total``, is what device 0 holds besides on *CPU
    contexts*, where MXNet allocates every context's temporary space on cpu(0)
    (:func:`tofu.graph.memory.device0_temp_bytes`): there device 0's peak is ``total + device0_temp`` and the
    others' ``total - workspace``. ``workers`` defaults to the largest ratio
    of a tensor's size to its shard's."""
    from tofu.graph.memory import device0_temp_bytes, largest_workspace

    estimate = estimate or estimate_training_memory(graph)

    def fraction(roles: tuple[Role, ...]) -> float:
        full = sum(t.size for t in graph.tensors if t.role in roles)
        held = sum(math.prod(final_shapes[t.id]) for t in graph.tensors if t.role in roles)
        return held / full if full else 1.0

    if workers is None:
        workers = max((round(t.size / math.prod(final_shapes[t.id])) for t in graph.tensors
                       if math.prod(final_shapes[t.id])), default=1)
    a = fraction((Role.ACTIVATION, Role.DATA, Role.LABEL))
    workspace = largest_workspace(graph, final_shapes)
    per_device = isinstance(fetched, Sequence)
    received = tuple(fetched) if per_device else (fetched,)
    if per_device and len(received) == len(owned):
        candidates = list(zip(owned, received))
    else:
        candidates = [(max(owned), max(received, default=0.0))]
    best = None
    for p, got in candidates:
        out = {"params": int(estimate.params * p), "grads": int(estimate.grads * p),
               "optimizer": int(estimate.optimizer * p), "aux": int(estimate.aux * fraction((Role.AUX,))),
               "activations": int(estimate.activations * a), "fetched": int(got), "transient": int(transient),
               "workspace": workspace}
        out["total"] = sum(out.values())
        if best is None or out["total"] > best["total"]:
            best = out
    best["device0_temp"] = device0_temp_bytes(workers, workspace)
    best["replicas"] = int(max(replicas, default=0.0))
    return best
