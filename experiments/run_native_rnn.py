"""MXNet 1.9.1's own CPU kernels of the fused ``RNN`` op against the numpy reference (tofu/graph/lower_rnn.py):
why tofu unrolls Gluon's recurrent layers at import.

    python experiments/run_native_rnn.py [--out-dir docs/results/rnn] [--tag native_rnn]

For each case of ``tests/graph/test_lower_rnn.py`` (mode, layers, direction, shapes) and each kernel library,
MXNet's native kernels (as tofu runs them: importing tofu sets ``MXNET_MKLDNN_ENABLED=0``) and oneDNN's
(``MXNET_MKLDNN_ENABLED=1``), with and without ``state_outputs``, a child process (MXNet reads the switch once
per process, and a failed check may abort it) calls ``mx.nd.RNN`` on the case's inputs and compares every output
with :func:`tofu.graph.lower_rnn.forward` in float64. One CSV row per (case, kernels, state_outputs): the largest
absolute difference, or the first line of MXNet's error. A JSON sidecar with the command.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments.common import RowWriter, rerun_source, write_sidecar  # noqa: E402

COLUMNS = ("mode", "layers", "bidirectional", "steps", "batch", "inputs", "hidden", "kernels", "state_outputs",
           "status", "max_abs_diff")
CHILD = r"""
import json, sys
import numpy as np, mxnet as mx
import tofu  # noqa: F401  (tofu's MXNet settings)
from tests.graph.test_lower_rnn import CASES, _inputs
from tofu.graph.lower_rnn import forward
case, states = CASES[int(sys.argv[1])], sys.argv[2] == "1"
mode, layers, bi, _, _, _, _, hidden = case
values = _inputs(case)
try:
    out = mx.nd.RNN(*[mx.nd.array(v) for v in values], state_size=hidden, num_layers=layers, mode=mode,
                    bidirectional=bi, state_outputs=states)
    got = [o.asnumpy() for o in (out if states else [out])]
except mx.base.MXNetError as e:
    print(json.dumps({"status": [ln for ln in str(e).splitlines() if "Check failed" in ln or "Error" in ln][-1]}))
    sys.exit(0)
want = [w for w in forward(mode, layers, bi, *[v.astype(np.float64) for v in values]) if w is not None]
print(json.dumps({"status": "ran", "diff": max(float(np.abs(g - w).max()) for g, w in zip(got, want))}))
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", type=Path, default=ROOT / "results" / "rnn")
    ap.add_argument("--tag", default="native_rnn")
    args = ap.parse_args(argv)
    from tests.graph.test_lower_rnn import CASES

    path = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(path, COLUMNS)
    for i, case in enumerate(CASES):
        mode, layers, bi, _, steps, batch, n_in, hidden = case
        for kernels, flag in (("native", "0"), ("oneDNN", "1")):
            for states in (False, True):
                env = dict(os.environ, MXNET_MKLDNN_ENABLED=flag, PYTHONPATH=str(ROOT),
                           MXNET_STORAGE_FALLBACK_LOG_VERBOSE="0", MXNET_SUBGRAPH_VERBOSE="0")
                done = subprocess.run([sys.executable, "-c", CHILD, str(i), "1" if states else "0"], env=env,
                                      cwd=ROOT, capture_output=True, text=True, timeout=300)
                lines = done.stdout.strip().splitlines()
                found = json.loads(lines[-1]) if done.returncode == 0 and lines else \
                    {"status": f"process ended with status {done.returncode}"}
                writer.write({"mode": mode, "layers": layers, "bidirectional": bi, "steps": steps, "batch": batch,
                              "inputs": n_in, "hidden": hidden, "kernels": kernels, "state_outputs": states,
                              "status": found["status"], "max_abs_diff": found.get("diff", "")})
                print(f"{mode} L{layers}{' bi' if bi else ''} {kernels} state_outputs={states}: {found}",
                      file=sys.stderr, flush=True)
    writer.close()
    write_sidecar(path, vars(args), **rerun_source())
    return 0


if __name__ == "__main__":
    sys.exit(main())
