"""Nothing the planner sends to MXNet can kill it (issue 10, item 1).

MXNet's shape functions divide by attributes (``num_group``, ``num_groups``) unchecked, so a shard attribute
candidate of 0 used to end ``tofu plan`` with SIGFPE (status 136, no output). Two guards, each tested alone:
candidates the description rejects never reach MXNet (:func:`tofu.analysis.shard.shard_call`), and every shape
probe runs in a child process whose crash is an answer, not the planner's death
(:class:`tofu.graph.single_op.ShapeProbe`). Everything that could crash runs in a subprocess here, so that a
regression fails the test instead of killing pytest.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import mxnet as mx
import pytest

from tofu.analysis import shard
from tofu.analysis.shard import shard_call
from tofu.analysis.strategies import analyse, instantiate
from tofu.errors import AnalysisError, InputShapeError
from tofu.graph.attrs import Attrs
from tofu.graph.single_op import infer_op_shapes
from tofu.tdl.describe import describe

ENV = {**os.environ, "MXNET_SUBGRAPH_BACKEND": "NONE", "MXNET_SUBGRAPH_VERBOSE": "0", "OMP_NUM_THREADS": "1"}

# A GroupNorm description as a user would write it from docs/tdl.md (used only when operators_tdl/ has none).
# MXNet 1.9.1's gamma and beta hold one value per group; mean and std are outputs 1 and 2.
GROUP_NORM = textwrap.dedent('''
    import math
    from dataclasses import dataclass
    from tofu import registry
    from tofu.tdl.describe import Case, tdl_op
    from tofu.tdl.expr import Sum, compute, rsqrt, sqrt, square

    @dataclass(frozen=True)
    class GroupNormAttrs:
        num_groups: int = 1
        eps: float = 1e-5

    if "GroupNorm" not in registry.load_builtin_operators():
        @tdl_op("GroupNorm", inputs=("data", "gamma", "beta"), outputs=("output", "mean", "std"),
                attrs=GroupNormAttrs, cases=[Case(shapes=((2, 4, 3), (2,), (2,)), attrs={"num_groups": 2})])
        def group_norm(data, gamma, beta, attrs):
            cg = data.shape[1] // attrs.num_groups
            extents = (cg, *data.shape[2:])
            count = float(math.prod(extents))
            over = lambda n, g, body: Sum(lambda *k: body((n, g * cg + k[0], *k[1:])), extents=extents)
            stats = (data.shape[0], attrs.num_groups)
            mean = compute("mean", stats, lambda n, g: over(n, g, lambda i: data[i]) / count)
            var = compute("var", stats, lambda n, g: over(n, g, lambda i: square(data[i] - mean[n, g])) / count)
            out = lambda n, c, *x: ((data[(n, c, *x)] - mean[n, c // cg]) * rsqrt(var[n, c // cg] + attrs.eps)
                                    * gamma[c // cg] + beta[c // cg])
            return out, lambda n, g: mean[n, g], lambda n, g: sqrt(var[n, g] + attrs.eps)
''')


def run_python(code: str, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=ENV,
                          timeout=timeout)


def run_tofu(*argv: str, prelude: str = "") -> subprocess.CompletedProcess:
    """``tofu ARGV`` in a fresh process, after ``prelude`` (e.g. registering a description)."""
    return run_python(prelude + "\nimport sys\nfrom tofu.cli import main\nsys.exit(main(sys.argv[1:]))\n", *argv)


def assert_no_signal(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}: {proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


def assert_one_line_error(proc: subprocess.CompletedProcess, *words: str) -> str:
    assert_no_signal(proc)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tofu: error: "), proc.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def assert_plan(proc: subprocess.CompletedProcess, workers: int) -> dict:
    assert_no_signal(proc)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    plan = json.loads(proc.stdout)
    assert plan["workers"] == workers
    assert plan["comm_bytes"] >= 0
    return plan


# ---------------------------------------------------------------------------------------- the probe itself

def test_a_crashing_probe_is_a_rejection_and_the_next_probe_answers():
    """Convolution with num_group=0 kills MXNet's shape inference with SIGFPE: the planner gets an
    InputShapeError naming the signal, and the probes after it still agree with MXNet run in-process."""
    code = textwrap.dedent('''
        import json, mxnet as mx
        from tofu.errors import InputShapeError
        from tofu.graph.attrs import Attrs
        from tofu.graph.single_op import infer_op_shapes
        conv = dict(kernel=(3, 3), num_filter=4, no_bias=True)
        out = {}
        for attempt in range(2):        # the same crash twice: the second answer comes from the cache
            try:
                infer_op_shapes("Convolution", Attrs.of(num_group=0, **conv), [(1, 4, 8, 8), (4, 4, 3, 3)])
                out["crash"] = "no error"
            except InputShapeError as e:
                out["crash"] = str(e)
        out["after"] = infer_op_shapes("Convolution", Attrs.of(num_group=2, **conv), [(1, 4, 8, 8), (4, 2, 3, 3)])
        ref = mx.sym.Convolution(mx.sym.var("x"), num_group=2, name="c", **conv)
        out["reference"] = ref.infer_shape(x=(1, 4, 8, 8))[1]
        print(json.dumps(out))
    ''')
    proc = run_python(code)
    assert_no_signal(proc)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert "crashed (SIGFPE)" in out["crash"], out["crash"]
    assert out["after"] == out["reference"] == [[1, 4, 6, 6]]


def test_a_graph_that_crashes_shape_inference_is_one_line(tmp_path):
    sym = mx.sym.Convolution(mx.sym.var("data"), kernel=(3, 3), num_filter=4, num_group=0, name="conv")
    path = tmp_path / "group0-symbol.json"
    sym.save(str(path))
    assert_one_line_error(run_tofu("plan", str(path), "--shape", "data=1,4,8,8", "--workers", "2"), "SIGFPE")


# --------------------------------------------------------------------- candidates checked before MXNet

@pytest.mark.parametrize("num_group", [1, 4])
def test_no_shard_candidate_sets_a_group_count_to_zero(monkeypatch, num_group):
    """The description divides the channels by num_group, so a candidate of 0 fails to describe and is never
    sent to MXNet (without the check, shard_call sends dozens of them for one convolution)."""
    sent = []

    def spy(op, attrs, shapes):
        sent.append(attrs)
        if attrs["num_group"] == 0:       # never forwarded: this test must not depend on the other guard
            raise InputShapeError("num_group=0")
        return infer_op_shapes(op, attrs, shapes)

    monkeypatch.setattr(shard, "infer_op_shapes", spy)
    attrs = Attrs.of(kernel=(3, 3), num_filter=8, num_group=num_group, pad=(1, 1), no_bias=True)
    shapes = [(2, 4, 8, 8), (8, 4 // num_group, 3, 3)]
    desc = describe("Convolution", attrs, shapes, infer_op_shapes("Convolution", attrs, shapes))
    runnable = 0
    for k in (2, 4):
        for s in analyse(desc).strategies:
            inst = instantiate(desc, s, k)
            if inst is None:
                continue
            try:
                calls = [shard_call("Convolution", attrs, inst, w, desc) for w in range(k)]
            except AnalysisError:
                continue
            runnable += 1
            assert all(c.attrs["num_group"] > 0 for c in calls)
    assert runnable >= 4                   # batch, output channel, height, width at least
    assert sent and all(a["num_group"] != 0 for a in sent), [a for a in sent if a["num_group"] == 0][:3]


# ------------------------------------------------------------------------------- the reproductions

@pytest.fixture(scope="module")
def gluon_models(tmp_path_factory) -> dict[str, Path]:
    """ResNet-18 and MobileNet 1.0 from Gluon's model zoo as symbol files (the graph ``export`` writes)."""
    out = tmp_path_factory.mktemp("gluon")
    paths = {}
    for name in ("resnet18_v1", "mobilenet1.0"):
        net = mx.gluon.model_zoo.vision.get_model(name)
        paths[name] = out / f"{name}-symbol.json"
        net(mx.sym.var("data")).save(str(paths[name]))
    return paths


