"""Training checkpoints that resume exactly: whole parameters, the optimizer's momentum and the step, in one file.

Input: a Graph, a :class:`TrainingState` (whole tensors by name, the step just finished). Output: one MXNet
``.params`` file, written atomically (a temporary file in the same directory, then ``os.replace``), and the
state read back from it.

The file holds the keys ``tofu run --save`` writes (``arg:NAME`` for parameters, ``aux:NAME`` for auxiliary
states, whole tensors), so ``tofu run --load``, ``mx.model.load_params`` and ``Module.load_checkpoint`` read it
as an ordinary checkpoint; beside them, in the same file, ``mom:NAME`` (the SGD momentum of parameter NAME,
whole) and ``tofu:step`` (one int64). MXNet's loaders skip key kinds other than ``arg`` and ``aux``. Keeping
the three in one file is what makes the write atomic: a reader sees the old checkpoint or the new one, never
parameters of one step beside the momentum of another.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tofu.graph.ir import Graph, Role
from tofu.runtime.data import CheckpointError, checkpoint_arrays, load_checkpoint, read_params, write_params


@dataclass(frozen=True)
class TrainingState:
    """Everything a run needs to continue after ``step`` steps: whole parameters and auxiliary states
    (``values``), and the momentum of every parameter (``momentum``, whole)."""

    step: int
    values: Mapping[str, np.ndarray]
    momentum: Mapping[str, np.ndarray]


@dataclass(frozen=True)
class CheckpointPolicy:
    """Write ``path`` after every ``every`` steps (step numbers counted from the start of training)."""

    path: Path
    every: int

    def due(self, step: int) -> bool:
        return step % self.every == 0


def trainer_state(graph: Graph, values: Mapping[str, np.ndarray], trainer, step: int) -> TrainingState:
    """A :class:`~tofu.runtime.train.Trainer`'s state after ``step`` steps, as whole tensors (a value the graph
    never updates keeps its entry in ``values``)."""
    current = {**values, **trainer.parameters((Role.PARAM, Role.AUX))}
    whole = {t.name: current[t.name] for t in graph.tensors
             if t.producer is None and t.role in (Role.PARAM, Role.AUX)}
    return TrainingState(step, whole, trainer.momentum_values())


def save_training_state(path: str | Path, graph: Graph, state: TrainingState, plan=None) -> None:
    """Writes ``state`` to ``path`` atomically: a temporary file in the same directory, then a rename over it.
    With ``plan``, also ``NAME.plan.json`` beside it (atomically as well).

    Raises:
        CheckpointError: the file cannot be written (nothing at ``path`` has changed then).
    """
    import mxnet as mx

    arrays = checkpoint_arrays(graph, state.values)
    for t in graph.by_role(Role.PARAM):
        if t.producer is None:          # a parameter the graph never updates has no momentum: zeros
            mom = state.momentum.get(t.name)
            arrays[f"mom:{t.name}"] = mx.nd.array(np.zeros(t.shape) if mom is None else mom, dtype=t.dtype)
    arrays["tofu:step"] = mx.nd.array([state.step], dtype=np.int64)
    write_params(path, arrays, plan)


def load_training_state(path: str | Path, graph: Graph) -> TrainingState:
    """The state saved by :func:`save_training_state` (a checkpoint of ``graph``'s model).

    Raises:
        CheckpointError: unreadable, not a checkpoint of this model, or a ``--save`` file without momentum and
            step (which can start a run with ``--load``, but not resume one).
    """
    values = load_checkpoint(path, graph)          # every parameter and auxiliary state, shapes checked
    loaded = read_params(path)
    if "tofu:step" not in loaded:
        raise CheckpointError(f"'{path}' has parameters but no optimizer state and step (a --save file?): "
                              f"start from it with --load, or resume from a --checkpoint file")
    momentum = {}
    for t in graph.by_role(Role.PARAM):
        key = f"mom:{t.name}"
        if key not in loaded:
            raise CheckpointError(f"checkpoint '{path}' has no momentum of '{t.name}'")
        if tuple(loaded[key].shape) != t.shape:
            raise CheckpointError(f"checkpoint '{path}': the momentum of '{t.name}' has shape "
                                  f"{tuple(loaded[key].shape)}, the model's is {t.shape}")
        momentum[t.name] = loaded[key].asnumpy()
    return TrainingState(int(loaded["tofu:step"].asnumpy()[0]), values, momentum)
