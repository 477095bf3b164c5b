"""Parameter owners (tofu.search.owners) against the rule written out from its definition: every device's held
box, the pieces in decreasing bytes (then tensor id, then box), each to its holder with the fewest bytes owned so
far (then the lowest device)."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from tofu.analysis.compose import held_box
from tofu.api import load_graph
from tofu.graph.ir import Role
from tofu.search.owners import parameter_pieces


def _by_definition(graph, factors, dims):
    k = math.prod(factors)
    holders = []
    for t in graph.tensors:
        if t.role is not Role.PARAM:
            continue
        boxes = {}
        for w in range(k):
            boxes.setdefault(held_box(t.shape, dims[t.id], factors, w), []).append(w)
        holders += [(math.prod(b - a for a, b in box) * np.dtype(t.dtype).itemsize, t.id, box, ws)
                    for box, ws in boxes.items()]
    owned = [0] * k
    pieces = {}
    for nbytes, t, box, ws in sorted(holders, key=lambda h: (-h[0], h[1], h[2])):
        w = min(ws, key=lambda w: (owned[w], w))
        owned[w] += nbytes
        pieces.setdefault(t, []).append((w, box))
    return {t: tuple(sorted(p)) for t, p in pieces.items()}


@pytest.mark.parametrize("model", ["mlp", "wresnet-tiny", "gpt-tiny"])
@pytest.mark.parametrize("factors", [(2,), (2, 2, 2), (2, 3), (8,), (2,) * 6])
def test_owners_follow_the_kvstore_rule(model, factors):
    graph = load_graph(model, with_loss=True)
    rng = random.Random(f"{model}{factors}")
    params = [t for t in graph.tensors if t.role is Role.PARAM]
    assert params
    for _ in range(4):
        # any split dimension at any cut, replicated sometimes (boxes that do not divide included)
        dims = [tuple(rng.choice([None] + list(range(len(t.shape)))) for _ in factors) for t in graph.tensors]
        found = parameter_pieces(graph, factors, dims)
        assert found == _by_definition(graph, factors, dims)
        assert set(found) == {t.id for t in params}
