"""Exception types of tofu-mx.

Every error a user can cause derives from :class:`TofuError`; the CLI prints its message on one line and
exits with its ``status``: 2 for bad input, 1 for a run that failed (:class:`RunFailure`: a diverged loss, a
failed ``--check``). Anything else escaping the CLI is a bug in tofu-mx.
"""
from __future__ import annotations

from collections.abc import Iterable


class TofuError(Exception):
    """Base class of errors caused by the input (model, file, operator description, option)."""

    status = 2          # the command line's exit status


def _known(known: Iterable[str], limit: int = 12) -> str:
    names = sorted(known)
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


class UnknownModelError(TofuError):
    def __init__(self, name: str, known: Iterable[str]):
        super().__init__(f"unknown model '{name}'; known models: {_known(known)}")
        self.name = name


class InputShapeError(TofuError):
    """An input shape is missing, malformed or inconsistent with the graph."""


class GraphImportError(TofuError):
    """The MXNet graph (Symbol or JSON file) cannot be read into the IR."""


class TDLError(TofuError):
    """A TDL description is malformed (wrong rank, non-affine index where affinity is needed, ...)."""


class DuplicateRegistrationError(TDLError):
    pass


class UnsupportedOperatorError(TofuError):
    def __init__(self, op: str, known: Iterable[str] = (), node: str | None = None):
        where = f" (node '{node}')" if node else ""
        super().__init__(f"operator '{op}'{where} has no TDL description; add one under operators_tdl/ "
                         f"(described: {_known(known, 8)})")
        self.op = op


class AnalysisError(TofuError):
    """Partition analysis failed for an operator."""


class SearchError(TofuError):
    """The plan search cannot satisfy the request (e.g. impossible worker count)."""


class PlanError(TofuError):
    """A plan file is malformed or belongs to another model."""


class RewriteError(TofuError):
    """A plan cannot be turned into a partitioned graph."""


class RunFailure(TofuError):
    """A run that started but whose result is wrong or unusable (exit status 1, not 2: the input was valid)."""

    status = 1


class BindError(RunFailure):
    """MXNet refuses to bind a (partitioned) graph that tofu built: a defect of tofu's, not of the input;
    ``reason``: MXNet's own line."""

    def __init__(self, what: str, reason: str):
        super().__init__(f"MXNet cannot bind {what}: {reason}")
        self.reason = reason


class DivergedError(RunFailure):
    """A training step's loss is not finite (NaN or infinite)."""

    def __init__(self, step: int, loss: float, which: str = "the partitioned run"):
        super().__init__(f"the loss of step {step} is {loss} in {which}: training diverged "
                         f"(a smaller --lr, or other initial values, --seed)")
        self.step = step


class CheckFailedError(RunFailure):
    """``--check``: the partitioned run differs from one device by more than the tolerance."""
