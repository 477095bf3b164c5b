"""What the fuzz harness (tests/test_fuzz.py) draws and how it runs ``tofu``: random small graphs, the same graphs
with duplicate names or a batch the workers do not divide, bad paths (outputs and inputs) and bad settings; each
run a forked copy of the test process with its file descriptors 1 and 2 captured, a working directory of its own
and a time limit, so that a crash or a hang is reported instead of suffered.
"""
from __future__ import annotations

import json
import logging
import math
import os
import signal
import sys
import tempfile
import traceback
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import mxnet as mx
from hypothesis import strategies as st

from tofu import cli
from tofu.search.algorithms import GENERAL_ALGORITHMS

EXTENTS = st.sampled_from([1, 2, 3, 4, 5, 6, 7, 8, 12, 13])
SMALL = st.sampled_from([1, 2, 3, 4, 5, 7, 8])
WORKERS = st.one_of(st.sampled_from([2, 4, 8]), st.integers(1, 8))      # powers of two more often
# ILP is exact and slow past tiny graphs; the other finders are all exercised
FINDERS = st.sampled_from(sorted(a for a in GENERAL_ALGORITHMS if a != "ilp"))
# a refusal of a valid graph can only be a split that cannot be made
REFUSALS = ("cannot be split", "too many", "divide")


# ------------------------------------------------------------------------------------------------ running tofu

@dataclass(frozen=True)
class Outcome:
    argv: tuple[str, ...]
    status: int            # negative: killed by that signal (SIGALRM: still running at the time limit)
    out: str
    err: str               # everything written to file descriptor 2, MXNet's own logging included

    def __str__(self) -> str:
        return (f"`tofu {' '.join(self.argv)}` -> status {self.status}\n--- stdout\n{self.out[-3000:]}"
                f"\n--- stderr\n{self.err[-3000:]}")


def run_isolated(argv: list[str], cwd: Path | None = None, timeout: int = 60) -> Outcome:
    """``tofu ARGV`` in a forked copy of this process, in ``cwd``, with its file descriptors 1 and 2 captured
    and the warning filters and logging of a fresh ``tofu`` process (not pytest's, which would swallow a warning
    the user sees); killed by SIGALRM after ``timeout`` seconds. A signal there is reported, not suffered, and
    output written by MXNet's C++ counts."""
    with tempfile.TemporaryDirectory(prefix="tofu-fuzz-io-") as io:
        paths = [Path(io) / "stdout", Path(io) / "stderr"]
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:                                    # the child never returns into pytest
            status = 1
            try:
                signal.alarm(timeout)
                for fd, path in zip((1, 2), paths):
                    os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND), fd)
                sys.stdout = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
                sys.stderr = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="backslashreplace")
                _as_a_fresh_process()
                if cwd is not None:
                    os.chdir(cwd)
                status = cli.main(argv)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status if isinstance(status, int) else 1)
        _, wait_status = os.waitpid(pid, 0)
        return Outcome(tuple(argv), os.waitstatus_to_exitcode(wait_status),
                       *(p.read_text(errors="replace") for p in paths))


def _as_a_fresh_process() -> None:
    """Python's default warning filters and a root logger without pytest's handlers, as ``python -m tofu`` has."""
    warnings.resetwarnings()
    for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
        warnings.simplefilter("ignore", category, append=True)
    warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: sys.stderr.write(
        warnings.formatwarning(message, category, filename, lineno, line))
    for handler in list(logging.root.handlers):
        logging.root.removeHandler(handler)
    logging.root.setLevel(logging.WARNING)


def error_line(got: Outcome) -> str:
    """The one line ``tofu: error: ...`` of a run that failed (status 1 or 2), asserted: never a signal, never a
    traceback, nothing else on stderr."""
    assert got.status >= 0, f"killed by signal {signal.Signals(-got.status).name}\n{got}"
    assert "Traceback" not in got.err, str(got)
    lines = got.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tofu: error: "), str(got)
    return lines[0]


def strict_json(text: str):
    """``text`` as one JSON document; a bare NaN or Infinity is not JSON."""
    def reject(constant):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=reject)


