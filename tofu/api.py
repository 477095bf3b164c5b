"""The composition of the pipeline stages; the only module that knows every stage.

Each function here is a short chain of stage functions (DESIGN.md, section 1).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tofu.errors import InputShapeError
from tofu.graph import Graph, Shape, import_symbol, load_symbol_file
from tofu.graph.mxnet_import import check_no_parameter_shapes, declared_shapes, format_shapes
from tofu.graph.ir import LOSS_OPS
from tofu.models import ModelOptions, build_model


def load_graph(model: str, options: ModelOptions = ModelOptions(),
               shapes: Mapping[str, Shape] | None = None, with_loss: bool = False) -> Graph:
    """A zoo model by name, or a symbol JSON file (``*.json``) with the shapes of its inputs, as a Graph.

    With ``with_loss``, a symbol file whose output is not a loss (a network exported from Gluon ends in its
    logits) gets a ``SoftmaxOutput`` over its output, reading a label ``softmax_label`` of one class per row.

    Raises:
        UnknownModelError: ``model`` is neither a zoo name nor a JSON file.
        InputShapeError, GraphImportError: the file or its shapes are unusable.
    """
    if model.endswith(".json") or Path(model).is_file():
        symbol = load_symbol_file(model)
        if not shapes:
            # what a variable declares is not taken on its own: a variable given a shape is an input, not trained,
            # and a declared weight (fc_weight, shape=(4, 6)) would then silently stay as initialised
            declared = declared_shapes(symbol)
            raise InputShapeError(f"'{model}' is a symbol file: give its input shapes with --shape NAME=D1,D2,..."
                                  + (f" (its variables declare {format_shapes(declared)}; give the inputs among them)"
                                     if declared else ""))
        check_no_parameter_shapes(symbol, shapes)
        graph = import_symbol(symbol, shapes, name=Path(model).stem)    # shapes inferred in a safe probe
        if with_loss and (lossy := _with_loss(symbol, graph, shapes)) is not None:
            graph = import_symbol(*lossy, name=Path(model).stem)
        return graph
    if shapes:
        raise InputShapeError(f"--shape applies to symbol files; zoo model '{model}' takes --batch/--seq-len")
    built = build_model(model, options)
    return import_symbol(built.symbol, built.shapes(), name=built.name)


def model_batch(model: str, options: ModelOptions = ModelOptions()) -> int:
    """The batch a zoo model is built with: ``options.batch``, or its family's default.

    Raises:
        UnknownModelError: ``model`` is not a zoo name.
    """
    return build_model(model, options).batch


def _with_loss(symbol, graph: Graph, shapes: Mapping[str, Shape]):
    """``symbol`` with a softmax loss over its one output and the shapes with its label's, or None when it
    ends in a loss already, in several outputs, or in one that is not (batch, classes) logits of two classes or
    more (over one, a softmax is 1 whatever the input, and nothing would train); ``graph`` is
    ``symbol`` imported (its output shape)."""
    import mxnet as mx

    heads = [graph.tensors[t] for t in graph.heads]
    if len(heads) != 1 or (heads[0].producer is not None and graph.nodes[heads[0].producer].op in LOSS_OPS):
        return None
    shape = heads[0].shape
    if len(shape) != 2 or shape[1] < 2:
        return None                  # not logits (a softmax over one class has no gradient): trained as it is
        #                              (tofu run refuses it, see has_loss)
    label = "softmax_label"
    return mx.sym.SoftmaxOutput(symbol, mx.sym.var(label), name="softmax"), {**shapes, label: (shape[0],)}


def has_loss(graph: Graph) -> bool:
    """Whether every output of ``graph`` is a loss (what training needs: MXNet's backward starts there)."""
    return all(graph.tensors[t].producer is not None and graph.nodes[graph.tensors[t].producer].op in LOSS_OPS
               for t in graph.heads)


def load_plan(graph: Graph, workers: int, algo: str = "tofu", path: str | None = None):
    """A saved plan checked against ``graph`` and ``workers`` (its costs recomputed), or a new one by ``algo``.

    Raises:
        PlanError: the saved plan is unreadable or made for another model or worker count.
    """
    from tofu.errors import PlanError
    from tofu.search.algorithms import plan_graph, replay
    from tofu.search.plan import Plan

    if path is None:
        return plan_graph(graph, workers, algo)
    plan = Plan.load(path, graph)
    if plan.workers != workers:
        raise PlanError(f"plan '{path}' is for {plan.workers} workers, not {workers}")
    return replay(graph, plan)


def partitioned(graph: Graph, plan, machine_sync: frozenset[str] = frozenset()):
    """The partitioned forward MXNet symbol of ``graph`` under ``plan`` (stage 4); ``machine_sync``: the ops
    whose statistics are averaged over the machines of a hybrid run."""
    from tofu.rewrite import apply_plan

    return apply_plan(graph, plan, machine_sync)


def reference_symbol(graph: Graph):
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
    compose = importlib.import_module("tofu.analysis.compose")

    describe._describe.cache_clear()
    strategies._analyse.cache_clear()
    strategies.signature_strategies.cache_clear()
    strategies._has_computed.cache_clear()
    single_op._op_symbol.cache_clear()
    single_op._infer.cache_clear()
    coarsen._elementwise.cache_clear()
    cost.clear_caches()
    compose._by_choice.cache_clear()
    compose._follows.cache_clear()
    views.clear_calls()
