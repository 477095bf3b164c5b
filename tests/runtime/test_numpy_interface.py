"""Models written with MXNet 1.9's numpy interface (``npx.set_np()``, Gluon blocks on ``mx.np``), whose exported
symbol files carry the interface's own operators (``_npi_add``, ``_np_reshape``, ``_npi_matmul``, ``_np_sum``,
...): refused before they were described, they train partitioned equal to one device (``tofu run --check``, the
one-device run being the reference), with the plan's bytes measured."""
import json

import mxnet as mx
import pytest

from tests.test_cli import run


class _Attention(mx.gluon.HybridBlock):
    """A transformer block as a user writes it on ``mx.np``: an arange position term, reshapes and transposes to
    heads, einsum, tril, softmax, matmul, a residual LayerNorm, a feed-forward, a leaky gate by comparisons and where
    (numpy's booleans), then a mean (normalised, and its tensordot), a sum and an exp pooled and concatenated."""

    def __init__(self):
        super().__init__()
        dense = dict(flatten=False)
        self.q, self.k, self.v = (mx.gluon.nn.Dense(16, **dense) for _ in range(3))
        self.o, self.ff2 = mx.gluon.nn.Dense(16, **dense), mx.gluon.nn.Dense(16, **dense)
        self.ff = mx.gluon.nn.Dense(32, activation="relu", **dense)
        self.ln, self.out = mx.gluon.nn.LayerNorm(), mx.gluon.nn.Dense(5)

    def hybrid_forward(self, F, x):
        x = x + F.np.arange(16).reshape(1, 1, 16) * 0.01                     # a position term
        heads = [f(x).reshape(4, 6, 2, -1).transpose(0, 2, 1, 3) for f in (self.q, self.k, self.v)]
        q, k, v = heads
        a = F.npx.softmax(F.np.tril(F.np.einsum("bhqd,bhkd->bhqk", q, k)) / F.np.sqrt(8.0), axis=-1)
        x = self.ln(x + self.o(F.np.matmul(a, v).transpose(0, 2, 1, 3).reshape(4, 6, -1)))
        x = x + self.ff2(self.ff(x))
        x = F.np.where(x > 0, x, 0.1 * x) * (x >= -1) + F.np.where(x < 1, 0.5, x)   # booleans, numpy's where
        m = x.mean(axis=1) / F.np.linalg.norm(x.mean(axis=1), axis=1, keepdims=True)
        m = m + F.np.tensordot(m, F.np.ones((16, 16)) * 0.01, axes=1)
        return self.out(F.np.tanh(F.np.concatenate([m, F.np.exp(-m) * 0.1, x.sum(axis=1) - 1], axis=-1)))


