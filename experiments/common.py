"""Shared plumbing of the experiment scripts: CSV rows appended as they finish, and the JSON sidecar that
records how a result file was made (arguments, git SHA, versions)."""
from __future__ import annotations

import csv
import json
import os
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def pin(cpus: set[int]) -> None:
    """Every thread of this process pinned to ``cpus`` (threads started later, MXNet's workers among them, inherit
    their starter's set)."""
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), cpus)


def pin_option(value: str | None, error) -> set[int] | None:
    """A ``--cpus`` option's cores (comma-separated), checked against this process's (``error``: the parser's,
    exit 2), and the process pinned to them; None: not pinned."""
    if value is None:
        return None
    available = os.sched_getaffinity(0)
    try:
        cpus = {int(c) for c in value.split(",")}
    except ValueError:
        cpus = set()
    if not cpus or not cpus <= available:
        error(f"--cpus '{value}': cores of {sorted(available)}")
    pin(cpus)
    return cpus


def git_sha() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_sidecar(csv_path: Path, args: Mapping, **extra) -> Path:
    """``<csv>.json`` beside the CSV: arguments, git SHA, Python/MXNet/numpy versions, machine."""
    import mxnet
    import numpy

    path = csv_path.with_suffix(".json")
    path.write_text(json.dumps({"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in args.items()},
                                "git_sha": git_sha(), "python": sys.version.split()[0],
                                "mxnet": mxnet.__version__, "numpy": numpy.__version__,
                                "machine": platform.machine(), "processor": platform.processor(),
                                "command": " ".join(sys.argv), **extra}, indent=1))
    return path


def write_simulated_sidecar(csv_path: Path, args: Mapping, prof, **extra) -> Path:
    """:func:`write_sidecar` of a simulated run: the hardware profile it ran on, ``simulated`` true, and ``extra``
    (e.g. :func:`rerun_source`)."""
    return write_sidecar(csv_path, args, profile={"name": prof.name, "devices": prof.devices,
                                                  "memory_bytes": prof.memory_bytes, "source": prof.source},
                         simulated=True, **extra)


def rerun_source() -> dict:
    """The ``source`` of a sidecar that this run's command wrote (what tests/test_docs.py requires of committed
    results: ``re-run: `COMMAND```), and ``git_dirty``: whether the working tree differed from ``git_sha``."""
    try:
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                    text=True, check=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        dirty = None
    return {"source": f"re-run: `{' '.join(sys.argv)}`", "git_dirty": dirty}


def six_digits(row: Mapping) -> dict:
    """``row`` with its floats written to 6 significant digits (what a timing or a ratio carries)."""
    return {k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()}


class RowWriter:
    """Appends one CSV row per finished case, flushing each, so an interrupted run keeps what it measured."""

    def __init__(self, path: Path, columns: Sequence[str]):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.columns = path, tuple(columns)
        self._file = path.open("w", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=self.columns)
        self._writer.writeheader()

    def write(self, row: Mapping) -> None:
        self._writer.writerow({c: row.get(c, "") for c in self.columns})
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def ideal_batch(model: str) -> int:
    """The paper's Ideal batch of the model's family (:data:`tofu.models.paper.IDEAL_BATCH`: 128 for WResNet,
    512 for RNN), 16 for the families it does not train."""
    from tofu.models import ModelOptions, build_model
    from tofu.models.paper import IDEAL_BATCH

    return IDEAL_BATCH.get(build_model(model, ModelOptions(batch=1)).family, 16)


def model_builder(model: str):
    """``batch -> Graph`` for ``model`` (what :func:`tofu.sim.systems.estimate` takes)."""
    from tofu.api import load_graph
    from tofu.models import ModelOptions

    return lambda batch: load_graph(model, ModelOptions(batch=batch))


def read_rows(path: Path) -> list[dict[str, str]]:
    """A results CSV as a list of rows (what the plot scripts read)."""
    with Path(path).open(newline="") as f:
        return list(csv.DictReader(f))


def rewrite_rows(path: Path, columns: Sequence[str], rows: Sequence[Mapping]) -> None:
    """Rewrites the CSV ``path`` with ``rows`` in the given order (a run whose cases finish out of order, e.g.
    in a process pool, appends them as they come and puts them in order at the end)."""
    with Path(path).open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=tuple(columns))
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row.get(c, "") for c in columns})


def held_at_peak(execution, device: int | None = None) -> tuple[int, float, dict[str, int]]:
    """What a simulated iteration's fullest device (or ``device``) holds at its peak: (device, time, bytes by what
    wrote them), a resident tensor (parameter, gradient array, optimizer state, bound input) named by its kind, any
    other by the MXNet op of its writer (``Concat``, ``_backward_FullyConnected``, ...). Reads the engine's
    :class:`~tofu.sim.engine.Execution` by its memory rule (a tensor held from its writer's start to its last
    reader's end; resident tensors throughout)."""
    if device is None:
        device = max(range(len(execution.peak_bytes)), key=lambda d: execution.peak_bytes[d])
    when = max(execution.memory[device], key=lambda step: step[1])[0]
    program, spans = execution.program, execution.spans
    held: dict[str, int] = {}
    for tensor, readers in zip(program.tensors, program.readers):
        if tensor.device != device:
            continue
        if tensor.kind.resident or tensor.producer is None:
            begin, end = 0.0, execution.makespan
        else:
            begin = spans[tensor.producer].start
            end = max((spans[r].end for r in readers), default=spans[tensor.producer].end)
        if begin <= when < end:
            key = tensor.kind.value if tensor.kind.resident or tensor.producer is None else \
                program.tasks[tensor.producer].op
            held[key] = held.get(key, 0) + tensor.nbytes
    return device, when, dict(sorted(held.items(), key=lambda kv: -kv[1]))