@pytest.mark.parametrize("model,batch,workers,algo", [
    ("resnet18_v1", 1, 2, "tofu"), ("resnet18_v1", 2, 2, "tofu"), ("resnet18_v1", 6, 4, "tofu"),
    ("mobilenet1.0", 32, 8, "spartan"),
])
def test_gluon_networks_that_died_with_sigfpe_now_plan(gluon_models, model, batch, workers, algo):
    proc = run_tofu("plan", str(gluon_models[model]), "--shape", f"data={batch},3,224,224",
                    "--workers", str(workers), "--algo", algo, "--json")
    assert_plan(proc, workers)


def test_a_group_norm_description_lists_and_plans(tmp_path):
    """Any GroupNorm description used to kill `tofu ops` and the planner (num_groups=0 tried)."""
    proc = run_tofu("ops", "--op", "GroupNorm", prelude=GROUP_NORM)
    assert_no_signal(proc)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "output:n" in proc.stdout and "MXNet kernel, 2 workers: yes" in proc.stdout

    x = mx.sym.Convolution(mx.sym.var("data"), kernel=(3, 3), num_filter=8, pad=(1, 1), name="conv")
    x = mx.sym.GroupNorm(x, num_groups=4, name="gn")
    x = mx.sym.FullyConnected(mx.sym.Activation(x, act_type="relu"), num_hidden=6, name="fc")
    path = tmp_path / "gn-symbol.json"
    mx.sym.SoftmaxOutput(x, name="softmax").save(str(path))
    for workers in (2, 4):
        assert_plan(run_tofu("plan", str(path), "--shape", "data=4,3,8,8", "--workers", str(workers), "--json",
                             prelude=GROUP_NORM), workers)
