"""The paper's published model facts (Tofu, EuroSys 2019, section 7): Table 2's weight memory and its batch sizes.

Data only, transcribed from the paper; ``docs/models.md`` (``experiments/make_models_table.py``) sets our models
beside it. The figures are in GiB (2^30 bytes): the WResNet rows match our parameter counts within 2.1% in GiB
and are 6-10% below them in 10^9 bytes.
"""
from __future__ import annotations

TABLE2_GIB: dict[str, float] = {
    "wresnet-50-4": 4.2, "wresnet-101-4": 7.8, "wresnet-152-4": 10.5,
    "wresnet-50-6": 9.6, "wresnet-101-6": 17.1, "wresnet-152-6": 23.4,
    "wresnet-50-8": 17.1, "wresnet-101-8": 30.6, "wresnet-152-8": 41.7,
    "wresnet-50-10": 26.7, "wresnet-101-10": 47.7, "wresnet-152-10": 65.1,
    "rnn-6-4k": 8.4, "rnn-8-4k": 11.4, "rnn-10-4k": 14.4,
    "rnn-6-6k": 18.6, "rnn-8-6k": 28.5, "rnn-10-6k": 32.1,
    "rnn-6-8k": 33.0, "rnn-8-8k": 45.3, "rnn-10-8k": 57.0,
}
"""Table 2: total weight memory 3W (weights, gradients, one optimizer history buffer) of each configuration."""

IDEAL_BATCH: dict[str, int] = {"wresnet": 128, "rnn": 512}
"""Batch of the paper's Ideal baseline by family: the reference batch of its throughput comparison."""

PARTITION_COMPARISON_BATCH: dict[str, int] = {"wresnet-152-10": 8, "rnn-4-8k": 512}
"""Models and batches of the paper's comparison of partition algorithms on 8 GPUs."""

TOFU_BATCHES: dict[str, tuple[int, ...]] = {
    "wresnet-152-10": (8,), "wresnet-50-4": (128,), "rnn-10-8k": (128,),
    **{f"rnn-{n}-{h}": (256, 512) for n in (6, 8, 10) for h in ("4k", "6k", "8k") if (n, h) != (10, "8k")},
}
"""The batches the paper names for Tofu on 8 GPUs (the largest that fits), where it names them: WResNet's range
ends at 8 (WResNet-152-10) and 128 (WResNet-50-4); RNN-10-8K trains at 128, every other RNN at 256 or 512."""