def tree(folder: Path) -> dict[str, tuple]:
    """Every entry under ``folder`` (named pipes not opened): kind, size and modification time."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(root, name)
            s = p.lstat()
            found[str(p.relative_to(folder))] = (s.st_mode >> 12, s.st_size if name in files else 0, s.st_mtime_ns)
    return found


# --------------------------------------------------------------------------------------------- random graphs

@dataclass(frozen=True)
class Model:
    symbol: mx.sym.Symbol
    shapes: dict[str, tuple[int, ...]]
    layers: str            # the layer kinds, for messages

    def __repr__(self) -> str:          # what a failing example prints: enough to rebuild it (mx.sym.load_json)
        return f"Model(layers={self.layers!r}, shapes={self.shapes!r}, json={self.symbol.tojson()!r})"

    def _repr_pretty_(self, printer, cycle) -> None:      # hypothesis prints examples with IPython's printer
        printer.text(repr(self))

    def shape_args(self) -> list[str]:
        return [a for name, s in self.shapes.items() for a in ("--shape", f"{name}={','.join(map(str, s))}")]


TRUNK = ("conv", "act", "bn", "pool", "residual", "concat", "dropout")


@st.composite
def graphs(draw, batches=EXTENTS, trunk=TRUNK, extents=EXTENTS, small=SMALL) -> Model:
    """A classifier: optional convolutional trunk (of the layer kinds ``trunk``: conv, grouped or not, activation,
    BatchNorm, pooling, residual add, channel concat, dropout), then fully connected layers, then SoftmaxOutput;
    the batch drawn from ``batches``, spatial extents and widths from ``extents``, channels and classes from
    ``small``."""
    batch = draw(batches)
    x = mx.sym.var("data")
    ops = []
    names = iter(f"op{i}" for i in range(100))
    if draw(st.booleans()):
        c, h, w = draw(small), draw(extents), draw(extents)
        shapes = {"data": (batch, c, h, w)}
        for _ in range(draw(st.integers(1, 4))):
            kind = draw(st.sampled_from(trunk))
            if kind == "conv":
                k = draw(st.sampled_from([1, 3]))
                stride = draw(st.sampled_from([1, 2]))
                groups = draw(st.sampled_from([None, 1, c]))     # as Gluon writes it (explicit 1), depthwise
                c = c * draw(st.sampled_from([1, 2])) if groups == c else draw(small)
                extra = {} if groups is None else {"num_group": groups}
                x = mx.sym.Convolution(x, kernel=(k, k), pad=(k // 2, k // 2), stride=(stride, stride),
                                       num_filter=c, no_bias=draw(st.booleans()), name=next(names), **extra)
                h, w = (h - 1) // stride + 1, (w - 1) // stride + 1
            elif kind == "act":
                x = mx.sym.Activation(x, act_type=draw(st.sampled_from(["relu", "tanh", "sigmoid"])), name=next(names))
            elif kind == "bn":
                x = mx.sym.BatchNorm(x, fix_gamma=draw(st.booleans()), name=next(names))
            elif kind == "pool":
                pool = draw(st.sampled_from(["max", "avg"]))
                if h >= 2 and w >= 2 and draw(st.booleans()):
                    x = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type=pool, name=next(names))
                    h, w = (h - 2) // 2 + 1, (w - 2) // 2 + 1
                else:
                    x = mx.sym.Pooling(x, kernel=(1, 1), global_pool=True, pool_type=pool, name=next(names))
                    h, w = 1, 1
            elif kind == "residual":
                branch = mx.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=c, name=next(names))
                x = x + branch
            elif kind == "concat":
                extra = draw(small)
                branch = mx.sym.Convolution(x, kernel=(1, 1), num_filter=extra, name=next(names))
                x = mx.sym.Concat(x, branch, dim=1, name=next(names))
                c += extra
            else:
                x = mx.sym.Dropout(x, p=0.5, name=next(names))
            ops.append(kind)
    else:
        shapes = {"data": (batch, draw(extents))}
    if draw(st.booleans()):
        x = mx.sym.Flatten(x, name=next(names))
    for _ in range(draw(st.integers(0, 2))):
        x = mx.sym.FullyConnected(x, num_hidden=draw(extents), name=next(names))
        x = mx.sym.Activation(x, act_type="relu", name=next(names))
        ops.append("fc")
    x = mx.sym.FullyConnected(x, num_hidden=draw(small), name=next(names))
    shapes["softmax_label"] = (batch,)
    return Model(mx.sym.SoftmaxOutput(x, name="softmax"), shapes, " ".join(ops + ["fc", "softmax"]))


def has_kinks(doc: dict) -> bool:
    """Whether a symbol JSON has an op whose gradient jumps (ReLU, max pooling): a partitioned run that sums in
    another order can land on the other side of a kink, so --check is held to its default tolerance there."""
    for node in doc["nodes"]:
        attrs = node.get("attrs", {})
        if node["op"] in ("relu", "LeakyReLU", "max", "min", "maximum", "minimum", "_maximum", "_minimum"):
            return True
        if node["op"] == "Activation" and attrs.get("act_type") == "relu":
            return True
        if node["op"] == "Pooling" and attrs.get("pool_type", "max") == "max":
            return True
    return False


@dataclass(frozen=True)
class Renamed:
    """A symbol JSON in which some nodes were given another node's name (MXNet loads it)."""
    text: str
    shapes: dict[str, tuple[int, ...]]
    what: str              # which nodes share a name (DUPLICATES)
    name: str              # the duplicated name
    refused: bool          # variables of that name with different shapes: tofu must refuse it, naming it

    def shape_args(self) -> list[str]:
        return [a for name, s in self.shapes.items() for a in ("--shape", f"{name}={','.join(map(str, s))}")]


