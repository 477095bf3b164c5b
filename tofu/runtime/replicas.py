"""Parameter replicas: a parameter shard that another device reads whole, bound there as a copy of its own.

Input: a :class:`~tofu.rewrite.PartitionedGraph`. The rewriter routes a held piece to each device that reads all
of it (:meth:`tofu.rewrite.comm.Fabric.piece`): an ``identity`` on the holder, which MXNet follows by a
``_CrossDeviceCopy`` forward, and back in the backward pass a copy of the reader's gradient, a
``_backward_copy`` and the holder's sum of the contributions: about four engine ops per parameter and reader,
each scheduled by MXNet's engine (docs/runtime.md, "A lean partitioned graph"). Output: the same graph with each
such route of a parameter shard replaced by a variable on the reader (:func:`replicate`), and the exchange that
keeps the replicas equal to their shard (:class:`Exchange`), as MXNet's own data parallelism keeps its executors'
weights (``Module`` through its kvstore):

* after the backward pass each replica's gradient is copied to the shard's device and added to the shard's
  (the contributions MXNet would have summed there);
* the shard is updated there;
* the updated shard is copied to each replica (what the route would copy at the next forward pass).

The same bytes cross, per iteration and direction, as through the routes: a replica's gradient is sent back only
when the backward pass gives it one (:func:`tofu.graph.gradients.contributions`, the rule MXNet's gradient pass
follows and the plan counts). To make the exchange a few engine ops, not a few per parameter, the shards of a
device are views into one flat buffer (weights, gradients, momentum), grouped by the devices that replicate them;
a group's replicas on a device are views into one flat buffer there, so one copy moves a group's gradients (or
weights), one ``add_n`` sums them and one ``sgd_mom_update`` updates every shard of a device.
"""
from __future__ import annotations

import itertools
import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import mxnet as mx
import numpy as np

from tofu.graph.gradients import contributions, gives_gradient, needing

_ROUTE_OPS = frozenset({"_copy", "identity"})


@dataclass(frozen=True)
class Replica:
    """A copy of the parameter shard ``of`` (a :class:`~tofu.rewrite.ShardVar`'s name) bound on ``device``;
    ``gradient``: whether the backward pass gives it one (else nothing is sent back for it)."""

    name: str
    of: str
    device: int
    gradient: bool


@dataclass(frozen=True)
class _Node:
    op: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


def replicate(symbol: mx.sym.Symbol, params: Mapping[str, int]) -> tuple[mx.sym.Symbol, tuple[Replica, ...]]:
    """``symbol`` with every route of a whole parameter shard to another device (an ``identity`` of the shard's
    variable whose ``__tofu_to__`` names that device) replaced by a variable there; ``params``: the shard
    variables' devices. Returns the symbol and its replicas (none: ``symbol`` itself)."""
    doc = json.loads(symbol.tojson())
    nodes = doc["nodes"]
    replicas: list[tuple[str, str, int, int]] = []          # name, shard, device, node index
    for i, node in enumerate(nodes):
        if node["op"] not in _ROUTE_OPS or len(node["inputs"]) != 1:
            continue
        src = nodes[node["inputs"][0][0]]
        to = node.get("attrs", {}).get("__tofu_to__", "")
        if src["op"] != "null" or src["name"] not in params or not to.startswith("dev"):
            continue
        device = int(to[3:])
        if device == params[src["name"]]:
            continue
        name = f"{src['name']}>dev{device}"
        attrs = {k: v for k, v in src.get("attrs", {}).items() if k != "__ctx_group__"}
        nodes[i] = {"op": "null", "name": name, "attrs": {**attrs, "__ctx_group__": f"dev{device}"}, "inputs": []}
        replicas.append((name, src["name"], device, i))
    if not replicas:
        return symbol, ()
    doc["arg_nodes"] = [i for i, n in enumerate(nodes) if n["op"] == "null"]
    reached = _gradient_reaches(doc, {name for name, *_ in replicas} | set(params))
    out = mx.sym.load_json(json.dumps(doc))
    return out, tuple(Replica(name, of, device, i in reached) for name, of, device, i in replicas)


