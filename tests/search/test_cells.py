"""tofu.search.copies._cells, the cells the replay reads a region in, against a brute-force reference: every
element of the region from the nearest piece of each partial-sum class that holds it, grouped into the boxes the
pieces' edges make (no arrays, no shortcut but the one the docstring states)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from tofu.search.copies import _arrays, _cells


def reference(pieces, data, dst, distance):
    if any(hi <= lo for lo, hi in data):
        return ()
    classes = list(dict.fromkeys(h[2] for h in pieces))
    if not any(h[2] for h in pieces):
        for i, h in enumerate(pieces):      # held whole on dst: read from there
            if h[0] == dst and all(a <= c and d <= b for (a, b), (c, d) in zip(h[1], data)):
                return ((i, data),)
    edges = []
    for d, (lo, hi) in enumerate(data):
        cut = {lo, hi} | {e for h in pieces for e in h[1][d] if lo < e < hi
                          and all(max(x, u) < min(y, v) for (x, y), (u, v) in zip(h[1], data))}
        edges.append(sorted(cut))
    out = []
    for cell in itertools.product(*(list(zip(e, e[1:])) for e in edges)):
        holders = [(i, h) for i, h in enumerate(pieces)
                   if all(a <= c and d <= b for (a, b), (c, d) in zip(h[1], cell))]
        for key in sorted(classes, key=lambda k: min(i for i, h in holders if h[2] == k)
                          if any(h[2] == k for _, h in holders) else len(pieces)):
            mine = [(i, h) for i, h in holders if h[2] == key]
            if mine:
                i, _ = min(mine, key=lambda p: (distance(p[1][0], dst), p[1][0], p[0]))
                out.append((i, cell))
    return tuple(out)


def grid(rng, shape, factors, partial):
    """Pieces of a tensor of ``shape`` cut by ``factors`` per dimension onto consecutive devices, each box
    perhaps held twice (a replica) and, with ``partial``, two partial-sum classes."""
    pieces, w = [], 0
    bounds = [np.linspace(0, n, f + 1).astype(int).tolist() for n, f in zip(shape, factors)]
    for idx in itertools.product(*(range(f) for f in factors)):
        box = tuple((bounds[d][i], bounds[d][i + 1]) for d, i in enumerate(idx))
        for key in ((0,), (1,)) if partial else ((),):
            pieces.append((w, box, key, len(pieces)))
            w += 1
            if rng.random() < 0.3:
                pieces.append((w, box, key, len(pieces)))
                w += 1
    return pieces


@pytest.mark.parametrize("seed", range(40))
def test_cells_match_the_brute_force_reference(seed):
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 4))
    shape = tuple(int(n) for n in rng.integers(4, 13, rank))
    factors = tuple(int(f) for f in rng.integers(1, 4, rank))
    pieces = grid(rng, shape, factors, partial=bool(seed % 3 == 0))
    k = max(h[0] for h in pieces) + 1

    def distance(u, w):
        return abs(u - w)

    def order(dst):         # the ranks _cells takes: distance, then device; dst itself 0
        return np.array([0 if u == dst else distance(u, dst) * k + u for u in range(k)], dtype=np.int64)
    cases = 0
    for _ in range(25):
        lo = [int(rng.integers(0, n)) for n in shape]
        data = tuple((a, int(rng.integers(a + 1, n + 1))) for a, n in zip(lo, shape))
        dst = int(rng.integers(0, k))
        got = _cells(pieces, data, dst, order(dst), _arrays(pieces))
        assert got == reference(pieces, data, dst, distance), (pieces, data, dst)
        assert all(type(x) is int for _, cell in got for iv in cell for x in iv)
        cases += 1
    empty = tuple((0, 0) if d == 0 else (0, n) for d, n in enumerate(shape))
    assert _cells(pieces, empty, 0, order(0), _arrays(pieces)) == ()
    assert cases == 25


@pytest.mark.parametrize("seed", range(20))
def test_a_layout_that_holds_no_element_twice_gives_the_same_cells_to_every_destination(seed):
    """The replay keys such a layout's cells without the destination (``_arrays``' last value): each cell has
    one holder, so the nearest is the same from everywhere."""
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 4))
    shape = tuple(int(n) for n in rng.integers(4, 13, rank))
    factors = tuple(int(f) for f in rng.integers(1, 4, rank))
    pieces = grid(np.random.default_rng([seed, 1]), shape, factors, partial=False)
    alone = [(i, box, key, i) for i, (_, box, key, _) in enumerate(dict((h[1], h) for h in pieces).values())]
    replicated = len(alone) < len(pieces)
    assert _arrays(alone)[5]
    assert _arrays(pieces)[5] is not replicated
    assert not _arrays(grid(rng, shape, factors, partial=True))[5]
    k = len(alone)
    for _ in range(10):
        lo = [int(rng.integers(0, n)) for n in shape]
        data = tuple((a, int(rng.integers(a + 1, n + 1))) for a, n in zip(lo, shape))
        seen = {_cells(alone, data, dst, np.array([0 if u == dst else abs(u - dst) * k + u for u in range(k)]),
                       _arrays(alone)) for dst in range(k)}
        assert len(seen) == 1