DUPLICATES = ("ops", "variables", "variables of one shape", "an op and a variable", "a variable and an op's output")


@st.composite
def duplicate_names(draw, trunk=TRUNK) -> Renamed:
    """A random graph in which two or three nodes share a name: op nodes, variables (parameters or auxiliary
    states; of one shape: one variable; of different shapes, or a state with an argument: refused), an op and a
    variable, or a variable named like an op's output (``{op}_output``). The inputs keep their names."""
    model = draw(graphs(trunk=trunk))
    doc = json.loads(model.symbol.tojson())
    nodes = doc["nodes"]
    arg_shapes, _, aux_shapes = model.symbol.infer_shape(**model.shapes)
    shape_of = {**dict(zip(model.symbol.list_arguments(), arg_shapes)),
                **dict(zip(model.symbol.list_auxiliary_states(), aux_shapes))}
    ops = [i for i, n in enumerate(nodes) if n["op"] != "null"]
    variables = [i for i, n in enumerate(nodes) if n["op"] == "null" and n["name"] not in model.shapes]
    same_shape = [[i for i in variables if shape_of[nodes[i]["name"]] == shape_of[nodes[j]["name"]]]
                  for j in variables]
    kinds = [k for k in DUPLICATES if k != "variables of one shape" or any(len(g) > 1 for g in same_shape)]
    what = draw(st.sampled_from(kinds))
    refused = False
    if what == "ops":
        first, *others = draw(st.lists(st.sampled_from(ops), min_size=2, max_size=3, unique=True))
    elif what.startswith("variables"):
        pool = variables if what == "variables" else draw(st.sampled_from([g for g in same_shape if len(g) > 1]))
        first, *others = draw(st.lists(st.sampled_from(pool), min_size=2, max_size=3, unique=True))
        states = set(model.symbol.list_auxiliary_states())
        # different shapes, or an op's state (updated in place) named as another op's argument: refused
        refused = len({shape_of[nodes[i]["name"]] for i in [first, *others]}) > 1 or \
            len({nodes[i]["name"] in states for i in [first, *others]}) > 1
    elif what == "an op and a variable":
        pair = [draw(st.sampled_from(ops)), draw(st.sampled_from(variables))]
        first, *others = pair if draw(st.booleans()) else pair[::-1]
    else:
        op, first = draw(st.sampled_from(ops)), draw(st.sampled_from(variables))
        nodes[first]["name"] = f"{nodes[op]['name']}_output"
        others = []
    name = nodes[first]["name"]
    for i in others:
        nodes[i]["name"] = name
    return Renamed(json.dumps(doc), model.shapes, what, name, refused)


# ------------------------------------------------------------------------------------------ corrupted symbol files

NASTY_VALUES = ["0", "-1", "1", "(0, 0)", "(0,)", "()", "(-1, -1)", "abc", "1e30", "99999999999", "True", "", "None",
                "(2147483648, 1)", "(1, 1, 1, 1, 1, 1, 1)", "nan", "[3, 3]"]


