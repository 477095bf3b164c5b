"""Writes the tables of the docs from the committed results (docs/results/): every table between

    <!-- table:NAME source=docs/results/DIR/FILE.csv[,docs/results/...] [KEY=VALUE ...] -->
    | ... |
    <!-- /table:NAME -->

is replaced by what the table script offering NAME renders from the named CSV files (``TABLES`` of an
``experiments/table_*.py``, a :class:`~experiments.table_markdown.DocTable`; ``KEY=VALUE`` are its options). A
table that holds no result (what each script does, definitions) is marked by ``<!-- text table -->`` on the line
before it; any other table outside a marker pair is an error, so a table of numbers is never typed in by hand.
Each CSV has a JSON sidecar beside it that says how it was made (a run script's, or ``"transcribed": true`` with
the commit whose doc it was transcribed from). Reads CSV only; no MXNet.

    python experiments/make_docs.py            # rewrite the tables of DOCS in place (make docs)
    python experiments/make_docs.py --check    # write nothing; exit 1 with a diff where a table differs

To refresh a table, run the script its CSV's sidecar names with ``--out-dir docs/results/DIR`` (and the same
``--tag``), then ``make docs``. A new table: a ``render(sources, **options)`` in a table script, entered in its
``TABLES``, and a marker pair in the doc; a CSV under docs/results/ that no marker names fails tests/test_docs.py.
"""
from __future__ import annotations

import argparse
import difflib
import importlib
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments.common import read_rows  # noqa: E402
from experiments.table_markdown import DocTable  # noqa: E402

DOCS = ("docs/experiments.md", "docs/runtime.md", "docs/search.md", "docs/sim.md")
RESULTS = "docs/results"
TEXT_TABLE = "<!-- text table -->"
_OPEN = re.compile(r"^(?P<indent>\s*)<!-- table:(?P<name>[\w-]+)(?P<settings>(?: [\w-]+=\S+)*) -->$")
_CLOSE = re.compile(r"^\s*<!-- /table:(?P<name>[\w-]+) -->$")


class DocsError(ValueError):
    """A marker that cannot be generated: unknown table, missing source, unclosed or malformed marker."""


@dataclass(frozen=True)
class Block:
    """One generated table of a doc: lines ``first`` (the opening marker) to ``last`` (the closing one)."""

    doc: str
    name: str
    sources: tuple[str, ...]
    options: Mapping[str, str]
    indent: str
    first: int
    last: int

    def where(self) -> str:
        return f"{self.doc}:{self.first + 1}: table:{self.name}"


def table_scripts() -> dict[str, DocTable]:
    """Every table offered by an ``experiments/table_*.py`` module, by name (a name offered twice is an error)."""
    tables: dict[str, DocTable] = {}
    for path in sorted(Path(__file__).parent.glob("table_*.py")):
        module = importlib.import_module(f"experiments.{path.stem}")
        for name, table in getattr(module, "TABLES", {}).items():
            if name in tables:
                raise DocsError(f"table '{name}' is offered twice (again by {path.name})")
            tables[name] = table
    return tables


def blocks(doc: str, lines: Sequence[str]) -> list[Block]:
    """The marker pairs of ``doc``'s ``lines``, in order."""
    found = []
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if m is None:
            if _CLOSE.match(lines[i]):
                raise DocsError(f"{doc}:{i + 1}: a closing table marker without its opening one")
            i += 1
            continue
        name = m["name"]
        settings = dict(s.split("=", 1) for s in m["settings"].split())
        if "source" not in settings:
            raise DocsError(f"{doc}:{i + 1}: table:{name} names no source=")
        end = next((j for j in range(i + 1, len(lines)) if _OPEN.match(lines[j]) or _CLOSE.match(lines[j])), None)
        if end is None or _OPEN.match(lines[end]) or _CLOSE.match(lines[end])["name"] != name:
            raise DocsError(f"{doc}:{i + 1}: table:{name} is not closed by <!-- /table:{name} -->")
        found.append(Block(doc, name, tuple(settings.pop("source").split(",")), settings, m["indent"], i, end))
        i = end + 1
    return found


