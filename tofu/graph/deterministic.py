"""A graph whose training step is deterministic: what ``tofu run --check`` compares with one device.

Input: a :class:`~tofu.graph.ir.Graph`. Output: the same graph with every training-mode ``Dropout`` at p = 0
(an identity), and the names of the ops changed. A dropout mask is drawn by each device's own random
generator, so a partitioned run and one device never draw the same masks: their outputs differ by the masks
alone (up to 10 on Gluon's alexnet), which says nothing about the partition. Comparing with dropout off
compares like with like; the run says so.
"""
from __future__ import annotations

import dataclasses

from tofu.graph.attrs import Attrs
from tofu.graph.ir import Graph


def without_dropout(graph: Graph) -> tuple[Graph, tuple[str, ...]]:
    """``graph`` with each random ``Dropout`` (mode 'training', p > 0) set to p = 0, and those ops' names."""
    changed, nodes = [], []
    for node in graph.nodes:
        if node.op == "Dropout" and node.attrs.get("mode", "training") == "training" \
                and float(node.attrs.get("p", 0.5)) > 0:
            node = dataclasses.replace(node, attrs=Attrs.of(**{**node.attrs, "p": 0.0}))
            changed.append(node.name)
        nodes.append(node)
    return dataclasses.replace(graph, nodes=tuple(nodes)), tuple(changed)
