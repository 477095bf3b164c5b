"""MXNet's cross-device BatchNorm (``_contrib_SyncBatchNorm``: Gluon's ``contrib.nn.SyncBatchNorm``, GluonCV's
detection and segmentation networks) imported as ``BatchNorm``.

Why: SyncBatchNorm is BatchNorm whose statistics are those of the whole batch over ``ndev`` devices, exchanged
through a barrier under its ``key``. A graph tofu partitions is one logical graph of the whole batch, so the whole
batch's statistics are BatchNorm's own, and tofu exchanges them itself when a split needs it (BatchNorm's
expansion); MXNet's kernel, run on one device (the check's reference) or on a shard, would wait at its barrier for
``ndev`` devices that never come. The two kernels agree where they can be compared, on one device with ``ndev``
1 (tests/graph/test_lower_syncbn.py: the output, every gradient and the moving statistics). Its inputs, its
attributes but ``ndev`` and ``key`` and its first output are BatchNorm's (channels on axis 1); its other outputs
are the mean and the *variance*, where BatchNorm's are the mean and the inverse standard deviation, so a graph
that shows them (``output_mean_var``) is refused.
"""
from __future__ import annotations

from tofu.errors import GraphImportError

_DROPPED = ("ndev", "key")
_TRUE = ("true", "1")


def has_sync_batchnorm(doc: dict) -> bool:
    return any(n["op"] == "_contrib_SyncBatchNorm" for n in doc["nodes"])


def lower_sync_batchnorm(doc: dict) -> dict:
    """``doc`` (a symbol's JSON) with every ``_contrib_SyncBatchNorm`` node a ``BatchNorm``.

    Raises:
        GraphImportError: a node shows its mean and variance (``output_mean_var``).
    """
    nodes = []
    for jn in doc["nodes"]:
        if jn["op"] != "_contrib_SyncBatchNorm":
            nodes.append(jn)
            continue
        key = "attrs" if "attrs" in jn else "attr"
        attrs = dict(jn.get(key) or {})
        if str(attrs.get("output_mean_var", "false")).lower() in _TRUE:
            raise GraphImportError(f"node '{jn['name']}' (_contrib_SyncBatchNorm) shows its mean and variance "
                                   f"(output_mean_var): BatchNorm, which tofu runs it as, outputs the inverse "
                                   f"standard deviation instead of the variance")
        nodes.append({**jn, "op": "BatchNorm", key: {k: v for k, v in attrs.items() if k not in _DROPPED}})
    return {**doc, "nodes": nodes}
