"""Run-time inputs read as indices or lengths (tofu.runtime.data): valid integers by default, derived from the
operators' TDL descriptions; ``NAME=int:LOW:HIGH`` overrides; values that would drive a kernel out of bounds
refused before MXNet sees them.

Before, every input that fed no Embedding or softmax label was standard normal: SequenceMask's lengths came out
negative and MXNet wrote out of bounds (the process aborted, exit 134).
"""
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest

from tofu.errors import TofuError
from tofu.graph.mxnet_import import import_symbol
from tofu.runtime.data import (InputOptionError, InputValueError, IntInput, check_inputs, index_uses,
                               parse_input_option, synthetic_batch)

T, B = 5, 3
_ENV = {**os.environ, "MXNET_SUBGRAPH_BACKEND": "NONE", "MXNET_SUBGRAPH_VERBOSE": "0", "OMP_NUM_THREADS": "1"}
"""What a child process of these tests runs MXNet with (tofu's settings)."""


def _sequence_graph(op="SequenceMask"):
    """FullyConnected over (T, B, 2) data, then ``op`` with lengths from the input ``seq_len``."""
    data, lengths = mx.sym.var("data"), mx.sym.var("seq_len")
    hidden = mx.sym.FullyConnected(data, num_hidden=4, flatten=False, name="fc")
    out = getattr(mx.sym, op)(hidden, lengths, use_sequence_length=True, name="seq")
    return import_symbol(mx.sym.make_loss(mx.sym.sum(out), name="loss"), {"data": (T, B, 2), "seq_len": (B,)})


def _gather_graph():
    """gather_nd of a (3, 4, 2) activation at indices (2, 6): row 0 indexes extent 3, row 1 extent 4."""
    act = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=24, name="fc").reshape((3, 4, 2))
    out = mx.sym.gather_nd(act, mx.sym.var("indices"))
    return import_symbol(mx.sym.make_loss(mx.sym.sum(out), name="loss"), {"data": (1, 5), "indices": (2, 6)})


# ------------------------------------------------------------------------------------------- defaults

@pytest.mark.parametrize("op,low", [("SequenceMask", 0), ("SequenceReverse", 0), ("SequenceLast", 1)])
def test_sequence_lengths_are_valid_integers_by_default(op, low):
    graph = _sequence_graph(op)
    use = index_uses(graph)["seq_len"]
    assert (use.low, use.high) == (low, T)
    assert f"{op} node 'seq'" in use.reason
    for seed in range(20):
        lengths = synthetic_batch(graph, seed)["seq_len"]
        assert np.array_equal(lengths, np.round(lengths)) and lengths.min() >= low and lengths.max() <= T


def test_gather_indices_lie_in_every_dimension_they_index():
    """indices[0] indexes extent 3 ([0, 2]), indices[1] extent 4 ([0, 3]): one range serves both. No negative
    index is drawn, though MXNet's forward counts them from the end: its backward does not (next test)."""
    graph = _gather_graph()
    use = index_uses(graph)["indices"]
    assert (use.low, use.high) == (0, 2)
    values = np.concatenate([synthetic_batch(graph, seed)["indices"].ravel() for seed in range(10)])
    assert values.min() == 0 and values.max() == 2
    assert "data" not in index_uses(graph)                 # read as values, standard normal


def test_token_ids_and_labels_keep_their_ranges():
    """Embedding and SoftmaxOutput's label, which the runtime knew by name before, now come from their
    descriptions, through the Reshape between the label and the loss, with the same draws."""
    from tofu.api import load_graph

    uses = index_uses(load_graph("rnn-tiny"))
    assert {k: (u.low, u.high) for k, u in uses.items()} == {"data": (0, 19), "softmax_label": (0, 19)}
    assert "Embedding node 'embed'" in uses["data"].reason


# ------------------------------------------------------------------------------------------ overrides

def test_parse_input_option():
    assert parse_input_option("seq_len=int:1:20") == IntInput("seq_len", 1, 20)
    assert parse_input_option("idx=int:-3:-1") == IntInput("idx", -3, -1)


@pytest.mark.parametrize("text,says", [
    ("seq_len", "no input name before '='"),
    ("=int:1:2", "no input name before '='"),
    ("seq_len=1:20", "is not int:LOW:HIGH"),
    ("seq_len=float:1:20", "is not int:LOW:HIGH"),
    ("seq_len=int:1", "is not int:LOW:HIGH"),
    ("seq_len=int:a:2", "must be integers"),
    ("seq_len=int:1.5:2", "must be integers"),
    ("seq_len=int:5:1", "LOW 5 is greater than HIGH 1"),
])
def test_parse_input_option_refuses_with_one_line(text, says):
    with pytest.raises(InputOptionError, match=says) as err:
        parse_input_option(text)
    assert isinstance(err.value, TofuError) and "\n" not in str(err.value)


def test_an_override_sets_an_inputs_range():
    graph = _sequence_graph()
    lengths = synthetic_batch(graph, 1, [IntInput("seq_len", 2, 2)])["seq_len"]
    assert (lengths == 2).all()
    data = synthetic_batch(graph, 1, [IntInput("data", -1, 1)])["data"]     # any input, index or not
    assert set(np.unique(data)) <= {-1.0, 0.0, 1.0}


def test_an_override_of_an_unknown_input_names_the_inputs():
    with pytest.raises(InputOptionError, match=r"no input 'lengths' \(its inputs: data, seq_len\)"):
        synthetic_batch(_sequence_graph(), 1, [parse_input_option("lengths=int:1:2")])