@st.composite
def corrupted_payloads(draw) -> tuple[bytes, list[str]]:
    """A valid graph's JSON document with one to three corruptions, and the shape arguments (maybe wrong)."""
    model = draw(graphs())
    doc = json.loads(model.symbol.tojson())
    nodes = doc["nodes"]
    for _ in range(draw(st.integers(1, 3))):
        j = draw(st.integers(0, len(nodes) - 1))
        node = nodes[j]
        kind = draw(st.sampled_from(["attr", "input", "drop_key", "op", "name", "heads", "type"]))
        if not isinstance(node, dict) or not isinstance(nodes[0], dict):
            continue                                    # already replaced by a non-node
        if kind == "attr" and node.get("attrs"):
            key = draw(st.sampled_from(sorted(node["attrs"])))
            node["attrs"][key] = draw(st.sampled_from(NASTY_VALUES))
        elif kind == "input" and node["inputs"]:
            entry = node["inputs"][draw(st.integers(0, len(node["inputs"]) - 1))]
            entry[draw(st.integers(0, 1))] = draw(st.integers(-2, len(nodes) + 2))
        elif kind == "drop_key":
            node.pop(draw(st.sampled_from(["op", "name", "inputs", "attrs"])), None)
        elif kind == "op":
            node["op"] = draw(st.sampled_from(["NoSuchOp", "null", "Convolution", "Pooling", "SoftmaxOutput",
                                               "FullyConnected", "Concat", "elemwise_add", "BatchNorm"]))
        elif kind == "name":
            node["name"] = nodes[0].get("name", "data")
        elif kind == "heads":
            doc["heads"] = draw(st.sampled_from([[], [[0, 0, 0]], [[len(nodes), 0, 0]], [[len(nodes) - 1, 5, 0]]]))
        else:
            nodes[j] = draw(st.sampled_from([None, 3, "x", [], {"op": "null"}]))
    text = json.dumps(doc)
    form = draw(st.sampled_from(["json", "json", "json", "truncated", "latin-1"]))
    if form == "truncated":
        text = text[:draw(st.integers(0, len(text) - 1))]
    payload = text.encode("utf-8") if form != "latin-1" else text.replace('"', '"\xe9', 1).encode("latin-1")
    shape_args = model.shape_args()
    if draw(st.integers(0, 4)) == 0:
        shape_args += draw(st.sampled_from([["--shape", "data=2147483648,1"], ["--shape", "nope=1"],
                                            ["--shape", "data=0"], ["--shape", "softmax_label=3,3"]]))
    return payload, shape_args


# ----------------------------------------------------------------------------------------------- bad paths

INPUT_KINDS = ("dir", "fifo", "missing", "empty", "binary")
OUTPUT_KINDS = ("dir", "slash", "no_dir", "fifo")
FIGURE_SUFFIXES = (".txt", ".json", "", ".gif", ".bmp", ".pn", ".png~", ".png.")
# names: ASCII or not; no separators, controls or line breaks (a name with a newline cannot be one line), and
# never a leading '-' (argparse would read an option)
NAME_CHARS = st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp", "Co", "Cn"), blacklist_characters="/\\<>")
NAMES = st.one_of(st.sampled_from(["a", "x1", "plan", "ck", "ü", "数据", "🙂 f", "a b"]),
                  st.text(NAME_CHARS, min_size=1, max_size=8))


@dataclass(frozen=True)
class Entry:
    """A file system entry the test makes before the run: a directory, a named pipe, or a file with bytes."""
    path: str
    kind: str              # "dir", "fifo", "file"
    payload: bytes = b""


@dataclass(frozen=True)
class PathCase:
    argv: tuple[str, ...]          # "<ROOT>" stands for the working directory's absolute path
    entries: tuple[Entry, ...]
    named: tuple[str, ...]         # the error line names one of these
    what: str                      # the command and its bad options
    kinds: tuple[str, ...]         # what is wrong with each


ROOT = "<ROOT>"


def _name(draw, i: int, suffix: str = "") -> str:
    text = draw(NAMES)
    if text.startswith("-") or text in (".", ".."):
        text = "f" + text
    return f"{text}{i}{suffix}"


