"""The composition of the pipeline stages; the only module that knows every stage.

Each function here is a short chain of stage functions (DESIGN.md, section 1).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tofu.errors import InputShapeError
from tofu.graph import Graph, Shape, import_symbol, load_symbol_file
from tofu.models import ModelOptions, build_model


def load_graph(model: str, options: ModelOptions = ModelOptions(),
               shapes: Mapping[str, Shape] | None = None) -> Graph:
    """A zoo model by name, or a symbol JSON file (``*.json``) with the shapes of its inputs, as a Graph.

    Raises:
        UnknownModelError: ``model`` is neither a zoo name nor a JSON file.
        InputShapeError, GraphImportError: the file or its shapes are unusable.
    """
    if model.endswith(".json") or Path(model).is_file():
        if not shapes:
            raise InputShapeError(f"'{model}' is a symbol file: give its input shapes with --shape NAME=D1,D2,...")
        return import_symbol(load_symbol_file(model), shapes, name=Path(model).stem)
    if shapes:
        raise InputShapeError(f"--shape applies to symbol files; zoo model '{model}' takes --batch/--seq-len")
    built = build_model(model, options)
    return import_symbol(built.symbol, built.shapes(), name=built.name)


def load_plan(graph: Graph, workers: int, algo: str = "tofu", path: str | None = None):
    """A saved plan checked against ``graph`` and ``workers``, or a new one found by ``algo``.

    Raises:
        PlanError: the saved plan is unreadable or made for another model or worker count.
    """
    from tofu.errors import PlanError
    from tofu.search.algorithms import plan_graph
    from tofu.search.plan import Plan

    if path is None:
        return plan_graph(graph, workers, algo)
    plan = Plan.load(path, graph)
    if plan.workers != workers:
        raise PlanError(f"plan '{path}' is for {plan.workers} workers, not {workers}")
    return plan


def partitioned(graph: Graph, plan):
    """The partitioned forward MXNet symbol of ``graph`` under ``plan`` (stage 4)."""
    from tofu.rewrite import apply_plan

    return apply_plan(graph, plan)


def reference_symbol(graph: Graph, args=None):
    """The unpartitioned MXNet symbol of ``graph`` (what one device runs), rebuilt from the graph itself."""
    from tofu.graph.mxnet_export import export_symbol

    return export_symbol(graph)


def clear_caches() -> None:
    """Forgets every cached description, analysis, kernel check and cost table (for cold timings)."""
    import importlib

    strategies = importlib.import_module("tofu.analysis.strategies")    # the package shadows it by a function
    single_op = importlib.import_module("tofu.graph.single_op")
    coarsen = importlib.import_module("tofu.search.coarsen")
    cost = importlib.import_module("tofu.search.cost")
    describe = importlib.import_module("tofu.tdl.describe")
    views = importlib.import_module("tofu.analysis.views")

    describe._describe.cache_clear()
    strategies._analyse.cache_clear()
    strategies._has_computed.cache_clear()
    single_op._op_symbol.cache_clear()
    single_op._infer.cache_clear()
    coarsen._elementwise.cache_clear()
    cost._costed.cache_clear()
    views.clear_calls()
