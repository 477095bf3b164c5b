"""The plan figure: what plans split, tensor by tensor and cut by cut, side by side.

Input: plans in their JSON form (``Plan.to_json()``, or a file ``tofu plan --out`` wrote) and a regular
expression choosing tensors. Output: a PNG with one row per chosen tensor (in the graph's order) and one column
per cut of each plan (a recursion of three 2-way cuts has three columns, a flat 8-way cut one). A cell names the
dimension the cut splits and the extent before and after it (``1: 1024>512``); blank cells are replicated; the
colour is the dimension, so that a plan's pattern reads at a glance. Used by ``tofu plan --figure`` and
``experiments/plot_plan.py``; matplotlib is imported only when a figure is drawn.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tofu.errors import TofuError

DIM_COLORS = ("#4393c3", "#f4a582", "#5aae61", "#b2abd2", "#fee08b", "#bababa")   # dims 0-4, then the rest
REPLICATED = "#ffffff"
MAX_ROWS = 150          # beyond this a figure is unreadable: choose tensors


@dataclass(frozen=True)
class Column:
    """One cut of one plan: its label, per tensor the split dimension (None: replicated), and every tensor's
    shape before the cut."""

    label: str
    factor: int
    dims: Mapping[str, int | None]
    shapes: Mapping[str, tuple[int, ...]]


@dataclass(frozen=True)
class PlanColumns:
    title: str
    columns: tuple[Column, ...]


def plan_columns(doc: Mapping) -> PlanColumns:
    """The cuts of a plan's JSON form, each with the shapes it cuts.

    Raises:
        TofuError: the document is not a plan with per-tensor splits (``--json`` without ``--steps`` drops them).
    """
    try:
        shapes = {name: tuple(int(e) for e in shape) for name, shape in dict(doc["shapes"]).items()}
        steps = list(doc["steps"])
        algo = str(doc["algo"])
        title = f"{algo}: {float(doc['comm_bytes']) / 1e9:.2f} GB"
        columns = []
        for j, step in enumerate(steps, 1):
            factor = int(step["factor"])
            dims = {name: (None if d is None else int(d)) for name, d in dict(step["tensor_dims"]).items()}
            label = f"{algo}\ncut {j} ({factor}-way)" if len(steps) > 1 else f"{algo}\n{factor}-way"
            columns.append(Column(label, factor, dims, shapes))
            shapes = {n: tuple(e // factor if i == dims.get(n) else e for i, e in enumerate(s))
                      for n, s in shapes.items()}
    except (KeyError, TypeError, ValueError) as e:
        raise TofuError(f"not a plan with per-tensor splits ({type(e).__name__}: {e})") from None
    if not columns:
        raise TofuError("the plan has no cuts (one worker): nothing to draw")
    return PlanColumns(title, tuple(columns))


def chosen_tensors(plans: Sequence[PlanColumns], pattern: str) -> list[str]:
    """The tensors of the first plan whose names match ``pattern``, checked present in every plan.

    Raises:
        TofuError: a malformed expression, no tensor matches, too many do, or a plan of another model.
    """
    try:
        regex = re.compile(pattern)
    except re.error as e:
        raise TofuError(f"tensor pattern '{pattern}': {e}") from None
    first = plans[0].columns[0].dims
    names = [n for n in first if regex.search(n)]
    if not names:
        raise TofuError(f"no tensor matches '{pattern}'")
    if len(names) > MAX_ROWS:
        raise TofuError(f"{len(names)} tensors match '{pattern}' (at most {MAX_ROWS} make a readable figure); "
                        f"choose some, e.g. the tensors of one layer")
    for p in plans[1:]:
        missing = [n for n in names if n not in p.columns[0].dims]
        if missing:
            raise TofuError(f"the plans are of different models ('{p.title}' has no tensor '{missing[0]}')")
    return names


def draw(plans: Sequence[PlanColumns], pattern: str, out: str | Path, title: str = "", dpi: int = 110) -> Path:
    """Draws the chosen tensors' splits under every cut of ``plans`` into the PNG ``out``.

    Raises:
        TofuError: see :func:`chosen_tensors`; or ``out`` cannot be written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    names = chosen_tensors(plans, pattern)
    columns = [c for p in plans for c in p.columns]
    grid = [[len(DIM_COLORS) if c.dims[n] is None else min(c.dims[n], len(DIM_COLORS) - 1) for c in columns]
            for n in names]
    fig, ax = plt.subplots(figsize=(4.2 + 1.15 * len(columns), 0.9 + 0.24 * len(names)))
    ax.imshow(grid, cmap=ListedColormap(list(DIM_COLORS) + [REPLICATED]), vmin=0, vmax=len(DIM_COLORS),
              aspect="auto")
    for i, n in enumerate(names):
        for j, c in enumerate(columns):
            d = c.dims[n]
            if d is not None:
                extent = c.shapes[n][d]
                ax.text(j, i, f"{d}: {extent}>{extent // c.factor}", ha="center", va="center", fontsize=6.5)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels([f"{n}  {columns[0].shapes[n]}" for n in names], fontsize=7)
    ax.set_xticks(range(len(columns)))
    ax.set_xticklabels([c.label for c in columns], fontsize=8)
    ax.xaxis.tick_top()
    edge = 0
    for p in plans[:-1]:                    # a rule between plans
        edge += len(p.columns)
        ax.axvline(edge - 0.5, color="black", linewidth=1.5)
    ax.set_xticks([x - 0.5 for x in range(1, len(columns))], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, len(names))], minor=True)
    ax.grid(which="minor", color="white", linewidth=0.6)
    ax.tick_params(which="minor", length=0)
    subtitle = ";  ".join(p.title for p in plans)
    ax.set_title(f"{title}\n{subtitle}" if title else subtitle, fontsize=9, pad=34)
    fig.tight_layout()
    out = Path(out)
    try:
        fig.savefig(out, dpi=dpi)
    except OSError as e:
        raise TofuError(f"cannot write figure '{out}': {e.strerror or e}") from None
    finally:
        plt.close(fig)
    return out
