"""A normalization whose statistics the model reads (``output_mean_var=True``): MXNet's BatchNorm, LayerNorm and
GroupNorm ignore the gradient that reaches their mean and standard-deviation outputs (their backward reads the
first output's alone). The statistics exchange that runs them on shards gave those outputs a gradient, so a
model reading a batch mean trained differently from one device (``--check`` failed: gradients off by 100%); and
the byte count charged a gradient back for each statistic sent to another device, which MXNet never sends.

References: MXNet's own gradient pass on one device (the statistics read against the same graph with them under
BlockGrad), the one-device run (``tofu run --check``), and the runtime's measured ``_CrossDeviceCopy`` bytes."""
import json

import mxnet as mx
import numpy as np
import pytest

from tests.operators.test_conformance import random_inputs
from tests.test_cli import run
from tofu import registry
from tofu.graph.gradients import NO_GRADIENT_OPS, NOT_DIFFERENTIABLE
from tofu.graph.ir import IGNORED_OUTPUT_GRADIENTS, LOSS_OPS
from tofu.graph.single_op import num_visible_outputs, op_symbol

S = mx.sym


def _norms():
    x = S.var("data")
    return {"BatchNorm": (S.BatchNorm(x, output_mean_var=True, fix_gamma=False, name="n"), (4, 3, 2)),
            "LayerNorm": (S.LayerNorm(x, output_mean_var=True, name="n"), (4, 3, 2)),
            "GroupNorm": (S.GroupNorm(x, num_groups=1, output_mean_var=True, name="n"), (4, 2, 2, 2))}


@pytest.mark.parametrize("op", sorted(_norms()))
def test_mxnet_gives_no_gradient_through_the_statistics(op):
    """The fact the runtime follows, on MXNet's own executor: reading the statistics changes no gradient."""
    norm, shape = _norms()[op]

    def gradients(blocked: bool):
        stats = [S.BlockGrad(norm[i]) if blocked else norm[i] for i in (1, 2)]
        loss = S.MakeLoss(S.sum(S.square(norm[0])) + sum(S.sum(S.square(s)) * 3.0 for s in stats))
        ex = loss.simple_bind(mx.cpu(), data=shape)
        for name, value in ex.arg_dict.items():
            value[:] = np.random.RandomState(len(name)).uniform(0.5, 2.0, value.shape)
        ex.forward(is_train=True)
        ex.backward()
        return {name: g.asnumpy().copy() for name, g in ex.grad_dict.items()}

    read, blocked = gradients(False), gradients(True)
    assert set(read) == {"data", "n_gamma", "n_beta"}
    assert np.abs(read["data"]).max() > 0
    for name in read:
        np.testing.assert_array_equal(read[name], blocked[name])


def _ignored_outputs(op, case) -> frozenset:
    """The outputs i > 0 of ``op`` on ``case`` whose gradient MXNet's backward ignores: a loss reading every
    output (weighted apart) gives every input the same gradient with output i under BlockGrad as without."""
    inputs = random_inputs(case)
    names = [f"in{i}" for i in range(len(inputs))]
    node = op_symbol(op, case.parsed_attrs(), len(inputs))
    n = num_visible_outputs(op, case.parsed_attrs(), len(inputs))

    def gradients(blocked):
        terms = [S.sum(S.square(S.Cast(S.BlockGrad(node[i]) if i == blocked else node[i], dtype="float32")))
                 * (1.0 + i) for i in range(n)]
        loss = S.MakeLoss(S.add_n(*terms))
        args = {a: mx.nd.array(x, dtype=x.dtype) for a, x in zip(names, inputs) if a in loss.list_arguments()}
        grads = {a: mx.nd.zeros(x.shape, dtype=x.dtype) for a, x in args.items()}
        _, _, aux = loss.infer_shape(**{a: x.shape for a, x in args.items()})
        ex = loss.bind(mx.cpu(), args, args_grad=grads, grad_req="write",
                       aux_states={a: mx.nd.ones(s) for a, s in zip(loss.list_auxiliary_states(), aux)})
        ex.forward(is_train=True)
        ex.backward()
        return {a: g.asnumpy().copy() for a, g in grads.items()}

    read = gradients(-1)
    return frozenset(i for i in range(1, n)
                     if all(np.array_equal(read[a], g) for a, g in gradients(i).items()))


