"""MXNet's fused recurrent op (``RNN``: Gluon's ``rnn.LSTM``, ``rnn.GRU`` and ``rnn.RNN`` layers, hybridized and
exported) unrolled into one step of ops per layer, direction and time step, before import.

Why: MXNet 1.9.1's CPU kernels of ``RNN`` are wrong without oneDNN, which tofu turns off (tofu/__init__.py): on
the cases of ``tests/graph/test_lower_rnn.py`` its native GRU and vanilla-RNN kernels differ from the numpy
reference (:func:`forward`) and from MXNet's own oneDNN kernels, which agree with it, and its native LSTM kernel
stops on a failed check. Unrolled, the layer runs on kernels tofu describes and checks (FullyConnected,
SliceChannel, Activation, element-wise ops) and partitions as tofu's own stacked LSTMs do: each step carries its
layer and time step (``__tofu_layer__``, ``__tofu_step__``), so the search ties a layer's steps and reads its
weights once, and a step splits along the batch or the hidden units.

Layout of the fused op (MXNet 1.9.1, ``src/operator/rnn-inl.h``): data (T, N, I), time-major; ``parameters``
one flat vector, first every weight, layer by layer and direction by direction, each W_x (G H, I_l) then W_h
(G H, H), then every bias in the same order, b_x (G H) then b_h (G H); G gates (lstm 4: i, f, g, o; gru 3: r,
z, n; rnn_tanh and rnn_relu 1); I_l = I for the first layer, D H after (D = 2 when bidirectional, the reverse
direction's output after the forward's); ``state`` (L D, N, H) and for lstm ``state_cell`` alike. Outputs:
(T, N, D H), and with ``state_outputs`` the last hidden states (L D, N, H) and for lstm the last cells. Where the
parameters are Gluon's (``_rnn_param_concat`` of each weight reshaped to a vector), the weights are read
directly; otherwise they are sliced out of the vector.

Dropout between layers (``p`` > 0: the fused op drops each element of every layer's output but the last's, at
every time step, in training) becomes a ``Dropout`` of each step's output of those layers, tied over the steps
(``__tofu_layer__`` ``<name>_l<layer>_drop``): the same distribution of masks, drawn by MXNet's Dropout. Projections,
cell clipping and sequence lengths are refused.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import mxnet as mx
import numpy as np

from tofu.errors import GraphImportError

Shape = tuple[int, ...]
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
_TRUE = ("true", "1")


def has_fused_rnn(doc: dict) -> bool:
    return any(n["op"] == "RNN" for n in doc["nodes"])


def lower_rnn(doc: dict, entry_shape: Callable[[int, int], Shape]) -> dict:
    """``doc`` (a symbol's JSON) with every ``RNN`` node unrolled; ``entry_shape(node, output)``: the shape of an
    entry of ``doc``.

    Raises:
        GraphImportError: an RNN node uses what is not described (projection, clipping, lengths).
    """
    nodes = doc["nodes"]
    new: list[dict] = []
    where: dict[tuple[int, int], list[int]] = {}      # (old node, output) -> [new node, output]
    for j, jn in enumerate(nodes):
        if jn["op"] != "RNN":
            where[(j, -1)] = [len(new), 0]
            new.append({**jn, "inputs": [_at(where, e) for e in jn["inputs"]]})
            continue
        a = _attrs(jn)
        data = entry_shape(*jn["inputs"][0][:2])
        # an initial state's rows are sliced, which infers no shape backwards: the variables it is made from keep
        # theirs (zeros made by the graph carry their own shape, which tofu.graph.mxnet_import pins first)
        for e in jn["inputs"][2:]:
            _pin_shapes(nodes, new, where, e[0], entry_shape)
        inputs = [_at(where, e) for e in jn["inputs"]]
        weights = _gluon_weights(nodes, jn["inputs"][1], entry_shape)
        if weights is not None and [entry_shape(*e[:2]) for e in weights] != _layout(a, data[2]):
            weights = None
        if weights is not None:     # read Gluon's weights themselves, not their concatenation
            inputs[1:2] = [_at(where, e) for e in weights]
        else:       # the vector is sliced, which infers no shape backwards: its variables keep theirs
            _pin_shapes(nodes, new, where, jn["inputs"][1][0], entry_shape)
        sub = json.loads(_unrolled(jn["name"], a, data, weights is not None).tojson())
        placed: list[list[int]] = []
        for sn in sub["nodes"]:
            if sn["op"] == "null":      # a placeholder "in{i}": the RNN's i-th input entry
                placed.append(inputs[int(sn["name"][2:])])
                continue
            placed.append([len(new), 0])
            new.append({**sn, "inputs": [[placed[i][0], placed[i][1] + o, 0] for i, o, *_ in sn["inputs"]]})
        for k, (i, o, *_) in enumerate(sub["heads"]):
            where[(j, k)] = [placed[i][0], placed[i][1] + o]
    heads = [_at(where, e) for e in doc["heads"]]
    out = {key: value for key, value in doc.items() if key not in ("nodes", "heads", "arg_nodes", "node_row_ptr")}
    return {**out, "nodes": new, "arg_nodes": [i for i, n in enumerate(new) if n["op"] == "null"], "heads": heads}


def _pin_shapes(nodes: list[dict], new: list[dict], where: dict, node: int, entry_shape) -> None:
    """Gives every variable ``node`` is computed from its inferred shape (``__shape__``), in ``new``."""
    stack, seen = [node], set()
    while stack:
        j = stack.pop()
        if j in seen:
            continue
        seen.add(j)
        if nodes[j]["op"] == "null":
            made = new[where[(j, -1)][0]]
            made["attrs"] = {**made.get("attrs", {}), "__shape__": str(entry_shape(j, 0))}
        stack.extend(e[0] for e in nodes[j]["inputs"])


def _at(where: dict, entry: Sequence[int]) -> list[int]:
    node, output = entry[0], entry[1]
    hit = where.get((node, output))
    if hit is not None:
        return [hit[0], hit[1], 0]
    base = where[(node, -1)]
    return [base[0], output, 0]


def _attrs(jn: dict) -> dict:
    raw = jn.get("attrs", jn.get("attr", {})) or {}
    name = jn["name"]
    mode = raw.get("mode", "")
    if mode not in GATES:
        raise GraphImportError(f"RNN node '{name}': mode '{mode}' is not one of {', '.join(GATES)}")
    p = float(raw.get("p", "0") or 0)
    if not 0 <= p < 1:
        raise GraphImportError(f"RNN node '{name}': dropout p = {p} is not in [0, 1)")
    refused = [what for what, on in (("projection_size", raw.get("projection_size", "None") != "None"),
                                     ("lstm_state_clip", raw.get("lstm_state_clip_min", "None") != "None"
                                      or raw.get("lstm_state_clip_max", "None") != "None"),
                                     ("use_sequence_length", raw.get("use_sequence_length", "False").lower() in _TRUE))
               if on]
    if refused:
        raise GraphImportError(f"RNN node '{name}': {', '.join(refused)} is not supported (tofu unrolls the plain "
                               f"fused recurrence only)")
    return {"mode": mode, "H": int(raw["state_size"]), "L": int(raw["num_layers"]), "p": p,
            "D": 2 if raw.get("bidirectional", "False").lower() in _TRUE else 1,
            "states": raw.get("state_outputs", "False").lower() in _TRUE}


def _sizes(a: dict, n_in: int) -> list[tuple[Shape, Shape, Shape, Shape]]:
    """Per (layer, direction): the shapes of W_x, W_h, b_x, b_h."""
    gh, H = GATES[a["mode"]] * a["H"], a["H"]
    return [((gh, n_in if layer == 0 else a["D"] * H), (gh, H), (gh,), (gh,))
            for layer in range(a["L"]) for _ in range(a["D"])]


def _layout(a: dict, n_in: int) -> list[Shape]:
    """The shapes of the parameters in the order of the flat vector: every W_x, W_h, then every b_x, b_h."""
    sizes = _sizes(a, n_in)
    return [s for wx, wh, _, _ in sizes for s in (wx, wh)] + [s for _, _, bx, bh in sizes for s in (bx, bh)]


def _gluon_weights(nodes: list[dict], entry: Sequence[int], entry_shape) -> list[list[int]] | None:
    """The variables whose concatenation the RNN's parameters are (Gluon: ``_rnn_param_concat`` of each weight
    reshaped to a vector); None where the parameters are anything else."""
    jn = nodes[entry[0]]
    raw = jn.get("attrs", jn.get("attr", {})) or {}
    if jn["op"] not in ("_rnn_param_concat", "Concat") or raw.get("dim", "1") != "0":
        return None
    out = []
    for e in jn["inputs"]:
        src = nodes[e[0]]
        if src["op"] != "Reshape" or len(entry_shape(e[0], e[1])) != 1 or src["inputs"][0][1] != 0 \
                or nodes[src["inputs"][0][0]]["op"] != "null":
            return None
        out.append(src["inputs"][0])
    return out


def _unrolled(name: str, a: dict, data: Shape, direct: bool) -> mx.sym.Symbol:
    """The unrolled layer over placeholders ``in{i}``: the data, then the parameters (the variables of
    :func:`_layout`'s order when ``direct``, else the flat vector), then the states."""
    steps, _, n_in = data
    H, L, D, mode = a["H"], a["L"], a["D"], a["mode"]
    n_params = 4 * L * D if direct else 1
    if direct:
        flat = [mx.sym.Variable(f"in{1 + i}") for i in range(n_params)]
        ws = [(flat[2 * j], flat[2 * j + 1]) for j in range(L * D)]
        bs = [(flat[2 * L * D + 2 * j], flat[2 * L * D + 2 * j + 1]) for j in range(L * D)]
    else:
        params, at, ws, bs = mx.sym.Variable("in1"), 0, [], []
        pieces = []
        for shape in _layout(a, n_in):
            n = int(np.prod(shape))
            piece = mx.sym.slice(params, begin=(at,), end=(at + n,), name=f"{name}_param{len(pieces)}")
            pieces.append(mx.sym.Reshape(piece, shape=shape, name=f"{name}_param{len(pieces)}_shape")
                          if len(shape) > 1 else piece)
            at += n
        ws = [(pieces[2 * j], pieces[2 * j + 1]) for j in range(L * D)]
        bs = [(pieces[2 * L * D + 2 * j], pieces[2 * L * D + 2 * j + 1]) for j in range(L * D)]
    first_state = 1 + n_params
    h0 = _rows(mx.sym.Variable(f"in{first_state}"), L * D, f"{name}_h0")
    c0 = _rows(mx.sym.Variable(f"in{first_state + 1}"), L * D, f"{name}_c0") if mode == "lstm" else None
    xs = _rows(mx.sym.Variable("in0"), steps, f"{name}_steps")
    hy, cy = [], []
    for layer in range(L):
        outs = []
        for d in range(D):
            j = layer * D + d
            tag = f"{name}_l{layer}{'r' if d else ''}"
            h, c, out = h0[j], (c0[j] if c0 is not None else None), [None] * steps
            for t in (range(steps) if d == 0 else reversed(range(steps))):
                with mx.AttrScope(__tofu_layer__=tag, __tofu_step__=str(t)):
                    h, c = _step(mode, f"{tag}_t{t}", xs[t], h, c, *ws[j], *bs[j], GATES[mode] * H)
                out[t] = h
            hy.append(h)
            cy.append(c)
            outs.append(out)
        xs = outs[0] if D == 1 else [mx.sym.Concat(f, b, dim=1, name=f"{name}_l{layer}_t{t}_both")
                                     for t, (f, b) in enumerate(zip(*outs))]
        if a["p"] > 0 and layer < L - 1:       # the next layer reads this one's output through dropout
            drop = []
            for t, x in enumerate(xs):
                with mx.AttrScope(__tofu_layer__=f"{name}_l{layer}_drop", __tofu_step__=str(t)):
                    drop.append(mx.sym.Dropout(x, p=a["p"], name=f"{name}_l{layer}_t{t}_drop"))
            xs = drop
    heads = [mx.sym.stack(*xs, axis=0, name=f"{name}_out")]
    if a["states"]:
        heads.append(mx.sym.stack(*hy, axis=0, name=f"{name}_hy"))
        if mode == "lstm":
            heads.append(mx.sym.stack(*cy, axis=0, name=f"{name}_cy"))
    return mx.sym.Group(heads)


def _rows(x: mx.sym.Symbol, n: int, name: str) -> list[mx.sym.Symbol]:
    """x[0], ..., x[n - 1] along the first axis, that axis removed."""
    if n == 1:
        return [mx.sym.squeeze(x, axis=0, name=name)]
    parts = mx.sym.SliceChannel(x, num_outputs=n, axis=0, squeeze_axis=True, name=name)
    return [parts[i] for i in range(n)]


def _step(mode: str, p: str, x, h, c, wx, wh, bx, bh, gh: int):
    """One time step of one direction (the gates as :func:`forward` computes them)."""
    i2h = mx.sym.FullyConnected(x, wx, bx, num_hidden=gh, name=f"{p}_i2h")
    h2h = mx.sym.FullyConnected(h, wh, bh, num_hidden=gh, name=f"{p}_h2h")
    if mode == "lstm":
        g = mx.sym.SliceChannel(mx.sym.elemwise_add(i2h, h2h, name=f"{p}_sum"), num_outputs=4, axis=1,
                                name=f"{p}_gates")
        i, f = mx.sym.sigmoid(g[0], name=f"{p}_i"), mx.sym.sigmoid(g[1], name=f"{p}_f")
        new = mx.sym.tanh(g[2], name=f"{p}_g")
        c = mx.sym.elemwise_add(mx.sym.elemwise_mul(f, c, name=f"{p}_fc"), mx.sym.elemwise_mul(i, new, name=f"{p}_ig"),
                                name=f"{p}_c")
        o = mx.sym.sigmoid(g[3], name=f"{p}_o")
        return mx.sym.elemwise_mul(o, mx.sym.tanh(c, name=f"{p}_tc"), name=f"{p}_h"), c
    if mode == "gru":
        a = mx.sym.SliceChannel(i2h, num_outputs=3, axis=1, name=f"{p}_xgates")
        b = mx.sym.SliceChannel(h2h, num_outputs=3, axis=1, name=f"{p}_hgates")
        r = mx.sym.sigmoid(mx.sym.elemwise_add(a[0], b[0], name=f"{p}_rsum"), name=f"{p}_r")
        z = mx.sym.sigmoid(mx.sym.elemwise_add(a[1], b[1], name=f"{p}_zsum"), name=f"{p}_z")
        n = mx.sym.tanh(mx.sym.elemwise_add(a[2], mx.sym.elemwise_mul(r, b[2], name=f"{p}_rn"), name=f"{p}_nsum"),
                        name=f"{p}_n")
        # h' = (1 - z) n + z h = n + z (h - n)
        keep = mx.sym.elemwise_mul(z, mx.sym.elemwise_sub(h, n, name=f"{p}_hn"), name=f"{p}_zhn")
        return mx.sym.elemwise_add(n, keep, name=f"{p}_h"), None
    act = "tanh" if mode == "rnn_tanh" else "relu"
    return mx.sym.Activation(mx.sym.elemwise_add(i2h, h2h, name=f"{p}_sum"), act_type=act, name=f"{p}_h"), None


def forward(mode: str, layers: int, bidirectional: bool, x: np.ndarray, w: np.ndarray, h0: np.ndarray,
            c0: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The fused op in numpy, the reference of the tests: x (T, N, I), w the flat parameters, h0 and c0
    (L D, N, H). Returns the output (T, N, D H), the last hidden states and (lstm) cells (L D, N, H)."""
    a = {"mode": mode, "H": h0.shape[2], "L": layers, "D": 2 if bidirectional else 1}
    at, mats = 0, []
    for shape in _layout(a, x.shape[2]):
        n = int(np.prod(shape))
        mats.append(w[at:at + n].reshape(shape))
        at += n
    LD = layers * a["D"]
    hy, cy, seq = np.empty_like(h0), np.empty_like(h0), x
    for layer in range(layers):
        outs = []
        for d in range(a["D"]):
            j = layer * a["D"] + d
            wx, wh, bx, bh = mats[2 * j], mats[2 * j + 1], mats[2 * LD + 2 * j], mats[2 * LD + 2 * j + 1]
            h, c = h0[j], (c0[j] if c0 is not None else None)
            out = np.empty((x.shape[0], x.shape[1], a["H"]))
            for t in (range(x.shape[0]) if d == 0 else reversed(range(x.shape[0]))):
                h, c = _np_step(mode, seq[t] @ wx.T + bx, h @ wh.T + bh, h, c)
                out[t] = h
            hy[j] = h
            if c is not None:
                cy[j] = c
            outs.append(out)
        seq = np.concatenate(outs, axis=2)
    return seq, hy, (cy if mode == "lstm" else None)


def _np_step(mode: str, a: np.ndarray, b: np.ndarray, h: np.ndarray, c: np.ndarray | None):
    def sigmoid(v):
        return 1.0 / (1.0 + np.exp(-v))
    if mode == "lstm":
        i, f, g, o = np.split(a + b, 4, axis=1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        return sigmoid(o) * np.tanh(c), c
    if mode == "gru":
        (ar, az, an), (br, bz, bn) = np.split(a, 3, axis=1), np.split(b, 3, axis=1)
        r, z = sigmoid(ar + br), sigmoid(az + bz)
        n = np.tanh(an + r * bn)
        return (1.0 - z) * n + z * h, None
    return (np.tanh(a + b) if mode == "rnn_tanh" else np.maximum(a + b, 0.0)), None
