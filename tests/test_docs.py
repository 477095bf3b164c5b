"""The docs' tables are generated: each committed table equals what experiments/make_docs.py writes from the
committed results (docs/results/), every marker names a table script and existing CSV files with their sidecars,
and a table typed in by hand outside the markers is refused. Reads CSV and markdown only (no MXNet)."""
import json

import pytest

from experiments import make_docs
from experiments.make_docs import DOCS, RESULTS, ROOT, DocsError, blocks, generate, table_scripts, untagged_tables


def _blocks(doc):
    return blocks(doc, (ROOT / doc).read_text().splitlines())


def test_committed_docs_equal_what_the_generator_writes():
    problems = make_docs.check()
    assert not problems, "docs not current; run `make docs`:\n" + "\n".join(problems)


@pytest.mark.parametrize("doc", DOCS)
def test_every_marker_names_a_table_script_and_csv_files_with_sidecars(doc):
    tables = table_scripts()
    found = _blocks(doc)
    assert found, f"{doc} has no generated table"
    for block in found:
        assert block.name in tables, block.where()
        assert set(block.options) <= set(tables[block.name].options), block.where()
        for source in block.sources:
            path = ROOT / source
            assert source.startswith(RESULTS + "/") and path.suffix == ".csv" and path.is_file(), block.where()
            sidecar = json.loads(path.with_suffix(".json").read_text())
            assert sidecar["source"].startswith(("re-run: ", "transcribed from docs/")), source


def test_every_committed_result_is_cited_and_says_how_it_was_made():
    cited = {source for doc in DOCS for block in _blocks(doc) for source in block.sources}
    committed = {str(p.relative_to(ROOT)) for p in (ROOT / RESULTS).rglob("*.csv")}
    assert committed == cited
    for source in committed:
        sidecar = json.loads((ROOT / source).with_suffix(".json").read_text())
        if sidecar["source"].startswith("transcribed"):
            assert sidecar["transcribed"] is True and " as measured at commit " in sidecar["source"], source
        else:
            assert len(sidecar["git_sha"]) == 40 and sidecar["command"], source


DOC = """intro
<!-- table:scaling source=docs/results/scaling/k80x8.csv -->
| stale |
<!-- /table:scaling -->
"""


def test_a_stale_table_is_rewritten_from_its_csv():
    fresh = generate("doc.md", DOC, table_scripts())
    assert "| stale |" not in fresh
    committed = (ROOT / "docs/experiments.md").read_text()
    rows = [line for line in fresh.splitlines() if line.startswith("| wresnet-152-10 | 25 |")]
    assert len(rows) == 1 and rows[0] in committed      # the row the committed doc's scaling table holds
    assert generate("doc.md", fresh, table_scripts()) == fresh
    assert fresh.splitlines()[1] == DOC.splitlines()[1] and fresh.splitlines()[-1] == DOC.splitlines()[-1]


def test_an_indented_table_keeps_its_indent():
    doc = "- item\n\n  " + DOC.replace("\n", "\n  ").rstrip() + "\n"
    fresh = generate("doc.md", doc, table_scripts())
    assert any(line.startswith("  | wresnet-152-10 | 25 |") for line in fresh.splitlines())


def test_a_table_typed_in_by_hand_is_refused_unless_marked_as_text():
    typed = "intro\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    assert untagged_tables("doc.md", typed.splitlines())[0].startswith("doc.md:2: a table typed in by hand")
    assert untagged_tables("doc.md", typed.replace("intro\n", "intro\n<!-- text table -->\n").splitlines()) == []
    assert untagged_tables("doc.md", DOC.splitlines()) == []
    assert untagged_tables("doc.md", ("```\n" + typed + "```\n").splitlines()) == []


@pytest.mark.parametrize("text, message", [
    (DOC.replace("table:scaling source", "table:nonesuch source").replace("/table:scaling", "/table:nonesuch"),
     "no table script offers 'nonesuch'"),
    (DOC.replace("k80x8.csv", "missing.csv"), "is not a file under docs/results/"),
    (DOC.replace("source=docs/results/", "source=results/"), "is not a file under docs/results/"),
    (DOC.replace(" -->\n| stale", " colour=red -->\n| stale"), "unknown option(s) colour"),
    (DOC.replace(" source=docs/results/scaling/k80x8.csv", ""), "names no source="),
    (DOC.replace("<!-- /table:scaling -->\n", ""), "is not closed"),
    (DOC.replace("<!-- /table:scaling -->", "<!-- /table:throughput -->"), "is not closed"),
    ("<!-- /table:scaling -->\n", "without its opening one"),
])
def test_a_bad_marker_is_an_error_naming_it(text, message):
    with pytest.raises(DocsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        generate("doc.md", text, table_scripts())


def test_check_mode_exits_1_on_a_stale_doc(tmp_path, capsys, monkeypatch):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "x.md").write_text(DOC)
    (tmp_path / RESULTS).parent.mkdir(exist_ok=True)
    (tmp_path / RESULTS).symlink_to(ROOT / RESULTS)
    monkeypatch.setattr(make_docs, "ROOT", tmp_path)
    assert make_docs.main(["--check", "docs/x.md"]) == 1
    assert "+| wresnet-152-10 | 25 |" in capsys.readouterr().err
    assert make_docs.main(["docs/x.md"]) == 0
    assert make_docs.main(["--check", "docs/x.md"]) == 0
