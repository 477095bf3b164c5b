"""Wide ResNet builder: a :class:`WResNetConfig` -> the MXNet forward Symbol ending in SoftmaxOutput.

The ImageNet bottleneck ResNet (He et al., 2016) widened as in the Tofu paper (EuroSys 2019, section 7):
the widening factor multiplies the channels of *every* convolution, input and output. With base width ``b``
and factor ``k``, the stem convolution has ``b*k`` filters, and in stage ``s`` (from 0) the 1x1 reduce and
the 3x3 convolutions have ``b*2**s*k`` filters, the 1x1 expand convolution and the projection shortcut
``4*b*2**s*k``, so the final FullyConnected reads ``32*b*k`` features. The parameter count grows as ``k**2``.
Widening factor 1 is ResNet-50/101/152. (This is not torchvision's ``wide_resnet50_2``, which widens only the
bottleneck's inner width.)

Layout is NCHW. Every op is named ``stage{s}_unit{u}_{role}`` (stages and units counted from 1), ``stem_*``
or ``head_*``, and carries the attribute ``__tofu_layer__`` (``'stem'``, ``'stage2_unit3'``, ``'head'``)
that the graph importer reads as the op's layer.
"""
from __future__ import annotations

from dataclasses import dataclass

import mxnet as mx

STAGE_UNITS: dict[int, tuple[int, ...]] = {
    50: (3, 4, 6, 3),
    101: (3, 4, 23, 3),
    152: (3, 8, 36, 3),
}
"""Bottleneck units per stage for each ImageNet depth (He et al., 2016, Table 1)."""


@dataclass(frozen=True)
class WResNetConfig:
    """Shape of one Wide ResNet.

    Attributes:
        units: bottleneck units in each stage; stage ``s`` (from 0) has inner width ``base * 2**s * widen``
            and output width ``4 * base * 2**s * widen``.
        widen: widening factor of every convolution's channels (the stem's too).
        base: stem filters and stage-0 reduce width before widening (64 for ImageNet).
        num_classes: outputs of the final FullyConnected layer.
        image: input (channels, height, width).
    """

    units: tuple[int, ...]
    widen: int
    base: int = 64
    num_classes: int = 1000
    image: tuple[int, int, int] = (3, 224, 224)

    def __post_init__(self) -> None:
        if not self.units or min(self.units) < 1 or self.widen < 1 or self.base < 1 or self.num_classes < 1:
            raise ValueError(f"invalid WResNetConfig {self}")

    @classmethod
    def imagenet(cls, depth: int, widen: int) -> WResNetConfig:
        """The ImageNet configuration ``wresnet-{depth}-{widen}`` (224x224x3 input, 1000 classes)."""
        return cls(units=STAGE_UNITS[depth], widen=widen)


TINY = WResNetConfig(units=(1, 1, 1, 1), widen=2, base=4, num_classes=10, image=(3, 32, 32))
"""``wresnet-tiny``: the same network shape at widening factor 2 of base 4 (stem 8 filters, stage outputs
32/64/128/256, inner widths 8/16/32/64), small enough to train on a CPU in seconds."""


def _conv_bn(x: mx.sym.Symbol, prefix: str, suffix: str, filters: int, kernel: int, stride: int,
             relu: bool) -> mx.sym.Symbol:
    """Convolution (no bias, 'same' padding) -> BatchNorm -> optional relu.

    The ops are named ``{prefix}_conv{suffix}``, ``{prefix}_bn{suffix}`` and ``{prefix}_relu{suffix}``
    (e.g. ``stage2_unit3_conv2``).
    """
    pad = kernel // 2
    x = mx.sym.Convolution(x, num_filter=filters, kernel=(kernel, kernel), stride=(stride, stride),
                           pad=(pad, pad), no_bias=True, name=f"{prefix}_conv{suffix}")
    x = mx.sym.BatchNorm(x, fix_gamma=False, name=f"{prefix}_bn{suffix}")
    return mx.sym.Activation(x, act_type="relu", name=f"{prefix}_relu{suffix}") if relu else x


def _bottleneck(x: mx.sym.Symbol, name: str, inner: int, out: int, stride: int,
                project: bool) -> mx.sym.Symbol:
    """One bottleneck unit: 1x1 reduce, 3x3 (carries the stride), 1x1 expand, plus the shortcut."""
    y = _conv_bn(x, name, "1", inner, 1, 1, relu=True)
    y = _conv_bn(y, name, "2", inner, 3, stride, relu=True)
    y = _conv_bn(y, name, "3", out, 1, 1, relu=False)
    shortcut = _conv_bn(x, name, "_sc", out, 1, stride, relu=False) if project else x
    y = mx.sym.elemwise_add(y, shortcut, name=f"{name}_add")
    return mx.sym.Activation(y, act_type="relu", name=f"{name}_relu")


def wresnet_symbol(config: WResNetConfig) -> mx.sym.Symbol:
    """Builds the forward graph of a Wide ResNet with its softmax loss head.

    Args:
        config: depth (units per stage), widening factor and input/output sizes.

    Returns:
        A Symbol with arguments ``data`` of shape (batch, *config.image), ``softmax_label`` of shape (batch,),
        and the parameters; its one output is ``softmax`` of shape (batch, num_classes).
    """
    with mx.name.NameManager():  # any name left to MXNet is then independent of earlier builds
        x = mx.sym.var("data")
        with mx.AttrScope(__tofu_layer__="stem"):
            x = _conv_bn(x, "stem", "", config.base * config.widen, 7, 2, relu=True)
            x = mx.sym.Pooling(x, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max", name="stem_pool")
        channels = config.base * config.widen
        for s, units in enumerate(config.units):
            inner = config.base * 2 ** s * config.widen
            out = 4 * inner
            for u in range(units):
                stride = 2 if s > 0 and u == 0 else 1
                layer = f"stage{s + 1}_unit{u + 1}"
                with mx.AttrScope(__tofu_layer__=layer):
                    x = _bottleneck(x, layer, inner, out, stride, project=(stride != 1 or channels != out))
                channels = out
        with mx.AttrScope(__tofu_layer__="head"):
            x = mx.sym.Pooling(x, kernel=(1, 1), global_pool=True, pool_type="avg", name="head_pool")
            x = mx.sym.Flatten(x, name="head_flatten")
            x = mx.sym.FullyConnected(x, num_hidden=config.num_classes, name="head_fc")
            return mx.sym.SoftmaxOutput(x, mx.sym.var("softmax_label"), name="softmax")
