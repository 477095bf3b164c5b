"""MXNet 1.9.1 CPU kernels that compute wrong results without MKLDNN, which tofu switches off for partitioned
graphs (tofu/__init__.py): for them the tests take MKLDNN's kernel as the reference, in a child process with
MKLDNN on (MXNet reads the switch once per process).

    python -m tests.operators.native_kernels TEST OP CASE [K]   (exit 0: the check passed under MKLDNN)
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def native_bug(op: str, attrs) -> str | None:
    """Why MXNet's native kernel of ``op`` is wrong with ``attrs``, or None."""
    if op == "Deconvolution" and any(d > 1 for d in (attrs.get("dilate") or ())):
        return "the native Deconvolution ignores dilate > 1 (MKLDNN's agrees with the description)"
    return None


def check_under_mkldnn(test: str, op: str, case: int, k: int = 0) -> None:
    """Runs test function ``test`` of this package's callers on one case in a child process with MKLDNN on."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, MXNET_MKLDNN_ENABLED="1", PYTHONPATH=str(root))
    done = subprocess.run([sys.executable, "-m", "tests.operators.native_kernels", test, op, str(case), str(k)],
                          env=env, capture_output=True, text=True, timeout=300, cwd=root)
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]


def _main(test: str, op: str, case: int, k: int) -> None:
    from tofu import registry

    spec = registry.load_builtin_operators()[op]
    if test == "conformance":
        from tests.operators.test_conformance import check_conformance
        check_conformance(op, spec.cases[case])
    else:
        from tests.analysis.test_strategies import check_kernel_shards
        check_kernel_shards(op, spec.cases[case], k)


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
