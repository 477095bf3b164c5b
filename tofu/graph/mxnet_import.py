"""Graph import: MXNet Symbol (or symbol JSON file) + input shapes -> :class:`tofu.graph.ir.Graph`.

The only module that reads MXNet graphs. Shapes and dtypes come from MXNet's own ``infer_shape`` /
``infer_type`` over the internals of the symbol, so the IR agrees with MXNet entry by entry.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import mxnet as mx
import numpy as np

from tofu.errors import GraphImportError, InputShapeError
from tofu.graph.attrs import Attrs
from tofu.graph.ir import LOSS_OPS, Graph, Node, Role, Shape, TensorEntry
from tofu.graph.lower_rnn import has_fused_rnn, lower_rnn
from tofu.graph.lower_syncbn import has_sync_batchnorm, lower_sync_batchnorm
from tofu.graph.mxnet_log import quiet
from tofu.graph.single_op import first_line, infer_graph_shapes, num_visible_outputs

LAYER_ATTR = "__tofu_layer__"
STEP_ATTR = "__tofu_step__"
_RNN_NAME = re.compile(r"^(?P<layer>.+?)_?t(?P<step>\d+)_")  # mx.rnn cells: 'lstm_l0_t3_i2h'


def load_symbol_file(path: str | Path) -> mx.sym.Symbol:
    """Reads a symbol JSON file (as written by ``Symbol.save``), with a one-line error if it is not one.

    The document is checked before MXNet parses it: MXNet follows node and output indices without bounds
    checks, so a dangling one reads past its arrays (garbage errors or a segfault).

    Raises:
        GraphImportError: unreadable, not UTF-8, not JSON, not a well-formed symbol, or rejected by MXNet.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        doc = json.loads(text)
    except OSError as e:
        raise GraphImportError(f"cannot read symbol file '{path}': {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise GraphImportError(f"'{path}' is not UTF-8 text (byte {e.start}): not a symbol JSON file") from None
    except json.JSONDecodeError as e:
        raise GraphImportError(f"'{path}' is not valid JSON: {e.msg} at line {e.lineno}") from None
    except RecursionError:
        raise GraphImportError(f"'{path}' is not a symbol JSON file: nested too deeply") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list) or "heads" not in doc:
        raise GraphImportError(f"'{path}' is not an MXNet symbol file (no 'nodes' and 'heads')")
    _check_document(doc, str(path))
    try:
        with quiet():       # a file without 'mxnet_version' is upgraded as it loads, and MXNet logs that it is
            return mx.sym.load_json(text)
    except mx.base.MXNetError as e:
        raise GraphImportError(f"MXNet cannot load '{path}': {first_line(e)}") from None


