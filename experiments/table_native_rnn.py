"""Markdown table of run_native_rnn.py (docs/runtime.md): per case of the fused ``RNN`` op, MXNet's native and
oneDNN CPU kernels against the numpy reference, with and without ``state_outputs``. Reads CSV only.

    python experiments/table_native_rnn.py docs/results/rnn/native_rnn.csv
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.table_markdown import DocTable, Rows, markdown_table, table_main, unique  # noqa: E402

KEY = ("mode", "layers", "bidirectional", "steps", "batch", "inputs", "hidden")


def _cell(r) -> str:
    if r is None:
        return "-"
    if r["status"] != "ran":
        return "fails: " + r["status"].replace("MXNetError: ", "").rstrip(" :")
    return f"max diff {float(r['max_abs_diff']):.2g}"


def render(sources: list[Rows]) -> str:
    rows = [r for rows in sources for r in rows]
    by = {(tuple(r[k] for k in KEY), r["kernels"], r["state_outputs"]): r for r in rows}
    columns = [(k, s) for k in ("native", "oneDNN") for s in ("False", "True")]
    lines = []
    for case in unique(tuple(r[k] for k in KEY) for r in rows):
        mode, layers, bi, steps, batch, n_in, hidden = case
        name = f"{mode}, {layers} layer{'s' if layers != '1' else ''}{', bidirectional' if bi == 'True' else ''}, " \
               f"T x N x I = {steps} x {batch} x {n_in}, H = {hidden}"
        lines.append([name, *(_cell(by.get((case, k, s))) for k, s in columns)])
    head = ["case", *(f"{k}{', state_outputs' if s == 'True' else ''}" for k, s in columns)]
    return markdown_table(head, lines)


TABLES = {"native-rnn": DocTable(render)}


def main(argv=None) -> int:
    return table_main(render, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
