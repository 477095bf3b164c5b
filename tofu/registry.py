"""The operator registry: MXNet op name -> TDL description (an ``OpSpec``).

Descriptions register themselves with ``@tdl_op`` (``tofu.tdl.describe``) when their ``operators_tdl``
module is imported; :func:`load_builtin_operators` imports them all, explicitly.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from tofu.errors import DuplicateRegistrationError, UnsupportedOperatorError

if TYPE_CHECKING:
    from tofu.tdl.describe import OpSpec

REGISTRY: dict[str, "OpSpec"] = {}
EXPANSIONS: dict[str, Callable] = {}
"""op -> how to run a strategy that exchanges partial statistics (see ``tdl_expansion``)."""


def check_unregistered(op: str, source: str) -> None:
    if op in REGISTRY:
        raise DuplicateRegistrationError(f"operator '{op}' is described twice: in {REGISTRY[op].source} and "
                                         f"in {source}")


def register(op: str, spec: "OpSpec") -> None:
    check_unregistered(op, spec.source)
    REGISTRY[op] = spec


def register_expansion(op: str, fn: Callable) -> None:
    if op in EXPANSIONS:
        raise DuplicateRegistrationError(f"operator '{op}' has two expansions")
    EXPANSIONS[op] = fn


def expansion(op: str) -> Callable | None:
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