def untagged_tables(doc: str, lines: Sequence[str]) -> list[str]:
    """Where a markdown table of ``lines`` starts outside every marker pair without ``<!-- text table -->``."""
    inside = {j for b in blocks(doc, lines) for j in range(b.first, b.last + 1)}
    fenced, starts = False, []
    for i, line in enumerate(lines):
        fenced ^= line.lstrip().startswith("```")
        if not fenced and line.lstrip().startswith("|") and (i == 0 or not lines[i - 1].lstrip().startswith("|")):
            starts.append(i)
    return [f"{doc}:{i + 1}: a table typed in by hand (generate it between table markers, or mark it "
            f"{TEXT_TABLE} if it holds no results)"
            for i in starts if i not in inside and (i == 0 or lines[i - 1].strip() != TEXT_TABLE)]


def render(block: Block, tables: Mapping[str, DocTable], root: Path = ROOT) -> list[str]:
    """The lines ``block`` holds between its markers: its table rendered from its sources."""
    table = tables.get(block.name)
    if table is None:
        raise DocsError(f"{block.where()}: no table script offers '{block.name}' (known: {', '.join(sorted(tables))})")
    unknown = sorted(set(block.options) - set(table.options))
    if unknown:
        raise DocsError(f"{block.where()}: unknown option(s) {', '.join(unknown)} "
                        f"(it takes: {', '.join(table.options) or 'none'})")
    sources = []
    for source in block.sources:
        path = root / source
        if not source.startswith(RESULTS + "/") or not path.is_file():
            raise DocsError(f"{block.where()}: source {source} is not a file under {RESULTS}/")
        if not path.with_suffix(".json").is_file():
            raise DocsError(f"{block.where()}: source {source} has no JSON sidecar saying how it was made")
        sources.append(read_rows(path))
    try:
        options = {k: table.options[k](v) for k, v in block.options.items()}
    except ValueError as e:
        raise DocsError(f"{block.where()}: {e}") from None
    return [block.indent + line for line in table.render(sources, **options).splitlines()]


def generate(doc: str, text: str, tables: Mapping[str, DocTable], root: Path = ROOT) -> str:
    """``text`` with every marked table rendered afresh."""
    lines = text.splitlines()
    for block in reversed(blocks(doc, lines)):
        lines[block.first + 1:block.last] = render(block, tables, root)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def check(docs: Sequence[str] = DOCS, root: Path = ROOT) -> list[str]:
    """What differs between the committed ``docs`` and what they would be generated as: one unified diff per doc
    that differs, and one line per table typed in by hand. Empty when every doc is current."""
    tables, problems = table_scripts(), []
    for doc in docs:
        text = (root / doc).read_text()
        problems += untagged_tables(doc, text.splitlines())
        fresh = generate(doc, text, tables, root)
        if fresh != text:
            problems.append("".join(difflib.unified_diff(text.splitlines(True), fresh.splitlines(True),
                                                         f"{doc} (committed)", f"{doc} (generated)", n=1)))
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("docs", nargs="*", default=list(DOCS), help="docs to generate, relative to the repository root")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 where a doc is not current")
    args = p.parse_args(argv)
    try:
        if args.check:
            problems = check(args.docs, ROOT)
            print("\n".join(problems) if problems else f"{len(args.docs)} docs current", file=sys.stderr)
            return 1 if problems else 0
        tables, typed = table_scripts(), []
        for doc in args.docs:
            path = ROOT / doc
            text = path.read_text()
            fresh = generate(doc, text, tables, ROOT)
            typed += untagged_tables(doc, fresh.splitlines())
            count = len(blocks(doc, fresh.splitlines()))
            if fresh != text:
                path.write_text(fresh)
            print(f"{doc}: {count} tables, {'rewritten' if fresh != text else 'unchanged'}")
    except DocsError as e:
        print(f"make_docs: error: {e}", file=sys.stderr)
        return 2
    if typed:
        print("\n".join(typed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
