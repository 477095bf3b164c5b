"""Draws what plans split, tensor by tensor and cut by cut, side by side. Reads plan JSON files only.

    python -m tofu plan gpt-350m --batch 8 --workers 8 --out results/plans/tofu.json
    python -m tofu plan gpt-350m --batch 8 --workers 8 --algo megatron --out results/plans/megatron.json
    python experiments/plot_plan.py results/plans/tofu.json results/plans/megatron.json \
        --tensors '^block5_' --out figures/gpt-350m-plan.png

One row per tensor whose name matches ``--tensors`` (in the graph's order), one column per cut of each plan;
a cell names the dimension the cut splits and the extent it divides (``1: 1024>512``), blank cells are
replicated (tofu/figures.py draws it; ``tofu plan --figure`` draws one plan the same way).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tofu.errors import TofuError  # noqa: E402
from tofu.figures import plan_columns, draw  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("plans", type=Path, nargs="+", help="plan JSON files (tofu plan ... --out)")
    p.add_argument("--tensors", default="", help="regular expression on tensor names (default: every tensor)")
    p.add_argument("--title", default="")
    p.add_argument("--out", type=Path, default=Path("figures/plan.png"))
    args = p.parse_args(argv)
    try:
        plans = []
        for path in args.plans:
            try:
                doc = json.loads(path.read_text())
            except (OSError, ValueError) as e:
                raise TofuError(f"{path}: cannot read a plan ({e})") from None
            try:
                plans.append(plan_columns(doc))
            except TofuError as e:
                raise TofuError(f"{path}: {e}") from None
        args.out.parent.mkdir(parents=True, exist_ok=True)
        draw(plans, args.tensors, args.out, args.title)
    except TofuError as e:
        print(f"plot_plan: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