def test_the_table_of_ignored_output_gradients_is_mxnets():
    """Every described op with several visible outputs, on every case: the outputs whose gradient MXNet ignores
    are the table's (tofu.graph.ir.IGNORED_OUTPUT_GRADIENTS), which the byte count and the search read."""
    specs = registry.load_builtin_operators()
    cases = [(op, case) for op, spec in sorted(specs.items()) for case in spec.cases
             if op not in NO_GRADIENT_OPS | NOT_DIFFERENTIABLE | LOSS_OPS
             and num_visible_outputs(op, case.parsed_attrs(), len(case.shapes)) > 1]
    assert {op for op, _ in cases} >= set(IGNORED_OUTPUT_GRADIENTS) | {"SliceChannel", "moments"}
    for op, case in cases:
        ignored = _ignored_outputs(op, case)
        assert ignored == IGNORED_OUTPUT_GRADIENTS.get(op, frozenset()), (op, case)


def _batch_mean(path):
    h = S.FullyConnected(S.var("data"), num_hidden=8, name="fc")
    bn = S.BatchNorm(h, output_mean_var=True, name="bn")
    S.SoftmaxOutput(S.broadcast_add(bn[0], S.reshape(bn[1], (1, 8))), name="softmax").save(str(path))
    return "data=8,6"


def _conv_inv_std(path):
    c = S.Convolution(S.var("data"), num_filter=8, kernel=(1, 1), name="conv")
    bn = S.BatchNorm(c, output_mean_var=True, fix_gamma=False, name="bn")
    y = S.broadcast_add(bn[0], S.reshape(bn[2], (1, 8, 1, 1)))
    S.SoftmaxOutput(S.FullyConnected(y, num_hidden=4, name="out"), name="softmax").save(str(path))
    return "data=8,3,4,4"


def _layer_stats(path):
    h = S.FullyConnected(S.var("data"), num_hidden=8, flatten=False, name="fc")
    ln = S.LayerNorm(h, output_mean_var=True, name="ln")
    y = S.broadcast_add(ln[0], ln[1]) + S.broadcast_mul(ln[0], ln[2])
    S.SoftmaxOutput(S.FullyConnected(y, num_hidden=4, name="out"), name="softmax").save(str(path))
    return "data=2,1,6"         # 4 workers split the normalized features: LayerNorm's exchange


def _group_stats(path):
    c = S.Convolution(S.var("data"), num_filter=8, kernel=(1, 1), name="conv")
    gn = S.GroupNorm(c, num_groups=2, output_mean_var=True, name="gn")
    y = S.broadcast_add(gn[0], S.reshape(S.sum(gn[1]) + S.sum(gn[2]), (1, 1, 1, 1)))
    S.SoftmaxOutput(S.FullyConnected(y, num_hidden=4, name="out"), name="softmax").save(str(path))
    return "data=8,3,4,4"


# each with a plan that runs the normalization by its statistics exchange (the one that gave them a gradient),
# and the tofu plan
@pytest.mark.parametrize("build,algo,workers", [
    (_batch_mean, "data-parallel", 2), (_batch_mean, "tofu", 2), (_conv_inv_std, "spartan", 2),
    (_layer_stats, "tofu", 4), (_group_stats, "tofu", 2)])
def test_a_model_reading_its_statistics_trains_as_one_device_with_the_predicted_bytes(capsys, tmp_path, build,
                                                                                         algo, workers):
    path = tmp_path / "model.json"
    shape = build(path)
    rc, out, err = run(capsys, "run", str(path), "--shape", shape, "--workers", str(workers), "--algo", algo,
                       "--steps", "2", "--check", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["check_passed"] and doc["gradient_max_rel_diff"] < 1e-4, doc
    assert doc["measured_comm_bytes"] == doc["predicted_comm_bytes"]