class _ConvNet(mx.gluon.HybridBlock):
    """A convolutional net with numpy arithmetic: square, sqrt, maximum, global mean and max pooling, stack,
    swapaxes, moveaxis, dot with a parameter, npx.reshape's special codes, expand_dims, squeeze, ones_like, flip,
    std, eye, diag, roll, round, tensordot."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = mx.gluon.nn.Conv2D(8, 3, padding=1), mx.gluon.nn.Conv2D(8, 3, padding=1)
        self.bn, self.out = mx.gluon.nn.BatchNorm(), mx.gluon.nn.Dense(4)
        self.w = self.params.get("w", shape=(8, 6))

    def hybrid_forward(self, F, x, w):
        h = F.np.maximum(self.bn(self.c1(x)), 0.0)
        h = h + F.np.sqrt(F.np.square(self.c2(h)) + 1.0)
        g = h.mean(axis=(2, 3)) + 0.1 * F.np.std(h, axis=(2, 3))      # std: MXNet gives it no gradient
        s = F.np.moveaxis(F.np.swapaxes(F.np.stack([g, h.max(axis=3).sum(axis=2)], axis=1), 1, 2), 2, 0)
        d = F.npx.reshape(F.np.dot(s, w), (-2, -2, -6, 2, 3))              # (2, b, 2, 3)
        e = F.np.squeeze(F.np.expand_dims(d.sum(axis=0), 1), axis=1).reshape(-1, 6)
        e = F.np.dot(e, F.np.eye(6) * 0.5 + 0.5) + F.np.diag(w) + F.np.round(F.np.roll(e, 1, axis=1), 1)
        e = e + 0.1 * F.np.tensordot(e, F.np.eye(6), axes=([1], [0]))
        return self.out(F.np.concatenate([F.np.tanh(e) / 3.0 - 0.5 * e + F.np.ones_like(e), F.np.flip(g, 1)], axis=1))


class _Math(mx.gluon.HybridBlock):
    """Numpy's math with no legacy twin: arctan2, copysign, ldexp, polyval of a parameter, argmin, a batched solve and
    Cholesky factor, the n-th difference, any (a boolean that crosses devices where a plan splits what it reads) and
    where on two scalars, trace and diagonal of stacks of matrices."""

    def __init__(self):
        super().__init__()
        self.fc, self.out = mx.gluon.nn.Dense(16), mx.gluon.nn.Dense(3)
        self.coef = self.params.get("coef", shape=(3,))

    def hybrid_forward(self, F, x, coef):
        h = self.fc(x)
        h = F.np.arctan2(h, F.np.abs(h) + 0.5) + 0.5 * F.np.copysign(h, h - 0.1) + 0.1 * F.np.ldexp(h, 1.0)
        h = F.np.polyval(coef, F.np.tanh(h))
        h = h + 0.1 * F.npx.one_hot(F.np.argmin(h, axis=1), 16)             # an int64 position, one-hot again
        m = F.np.tanh(h.reshape(-1, 4, 4))
        s = F.np.linalg.solve(F.np.eye(4) * 3.0 + 0.1 * m, m)
        c = F.np.linalg.cholesky(F.np.eye(4) * 2.0 + 0.05 * F.np.matmul(m, m.transpose(0, 2, 1)))
        d = F.np.diff(h, axis=1) * F.np.where(F.np.any(h > 0, axis=1, keepdims=True), 1.0, -1.0)
        t = (F.np.trace(s, axis1=1, axis2=2) + F.np.diagonal(c, axis1=1, axis2=2).sum(axis=1)).reshape(-1, 1)
        return self.out(F.np.concatenate([d * t, F.np.diagonal(s + c, offset=1, axis1=1, axis2=2)], axis=1))


def _export(block, shape, path):
    """``block`` built, run once and exported under numpy semantics (restored after): the symbol file a user
    of the numpy interface writes; returns the operators it holds."""
    with mx.util.np_shape(True), mx.util.np_array(True):
        net = block()
        net.initialize()
        net.hybridize()
        net(mx.np.ones(shape))
        net.export(str(path))
    return {n["op"] for n in json.loads((path.parent / f"{path.name}-symbol.json").read_text())["nodes"]}


@pytest.mark.parametrize("block,shape,numpy_ops", [
    (_Attention, (4, 6, 16), {"_np_reshape", "_np_transpose", "_npi_einsum", "_npi_matmul", "_npi_tril",
                              "_npi_true_divide_scalar", "_npi_add", "_npi_mean", "_np_sum", "_npi_exp",
                              "_npi_concatenate", "_npi_tanh", "_npi_arange", "_npi_where", "_npi_where_lscalar",
                              "_npi_greater_scalar", "_npi_multiply", "_npi_tensordot_int_axes", "_npi_ones",
                              "_npi_norm"}),
    (_ConvNet, (8, 3, 8, 8), {"_npi_sqrt", "_npi_square", "_npi_mean", "_np_max", "_npi_stack", "_np_moveaxis",
                              "_np_dot", "_npx_reshape", "_np_squeeze", "_npi_concatenate", "_npi_subtract",
                              "_npi_full_like", "_npi_flip", "_npi_std", "_npi_eye", "_np_diag", "_np_roll",
                              "_npi_around", "_npi_tensordot"}),
    (_Math, (6, 12), {"_npi_arctan2", "_npi_copysign", "_npi_ldexp_scalar", "_npi_polyval", "_npi_argmin",
                      "_npi_solve", "_npi_cholesky", "_npi_diff", "_np_any", "_npi_where_scalar2", "_np_trace",
                      "_np_diagonal"}),
], ids=["attention", "convnet", "math"])
@pytest.mark.parametrize("workers,algo", [(2, "tofu"), (3, "tofu"), (4, "tofu"), (4, "data-parallel")])
def test_a_numpy_interface_model_trains_equal_to_one_device(capsys, tmp_path, block, shape, numpy_ops, workers,
                                                             algo):
    ops = _export(block, shape, tmp_path / "net")
    assert numpy_ops <= ops, f"the export holds {sorted(ops)}"
    rc, out, err = run(capsys, "run", str(tmp_path / "net-symbol.json"), "--shape", "data=" + ",".join(map(str, shape)),
                       "--workers", str(workers), "--algo", algo, "--steps", "2", "--check", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["check_passed"] and doc["gradient_max_rel_diff"] < 1e-4
    assert doc["measured_comm_bytes"] == doc["predicted_comm_bytes"]


@pytest.mark.parametrize("op,attrs,inputs,says", [
    ("_np_sum", {"axis": "None"}, 1, "_np_sum: a numpy operator's 0-d result"),
    ("_npi_hstack", {"num_args": "2"}, 2, "_npi_hstack, an operator of MXNet's numpy interface that tofu does not"),
    ("_npi_hstack", {"num_args": "2"}, -2, "_npi_hstack, an operator of MXNet's numpy interface that tofu does not"),
], ids=["scalar-result", "undescribed", "undescribed-on-the-input"])
def test_a_numpy_operator_tofu_cannot_take_is_named_with_its_reason(capsys, tmp_path, op, attrs, inputs, says):
    """numpy's 0-d arrays (a sum over every axis) are not described, nor is every numpy operator (hstack, whose
    shapes MXNet 1.x infers under numpy semantics only): one line naming the op and why, exit 2, not a shape
    error that blames the input the user gave (``inputs`` < 0: the op reads the input itself, whose given shape
    MXNet's legacy inference then contradicts)."""
    h = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=4, name="fc")
    doc = json.loads(h.tojson())
    read = 0 if inputs < 0 else len(doc["nodes"]) - 1
    doc["nodes"].append({"op": op, "name": "np_op", "attrs": attrs, "inputs": [[read, 0, 0]] * abs(inputs)})
    doc["heads"] = [[len(doc["nodes"]) - 1, 0, 0]]
    (tmp_path / "model.json").write_text(json.dumps(doc))
    rc, _, err = run(capsys, "plan", str(tmp_path / "model.json"), "--shape", "data=8,6", "--workers", "2")
    assert rc == 2
    assert says in err and "describ" in err and len(err.strip().splitlines()) == 1