def _gradient_reaches(doc: Mapping, params: set[str]) -> set[int]:
    """The indices of the variable nodes of ``params`` that MXNet's backward pass gives a gradient (one
    contribution or more: :func:`~tofu.graph.gradients.contributions` over the symbol's nodes, one value per
    node output, numbered as the JSON's ``node_row_ptr`` numbers them)."""
    nodes, first = doc["nodes"], doc["node_row_ptr"]
    ops = [_Node(n["op"], tuple(first[j] + k for j, k, *_ in n["inputs"]), tuple(range(first[i], first[i + 1])))
           for i, n in enumerate(nodes)]
    attrs = [n.get("attrs", {}) for n in nodes]
    needs = [False] * first[-1]
    for i, node in enumerate(nodes):
        if node["op"] == "null":
            needs[first[i]] = node["name"] in params
    live = [i for i, n in enumerate(nodes) if n["op"] != "null"]
    needs = needing(ops, live, needs, lambda i, p: gives_gradient(nodes[i]["op"], True, p, attrs[i]))
    counts, _ = contributions(ops, live, needs,
                              lambda i, p, arrives: gives_gradient(nodes[i]["op"], arrives, p, attrs[i]))
    return {i for i, n in enumerate(nodes) if n["op"] == "null" and counts[first[i]]}


@dataclass(frozen=True)
class Shard:
    """A parameter shard the exchange holds: its variable's name, device, shape and type, and its learning-rate
    multiplier (MXNet's ``__lr_mult__``)."""

    name: str
    device: int
    shape: tuple[int, ...]
    dtype: np.dtype
    lr_mult: float = 1.0


@dataclass(frozen=True)
class Sent:
    """One copy the exchange makes each iteration: what it carries, its bytes, and its direction (``backward``:
    gradients to the shards' device; else updated weights to the replicas)."""

    name: str
    shape: tuple[int, ...]
    nbytes: int
    backward: bool


@dataclass(frozen=True)
class Group:
    """Shards of one device replicated on the same devices (``devices``), sending gradients back from the same
    ones (``gradients``), all read on their own device or none (``local``: the backward pass writes their own
    gradient), of one type: they are laid out one after another in the device's flat buffers, and cross as one
    flat copy per replica device."""

    shards: tuple[Shard, ...]
    local: bool
    devices: tuple[int, ...]
    gradients: tuple[int, ...]

    @property
    def device(self) -> int:
        return self.shards[0].device

    @property
    def elements(self) -> int:
        return sum(math.prod(s.shape) for s in self.shards)


def exchange_groups(shards: Sequence[Shard], replicas: Sequence[Replica],
                    local: Collection[str]) -> tuple[Group, ...]:
    """Every shard in one :class:`Group`, in the order of the flat buffers: by device, type, ``local`` (the shards
    read on their own device) and the devices of their replicas, then as given. Shared by :class:`Exchange` and the
    simulator's program (:mod:`tofu.sim.program`), so that both make the same copies."""
    of: dict[str, list[Replica]] = {}
    for r in replicas:
        of.setdefault(r.of, []).append(r)

    def key(s: Shard):
        rs = of.get(s.name, ())
        return (s.device, s.dtype.str, s.name in local, tuple(sorted({r.device for r in rs})),
                tuple(sorted({r.device for r in rs if r.gradient})))
    groups = []
    for k, run in itertools.groupby(sorted(shards, key=key), key=key):
        groups.append(Group(tuple(run), k[2], k[3], k[4]))
    return tuple(groups)


class _Flat:
    """A group's place in the exchange: its run of the device's flat buffers, and its replicas' flat buffers."""

    def __init__(self, group: Group, begin: int, flats, contexts):
        dtype, size = group.shards[0].dtype, group.elements
        self.group, self.device, self.local = group, group.device, group.local
        self.devices, self.gradients = group.devices, group.gradients
        self.weight, self.grad = (f[self.device, dtype][begin:begin + size] for f in flats[:2])
        self.replica_weight = {d: mx.nd.zeros((size,), ctx=contexts[d], dtype=dtype) for d in self.devices}
        self.replica_grad = {d: mx.nd.zeros((size,), ctx=contexts[d], dtype=dtype) for d in self.gradients}
        # one buffer on the shard's device receives the replicas' gradients in turn (a buffer per replica device
        # would be k - 2 more copies of the group resident there)
        self.received = mx.nd.zeros((size,), ctx=contexts[self.device], dtype=dtype) if self.gradients else None
        label = "+".join(s.name for s in group.shards)
        nbytes = size * np.dtype(dtype).itemsize
        self.sent = tuple(Sent(f"{label}>dev{d}", (size,), nbytes, True) for d in self.gradients) + \
            tuple(Sent(f"{label}>dev{d}", (size,), nbytes, False) for d in self.devices)


