"""What every table script shares: a markdown table from a header and rows of cells, and :class:`DocTable`, the
entry by which a table script offers a table to ``experiments/make_docs.py``. Reads nothing; no MXNet.

A table script (``experiments/table_*.py``) that writes a table of the docs defines ``TABLES``, a dict from the
table's name (the one its marker comment in the doc gives) to a :class:`DocTable`; make_docs.py finds it there.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

Rows = Sequence[Mapping[str, str]]


@dataclass(frozen=True)
class DocTable:
    """One generated table: ``render(sources, **options)`` returns its markdown lines, ``sources`` holding the
    rows of each CSV file the marker names, in order; ``options`` the marker's ``KEY=VALUE`` settings it accepts,
    each with the type its value is converted to."""

    render: Callable[..., str]
    options: Mapping[str, type] = field(default_factory=dict)


def markdown_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``head`` and ``rows`` as markdown table lines (no trailing newline).

    >>> print(markdown_table(["a", "b"], [["1", "2"]]))
    | a | b |
    |---|---|
    | 1 | 2 |
    """
    line = lambda cells: "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"  # noqa: E731
    return "\n".join([line(head), "|" + "---|" * len(head), *map(line, rows)])


def unique(values) -> list:
    """``values`` without repeats, in their first order."""
    return list(dict.fromkeys(values))


def table_main(render: Callable[..., str], description: str, argv=None) -> int:
    """The command line of a table script with one table: ``python experiments/table_X.py CSV [CSV ...]``
    prints ``render`` of the files' rows."""
    import argparse
    from pathlib import Path

    from experiments.common import read_rows

    p = argparse.ArgumentParser(description=description.splitlines()[0])
    p.add_argument("csv", type=Path, nargs="+")
    args = p.parse_args(argv)
    print(render([read_rows(path) for path in args.csv]))
    return 0

