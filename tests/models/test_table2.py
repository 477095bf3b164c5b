"""Our model sizes against the paper's Table 2 (3W: weights, gradients and one optimizer buffer, float32).

The paper's figures are transcribed here from the paper, independently of ``tofu.models.paper``, and our 3W
is recomputed from the parameter shapes MXNet infers for the built symbols (not from the table script).
"""
import math
import os
from pathlib import Path

for _key, _value in (("MXNET_SUBGRAPH_BACKEND", "NONE"), ("MXNET_SUBGRAPH_VERBOSE", "0"), ("OMP_NUM_THREADS", "1")):
    os.environ.setdefault(_key, _value)

import pytest  # noqa: E402

from tofu.models import PAPER_MODELS, ModelOptions, build_model  # noqa: E402
from tofu.models.paper import TABLE2_GIB  # noqa: E402

GIB = 2**30
PAPER = {  # Table 2, "GB", rows by width / hidden size, columns by depth / layers
    **{f"wresnet-{d}-{w}": g for w, row in {4: (4.2, 7.8, 10.5), 6: (9.6, 17.1, 23.4), 8: (17.1, 30.6, 41.7),
                                            10: (26.7, 47.7, 65.1)}.items() for d, g in zip((50, 101, 152), row)},
    **{f"rnn-{n}-{h}": g for h, row in {"4k": (8.4, 11.4, 14.4), "6k": (18.6, 28.5, 32.1),
                                        "8k": (33.0, 45.3, 57.0)}.items() for n, g in zip((6, 8, 10), row)},
}
RNN_OUTLIER = "rnn-8-6k"  # breaks its own row's linearity in L; see test_rnn_8_6k_is_the_papers_outlier


def param_shapes(name: str) -> dict[str, tuple[int, ...]]:
    model = build_model(name, ModelOptions(batch=1, seq_len=2))  # parameter shapes depend on neither
    args = model.symbol.infer_shape(**model.shapes())[0]
    return {n: s for n, s in zip(model.symbol.list_arguments(), args) if n not in model.shapes()}


def three_w_gib(shapes) -> float:
    return 3 * 4 * sum(math.prod(s) for s in shapes.values()) / GIB


def rnn_as_the_paper_counts(shapes) -> dict:
    """The LSTM layers' weights less the first layer's input matrix: no embedding, no softmax projection."""
    return {n: s for n, s in shapes.items() if n.startswith("lstm_") and n != "lstm_l0_i2h_weight"}


def test_transcriptions_agree():
    assert PAPER == TABLE2_GIB and set(PAPER) == set(PAPER_MODELS)


@pytest.mark.parametrize("name", [m for m in PAPER_MODELS if m.startswith("wresnet")])
def test_wresnet_3w_within_5_percent_of_table2(name):
    ours = three_w_gib(param_shapes(name))
    assert abs(ours / PAPER[name] - 1) < 0.05, (name, ours, PAPER[name])


def test_table2_unit_is_gib():
    """In 2^30 bytes every WResNet is within 2.5% of the paper; in 10^9 bytes all are 5% or more above it."""
    ours = {m: three_w_gib(param_shapes(m)) for m in PAPER_MODELS if m.startswith("wresnet")}
    assert max(abs(g / PAPER[m] - 1) for m, g in ours.items()) < 0.025
    assert min(g * GIB / 1e9 / PAPER[m] - 1 for m, g in ours.items()) > 0.05


@pytest.mark.parametrize("name", [m for m in PAPER_MODELS if m.startswith("rnn") and m != RNN_OUTLIER])
def test_rnn_3w_as_the_paper_counts_within_5_percent_of_table2(name):
    shapes = param_shapes(name)
    ours = three_w_gib(rnn_as_the_paper_counts(shapes))
    assert abs(ours / PAPER[name] - 1) < 0.05, (name, ours, PAPER[name])
    # Our whole model is larger: the embedding and the softmax projection (vocab 10000) and that matrix.
    assert three_w_gib(shapes) > ours


def test_rnn_8_6k_is_the_papers_outlier():
    """The paper's 28.5 for RNN-8-6K is 12% above ours, but its own row (18.6 at 6 layers, 32.1 at 10) is
    linear in L elsewhere; the row's midpoint 25.35 is within 5% of ours."""
    ours = three_w_gib(rnn_as_the_paper_counts(param_shapes(RNN_OUTLIER)))
    assert abs(ours / PAPER[RNN_OUTLIER] - 1) > 0.05
    midpoint = (PAPER["rnn-6-6k"] + PAPER["rnn-10-6k"]) / 2
    assert abs(ours / midpoint - 1) < 0.05


@pytest.mark.parametrize("h", ["4k", "6k", "8k"])
def test_rnn_hidden_sizes_are_binary(h):
    """Each row's growth per layer, (3W(10) - 3W(6)) / 4, cancels whatever the paper adds outside the layers;
    it is 3 x 4 bytes x 8H^2 in GiB with our H (4096, 6144, 8192) within 1% (1.5, 3.375, 6.0: exact), and 2.4%
    (10^9 bytes) or 4.6% (GiB) off with H = 1000 x h."""
    per_layer = (PAPER[f"rnn-10-{h}"] - PAPER[f"rnn-6-{h}"]) / 4
    hidden = param_shapes(f"rnn-6-{h}")["lstm_l1_h2h_weight"][1]
    assert hidden == int(h[0]) * 1024
    assert abs(12 * 8 * hidden**2 / GIB / per_layer - 1) < 0.01
    decimal = int(h[0]) * 1000
    for unit in (GIB, 1e9):
        assert abs(12 * 8 * decimal**2 / unit / per_layer - 1) > 0.02


def test_models_doc_is_generated_from_the_current_zoo():
    """docs/models.md lists each model's parameter count as the symbol has it (regenerate with ``make docs``)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    for name in [*PAPER_MODELS, "rnn-4-8k"]:
        count = sum(math.prod(s) for s in param_shapes(name).values())
        assert f"| `{name}` | {count:,} |" in doc, name