@pytest.mark.parametrize("text", ["seq_len=int:-2:-1", "seq_len=int:0:6"])
def test_an_override_past_the_valid_range_is_refused_before_mxnet(text):
    """Refused from the range itself, whatever the draw (a range one past the end may draw no bad value)."""
    with pytest.raises(InputValueError) as err:
        synthetic_batch(_sequence_graph(), 1, [parse_input_option(text)])
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"input 'seq_len' given {text.split('=')[1]}, outside [0, 5]: SequenceMask node 'seq' "
                              f"reads it as an index or a length")


# ------------------------------------------------------------------------------------------ the check

def test_check_refuses_lengths_out_of_range_and_nan():
    graph = _sequence_graph("SequenceLast")
    check_inputs(graph, {"seq_len": np.array([1, 5, 3], np.float32)})
    for bad in ([0, 2, 3], [1, 6, 3], [1, np.nan, 2]):
        with pytest.raises(InputValueError, match="input 'seq_len' holds"):
            check_inputs(graph, {"seq_len": np.array(bad, np.float32)})


def test_check_refuses_gather_indices_past_either_end():
    graph = _gather_graph()
    ok = np.array([[0, 2, 0, 1, 2, 0]] * 2, np.float32)
    check_inputs(graph, {"indices": ok})
    with pytest.raises(InputValueError, match=r"holds -1 at \[0, 0\], outside \[0, 2\]"):
        check_inputs(graph, {"indices": np.where(ok == 0, -1, ok)})
    with pytest.raises(InputValueError, match=r"holds 3 at \[0, 1\], outside \[0, 2\]"):
        check_inputs(graph, {"indices": np.where(ok == 2, 3, ok)})


_GATHER_BACKWARD = """
import mxnet as mx, numpy as np
a = mx.nd.array(np.arange(48).reshape(12, 4)); a.attach_grad()
with mx.autograd.record():
    y = mx.nd.gather_nd(a, mx.nd.array([[%s, 3]]))
y.backward()
mx.nd.waitall()
print(np.nonzero(a.grad.asnumpy().sum(1))[0].tolist(), flush=True)
"""


def test_why_negative_gather_indices_are_not_drawn():
    """MXNet's gather_nd forward reads index -1 as the last row, but its backward does not add that row's gradient
    there: it writes outside the gradient, and the process dies (CPU, MXNet 1.9.1); index 11 is fine."""
    good = subprocess.run([sys.executable, "-c", _GATHER_BACKWARD % 11], capture_output=True, text=True,
                          timeout=120, env=_ENV)
    assert good.returncode == 0 and good.stdout.strip() == "[3, 11]", good.stderr[-2000:]
    bad = subprocess.run([sys.executable, "-c", _GATHER_BACKWARD % -1], capture_output=True, text=True,
                         timeout=120, env=_ENV)
    assert bad.returncode != 0 or bad.stdout.strip() != "[3, 11]", bad.stdout


_RUN_SEQUENCE_MASK = """
import sys
import mxnet as mx
from tofu.cli import main
data, lengths = mx.sym.var("data"), mx.sym.var("seq_len")
hidden = mx.sym.FullyConnected(data, num_hidden=4, flatten=False, name="fc")
out = mx.sym.SequenceMask(hidden, lengths, use_sequence_length=True, name="mask")
mx.sym.make_loss(mx.sym.sum(out), name="loss").save(sys.argv[1])
sys.exit(main(["run", sys.argv[1], "--shape", "data=4,2,3", "--shape", "seq_len=2", "--workers", "2",
               "--steps", "2", "--check"]))
"""


def test_a_network_with_sequence_lengths_trains(tmp_path):
    """Exit 134 before (MXNet aborted on negative lengths); now the lengths are valid and --check passes."""
    done = subprocess.run([sys.executable, "-c", _RUN_SEQUENCE_MASK, str(tmp_path / "mask.json")],
                          capture_output=True, text=True, timeout=300, env=_ENV)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "passed" in done.stdout


def test_the_input_option_of_tofu_run(capsys, tmp_path):
    """``--input NAME=int:LOW:HIGH`` reaches the batch; a range outside what the op reads is refused in one line."""
    import json

    import mxnet as mx

    from tests.test_cli import assert_one_line_error, run

    x = mx.sym.SequenceMask(mx.sym.var("data"), mx.sym.var("lengths"), use_sequence_length=True, name="mask")
    y = mx.sym.FullyConnected(mx.sym.reshape(mx.sym.transpose(x, axes=(1, 0, 2)), shape=(4, -1)), num_hidden=3,
                              name="fc")
    path = tmp_path / "seq.json"
    y.save(str(path))
    shapes = ("--shape", "data=5,4,2", "--shape", "lengths=4")
    rc, out, err = run(capsys, "run", str(path), *shapes, "--workers", "2", "--steps", "1", "--check", "--json",
                       "--input", "lengths=int:2:2")
    assert rc == 0, err
    assert json.loads(out)["check_passed"]
    losses = {}
    for n in (1, 5):               # every row masked after its first step, or none masked: other losses
        rc, out, err = run(capsys, "run", str(path), *shapes, "--workers", "2", "--steps", "1", "--json",
                           "--input", f"lengths=int:{n}:{n}")
        assert rc == 0, err
        losses[n] = json.loads(out)["losses"][0]
    assert losses[1] != losses[5]
    rc, out, err = run(capsys, "run", str(path), *shapes, "--workers", "2", "--steps", "1", "--input",
                       "lengths=int:-3:2")
    assert_one_line_error(rc, out, err, "lengths")
    rc, out, err = run(capsys, "run", str(path), *shapes, "--workers", "2", "--input", "lengths=float:1:2")
    assert_one_line_error(rc, out, err, "lengths=float:1:2")
