"""Which device holds each piece of a parameter.

A parameter box that several devices hold (the parameter is replicated at some cut) has one variable, on its
owner: the other holders read it there and send their gradients back, where MXNet sums them and the owner's
update runs. Owners are spread as MXNet's ``device`` kvstore spreads its keys over the GPUs
(``KVStoreDevice::InitMergeBuffers``, src/kvstore/kvstore_device.h: keys in decreasing size, each to the context
with the fewest bytes assigned so far):

    for each parameter piece p in decreasing bytes (then tensor id, then box):
        owner(p) = argmin_{w holds p} (bytes owned by w so far, w)

so that the data-parallel plan, which holds every weight whole, spreads the weights, their gradients and the
optimizer state over the devices rather than keeping them all on the first. A box one device alone holds is its
own. The runtime (:mod:`tofu.rewrite.apply_plan`), the byte count (:mod:`tofu.search.copies`), the plan's
memory and the simulator all read the owners from here.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from tofu.analysis.compose import coordinates, held_box
from tofu.graph.ir import Graph, Role

Box = tuple[tuple[int, int], ...]


def parameter_pieces(graph: Graph, factors: Sequence[int],
                     dims: Sequence[Sequence[int | None]]) -> dict[int, tuple[tuple[int, Box], ...]]:
    """Per parameter tensor id, its pieces as (owner device, box), in increasing device order: one per distinct
    box the devices hold under the cuts ``factors``, ``dims[t]`` tensor t's split dimension at each cut."""
    k = math.prod(factors)
    coords = np.array([coordinates(w, factors) for w in range(k)], dtype=np.int64).reshape(k, len(factors))
    holders: list[tuple[int, int, Box, list[int]]] = []      # (bytes, tensor id, box, holding devices)
    held: dict[tuple, list[tuple[int, Box, list[int]]]] = {}      # per shape and dims: (elements, box, devices)
    for t in graph.tensors:
        if t.role is not Role.PARAM:
            continue
        boxes = held.get((t.shape, tuple(dims[t.id])))
        if boxes is None:
            boxes = held[(t.shape, tuple(dims[t.id]))] = _held(t.shape, dims[t.id], factors, coords)
        itemsize = np.dtype(t.dtype).itemsize
        holders += [(n * itemsize, t.id, box, ws) for n, box, ws in boxes]
    owned = [0] * k
    pieces: dict[int, list[tuple[int, Box]]] = {}
    for nbytes, t, box, ws in sorted(holders, key=lambda h: (-h[0], h[1], h[2])):
        w = ws[0] if len(ws) == 1 else min(ws, key=owned.__getitem__)    # the fewest bytes owned, then the
        owned[w] += nbytes                                                 # lowest device (ws increase)
        pieces.setdefault(t, []).append((w, box))
    return {t: tuple(sorted(p)) for t, p in pieces.items()}


def _held(shape: tuple[int, ...], dims: Sequence[int | None], factors: Sequence[int], coords: np.ndarray
          ) -> list[tuple[int, Box, list[int]]]:
    """Every distinct box of a tensor of ``shape`` split along ``dims``: its elements, the box and the devices
    that hold it (increasing)."""
    # a device's box follows from its coordinates at the cuts that split t: devices alike there hold it alike
    code = np.zeros(len(coords), dtype=np.int64)
    for j, d in enumerate(dims):
        if d is not None:
            code = code * factors[j] + coords[:, j]
    _, first, which = np.unique(code, return_index=True, return_inverse=True)
    boxes: dict[Box, list[np.ndarray]] = {}
    for u, w in enumerate(first.tolist()):
        boxes.setdefault(held_box(shape, dims, factors, w), []).append(np.flatnonzero(which == u))
    return [(math.prod(b - a for a, b in box), box, np.sort(np.concatenate(ws)).tolist()) for box, ws in boxes.items()]


def owned_fractions(graph: Graph, pieces: Mapping[int, Sequence[tuple[int, Box]]], k: int) -> tuple[float, ...]:
    """Per device of ``k``, the fraction of the parameters' elements it holds as an owner, ``pieces`` the
    parameters' pieces (:func:`parameter_pieces`)."""
    total = sum(t.size for t in graph.tensors if t.role is Role.PARAM)
    held = [0] * k
    for owned in pieces.values():
        for w, box in owned:
            held[w] += math.prod(b - a for a, b in box)
    return tuple(h / total if total else 1.0 for h in held)
