"""Model zoo: a model name and :class:`ModelOptions` -> a :class:`Model` (forward Symbol + input shapes).

Names are parsed, not listed:

- ``wresnet-{depth}-{widen}``: Wide ResNet on ImageNet widened as in the paper (every convolution's channels),
  depth 50, 101 or 152, widening factor 4, 6, 8 or 10 (the paper's grid) or 1, 2 (1 is ResNet, for checks);
- ``rnn-{layers}-{hidden}``: stacked-LSTM language model, hidden written ``4k`` (4096), ``6k``, ``8k`` or as a
  plain integer (``rnn-2-64``); the paper's 21 configurations (:data:`PAPER_MODELS`) and ``rnn-4-8k``, which its
  partition-algorithm comparison uses (:data:`PAPER_EXTRA_MODELS`), are named models;
- ``gpt-{124m,350m,774m,1.5b,2.7b,6.7b}``: GPT-2 / GPT-3 decoders (:mod:`tofu.models.transformer`), sequence
  1024 and vocabulary 50304 unless the options say otherwise;
- ``wresnet-tiny``, ``rnn-tiny``, ``gpt-tiny``, ``mlp``: small fixed models for tests and CPU runs (only their
  batch follows the options; ``rnn-tiny`` is ``rnn-2-16`` with seq_len 4 and vocab 20).

>>> build_model("rnn-6-4k").input_shapes
(('data', (128, 20)), ('softmax_label', (128, 20)))
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Literal

import mxnet as mx

from tofu.errors import TofuError, UnknownModelError
from tofu.models import rnn, small, transformer, wresnet
from tofu.models.rnn import LSTMConfig
from tofu.models.wresnet import WResNetConfig

Family = Literal["wresnet", "rnn", "gpt", "mlp"]
Shape = tuple[int, ...]

WRESNET_DEPTHS = tuple(wresnet.STAGE_UNITS)                # (50, 101, 152)
WRESNET_PAPER_WIDENS = (4, 6, 8, 10)
WRESNET_WIDENS = (1, 2) + WRESNET_PAPER_WIDENS            # 1 and 2 reproduce ResNet and WRN-x-2
RNN_PAPER_LAYERS = (6, 8, 10)
RNN_PAPER_HIDDEN = ("4k", "6k", "8k")

DEFAULT_BATCH: dict[str, int] = {"wresnet": 32, "rnn": 128, "gpt": 8, "mlp": 16, "wresnet-tiny": 4, "rnn-tiny": 4,
                                  "gpt-tiny": 4}
"""Batch used when ``ModelOptions.batch`` is None, by family (or by name for the tiny models). Smaller than the
paper's Ideal batches (:data:`tofu.models.paper.IDEAL_BATCH`: 128 and 512), which callers pass explicitly."""

PAPER_MODELS: tuple[str, ...] = (
    tuple(f"wresnet-{d}-{w}" for d in WRESNET_DEPTHS for w in WRESNET_PAPER_WIDENS)
    + tuple(f"rnn-{n}-{h}" for n in RNN_PAPER_LAYERS for h in RNN_PAPER_HIDDEN))
PAPER_EXTRA_MODELS: tuple[str, ...] = ("rnn-4-8k",)
"""Models the paper uses outside its 21 configurations: RNN-4-8K of its partition-algorithm comparison."""
SMALL_MODELS: tuple[str, ...] = ("wresnet-tiny", "rnn-tiny", "mlp")
GPT_MODELS: tuple[str, ...] = tuple(transformer.CONFIGS)

_WRESNET_NAME = re.compile(r"wresnet-([1-9][0-9]*)-([1-9][0-9]*)")
_RNN_NAME = re.compile(r"rnn-([1-9][0-9]*)-([1-9][0-9]*)(k?)")


