"""Draws what plans split, tensor by tensor and cut by cut, side by side. Reads plan JSON files only.

    python -m tofu plan gpt-350m --batch 8 --workers 8 --out results/plans/tofu.json
    python -m tofu plan gpt-350m --batch 8 --workers 8 --algo megatron --out results/plans/megatron.json
    python experiments/plot_plan.py results/plans/tofu.json results/plans/megatron.json \
        --tensors '^block5_' --out figures/gpt-350m-plan.png

One row per tensor whose name matches ``--tensors`` (in the graph's order), one column per cut of each plan
(a recursion of three 2-way cuts has three columns, a flat 8-way cut one). A cell names the dimension the
cut splits and the extent it halves (``1: 1024>512``); blank cells are replicated. The colour is the
dimension, so that a plan's pattern reads at a glance.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.plotstyle import save  # noqa: E402

DIM_COLORS = ("#4393c3", "#f4a582", "#5aae61", "#b2abd2", "#fee08b", "#bababa")   # dims 0-4, then the rest
REPLICATED = "#ffffff"


@dataclass(frozen=True)
class Column:
    """One cut of one plan: its label and, per tensor, the split dimension (None: replicated)."""

    label: str
    dims: dict[str, int | None]
    shapes: dict[str, tuple[int, ...]]     # every tensor's shape before this cut
    factor: int


def load_columns(path: Path) -> tuple[str, list[Column]]:
    """The cuts of the plan in ``path``, each with the shapes it cuts. Raises ValueError on a malformed file."""
    try:
        plan = json.loads(path.read_text())
        shapes = {name: tuple(shape) for name, shape in plan["shapes"]} if isinstance(plan["shapes"], list) \
            else {name: tuple(shape) for name, shape in plan["shapes"].items()}
        steps = plan["steps"]
        title = f"{plan['algo']}: {float(plan['comm_bytes']) / 1e9:.2f} GB"
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a plan file ({e})") from None
    columns = []
    for j, step in enumerate(steps, 1):
        dims = {name: (None if d is None else int(d)) for name, d in step["tensor_dims"].items()}
        label = f"{plan['algo']}\ncut {j} ({step['factor']}-way)" if len(steps) > 1 else \
            f"{plan['algo']}\n{step['factor']}-way"
        columns.append(Column(label, dims, dict(shapes), int(step["factor"])))
        shapes = {n: tuple(e // step["factor"] if i == dims.get(n) else e for i, e in enumerate(s))
                  for n, s in shapes.items()}
    return title, columns


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("plans", type=Path, nargs="+", help="plan JSON files (tofu plan ... --out)")
    p.add_argument("--tensors", default="", help="regular expression on tensor names (default: every tensor)")
    p.add_argument("--title", default="")
    p.add_argument("--out", type=Path, default=Path("figures/plan.png"))
    args = p.parse_args(argv)
    try:
        pattern = re.compile(args.tensors)
        loaded = [load_columns(path) for path in args.plans]
    except (re.error, ValueError) as e:
        print(f"plot_plan: error: {e}", file=sys.stderr)
        return 2
    columns = [c for _, cols in loaded for c in cols]
    names = [n for n in columns[0].dims if pattern.search(n)]
    if not names:
        print(f"plot_plan: error: no tensor of {args.plans[0]} matches '{args.tensors}'", file=sys.stderr)
        return 2
    for path, (_, cols) in zip(args.plans, loaded):
        missing = [n for n in names if n not in cols[0].dims]
        if missing:
            print(f"plot_plan: error: {path} is a plan of another model (no tensor '{missing[0]}')", file=sys.stderr)
            return 2
    grid = [[len(DIM_COLORS) if c.dims[n] is None else min(c.dims[n], len(DIM_COLORS) - 1) for c in columns]
            for n in names]
    fig, ax = plt.subplots(figsize=(2.2 + 1.15 * len(columns) + 2.0, 0.9 + 0.24 * len(names)))
    ax.imshow(grid, cmap=ListedColormap(list(DIM_COLORS) + [REPLICATED]), vmin=0, vmax=len(DIM_COLORS),
              aspect="auto")
    for i, n in enumerate(names):
        for j, c in enumerate(columns):
            d = c.dims[n]
            if d is not None:
                extent = c.shapes[n][d]
                ax.text(j, i, f"{d}: {extent}>{extent // c.factor}", ha="center", va="center", fontsize=6.5)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels([f"{n}  {tuple(columns[0].shapes[n])}" for n in names], fontsize=7)
    ax.set_xticks(range(len(columns)))
    ax.set_xticklabels([c.label for c in columns], fontsize=8)
    ax.xaxis.tick_top()
    start = 0
    for _, cols in loaded[:-1]:             # a rule between plans
        start += len(cols)
        ax.axvline(start - 0.5, color="black", linewidth=1.5)
    ax.set_xticks([x - 0.5 for x in range(1, len(columns))], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, len(names))], minor=True)
    ax.grid(which="minor", color="white", linewidth=0.6)
    ax.tick_params(which="minor", length=0)
    subtitle = ";  ".join(title for title, _ in loaded)
    ax.set_title(f"{args.title}\n{subtitle}" if args.title else subtitle, fontsize=9, pad=34)
    save(fig, args.out, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