def test_a_numpy_interface_export_loads_trains_and_saves_for_gluon(capsys, tmp_path):
    """The export's .params (saved in numpy shape semantics, which MXNet loads in those only) start the run, and
    what ``--save`` writes loads back into Gluon under numpy semantics: the trained values, not the initial."""
    import numpy as np

    from tofu.runtime.data import read_params

    _export(_ConvNet, (8, 3, 8, 8), tmp_path / "net")
    symbol, start, out = tmp_path / "net-symbol.json", tmp_path / "net-0000.params", tmp_path / "trained.params"
    rc, _, err = run(capsys, "run", str(symbol), "--shape", "data=8,3,8,8", "--load", str(start), "--workers", "2",
                     "--steps", "2", "--save", str(out))
    assert rc == 0, err
    with mx.util.np_shape(True), mx.util.np_array(True):
        net = mx.gluon.SymbolBlock.imports(str(symbol), ["data"], str(out))
        gluon = {p.name: p.data().asnumpy() for p in net.collect_params().values()}
        assert net(mx.np.ones((8, 3, 8, 8))).shape == (8, 4)
    saved = {k.split(":", 1)[1]: v.asnumpy() for k, v in read_params(out).items()}
    initial = {k.split(":", 1)[1]: v.asnumpy() for k, v in read_params(start).items()}
    assert set(gluon) == set(saved) == set(initial)
    assert all(np.array_equal(gluon[k], saved[k]) for k in gluon)
    assert any(not np.array_equal(saved[k], initial[k]) for k in saved)


def test_a_numpy_operator_is_built_on_the_device_its_scope_names():
    """The rewriter builds a numpy-interface op from JSON (its mx.sym function takes numpy symbols only): the node
    reads the given inputs, carries its attributes and name, and is placed where the enclosing scope says, as a
    symbol function's node is."""
    from tofu.rewrite.apply_plan import _op_function
    from tofu.rewrite.comm import scope

    x, y = mx.sym.var("x"), mx.sym.var("y")
    with scope(3):
        built = _op_function("_npi_true_divide_scalar")(_op_function("_npi_add")(x, y, name="s"), name="q",
                                                        scalar=2.0, is_int=False)
    nodes = json.loads(built.tojson())["nodes"]
    ops = {n["name"]: n for n in nodes}
    assert ops["q"]["op"] == "_npi_true_divide_scalar" and ops["s"]["op"] == "_npi_add"
    assert ops["q"]["attrs"]["scalar"] == "2.0" and ops["q"]["attrs"]["__ctx_group__"] == "dev3"
    assert ops["s"]["attrs"]["__ctx_group__"] == "dev3"
    assert [nodes[i]["name"] for i, _, _ in ops["s"]["inputs"]] == ["x", "y"]
