"""The operator registry: MXNet op name -> TDL description (an ``OpSpec``).

Descriptions register themselves with ``@tdl_op`` (``tofu.tdl.describe``) when their ``operators_tdl``
module is imported; :func:`load_builtin_operators` imports them all, explicitly.
"""
from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from tofu.errors import DuplicateRegistrationError, UnsupportedOperatorError

if TYPE_CHECKING:
    from tofu.tdl.describe import OpSpec

REGISTRY: dict[str, "OpSpec"] = {}


@dataclass(frozen=True)
class Expansion:
    """How an op runs a strategy that exchanges partial statistics (``tofu.tdl.describe.tdl_expansion``).

    Called as its function: ``(pieces, shapes, attrs, allreduce)``, plus ``origins`` (where each worker's
    input pieces start in the whole inputs) for an expansion that declares that parameter.
    Which statistics carry a gradient (all-reduced in the backward pass as they were forward) is read off its
    symbol (``tofu.graph.gradients.statistics_gradients``). ``refuses``: ``(attrs, input_shapes) -> reason or
    None``, the cases it cannot run.
    ``partials``: it also runs a partition-n-reduce whose shards MXNet's kernel cannot (Embedding split along its
    table's rows), each worker's partial output from its pieces and their origins, nothing exchanged.
    The outputs whose gradient MXNet's kernel ignores (``tofu.graph.ir.IGNORED_OUTPUT_GRADIENTS`` of ``op``: a
    normalization's statistics) are given under BlockGrad, whatever the function builds: the expansion differentiates
    as the kernel does."""

    run: Callable
    refuses: Callable | None = None
    partials: bool = False
    op: str = ""

    @cached_property
    def reads_origins(self) -> bool:
        return "origins" in inspect.signature(self.run).parameters

    def __call__(self, pieces, shapes, attrs, allreduce, origins=None):
        if self.reads_origins:
            if origins is None:
                raise TypeError(f"{self.run.__name__}: needs the origins of the workers' pieces")
            outs = self.run(pieces, shapes, attrs, allreduce, origins=origins)
        else:
            outs = self.run(pieces, shapes, attrs, allreduce)
        from tofu.graph.ir import IGNORED_OUTPUT_GRADIENTS
        ignored = IGNORED_OUTPUT_GRADIENTS.get(self.op, ())
        if not ignored:
            return outs
        import mxnet as mx
        return [[mx.sym.BlockGrad(o) if i in ignored else o for i, o in enumerate(out)] for out in outs]

    def runs(self, attrs, input_shapes) -> bool:
        """Whether it runs the op with typed ``attrs`` on inputs of ``input_shapes`` (the whole op's)."""
        return self.refuses is None or self.refuses(attrs, input_shapes) is None


EXPANSIONS: dict[str, Expansion] = {}
"""op -> how to run a strategy that exchanges partial statistics (see ``tdl_expansion``)."""


def check_unregistered(op: str, source: str) -> None:
    if op in REGISTRY:
        raise DuplicateRegistrationError(f"operator '{op}' is described twice: in {REGISTRY[op].source} and "
                                         f"in {source}")


def register(op: str, spec: "OpSpec") -> None:
    check_unregistered(op, spec.source)
    REGISTRY[op] = spec


def register_expansion(op: str, expansion: Expansion) -> None:
    if op in EXPANSIONS:
        raise DuplicateRegistrationError(f"operator '{op}' has two expansions")
    EXPANSIONS[op] = expansion


def expansion(op: str) -> Expansion | None:
    load_builtin_operators()
    return EXPANSIONS.get(op)


def lookup(op: str, node: str | None = None) -> "OpSpec":
    load_builtin_operators()
    try:
        return REGISTRY[op]
    except KeyError:
        raise UnsupportedOperatorError(op, known=REGISTRY, node=node) from None


_LOADED: list[bool] = []


def load_builtin_operators() -> dict[str, "OpSpec"]:
    """Imports every description family of ``operators_tdl`` (once) and returns the registry."""
    if not _LOADED:
        package = importlib.import_module("operators_tdl")
        for family in package.FAMILIES:
            importlib.import_module(f"operators_tdl.{family}")
        _LOADED.append(True)
    return REGISTRY