@dataclass(frozen=True)
class ModelOptions:
    """Options of :func:`build_model`.

    Attributes:
        batch: samples (images or sequences) per batch; None means the family default (:data:`DEFAULT_BATCH`).
        seq_len: unrolled timesteps of the RNNs (None: 20), tokens per sequence of the GPTs (None: 1024).
        vocab: vocabulary size of the RNNs (None: 10000) and GPTs (None: 50304).

    Raises:
        TofuError: if an option is not a positive integer.
    """

    batch: int | None = None
    seq_len: int | None = None
    vocab: int | None = None

    def __post_init__(self) -> None:
        for option in ("batch", "seq_len", "vocab"):
            value = getattr(self, option)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TofuError(f"model option {option} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class Model:
    """A built model: its forward graph with loss head and the shapes of its inputs.

    Attributes:
        name: the name it was built from.
        family: ``"wresnet"``, ``"rnn"`` or ``"mlp"``.
        symbol: the loss symbol (SoftmaxOutput named ``softmax``) of the forward graph.
        input_shapes: (name, shape) of ``data`` then ``softmax_label``.
        batch: the batch size the shapes use.
    """

    name: str
    family: Family
    symbol: mx.sym.Symbol = field(compare=False)
    input_shapes: tuple[tuple[str, Shape], ...]
    batch: int

    def shapes(self) -> dict[str, Shape]:
        """The input shapes as a dict, ready for ``symbol.infer_shape(**model.shapes())``."""
        return dict(self.input_shapes)


def model_names() -> tuple[str, ...]:
    """Every named model: the 21 paper configurations, ``rnn-4-8k``, the GPTs, then the small ones."""
    return PAPER_MODELS + PAPER_EXTRA_MODELS + GPT_MODELS + SMALL_MODELS + ("gpt-tiny",)


def build_model(name: str, options: ModelOptions = ModelOptions()) -> Model:
    """Builds a model from its name.

    Args:
        name: a name of :func:`model_names`, or any ``wresnet-{depth}-{widen}`` / ``rnn-{layers}-{hidden}``
            the module docstring allows.
        options: batch size, and timesteps and vocabulary of the RNNs.

    Returns:
        The model's forward Symbol and input shapes.

    Raises:
        UnknownModelError: if the name is not a model.
    """
    if name == "mlp":
        batch = options.batch or DEFAULT_BATCH["mlp"]
        return Model(name, "mlp", small.mlp_symbol(),
                     (("data", (batch, small.MLP_INPUT)), ("softmax_label", (batch,))), batch)
    if name == "wresnet-tiny":
        return _wresnet(name, wresnet.TINY, options.batch or DEFAULT_BATCH[name])
    if name == "rnn-tiny":
        return _rnn(name, rnn.TINY, options.batch or DEFAULT_BATCH[name])
    if name == "gpt-tiny":
        return _gpt(name, transformer.TINY, options.batch or DEFAULT_BATCH[name])
    if name in transformer.CONFIGS:
        config = dataclasses.replace(transformer.CONFIGS[name], seq_len=options.seq_len or 1024,
                                     vocab=options.vocab or 50304)
        return _gpt(name, config, options.batch or DEFAULT_BATCH["gpt"])
    match = _WRESNET_NAME.fullmatch(name)
    if match and int(match[1]) in WRESNET_DEPTHS and int(match[2]) in WRESNET_WIDENS:
        config = WResNetConfig.imagenet(depth=int(match[1]), widen=int(match[2]))
        return _wresnet(name, config, options.batch or DEFAULT_BATCH["wresnet"])
    match = _RNN_NAME.fullmatch(name)
    if match:
        hidden = int(match[2]) * (1024 if match[3] else 1)
        config = LSTMConfig(layers=int(match[1]), hidden=hidden, seq_len=options.seq_len or 20,
                            vocab=options.vocab or 10000)
        return _rnn(name, config, options.batch or DEFAULT_BATCH["rnn"])
    raise UnknownModelError(name, known=model_names())


def _wresnet(name: str, config: WResNetConfig, batch: int) -> Model:
    shapes = (("data", (batch, *config.image)), ("softmax_label", (batch,)))
    return Model(name, "wresnet", wresnet.wresnet_symbol(config), shapes, batch)


def _rnn(name: str, config: LSTMConfig, batch: int) -> Model:
    shapes = (("data", (batch, config.seq_len)), ("softmax_label", (batch, config.seq_len)))
    return Model(name, "rnn", rnn.lstm_symbol(config, batch), shapes, batch)


def _gpt(name: str, config: transformer.GPTConfig, batch: int) -> Model:
    shapes = (("data", (batch, config.seq_len)), ("softmax_label", (batch, config.seq_len)))
    return Model(name, "gpt", transformer.gpt_symbol(config, batch), shapes, batch)