@cache
def real_files() -> dict[str, bytes]:
    """Valid files of each input kind, for mlp at 2 workers (a truncated one is a bad input)."""
    from tofu.api import load_graph
    from tofu.runtime.data import initial_values
    from tofu.search.algorithms import plan_graph

    graph = load_graph("mlp", with_loss=True)
    with tempfile.TemporaryDirectory() as folder:
        params = Path(folder) / "mlp.params"
        mx.nd.save(str(params), {f"arg:{k}": mx.nd.array(v) for k, v in initial_values(graph).items()})
        plan = Path(folder) / "plan.json"
        plan_graph(graph, 2).save(plan)
        return {"params": params.read_bytes(), "plan": plan.read_bytes(),
                "model": mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc").tojson().encode()}


@st.composite
def bad_input(draw, i: int, slot: str, real: str | None) -> tuple[str, list[Entry], tuple[str, ...], str]:
    """An input path of kind dir, fifo, missing, empty or binary (random bytes that are not UTF-8, or a valid
    file of that input's kind cut short): the path, its entries, the names its error may give, its kind."""
    name = _name(draw, i, ".json" if slot == "model" else draw(st.sampled_from(["", ".json", ".params"])))
    kind = draw(st.sampled_from(INPUT_KINDS))
    entries = {"dir": [Entry(name, "dir")], "fifo": [Entry(name, "fifo")], "missing": [],
               "empty": [Entry(name, "file")]}.get(kind)
    if kind == "binary":
        whole = real_files()[real] if real is not None else b""
        if whole and draw(st.booleans()):
            payload = whole[:draw(st.integers(1, len(whole) - 1))]
        else:
            payload = b"\xff" + draw(st.binary(min_size=0, max_size=64))
        entries = [Entry(name, "file", payload)]
    return name, entries, (name,), f"input {kind}"


@st.composite
def bad_output(draw, i: int, slot: str, beside: tuple[str, ...]) -> tuple[str, list[Entry], tuple[str, ...], str]:
    """An output path that is a directory, ends in '/', lives in a missing directory, is a named pipe, or (a
    figure) has a suffix nothing draws; for the options in ``beside`` (--save, --checkpoint) also one whose plan
    beside it is a directory."""
    kinds = OUTPUT_KINDS + (("suffix",) if slot == "--figure" else ()) + (("beside",) if slot in beside else ())
    kind = draw(st.sampled_from(kinds))
    suffix = {"--out": ".json", "--figure": ".png"}.get(slot, ".params")
    name = _name(draw, i, suffix)
    what = f"output {kind}"
    if kind == "dir":
        return name, [Entry(name, "dir")], (name,), what
    if kind == "slash":
        return name + "/", [], (name + "/",), what
    if kind == "no_dir":
        folder = _name(draw, i + 50)
        return f"{folder}/{name}", [], (f"{folder}/{name}",), what
    if kind == "fifo":
        return name, [Entry(name, "fifo")], (name,), what
    if kind == "suffix":
        name = _name(draw, i, draw(st.sampled_from(FIGURE_SUFFIXES)))
        return name, [], (name,), what
    from tofu.runtime.data import plan_path

    plan = str(plan_path(name))
    return name, [Entry(plan, "dir")], (plan,), f"output {kind} ({slot})"


def _spelled_otherwise(draw, name: str) -> str:
    """``name`` (a file in the working directory) written another way."""
    return draw(st.sampled_from([f"./{name}", f"{ROOT}/{name}", f".//{name}", f"{ROOT}/./{name}"]))


PATH_SLOTS = {"plan": ("model", "--load", "--out", "--figure", "same"),
              "run": ("model", "--plan", "--load", "--resume", "--save", "--checkpoint", "same"),
              "launch": ("--hostfile", "--plan", "--load", "--resume", "--save", "--checkpoint", "same")}
SAME_FILE_KINDS = ("save-checkpoint", "checkpoint-beside-save", "save-beside-checkpoint", "out-figure")


@st.composite
def path_cases(draw, same_file_kinds=SAME_FILE_KINDS, beside=("--save", "--checkpoint")) -> PathCase:
    """A command (``tofu plan``, ``tofu run`` or ``tofu launch -- tofu run``) on mlp with one or two bad paths
    and maybe a good output (which must not be written either).

    ``same_file_kinds``: the pairs of outputs that may name one file: ``save-checkpoint`` (--save and
    --checkpoint), ``checkpoint-beside-save`` (--checkpoint is the plan --save writes beside it),
    ``save-beside-checkpoint`` (the reverse), ``out-figure`` (``tofu plan --out`` and ``--figure``); ``beside``:
    the outputs whose plan beside them may be a directory."""
    def same_kinds(command):
        return [k for k in same_file_kinds if (k == "out-figure") == (command == "plan")]

    # every (command, bad option) alike likely; maybe a second bad option
    command, first = draw(st.sampled_from([(c, s) for c, slots in PATH_SLOTS.items() for s in slots
                                           if s != "same" or same_kinds(c)]))
    others = [s for s in PATH_SLOTS[command] if s != first and (s != "same" or same_kinds(command))]
    bad = [first, *draw(st.lists(st.sampled_from(others), max_size=1))]
    if "--load" in bad and ("--resume" in bad or "--out" in bad):       # refused together whatever the paths
        bad.remove("--load")
    if "same" in bad:
        bad = [s for s in bad if s not in ("--save", "--checkpoint", "--out", "--figure")]
    same_kinds = same_kinds(command)
    options: dict[str, str] = {}
    entries: list[Entry] = []
    named: list[str] = []
    kinds: list[str] = []
    model = "mlp"
    for i, slot in enumerate(bad):
        if slot == "same":
            kind = draw(st.sampled_from(same_kinds))
            first = _name(draw, i, ".png" if kind == "out-figure" else ".params")
            if kind == "save-checkpoint":
                options.update({"--save": first, "--checkpoint": _spelled_otherwise(draw, first)})
            elif kind == "out-figure":
                options.update({"--figure": first, "--out": draw(st.sampled_from([first, f"./{first}"]))})
            else:
                from tofu.runtime.data import plan_path

                other = "--checkpoint" if kind == "checkpoint-beside-save" else "--save"
                options.update({"--save" if other == "--checkpoint" else "--checkpoint": first,
                                other: str(plan_path(first))})
            named += [first, options.get("--checkpoint", ""), options.get("--out", "")]
            kinds.append(f"same file: {kind}")
            continue
        if slot in ("--out", "--figure", "--save", "--checkpoint"):
            text, made, names, kind = draw(bad_output(i, slot, beside))
        else:
            real = {"model": "model", "--plan": "plan", "--load": "params" if command != "plan" else "plan",
                    "--resume": "params", "--hostfile": None}[slot]
            text, made, names, kind = draw(bad_input(i, slot, real))
        entries += made
        named += names
        kinds.append(kind)
        if slot == "model":
            model = text
        else:
            options[slot] = text
    # a good output beside the bad paths: nothing may be written there either
    if draw(st.booleans()):
        good = {"plan": "--out" if "--load" not in options else "--figure", "run": "--save",
                "launch": "--save"}[command]
        if good not in options and not (good == "--save" and "--checkpoint" in options):
            options[good] = _name(draw, 9, ".png" if good == "--figure" else ".json")
    if "--checkpoint" in options:
        options["--checkpoint-every"] = "1"
    argv = [model, *(["--shape", "data=4,6"] if model != "mlp" else []), *[a for kv in options.items() for a in kv]]
    if command == "plan":
        argv = ["plan", *argv, "--workers", "2"]
    elif command == "run":
        argv = ["run", *argv, "--workers", "2", "--steps", "2"]
    else:
        hostfile = ["--hostfile", options.pop("--hostfile")] if "--hostfile" in options else []
        run = [a for kv in options.items() for a in kv]
        argv = ["launch", "--machines", "2", "--workers", "2", *hostfile, "--timeout", "30", "--",
                "tofu", "run", model, "--steps", "2", *run]
    if any(not n.isascii() for n in named):
        kinds.append("a name not ASCII")
    return PathCase(tuple(argv), tuple(entries), tuple(n for n in named if n), f"{command}: {' '.join(bad)}",
                    tuple(kinds))


def make_entries(folder: Path, entries) -> None:
    for e in entries:
        path = folder / e.path
        path.parent.mkdir(parents=True, exist_ok=True)
        if e.kind == "dir":
            path.mkdir(exist_ok=True)
        elif e.kind == "fifo":
            os.mkfifo(path)
        else:
            path.write_bytes(e.payload)


# ---------------------------------------------------------------------------------------------- bad settings

FLOAT32_MAX = 3.4028234663852886e38
# each option's values that are refused (exit 2), and accepted ones
SETTINGS = {
    "--lr": (["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e999", "-1e999", "-0.1", "-1e-30", "0", "0.0",
              "-0", "abc", ""],
             ["0.05", "1e-3", "0.5", "1e-30", "1", "1e5", "1e10", "1e30", "1e38", "3.4e38", "1e39", "1e300"]),
    "--momentum": (["nan", "inf", "-inf", "-0.5", "-1e-9", "1", "1.0", "1.5", "1e30", "1e300"],
                   ["0", "-0", "0.9", "0.5", "0.999999"]),
    "--rtol": (["nan", "inf", "-inf", "-1e-3", "0", "-0", "0.0"], ["0.05", "1e-3", "1", "1e30"]),
    "--seed": (["-1", "-4294967296", "4294967295", "4294967296", "18446744073709551616", "1.5", "1e3", "nan"],
               ["0", "1", "4294967294", "12345"]),
}


@dataclass(frozen=True)
class SettingsCase:
    argv: tuple[str, ...]
    refused: tuple[str, ...]       # the options given a refused value
    lr: float                      # the learning rate given (when accepted)
    json: bool
    check: bool


@st.composite
def settings_cases(draw, leave_out: tuple[str, ...] = ()) -> SettingsCase:
    """``tofu run mlp`` (or under ``tofu launch`` when a value is refused) with each of --lr, --momentum, --rtol,
    --seed absent, accepted or refused (half the cases: every one given is accepted, --lr always given); written
    ``--opt VALUE`` or ``--opt=VALUE``; never the accepted values ``leave_out``."""
    chosen, refused = {}, []
    accepted = draw(st.booleans())
    for option, (bad, good) in SETTINGS.items():
        good = [v for v in good if v not in leave_out]
        pick = draw(st.sampled_from(["good"] if accepted and option == "--lr" else
                                    ["absent", "good"] if accepted else ["absent", "good", "bad"]))
        if pick == "absent":
            continue
        chosen[option] = draw(st.sampled_from(bad if pick == "bad" else good))
        if pick == "bad":
            refused.append(option)
    words = []
    for option, value in chosen.items():
        words += [f"{option}={value}"] if draw(st.booleans()) else [option, value]
    as_json, check = draw(st.booleans()), draw(st.booleans())
    tail = ["mlp", "--steps", "3", *words, *(["--json"] if as_json else []), *(["--check"] if check else [])]
    if refused and draw(st.integers(0, 3)) == 0:
        argv = ["launch", "--machines", "2", "--workers", "2", "--timeout", "30", "--", "tofu", "run", *tail]
    else:
        argv = ["run", *tail, "--workers", str(draw(st.sampled_from([1, 2, 4])))]
    lr = float(chosen.get("--lr", "0.05")) if "--lr" not in refused else math.nan
    return SettingsCase(tuple(argv), tuple(refused), lr, as_json, check)


# ------------------------------------------------------------------------------------ batches k does not divide

@st.composite
def indivisible(draw, trunk=TRUNK) -> tuple[str | Model, int, int]:
    """A worker count k >= 2 and a model whose batch k does not divide: a random graph (its other extents mostly
    multiples of k, so that a plan exists), or zoo mlp / wresnet-tiny with --batch. Returns (model, k, batch)."""
    k = draw(st.one_of(st.sampled_from([2, 3, 4]), st.integers(2, 8)))
    batch = draw(st.sampled_from([b for b in (1, 2, 3, 5, 6, 7, 9, 10, 11, 13) if b % k]))
    if draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(["mlp", "wresnet-tiny"])), k, batch
    multiples = st.sampled_from([k, 2 * k, 3 * k])
    return draw(graphs(batches=st.just(batch), trunk=trunk, extents=st.one_of(multiples, multiples, EXTENTS),
                       small=st.one_of(multiples, multiples, SMALL))), k, batch
