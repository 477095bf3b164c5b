"""Fuzzing ``tofu plan`` (issue 10): random small graphs of described operators, random shapes (1, odd and
prime extents included), worker counts 1-8 and algorithms; and the same graphs' symbol files corrupted.

Property: the run ends with status 0 and a plan that :meth:`Plan.check` accepts for the graph, with the
requested workers and the file's cost on stdout; or with status 2 and exactly one line ``tofu: error: ...``
on stderr (file descriptor 2, so MXNet's own logging counts). Never a traceback, never a signal: each run is
a forked copy of the test process, so a crash is reported as a failure instead of ending pytest. For valid
graphs a refusal can only be an impossible split, which the line must say.

Bounded for ``make test`` (60 graphs and 20 corrupted files, about 15 s on 2 cores); CI (``CI=true``) runs
1000 and 333. The examples are derandomized, so a failure reproduces; hypothesis prints the failing case.
"""
import json
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import mxnet as mx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tofu import cli
from tofu.api import load_graph
from tofu.search.algorithms import GENERAL_ALGORITHMS
from tofu.search.plan import Plan

settings.register_profile("make", max_examples=60, deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("ci", parent=settings.get_profile("make"), max_examples=1000)
PROFILE = "ci" if os.environ.get("CI") == "true" else "make"

EXTENTS = st.sampled_from([1, 2, 3, 4, 5, 6, 7, 8, 12, 13])
SMALL = st.sampled_from([1, 2, 3, 4, 5, 7, 8])
WORKERS = st.one_of(st.sampled_from([2, 4, 8]), st.integers(1, 8))      # powers of two more often
# ILP is exact and slow past tiny graphs; the other finders are all exercised
FINDERS = st.sampled_from(sorted(a for a in GENERAL_ALGORITHMS if a != "ilp"))


@dataclass(frozen=True)
class Outcome:
    status: int            # negative: killed by that signal
    out: str
    err: str               # everything written to file descriptor 2, MXNet's own logging included


def run_isolated(argv: list[str], folder: Path) -> Outcome:
    """``tofu ARGV`` in a forked copy of this process with its file descriptors 1 and 2 captured: a signal
    there is reported, not suffered, and output written by MXNet's C++ counts."""
    paths = [folder / "stdout", folder / "stderr"]
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:                                        # the child never returns into pytest
        status = 1
        try:
            for fd, path in zip((1, 2), paths):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND), fd)
            sys.stdout = os.fdopen(os.dup(1), "w", buffering=1)
            sys.stderr = os.fdopen(os.dup(2), "w", buffering=1)
            status = cli.main(argv)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status if isinstance(status, int) else 1)
    _, wait_status = os.waitpid(pid, 0)
    return Outcome(os.waitstatus_to_exitcode(wait_status), *(p.read_text(errors="replace") for p in paths))


@st.composite
def graphs(draw) -> tuple[mx.sym.Symbol, dict[str, tuple[int, ...]], str]:
    """A classifier: optional convolutional trunk (conv, grouped or not, activation, BatchNorm, pooling,
    residual add, channel concat, dropout), then fully connected layers, then SoftmaxOutput. Returns the
    symbol, its input shapes and the layer kinds."""
    batch = draw(EXTENTS)
    x = mx.sym.var("data")
    ops = []
    names = iter(f"op{i}" for i in range(100))
    if draw(st.booleans()):
        c, h, w = draw(SMALL), draw(EXTENTS), draw(EXTENTS)
        shapes = {"data": (batch, c, h, w)}
        for _ in range(draw(st.integers(1, 4))):
            kind = draw(st.sampled_from(["conv", "act", "bn", "pool", "residual", "concat", "dropout"]))
            if kind == "conv":
                k = draw(st.sampled_from([1, 3]))
                stride = draw(st.sampled_from([1, 2]))
                groups = draw(st.sampled_from([None, 1, c]))     # as Gluon writes it (explicit 1), depthwise
                c = c * draw(st.sampled_from([1, 2])) if groups == c else draw(SMALL)
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
                extra = draw(SMALL)
                branch = mx.sym.Convolution(x, kernel=(1, 1), num_filter=extra, name=next(names))
                x = mx.sym.Concat(x, branch, dim=1, name=next(names))
                c += extra
            else:
                x = mx.sym.Dropout(x, p=0.5, name=next(names))
            ops.append(kind)
    else:
        shapes = {"data": (batch, draw(EXTENTS))}
    if draw(st.booleans()):
        x = mx.sym.Flatten(x, name=next(names))
    for _ in range(draw(st.integers(0, 2))):
        x = mx.sym.FullyConnected(x, num_hidden=draw(EXTENTS), name=next(names))
        x = mx.sym.Activation(x, act_type="relu", name=next(names))
        ops.append("fc")
    x = mx.sym.FullyConnected(x, num_hidden=draw(SMALL), name=next(names))
    shapes["softmax_label"] = (batch,)
    return mx.sym.SoftmaxOutput(x, name="softmax"), shapes, " ".join(ops + ["fc", "softmax"])