class Exchange:
    """The flat buffers of the parameter shards and their replicas, and the copies that keep them equal (module
    docstring). ``shards``: every parameter shard the runtime updates; ``replicas``: :func:`replicate`'s;
    ``local``: the shards the symbol reads on their own device (the others get their gradient from replicas only).
    :meth:`buffers` gives MXNet's ``simple_bind`` the views to bind (its ``shared_buffer``: an argument and its
    gradient, ``grad of NAME``, are bound on the memory given under those names)."""

    def __init__(self, shards: Sequence[Shard], replicas: Sequence[Replica], local: set[str],
                 contexts: Sequence[mx.Context]):
        of: dict[str, list[Replica]] = {}
        for r in replicas:
            of.setdefault(r.of, []).append(r)
        groups = exchange_groups(shards, replicas, local)
        sizes: dict[tuple[int, np.dtype], int] = {}
        for g in groups:
            at = (g.device, g.shards[0].dtype)
            sizes[at] = sizes.get(at, 0) + g.elements
        self.flats = tuple({(d, t): mx.nd.zeros((n,), ctx=contexts[d], dtype=t) for (d, t), n in sizes.items()}
                           for _ in range(3))               # weights, gradients, momentum, per (device, type)
        self.weights: dict[str, mx.nd.NDArray] = {}
        self.grads: dict[str, mx.nd.NDArray] = {}
        self.moms: dict[str, mx.nd.NDArray] = {}
        self._buffers: dict[str, mx.nd.NDArray] = {}
        self.groups: list[_Flat] = []
        offsets = dict.fromkeys(sizes, 0)
        # flats holding a shard whose update is scaled (__lr_mult__) are updated shard by shard
        self._scaled = {(s.device, s.dtype) for s in shards if s.lr_mult != 1.0}
        self._one_by_one = tuple((s.name, s.lr_mult) for s in shards if (s.device, s.dtype) in self._scaled)
        for g in groups:
            at = (g.device, g.shards[0].dtype)
            flat = _Flat(g, offsets[at], self.flats, contexts)
            begin, inner = offsets[at], 0
            for shard in g.shards:
                n = math.prod(shard.shape)
                for store, buffer in zip((self.weights, self.grads, self.moms), self.flats):
                    store[shard.name] = buffer[at][begin + inner:begin + inner + n].reshape(shard.shape)
                for r in of.get(shard.name, ()):
                    self._buffers[r.name] = flat.replica_weight[r.device][inner:inner + n].reshape(shard.shape)
                    if r.gradient:
                        self._buffers[f"grad of {r.name}"] = \
                            flat.replica_grad[r.device][inner:inner + n].reshape(shard.shape)
                inner += n
            offsets[at] += g.elements
            if g.devices:
                self.groups.append(flat)

    def __contains__(self, name: str) -> bool:
        return name in self.weights

    def buffers(self, arguments: set[str]) -> dict[str, mx.nd.NDArray]:
        """The views ``simple_bind`` binds the symbol's ``arguments`` (and their gradients) on."""
        own = {n: w for n, w in self.weights.items() if n in arguments}
        own.update({f"grad of {n}": g for n, g in self.grads.items() if n in arguments})
        return {**own, **self._buffers}

    @property
    def sent(self) -> tuple[Sent, ...]:
        """Every copy of one iteration, gradients back first."""
        return tuple(s for g in self.groups for s in g.sent if s.backward) + \
            tuple(s for g in self.groups for s in g.sent if not s.backward)

    def reduce(self) -> None:
        """Each replica's gradient copied to its shard's device and added to the shard's own (after ``backward``;
        a shard its device does not read has only its replicas'), one replica after another through one buffer."""
        for g in self.groups:
            for i, d in enumerate(g.gradients):
                if i == 0 and not g.local:      # the first is the shard's gradient
                    g.replica_grad[d].copyto(g.grad)
                    continue
                g.replica_grad[d].copyto(g.received)
                mx.nd.elemwise_add(g.grad, g.received, out=g.grad)

    def update(self, lr: float, momentum: float, rescale_grad: float = 1.0) -> None:
        """SGD with momentum on every shard: one ``sgd_mom_update`` per device's flat buffers, or per shard on a
        device holding a shard whose rate is scaled (``lr`` times its ``lr_mult``)."""
        weights, grads, moms = self.flats
        for at, w in weights.items():
            if at not in self._scaled:
                mx.nd.sgd_mom_update(w, grads[at], moms[at], lr=lr, momentum=momentum, rescale_grad=rescale_grad,
                                     out=w)
        for name, mult in self._one_by_one:
            w = self.weights[name]
            mx.nd.sgd_mom_update(w, self.grads[name], self.moms[name], lr=lr * mult, momentum=momentum,
                                 rescale_grad=rescale_grad, out=w)

    def broadcast(self) -> None:
        """Each shard's (updated) weights copied to its replicas."""
        for g in self.groups:
            for d in g.devices:
                g.weight.copyto(g.replica_weight[d])
