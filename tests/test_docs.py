"""The README and docs/: links resolve, the README stays short, its results table is the generated one."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "tasks_zoo" / "README.md"]


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


def test_every_relative_link_resolves():
    missing = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            if not (page.parent / target).exists():
                missing.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not missing, missing


def test_readme_results_table_is_the_generated_one():
    """Each row of the README's short table appears, value for value, in docs/results.md's generated section."""
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Results"):readme.index("## Documentation")]
    generated = (ROOT / "docs" / "results.md").read_text()
    block = generated[generated.index("<!-- results:begin -->"):generated.index("<!-- results:end -->")]
    rows = [ln for ln in table.splitlines() if ln.startswith("| ") and "±" in ln]
    assert len(rows) >= 5
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        name = cells[0].split(" (")[0]
        assert f"| {name} | " + " | ".join(cells[1:5]) + " |" in block, row
        paper = cells[5]
        if paper != "–":
            assert re.search(rf"\| {re.escape(name)} \| [^|]+ \| {re.escape(paper)} ±", block), row