@pytest.mark.slow
@settings(settings.get_profile(PROFILE))
@given(model=graphs(), workers=WORKERS, algo=FINDERS)
def test_plan_ends_with_a_checked_plan_or_one_line(tmp_path_factory, model, workers, algo):
    symbol, shapes, layers = model
    folder = tmp_path_factory.mktemp("fuzz")
    path, plan_path = folder / "model-symbol.json", folder / "plan.json"
    symbol.save(str(path))
    shape_args = [a for name, s in shapes.items() for a in ("--shape", f"{name}={','.join(map(str, s))}")]
    got = run_isolated(["plan", str(path), *shape_args, "--workers", str(workers), "--algo", algo, "--json",
                        "--out", str(plan_path)], folder)
    rc, out, err = got.status, got.out, got.err
    assert rc >= 0, f"killed by signal {-rc}: {err[-2000:]}"
    assert "Traceback" not in err, err
    if rc == 2:
        lines = err.strip().splitlines()
        assert out == "" and len(lines) == 1 and lines[0].startswith("tofu: error: "), err
        assert any(w in lines[0] for w in ("cannot be split", "too many", "divide")), (layers, lines[0])
        return
    assert rc == 0, (rc, err)
    doc = json.loads(out)
    assert doc["workers"] == workers and doc["algo"] == algo
    plan = Plan.load(plan_path, load_graph(str(path), shapes=shapes))      # Plan.check against the graph
    assert plan.workers == workers and plan.comm_bytes == doc["comm_bytes"]
    if workers == 1:
        assert doc["comm_bytes"] == 0


# ------------------------------------------------------------------------------------ corrupted symbol files

NASTY_VALUES = ["0", "-1", "1", "(0, 0)", "(0,)", "()", "(-1, -1)", "abc", "1e30", "99999999999", "True", "", "None",
                "(2147483648, 1)", "(1, 1, 1, 1, 1, 1, 1)", "nan", "[3, 3]"]


@st.composite
def corrupted(draw) -> tuple[str | bytes, list[str]]:
    """A valid graph's JSON document with one to three corruptions, and the shape arguments (maybe wrong)."""
    symbol, shapes, _ = draw(graphs())
    doc = json.loads(symbol.tojson())
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
    shape_args = [a for name, s in shapes.items() for a in ("--shape", f"{name}={','.join(map(str, s))}")]
    if draw(st.integers(0, 4)) == 0:
        shape_args += draw(st.sampled_from([["--shape", "data=2147483648,1"], ["--shape", "nope=1"],
                                            ["--shape", "data=0"], ["--shape", "softmax_label=3,3"]]))
    return payload, shape_args


@pytest.mark.slow
@settings(settings.get_profile(PROFILE), max_examples=settings.get_profile(PROFILE).max_examples // 3)
@given(case=corrupted(), workers=WORKERS)
def test_corrupted_symbol_files_plan_or_fail_in_one_line(tmp_path_factory, case, workers):
    payload, shape_args = case
    folder = tmp_path_factory.mktemp("corrupt")
    path = folder / "model-symbol.json"
    path.write_bytes(payload)
    got = run_isolated(["plan", str(path), *shape_args, "--workers", str(workers), "--json"], folder)
    assert got.status >= 0, f"killed by signal {-got.status}: {got.err[-2000:]}"
    assert got.status in (0, 2), (got.status, got.err[-3000:])
    if got.status == 2:
        lines = got.err.strip().splitlines()
        assert got.out == "" and len(lines) == 1 and lines[0].startswith("tofu: error: "), got.err[-3000:]
    else:
        assert json.loads(got.out)["workers"] == workers