def numpy_semantics(path: str | Path) -> bool:
    """Whether a symbol file was written under MXNet's numpy semantics (``npx.set_np()``: its attributes say
    ``is_np_shape``). Its ``.params`` files are saved in them, and MXNet loads a file only in the semantics it
    was saved in: what tofu writes for such a model is saved in them too. False for what is not a symbol file."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    flag = doc.get("attrs", {}).get("is_np_shape") if isinstance(doc, dict) and isinstance(doc.get("attrs"), dict) \
        else None
    return isinstance(flag, list) and len(flag) == 2 and str(flag[1]) not in ("0", "False")


def _check_document(doc: dict, path: str) -> None:
    """Every node well-formed, every input and head naming an earlier node and an output that node shows."""
    outputs: list[int] = []       # visible outputs of each node so far
    names: list[str] = []
    for j, jn in enumerate(doc["nodes"]):
        if not (isinstance(jn, dict) and isinstance(jn.get("op"), str) and isinstance(jn.get("name"), str)
                and isinstance(jn.get("inputs", []), list)):
            name = f" ('{jn['name']}')" if isinstance(jn, dict) and isinstance(jn.get("name"), str) else ""
            raise GraphImportError(f"'{path}': node {j}{name} is not an object with a string 'op' and 'name' "
                                   "and a list of 'inputs'")
        # MXNet 0.8 wrote an operator's parameters under 'param' and other attributes under 'attr'; its loader
        # upgrades both into 'attrs'
        parts = [jn.get(key) or {} for key in ("param", "attr", "attrs")]
        if not all(isinstance(part, dict) and all(isinstance(v, str) for v in part.values()) for part in parts):
            raise GraphImportError(f"'{path}': node '{jn['name']}' has attributes that are not strings")
        raw = {k: v for part in parts for k, v in part.items()}
        for entry in jn.get("inputs", []):
            _check_entry(entry, j, outputs, names, f"node '{jn['name']}'", path)
        if jn["op"] == "null":
            outputs.append(1)
        else:
            try:
                outputs.append(num_visible_outputs(jn["op"], raw, len(jn.get("inputs", []))))
            except GraphImportError as e:
                raise GraphImportError(f"MXNet cannot load '{path}': node '{jn['name']}': {e}") from None
        names.append(jn["name"])
    heads = doc["heads"]
    if not isinstance(heads, list) or not heads:
        raise GraphImportError(f"'{path}': 'heads' names no output")
    for entry in heads:
        _check_entry(entry, len(outputs), outputs, names, "a head", path)


def _check_entry(entry, before: int, outputs: Sequence[int], names: Sequence[str], who: str, path: str) -> None:
    """``entry`` = [node, output(, version)] names output ``output`` of a node with index below ``before``."""
    if not (isinstance(entry, list) and len(entry) in (2, 3)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in entry)):
        raise GraphImportError(f"'{path}': {who} has an input {entry!r} that is not [node, output, version]")
    node, index = entry[0], entry[1]
    if not 0 <= node < before:
        raise GraphImportError(f"'{path}': {who} reads node {node}, which is not an earlier node "
                               "(the graph has a cycle or is not in topological order)")
    if not 0 <= index < outputs[node]:
        raise GraphImportError(f"'{path}': {who} reads output {index} of node '{names[node]}', which has "
                               f"{outputs[node]} visible output{'s' if outputs[node] != 1 else ''}")


def parse_shape(text: str) -> tuple[str, Shape]:
    """Parses ``NAME=D1,D2,...`` (the CLI's ``--shape``)."""
    name, sep, dims = text.partition("=")
    try:
        shape = tuple(int(d) for d in dims.split(","))
    except ValueError:
        shape = ()
    if not sep or not name or not shape or min(shape) <= 0:
        raise InputShapeError(f"bad shape '{text}': expected NAME=D1,D2,... with positive integers")
    _check_extents(name, shape)
    return name, shape


def declared_shapes(symbol: mx.sym.Symbol) -> dict[str, Shape]:
    """The shapes a symbol's variables declare in full (``mx.sym.var(name, shape=(8, 6))`` writes ``__shape__``; a
    declared 0, an extent left to inference, is not in full), which MXNet's shape inference uses as hints. Named in
    the error that asks for --shape, not taken as inputs' shapes: which variables are inputs is the user's to say
    (a declared weight would become an input, not trained).

    Raises:
        InputShapeError: a declared shape that is not a tuple of integers, or one past MXNet's extents.
    """
    out = {}
    attrs = symbol.attr_dict()
    for name in symbol.list_inputs():
        text = attrs.get(name, {}).get("__shape__")
        if text is None:
            continue
        dims = re.fullmatch(r"\s*[\[(]?\s*((?:-?\d+\s*,?\s*)*)[\])]?\s*", text)
        shape = tuple(int(d) for d in re.findall(r"-?\d+", dims.group(1))) if dims else None
        if not shape or min(shape) < 0:
            raise InputShapeError(f"variable '{name}' declares the shape {text!r}: not a tuple of extents")
        if 0 not in shape:
            _check_extents(name, shape)
            out[name] = shape
    return out


MAX_EXTENT = 2**31 - 1
"""MXNet 1.9.1 (built without USE_INT64_TENSOR_SIZE) indexes tensors with 32-bit integers."""


def _check_extents(name: str, shape: Shape) -> None:
    if max(shape) > MAX_EXTENT:
        raise InputShapeError(f"shape of '{name}' ({','.join(map(str, shape))}) has an extent over 2^31-1, "
                              "more than MXNet 1.9.1 can index")


def import_symbol(symbol: mx.sym.Symbol, shapes: Mapping[str, Shape], name: str = "model",
                  dtype: str = "float32") -> Graph:
    """Imports a forward graph.

    Args:
        symbol: the graph's output symbol (usually the loss).
        shapes: shape of every data and label input; parameters are inferred.
        name: the graph's name (the model name).
        dtype: element type of the inputs that do not declare their own (``mx.sym.var(name, dtype=...)``).

    Returns:
        The graph with every variable and every visible op output as a tensor entry.

    Raises:
        InputShapeError: a shape names no input, or leaves some entry's shape unknown.
        GraphImportError: MXNet rejects the graph or its shapes, or one name is both a state and an argument.
    """
    args = symbol.list_arguments()
    aux = set(symbol.list_auxiliary_states())
    both = sorted(aux.intersection(args))
    if both:        # MXNet binds a name once: one op would update in place what another reads
        raise GraphImportError(f"variable '{both[0]}' is both an op's auxiliary state (updated in place, as "
                               f"BatchNorm's moving statistics) and another op's argument; give the two different "
                               f"names")
    unknown = sorted(set(shapes) - set(args))
    if unknown:
        raise InputShapeError(f"no input named {', '.join(unknown)}; the graph's inputs are: "
                              f"{', '.join(a for a in args if not _looks_like_param(a)) or ', '.join(args)}")
    for k, shape in shapes.items():
        _check_extents(k, tuple(shape))
    found = _known_shapes(symbol, shapes, dtype)
    out_names, out_shapes, out_types = found.names, found.shapes, found.dtypes
    doc = json.loads(symbol.tojson())
    pinned = _pin_deferred_shapes(doc, _entry_shapes(doc, out_shapes))
    if pinned is not None:          # Gluon's begin_state: zeros of batch 0, which MXNet infers from the readers
        doc = pinned
        symbol = mx.sym.load_json(json.dumps(doc))
    if has_sync_batchnorm(doc):     # the whole batch's statistics: BatchNorm's in one logical graph (lower_syncbn.py)
        doc = lower_sync_batchnorm(doc)
        symbol = mx.sym.load_json(json.dumps(doc))
    if has_fused_rnn(doc):          # MXNet's CPU kernels of RNN are wrong without oneDNN: unrolled (lower_rnn.py)
        symbol = mx.sym.load_json(json.dumps(lower_rnn(doc, _entry_shapes(doc, out_shapes))))
        doc = json.loads(symbol.tojson())       # without what only the fused op read (Gluon's joined weights)
        found = _known_shapes(symbol, shapes, dtype)
        out_names, out_shapes, out_types = found.names, found.shapes, found.dtypes
    unique = _unique_names(doc, out_names, out_shapes, out_types)
    if unique is not None:          # names repeated: the plan, the rewrite and checkpoints key by name
        doc = unique
        symbol = mx.sym.load_json(json.dumps(doc))
        found = infer_graph_shapes(symbol, shapes, dtype)
        out_names, out_shapes, out_types = found.names, found.shapes, found.dtypes
    labels = _label_variables(doc)
    entries: dict[tuple[int, int], int] = {}     # (json node index, output index) -> tensor id
    tensors: list[TensorEntry] = []
    nodes: list[Node] = []
    cursor = 0
    arity_cache: dict = {}
    for j, jn in enumerate(doc["nodes"]):
        raw = jn.get("attrs", jn.get("attr", {})) or {}
        if jn["op"] == "null":
            if out_names[cursor] != jn["name"]:
                raise GraphImportError(f"internal order mismatch at variable '{jn['name']}'")
            role = (Role.AUX if jn["name"] in aux else Role.LABEL if j in labels else
                    (Role.LABEL if jn["name"].endswith("label") else Role.DATA) if jn["name"] in shapes
                    else Role.PARAM)
            entries[(j, 0)] = len(tensors)
            tensors.append(TensorEntry(len(tensors), jn["name"], tuple(out_shapes[cursor]),
                                       np.dtype(out_types[cursor]).name, role,
                                       lr_mult=_lr_mult(jn["name"], raw) if role is Role.PARAM else 1.0,
                                       init=str(raw.get("__init__", ""))))
            cursor += 1
            continue
        node_id = len(nodes)
        outputs = []
        for k in range(_num_visible_outputs(jn, arity_cache)):
            entries[(j, k)] = len(tensors)
            outputs.append(len(tensors))
            tensors.append(TensorEntry(len(tensors), out_names[cursor + k], tuple(out_shapes[cursor + k]),
                                       np.dtype(out_types[cursor + k]).name, Role.ACTIVATION, node_id, k))
        cursor += len(outputs)
        try:
            inputs = tuple(entries[(i[0], i[1])] for i in jn["inputs"])
        except KeyError:
            raise GraphImportError(f"node '{jn['name']}' reads a hidden output of another node") from None
        layer, step = _layer_and_step(jn["name"], raw)
        try:
            attrs = Attrs.parse(raw)
        except ValueError as e:
            raise GraphImportError(f"node '{jn['name']}': bad attribute: {e}") from None
        nodes.append(Node(node_id, jn["name"], jn["op"], attrs, inputs, tuple(outputs), layer, step))
    if cursor != len(out_names):
        raise GraphImportError(f"graph has {len(out_names)} internal entries but {cursor} were matched to nodes")
    heads = tuple(entries[(h[0], h[1])] for h in doc["heads"])
    seen: set[str] = set()
    for t in tensors:
        if t.name in seen:
            raise GraphImportError(f"two entries of the graph are named '{t.name}' (a variable and an op's "
                                   f"output?): rename one")
        seen.add(t.name)
    return Graph(name, tuple(nodes), tuple(tensors), heads)


_MOVES = frozenset({"Reshape", "reshape", "Flatten", "flatten", "expand_dims", "squeeze", "Cast", "cast",
                    "_copy", "identity", "BlockGrad", "stop_gradient"})
"""Ops a label may pass through on its way to a loss: they move or retype its values."""


def _lr_mult(name: str, raw: Mapping[str, str]) -> float:
    """A parameter's learning-rate multiplier, as ``mx.sym.var(name, lr_mult=...)`` declares it (``__lr_mult__``;
    MXNet's optimizers scale its update by it: 0 freezes it).

    Raises:
        GraphImportError: the attribute is not a finite number.
    """
    text = raw.get("__lr_mult__", "1")
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise GraphImportError(f"parameter '{name}': __lr_mult__ '{text}' is not a finite number")
    return value


PARAMETER_ARGUMENTS = frozenset({"weight", "bias", "gamma", "beta", "parameters"})
"""The names MXNet's operators give the inputs they learn (FullyConnected's and Convolution's weight and bias, the
normalizations' gamma and beta, PReLU's gamma, the fused RNN's parameters)."""


def check_no_parameter_shapes(symbol: mx.sym.Symbol, shapes: Mapping[str, Shape]) -> None:
    """That a user's ``--shape`` names no variable an op reads as a parameter (:data:`PARAMETER_ARGUMENTS`):
    :func:`import_symbol` feeds every variable given a shape with each batch, so such a weight was never trained.

    Raises:
        InputShapeError: naming the first such variable and the op that reads it.
    """
    read_as = _parameter_reads(json.loads(symbol.tojson()))
    given = sorted(set(shapes) & set(read_as))
    if given:
        node, op, arg = read_as[given[0]]
        raise InputShapeError(f"a shape is given for '{given[0]}', which '{node}' ({op}) reads as its {arg}: a "
                              f"variable given a shape is fed with each batch and never trained; leave it out (a "
                              f"parameter's shape is inferred)")


def _parameter_reads(doc: dict) -> dict[str, tuple[str, str, str]]:
    """Per variable that some op reads as one of :data:`PARAMETER_ARGUMENTS`: (that op's name, its type, the
    argument)."""
    nodes, names, out = doc["nodes"], {}, {}
    for jn in nodes:
        if jn["op"] == "null":
            continue
        if jn["op"] not in names:
            try:
                info = mx.operator.get_operator_arguments(jn["op"])
                names[jn["op"]] = [n for n, t in zip(info.names, info.types) if t.startswith("NDArray")]
            except (mx.base.MXNetError, KeyError, ValueError):
                names[jn["op"]] = []
        for (j, *_), arg in zip(jn["inputs"], names[jn["op"]]):
            if arg in PARAMETER_ARGUMENTS and nodes[j]["op"] == "null":
                out.setdefault(nodes[j]["name"], (jn["name"], jn["op"], arg))
    return out


def _label_variables(doc: dict) -> frozenset[int]:
    """The variables (JSON node indices) a loss op reads as its label or target (any input after its first),
    directly or through ops of :data:`_MOVES`: inputs fed with each batch, never parameters, whatever their name
    and whether or not their shape is given (MXNet infers it: a regression's target)."""
    nodes = doc["nodes"]
    found, stack = set(), [i[0] for n in nodes if n["op"] in LOSS_OPS for i in n["inputs"][1:]]
    while stack:
        j = stack.pop()
        if nodes[j]["op"] == "null":
            found.add(j)
        elif nodes[j]["op"] in _MOVES and nodes[j]["inputs"]:
            stack.append(nodes[j]["inputs"][0][0])
    return frozenset(found)


def _known_shapes(symbol: mx.sym.Symbol, shapes: Mapping[str, Shape], dtype: str):
    """MXNet's shapes and types of every internal entry (in a child process: MXNet may crash on bad attributes).

    Raises:
        InputShapeError: some entry's shape is left unknown.
    """
    found = infer_graph_shapes(symbol, shapes, dtype)
    if any(not s or 0 in s for s in found.shapes):      # () is unknown in MXNet 1.x, as None
        missing = [n for n, s in zip(found.names, found.shapes) if not s or 0 in s]
        variables = set(symbol.list_arguments()) | set(symbol.list_auxiliary_states())
        if any(n in variables for n in missing):    # what the user can give: the variables, first, the inputs
            given = sorted((n for n in missing if n in variables), key=_looks_like_param)  # before the weights
            inferred = dict(zip(found.names, found.shapes))
            missing = [f"{n} (given {format_shapes({n: shapes[n]})[len(n) + 1:]}, which an op's shape inference "
                       f"contradicts: {tuple(inferred[n])})" if n in shapes else f"{n} (a variable: give its shape)"
                       for n in given] + [n for n in missing if n not in variables]
        hint = ""
        if any(math.prod(v) > MAX_EXTENT for v in shapes.values()):   # a flattened extent wraps to 0
            hint = " (an input has over 2^31-1 elements: MXNet 1.9.1 cannot index a flattened extent that large)"
        numpy = _numpy_outputs(symbol, missing)
        if numpy and not hint:
            hint = f" ({numpy})"
        raise InputShapeError(f"shapes given ({format_shapes(shapes)}) leave unknown: {', '.join(missing[:5])}{hint}")
    return found


def _numpy_outputs(symbol: mx.sym.Symbol, missing: Sequence[str]) -> str | None:
    """Why shapes are unknown to MXNet 1.x's legacy inference in a graph of numpy-interface ops (``_np_*``,
    ``_npi_*``, ``_npx_*``), or None: one that tofu does not describe (MXNet may infer its shapes under numpy
    semantics only, and its errors then reach other entries, the inputs too), or a 0-d result in ``missing``."""
    from tofu import registry

    ops = {f"{n['name']}_output": n["op"] for n in json.loads(symbol.tojson())["nodes"]
           if n["op"].startswith(("_np_", "_npi_", "_npx_"))}
    described = registry.load_builtin_operators()
    undescribed = sorted({op for op in ops.values() if op not in described})
    if undescribed:
        return (f"the graph has {undescribed[0]}, an operator of MXNet's numpy interface that tofu does not "
                f"describe")
    return next((f"{m} is the output of {ops[m]}: a numpy operator's 0-d result, which MXNet 1.x's shapes leave "
                 f"unknown and tofu does not describe; keep a dimension, e.g. keepdims=True"
                 for m in missing if m in ops), None)


def _unique_names(doc: dict, names: Sequence[str], shapes, types) -> dict | None:
    """``doc`` with every name unique, or None when it already is. MXNet accepts repeated names, but a plan,
    the rewrite and checkpoints key tensors and ops by name: variables of one name are one variable (MXNet
    binds and loads them by name), and an op whose name (or an output's) was taken gets the first free
    ``{name}_{i}``.

    Raises:
        GraphImportError: two variables of one name differ in shape or type.
    """
    nodes = doc["nodes"]
    spans, cursor, cache = [], 0, {}
    for jn in nodes:
        n = 1 if jn["op"] == "null" else _num_visible_outputs(jn, cache)
        spans.append((cursor, n))
        cursor += n
    variables: dict[str, int] = {}
    merged: dict[int, int] = {}                   # node index -> the first variable of its name
    for j, jn in enumerate(nodes):
        if jn["op"] != "null":
            continue
        first = variables.setdefault(jn["name"], j)
        if first != j:
            a, b = spans[first][0], spans[j][0]
            if (tuple(shapes[a]), types[a]) != (tuple(shapes[b]), types[b]):
                raise GraphImportError(f"two variables are named '{jn['name']}', of shapes {tuple(shapes[a])} "
                                       f"and {tuple(shapes[b])}: rename one (MXNet binds variables by name)")
            merged[j] = first
    taken = set(variables)                        # tensor names
    ops: set[str] = set()
    every = {jn["name"] for jn in nodes} | set(names)
    renamed: dict[int, str] = {}
    for j, jn in enumerate(nodes):
        if jn["op"] == "null":
            continue
        name, (start, n) = jn["name"], spans[j]
        suffixes = [o[len(name):] for o in names[start:start + n]]
        new, i = name, 0
        while new in ops or any(new + x in taken for x in suffixes) or (new != name and new in every):
            i += 1
            new = f"{name}_{i}"
        if new != name:
            renamed[j] = new
        ops.add(new)
        taken.update(new + x for x in suffixes)
    if not merged and not renamed:
        return None
    index, out = {}, []
    for j, jn in enumerate(nodes):
        if j in merged:
            continue
        index[j] = len(out)
        out.append({**jn, "name": renamed.get(j, jn["name"]),
                    "inputs": [[index[merged.get(e[0], e[0])], *e[1:]] for e in jn.get("inputs", [])]})
    heads = [[index[merged.get(e[0], e[0])], *e[1:]] for e in doc["heads"]]
    arg_nodes = [i for i, jn in enumerate(out) if jn["op"] == "null"]
    return {**{k: v for k, v in doc.items() if k != "node_row_ptr"}, "nodes": out, "arg_nodes": arg_nodes,
            "heads": heads}


def _pin_deferred_shapes(doc: dict, entry_shape) -> dict | None:
    """``doc`` with the ``shape`` attribute of every op without inputs that leaves an extent to inference (a 0,
    as Gluon's ``begin_state`` leaves the batch) set to the shape MXNet inferred; None when there is none. A shard
    of such an op is built with its own extents (tofu.analysis.shard), which a 0 would leave to a partitioned
    graph's inference, where the readers that gave it are on other devices or cut."""
    nodes, changed = [], False
    for j, jn in enumerate(doc["nodes"]):
        raw = jn.get("attrs", jn.get("attr")) or {}
        if jn["op"] != "null" and not jn["inputs"] and "shape" in raw:
            try:
                deferred = 0 in Attrs.parse({"shape": raw["shape"]})["shape"]
            except (ValueError, TypeError, KeyError):
                deferred = False
            if deferred:
                key = "attrs" if "attrs" in jn else "attr"
                jn = {**jn, key: {**raw, "shape": str(entry_shape(j, 0))}}
                changed = True
        nodes.append(jn)
    return {**doc, "nodes": nodes} if changed else None


def _entry_shapes(doc: dict, shapes: Sequence[Shape]):
    """(node, output) -> the shape of that entry of ``doc``, from the internals' shapes in node order."""
    start, cursor, cache = [], 0, {}
    for jn in doc["nodes"]:
        start.append(cursor)
        cursor += 1 if jn["op"] == "null" else _num_visible_outputs(jn, cache)
    return lambda node, output: tuple(shapes[start[node] + output])


def _num_visible_outputs(jn: dict, cache: dict) -> int:
    """How many outputs of one op node the internals list (BatchNorm: 1, or 3 with output_mean_var)."""
    raw = jn.get("attrs", jn.get("attr", {})) or {}
    key = (jn["op"], tuple(sorted(raw.items())), len(jn["inputs"]))
    if key not in cache:
        try:
            cache[key] = num_visible_outputs(jn["op"], raw, len(jn["inputs"]))
        except GraphImportError as e:
            raise GraphImportError(f"node '{jn['name']}': {e}") from None
    return cache[key]


def _layer_and_step(name: str, raw: Mapping[str, str]) -> tuple[str | None, int | None]:
    layer = raw.get(LAYER_ATTR)
    step = raw.get(STEP_ATTR)
    if step is None:
        m = _RNN_NAME.match(name)
        if m:
            layer = layer or m["layer"]
            step = m["step"]
    return layer, (int(step) if step is not None else None)


def _looks_like_param(name: str) -> bool:
    return name.endswith(("_weight", "_bias", "_gamma", "_beta"))


def format_shapes(shapes: Mapping[str, Shape]) -> str:
    """``name=2,3, ...`` as the CLI's ``--shape`` takes them ("no shapes" for none)."""
    return ", ".join(f"{k}={','.join(map(str, v))}" for k, v in shapes.items()) or "no shapes"
