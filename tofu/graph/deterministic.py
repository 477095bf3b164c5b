"""A graph whose training step is deterministic: what ``tofu run --check`` compares with one device.

Input: a :class:`~tofu.graph.ir.Graph`. Output: the same graph with every training-mode ``Dropout`` at p = 0
(an identity) and every sampler (``_random_normal``, ``_random_gamma``, ... and their ``_like`` forms) drawing its
distribution's mean (:func:`at_mean`), and the names of the ops changed. A dropout mask or a sample is drawn by
each device's own random generator, so a partitioned run and one device never draw the same values: their
outputs differ by the draws alone (up to 10 on Gluon's alexnet), which says nothing about the partition.
Comparing without the draws compares like with like; the run says so.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from tofu.graph.attrs import Attrs
from tofu.graph.ir import Graph

def at_mean(op: str, attrs: Attrs) -> tuple[str, Attrs] | None:
    """The sampler ``op`` drawing its distribution's mean, as MXNet can run it: a uniform draw from [mean, mean]
    (MXNet's normal refuses scale 0), of the same shape and type; None if ``op`` is not a described sampler
    (``_random_<distribution>``, ``_random_<distribution>_like``). The mean is the value its TDL description
    states (operators_tdl/random.py), evaluated on one element."""
    from tofu import registry
    from tofu.tdl.describe import describe
    from tofu.tdl.interpret import evaluate

    if not op.startswith("_random_") or op.startswith("_random_pdf_") or op not in registry.load_builtin_operators():
        return None
    like = op.endswith("_like")
    one = Attrs.of(**{**attrs, "shape": (1,)}) if not like else attrs
    (value,) = evaluate(describe(op, one, ((1,),) if like else (), ((1,),)), [np.zeros(1, np.float32)] if like else [])
    kept = {k: attrs[k] for k in ("shape", "dtype") if k in attrs}
    mean = float(value.reshape(-1)[0])
    return ("_random_uniform_like" if like else "_random_uniform"), Attrs.of(**kept, low=mean, high=mean)


def without_dropout(graph: Graph) -> tuple[Graph, tuple[str, ...]]:
    """``graph`` with each random ``Dropout`` (mode 'training', p > 0) set to p = 0 and each sampler drawing its
    mean (:func:`at_mean`), and those ops' names."""
    changed, nodes = [], []
    for node in graph.nodes:
        fixed = at_mean(node.op, node.attrs)
        if node.op == "Dropout" and node.attrs.get("mode", "training") == "training" \
                and float(node.attrs.get("p", 0.5)) > 0:
            node = dataclasses.replace(node, attrs=Attrs.of(**{**node.attrs, "p": 0.0}))
            changed.append(node.name)
        elif fixed is not None:
            node = dataclasses.replace(node, op=fixed[0], attrs=fixed[1])
            changed.append(node.name)
        nodes.append(node)
    return dataclasses.replace(graph, nodes=tuple(nodes)), tuple(changed)
